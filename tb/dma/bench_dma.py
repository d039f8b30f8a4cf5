"""cocotb test of the DMA on its rig (:mod:`tb.dma.rig`): random descriptor lists (multicast
and Dbuf to Dbuf MOVE ones among them) against a Python model of the external memory, the Dbufs
and the Cbufs, under random memory latency, bandwidth and stalls and random mesh backpressure;
external addresses carry random bits above the memory's size (it decodes the low
bits), so the DMA's address arithmetic runs on all 32 bits; bad descriptors end in
``BAD_DESC``; long descriptors stream at one STORE a cycle, long MOVEs
at ``2 + popcount(copies)`` cycles a word; an empty descriptor (a fence) counts in ``o_fences``
only when every Dbuf word of the descriptors before it is written (the Dbufs are compared
with the model in the cycle the count rises).

A descriptor here is ``(ext, local, length, flags)`` or ``(ext, local, length, flags, copies)``
(the fields of :func:`sw.spec.dma.pack_descriptor`; ``copies`` 0 when left out).

``FDPU_DMA_RIG``: JSON of the rig (``make_dma_rig`` keywords); ``FDPU_DMA_JOBS``: how many
random jobs.  The seed is cocotb's (``run_cocotb`` prints it; ``FDPU_SEED`` sets it).
"""

import json
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, Edge, First, ReadOnly, RisingEdge

from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_words, word_bits
from sw.spec.dma import (COPIES_BITS, DescFlag, copy_targets, edge_targets, pack_descriptor,
                         written_dbufs)
from sw.spec.status import DmaError
from tb.common.clock import reset, start_clock

OUT, CBUF, MOVE, MCAST = DescFlag.OUT, DescFlag.CBUF, DescFlag.MOVE, DescFlag.MCAST
SRC, DST, LISTS = 0, 4096, 8192          # external memory regions (bytes)


def _fields(desc):
    """Return ``(ext, local, length, flags, copies)`` of a descriptor tuple."""
    return tuple(desc) if len(desc) == 5 else (*desc, 0)


def _port(p):
    """Return the rig DMA's edge port (a Dbuf number): west of row 0."""
    return p.dbuf_at(-1, 0)


def _targets(p, desc):
    """Return the Dbufs a good IN or MOVE descriptor writes (multicast, edge multicast)."""
    ext, loc, n, flags, copies = _fields(desc)
    return written_dbufs(p, _port(p), p.dbuf_of(loc)[0], copies, bool(flags & MCAST))


def _stores(p, desc):
    """Return the requests a good descriptor sends besides its LOADs: one STORE per word and
    target Dbuf (IN, MOVE), or one MSTORE per word and target and an MLOAD per target (edge
    multicast)."""
    ext, loc, n, flags, copies = _fields(desc)
    if flags & (OUT | CBUF):
        return 0
    targets = len(copy_targets(p.dbuf_of(loc)[0], copies))
    if flags & MCAST:
        return (n // 8 + 1) * targets if n else 0
    return n // 8 * targets


def _int(handle):
    value = handle.value
    if not value.is_resolvable:
        raise AssertionError(f"{handle._path} holds unknown bits: {value}")
    return int(value)


class TB:
    """The DMA rig's environment: its Python model of the memories and the helpers of the tests."""

    def __init__(self, dut, rig):
        self.dut = dut
        self.p = ArrayParams(rows=rig["rows"], cols=rig["cols"], dbuf_bytes=rig["dbuf_bytes"],
                             cbufs=rig["cbufs"], cbuf_bytes=rig["cbuf_bytes"],
                             slots=64, operand_depth=4, int_issue=1)
        self.ext_bytes = rig["ext_bytes"]
        self.ext_words = rig["ext_bytes"] // 8
        self.dwords = self.p.dbuf_bytes // 8
        self.beats = word_bits(self.p) // 64
        self.cdepth = cbuf_words(self.p)
        self.ext = np.zeros(self.ext_words, dtype=np.uint64)
        self.dbuf = np.zeros(self.p.num_dbufs * self.dwords, dtype=np.uint64)
        self.cbuf = np.zeros(self.cdepth * self.p.cbufs * self.beats, dtype=np.uint64)

    async def start(self):
        """Start the clock, drive every control input idle (fast memory), reset."""
        dut = self.dut
        start_clock(dut.clk)
        for name in ("i_start", "i_list", "i_count", "i_req_stall", "i_mem_stall"):
            getattr(dut, name).value = 0
        dut.i_mem_latency.value, dut.i_mem_bw.value = 2, 64
        await reset(dut.clk, dut.rst)

    def sync(self):
        """Start the model from what the memories hold (an earlier test ran on them)."""
        dut = self.dut
        for k in range(self.p.num_dbufs):
            st = getattr(dut, f"dbuf{k}").sram.bank.storage
            for i in range(self.dwords):
                self.dbuf[k * self.dwords + i] = _int(st[i])
        for b in range(self.p.cbufs):
            st = getattr(dut.cbuf, f"bank{b}").bank.storage
            for i in range(self.cdepth):
                v = _int(st[i])
                for j in range(self.beats):
                    self.cbuf[(b * self.cdepth + i) * self.beats + j] = v >> (64 * j) & (
                        (1 << 64) - 1)
        st = dut.extmem.sram.bank.storage
        for i in range(DST // 8, LISTS // 8):
            self.ext[i] = _int(st[i])

    def poke_dbufs(self, rng):
        """Fill every Dbuf (and the model) with random words."""
        for k in range(self.p.num_dbufs):
            st = getattr(self.dut, f"dbuf{k}").sram.bank.storage
            for i in range(self.dwords):
                w = rng.getrandbits(64)
                self.dbuf[k * self.dwords + i] = w
                st[i].value = w

    def poke_ext(self, first, words):
        st = self.dut.extmem.sram.bank.storage
        for i, w in enumerate(words):
            self.ext[first + i] = w
            st[first + i].value = int(w)

    def alias(self, rng, ext):
        """Return external address ``ext`` with random bits above the memory's size half the
        time (the memory decodes the low bits: the same word), so that the DMA's address
        arithmetic runs on all 32 bits; a range never wraps past 2^32 (``ext`` + its length
        stay below the memory's size)."""
        if rng.random() < 0.5:
            return ext
        return ext + rng.randrange(1, (1 << 32) // self.ext_bytes) * self.ext_bytes

    def apply(self, desc):
        """Apply one good descriptor to the model (a multicast one to each of its Dbufs)."""
        ext, loc, n, flags, copies = _fields(desc)
        if not flags & MOVE:
            ext %= self.ext_bytes                # the memory decodes the low bits
        w = n // 8
        if flags & CBUF:
            self.cbuf[loc // 8:loc // 8 + w] = self.ext[ext // 8:ext // 8 + w]
        elif flags & OUT:
            self.ext[ext // 8:ext // 8 + w] = self.dbuf[loc // 8:loc // 8 + w]
        elif w:
            # IN: from external memory; MOVE: from the Dbufs (source and targets disjoint).
            src = (self.dbuf if flags & MOVE else self.ext)[ext // 8:ext // 8 + w].copy()
            off = self.p.dbuf_of(loc)[1]
            for k in _targets(self.p, desc):
                at = (k * self.p.dbuf_bytes + off) // 8
                self.dbuf[at:at + w] = src

    def dbuf_words(self):
        """Return every Dbuf word the rig holds now (one array, Dbuf after Dbuf)."""
        out = np.zeros_like(self.dbuf)
        for k in range(self.p.num_dbufs):
            st = getattr(self.dut, f"dbuf{k}").sram.bank.storage
            for i in range(self.dwords):
                out[k * self.dwords + i] = _int(st[i])
        return out

    async def watch_fences(self, snaps):
        """Append ``(fences, Dbuf words)`` to ``snaps`` in each cycle ``o_fences`` rises,
        until the DMA halts (woken by those two signals only, not every cycle)."""
        dut, last = self.dut, 0
        while True:
            await First(Edge(dut.o_fences), RisingEdge(dut.o_halt))
            await ReadOnly()
            f = _int(dut.o_fences)
            if f != last:
                snaps.append((f, self.dbuf_words()))
                last = f
            if _int(dut.o_halt):
                return

    async def run(self, descs, mem, bound=200_000, snaps=None, list_addr=LISTS):
        """Write the list, start the DMA, await halt; return (done, error, desc, bytes);
        ``snaps``: a list to collect :meth:`watch_fences`'s snapshots in; ``list_addr``: the
        list's address as the DMA is given it (its low bits are ``LISTS``)."""
        dut = self.dut
        words = []
        for desc in descs:
            words += pack_descriptor(*_fields(desc))
        self.poke_ext(LISTS // 8, words)
        dut.i_mem_latency.value, dut.i_mem_bw.value = mem["latency"], mem["bw"]
        dut.i_mem_stall.value, dut.i_req_stall.value = mem["stall"], mem["req_stall"]
        rd0, wr0 = _int(dut.o_rd_bytes), _int(dut.o_wr_bytes)
        assert list_addr % self.ext_bytes == LISTS
        dut.i_list.value, dut.i_count.value = list_addr, len(descs)
        dut.i_start.value = 1
        await RisingEdge(dut.clk)
        dut.i_start.value = 0
        if snaps is not None:
            cocotb.start_soon(self.watch_fences(snaps))
        waited = 0
        while True:
            await ClockCycles(dut.clk, 32)
            await ReadOnly()
            waited += 32
            if _int(dut.o_halt):
                break
            assert waited < bound, (
                f"timeout: the DMA did not halt within {bound} cycles (deadlock?): state "
                f"{_int(dut.o_state)}, descriptor {_int(dut.o_desc)} of {len(descs)}, memory "
                f"{mem}")
        result = (_int(dut.o_done), _int(dut.o_error), _int(dut.o_desc),
                  _int(dut.o_rd_bytes) - rd0, _int(dut.o_wr_bytes) - wr0, _int(dut.o_cycles))
        await RisingEdge(dut.clk)
        return result

    def check(self, label):
        """Compare every Dbuf and Cbuf word and the external output region with the model."""
        dut = self.dut
        for k in range(self.p.num_dbufs):
            st = getattr(dut, f"dbuf{k}").sram.bank.storage
            for i in range(self.dwords):
                got, want = _int(st[i]), int(self.dbuf[k * self.dwords + i])
                assert got == want, f"{label}: Dbuf {k} word {i} = {got:#x}, model {want:#x}"
        for b in range(self.p.cbufs):
            st = getattr(dut.cbuf, f"bank{b}").bank.storage
            for i in range(self.cdepth):
                base = (b * self.cdepth + i) * self.beats
                want = sum(int(self.cbuf[base + j]) << (64 * j) for j in range(self.beats))
                got = _int(st[i])
                assert got == want, f"{label}: Cbuf {b} word {i} = {got:#x}, model {want:#x}"
        st = dut.extmem.sram.bank.storage
        for i in range(DST // 8, LISTS // 8):
            got, want = _int(st[i]), int(self.ext[i])
            assert got == want, f"{label}: external word {i} = {got:#x}, model {want:#x}"


def _random_copies(rng, p, k):
    """Return a random non-zero ``copies`` mask of targets after Dbuf ``k`` that exist (0 when
    Dbuf ``k`` is the last)."""
    n = min(p.num_dbufs - 1 - k, COPIES_BITS)
    return rng.randrange(1, 1 << n) if n else 0


def _random_move(rng, tb):
    """Return a random MOVE: source and destination in different Dbufs, the copies (half the
    time) skipping the source Dbuf, so that no range overlaps another; now and then empty."""
    p = tb.p
    src = rng.randrange(p.num_dbufs)
    k = rng.choice([d for d in range(p.num_dbufs) if d != src])
    copies = _random_copies(rng, p, k) if rng.random() < 0.5 else 0
    if src > k:
        copies &= ~(1 << (src - k - 1))
    flags = MOVE
    if rng.random() < 0.4 and src not in written_dbufs(p, _port(p), k, copies, True):
        flags |= MCAST
    soff, doff = rng.randrange(tb.dwords), rng.randrange(tb.dwords)
    count = 0 if rng.random() < 0.05 else rng.randint(1, min(40, tb.dwords - max(soff, doff)))
    return (p.dbuf_base(src) + soff * 8, p.dbuf_base(k) + doff * 8, count * 8, flags, copies)


def _random_desc(rng, tb):
    kind = rng.choice(["in", "in", "multicast", "multicast", "cbuf", "out", "out", "zero",
                       "zero", "move", "move", "move", "edge", "edge"])
    p = tb.p
    if kind == "move":
        return _random_move(rng, tb)
    if kind == "cbuf":
        wb = tb.beats * 8
        total = tb.cdepth * p.cbufs
        first = rng.randrange(total)
        count = rng.randint(1, min(6, total - first))
        ext = rng.randrange(0, DST - count * wb, 8)
        return (ext, first * wb, count * wb, CBUF)
    k = rng.randrange(p.num_dbufs - (kind == "multicast"))
    off = rng.randrange(tb.dwords)
    count = 0 if kind == "zero" else rng.randint(1, min(40, tb.dwords - off))
    loc = p.dbuf_base(k) + off * 8
    if kind == "out":
        return (rng.randrange(DST, LISTS - count * 8 + 1, 8), loc, count * 8, OUT)
    if kind == "edge":
        # Half the time with copies: one MSTORE a word to each target's edge line.
        copies = _random_copies(rng, p, k) if rng.random() < 0.5 else 0
        return (rng.randrange(0, DST - count * 8 + 1, 8), loc, count * 8, MCAST, copies)
    copies = _random_copies(rng, p, k) if kind == "multicast" or rng.random() < 0.3 else 0
    return (rng.randrange(0, DST - count * 8 + 1, 8), loc, count * 8, 0, copies)


@cocotb.test()
async def random_jobs(dut):
    """Random descriptor lists under random latency, bandwidth and backpressure."""
    rig = json.loads(os.environ["FDPU_DMA_RIG"])
    rng = random.Random(cocotb.RANDOM_SEED)
    tb = TB(dut, rig)
    await tb.start()
    tb.poke_ext(0, [rng.getrandbits(64) for _ in range(DST // 8)])
    tb.poke_dbufs(rng)
    for job in range(int(os.environ.get("FDPU_DMA_JOBS", "6"))):
        mem = dict(latency=rng.choice([0, 2, 5, 17, 40]), bw=rng.choice([64, 64, 32, 8, 3]),
                   stall=rng.choice([0, 0, 64, 160]), req_stall=rng.choice([0, 0, 100, 200]))
        # Now and then a long list (descriptor counts past 32, fences past 16).
        n = rng.randint(1, 6) if job % 3 != 2 else rng.randint(33, 48)
        descs = [_random_desc(rng, tb) for _ in range(n)]
        # External addresses (and the list's) with random high bits half the time.
        descs = [d if d[3] & MOVE else (tb.alias(rng, d[0]), *d[1:]) for d in descs]
        snaps = []
        done, err, idx, rd, wr, cycles = await tb.run(descs, mem, snaps=snaps,
                                                      list_addr=tb.alias(rng, LISTS))
        assert done and not err and idx == len(descs), \
            f"job {job}: done {done}, error bits {err}, descriptor {idx} of {len(descs)}"
        fences = 0
        for i, d in enumerate(descs):
            if d[2] == 0:
                # A fence: every word of the descriptors before it is in its Dbuf.
                fences += 1
                assert len(snaps) >= fences and snaps[fences - 1][0] == fences, \
                    f"job {job}: fence {fences} (descriptor {i}) not counted: {len(snaps)}"
                bad = np.nonzero(snaps[fences - 1][1] != tb.dbuf)[0]
                assert not len(bad), \
                    f"job {job}: fence {fences} (descriptor {i}) counted with Dbuf word " \
                    f"{bad[0]} not yet written"
            tb.apply(d)
        assert len(snaps) == fences, f"job {job}: {len(snaps)} fence counts for {fences} fences"
        # A multicast word is read once, however many Dbufs it goes to; a MOVE reads and
        # writes no external byte (but its descriptor).
        want_rd = 16 * len(descs) + sum(d[2] for d in descs if not d[3] & (OUT | MOVE))
        want_wr = sum(d[2] for d in descs if d[3] & OUT)
        assert (rd, wr) == (want_rd, want_wr), \
            f"job {job}: external bytes read/written {rd}/{wr}, expected {want_rd}/{want_wr}"
        moved = sum(d[2] for d in descs) // 8
        stores = sum(_stores(tb.p, d) for d in descs)
        loads = sum(d[2] // 8 for d in descs if d[3] & (OUT | MOVE))
        moves = sum(1 for d in descs if d[3] & MOVE)
        cocotb.log.info(f"job {job}: {len(descs)} descriptors ({moves} MOVE), {moved} words, "
                        f"{stores} STOREs, {loads} LOADs, {cycles} cycles, memory {mem}")
        # At most one request (STORE or LOAD) a cycle; one external read a cycle at most.
        assert cycles >= max(stores + loads, want_rd // 8), \
            f"job {job}: {stores + loads} requests and {want_rd // 8} reads in {cycles} cycles"
        tb.check(f"job {job} ({mem})")


async def _quiet_rig(dut, salt):
    """Start the rig: clock, idle inputs, fast memory, reset, random external words."""
    rng = random.Random(cocotb.RANDOM_SEED + salt)
    tb = TB(dut, json.loads(os.environ["FDPU_DMA_RIG"]))
    await tb.start()
    tb.sync()
    tb.poke_ext(0, [rng.getrandbits(64) for _ in range(DST // 8)])
    return tb, rng


@cocotb.test()
async def bad_descriptors(dut):
    """Each bad descriptor stops the job with BAD_DESC after the good ones before it."""
    tb, rng = await _quiet_rig(dut, salt=1)
    p = tb.p
    wb = tb.beats * 8
    cap = tb.cdepth * p.cbufs * wb
    bad = {
        "misaligned external address": (4, p.dbuf_base(0), 16, 0),
        "misaligned local address": (0, p.dbuf_base(0) + 2, 16, 0),
        "length not a multiple of 8": (0, p.dbuf_base(0), 12, 0),
        "range crossing two Dbufs": (0, p.dbuf_base(1) - 8, 16, 0),
        "address past the last Dbuf": (0, p.memory_bytes, 8, 0),
        "OUT from the Cbufs": (DST, 0, wb, CBUF | OUT),
        "Cbuf range past the Cbufs": (0, cap - wb, 2 * wb, CBUF),
        "Cbuf offset not a whole word": (0, 8 if wb > 8 else 4, wb, CBUF),
        "range wrapping the address space": (0, (1 << 32) - 8, 16, 0),
        "copies with OUT": (DST, p.dbuf_base(0), 16, OUT, 1),
        "copies with CBUF": (0, 0, wb, CBUF, 1),
        "copy target past the last Dbuf": (0, p.dbuf_base(p.num_dbufs - 2), 16, 0, 0b10),
        "copy from the last Dbuf": (0, p.dbuf_base(p.num_dbufs - 1), 16, 0, 1),
        "empty descriptor with a copy past the last Dbuf": (0, p.dbuf_base(p.num_dbufs - 1), 0,
                                                             0, 1),
        "MOVE with OUT": (p.dbuf_base(0), p.dbuf_base(1), 16, MOVE | OUT),
        "MOVE with CBUF": (p.dbuf_base(0), 0, wb, MOVE | CBUF),
        "MOVE source crossing two Dbufs": (p.dbuf_base(1) - 8, p.dbuf_base(2), 16, MOVE),
        "MOVE source past the last Dbuf": (p.memory_bytes, p.dbuf_base(0), 8, MOVE),
        "MOVE source misaligned": (p.dbuf_base(0) + 4, p.dbuf_base(1), 16, MOVE),
        "MOVE source wrapping the address space": ((1 << 32) - 8, p.dbuf_base(0), 16, MOVE),
        "MOVE destination crossing two Dbufs": (p.dbuf_base(0), p.dbuf_base(2) - 8, 16, MOVE),
        "MOVE copy past the last Dbuf": (p.dbuf_base(0), p.dbuf_base(p.num_dbufs - 1), 16,
                                         MOVE, 1),
        "edge multicast with OUT": (DST, p.dbuf_base(0), 16, OUT | MCAST),
        "edge multicast with CBUF": (0, 0, wb, CBUF | MCAST),
        "edge multicast with a copy past the last Dbuf": (0, p.dbuf_base(p.num_dbufs - 1), 16,
                                                          MCAST, 1),
    }
    if p.num_dbufs <= COPIES_BITS:
        bad["top copy bit"] = (0, p.dbuf_base(0), 16, 0, 1 << COPIES_BITS - 1)
    for what, desc in bad.items():
        good = (rng.randrange(0, DST - 64, 8), p.dbuf_base(rng.randrange(p.num_dbufs)), 64, 0)
        done, err, idx, rd, wr, cycles = await tb.run([good, desc, good],
                                                     dict(latency=3, bw=64, stall=0,
                                                          req_stall=0), bound=20_000)
        assert not done and err == 1 << DmaError.BAD_DESC and idx == 1, \
            f"{what}: done {done}, error bits {err} (want BAD_DESC = 1), descriptor {idx}"
        tb.apply(good)
        tb.check(what)
    # Empty descriptors move nothing and are good wherever they point, also at the first word
    # of a Dbuf (whose last byte, loc - 1, is in the Dbuf before) and of the address space.
    for k in (0, 1, p.num_dbufs - 1):
        empty = (0, p.dbuf_base(k), 0, 0, _random_copies(rng, p, k))
        to = (k + 1) % p.num_dbufs
        move = (p.dbuf_base(k), p.dbuf_base(to), 0, MOVE, _random_copies(rng, p, to))
        done, err, idx, rd, wr, cycles = await tb.run([empty, (DST, p.dbuf_base(k), 0, OUT),
                                                       move],
                                                     dict(latency=3, bw=64, stall=0,
                                                          req_stall=0), bound=20_000)
        assert done and not err and idx == 3 and wr == 0, \
            f"empty descriptors at Dbuf {k}: done {done}, error bits {err}, descriptor {idx}"
    # A list that is not 16-aligned is refused before anything moves.
    dut.i_list.value, dut.i_count.value = LISTS + 8, 1
    dut.i_start.value = 1
    await RisingEdge(dut.clk)
    dut.i_start.value = 0
    await ClockCycles(dut.clk, 4)
    await ReadOnly()
    assert _int(dut.o_halt) and not _int(dut.o_done) \
        and _int(dut.o_error) == 1 << DmaError.BAD_DESC, \
        "a misaligned descriptor list must end in BAD_DESC"


async def _stream_bounded(tb, label, descs, latency, per_desc):
    """Run ``descs`` on the quiet rig at memory latency ``latency`` (full bandwidth, no stalls)
    and check their cycles against the words plus ``per_desc`` cycles a descriptor plus one
    round trip at the end, then every Dbuf and the external output region."""
    mem = dict(latency=latency, bw=64, stall=0, req_stall=0)
    done, err, idx, rd, wr, cycles = await tb.run(descs, mem)
    assert done and not err, f"{label}: done {done}, error bits {err}"
    for d in descs:
        tb.apply(d)
    words = sum(d[2] for d in descs) // 8
    bound = words + len(descs) * per_desc + 2 * latency + 40
    cocotb.log.info(f"{label} at latency {latency}: {len(descs)} descriptors, {words} words "
                    f"in {cycles} cycles ({cycles / words:.3f} a word, bound {bound})")
    assert cycles <= bound, (f"{label} at latency {latency}: {words} words in {cycles} "
                             f"cycles, more than {bound}")
    tb.check(f"{label} at latency {latency}")


@cocotb.test()
async def streaming(dut):
    """Long IN descriptors stream one word per cycle; each adds about the memory latency.

    The bound is the words plus, per descriptor, the latency and a few cycles (its fetch was
    issued during the previous descriptor, its STORE acks are not awaited), plus one round
    trip at the end: a DMA that waited for each descriptor's acks or fetched each descriptor
    after the previous one finished fails it.
    """
    tb, rng = await _quiet_rig(dut, salt=2)
    p = tb.p
    for latency in (2, 20, 40):
        descs = [(k * p.dbuf_bytes % DST, p.dbuf_base(k), p.dbuf_bytes, 0)
                 for k in range(p.num_dbufs)]
        await _stream_bounded(tb, "streaming", descs, latency, latency + 8)


@cocotb.test()
async def out_streaming(dut):
    """Long OUT descriptors (Dbuf to external memory) stream their LOADs and replies: about
    one cycle a word (the bound: the words plus, per descriptor, the latency and a round trip
    of its last LOAD, plus a few cycles)."""
    tb, rng = await _quiet_rig(dut, salt=5)
    p = tb.p
    tb.poke_dbufs(rng)
    for latency in (2, 20):
        descs = [(DST + k * p.dbuf_bytes % (LISTS - DST), p.dbuf_base(k), p.dbuf_bytes, OUT)
                 for k in range(p.num_dbufs)]
        await _stream_bounded(tb, "OUT streaming", descs, latency,
                              latency + 2 * (p.rows + p.cols) + 16)


@cocotb.test()
async def multicast_streaming(dut):
    """A long multicast descriptor sends one STORE a cycle: ``1 + popcount(copies)`` cycles a
    word, with no bubble between a word's targets or between words, its words read once."""
    tb, rng = await _quiet_rig(dut, salt=3)
    p = tb.p
    latency = 5
    mem = dict(latency=latency, bw=64, stall=0, req_stall=0)
    for first, copies in ((0, (1 << p.num_dbufs - 1) - 1), (1, 0b1), (0, 0b101)):
        copies &= (1 << p.num_dbufs - 1 - first) - 1
        desc = (rng.randrange(0, DST - p.dbuf_bytes + 1, 8), p.dbuf_base(first), p.dbuf_bytes,
                0, copies)
        done, err, idx, rd, wr, cycles = await tb.run([desc], mem)
        assert done and not err, f"multicast {copies:#b}: done {done}, error bits {err}"
        tb.apply(desc)
        words, targets = p.dbuf_bytes // 8, len(copy_targets(first, copies))
        assert rd == 16 + words * 8, \
            f"multicast {copies:#b}: {rd} bytes read, want {16 + words * 8} (each word once)"
        bound = words * targets + 2 * latency + 40
        cocotb.log.info(f"multicast from Dbuf {first} to {targets} Dbufs: {words} words in "
                        f"{cycles} cycles ({cycles / words:.3f} a word, bound {bound})")
        assert cycles <= bound, (f"multicast {copies:#b}: {words} words to {targets} Dbufs in "
                                 f"{cycles} cycles, more than {bound}")
        tb.check(f"multicast {copies:#b}")


@cocotb.test()
async def move_streaming(dut):
    """A long MOVE (a whole Dbuf, to 1 + popcount(copies) Dbufs) sends a LOAD and its STOREs a
    word on the one request port: about ``2 + popcount(copies)`` cycles a word, no external
    byte but its descriptor's; then an IN descriptor reading the moved words back out."""
    tb, rng = await _quiet_rig(dut, salt=4)
    p = tb.p
    tb.poke_dbufs(rng)
    mem = dict(latency=5, bw=64, stall=0, req_stall=0)
    src = p.num_dbufs - 1
    for copies in (0, 0b1, (1 << p.num_dbufs - 2) - 1):
        copies &= (1 << p.num_dbufs - 2) - 1             # targets 0 .. src - 1
        desc = (p.dbuf_base(src), p.dbuf_base(0), p.dbuf_bytes, MOVE, copies)
        done, err, idx, rd, wr, cycles = await tb.run([desc], mem)
        assert done and not err, f"MOVE {copies:#b}: done {done}, error bits {err}"
        tb.apply(desc)
        words, targets = p.dbuf_bytes // 8, len(copy_targets(0, copies))
        assert (rd, wr) == (16, 0), f"MOVE {copies:#b}: {rd} bytes read, {wr} written"
        bound = words * (1 + targets) + 60
        cocotb.log.info(f"MOVE of {words} words from Dbuf {src} to {targets} Dbufs: {cycles} "
                        f"cycles ({cycles / words:.3f} a word, bound {bound})")
        assert cycles <= bound, (f"MOVE {copies:#b}: {words} words to {targets} Dbufs in "
                                 f"{cycles} cycles, more than {bound}")
        tb.check(f"MOVE {copies:#b}")
    # Under backpressure and slow memory, a MOVE between IN and OUT descriptors of its Dbufs.
    mem = dict(latency=17, bw=8, stall=64, req_stall=200)
    descs = [(0, p.dbuf_base(1) + 64, 256, 0), (p.dbuf_base(1) + 64, p.dbuf_base(2) + 8, 256,
                                                  MOVE, 0b1),
             (DST, p.dbuf_base(3) + 8, 256, OUT), (DST + 256, p.dbuf_base(2) + 8, 256, OUT)]
    done, err, idx, rd, wr, cycles = await tb.run(descs, mem)
    assert done and not err and idx == len(descs), f"IN, MOVE, OUT: done {done}, error {err}"
    for d in descs:
        tb.apply(d)
    tb.check("IN, MOVE, OUT under backpressure")


@cocotb.test()
async def edge_multicast_streaming(dut):
    """A long edge-multicast descriptor sends one MSTORE a cycle however many Dbufs the mesh
    writes (about one cycle a word), each word read once; then an OUT descriptor of every
    target reads the words back (its LOADs see every copy: the MLOAD acknowledged them)."""
    tb, rng = await _quiet_rig(dut, salt=5)
    p = tb.p
    mem = dict(latency=5, bw=64, stall=0, req_stall=0)
    for first in range(p.num_dbufs):
        targets = edge_targets(p, _port(p), first)
        words = tb.dwords // 2
        off = rng.randrange(tb.dwords - words + 1) * 8
        desc = (rng.randrange(0, DST - words * 8 + 1, 8), p.dbuf_base(first) + off, words * 8,
                MCAST)
        outs = [(DST + 8 * i % (LISTS - DST - 8), p.dbuf_base(k) + off, 8, OUT)
                for i, k in enumerate(targets)]
        done, err, idx, rd, wr, cycles = await tb.run([desc], mem)
        assert done and not err, f"edge multicast to Dbuf {first}: done {done}, error {err}"
        tb.apply(desc)
        assert rd == 16 + words * 8, f"edge multicast: {rd} bytes read, want {16 + words * 8}"
        bound = words + 2 * 5 + 40
        cocotb.log.info(f"edge multicast from port {_port(p)} to Dbufs {targets}: {words} "
                        f"words in {cycles} cycles ({cycles / words:.3f} a word, bound {bound})")
        assert cycles <= bound, (f"edge multicast to {targets}: {words} words in {cycles} "
                                 f"cycles, more than {bound}")
        tb.check(f"edge multicast to Dbuf {first}")
        done, err, idx, rd, wr, cycles = await tb.run([desc] + outs,
                                                     dict(latency=2, bw=64, stall=0,
                                                          req_stall=120))
        assert done and not err, f"edge multicast then OUT: done {done}, error {err}"
        for d in [desc] + outs:
            tb.apply(d)
        tb.check(f"edge multicast to Dbuf {first}, then OUT")
