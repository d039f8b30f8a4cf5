"""cocotb tests of the generated Verilog of :class:`hw.pe.fpu.SimdFpu` (top ``fpu``).

Run through :func:`tb.host.runner.run_cocotb` (``tests/test_fpu.py``, ``fdpu fpu-check``), which
passes ``tag_width`` in ``FDPU_PARAMS``.  Expected results come from :mod:`sw.spec.fp16` through
:mod:`tb.fpu.model`; tags number the operations, so a lost, duplicated or reordered result is
caught as well as a wrong one.

* ``stream_traffic``: all ops mixed, through the :mod:`tb.common.stream` source/sink/scoreboard,
  with idle and backpressure patterns changed each phase.
* ``edge_classes``: every pair of edge-class values as ``a`` and ``b`` (``c`` sweeps them as
  well), fma, random idle and backpressure, driven by :func:`tb.fpu.bulk.drive_bulk`.
* ``edge_classes_max``: the same pairs through MAX (IEEE 754-2019 ``maximum``: ``+-0``,
  subnormals, infinities, NaNs, equal operands).
* ``vectors``: the lanes in the ``.npz`` named by ``FDPU_FPU_VECTORS`` (keys ``op``, ``a``,
  ``b``, ``c``; lane count a multiple of 4), or 4000 random fma lanes without it; idle and
  backpressure probabilities from ``FDPU_FPU_IDLE`` / ``FDPU_FPU_STALL`` (default 0.1).  With
  ``FDPU_FPU_RESULTS`` set, the result lanes, tags and cycle count are written there
  (``.npz``) and the caller compares; otherwise the test compares and fails on a mismatch.
"""

import json
import os
import random
import time

import cocotb
import numpy as np

from hw.pe.fpu import FpOp, fpu_op_layout, fpu_res_layout
from sw.spec import fp16
from tb.common.clock import reset, start_clock
from tb.common.stream import Scoreboard, StreamSink, StreamSource
from tb.fpu import model
from tb.fpu.bulk import drive_bulk, payload_ints

_MASK64 = (1 << 64) - 1


class TB:
    """Clock, reset and payload packing around one SIMD-4 unit."""

    def __init__(self, dut):
        params = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.tag_width = params["tag_width"]
        self.op_layout = fpu_op_layout(self.tag_width)
        self.tag_offset = fpu_res_layout(self.tag_width)["tag"].offset
        self.rng = np.random.default_rng(cocotb.RANDOM_SEED)
        dut._log.info("seed %s (FDPU_SEED=%s), tag_width %d", cocotb.RANDOM_SEED,
                      os.environ.get("COCOTB_RANDOM_SEED"), self.tag_width)
        start_clock(dut.clk)

    async def start(self):
        self.dut.i_op__valid.value = 0
        self.dut.o_res__ready.value = 0
        await reset(self.dut.clk, self.dut.rst)

    def payloads(self, op, a, b, c):
        """Return payload ints (one per 4 lanes) and their tags for lane arrays of ``op``."""
        n = len(a) // 4
        tags = np.arange(n) % (1 << self.tag_width)
        words = [fp16.pack4(np.asarray(x, dtype=np.uint16).reshape(n, 4)) for x in (a, b, c)]
        opcode = getattr(FpOp, model.OPS[op]).value
        return payload_ints(self.op_layout, op=np.full(n, opcode), a=words[0], b=words[1],
                            c=words[2], tag=tags), tags

    def split(self, results):
        """Return (result lanes as (n, 4) uint16, tags) of result payload ints."""
        words = np.array([r & _MASK64 for r in results], dtype=np.uint64)
        tags = np.array([r >> self.tag_offset for r in results], dtype=np.int64)
        return fp16.unpack4(words).reshape(-1, 4), tags

    def check(self, op, lanes, results, tags):
        """Compare results with :mod:`sw.spec.fp16`; raise with the first mismatches."""
        got, got_tags = self.split(results)
        assert len(got) == len(tags), f"{len(got)} results for {len(tags)} operations"
        assert np.array_equal(got_tags, tags), (
            f"results lost, duplicated or reordered: first bad position "
            f"{int(np.argmax(got_tags != tags))}")
        expected = model.reference(op, *lanes).reshape(-1, 4)
        bad = np.argwhere(got != expected)
        if len(bad):
            lines = []
            for i, lane in bad[:5]:
                k = 4 * i + lane
                operands = " ".join(f"{x[k]:04x}" for x in lanes)
                lines.append(f"{op} {operands}: expected {expected[i, lane]:04x}, got "
                             f"{got[i, lane]:04x}")
            raise AssertionError(f"{len(bad)} of {expected.size} {op} lanes mismatch "
                                 f"(seed {cocotb.RANDOM_SEED}):\n" + "\n".join(lines))


def _zeros_like(a):
    return np.zeros_like(np.asarray(a, dtype=np.uint16))


@cocotb.test()
async def stream_traffic(dut):
    """All ops mixed, through stream source/sink with changing idle/backpressure phases."""
    tb = TB(dut)
    await tb.start()
    scoreboard = Scoreboard("o_res")
    source = StreamSource(dut, "i_op", dut.clk, rst=dut.rst)
    sink = StreamSink(dut, "o_res", dut.clk, callback=scoreboard.receive)
    rng = np.random.default_rng([cocotb.RANDOM_SEED, 1])
    total = 0
    for phase, (idle, stall) in enumerate([(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.3, 0.3)]):
        source.set_pause(idle, random.Random(int(rng.integers(1 << 30))))
        sink.set_pause(stall, random.Random(int(rng.integers(1 << 30))))
        for op in model.OPS:
            lanes = list(model.random_operands(op, 4 * 12, rng))
            while len(lanes) < 3:
                lanes.append(_zeros_like(lanes[0]))
            payloads, tags = tb.payloads(op, *lanes)
            expected = fp16.pack4(model.reference(op, *lanes[:model.ARITY[op]])
                                  .reshape(-1, 4))
            scoreboard.expect(*(int(w) | (int(t) << tb.tag_offset)
                                for w, t in zip(expected, tags)))
            source.send(*payloads)
            total += len(payloads)
        await source.wait_sent(max_cycles=40 * total)
        await sink.wait_count(total, max_cycles=40 * total)
        dut._log.info("phase %d (idle %.1f, backpressure %.1f): %d results checked", phase,
                      idle, stall, scoreboard.matched)
    scoreboard.check_done()
    assert scoreboard.matched == total


@cocotb.test()
async def edge_classes(dut):
    """Every pair of edge-class values as a and b (c sweeps them too), fma."""
    tb = TB(dut)
    await tb.start()
    edge = model.edge_values()
    a, b = (x.ravel() for x in np.meshgrid(edge, edge))
    c = np.resize(np.roll(edge, 5), len(a))
    n = len(a) // 4 * 4
    lanes = (a[:n], b[:n], c[:n])
    payloads, tags = tb.payloads("fma", *lanes)
    results, cycles = await drive_bulk(dut, payloads, rng=tb.rng, idle=0.2, stall=0.2)
    tb.check("fma", lanes, results, tags)
    dut._log.info("%d edge-class fma lanes checked in %d cycles", n, cycles)


@cocotb.test()
async def edge_classes_max(dut):
    """Every pair of edge-class values as a and b, max."""
    tb = TB(dut)
    await tb.start()
    edge = model.edge_values()
    a, b = (x.ravel() for x in np.meshgrid(edge, edge))
    n = len(a) // 4 * 4
    lanes = (a[:n], b[:n], _zeros_like(a[:n]))
    payloads, tags = tb.payloads("max", *lanes)
    results, cycles = await drive_bulk(dut, payloads, rng=tb.rng, idle=0.2, stall=0.2)
    tb.check("max", lanes[:2], results, tags)
    dut._log.info("%d edge-class max lanes checked in %d cycles", n, cycles)


@cocotb.test()
async def vectors(dut):
    """Vectors from FDPU_FPU_VECTORS (or random fma), bulk-driven; see the module doc."""
    tb = TB(dut)
    await tb.start()
    source = os.environ.get("FDPU_FPU_VECTORS")
    if source:
        with np.load(source) as data:
            op = str(data["op"])
            lanes = [data[k].astype(np.uint16) for k in ("a", "b", "c")]
    else:
        op = "fma"
        lanes = list(model.random_operands(op, 4000, tb.rng))
    arity = model.ARITY[op]
    while len(lanes) < 3:
        lanes.append(_zeros_like(lanes[0]))
    assert len(lanes[0]) % 4 == 0, "lane count must be a multiple of 4"
    idle = float(os.environ.get("FDPU_FPU_IDLE", "0.1"))
    stall = float(os.environ.get("FDPU_FPU_STALL", "0.1"))
    payloads, tags = tb.payloads(op, *lanes)
    started = time.monotonic()
    results, cycles = await drive_bulk(dut, payloads, rng=tb.rng, idle=idle, stall=stall)
    wall = time.monotonic() - started
    dut._log.info("%d %s lanes (%d ops) in %d cycles, %.2f s wall", len(lanes[0]), op,
                  len(payloads), cycles, wall)
    target = os.environ.get("FDPU_FPU_RESULTS")
    if target:
        got, got_tags = tb.split(results)
        np.savez(target, result=got.ravel(), tag=got_tags, sent_tag=tags, cycles=cycles,
                 wall=wall)
    else:
        tb.check(op, lanes[:arity], results, tags)
