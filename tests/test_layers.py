"""Tests of the layer zoo (sw/compiler/layers.py): shapes and densities, synthetic weights and
inputs, seed determinism, and validation of the user's .npy files."""

import pickle

import numpy as np
import pytest

from sw.compiler import layers
from sw.spec.errors import FdpuError

PAPER = {
    "alexnet-fc6": ("AlexNet", 9216, 4096, 0.09),
    "alexnet-fc7": ("AlexNet", 4096, 4096, 0.09),
    "alexnet-fc8": ("AlexNet", 4096, 1000, 0.25),
    "vgg16-fc6": ("VGG-16", 25088, 4096, 0.04),
    "vgg16-fc7": ("VGG-16", 4096, 4096, 0.04),
    "vgg16-fc8": ("VGG-16", 4096, 1000, 0.23),
}


#: AlexNet's convolution layers: (C, H = W, K, R = S, stride, pad, density, P = Q).
CONVS = {
    "alexnet-conv1": (3, 227, 96, 11, 4, 0, 0.84, 55),
    "alexnet-conv2": (96, 27, 256, 5, 1, 2, 0.38, 27),
    "alexnet-conv3": (256, 13, 384, 3, 1, 1, 0.35, 13),
    "alexnet-conv4": (384, 13, 384, 3, 1, 1, 0.37, 13),
    "alexnet-conv5": (384, 13, 256, 3, 1, 1, 0.37, 13),
}


def test_zoo_matches_the_paper():
    assert layers.layer_names() == tuple(PAPER) + tuple(CONVS)
    for name, (network, c, k, density) in PAPER.items():
        spec = layers.get_layer(name)
        assert (spec.network, spec.in_features, spec.out_features, spec.density) == \
            (network, c, k, density)
        assert spec.shape == (k, c) and spec.weights == k * c and spec.dense_bytes == 2 * k * c
    assert layers.get_layer("vgg16-fc6").weights == 102_760_448
    with pytest.raises(AttributeError):
        layers.get_layer("vgg16-fc6").density = 0.5


def test_zoo_convolutions_are_alexnets():
    for name, (c, hw, k, r, stride, pad, density, pq) in CONVS.items():
        spec = layers.get_layer(name)
        g = spec.conv
        assert (spec.in_features, spec.out_features, spec.density) == (c * r * r, k, density)
        assert (g.channels, g.height, g.width, g.kernel, g.stride, g.pads) == \
            (c, hw, hw, (r, r), (stride, stride), (pad,) * 4)
        assert g.output == (pq, pq) and spec.rows(3) == 3 * pq * pq
    assert layers.get_layer("alexnet-fc8").conv is None
    assert layers.get_layer("alexnet-fc8").rows(5) == 5


def test_conv_layer_inputs_are_unrolled_images(seed):
    from sw.compiler import conv
    spec = layers.get_layer("alexnet-conv3")
    x = layers.make_layer_inputs(spec, 2, seed)
    assert x.shape == (2 * 169, 2304) and x.dtype == np.float16
    images = layers._activations((2, 256 * 13 * 13), seed).reshape(2, 256, 13, 13)
    assert np.array_equal(x, conv.unroll(spec.conv, images))
    assert (x >= 0).all() and 0.3 < (x == 0).mean() < 0.7     # ReLU-like, zero padding


def test_get_layer_names():
    assert layers.get_layer(" VGG16_FC7 ").name == "vgg16-fc7"
    with pytest.raises(FdpuError, match="unknown layer 'resnet'; known layers: alexnet-fc6, "
                                        "alexnet-fc7, alexnet-fc8, vgg16-fc6"):
        layers.get_layer("resnet")


def test_make_weights_shape_density_and_seed():
    w = layers.make_weights((64, 100), 0.1, seed=5)
    assert w.dtype == np.float16 and w.shape == (64, 100)
    assert np.count_nonzero(w) == 640
    assert np.array_equal(w, layers.make_weights((64, 100), 0.1, seed=5))
    assert not np.array_equal(w, layers.make_weights((64, 100), 0.1, seed=6))
    dense = layers.make_weights((64, 100), 1.0, seed=5)
    assert np.array_equal(w[w != 0], dense[w != 0])      # pruning keeps the same weights
    assert 0.08 < float(dense.astype(np.float64).std()) < 0.2   # He-normal: sqrt(2/100)
    assert np.abs(w[w != 0]).min() >= np.abs(dense[w == 0]).max()


def test_make_weights_of_a_zoo_layer():
    w = layers.make_weights("alexnet-fc8", seed=0)
    spec = layers.get_layer("alexnet-fc8")
    assert w.shape == (1000, 4096) and np.count_nonzero(w) == spec.nnz == 1_024_000
    assert layers.make_weights(spec, 0.5, seed=0).shape == (1000, 4096)


@pytest.mark.parametrize("args, what", [
    (((4, 4), None, 0), "density is required"),
    (((4, 4), 1.5, 0), "density must be in"),
    (((4, 0), 0.5, 0), "C \\(in_features\\) must be a positive integer"),
    (((4,), 0.5, 0), "shape must be"),
    (((4, 4), 0.5, -1), "seed must be a non-negative integer"),
    (("nope", None, 0), "unknown layer"),
])
def test_make_weights_rejects(args, what):
    with pytest.raises(FdpuError, match=what):
        layers.make_weights(*args)


def test_make_inputs():
    x = layers.make_inputs(50, batch=8, seed=2)
    assert x.dtype == np.float16 and x.shape == (8, 50)
    assert (x >= 0).all() and not np.signbit(x).any()
    assert 0.3 < np.mean(x == 0) < 0.7
    assert np.array_equal(x, layers.make_inputs(50, 8, 2))
    assert not np.array_equal(x, layers.make_inputs(50, 8, 3))
    with pytest.raises(FdpuError, match="batch must be a positive integer"):
        layers.make_inputs(50, 0)
    with pytest.raises(FdpuError, match="seed must be"):
        layers.make_inputs(50, 1, seed=1.5)


def test_load_weights(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    np.save(tmp_path / "w.npy", w)
    got = layers.load_weights(tmp_path / "w.npy")
    assert got.dtype == np.float16 and np.array_equal(got, w.astype(np.float16))


@pytest.mark.parametrize("data, what", [
    (np.ones(4, dtype=np.float32), "weights must be 2-D \\(K x C\\), got 1-D"),
    (np.ones((2, 2, 2), dtype=np.float32), "got 3-D"),
    (np.ones((2, 2), dtype=np.int32), "dtype is int32; allowed: float16, float32, float64"),
    (np.ones((2, 0), dtype=np.float32), "empty"),
    (np.array([[1.0, np.nan]]), "NaN or infinity"),
    (np.array([[1.0, np.inf]]), "NaN or infinity"),
    (np.array([[1.0, 1e6]]), "float16 range"),
])
def test_load_weights_rejects(tmp_path, data, what):
    path = tmp_path / "bad.npy"
    np.save(path, data)
    with pytest.raises(FdpuError, match="bad.npy: .*" + what):
        layers.load_weights(path)


def test_load_rejects_non_npy_files(tmp_path):
    np.savez(tmp_path / "a.npz", w=np.ones((2, 2)))
    with pytest.raises(FdpuError, match="a.npz: is an .npz archive"):
        layers.load_weights(tmp_path / "a.npz")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(FdpuError,
                       match=r"obj.npy: dtype object \(pickled Python objects\) is not allowed"):
        layers.load_weights(tmp_path / "obj.npy")
    (tmp_path / "text.npy").write_text("1 2 3\n")
    with pytest.raises(FdpuError, match="text.npy: not a .npy array file"):
        layers.load_weights(tmp_path / "text.npy")
    (tmp_path / "p.npy").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(FdpuError, match="p.npy: not a .npy array file"):
        layers.load_inputs(tmp_path / "p.npy", 2)
    with pytest.raises(FileNotFoundError):
        layers.load_weights(tmp_path / "missing.npy")


def test_load_inputs(tmp_path):
    np.save(tmp_path / "x1.npy", np.arange(5, dtype=np.float64))
    got = layers.load_inputs(tmp_path / "x1.npy", 5)
    assert got.shape == (1, 5) and got.dtype == np.float16
    np.save(tmp_path / "x2.npy", np.ones((3, 5), dtype=np.float16))
    assert layers.load_inputs(tmp_path / "x2.npy", 5).shape == (3, 5)
    with pytest.raises(FdpuError, match="x2.npy: inputs have 5 columns but the weights have "
                                        "C = 6; inputs must be N x 6"):
        layers.load_inputs(tmp_path / "x2.npy", 6)
    np.save(tmp_path / "x3.npy", np.ones((1, 3, 5)))
    with pytest.raises(FdpuError, match="x3.npy: inputs must be 1-D \\(C\\) or 2-D"):
        layers.load_inputs(tmp_path / "x3.npy", 5)
    np.save(tmp_path / "x4.npy", np.array([1.0, -np.inf, 0, 0, 0]))
    with pytest.raises(FdpuError, match="x4.npy: inputs contain NaN or infinity"):
        layers.load_inputs(tmp_path / "x4.npy", 5)
