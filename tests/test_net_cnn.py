"""Convolutional networks: ONNX import of convolutions, BatchNormalization and pooling, the
shipped pruned LeNet (torch-exported, both exporters), `fdpu net` on golden, model and RTL."""

import json
import os

import numpy as np
import pytest

from cliutil import assert_user_error, run
from sw.compiler import net
from sw.spec.errors import FdpuError

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

CNN = os.path.join(os.path.dirname(__file__), "..", "examples", "cnn")
LENETS = ("lenet_digits.onnx", "lenet_digits_legacy.onnx")


def _t(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def tiny_cnn(path, rng, *, c=2, h=5, w=6, k=3, pool="MaxPool", bn=False, stride=1,
             conv_attrs=None, in_shape=None):
    """Write ``Conv(k, 3 x 3, pad 1) [-> BatchNormalization] -> Relu -> pool(2) -> Flatten ->
    Gemm(4)`` on ``N x c x h x w`` images; return the path."""
    wc = rng.standard_normal((k, c, 3, 3)).astype(np.float16).astype(np.float32)
    bc = rng.standard_normal(k).astype(np.float16).astype(np.float32)
    p, q = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    feats = k * (p // 2) * (q // 2)
    wf = rng.standard_normal((4, feats)).astype(np.float16).astype(np.float32)
    attrs = {**dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]),
             **(conv_attrs or {})}
    nodes = [helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv", **attrs)]
    inits = [_t("wc", wc), _t("bc", bc), _t("wf", wf), _t("bf", rng.standard_normal(4))]
    last = "c"
    if bn:
        nodes.append(helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"],
                                      name="bn", epsilon=1e-3))
        inits += [_t("g", rng.uniform(0.5, 2, k)), _t("b", rng.standard_normal(k)),
                  _t("m", rng.standard_normal(k)), _t("v", rng.uniform(0.5, 2, k))]
        last = "n"
    nodes += [helper.make_node("Relu", [last], ["r"]),
              helper.make_node(pool, ["r"], ["pl"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Flatten", ["pl"], ["f"], axis=1),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, in_shape or ["N", c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _onnxruntime(path, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("name", LENETS)
def test_torch_exported_lenet_imports_as_convolutions_pools_and_fc(name):
    from sw.compiler import onnx_import
    model = onnx_import.load(os.path.join(CNN, name))
    assert [type(layer).__name__ for layer in model.layers] == ["Conv", "Conv", "Dense",
                                                                   "Dense"]
    assert [layer.activation for layer in model.layers] == ["relu", "relu", "relu", None]
    assert [[s.op for s in steps] for steps in model.between] == [
        ["MaxPool"], ["MaxPool", "Reshape" if "legacy" not in name else "Flatten"], []]
    assert net.layer_shapes(model, (1, 8, 8)) == [(1, 8, 8), (8, 4, 4), (64,), (32,), (10,)]
    # The float32 evaluation of the imported network (binary16 weights) against onnxruntime
    # on the original file.
    x = np.load(os.path.join(CNN, "lenet_x.npy"))[:40]
    ours = net.reference(model, net.prepare_inputs(model, x).astype(np.float16))
    theirs = _onnxruntime(os.path.join(CNN, name), x)
    assert (ours.argmax(1) == theirs.argmax(1)).mean() >= 0.97
    np.testing.assert_allclose(ours, theirs, atol=0.1)


@pytest.mark.parametrize("pool", ["MaxPool", "AveragePool"])
def test_batchnorm_folds_into_the_convolution(tmp_path, seed, pool):
    from sw.compiler import onnx_import
    rng = np.random.default_rng(seed)
    path = tiny_cnn(tmp_path / "bn.onnx", rng, bn=True, pool=pool)
    model = onnx_import.load(path)
    assert "BatchNormalization 'bn'" in model.layers[0].name
    x = rng.standard_normal((3, 2, 5, 6)).astype(np.float16)
    ours = net.reference(model, x)
    theirs = _onnxruntime(path, x.astype(np.float32))
    # binary16 weights after the fold: a few units in the last place of binary16
    np.testing.assert_allclose(ours, theirs, rtol=0.02, atol=0.05)


def test_global_average_pool_and_a_stride_two_convolution(tmp_path, seed):
    # Conv (stride 2, asymmetric pads) -> Relu -> GlobalAveragePool -> Flatten -> Gemm, and
    # the golden run of the imported network against onnxruntime.
    from sw.compiler import onnx_import
    rng = np.random.default_rng(seed)
    wc = rng.standard_normal((5, 3, 3, 3)).astype(np.float16).astype(np.float32)
    wf = rng.standard_normal((4, 5)).astype(np.float16).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wc"], ["c"], strides=[2, 2], pads=[0, 1, 2, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 9, 7])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 4])], initializer=[_t("wc", wc), _t("wf", wf)])
    path = tmp_path / "gap.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    model = onnx_import.load(path)
    assert model.layers[0].stride == (2, 2) and model.layers[0].pads == (0, 1, 2, 1)
    assert [s.op for s in model.between[0]] == ["GlobalAveragePool", "Flatten"]
    x = rng.standard_normal((3, 3, 9, 7)).astype(np.float16)
    np.testing.assert_allclose(net.reference(model, x), _onnxruntime(path, x.astype(np.float32)),
                               rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("attrs, match", [
    (dict(dilations=[2, 2]), "dilations [2, 2] are not supported"),
    (dict(group=2), "group = 2; grouped and depthwise convolutions are not supported"),
    (dict(auto_pad="SAME_UPPER", pads=None), "auto_pad SAME_UPPER"),
    (dict(kernel_shape=[2, 2]), "kernel_shape [2, 2] disagrees"),
])
def test_unsupported_convolutions_are_refused_naming_the_node(tmp_path, seed, attrs, match):
    from sw.compiler import onnx_import
    rng = np.random.default_rng(seed)
    extra = {k: v for k, v in attrs.items() if v is not None}
    path = tiny_cnn(tmp_path / "bad.onnx", rng, c=4, conv_attrs=extra)
    if "pads" in attrs:                        # auto_pad and pads do not go together
        m = onnx.load(str(path))
        conv = m.graph.node[0]
        keep = [a for a in conv.attribute if a.name != "pads"]
        del conv.attribute[:]
        conv.attribute.extend(keep)
        onnx.save(m, str(path))
    with pytest.raises(FdpuError) as err:
        onnx_import.load(path)
    assert "node Conv 'conv'" in str(err.value) and match in str(err.value), str(err.value)


def test_shapes_that_do_not_chain_are_refused_at_load(tmp_path, seed):
    from sw.compiler import onnx_import
    rng = np.random.default_rng(seed)
    # The Gemm expects the features of 5 x 6 images; 9 x 9 ones flatten to more.
    path = tiny_cnn(tmp_path / "m.onnx", rng, in_shape=["N", 2, 9, 9])
    with pytest.raises(FdpuError, match="node Gemm 'fc': takes N x 18 inputs, but gets N x 48"):
        onnx_import.load(path)
    path = tiny_cnn(tmp_path / "m1.onnx", rng, in_shape=["N", 3, 5, 6])
    with pytest.raises(FdpuError, match="takes N x 2 x H x W"):
        onnx_import.load(path)


def test_two_relus_and_a_batchnorm_first_are_refused(tmp_path, seed):
    from sw.compiler import onnx_import
    rng = np.random.default_rng(seed)
    path = tiny_cnn(tmp_path / "m.onnx", rng)
    m = onnx.load(str(path))
    relu = next(n for n in m.graph.node if n.op_type == "Relu")
    relu.output[0] = "r0"
    m.graph.node.insert(2, helper.make_node("Relu", ["r0"], ["r"], name="again"))
    onnx.save(m, str(path))
    with pytest.raises(FdpuError, match="node Relu 'again': a Relu must follow an FC layer"):
        onnx_import.load(path)


def test_golden_lenet_accuracy_equals_float32_and_onnxruntime(tmp_path, capsys):
    # Every held-out image: FDPU's top-1 (binary16 on the golden model) within 0.5 point of
    # the float32 evaluation, and onnxruntime's agreement on the scores.
    xs, ys = os.path.join(CNN, "lenet_x.npy"), os.path.join(CNN, "lenet_y.npy")
    status, text, err = run(capsys, "net", os.path.join(CNN, LENETS[0]), "--inputs", xs,
                            "--labels", ys, "--reference", "onnxruntime", "--json",
                            tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["N"] == 360 and rec["match"]
    assert abs(rec["accuracy"] - rec["accuracy_float32"]) <= 0.005
    assert rec["accuracy"] >= 0.95
    assert rec["onnxruntime"]["output"]["max_abs_difference"] < 0.25
    assert rec["host_steps"]["between"][0] == ["MaxPool 'node_max_pool2d'"]
    conv0 = rec["layers"][0]
    assert conv0["conv"].startswith("8 x 1 x 3 x 3") and conv0["N"] == 360 * 64
    assert conv0["input_shape"] == [360, 1, 8, 8] and conv0["output_shape"] == [360, 8, 8, 8]
    assert "host steps between layers 1 and 2" in text and "unrolled rows" in text


def test_model_reports_the_convolutions_own_minimum(tmp_path, capsys, seed):
    rng = np.random.default_rng(seed)
    path = tiny_cnn(tmp_path / "m.onnx", rng)
    status, text, err = run(capsys, "net", path, "--sim", "model", "--batch", "8", "--mode",
                            "dense", "--json", tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    conv0, fc = rec["layers"]
    # The layer's minimum: its weights once, the 8 images once, its outputs once; the run
    # moved the unrolled rows (9 positions a pixel, less at the borders) instead.
    weights = conv0["min_external_bytes"] - 2 * 8 * (2 * 5 * 6 + 3 * 5 * 6)
    assert weights == 2 * 3 * 18
    assert conv0["input_bytes"] == 2 * 8 * 2 * 5 * 6
    assert conv0["unrolled_input_bytes"] == 2 * 8 * 30 * 18
    assert conv0["external_bytes"] > conv0["min_external_bytes"]
    assert rec["links"][0]["on_chip"] is False
    assert "MaxPool" in rec["links"][0]["streamed_because"]
    assert fc["C"] == 18


def test_bad_cnn_inputs_are_one_line_errors(tmp_path, capsys, seed):
    rng = np.random.default_rng(seed)
    path = tiny_cnn(tmp_path / "m.onnx", rng)
    np.save(tmp_path / "x.npy", np.zeros((2, 3, 5, 6), np.float32))
    assert_user_error(capsys, "net", path, "--inputs", tmp_path / "x.npy",
                      match="takes N x 2 x 5 x 6")
    open_size = tiny_cnn(tmp_path / "o.onnx", rng, in_shape=["N", 2, "H", "W"])
    assert_user_error(capsys, "net", open_size, "--batch", "2",
                      match="leaves its input's image size open")
    np.save(tmp_path / "big.npy", np.zeros((1, 2, 9, 9), np.float32))
    assert_user_error(capsys, "net", open_size, "--inputs", tmp_path / "big.npy",
                      match="takes N x 18 inputs, but gets N x 48")
    assert_user_error(capsys, "net", path, "--chain", "--sim", "model",
                      match="cannot be chained on chip: the host works between them")


ONE = ("--rows", "1", "--cols", "1", "--slots", "32", "--dbuf-bytes", "4096")
# The 2 x 2 top of tests/test_chain.py (one Verilator build for both).
TWO = ("--rows", "2", "--cols", "2", "--slots", "32", "--dbuf-bytes", "8192", "--operand-depth",
       "4", "--int-issue", "1", "--dma-channels", "2", "--config-ports", "1")


@pytest.mark.parametrize("sim, small", [
    # Each array on one simulator in CI, both under -m slow.
    ("icarus", ONE),
    ("verilator", TWO),
    pytest.param("verilator", ONE, marks=pytest.mark.slow),
    pytest.param("icarus", TWO, marks=pytest.mark.slow),
])
def test_rtl_cnn_bit_exact(tmp_path, capsys, seed, sim, small):
    # A convolution with bias and ReLU, max pooling and an FC layer: every layer's outputs on
    # the RTL equal the golden model's bit for bit, and the network's outputs equal the
    # golden run's of the same network.
    rng = np.random.default_rng(seed)
    path = tiny_cnn(tmp_path / "m.onnx", rng)
    x = rng.uniform(0, 1, (1, 2, 5, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    status, text, err = run(capsys, "net", path, "--inputs", tmp_path / "x.npy", "--sim", sim,
                            *small, "--out", tmp_path / "y.npy", "--json", tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert [r["match"] for r in rec["layers"]] == [True, True]
    assert rec["layers"][0]["N"] == 30 and rec["layers"][0]["rtl_instructions"] == \
        rec["layers"][0]["golden_instructions"]
    status, _, err = run(capsys, "net", path, "--inputs", tmp_path / "x.npy", *small,
                         "--out", tmp_path / "g.npy")
    assert status == 0, err
    assert np.array_equal(np.load(tmp_path / "y.npy").view(np.uint16),
                          np.load(tmp_path / "g.npy").view(np.uint16))
