"""Tests of the SIMD-4 binary16 unit :mod:`hw.fpu`.

amaranth.sim checks (fast) of every op against :mod:`sw.fp16` with random idle cycles and
backpressure, of latency and throughput, and of the parameter checks; the cocotb layer runs
the generated Verilog on Icarus and Verilator (:mod:`tb.fpu`); the slow mode drives 10^6 fma
vectors through Verilator.
"""

import os

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.fpu import LATENCY, FpOp, SimdFpu
from hw.verilog import lint, to_verilog
from sw import fp16
from tb.fpu import model
from tb.fpu.check import mismatches, run_vectors
from tb.runner import run_cocotb
from tb.fpu.simdrive import run_pipeline

SEED = int(os.environ.get("FDPU_SEED", "20240604"))


def _payloads(op, lanes, tags):
    words = [fp16.pack4(np.asarray(x).reshape(-1, 4)) for x in lanes]
    while len(words) < 3:
        words.append(np.zeros_like(words[0]))
    fpop = getattr(FpOp, model.OPS[op])
    return [{"op": fpop, "a": int(a), "b": int(b), "c": int(c), "tag": int(t)}
            for a, b, c, t in zip(*words, tags)]


def _check(op, lanes, results, tags, tag_width):
    expected = model.reference(op, *lanes).reshape(-1, 4)
    assert len(results) == len(expected)
    got_tags = [r >> 64 for r in results]
    assert got_tags == [int(t) for t in tags], "results lost, duplicated or reordered"
    got = fp16.unpack4(np.array([r & ((1 << 64) - 1) for r in results], dtype=np.uint64))
    bad = np.nonzero((got != expected).any(axis=1))[0]
    if len(bad):
        i = bad[0]
        operands = ", ".join(f"{name}={[hex(v) for v in x.reshape(-1, 4)[i]]}"
                             for name, x in zip("abc", lanes))
        raise AssertionError(f"{len(bad)} mismatching ops; first #{i}: {operands} "
                             f"expected {[hex(v) for v in expected[i]]} "
                             f"got {[hex(v) for v in got[i]]} (seed {SEED})")


@pytest.mark.parametrize("op", ["fma", "mul", "add", "sub", "mov"])
def test_ops_random_backpressure(op):
    print(f"seed {SEED}")
    rng = np.random.default_rng([SEED, list(model.OPS).index(op)])
    n = 120
    lanes = model.random_operands(op, 4 * n, rng)
    tags = rng.integers(0, 1 << 6, n)
    dut = SimdFpu(tag_width=6)
    results = run_pipeline(dut, _payloads(op, lanes, tags), seed=SEED, idle=0.3, stall=0.4)
    _check(op, lanes, results, tags, 6)


def test_edge_classes_fma():
    # Every edge value meets every other as a and b; c sweeps the edge values as well.
    edge = model.edge_values()
    a, b = np.meshgrid(edge, edge)
    a, b = a.ravel(), b.ravel()
    c = np.resize(np.roll(edge, 7), len(a))
    n = len(a) // 4
    lanes = (a[:4 * n], b[:4 * n], c[:4 * n])
    tags = np.arange(n) % 256
    results = run_pipeline(SimdFpu(tag_width=8), _payloads("fma", lanes, tags), idle=0.0,
                           stall=0.0)
    _check("fma", lanes, results, tags, 8)


def test_latency_and_throughput():
    dut = SimdFpu(tag_width=4)
    n = 12
    seen = []

    async def bench(ctx):
        ctx.set(dut.o_res.ready, 1)
        ctx.set(dut.i_op.payload.op, FpOp.MOV)
        for cycle in range(n + LATENCY + 4):
            send = cycle < n
            ctx.set(dut.i_op.valid, send)
            ctx.set(dut.i_op.payload.tag, cycle % 16)
            ctx.set(dut.i_op.payload.a.as_value(), 0x1111 * cycle)
            assert ctx.get(dut.i_op.ready), f"unit not ready at cycle {cycle} without stall"
            _, _, valid, tag = await ctx.tick().sample(dut.o_res.valid, dut.o_res.payload.tag)
            if valid:
                seen.append((cycle, tag))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # Sampled at the edge after which cycle ``cycle`` ends: op k is valid LATENCY cycles on.
    assert seen == [(k + LATENCY, k) for k in range(n)]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_tag_width_checked(bad):
    with pytest.raises(TypeError, match=r"tag_width must be a positive integer, not "):
        SimdFpu(tag_width=bad)


@pytest.mark.parametrize("op", ["fma", "mul", "add", "sub"])
def test_reference_agrees_with_softfloat(op):
    # The RTL is checked against sw.fp16; sw.fp16 itself against Berkeley SoftFloat here.
    rng = np.random.default_rng([SEED, 99, len(op)])
    lanes = model.random_operands(op, 3000, rng)
    expected = model.softfloat_reference(op, *lanes)
    got = model.reference(op, *lanes)
    bad = np.nonzero(got != expected)[0]
    assert not len(bad), (f"sw.fp16 differs from SoftFloat in {len(bad)} of 3000 {op} cases, "
                          f"first {[hex(x[bad[0]]) for x in lanes]}: softfloat "
                          f"{hex(expected[bad[0]])}, sw.fp16 {hex(got[bad[0]])} (seed {SEED})")


@pytest.mark.parametrize("tag_width", [1, 8])
def test_verilog_lints_clean(tag_width):
    assert lint(to_verilog(SimdFpu(tag_width=tag_width), "fpu"), "fpu") == []


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_cocotb_fpu(sim):
    result = run_cocotb("fpu", {"tag_width": 8}, "tb.fpu.test_fpu", sim)
    assert result.tests == 3


@pytest.mark.slow
def test_million_fma_verilator():
    # 10^6 fma lanes (edge classes, cancellation, uniform bits) with light idle/backpressure.
    print(f"seed {SEED}")
    rng = np.random.default_rng([SEED, 10**6])
    lanes = model.random_operands("fma", 10**6, rng)
    run = run_vectors("fma", lanes, "verilator", idle=0.05, stall=0.05, seed=SEED)
    bad = mismatches(run.got, model.reference("fma", *lanes))
    print(f"10^6 fma lanes: {len(bad)} mismatches, {run.cycles} cycles, "
          f"{run.drive_s:.1f} s drive, {run.total_s:.1f} s total")
    assert not len(bad), (f"{len(bad)} mismatches; first: "
                          f"{[hex(x[bad[0]]) for x in lanes]} got {run.got[bad[0]]:#x}")
