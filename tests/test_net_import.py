"""Networks: the .npz layout and the ONNX importer (models built here with onnx.helper)."""

import os
import re

import numpy as np
import pytest

from sw.compiler import net
from sw.spec.errors import FdpuError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(20261203)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def _model(nodes, inits, c, k, path, in_shape=None):
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape or ["N", c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", k])],
        initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


def test_gemm_transb_relu_chain(tmp_path):
    w1 = RNG.standard_normal((8, 12)).astype(np.float16).astype(np.float32)   # K x C
    b1 = RNG.standard_normal(8).astype(np.float16).astype(np.float32)
    w2 = RNG.standard_normal((8, 3)).astype(np.float16).astype(np.float32)    # C x K
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2")]
    p = _model(nodes, [_init("w1", w1), _init("b1", b1), _init("w2", w2)], 12, 3,
               tmp_path / "m.onnx")
    n = onnx_load(p)
    assert [(l.K, l.C, l.activation) for l in n.layers] == [(8, 12, "relu"), (3, 8, None)]
    assert n.layers[1].bias is None
    x = RNG.standard_normal((5, 12)).astype(np.float16)
    want = np.maximum(x.astype(np.float32) @ w1.T + b1, 0) @ w2
    np.testing.assert_allclose(net.reference(n, x), want, rtol=1e-5, atol=1e-5)


def onnx_load(path):
    from sw.compiler import onnx_import
    return onnx_import.load(path)


def test_gemm_alpha_beta_and_matmul_add(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 8                      # C x K
    c = np.array([[1.0, -1.0]], np.float32)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "w", "c"], ["g"], alpha=2.0, beta=0.5),
             helper.make_node("MatMul", ["g", "v"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    v = np.eye(2, dtype=np.float32)
    p = _model(nodes, [_init("w", w), _init("c", c), _init("v", v), _init("b", [0.25, 0.5])],
               3, 2, tmp_path / "m.onnx")
    n = onnx_load(p)
    np.testing.assert_array_equal(n.layers[0].weights, (2 * w.T).astype(np.float16))
    np.testing.assert_array_equal(n.layers[0].bias, np.array([0.5, -0.5], np.float16))
    np.testing.assert_array_equal(n.layers[1].bias, np.array([0.25, 0.5], np.float16))


@pytest.mark.parametrize("case, match", [
    ("unsupported", "node LeakyRelu 'bad' is not supported"),
    ("computed", "must be an initializer"),
    ("transA", "transA = 1"),
    ("mismatch", "takes C = 5 inputs but"),
    ("branch", "feeds 2 nodes"),
    ("bias", "does not broadcast"),
    ("relu_first", "a Relu must follow an FC layer"),
])
def test_bad_models(tmp_path, case, match):
    w = np.ones((4, 6), np.float32)
    nodes, inits, c, k = {
        "unsupported": ([helper.make_node("LeakyRelu", ["x"], ["y"], name="bad")], [], 6, 6),
        "computed": ([helper.make_node("Gemm", ["x", "x"], ["y"])], [], 6, 6),
        "transA": ([helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)], [_init("w", w)],
                   6, 4),
        "mismatch": ([helper.make_node("Gemm", ["x", "w"], ["h"], transB=1),
                      helper.make_node("Gemm", ["h", "v"], ["y"], transB=1)],
                     [_init("w", w), _init("v", np.ones((2, 5), np.float32))], 6, 2),
        "branch": ([helper.make_node("Gemm", ["x", "w"], ["h"], transB=1),
                    helper.make_node("Relu", ["h"], ["y"]),
                    helper.make_node("Relu", ["h"], ["z"])], [_init("w", w)], 6, 4),
        "bias": ([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)],
                 [_init("w", w), _init("c", np.ones(3))], 6, 4),
        "relu_first": ([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Gemm", ["r", "w"], ["y"], transB=1)],
                       [_init("w", w)], 6, 4),
    }[case]
    p = _model(nodes, inits, c, k, tmp_path / "m.onnx")
    with pytest.raises(FdpuError, match=match):
        onnx_load(p)


def test_add_after_a_gemm_without_bias_is_its_bias(tmp_path):
    w = RNG.standard_normal((4, 6)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["g"], transB=1),
             helper.make_node("Add", ["g", "b"], ["y"])]
    n = onnx_load(_model(nodes, [_init("w", w), _init("b", [1, 2, 3, 4])], 6, 4,
                         tmp_path / "m.onnx"))
    np.testing.assert_array_equal(n.layers[0].bias, np.array([1, 2, 3, 4], np.float16))


def test_not_onnx(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x00\x01 not a protobuf" * 10)
    with pytest.raises(FdpuError, match="not a readable ONNX model"):
        onnx_load(p)


def test_npz_layout(tmp_path):
    w0, w1 = np.ones((4, 6), np.float32), np.ones((2, 4), np.float32)
    np.savez(tmp_path / "n.npz", W0=w0, b0=np.zeros(4), W1=w1)
    n = net.from_npz(tmp_path / "n.npz")
    assert [(l.K, l.C, l.activation) for l in n.layers] == [(4, 6, "relu"), (2, 4, None)]
    np.savez(tmp_path / "a.npz", W0=w0, W1=w1, act=np.array(["none", "relu"]))
    assert [l.activation for l in net.from_npz(tmp_path / "a.npz").layers] == [None, "relu"]
    for kwargs, match in ((dict(W0=w0, W2=w1), "without gaps"),
                          (dict(W0=w0, W1=np.ones((2, 5))),
                           r"bad.npz: W1 takes C = 5 inputs but W0 gives K = 4 outputs$"),
                          (dict(W0=np.ones((1, 70000))), "in_features C = 70,000 exceeds"),
                          (dict(W0=w0, x=w0), "unexpected key"),
                          (dict(W0=w0, b0=np.ones(3)), "bias has 3 values"),
                          (dict(W0=w0 * np.inf), "NaN or infinity"),
                          (dict(W0=w0 * 1e6), "binary16 range"),
                          (dict(W0=w0, act=np.array(["tanh"])), "allowed: relu, none")):
        np.savez(tmp_path / "bad.npz", **kwargs)
        with pytest.raises(FdpuError, match=match):
            net.from_npz(tmp_path / "bad.npz")


def test_digits_example_ships_and_imports_alike():
    """The shipped digits MLP (scripts/train_digits.py): its .npz and .onnx give the same
    binary16 network, whose float32 evaluation classifies the 360 test images."""
    import os
    from sw.compiler import onnx_import
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "digits")
    a = net.from_npz(os.path.join(here, "digits.npz"))
    b = onnx_import.load(os.path.join(here, "digits.onnx"))
    assert [(l.K, l.C, l.activation) for l in a.layers] == [
        (256, 64, "relu"), (128, 256, "relu"), (10, 128, None)]
    for p, q in zip(a.layers, b.layers):
        assert np.array_equal(p.weights, q.weights) and np.array_equal(p.bias, q.bias)
    assert [int(np.count_nonzero(l.weights)) for l in a.layers] == [1475, 2949, 320]
    x = np.load(os.path.join(here, "test_x.npy"))
    y = np.load(os.path.join(here, "test_y.npy"))
    assert (net.reference(a, x).argmax(axis=1) == y).mean() > 0.95


# External data ------------------------------------------------------------------------------

def _external_model(folder, w, location="weights.bin"):
    """Save a one-layer Gemm model in ``folder`` with ``w`` (K x C) in external data."""
    folder.mkdir(parents=True, exist_ok=True)
    k, c = w.shape
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", k])],
                          initializer=[_init("w", w)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def _weights(seed, shape=(6, 10)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16) \
        .astype(np.float32)


def test_external_data_is_read_from_the_model_folder(tmp_path, monkeypatch):
    # Two models in sibling folders, each with its own weights.bin: each loads its own, from
    # any current directory (they used to be read relative to the current directory).
    wa, wb = _weights(1), _weights(2)
    pa = _external_model(tmp_path / "a", wa)
    pb = _external_model(tmp_path / "b", wb)
    for cwd in (tmp_path / "a", tmp_path / "b", tmp_path):
        monkeypatch.chdir(cwd)
        assert np.array_equal(onnx_load(pa).layers[0].weights, wa.astype(np.float16))
        assert np.array_equal(onnx_load(pb).layers[0].weights, wb.astype(np.float16))


def test_torch_style_data_file_by_absolute_path(tmp_path, monkeypatch):
    w = _weights(3)
    p = _external_model(tmp_path / "export", w, location="model.onnx.data")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert np.array_equal(onnx_load(p.resolve()).layers[0].weights, w.astype(np.float16))


def _set_location(path, location, length=None):
    m = onnx.load(str(path), load_external_data=False)
    t = m.graph.initializer[0]
    for e in t.external_data:
        if e.key == "location":
            e.value = location
        if e.key == "length" and length is not None:
            e.value = str(length)
    onnx.save_model(m, str(path))


@pytest.mark.parametrize("case, match", [
    ("absolute", "is absolute; it must be a file in the model's folder"),
    ("dotdot", "leaves the model's folder"),
    ("symlink-out", "leaves the model's folder"),
    ("missing", "No such file or directory"),
    ("folder", "is not a regular file"),
    ("fifo", "is not a regular file"),
    ("short", "the tensor needs 240 from offset 0"),
    ("length", "external data length 8 bytes, but its shape (6, 10) needs 240"),
])
def test_bad_external_data_is_refused_before_reading(tmp_path, case, match):
    p = _external_model(tmp_path / "m", _weights(4))
    outside = tmp_path / "outside.bin"
    outside.write_bytes(bytes(240))
    if case == "absolute":
        _set_location(p, str(outside))
    elif case == "dotdot":
        _set_location(p, "../outside.bin")
    elif case == "symlink-out":
        (tmp_path / "m" / "link.bin").symlink_to(outside)
        _set_location(p, "link.bin")
    elif case == "missing":
        _set_location(p, "gone.bin")
    elif case == "folder":
        (tmp_path / "m" / "dir.bin").mkdir()
        _set_location(p, "dir.bin")
    elif case == "fifo":
        os.mkfifo(tmp_path / "m" / "pipe.bin")          # opening it would block: never opened
        _set_location(p, "pipe.bin")
    elif case == "short":
        (tmp_path / "m" / "weights.bin").write_bytes(bytes(100))
    elif case == "length":
        _set_location(p, "weights.bin", length=8)
    with pytest.raises(FdpuError, match=re.escape(match)) as err:
        onnx_load(p)
    assert "initializer 'w'" in str(err.value)


def test_net_cli_runs_external_data_from_another_folder(tmp_path, monkeypatch, capsys):
    from cliutil import run
    w = _weights(5, (4, 8))
    p = _external_model(tmp_path / "model", w)
    other = tmp_path / "other"
    other.mkdir()
    (other / "weights.bin").write_bytes(bytes(4 * 8 * 4))       # a decoy: zeros
    monkeypatch.chdir(other)
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float16)
    np.save(other / "x.npy", x)
    out = other / "y.npy"
    status, stdout, err = run(capsys, "net", p, "--inputs", other / "x.npy", "--rows", 1,
                              "--cols", 1, "--out", out)
    assert status == 0, err
    want = x.astype(np.float32) @ w.T
    np.testing.assert_allclose(np.load(out).astype(np.float32), want, rtol=2e-2, atol=2e-2)


def _whole(tmp_path, name, nodes=None, inits=None, in_type=TensorProto.FLOAT, opset=13,
           in_shape=(None, 8)):
    w = numpy_helper.from_array(np.ones((4, 8), np.float32), "W")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "B")
    nodes = nodes or [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", in_type,
                                                                     list(in_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
                          inits if inits is not None else [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def _tensor(array, name="W", **fields):
    t = numpy_helper.from_array(array, name)
    for k, v in fields.items():
        if k == "dims":
            t.dims[:] = v
        else:
            setattr(t, k, v)
    return t


_B = numpy_helper.from_array(np.zeros(4, np.float32), "B")
_ONES = np.ones((4, 8), np.float32)


@pytest.mark.parametrize("case, match", [
    (dict(inits=[_tensor(np.ones((4, 8), np.complex64)), _B]), "element type COMPLEX64"),
    (dict(inits=[_tensor(np.ones((4, 8), bool)), _B]), "element type BOOL"),
    (dict(inits=[_tensor(_ONES, data_type=99), _B]), "element type 99 is not supported"),
    (dict(inits=[_tensor(_ONES, dims=[4, 9]), _B]), "do not match its dimensions [4, 9]"),
    (dict(inits=[_tensor(_ONES, dims=[-4, -8]), _B]), "negative dimension"),
    (dict(inits=[_tensor(_ONES, dims=[1 << 40, 8]), _B]), "exceed the size limit"),
    (dict(nodes=[helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB="yes")]),
     "attribute 'transB' is of type STRING; Gemm takes INT"),
    (dict(nodes=[helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=[1, 0])]),
     "attribute 'transB' is of type INTS"),
    (dict(nodes=[helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=2)]),
     "transB = 2; it is 0 or 1"),
    (dict(nodes=[helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1, gamma=1.0)]),
     "attribute 'gamma' is not one of Gemm's"),
    (dict(nodes=[helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1,
                                  domain="com.evil")]), "domain 'com.evil' is not supported"),
    (dict(nodes=[helper.make_node("Frobnicate", ["x"], ["y"])]),
     "ONNX defines no operator 'Frobnicate'"),
    (dict(nodes=[helper.make_node("Relu", ["h"], ["y"]), helper.make_node("Relu", ["y"],
                                                                          ["h"])]),
     "reads 'h' before any node makes it (a cycle, or nodes out of order)"),
    (dict(opset=999), "opset 999 of the default domain"),
    (dict(in_type=TensorProto.INT64), "input 'x' is of type INT64"),
])
def test_a_model_is_checked_as_a_whole_before_use(tmp_path, capsys, case, match):
    # Invalid ONNX that was accepted (complex or bool weights, bad attributes, a foreign
    # domain, opset 999, an integer input) or a traceback (data against dims, unknown types,
    # a cycle): one error line naming the node, tensor or input.
    from cliutil import assert_user_error
    path = _whole(tmp_path, "m", **case)
    assert_user_error(capsys, "net", path, "--batch", "2", match=match)


@pytest.mark.parametrize("bias, refused", [(1e6, True), (0.5, False)])
def test_a_refused_model_gets_its_error_line_alone(tmp_path, capsys, bias, refused):
    # The weights hold a value binary16 rounds to zero (a warning) and, refused, a bias beyond
    # its range (an error): the error comes alone, the warning only with an accepted model.
    from cliutil import assert_user_error, run
    w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    w[0, 0] = 1e-9
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")]
    p = _model(nodes, [_init("w", w), _init("b", np.full(4, bias))], 8, 4, tmp_path / "m.onnx")
    if refused:
        assert_user_error(capsys, "net", p, "--batch", 2, match="bias: values beyond the "
                                                                 "binary16 range")
        return
    status, _, err = run(capsys, "net", p, "--batch", 2)
    assert status == 0 and err.count("fdpu: warning:") == 1 and "round to zero" in err, err


def test_a_refused_layer_gets_its_error_line_alone(tmp_path, capsys):
    # fdpu run: weights with a value binary16 rounds to zero, inputs of the wrong width.
    from cliutil import assert_user_error
    w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    w[0, 0] = 1e-9
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "x.npy", np.ones((2, 5), np.float32))
    assert_user_error(capsys, "run", "--weights", tmp_path / "w.npy", "--inputs",
                      tmp_path / "x.npy", match="x.npy")


def test_an_accepted_model_with_refused_inputs_gets_the_error_line_alone(tmp_path, capsys):
    from cliutil import assert_user_error
    w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    w[0, 0] = 1e-9
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")]
    p = _model(nodes, [_init("w", w)], 8, 4, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 5), np.float32))
    assert_user_error(capsys, "net", p, "--inputs", tmp_path / "x.npy", match="x.npy")
