"""cocotb bench of ``hw.ctrl.cbuf.Cbuf`` on the generated Verilog against a word-array model.

Phases of random writes (random 64-bit words to random addresses of every bank, the first
and last word of each bank among them, idle cycles between) alternate with phases of random
reads on every read port at once (each port in its own region, idle cycles between), never a
read in a write cycle (the contract: the host writes while the MicC is idle).  On every
cycle each port's ``rd_data`` must equal the word of its last read (from the cycle after the
read until the next one).  Nothing else is in the bench: the Cbuf's own rule is small, and
its data and address bits all toggle here (the system runs write configuration words, whose
unused fields stay 0).
"""

import json
import os
import random

import cocotb
from cocotb.triggers import FallingEdge

from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_words, word_bits
from tb.common.clock import reset, start_clock


class TB:
    """The Cbuf's ports, its model (``words``) and what each read port must show."""

    def __init__(self, dut):
        q = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.p = ArrayParams(rows=q["rows"], cols=q["cols"], cbufs=q["cbufs"],
                             cbuf_bytes=q["cbuf_bytes"])
        self.ports = q["ports"]
        self.depth = cbuf_words(self.p)
        self.total = self.depth * self.p.cbufs
        self.region = self.total // self.ports
        self.width = word_bits(self.p)
        self.words = [0] * self.total            # zero at time 0 (both bank kinds)
        self.shown = [None] * self.ports         # the word each port must show, once read
        self.pending = [None] * self.ports       # a read issued this cycle
        self.rng = random.Random(random.getrandbits(64))
        self.cycles = self.reads = self.writes = 0
        start_clock(dut.clk)

    def port(self, q, name):
        return getattr(self.dut, f"{name}_{q}" if q else name)

    async def start(self):
        await reset(self.dut.clk, self.dut.rst)
        await FallingEdge(self.dut.clk)

    def _check(self):
        for q in range(self.ports):
            if self.pending[q] is not None:
                self.shown[q], self.pending[q] = self.pending[q], None
            if self.shown[q] is None:
                continue
            got = int(self.port(q, "rd_data").value)
            addr, want = self.shown[q]
            assert got == want, (f"cycle {self.cycles}: read port {q} shows {got:#x}, word "
                                 f"{addr} holds {want:#x}")

    async def cycle(self, writes=None, reads=()):
        """Drive one cycle (a write ``(addr, data)`` or reads ``[(port, offset)]``), then
        check every port at the next falling edge."""
        d = self.dut
        d.wr_en.value = int(writes is not None)
        if writes is not None:
            addr, data = writes
            d.wr_addr.value, d.wr_data.value = addr, data
        for q in range(self.ports):
            self.port(q, "rd_en").value = 0
        for q, off in reads:
            self.port(q, "rd_en").value = 1
            self.port(q, "rd_addr").value = off
        await FallingEdge(d.clk)
        self.cycles += 1
        if writes is not None:
            self.words[writes[0]] = writes[1]
            self.writes += 1
        for q, off in reads:
            addr = q * self.region + off
            self.pending[q] = (addr, self.words[addr])
            self.reads += 1
        self._check()

    def random_address(self):
        roll = self.rng.random()
        bank = self.rng.randrange(self.p.cbufs)
        if roll < 0.1:
            return bank * self.depth
        if roll < 0.2:
            return bank * self.depth + self.depth - 1
        return self.rng.randrange(self.total)

    async def write_phase(self, count, idle=0.2):
        for _ in range(count):
            if self.rng.random() < idle:
                await self.cycle()
            await self.cycle(writes=(self.random_address(),
                                     self.rng.getrandbits(self.width)))

    async def read_phase(self, cycles, idle=0.3):
        for _ in range(cycles):
            reads = [(q, self.rng.randrange(self.region)) for q in range(self.ports)
                     if self.rng.random() >= idle]
            await self.cycle(reads=reads)


@cocotb.test()
async def random_writes_and_reads(dut):
    tb = TB(dut)
    await tb.start()
    # Every word written once (every data and address bit toggles), then rounds of both.
    for addr in range(tb.total):
        await tb.cycle(writes=(addr, tb.rng.getrandbits(tb.width)))
    await tb.read_phase(tb.total)
    for _ in range(6):
        await tb.write_phase(tb.rng.randrange(1, 3 * tb.p.cbufs + 2))
        await tb.read_phase(tb.rng.randrange(8, 64))
    # Ones over zeros and back: each data bit falls and rises under every read port.
    for pattern in ((1 << tb.width) - 1, 0, (1 << tb.width) - 1):
        for addr in range(0, tb.total, max(1, tb.region // 4)):
            await tb.cycle(writes=(addr, pattern ^ addr))
        await tb.read_phase(32, idle=0.0)
    dut._log.info(f"cbuf: {tb.writes} writes, {tb.reads} reads over {tb.ports} port(s), "
                  f"{tb.cycles} cycles: match")
