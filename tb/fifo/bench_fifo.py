"""cocotb tests of the generated Verilog of :class:`hw.lib.fifo.StreamFIFO`.

Run through :func:`tb.host.runner.run_cocotb` (``tests/test_fifo.py``), which provides the width
and depth in ``FDPU_PARAMS``. Every test checks, each cycle, ``level`` against a model fed by
the observed transfers, ``i_data.ready == (level != depth)`` and the stream rules on
``o_data``; the scoreboard checks every word arrives once, in order.
"""

import itertools
import json
import os
import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tb.common.clock import reset, start_clock
from tb.common.stream import (Scoreboard, StreamMonitor, StreamSink,
                              StreamSource, wait_cycles)


class TB:
    """Clock, reset, drivers, level model and scoreboard around one FIFO."""

    def __init__(self, dut, *, src_pause=None, sink_pause=None):
        params = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.width = params["width"]
        self.depth = params["depth"]
        assert len(dut.i_data__payload) == self.width
        self.rng = random.Random(random.getrandbits(64))
        dut._log.info("run seed %s (FDPU_SEED), test seed %d, width %d, depth %d",
                      os.environ.get("COCOTB_RANDOM_SEED"), cocotb.RANDOM_SEED, self.width,
                      self.depth)
        start_clock(dut.clk)
        self.scoreboard = Scoreboard("o_data")
        self.source = StreamSource(dut, "i_data", dut.clk, pause=src_pause, rng=self.rng,
                                   rst=dut.rst)
        self.sink = StreamSink(dut, "o_data", dut.clk, pause=sink_pause, rng=self.rng,
                               callback=self.scoreboard.receive)
        self.inputs = StreamMonitor(dut, "i_data", dut.clk, check_protocol=False)
        self.model_level = 0
        self.max_level = 0

    async def start(self):
        await reset(self.dut.clk, self.dut.rst)
        cocotb.start_soon(self._check_level())

    def random_words(self, count):
        return [self.rng.getrandbits(self.width) for _ in range(count)]

    def send(self, words):
        self.scoreboard.expect(*words)
        self.source.send(*words)

    async def _check_level(self):
        # Started right after the reset edge: sample this cycle first, then every cycle.
        dut = self.dut
        while True:
            await ReadOnly()
            level = dut.level.value.to_unsigned()
            assert level == self.model_level, \
                f"level is {level}, model says {self.model_level}"
            assert dut.i_data__ready.value == (level != self.depth), \
                f"i_data.ready is {dut.i_data__ready.value} with level {level} of {self.depth}"
            if dut.o_data__valid.value == 1:
                assert level > 0, "o_data.valid with level 0"
            self.max_level = max(self.max_level, level)
            w = dut.i_data__valid.value == 1 and dut.i_data__ready.value == 1
            r = dut.o_data__valid.value == 1 and dut.o_data__ready.value == 1
            self.model_level += int(w) - int(r)
            await RisingEdge(dut.clk)

    async def finish(self, max_cycles):
        await self.source.wait_sent(max_cycles)
        await wait_cycles(self.dut.clk, lambda: self.scoreboard.outstanding == 0, max_cycles,
                          lambda: f"deadlock: {self.scoreboard.outstanding} words never left "
                                  f"o_data (level {self.dut.level.value})")
        self.scoreboard.check_done()


@cocotb.test()
async def random_traffic(dut):
    """Random words, random idle cycles and random backpressure, changed every phase."""
    tb = TB(dut)
    await tb.start()
    for phase in range(4):
        src_p, sink_p = tb.rng.choice([0.0, 0.2, 0.5, 0.8]), tb.rng.choice([0.0, 0.2, 0.5, 0.8])
        dut._log.info("phase %d: idle %.1f, backpressure %.1f", phase, src_p, sink_p)
        tb.source.set_pause(src_p, tb.rng)
        tb.sink.set_pause(sink_p, tb.rng)
        tb.send(tb.random_words(60))
        await tb.finish(max_cycles=60 * 20 + 100)
    assert tb.scoreboard.matched == 240


@cocotb.test()
async def fill_then_drain(dut):
    """Fill to exactly ``depth`` against a stalled sink, then drain to empty."""
    tb = TB(dut, sink_pause=itertools.repeat(1))
    await tb.start()
    words = tb.random_words(tb.depth + 3)
    tb.send(words)
    await wait_cycles(dut.clk, lambda: tb.source.sent == tb.depth, 4 * tb.depth + 10,
                      lambda: f"timeout: FIFO took {tb.source.sent} words, expected {tb.depth}")
    for _ in range(10):  # full: nothing more goes in, nothing comes out
        await RisingEdge(dut.clk)
        await ReadOnly()
    assert tb.source.sent == tb.depth, f"accepted {tb.source.sent} words into {tb.depth}"
    assert dut.level.value.to_unsigned() == tb.depth
    assert dut.i_data__ready.value == 0
    assert dut.o_data__valid.value == 1
    assert tb.sink.count == 0
    tb.sink.set_pause(None)
    await tb.finish(max_cycles=10 * tb.depth + 20)
    for _ in range(3):
        await RisingEdge(dut.clk)
    await ReadOnly()
    assert dut.level.value.to_unsigned() == 0
    assert dut.o_data__valid.value == 0
    assert dut.i_data__ready.value == 1
    assert tb.max_level == tb.depth


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles and no backpressure the FIFO streams one word per cycle.

    Depth 1 moves a word every other cycle, depth 2 two in three (see hw/lib/fifo.py).
    """
    tb = TB(dut)
    await tb.start()
    count = 64
    tb.send(tb.random_words(count))
    first = tb.sink.cycle
    await tb.finish(max_cycles=4 * count + 20)
    cycles = tb.sink.last_transfer_cycle - first
    bound = {1: 2 * count, 2: 3 * count // 2}.get(tb.depth, count) + 4
    dut._log.info("%d words in %d cycles", count, cycles)
    assert cycles <= bound, f"{count} words took {cycles} cycles, expected at most {bound}"


@cocotb.test()
async def cyclic_patterns(dut):
    """Deterministic pause patterns: a source idle 3 cycles of 4, a sink ready every other."""
    tb = TB(dut, src_pause=itertools.cycle([1, 1, 1, 0]), sink_pause=itertools.cycle([0, 1]))
    await tb.start()
    tb.send(tb.random_words(40))
    await tb.finish(max_cycles=40 * 8 + 50)
    tb.source.set_pause(None)
    tb.sink.set_pause(itertools.cycle([1, 1, 1, 0]))
    tb.send(tb.random_words(40))
    await tb.finish(max_cycles=40 * 8 + 50)
    assert tb.max_level == tb.depth, "a slow sink must fill the FIFO"
