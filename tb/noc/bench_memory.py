"""cocotb bench of :class:`tb.noc.memory.NocMemory`: memory traffic through the whole ``Noc``
and its Dbufs, mixed with PE-to-PE operands.

Every PE sends, in random order, LOADs and STOREs to every Dbuf (a few with foreign or
out-of-range addresses, which must come back with ``err``) and OPERANDs to every PE.  Each PE
owns a private slice of every Dbuf, so a reply depends only on that PE's own earlier requests
to that Dbuf, which arrive in order (XY routing): one :class:`sw.models.noc.DbufModel` per Dbuf
computes every reply when the request is sent.  A reply carries the Dbuf number in ``slot`` and
a sequence number in ``tag``; the scoreboard keeps one queue per (PE, Dbuf) for replies (in
order per requester for one Dbuf) and one per (source, destination) for operands (in order, no
corruption, no duplicate, none lost).  Every PE output gets random backpressure, every input
random idle cycles; ``o_stray`` and the edge reply outputs must stay silent.
"""

import json
import os
import random
from collections import deque

import cocotb

from sw.models.noc import DbufModel
from sw.spec.arch import ArrayParams
from sw.spec.packet import Kind, body_layout, pack_flit, unpack_flit
from tb.common.clock import reset, start_clock
from tb.common.stream import (StreamMonitor, StreamSink, StreamSource,
                              wait_cycles)

_MODELS = []


class TB:
    def __init__(self, dut, p_idle, p_stall):
        cfg = json.loads(os.environ["FDPU_MEM"])
        self.p = p = ArrayParams(rows=cfg["rows"], cols=cfg["cols"],
                                 dbuf_bytes=cfg["dbuf_bytes"], slots=64,
                                 operand_depth=4, int_issue=1)
        self.dut = dut
        self.rng = random.Random(random.getrandbits(64))
        # The banks keep their contents from one cocotb test to the next (same simulation).
        if not _MODELS:
            _MODELS.extend(DbufModel(p, k) for k in range(p.num_dbufs))
        self.models = _MODELS
        self.replies = {}          # (pe, dbuf) -> deque of expected REPLY flits
        self.operands = {}         # (src pe, dst pe) -> deque of expected OPERAND flits
        self.seq = {}
        self.received = 0
        self.expected = 0
        start_clock(dut.clk)
        self.sources = [StreamSource(dut, f"i_local__{n}", dut.clk, pause=p_idle, rng=self.rng,
                                     rst=dut.rst) for n in range(p.num_pes)]
        for n in range(p.num_pes):
            StreamSink(dut, f"o_local__{n}", dut.clk, pause=p_stall, rng=self.rng,
                       callback=self._receiver(n))
            StreamMonitor(dut, f"o_stray__{n}", dut.clk, callback=self._stray(f"o_stray[{n}]"))
            getattr(dut, f"o_stray__{n}__ready").value = 1
        for k in range(p.num_dbufs):
            StreamMonitor(dut, f"o_reply__{k}", dut.clk, callback=self._stray(f"o_reply[{k}]"))
            getattr(dut, f"o_reply__{k}__ready").value = 1

    def _stray(self, name):
        def receive(word):
            raise AssertionError(f"{name} carried flit {int(word):#x}; nothing should leave there")
        return receive

    def _receiver(self, n):
        p = self.p

        def receive(word):
            word = int(word)
            kind, dst, body = unpack_flit(p, word)
            assert dst == (n % p.cols, n // p.cols), f"flit {word:#x} for {dst} came out at PE {n}"
            if kind == Kind.REPLY:
                fields = body_layout(Kind.REPLY, p).unpack(body)
                key = (n, fields["slot"])
                what = f"reply from Dbuf {fields['slot']} to PE {n}"
                queue = self.replies.get(key)
            else:
                assert kind == Kind.OPERAND, f"PE {n} got a {kind.name} flit {word:#x}"
                src = body & 0xFF
                key = (src, n)
                what = f"operand from PE {src} to PE {n}"
                queue = self.operands.get(key)
            assert queue, f"{what}: {word:#x} with none outstanding (duplicate?)"
            want = queue.popleft()
            assert word == want, f"{what}: got {word:#x}, expected {want:#x} (reordered/corrupt)"
            self.received += 1
        return receive

    def address(self, n, k):
        """Return an address for PE ``n`` to Dbuf ``k``: its own slice, sometimes a bad one."""
        p, rng = self.p, self.rng
        roll = rng.random()
        if roll < 0.04:
            return ((k + 1) % p.num_dbufs) * p.dbuf_bytes          # another Dbuf's address
        if roll < 0.06:
            return p.memory_bytes + 8 * rng.randrange(64)          # past every Dbuf
        share = p.dbuf_bytes // p.num_pes // 8 * 8
        return k * p.dbuf_bytes + n * share + 8 * rng.randrange(share // 8)

    def memory(self, n, k):
        p, rng = self.p, self.rng
        kind = rng.choice([Kind.LOAD, Kind.STORE])
        seq = self.seq.get((n, k), 0)
        self.seq[(n, k)] = seq + 1
        size = rng.choice([1, 2, 3])
        addr = self.address(n, k) + (rng.randrange(8 >> size) << size)
        fields = dict(addr=addr, size=size, bcast=int(kind == Kind.LOAD and size == 1
                                                       and rng.random() < 0.3),
                      src_x=n % p.cols + 1, src_y=n // p.cols + 1, slot=k, tag=seq & 0xF)
        if kind == Kind.STORE:
            fields["data"] = rng.getrandbits(64)
        flit = pack_flit(p, kind, p.dbuf_coord(k), **fields)
        self.replies.setdefault((n, k), deque()).append(self.models[k].reply(flit))
        return flit

    def operand(self, n, dst):
        p = self.p
        seq = self.seq.get(("op", n, dst), 0)
        self.seq[("op", n, dst)] = seq + 1
        body = n | (seq & 0xFFFF) << 8 | self.rng.getrandbits(24) << 24
        flit = pack_flit(p, Kind.OPERAND, (dst % p.cols, dst // p.cols), body)
        self.operands.setdefault((n, dst), deque()).append(flit)
        return flit


async def run(dut, per_pe, p_idle, p_stall):
    tb = TB(dut, p_idle, p_stall)
    p = tb.p
    await reset(dut.clk, dut.rst)
    for n in range(p.num_pes):
        for _ in range(per_pe):
            if tb.rng.random() < 0.65:
                flit = tb.memory(n, tb.rng.randrange(p.num_dbufs))
            else:
                flit = tb.operand(n, tb.rng.randrange(p.num_pes))
            tb.sources[n].send(flit)
            tb.expected += 1

    def stuck():
        replies = {f"PE{n}<-Dbuf{k}": len(q) for (n, k), q in tb.replies.items() if q}
        operands = {f"PE{s}->PE{d}": len(q) for (s, d), q in tb.operands.items() if q}
        unsent = {n: s.pending for n, s in enumerate(tb.sources) if s.pending}
        return (f"received {tb.received} of {tb.expected}; replies outstanding {replies}; "
                f"operands outstanding {operands}; not yet injected per PE {unsent}")

    await wait_cycles(dut.clk, lambda: tb.received == tb.expected, 60 * per_pe + 2000, stuck)
    assert all(not q for q in tb.replies.values()), f"replies lost: {stuck()}"
    assert all(not q for q in tb.operands.values()), f"operands lost: {stuck()}"
    dut._log.info(f"{tb.expected} flits (memory requests and operands) checked")


@cocotb.test()
async def mixed_backpressure(dut):
    await run(dut, 70, 0.2, 0.4)


@cocotb.test()
async def mixed_full_rate_heavy_stall(dut):
    await run(dut, 50, None, 0.8)
