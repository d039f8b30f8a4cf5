"""Networks as exporters write them: host steps before and after the FC layers, several
outputs, binary classifiers and regressors; compared with onnxruntime where it is installed.

The models are built here with ``onnx.helper`` in the shapes skl2onnx and ``torch.onnx.export``
write (the node kinds, attributes and order those exporters use), so the tests need neither
exporter.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from cliutil import assert_user_error, run
from sw.compiler import net, onnx_import
from sw.spec.errors import FdpuError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(20261205)
ML = helper.make_opsetid("ai.onnx.ml", 1)


def _t(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype), name)


def _half(shape):
    return RNG.standard_normal(shape).astype(np.float16).astype(np.float32) * 0.5


def _save(path, nodes, inits, inputs, outputs, opset=17, ml=False):
    g = helper.make_graph(nodes, "exported", inputs, outputs, initializer=inits)
    ops = [helper.make_opsetid("", opset)] + ([ML] if ml else [])
    onnx.save(helper.make_model(g, opset_imports=ops), str(path))
    return path


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def sklearn_classifier(path, c=12, h=8, k=3, zipmap=True):
    """skl2onnx's MLPClassifier: Cast, MatMul/Add/Relu, MatMul/Add, Softmax; the label by
    ArgMax and ArrayFeatureExtractor over the classes, the probabilities through ZipMap."""
    w1, b1, w2, b2 = _half((c, h)), _half(h), _half((h, k)), _half(k)
    nodes = [helper.make_node("Cast", ["input"], ["cast_input"], to=1, name="Cast"),
             helper.make_node("MatMul", ["cast_input", "coefficient"], ["mul_result"],
                              name="MatMul"),
             helper.make_node("Add", ["mul_result", "intercepts"], ["add_result"], name="Add"),
             helper.make_node("Relu", ["add_result"], ["next_activations"], name="Relu"),
             helper.make_node("MatMul", ["next_activations", "coefficient1"], ["mul_result1"],
                              name="MatMul1"),
             helper.make_node("Add", ["mul_result1", "intercepts1"], ["add_result1"],
                              name="Add1"),
             helper.make_node("Softmax", ["add_result1"], ["out_activations_result"],
                              axis=1, name="Relu1"),
             helper.make_node("ArgMax", ["out_activations_result"], ["argmax_output"], axis=1,
                              name="ArgMax"),
             helper.make_node("ArrayFeatureExtractor", ["classes", "argmax_output"],
                              ["array_feature_extractor_result"], domain="ai.onnx.ml",
                              name="ArrayFeatureExtractor"),
             helper.make_node("Reshape", ["array_feature_extractor_result", "shape_tensor"],
                              ["reshaped_result"], name="Reshape"),
             helper.make_node("Cast", ["reshaped_result"], ["label"], to=7, name="Cast1")]
    outputs = [_vi("label", TensorProto.INT64, ["N"])]
    if zipmap:
        nodes.append(helper.make_node("ZipMap", ["out_activations_result"],
                                      ["output_probability"], domain="ai.onnx.ml",
                                      classlabels_int64s=list(range(k)), name="ZipMap"))
        outputs.append(helper.make_value_info(
            "output_probability", helper.make_sequence_type_proto(helper.make_map_type_proto(
                TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))))
    else:
        nodes.append(helper.make_node("Identity", ["out_activations_result"], ["probabilities"],
                                      name="Identity"))
        outputs.append(_vi("probabilities", TensorProto.FLOAT, ["N", k]))
    inits = [_t("coefficient", w1), _t("intercepts", b1), _t("coefficient1", w2),
             _t("intercepts1", b2), _t("classes", np.arange(k), np.int64),
             _t("shape_tensor", [-1], np.int64)]
    _save(path, nodes, inits, [_vi("input", TensorProto.FLOAT, ["N", c])], outputs, ml=True)
    return (w1.T, b1, w2.T, b2)


def sklearn_binary(path, c=10, h=6):
    """skl2onnx's binary MLPClassifier: one logistic output; probabilities [1 - p, p]."""
    w1, b1, w2, b2 = _half((c, h)), _half(h), _half((h, 1)), _half(1)
    nodes = [helper.make_node("MatMul", ["input", "coefficient"], ["m1"], name="MatMul"),
             helper.make_node("Add", ["m1", "intercepts"], ["a1"], name="Add"),
             helper.make_node("Relu", ["a1"], ["r1"], name="Relu"),
             helper.make_node("MatMul", ["r1", "coefficient1"], ["m2"], name="MatMul1"),
             helper.make_node("Add", ["m2", "intercepts1"], ["a2"], name="Add1"),
             helper.make_node("Sigmoid", ["a2"], ["p"], name="Sigmoid"),
             helper.make_node("Sub", ["unity", "p"], ["q"], name="Sub"),
             helper.make_node("Concat", ["q", "p"], ["probabilities"], axis=1, name="Concat"),
             helper.make_node("ArgMax", ["probabilities"], ["am"], axis=1, name="ArgMax"),
             helper.make_node("ArrayFeatureExtractor", ["classes", "am"], ["afe"],
                              domain="ai.onnx.ml", name="AFE"),
             helper.make_node("Reshape", ["afe", "shape_tensor"], ["label"], name="Reshape")]
    inits = [_t("coefficient", w1), _t("intercepts", b1), _t("coefficient1", w2),
             _t("intercepts1", b2), _t("unity", 1.0), _t("classes", [0, 1], np.int64),
             _t("shape_tensor", [-1], np.int64)]
    _save(path, nodes, inits, [_vi("input", TensorProto.FLOAT, ["N", c])],
          [_vi("label", TensorProto.INT64, ["N"]),
           _vi("probabilities", TensorProto.FLOAT, ["N", 2])], ml=True)


def sklearn_regressor(path, c=8, h=5):
    """skl2onnx's MLPRegressor: a leading Cast, the layers, a trailing Reshape."""
    w1, b1, w2, b2 = _half((c, h)), _half(h), _half((h, 1)), _half(1)
    nodes = [helper.make_node("Cast", ["input"], ["xc"], to=1, name="Cast"),
             helper.make_node("MatMul", ["xc", "coefficient"], ["m1"], name="MatMul"),
             helper.make_node("Add", ["m1", "intercepts"], ["a1"], name="Add"),
             helper.make_node("Relu", ["a1"], ["r1"], name="Relu"),
             helper.make_node("MatMul", ["r1", "coefficient1"], ["m2"], name="MatMul1"),
             helper.make_node("Add", ["m2", "intercepts1"], ["a2"], name="Add1"),
             helper.make_node("Reshape", ["a2", "shape_tensor"], ["variable"], name="Reshape")]
    inits = [_t("coefficient", w1), _t("intercepts", b1), _t("coefficient1", w2),
             _t("intercepts1", b2), _t("shape_tensor", [-1, 1], np.int64)]
    _save(path, nodes, inits, [_vi("input", TensorProto.FLOAT, ["N", c])],
          [_vi("variable", TensorProto.FLOAT, ["N", 1])])


def torch_cnn_head(path, flatten="Flatten", softmax=True):
    """torch.onnx.export of Sequential(Flatten, Linear, ReLU, Linear[, Softmax]) on an
    N x 1 x 8 x 8 input; the dynamo exporter writes the Flatten as a Reshape to [-1, 64]."""
    w1, b1, w2, b2 = _half((16, 64)), _half(16), _half((4, 16)), _half(4)
    first = (helper.make_node("Flatten", ["input"], ["flat"], axis=1, name="/0/Flatten")
             if flatten == "Flatten" else
             helper.make_node("Reshape", ["input", "shape"], ["flat"], name="view"))
    nodes = [first,
             helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["h"], alpha=1.0,
                              beta=1.0, transB=1, name="/1/Gemm"),
             helper.make_node("Relu", ["h"], ["r"], name="/2/Relu"),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"],
                              ["logits" if softmax else "output"], transB=1, name="/3/Gemm")]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["output"], axis=1,
                                      name="/4/Softmax"))
    inits = [_t("fc1.weight", w1), _t("fc1.bias", b1), _t("fc2.weight", w2),
             _t("fc2.bias", b2), _t("shape", [-1, 64], np.int64)]
    _save(path, nodes, inits, [_vi("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
          [_vi("output", TensorProto.FLOAT, ["N", 4])])


def float16_model(path):
    """onnxconverter-common's float16 converter: Casts around a float16 Gemm."""
    w, b = _half((5, 9)), _half(5)
    nodes = [helper.make_node("Cast", ["input"], ["input16"], to=10, name="graph_input_cast0"),
             helper.make_node("Gemm", ["input16", "w", "b"], ["y16"], transB=1, name="fc"),
             helper.make_node("Cast", ["y16"], ["output"], to=1, name="graph_output_cast0")]
    _save(path, nodes, [_t("w", w, np.float16), _t("b", b, np.float16)],
          [_vi("input", TensorProto.FLOAT, ["N", 9])],
          [_vi("output", TensorProto.FLOAT, ["N", 5])])


def _onnxruntime(path, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _net(capsys, tmp_path, model, x, *extra):
    np.save(tmp_path / "x.npy", x)
    status, out, err = run(capsys, "net", model, "--inputs", tmp_path / "x.npy", "--rows", 2,
                           "--cols", 2, "--json", tmp_path / "r.json", "--out",
                           tmp_path / "y.npy", *extra)
    assert status == 0, (out, err)
    return json.loads((tmp_path / "r.json").read_text()), np.load(tmp_path / "y.npy"), out


@pytest.mark.parametrize("zipmap", [True, False])
def test_sklearn_classifier_runs_as_exported(tmp_path, capsys, zipmap):
    p = tmp_path / "clf.onnx"
    sklearn_classifier(p, zipmap=zipmap)
    n = onnx_import.load(p)
    assert [s.op for s in n.pre] == ["Cast"]
    assert {s.op for s in n.post} >= {"Softmax", "ArgMax", "ArrayFeatureExtractor"}
    assert n.task == "classifier" and len(n.outputs) == 2
    x = RNG.standard_normal((16, 12)).astype(np.float16).astype(np.float32)
    labels = RNG.integers(0, 3, 16)
    np.save(tmp_path / "l.npy", labels)
    rec, y, out = _net(capsys, tmp_path, p, x, "--labels", tmp_path / "l.npy")
    assert rec["task"] == "classifier" and "accuracy" in rec
    assert rec["host_steps"]["before"] == ["Cast 'Cast'"]
    assert "Softmax 'Relu1'" in rec["host_steps"]["after"]
    assert "host steps after the layers" in out
    outs = net.head(n, y.astype(np.float32))
    label = outs["label"]
    assert np.array_equal(label, y.astype(np.float32).argmax(axis=1))
    probs = outs["output_probability" if zipmap else "probabilities"]
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-5)
    if not zipmap:
        ref = _onnxruntime(p, x)
        assert (ref[0] == label).mean() >= 0.9        # binary16 weights and activations
        np.testing.assert_allclose(probs, ref[1], atol=0.05)


def test_sklearn_binary_classifier_is_scored_by_its_sign(tmp_path, capsys):
    p = tmp_path / "bin.onnx"
    sklearn_binary(p)
    x = RNG.standard_normal((20, 10)).astype(np.float16).astype(np.float32)
    labels = RNG.integers(0, 2, 20)
    np.save(tmp_path / "l.npy", labels)
    rec, y, out = _net(capsys, tmp_path, p, x, "--labels", tmp_path / "l.npy")
    assert rec["task"] == "binary" and "binary class" in out
    ours = (y[:, 0] > 0).astype(np.int64)
    assert rec["accuracy"] == pytest.approx((ours == labels).mean())
    outs = net.head(onnx_import.load(p), y.astype(np.float32))
    assert np.array_equal(outs["label"], ours)
    np.testing.assert_allclose(outs["probabilities"].sum(axis=1), 1, rtol=1e-6)


def test_sklearn_regressor_is_scored_by_its_error(tmp_path, capsys):
    p = tmp_path / "reg.onnx"
    sklearn_regressor(p)
    x = RNG.standard_normal((9, 8)).astype(np.float16).astype(np.float32)
    rec, y, out = _net(capsys, tmp_path, p, x)
    assert rec["task"] == "regressor" and "top-1" not in out
    assert rec["max_abs_error"] < 0.05 and "max absolute error" in out
    np.save(tmp_path / "l.npy", np.zeros(9, np.int64))
    assert_user_error(capsys, "net", p, "--inputs", tmp_path / "x.npy", "--labels",
                      tmp_path / "l.npy", match="is a regressor")


@pytest.mark.parametrize("flatten", ["Flatten", "Reshape"])
def test_torch_model_with_image_inputs_and_a_trailing_softmax(tmp_path, capsys, flatten):
    p = tmp_path / "torch.onnx"
    torch_cnn_head(p, flatten)
    x = RNG.standard_normal((6, 1, 8, 8)).astype(np.float16).astype(np.float32)
    rec, y, _ = _net(capsys, tmp_path, p, x)
    assert rec["task"] == "classifier" and rec["host_steps"]["after"] == ["Softmax '/4/Softmax'"]
    assert y.shape == (6, 4)
    n = onnx_import.load(p)
    ref = _onnxruntime(p, x)[0]
    np.testing.assert_allclose(net.head(n, y.astype(np.float32))["output"], ref, atol=0.02)
    # The 2-D inputs of the first layer are refused: the model takes N x 1 x 8 x 8.
    np.save(tmp_path / "flat.npy", x.reshape(6, 64))
    assert_user_error(capsys, "net", p, "--inputs", tmp_path / "flat.npy",
                      match="takes N x 1 x 8 x 8")


def test_float16_converter_casts(tmp_path, capsys):
    p = tmp_path / "f16.onnx"
    float16_model(p)
    x = RNG.standard_normal((4, 9)).astype(np.float16).astype(np.float32)
    rec, y, _ = _net(capsys, tmp_path, p, x)
    assert rec["host_steps"] == {"before": ["Cast 'graph_input_cast0'"],
                                 "between": [],
                                 "after": ["Cast 'graph_output_cast0'"]}
    ref = _onnxruntime(p, x)[0]
    np.testing.assert_allclose(y.astype(np.float32), ref, atol=0.02)


@pytest.mark.parametrize("case, match", [
    ("sigmoid_between", "node Gemm 'fc2' is not on the chain of layers"),
    ("tanh_after", "node Tanh 't' after the last FC layer is not supported"),
    ("tanh_before", "node Tanh 't' is not supported; before the first layer"),
    ("computed_shape", "its shape 's' must be an initializer"),
    ("reads_input", "value 'x' feeds 2 nodes before the first layer"),
    ("bad_flatten", "becomes (12,) before the first layer, which takes N x 6"),
])
def test_steps_that_cannot_run_are_refused_with_the_node(tmp_path, case, match):
    w = np.ones((4, 6), np.float32)
    v = np.ones((2, 4), np.float32)
    gemm1 = helper.make_node("Gemm", ["x", "w"], ["h"], transB=1, name="fc1")
    inits = [_t("w", w), _t("v", v)]
    in_shape, out_k = ["N", 6], 2
    nodes = {
        "sigmoid_between": [gemm1, helper.make_node("Sigmoid", ["h"], ["s"], name="sg"),
                            helper.make_node("Gemm", ["s", "v"], ["y"], transB=1, name="fc2")],
        "tanh_after": [gemm1, helper.make_node("Tanh", ["h"], ["y"], name="t")],
        "tanh_before": [helper.make_node("Tanh", ["x"], ["t"], name="t"),
                        helper.make_node("Gemm", ["t", "w"], ["y"], transB=1)],
        "computed_shape": [helper.make_node("Constant", [], ["s"], value=_t("k", [-1, 6],
                                                                            np.int64)),
                           helper.make_node("Reshape", ["x", "s"], ["r"], name="rs"),
                           helper.make_node("Gemm", ["r", "w"], ["y"], transB=1)],
        "reads_input": [gemm1, helper.make_node("Add", ["h", "x"], ["y"], name="mix")],
        "bad_flatten": [helper.make_node("Flatten", ["x"], ["f"], axis=1),
                        helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)],
    }[case]
    g_inputs = [_vi("x", TensorProto.FLOAT, [2, 3, 4] if case == "bad_flatten" else in_shape)]
    if case in ("tanh_after", "reads_input"):
        out_k = 4
    p = _save(tmp_path / "m.onnx", nodes, inits, g_inputs,
              [_vi("y", TensorProto.FLOAT, ["N", out_k])])
    with pytest.raises(FdpuError) as err:
        onnx_import.load(p)
    assert match in str(err.value), str(err.value)


@pytest.mark.parametrize("zipmap", [True, False])
def test_reference_onnxruntime_compares_every_output(tmp_path, capsys, zipmap):
    pytest.importorskip("onnxruntime")
    p = tmp_path / "clf.onnx"
    sklearn_classifier(p, zipmap=zipmap)
    x = RNG.standard_normal((12, 12)).astype(np.float16).astype(np.float32)
    rec, _, out = _net(capsys, tmp_path, p, x, "--reference", "onnxruntime")
    cmp = rec["onnxruntime"]
    assert cmp["label"]["agreement"] >= 0.9
    probs = cmp["output_probability" if zipmap else "probabilities"]
    assert probs["max_abs_difference"] < 0.05
    assert "onnxruntime, output 'label': agrees on" in out


def test_reference_onnxruntime_bad_uses(tmp_path, capsys):
    p = tmp_path / "torch.onnx"
    torch_cnn_head(p)
    assert_user_error(capsys, "net", p, "--reference", "onnxruntime",
                      match="give --inputs X.npy in the model's input shape")
    np.savez(tmp_path / "n.npz", W0=np.ones((2, 3), np.float32))
    assert_user_error(capsys, "net", tmp_path / "n.npz", "--reference", "onnxruntime",
                      match="is a network .npz")


# The files skl2onnx and torch.onnx.export wrote (examples/exported/export_*.py), as they are --

EXPORTED = Path(__file__).resolve().parents[1] / "examples" / "exported"


@pytest.mark.parametrize("name, data, task", [
    ("digits_clf", "digits_clf", "classifier"),
    ("digits_clf_nozipmap", "digits_clf", "classifier"),
    ("cancer_bin", "cancer_bin", "binary"),
    ("diabetes_reg", "diabetes_reg", "regressor"),
    ("torch_digits", "torch_digits", "classifier"),           # weights in .onnx.data
    ("torch_digits_legacy", "torch_digits", "classifier"),
    ("torch_digits_fp16", "torch_digits", "classifier"),      # float16 converter's Casts
])
def test_exported_files_run_as_exported(tmp_path, capsys, monkeypatch, name, data, task):
    monkeypatch.chdir(tmp_path)                 # external data is read from the model's folder
    pytest.importorskip("onnxruntime")
    x = np.load(EXPORTED / f"{data}_x.npy")
    extra = [] if task == "regressor" else ["--labels", EXPORTED / f"{data}_y.npy"]
    rec, y, _ = _net(capsys, tmp_path, EXPORTED / f"{name}.onnx", x, "--reference",
                     "onnxruntime", *extra)
    assert rec["task"] == task and rec["match"]
    cmp = rec["onnxruntime"]
    if task == "regressor":
        assert rec["max_abs_error"] < 1.0 and cmp["variable"]["max_abs_difference"] < 1.0
        return
    if name.startswith("torch"):
        assert cmp["output"]["max_abs_difference"] < 0.01
        if name.endswith("fp16"):
            assert rec["host_steps"]["before"][0].startswith("Cast")
        assert any(s.startswith("Softmax") for s in rec["host_steps"]["after"])
    else:
        label = next(k for k in cmp if "label" in k)
        assert cmp[label]["agreement"] >= 0.98
    assert rec["accuracy"] >= 0.94 and rec["predictions_differ"] <= 1


@pytest.mark.parametrize("sim", ["verilator", pytest.param("icarus", marks=pytest.mark.slow)])
def test_skl2onnx_classifier_on_the_rtl_bit_for_bit(tmp_path, capsys, sim):
    # On the 2 x 2 top of tests/test_chain.py (one Verilator build for both).
    x = np.load(EXPORTED / "digits_clf_x.npy")[:4]
    rec, _, _ = _net(capsys, tmp_path, EXPORTED / "digits_clf.onnx", x, "--sim", sim,
                     "--slots", 32, "--operand-depth", 4, "--int-issue", 1, "--dbuf-bytes", 8192,
                     "--dma-channels", 2, "--config-ports", 1)
    assert rec["match"] and [r["match"] for r in rec["layers"]] == [True, True]
    assert all(r["rtl_instructions"] == r["golden_instructions"] for r in rec["layers"])
    assert rec["host_steps"]["before"] == ["Cast 'Cast'"] and rec["predictions_differ"] == 0


@pytest.mark.parametrize("name, data", [("cancer_bin", "cancer_bin"),
                                        ("torch_digits", "torch_digits")])
def test_exported_files_on_the_performance_model(tmp_path, capsys, name, data):
    x = np.load(EXPORTED / f"{data}_x.npy")[:8]
    rec, _, _ = _net(capsys, tmp_path, EXPORTED / f"{name}.onnx", x, "--sim", "model")
    assert rec["match"] and rec["total"]["cycles"] > 0 and rec["predictions_differ"] == 0
