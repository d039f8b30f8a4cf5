"""cocotb bench of ``hw.noc.mesh.Mesh``: every PE and every edge port injects and ejects.

Each flit carries (source port, sequence number, random bits) in its body.  The scoreboard
keeps one queue per (source, destination): a flit must come out of the port of its
destination, equal to the oldest outstanding flit of that pair (no corruption, no duplicate,
order per pair), and every queue must be empty at the end (no loss).  Ejection ports get
random backpressure, injection ports random idle cycles.  ``FDPU_PATTERN`` selects the
pattern (default: each test picks its own).
"""

import json
import os
import random
from collections import deque

import cocotb

from sw.models.noc import pattern_dest
from sw.spec.arch import ArrayParams
from sw.spec.packet import MULTICAST, Kind, pack_flit, unpack_flit
from tb.common.clock import reset, start_clock
from tb.common.stream import StreamSink, StreamSource, wait_cycles


class TB:
    def __init__(self, dut, p_idle=0.3, p_stall=0.3):
        params = json.loads(os.environ["FDPU_PARAMS"])
        self.params = ArrayParams(rows=params["rows"], cols=params["cols"])
        self.width = params["width"] or None
        self.rng = random.Random(random.getrandbits(64))
        start_clock(dut.clk)
        self.dut = dut
        p = self.params
        self.ports = [("local", n) for n in range(p.num_pes)] + \
            [("edge", k) for k in range(p.num_dbufs)]
        self.sources, self.queues = {}, {}
        self.received = 0
        for kind, n in self.ports:
            self.sources[(kind, n)] = StreamSource(dut, f"i_{kind}__{n}", dut.clk,
                                                   pause=p_idle, rng=self.rng, rst=dut.rst)
            StreamSink(dut, f"o_{kind}__{n}", dut.clk, pause=p_stall, rng=self.rng,
                       callback=self._receiver((kind, n)))

    def coord(self, port):
        kind, n = port
        p = self.params
        return (n % p.cols, n // p.cols) if kind == "local" else p.dbuf_coord(n)

    def port_of(self, coord):
        p = self.params
        x, y = coord
        if 0 <= x < p.cols and 0 <= y < p.rows:
            return ("local", y * p.cols + x)
        return ("edge", p.dbuf_at(x, y))

    def _receiver(self, port):
        def receive(word):
            word = int(word)
            _, dst, body = unpack_flit(self.params, word)
            src = self.ports[body & 0xFF]
            here = self.coord(port)
            queue = self.queues.get((src, here))
            assert queue, (f"flit {word:#x} from {src} to {dst} came out of {port}: none "
                           f"outstanding there (misrouted or duplicate)")
            expected = queue.popleft()
            assert word == expected, (f"flit from {src} at {here}: got {word:#x}, expected "
                                      f"{expected:#x} (reordered or corrupted)")
            self.received += 1
        return receive

    def router_of(self, port):
        """Return the router a port injects into."""
        p = self.params
        x, y = self.coord(port)
        return min(max(x, 0), p.cols - 1), min(max(y, 0), p.rows - 1)

    def send(self, src, dst, kind=Kind.OPERAND):
        """Send a flit of ``kind``; return how many ports it comes out of (an edge-multicast
        kind: every Dbuf of ``multicast_dbufs``)."""
        seq = getattr(self, "_seq", 0)
        self._seq = seq + 1
        body = self.ports.index(src) | (seq & 0xFFFF) << 8 | self.rng.getrandbits(16) << 24
        word = pack_flit(self.params, kind, dst, body, width=self.width)
        p = self.params
        targets = [dst] if kind not in MULTICAST else \
            [p.dbuf_coord(k) for k in p.multicast_dbufs(self.router_of(src), dst)]
        for t in targets:
            self.queues.setdefault((src, t), deque()).append(word)
        self.sources[src].send(word)
        return len(targets)

    async def drain(self, total, max_cycles):
        def stuck():
            left = {f"{s}->{d}": len(q) for (s, d), q in self.queues.items() if q}
            return f"received {self.received} of {total}; outstanding per (source, dest): {left}"
        await wait_cycles(self.dut.clk, lambda: self.received == total, max_cycles,
                          stuck())
        left = {k: len(q) for k, q in self.queues.items() if q}
        assert not left, f"flits lost: {left}"


async def run_pattern(dut, pattern, per_source, p_idle=0.3, p_stall=0.3, edges=True):
    tb = TB(dut, p_idle, p_stall)
    await reset(dut.clk, dut.rst)
    p = tb.params
    total = 0
    pattern = os.environ.get("FDPU_PATTERN", pattern)
    for _ in range(per_source):
        for port in tb.ports:
            if port[0] == "edge":
                if not edges:
                    continue
                # Edge ports (Dbufs) send to PEs and to other edge ports.
                dst = (tb.rng.randrange(p.cols), tb.rng.randrange(p.rows))
                if tb.rng.random() < 0.3:
                    dst = p.dbuf_coord(tb.rng.randrange(p.num_dbufs))
            else:
                x, y = tb.coord(port)
                if edges and tb.rng.random() < 0.2:
                    dst = p.dbuf_coord(tb.rng.randrange(p.num_dbufs))
                else:
                    dst = pattern_dest(pattern, p, x, y, tb.rng)
            tb.send(port, dst)
            total += 1
    await tb.drain(total, max_cycles=200 * per_source + 2000)
    dut._log.info(f"{pattern}: {total} flits delivered, checked")


@cocotb.test()
async def uniform_with_edges(dut):
    await run_pattern(dut, "uniform", 30)


@cocotb.test()
async def bitcomp(dut):
    await run_pattern(dut, "bitcomp", 20, edges=False)


@cocotb.test()
async def transpose(dut):
    params = json.loads(os.environ["FDPU_PARAMS"])
    pattern = "transpose" if params["rows"] == params["cols"] else "neighbor"
    await run_pattern(dut, pattern, 20, edges=False)


@cocotb.test()
async def hotspot_heavy_backpressure(dut):
    await run_pattern(dut, "hotspot", 20, p_idle=0.0, p_stall=0.7)


@cocotb.test()
async def neighbor_full_rate(dut):
    await run_pattern(dut, "neighbor", 30, p_idle=0.0, p_stall=0.0)


@cocotb.test()
async def edge_multicast(dut):
    """Edge-multicast flits (MSTORE, MLOAD) from every port to random Dbufs, among unicast
    traffic: each copy comes out of every Dbuf its route passes on the target's edge, in
    order per (source, Dbuf), none elsewhere."""
    tb = TB(dut, 0.3, 0.3)
    await reset(dut.clk, dut.rst)
    p = tb.params
    total = 0
    for _ in range(15):
        for port in tb.ports:
            dst = p.dbuf_coord(tb.rng.randrange(p.num_dbufs))
            kind = tb.rng.choice([Kind.MSTORE, Kind.MLOAD, Kind.OPERAND])
            if kind is Kind.OPERAND and tb.rng.random() < 0.5:
                dst = (tb.rng.randrange(p.cols), tb.rng.randrange(p.rows))
            total += tb.send(port, dst, kind)
    await tb.drain(total, max_cycles=200 * 15 + 4000)
    dut._log.info(f"edge multicast: {total} flits delivered, checked")
