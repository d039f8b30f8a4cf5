"""Tests of ``fdpu run --sim golden``, ``fdpu asm`` and ``fdpu disasm`` through
:func:`sw.cli`: results, files, JSON, engines, Fig. 7, and one-line errors (exit 2)."""

import json

import numpy as np
import pytest
from cliutil import assert_user_error, run

import sw.cli
from sw.cli import rtl
from sw.models.golden_fc import EXACT_LIMIT
from sw.models.golden_fc import exact_for as golden_exact
from sw.compiler import layers, planner
from sw.models import reference
from sw.spec.arch import ArrayParams

SMALL = ("--rows", 2, "--cols", 2)


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_run_small_layer_exact(tmp_path, capsys, mode):
    status, out, _ = run(capsys, "run", "--in-features", 40, "--out-features", 6, "--batch", 5,
                         "--density", 0.4, "--mode", mode, *SMALL, "--engine", "exact",
                         "--out", tmp_path / "y.npy", "--json", tmp_path / "r.json")
    assert status == 0
    assert "match (error bound holds)" in out and "yes" in out
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["match"] is True and rec["engine"] == "exact" and rec["mode"] == mode
    assert rec["counters"]["ops"]["FACC"] > 0 and rec["counters"]["bytes_read"] > 0
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (5, 6) and y.dtype == np.float16
    w = layers.make_weights((6, 40), 0.4, 0)
    x = layers.make_inputs(40, 5, 0)
    assert reference.check(y, w, x).holds


def test_user_files_and_fast_engine_agree_with_exact(tmp_path, capsys):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 50)).astype(np.float32)
    x = rng.standard_normal((3, 50)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for engine in ("exact", "fast"):
        status, _, _ = run(capsys, "run", "--weights", tmp_path / "w.npy", "--inputs",
                           tmp_path / "x.npy", *SMALL, "--engine", engine, "--out",
                           tmp_path / f"{engine}.npy", "--json", tmp_path / f"{engine}.json")
        assert status == 0
        outs[engine] = json.loads((tmp_path / f"{engine}.json").read_text())
    assert np.array_equal(np.load(tmp_path / "exact.npy").view(np.uint16),
                          np.load(tmp_path / "fast.npy").view(np.uint16))
    assert outs["exact"]["counters"] == outs["fast"]["counters"]


def test_zoo_layer_fast(capsys, tmp_path):
    status, out, _ = run(capsys, "run", "--layer", "alexnet-fc8", "--density", 0.05,
                         "--batch", 1, "--json", tmp_path / "r.json")
    assert status == 0
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["engine"] == "fast" and rec["K"] == 1000 and rec["C"] == 4096 and rec["match"]


def test_fig7_from_the_cli(capsys):
    assert_user_error(capsys, "run", "--in-features", 32, "--out-features", 2, "--batch", 4,
                      "--density", 0.5, "--rows", 1, "--cols", 1, "--engine", "exact",
                      "--sparse-graph", "switch", "--no-feedback", "--order-seed", 1,
                      match="context-order error")


@pytest.mark.parametrize("argv, match", [
    (("--layer", "alexnet-fc9"), "unknown layer 'alexnet-fc9'"),
    (("--layer", "alexnet-fc8", "--density", "1.5"), "--density must be in [0, 1]"),
    (("--layer", "alexnet-fc8", "--density", "-0.1"), "--density must be in [0, 1]"),
    (("--layer", "alexnet-fc8", "--batch", 0), "--batch must be at least 1"),
    (("--in-features", 10), "--in-features and --out-features go together"),
    (("--in-features", 0, "--out-features", 3), "--in-features must be a positive integer"),
    ((), "give exactly one of --layer"),
    (("--layer", "alexnet-fc8", "--in-features", 3), "give exactly one of --layer"),
    (("--in-features", 10, "--out-features", 3, "--sim", "icarus", "--engine", "exact"),
     "--engine applies to --sim golden only"),
    (("--in-features", 10, "--out-features", 3, "--sim", "verilator", "--slots", 3),
     "slots must be a power of two"),
    (("--in-features", 10, "--out-features", 3, "--rows", 0), "--rows must be an integer"),
    (("--in-features", 10, "--out-features", 3, "--dbuf-bytes", 2**28),
     "--rows/--cols/--dbuf-bytes: 32 Dbufs of 268435456 bytes exceed the 32-bit address"),
    (("--in-features", 10, "--out-features", 3, "--order-seed", -5),
     "--order-seed must be a non-negative integer, got -5"),
    (("--in-features", 10, "--out-features", 3, "--json", "/proc/r.json"),
     "--json /proc/r.json: cannot create a file in /proc"),
    (("--in-features", 70000, "--out-features", 2, "--density", 0.01),
     "in_features C = 70,000 exceeds 65,535 (one ITER/FACC count per row)"),
    (("--in-features", 60000, "--out-features", 100000),
     "weights K x C = 100,000 x 60,000 = 6,000,000,000 values exceeds 268,435,456"),
    (("--in-features", 64, "--out-features", 4, "--batch", 10000000),
     "batch N = 10,000,000 exceeds 262,144"),
    (("--layer", "alexnet-fc6", "--batch", 50000),
     "inputs N x C = 50,000 x 9,216 = 460,800,000 values exceeds"),
    (("--in-features", 10, "--out-features", 3, "--mode", "dense", "--no-feedback"),
     "--no-feedback applies to --mode sparse only"),
    (("--in-features", 10, "--out-features", 3, "--slots", 8), "no blocking of the"),
    (("--in-features", 10, "--out-features", 3, "--mode", "dense", "--sparse-graph", "gather",
      "--wfan", 16), "--sparse-graph, --wfan apply to --mode sparse only"),
    (("--in-features", 10, "--out-features", 3, "--sparse-graph", "gather", "--no-feedback"),
     "--no-feedback drops the SWITCH graph's feedback edges: it needs --sparse-graph switch"),
    (("--in-features", 10, "--out-features", 3, "--no-feedback"),
     "needs --sparse-graph switch (the gather graph, the default, has no SWITCH)"),
    (("--in-features", 10, "--out-features", 3, "--kb", 0),
     "--kb must be an integer in 1..3 (out_features 3), got 0"),
    (("--in-features", 32, "--out-features", 16, "--gb", 100000),
     "--gb must be an integer in 1..1 (the 1 lane groups of batch 1), got 100000"),
    (("--in-features", 10, "--out-features", 3, "--golden", "fast"),
     "--golden chooses the reference of an RTL run"),
    (("--in-features", 10, "--out-features", 3, "--engine", "fast", "--order-seed", 3),
     "--order-seed seeds the exact engine's delivery order; it has no effect with --engine "
     "fast"),
    (("--layer", "alexnet-fc8", "--order-seed", 3), "which takes the fast path for this layer"),
    (("--in-features", 10, "--out-features", 3, "--sim", "icarus", "--max-cycles", 0),
     "--max-cycles must be a positive number of cycles per pass, got 0"),
    (("--in-features", 10, "--out-features", 3, "--max-cycles", 5, "--waves"),
     "--max-cycles, --waves apply to an RTL simulation (--sim icarus|verilator), not to --sim "
     "golden"),
    (("--in-features", 10, "--out-features", 3, "--dma-channels", 0),
     "--dma-channels must be in 1..32"),
    (("--in-features", 10, "--out-features", 3, "--mem-bandwidth", "nan"),
     "--mem-bandwidth must be a multiple of 1/8"),
    (("--in-features", 10, "--out-features", 3, "--config-ports", 9),
     "--config-ports must be 1, 2 or 4"),
    (("--in-features", 10, "--out-features", 3, "--mem-latency", -5),
     "--mem-latency must be in 0 .. 65535"),
])
def test_bad_input(capsys, argv, match):
    assert_user_error(capsys, "run", *argv, match=match)


def test_rtl_simulators_delegate_to_fdpu_rtl(monkeypatch):
    # `fdpu run --sim icarus|verilator` is the same run as `fdpu rtl` (tests/test_top.py runs
    # that on the RTL); here only the hand-over is checked, without building the top.
    seen = []
    monkeypatch.setattr(rtl, "run_rtl_command", lambda args: seen.append(args) or 0)
    assert sw.cli.main(["run", "--sim", "icarus", "--in-features", "16", "--out-features", "2",
                 "--rows", "1", "--cols", "1", "--slots", "32"]) == 0
    assert seen and seen[0].sim == "icarus" and seen[0].slots == 32


def test_bad_files(tmp_path, capsys):
    np.save(tmp_path / "w.npy", np.ones((4, 10), dtype=np.float32))
    np.save(tmp_path / "x.npy", np.ones((2, 11), dtype=np.float32))
    assert_user_error(capsys, "run", "--weights", tmp_path / "w.npy", "--inputs",
                      tmp_path / "x.npy", match="inputs have 11 columns")
    np.save(tmp_path / "x2.npy", np.ones((2, 10), dtype=np.float32))
    assert_user_error(capsys, "run", "--weights", tmp_path / "w.npy", "--inputs",
                      tmp_path / "x2.npy", "--batch", 3, match="--batch 3 disagrees")
    assert_user_error(capsys, "run", "--weights", tmp_path / "missing.npy",
                      match="missing.npy")


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_bias_and_relu(tmp_path, capsys, mode):
    # --bias and --relu: the result is relu(acc + b) with acc the run without them (the
    # golden model's own bits), and it is checked against the float64 reference.
    b = np.linspace(-3, 3, 6).astype(np.float32)
    np.save(tmp_path / "b.npy", b)
    args = ("run", "--in-features", 40, "--out-features", 6, "--batch", 5, "--density", 0.4,
            "--mode", mode, *SMALL)
    status, _, _ = run(capsys, *args, "--out", tmp_path / "acc.npy")
    assert status == 0
    status, out, _ = run(capsys, *args, "--bias", tmp_path / "b.npy", "--relu", "--out",
                         tmp_path / "y.npy", "--json", tmp_path / "r.json")
    assert status == 0 and "match (error bound holds)" in out
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["plan"]["bias"] is True and rec["plan"]["relu"] is True
    assert rec["counters"]["ops"]["FMAX"] == rec["counters"]["ops"]["FADD"] > 0
    acc = np.load(tmp_path / "acc.npy")
    y = np.load(tmp_path / "y.npy")
    want = np.maximum(acc.astype(np.float32) + b.astype(np.float16), 0).astype(np.float16)
    assert np.array_equal(y, want)                 # one rounding of acc + b (exact in float32)
    assert (y == 0).any() and (y > 0).any()
    w = layers.make_weights((6, 40), 0.4, 0)
    x = layers.make_inputs(40, 5, 0)
    assert reference.check(y, w, x, bias=b.astype(np.float16), relu=True).holds
    assert not reference.check(y, w, x).holds


def test_bad_bias_files(tmp_path, capsys):
    args = ("run", "--in-features", 10, "--out-features", 4, *SMALL)
    for name, arr, match in [
            ("2d.npy", np.zeros((4, 1)), "bias must be 1-D (one value per output, K = 4)"),
            ("short.npy", np.zeros(3), "bias has 3 values but the layer has K = 4 outputs"),
            ("nan.npy", np.array([0.0, np.nan, 1.0, 2.0]), "bias values contain NaN or infinity"),
            ("int.npy", np.arange(4), "bias values dtype is int64"),
            ("big.npy", np.full(4, 1e5), "bias values exceed the float16 range"),
            ("empty.npy", np.zeros(0), "bias has 0 values")]:
        np.save(tmp_path / name, arr)
        assert_user_error(capsys, *args, "--bias", tmp_path / name, match=match)
    assert_user_error(capsys, *args, "--bias", "", match="--bias: the path is empty")
    assert_user_error(capsys, *args, "--bias", tmp_path / "missing.npy", match="missing.npy")


def test_asm_and_disasm(tmp_path, capsys):
    status, out, _ = run(capsys, "asm", "--in-features", 40, "--out-features", 6, *SMALL,
                         "--sparse-graph", "switch", "-o", tmp_path / "i.npz",
                         "--dot", tmp_path / "g.dot")
    assert status == 0 and "instructions per PE (2 x 2" in out
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    status, out, _ = run(capsys, "disasm", tmp_path / "i.npz")
    assert status == 0 and out.startswith("; FDPU image: 2x2 PEs")
    assert "SWITCH t0, t1, t2 -> true:" in out and "preload" in out
    # The default sparse graph (gather): BSCAN's tokens straight into the value loads.
    status, _, _ = run(capsys, "asm", "--in-features", 40, "--out-features", 6, *SMALL,
                       "-o", tmp_path / "g.npz")
    status, out, _ = run(capsys, "disasm", tmp_path / "g.npz")
    assert status == 0 and "BSCAN" in out and "LDHBZ" in out and "SWITCH" not in out
    (tmp_path / "bad.npz").write_bytes(b"junk")
    assert_user_error(capsys, "disasm", tmp_path / "bad.npz", match="not an FDPU image")
    assert_user_error(capsys, "asm", "--in-features", 40, "--out-features", 6, *SMALL,
                      "--pass", 3, match="--pass must be in 0..0")


def test_golden_auto_picks_exact_for_small_layers_only():
    small = planner.plan_fc(8, 32, 4, "dense", ArrayParams(rows=1, cols=1, slots=64,
                                                           operand_depth=4, int_issue=1))
    big = planner.plan_fc(96, 256, 64, "dense", ArrayParams(slots=64, operand_depth=4,
                                                            int_issue=1))
    assert small.K * small.Cw * small.groups <= EXACT_LIMIT < big.K * big.Cw * big.groups
    assert golden_exact("auto", small) and not golden_exact("auto", big)
    assert golden_exact("exact", big) and not golden_exact("fast", small)


def test_graph_options_reach_the_plan(tmp_path, capsys):
    # --sparse-graph, --kb, --gb and --wfan choose the engine instead of the chooser.
    out = tmp_path / "r.json"
    status = sw.cli.main(["run", "--in-features", "64", "--out-features", "6", "--batch", "32",
                          "--density", "0.25", "--rows", "1", "--cols", "1", "--slots", "128",
                          "--int-issue", "2", "--sparse-graph", "gather", "--kb", "3",
                          "--gb", "8", "--wfan", "16", "--json", str(out)])
    capsys.readouterr()
    rec = json.loads(out.read_text())
    assert status == 0 and rec["match"]
    assert {k: rec["plan"][k] for k in ("kb", "gb", "wfan", "sparse_graph")} == \
        dict(kb=3, gb=8, wfan=16, sparse_graph="gather")
    assert "SWITCH" not in rec["counters"]["ops"]


def test_run_names_the_graph_and_its_balance(tmp_path, capsys):
    # Without --sparse-graph a low-density layer runs the skip graph; the table and the JSON
    # say which graph ran and its load balance; --sparse-graph gather is honoured as given.
    for graph, want in ((None, "sparse/skip"), ("gather", "sparse/gather")):
        extra = ("--sparse-graph", graph) if graph else ()
        status, out, _ = run(capsys, "run", "--in-features", 128, "--out-features", 16,
                             "--batch", 16, "--density", 0.05, "--slots", 128,
                             "--int-issue", 2, *SMALL, "--engine", "exact", *extra,
                             "--json", tmp_path / "r.json")
        rec = json.loads((tmp_path / "r.json").read_text())
        assert status == 0 and rec["match"] and rec["graph"] == want and want in out
        assert "load balance" in out and 0 < rec["load_balance"] <= 1
        assert "cycles_estimate" not in rec              # one performance model: --sim model
        if graph is None:
            assert rec["plan"]["rows_balanced"]
            assert rec["counters"]["ops"]["FACC"] >= rec["nnz"] * 4      # 4 lane groups


@pytest.mark.parametrize("exact", [False, True])
def test_golden_reports_progress_up_to_its_total(exact):
    from sw.models import golden_fc
    params = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1)
    w = layers.make_weights((6, 200), 0.5, 0)
    x = layers.make_inputs(200, 3, 0)
    plan = planner.plan_fc(6, 200, 3, mode="sparse", params=params)
    seen = []
    golden_fc.run_fc(plan, w, x, exact=exact, progress=lambda done, total: seen.append(
        (done, total)))
    total = plan.passes if exact else plan.Cw
    assert seen and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted({d for d, _ in seen}) and {t for _, t in seen} == {total}


def test_file_shapes_meet_the_size_limits(tmp_path, capsys):
    """A --weights or --inputs file is held to the limits of the options that give sizes."""
    np.save(tmp_path / "x.npy", np.ones((270000, 16), np.float16))
    np.save(tmp_path / "w.npy", np.ones((4, 70000), np.float16))
    assert_user_error(capsys, "run", "--in-features", 16, "--out-features", 8, "--inputs",
                      tmp_path / "x.npy", match="x.npy: inputs: batch N = 270,000 exceeds 262,144")
    assert_user_error(capsys, "run", "--weights", tmp_path / "w.npy",
                      match="w.npy: weights: in_features C = 70,000 exceeds 65,535")
