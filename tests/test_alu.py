"""Tests of the 32-bit integer unit :mod:`hw.pe.alu` (amaranth.sim; cocotb in :mod:`tb.alu`)."""

import os

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.pe.alu import LATENCY, IntAlu, IntOp
from hw.tooling.verilog import lint, to_verilog
from tb.alu import model
from tb.fpu.simdrive import run_pipeline
from tb.host.runner import run_cocotb
from sw.spec.system import SIMULATORS

SEED = int(os.environ.get("FDPU_SEED", "20240604"))


def test_model_examples():
    # The model itself, on cases worked by hand.
    assert model.reference("SUB", 1, 2, 0) == 0xFFFF_FFFF
    assert model.reference("MUL", 0xFFFF_FFFF, 0xFFFF_FFFF, 0) == 1
    assert model.reference("MADD", 0x10000, 0x10000, 7) == 7
    assert model.reference("SRA", 0x8000_0000, 31, 0) == 0xFFFF_FFFF
    assert model.reference("SRA", 0x4000_0000, 33, 0) == 0x2000_0000
    assert model.reference("SHR", 0x8000_0000, 31, 0) == 1
    assert model.reference("LT", 0xFFFF_FFFF, 0, 0) == 1
    assert model.reference("LTU", 0xFFFF_FFFF, 0, 0) == 0


def test_all_ops_random_backpressure():
    print(f"seed {SEED}")
    rng = np.random.default_rng([SEED, 2])
    per_op = 40
    ops = np.repeat(np.arange(len(model.OPS)), per_op)
    rng.shuffle(ops)
    a, b, c = model.random_operands(len(ops), rng)
    tags = np.arange(len(ops)) % 128
    payloads = [{"op": IntOp[model.OPS[o]], "a": int(x), "b": int(y), "c": int(z),
                 "tag": int(t)} for o, x, y, z, t in zip(ops, a, b, c, tags)]
    results = run_pipeline(IntAlu(tag_width=7), payloads, seed=SEED, idle=0.3, stall=0.4)
    assert [r >> 32 for r in results] == list(tags), "results lost, duplicated or reordered"
    for i, (o, r) in enumerate(zip(ops, results)):
        name = model.OPS[o]
        expected = int(model.reference(name, a[i], b[i], c[i]))
        assert r & 0xFFFF_FFFF == expected, (
            f"{name}(a={int(a[i]):#x}, b={int(b[i]):#x}, c={int(c[i]):#x}): expected "
            f"{expected:#x}, got {r & 0xFFFF_FFFF:#x} (seed {SEED})")


def test_latency_and_throughput():
    dut = IntAlu(tag_width=4)
    n = 10
    seen = []

    async def bench(ctx):
        ctx.set(dut.o_res.ready, 1)
        ctx.set(dut.i_op.payload.op, IntOp.ADD)
        for cycle in range(n + LATENCY + 3):
            ctx.set(dut.i_op.valid, cycle < n)
            ctx.set(dut.i_op.payload.a, cycle)
            ctx.set(dut.i_op.payload.b, 100)
            ctx.set(dut.i_op.payload.tag, cycle % 16)
            assert ctx.get(dut.i_op.ready), f"unit not ready at cycle {cycle} without stall"
            _, _, valid, res = await ctx.tick().sample(dut.o_res.valid, dut.o_res.payload)
            if valid:
                seen.append((cycle, res.tag, res.result))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(k + LATENCY, k, k + 100) for k in range(n)]


@pytest.mark.parametrize("bad", [0, -3, 1.0, None])
def test_tag_width_checked(bad):
    with pytest.raises(TypeError, match=r"tag_width must be a positive integer, not "):
        IntAlu(tag_width=bad)


@pytest.mark.parametrize("tag_width", [1, 8])
def test_verilog_lints_clean(tag_width):
    assert lint(to_verilog(IntAlu(tag_width=tag_width), "alu"), "alu") == []


@pytest.mark.parametrize("sim", SIMULATORS)
def test_cocotb_alu(sim):
    result = run_cocotb("alu", {"tag_width": 8}, "tb.alu.bench_alu", sim)
    assert result.tests == 2
