"""Convolution as matrix multiplication (sw.compiler.conv) and pooling on the host
(sw.compiler.host_steps), against a float64 definition and onnxruntime."""

import numpy as np
import pytest

from sw.compiler import conv
from sw.compiler.host_steps import HostStep
from sw.compiler.net import Conv
from sw.spec.errors import FdpuError


def _layer(rng, k, c, r, s, stride=(1, 1), pads=(0, 0, 0, 0), bias=True, relu=False):
    w = rng.standard_normal((k, c, r, s)).astype(np.float16)
    b = rng.standard_normal(k).astype(np.float16) if bias else None
    return Conv(w, b, "relu" if relu else None, stride, pads, name="c")


#: (K, C, R, S, stride, pads top/left/bottom/right, H, W): odd sizes, stride 2, padding
#: (asymmetric too), 1 x 1 kernels, one channel and many.
SHAPES = [
    (3, 1, 3, 3, (1, 1), (1, 1, 1, 1), 7, 5),
    (4, 5, 3, 3, (2, 2), (1, 1, 1, 1), 9, 11),
    (2, 3, 1, 1, (1, 1), (0, 0, 0, 0), 4, 6),
    (6, 16, 1, 1, (2, 1), (0, 0, 0, 0), 5, 5),
    (5, 2, 5, 3, (2, 3), (2, 0, 1, 2), 10, 8),
    (1, 32, 3, 3, (1, 1), (0, 0, 0, 0), 3, 3),
    (7, 3, 2, 4, (3, 2), (0, 1, 2, 0), 8, 9),
]


@pytest.mark.parametrize("k, c, r, s, stride, pads, h, w", SHAPES)
def test_unrolled_product_is_the_convolution(seed, k, c, r, s, stride, pads, h, w):
    # The array's product (unrolled inputs by the K x (C R S) matrix), folded back, equals the
    # convolution computed from its definition, both in float64.
    rng = np.random.default_rng(seed)
    layer = _layer(rng, k, c, r, s, stride, pads)
    x = rng.standard_normal((3, c, h, w)).astype(np.float16)
    p, q = conv.out_size(layer, h, w)
    cols = conv.unroll(layer, x)
    assert cols.shape == (3 * p * q, c * r * s) and cols.dtype == np.float16
    y = cols.astype(np.float64) @ layer.matrix.astype(np.float64).T + layer.bias
    got = conv.fold(layer, y, 3, h, w)
    want = conv.reference(layer, x)
    assert got.shape == want.shape == (3, k, p, q)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k, c, r, s, stride, pads, h, w", SHAPES[:5])
def test_reference_equals_onnxruntime(seed, k, c, r, s, stride, pads, h, w):
    # The float64 definition itself, against onnxruntime's Conv (float32) on the same layer.
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    layer = _layer(rng, k, c, r, s, stride, pads, relu=True)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(stride),
                            pads=list(pads), kernel_shape=[r, s])
    relu = helper.make_node("Relu", ["c"], ["y"])
    g = helper.make_graph([node, relu], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(
                              layer.weights.astype(np.float32), "w"),
                              numpy_helper.from_array(layer.bias.astype(np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(conv.reference(layer, x), theirs, rtol=1e-4, atol=1e-4)


def test_bad_layers_and_inputs_are_refused(seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((2, 3, 3, 3))
    for kwargs, match in ((dict(weights=w[0]), "must be K x C x R x S"),
                          (dict(weights=w, stride=(0, 1)), "strides"),
                          (dict(weights=w, pads=(1, 1, 1)), "pads"),
                          (dict(weights=w, pads=(1, -1, 1, 1)), "pads"),
                          (dict(weights=w, bias=np.ones(3)), "bias has 3 values"),
                          (dict(weights=w * np.inf), "NaN or infinity")):
        with pytest.raises(FdpuError, match=match):
            Conv(name="c", **kwargs)
    layer = Conv(w, name="c")
    with pytest.raises(FdpuError, match="larger than the input of 2 x 5"):
        conv.unroll(layer, np.zeros((1, 3, 2, 5), np.float16))
    with pytest.raises(FdpuError, match="takes N x 3 x H x W inputs"):
        conv.unroll(layer, np.zeros((1, 4, 5, 5), np.float16))


POOLS = [
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1, ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[2, 3], auto_pad="VALID")),
    ("GlobalAveragePool", {}),
]


@pytest.mark.parametrize("op, attrs", POOLS)
def test_pooling_equals_onnxruntime(seed, op, attrs):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    rng = np.random.default_rng(seed)
    for shape in ((2, 3, 7, 7), (1, 2, 8, 9), (2, 1, 5, 6)):
        x = rng.standard_normal(shape).astype(np.float32)
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        g = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        theirs = sess.run(None, {"x": x})[0]
        step_attrs = {k: v.encode() if isinstance(v, str) else v for k, v in attrs.items()}
        ours = HostStep(op, ("x",), ("y",), "p", step_attrs).run({"x": x})[0]
        assert ours.shape == theirs.shape, (shape, ours.shape, theirs.shape)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attrs, match", [
    (dict(kernel_shape=[2, 2], dilations=[2, 2]), "dilations [2, 2] are not supported"),
    (dict(kernel_shape=[2]), "a 2-D pool takes two sizes"),
    (dict(kernel_shape=[9, 9]), "larger than the input"),
    (dict(kernel_shape=[2, 2], auto_pad=b"WRONG"), "auto_pad 'WRONG'"),
])
def test_bad_pools_are_refused(attrs, match):
    with pytest.raises(FdpuError, match=match.replace("[", r"\[").replace("]", r"\]")):
        HostStep("MaxPool", ("x",), ("y",), "p", attrs).run({"x": np.zeros((1, 1, 4, 4))})
    with pytest.raises(FdpuError, match="pools N x C x H x W values"):
        HostStep("MaxPool", ("x",), ("y",), "p", dict(kernel_shape=[2, 2])).run(
            {"x": np.zeros((4, 4))})
    with pytest.raises(FdpuError, match="the indices"):
        HostStep("MaxPool", ("x",), ("y", "i"), "p", dict(kernel_shape=[2, 2])).run(
            {"x": np.zeros((1, 1, 4, 4))})


def test_zoo_convolution_runs_as_its_matrix_multiplication(tmp_path, capsys, seed):
    # fdpu run on a zoo convolution: the rows are the unrolled images, the record gives the
    # convolution's own figures, and --inputs takes images in the layer's shape.
    import json

    from cliutil import assert_user_error, run
    from sw.compiler import layers
    status, text, err = run(capsys, "run", "--sim", "model", "--layer", "alexnet-conv3",
                            "--batch", "2", "--json", tmp_path / "m.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "m.json").read_text())
    assert (rec["K"], rec["C"], rec["N"]) == (384, 2304, 2 * 169)
    assert rec["input_shape"] == [2, 256, 13, 13] and rec["output_shape"] == [2, 384, 13, 13]
    assert rec["input_bytes"] == 2 * 2 * 256 * 169
    assert rec["unrolled_input_bytes"] == 2 * 338 * 2304
    weights = rec["min_external_bytes"] - rec["input_bytes"] - 2 * 2 * 384 * 169
    assert 0 < weights < 2 * 384 * 2304
    assert rec["bound_cycles"] >= rec["compute_cycles"]
    assert "unrolled rows" in text
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 1, (1, 3, 227, 227)).astype(np.float32)
    np.save(tmp_path / "img.npy", images)
    status, _, err = run(capsys, "run", "--layer", "alexnet-conv1", "--inputs",
                         tmp_path / "img.npy", "--density", "0.02", "--json",
                         tmp_path / "g.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "g.json").read_text())
    assert rec["match"] and rec["N"] == 55 * 55 and rec["input_shape"] == [1, 3, 227, 227]
    spec = layers.get_layer("alexnet-conv1")
    np.save(tmp_path / "bad.npy", images[:, :, :200])
    assert_user_error(capsys, "run", "--layer", "alexnet-conv1", "--inputs",
                      tmp_path / "bad.npy", match="alexnet-conv1 takes images N x 3 x 227 x 227")
    assert_user_error(capsys, "run", "--layer", "alexnet-conv1", "--inputs",
                      tmp_path / "img.npy", "--batch", "2", match="holds 1 images")
    assert_user_error(capsys, "run", "--sim", "model", "--layer", "alexnet-conv1", "--batch",
                      "100", match="--batch 100 (alexnet-conv1: one row per output position)")
    assert spec.rows(100) > layers.MAX_BATCH
