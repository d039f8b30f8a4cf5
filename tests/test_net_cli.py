"""``fdpu net``: a whole MLP layer by layer, against a chain of ``fdpu run`` and the RTL."""

import json
import os

import numpy as np
import pytest

from cliutil import assert_user_error, run
from sw.compiler import layers, net

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

DIGITS = os.path.join(os.path.dirname(__file__), "..", "examples", "digits")
SMALL = ("--rows", "2", "--cols", "2")


def _tiny_net(tmp_path, shapes=((12, 24), (5, 12)), n=6, seed=4):
    """Write a 2-layer net (bias on both, ReLU after the first) and its inputs; return the
    paths ``(net.npz, X.npy)`` and the weights and biases."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, (k, c) in enumerate(shapes):
        arrays[f"W{i}"] = layers.make_weights((k, c), 0.5, seed + i)
        arrays[f"b{i}"] = rng.normal(0, 0.5, k).astype(np.float16)
    path = tmp_path / "net.npz"
    np.savez(path, **arrays)
    x = layers.make_inputs(shapes[0][1], n, seed)
    np.save(tmp_path / "x.npy", x)
    return path, tmp_path / "x.npy", arrays


def test_golden_net_equals_a_chain_of_fdpu_run(tmp_path, capsys):
    path, xs, arrays = _tiny_net(tmp_path)
    inputs = xs
    for i, flags in enumerate((("--relu",), ())):
        np.save(tmp_path / f"w{i}.npy", arrays[f"W{i}"])
        np.save(tmp_path / f"b{i}.npy", arrays[f"b{i}"])
        out = tmp_path / f"y{i}.npy"
        status, _, err = run(capsys, "run", "--weights", tmp_path / f"w{i}.npy", "--inputs",
                             inputs, "--bias", tmp_path / f"b{i}.npy", *flags, "--out", out,
                             *SMALL)
        assert status == 0, err
        inputs = out
    status, text, err = run(capsys, "net", path, "--inputs", xs, "--out", tmp_path / "y.npy",
                            "--json", tmp_path / "n.json", *SMALL)
    assert status == 0, err
    got, want = np.load(tmp_path / "y.npy"), np.load(inputs)
    assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    rec = json.loads((tmp_path / "n.json").read_text())
    assert rec["match"] and [(r["K"], r["C"]) for r in rec["layers"]] == [(12, 24), (5, 12)]
    assert [(r["bias"], r["relu"]) for r in rec["layers"]] == [(True, True), (True, False)]
    assert "0 W0" in text and "within the float64 bound" in text
    # The ReLU of the first layer bites and the last layer has negative outputs: a test that
    # ignored the activation or the bias would not pass the comparison above.
    assert (np.load(tmp_path / "y0.npy") == 0).any() and (got < 0).any()


def test_model_figures_per_layer_and_total(tmp_path, capsys):
    path, xs, _ = _tiny_net(tmp_path)
    status, text, err = run(capsys, "net", path, "--inputs", xs, "--sim", "model",
                            "--json", tmp_path / "m.json", *SMALL)
    assert status == 0, err
    rec = json.loads((tmp_path / "m.json").read_text())
    assert all(r["cycles"] > 0 and r["external_bytes"] > 0 for r in rec["layers"])
    assert rec["total"]["cycles"] == sum(r["cycles"] for r in rec["layers"])
    assert 0 < rec["total"]["utilization"] <= 1 and "total" in text


def test_model_chaining_saves_the_activations_external_bytes(tmp_path, capsys):
    path, xs, _ = _tiny_net(tmp_path, n=32)
    figures = {}
    for flag in ("--chain", "--no-chain"):
        status, text, err = run(capsys, "net", path, "--inputs", xs, "--sim", "model", flag,
                                "--json", tmp_path / "m.json", *SMALL)
        assert status == 0, err
        figures[flag] = json.loads((tmp_path / "m.json").read_text())
    on, off = figures["--chain"], figures["--no-chain"]
    assert [r["match"] for r in on["layers"]] == [True, True]
    # The first layer's outputs and the second one's inputs no longer cross the port; the
    # first layer's weights and the second one's outputs still do.
    saved = off["total"]["external_bytes"] - on["total"]["external_bytes"]
    assert saved >= 2 * 32 * 12 * 2
    assert on["layers"][0]["ext_write_bytes"] == 0 < off["layers"][0]["ext_write_bytes"]
    assert on["layers"][1]["ext_write_bytes"] == off["layers"][1]["ext_write_bytes"]


def test_chain_options_are_checked(tmp_path, capsys):
    path, xs, _ = _tiny_net(tmp_path)
    assert_user_error(capsys, "net", path, "--chain", match="--chain applies to --sim "
                      "model|icarus|verilator, not to --sim golden")
    assert_user_error(capsys, "net", path, "--no-chain", match="--no-chain applies to")
    # Dbufs too small for the first layer in one pass: --chain is refused, not replaced; the
    # default streams that link.
    assert_user_error(capsys, "net", path, "--inputs", xs, "--sim", "model", "--chain",
                      "--rows", "1", "--cols", "1", "--dbuf-bytes", "1024",
                      match="--chain: layers 0 and 1 cannot be chained on chip: this layer "
                            "runs in")
    status, text, err = run(capsys, "net", path, "--inputs", xs, "--sim", "model", "--rows",
                            "1", "--cols", "1", "--dbuf-bytes", "1024")
    assert status == 0, err
    assert "streamed through the host, not counted (this layer runs in" in text


def test_split_runs_a_small_layer_on_more_engines(tmp_path, capsys):
    # The digits MLP's last layer (10 outputs, 20 work items on 64 PEs) as two stages: its
    # partial sums on twice the engines, then their sum with the bias on the skip graph; the
    # same predictions.  --no-split keeps three layers.
    onnx = os.path.join(DIGITS, "digits.onnx")
    data = ("--inputs", os.path.join(DIGITS, "test_x.npy"), "--labels",
            os.path.join(DIGITS, "test_y.npy"), "--limit", "8")
    runs = {}
    for flag in ("--split", "--no-split"):
        status, text, err = run(capsys, "net", onnx, *data, "--sim", "model", flag, "--json",
                                tmp_path / "s.json")
        assert status == 0, err
        runs[flag] = json.loads((tmp_path / "s.json").read_text())
    on, off = runs["--split"]["layers"], runs["--no-split"]["layers"]
    assert len(off) == 3 and [r["stage"] for r in off] == [None] * 3
    assert [r["stage"] for r in on] == [None, None, "partial sums", "sum"]
    assert [r["layer"] for r in on] == [0, 1, 2, 2] and all(r["match"] for r in on)
    assert on[2]["plan"]["split"] == 2 and on[2]["plan"]["engines"] == 2 * off[2]["plan"][
        "engines"]
    assert on[3]["bias"] and not on[2]["bias"] and on[3]["graph"] == "sparse/skip"
    assert runs["--split"]["accuracy"] == runs["--no-split"]["accuracy"]
    assert runs["--split"]["links"][2]["on_chip"]          # partial sums stay on chip
    # Nothing to split on one PE: --split is refused, not ignored.
    assert_user_error(capsys, "net", onnx, *data, "--split", "--rows", "1", "--cols", "1",
                      match="can split its reduction on 1 PEs")


def test_density_prunes_every_layer(tmp_path, capsys):
    path, xs, _ = _tiny_net(tmp_path)
    status, _, err = run(capsys, "net", path, "--inputs", xs, "--density", "0.25",
                         "--json", tmp_path / "d.json", *SMALL)
    assert status == 0, err
    rec = json.loads((tmp_path / "d.json").read_text())
    assert [r["nnz"] for r in rec["layers"]] == [round(0.25 * 12 * 24), round(0.25 * 5 * 12)]


def test_onnx_model_built_with_helper_runs(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    w0 = rng.normal(0, 0.3, (16, 8)).astype(np.float32)        # MatMul: C x K
    b0 = rng.normal(0, 0.3, 8).astype(np.float32)
    w1 = rng.normal(0, 0.3, (3, 8)).astype(np.float32)         # Gemm transB: K x C
    b1 = rng.normal(0, 0.3, 3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="mm"),
         helper.make_node("Add", ["h0", "b0"], ["h1"], name="add"),
         helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
         helper.make_node("Gemm", ["h2", "w1", "b1"], ["y"], name="gemm", transB=1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(a, n) for a, n in ((w0, "w0"), (b0, "b0"), (w1, "w1"),
                                                     (b1, "b1"))])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph), path)
    x = layers.make_inputs(16, 5, 3)
    np.save(tmp_path / "x.npy", x)
    status, text, err = run(capsys, "net", path, "--inputs", tmp_path / "x.npy", "--out",
                            tmp_path / "y.npy", "--mode", "dense", *SMALL)
    assert status == 0, err
    assert "node MatMul 'mm'" in text and "node Gemm 'gemm'" in text
    y = np.load(tmp_path / "y.npy").astype(np.float32)
    ref = np.maximum(x.astype(np.float32) @ w0 + b0, 0) @ w1.T + b1
    assert y.shape == (5, 3) and np.allclose(y, ref, rtol=2e-2, atol=2e-2)


def test_digits_accuracy_matches_float32(tmp_path, capsys):
    status, text, err = run(capsys, "net", os.path.join(DIGITS, "digits.npz"), "--inputs",
                            os.path.join(DIGITS, "test_x.npy"), "--labels",
                            os.path.join(DIGITS, "test_y.npy"), "--limit", "60",
                            "--json", tmp_path / "d.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "d.json").read_text())
    assert rec["N"] == 60 and len(rec["layers"]) == 3
    assert abs(rec["accuracy"] - rec["accuracy_float32"]) <= 2 / 60
    assert rec["predictions_differ"] <= 2 and rec["accuracy"] > 0.8
    assert "top-1 accuracy on 60 rows" in text


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    path, xs, _ = _tiny_net(tmp_path)
    other = tmp_path / "net.txt"
    other.write_text("W0")
    assert_user_error(capsys, "net", other, match="net.txt: not a network file")
    np.save(tmp_path / "short.npy", np.zeros(5, np.int64))
    assert_user_error(capsys, "net", path, "--inputs", xs, "--labels", tmp_path / "short.npy",
                      match="one class per input row (6)")
    np.save(tmp_path / "range.npy", np.array([0, 1, 2, 3, 4, 5]))
    assert_user_error(capsys, "net", path, "--inputs", xs, "--labels", tmp_path / "range.npy",
                      match="label 5 at row 5 is outside 0..4")
    np.save(tmp_path / "float.npy", np.zeros(6))
    assert_user_error(capsys, "net", path, "--inputs", xs, "--labels", tmp_path / "float.npy",
                      match="they must be integers")
    np.save(tmp_path / "wide.npy", layers.make_inputs(25, 2, 0))
    assert_user_error(capsys, "net", path, "--inputs", tmp_path / "wide.npy",
                      match="inputs must be N x 24")
    assert_user_error(capsys, "net", path, "--inputs", xs, "--limit", "7",
                      match="--limit 7 exceeds the 6 rows")
    assert_user_error(capsys, "net", path, "--labels", tmp_path / "range.npy",
                      match="--labels needs --inputs")
    assert_user_error(capsys, "net", path, "--sim", "icarus", "--engine", "exact",
                      match="--engine applies to --sim golden|model")
    assert_user_error(capsys, "net", path, "--max-cycles", "10",
                      match="--max-cycles applies to an RTL simulation")
    assert_user_error(capsys, "net", path, "--density", "1.5", match="--density")
    assert_user_error(capsys, "net", path, "--mode", "dense", "--sparse-graph", "skip",
                      match="--sparse-graph applies to --mode sparse only")
    with pytest.raises(SystemExit) as exc:
        run(capsys, "net", path, "--sim", "spice")
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "invalid choice: 'spice'" in err
    assert_user_error(capsys, "net", path, "--json", tmp_path, match="is a directory")


def test_rtl_two_layers_bit_exact_icarus(tmp_path, capsys):
    # Chained on chip (the default: one simulation, the first layer's outputs moved Dbuf to
    # Dbuf) and streamed through the host (--no-chain: one simulation per layer): the same
    # bits, the golden model's, and fewer external bytes chained.
    path, xs, _ = _tiny_net(tmp_path, shapes=((6, 16), (3, 6)), n=4)
    small = ("--rows", "1", "--cols", "1", "--slots", "32", "--dbuf-bytes", "4096")
    status, text, err = run(capsys, "net", path, "--inputs", xs, "--sim", "icarus", *small,
                            "--out", tmp_path / "y.npy", "--json", tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert [r["match"] for r in rec["layers"]] == [True, True]
    assert [(r["chained_in"], r["chained_out"]) for r in rec["layers"]] == [(False, True),
                                                                            (True, False)]
    assert rec["links"][0]["on_chip"] and "kept on chip" in text
    assert all(r["rtl_instructions"] == r["golden_instructions"] for r in rec["layers"])
    assert rec["total"]["cycles"] == sum(r["cycles"] for r in rec["layers"]) > 0
    status, text2, err = run(capsys, "net", path, "--inputs", xs, "--sim", "icarus", *small,
                             "--no-chain", "--out", tmp_path / "s.npy", "--json",
                             tmp_path / "s.json")
    assert status == 0, err
    streamed = json.loads((tmp_path / "s.json").read_text())
    assert np.array_equal(np.load(tmp_path / "y.npy").view(np.uint16),
                          np.load(tmp_path / "s.npy").view(np.uint16))
    assert rec["total"]["external_bytes"] < streamed["total"]["external_bytes"]
    assert "streamed through the host" in text2
    # The same net on the golden model gives the same bits (the RTL fed its own outputs on).
    status, _, err = run(capsys, "net", path, "--inputs", xs, "--rows", "1", "--cols", "1",
                         "--slots", "32", "--dbuf-bytes", "4096", "--out", tmp_path / "g.npy")
    assert status == 0, err
    assert np.array_equal(np.load(tmp_path / "y.npy").view(np.uint16),
                          np.load(tmp_path / "g.npy").view(np.uint16))
    assert rec["layers"][0]["checked_at"] == 1 and rec["layers"][1]["golden"] == "exact"
    assert net.from_npz(path).K == 3


def test_rtl_split_layer_streamed_icarus(tmp_path, capsys):
    # A split layer whose partial sums go out through the host (--no-chain): each of its two
    # stages its own simulation, bit for bit with the golden model, and the network's outputs
    # those of the golden model's run of the same stages.
    path, xs, _ = _tiny_net(tmp_path, shapes=((16, 24), (3, 16)), n=4)
    small = ("--rows", "2", "--cols", "4", "--slots", "32", "--dbuf-bytes", "8192", "--mode",
             "dense", "--split")
    status, text, err = run(capsys, "net", path, "--inputs", xs, "--sim", "icarus", *small,
                            "--no-chain", "--out", tmp_path / "y.npy", "--json",
                            tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert [r["stage"] for r in rec["layers"]] == [None, "partial sums", "sum"]
    assert all(r["match"] and r["mismatches"] == 0 for r in rec["layers"])
    assert rec["layers"][1]["plan"]["split"] == 2 and rec["layers"][1]["K"] == 6
    status, _, err = run(capsys, "net", path, "--inputs", xs, *small, "--out",
                         tmp_path / "g.npy")
    assert status == 0, err
    assert np.array_equal(np.load(tmp_path / "y.npy").view(np.uint16),
                          np.load(tmp_path / "g.npy").view(np.uint16))


def test_onnx_without_the_onnx_package_is_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"not read")
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)      # import onnx fails
    assert_user_error(capsys, "net", path, match="pip install -e .[nets]")


def test_overflow_between_layers_is_warned(tmp_path, capsys):
    np.savez(tmp_path / "big.npz", W0=np.full((2, 4), 60000.0), W1=np.ones((1, 2)))
    np.save(tmp_path / "x.npy", np.ones((1, 4)))
    status, _, err = run(capsys, "net", tmp_path / "big.npz", "--inputs", tmp_path / "x.npy",
                         "--rows", "1", "--cols", "1")
    assert "layer 0 (W0): 2 output(s) beyond the binary16 range" in err
    # The first layer's sum (240,000) overflows binary16: it does not match the float64 sum.
    assert status == 1 and "layer(s) 0, 1 do not match" in err and "Warning" not in err
