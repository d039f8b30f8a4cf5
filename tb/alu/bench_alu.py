"""cocotb tests of the generated Verilog of :class:`hw.pe.alu.IntAlu` (top ``alu``).

Run through :func:`tb.host.runner.run_cocotb` (``tests/test_alu.py``), which passes ``tag_width``
in ``FDPU_PARAMS``.  Expected results come from the integer model :mod:`tb.alu.model`; tags
number the operations so loss, duplication and reordering are caught.

* ``stream_traffic``: all ops, stream source/sink/scoreboard, changing idle/backpressure.
* ``bulk_random``: 6000 random operations of every op, bulk-driven
  (:func:`tb.fpu.bulk.drive_bulk`) with random idle and backpressure, compared in bulk.
"""

import json
import os
import random

import cocotb
import numpy as np

from hw.pe.alu import IntOp, alu_op_layout, alu_res_layout
from tb.alu import model
from tb.common.clock import reset, start_clock
from tb.common.stream import Scoreboard, StreamSink, StreamSource
from tb.fpu.bulk import drive_bulk, payload_ints


class TB:
    """Clock, reset and payload packing around one integer unit."""

    def __init__(self, dut):
        params = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.tag_width = params["tag_width"]
        self.op_layout = alu_op_layout(self.tag_width)
        self.tag_offset = alu_res_layout(self.tag_width)["tag"].offset
        self.rng = np.random.default_rng(cocotb.RANDOM_SEED)
        dut._log.info("seed %s, tag_width %d", cocotb.RANDOM_SEED, self.tag_width)
        start_clock(dut.clk)

    async def start(self):
        self.dut.i_op__valid.value = 0
        self.dut.o_res__ready.value = 0
        await reset(self.dut.clk, self.dut.rst)

    def operations(self, n):
        """Return (op indices, a, b, c, tags, payload ints, expected result payloads)."""
        ops = self.rng.integers(0, len(model.OPS), n)
        a, b, c = model.random_operands(n, self.rng)
        tags = np.arange(n) % (1 << self.tag_width)
        codes = np.array([IntOp[name].value for name in model.OPS])[ops]
        payloads = payload_ints(self.op_layout, op=codes, a=a, b=b, c=c, tag=tags)
        expected = np.zeros(n, dtype=np.uint64)
        for k, name in enumerate(model.OPS):
            sel = ops == k
            expected[sel] = model.reference(name, a[sel], b[sel], c[sel])
        words = [int(r) | (int(t) << self.tag_offset) for r, t in zip(expected, tags)]
        return ops, a, b, c, payloads, words


@cocotb.test()
async def stream_traffic(dut):
    """All ops, through stream source/sink with changing idle/backpressure phases."""
    tb = TB(dut)
    await tb.start()
    scoreboard = Scoreboard("o_res")
    source = StreamSource(dut, "i_op", dut.clk, rst=dut.rst)
    sink = StreamSink(dut, "o_res", dut.clk, callback=scoreboard.receive)
    total = 0
    for phase, (idle, stall) in enumerate([(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.3, 0.3)]):
        source.set_pause(idle, random.Random(int(tb.rng.integers(1 << 30))))
        sink.set_pause(stall, random.Random(int(tb.rng.integers(1 << 30))))
        *_, payloads, words = tb.operations(80)
        scoreboard.expect(*words)
        source.send(*payloads)
        total += len(payloads)
        await source.wait_sent(max_cycles=40 * total)
        await sink.wait_count(total, max_cycles=40 * total)
        dut._log.info("phase %d (idle %.1f, backpressure %.1f): %d results checked", phase,
                      idle, stall, scoreboard.matched)
    scoreboard.check_done()


@cocotb.test()
async def bulk_random(dut):
    """6000 random operations, bulk-driven with random idle and backpressure."""
    tb = TB(dut)
    await tb.start()
    n = 6000
    ops, a, b, c, payloads, words = tb.operations(n)
    results, cycles = await drive_bulk(dut, payloads, rng=tb.rng, idle=0.2, stall=0.2)
    assert len(results) == n
    bad = [i for i, (got, want) in enumerate(zip(results, words)) if got != want]
    if bad:
        mask = (1 << 32) - 1
        lines = [f"#{i} {model.OPS[ops[i]]}(a={int(a[i]):#x}, b={int(b[i]):#x}, "
                 f"c={int(c[i]):#x}): expected {words[i] & mask:#x} tag "
                 f"{words[i] >> tb.tag_offset}, got {results[i] & mask:#x} tag "
                 f"{results[i] >> tb.tag_offset}" for i in bad[:5]]
        raise AssertionError(f"{len(bad)} of {n} results wrong (seed {cocotb.RANDOM_SEED}):\n"
                             + "\n".join(lines))
    dut._log.info("%d operations checked in %d cycles", n, cycles)
