"""The layer zoo, seeded synthetic weights and inputs, and loading the user's own ``.npy`` files.

Contract
--------
* :data:`LAYERS` holds the six FC layers of the paper (PAPER.md sections 1 and 7) and
  AlexNet's five convolution layers, with their shapes and Deep Compression densities.  A
  weight matrix is ``K x C`` (``out_features x in_features``); an input batch is ``N x C``;
  the layer computes ``O[n][k] = sum_c F[k][c] * I[n][c]``.  A convolution layer
  (:attr:`LayerSpec.conv`, a :class:`sw.compiler.conv.Geometry`) is that product on its
  unrolled inputs: ``K x (C R S)`` weights, ``N P Q`` rows for a batch of ``N`` images
  (:meth:`LayerSpec.rows`); :func:`make_layer_inputs` gives those rows.
* :func:`make_weights` builds a layer's weights without downloading anything: He-normal float32
  (standard deviation ``sqrt(2 / C)``), cast to float16 (RNE), then magnitude-pruned
  (:func:`sw.compiler.prune.prune`) to exactly ``round(density * K * C)`` kept elements.
  :func:`make_inputs` builds ``N x C`` float16 activations like a ReLU's output: ``max(0, z)``
  with ``z`` standard normal, so about half of them are zero.  Both are pure functions of their
  arguments: the same seed gives the same bits on every machine with the same numpy version
  (PCG64; numpy does not promise identical streams across versions); weights and inputs draw
  from different streams of the seed.
* :func:`load_weights` and :func:`load_inputs` read the user's ``.npy`` files with
  :func:`load_npy` (regular files only, header checked before the data: never pickles, never
  more than :data:`sw.compiler.npyfile.MAX_ARRAY_BYTES`) and check dimension, dtype,
  finiteness and shape agreement; each failure is an :class:`~sw.spec.errors.FdpuError`
  naming the file and what is allowed.  Both return float16 (RNE).
"""

import math
import numbers
import os
import warnings
from dataclasses import dataclass

import numpy as np

from sw.compiler import conv as convolution
from sw.compiler import npyfile
from sw.compiler.prune import check_density, prune
from sw.spec.errors import FdpuError, FdpuWarning
from sw.spec.fp16 import positive_zeros, to_weights

__all__ = ["LayerSpec", "LAYERS", "CONV_LAYERS", "MAX_FEATURES", "MAX_ELEMENTS", "MAX_BATCH",
           "layer_names", "get_layer", "check_sizes", "make_weights", "make_inputs",
           "make_layer_inputs", "load_npy", "load_weights", "load_inputs", "check_inputs",
           "check_images", "load_bias"]


@dataclass(frozen=True)
class LayerSpec:
    """One fully-connected layer of the zoo.

    Attributes
    ----------
    name : str
        Zoo name, e.g. ``"vgg16-fc6"``.
    network : str
        The network it comes from, e.g. ``"VGG-16"``.
    in_features : int
        ``C``, the input length (columns of the weight matrix).
    out_features : int
        ``K``, the output length (rows of the weight matrix).
    density : float
        Fraction of weights kept by Deep Compression pruning, as the paper reports it.
    conv : sw.compiler.conv.Geometry or None
        A convolution layer's shape (``in_features`` is then ``C R S``); ``None``: an FC
        layer.
    """

    name: str
    network: str
    in_features: int
    out_features: int
    density: float
    conv: convolution.Geometry | None = None

    def rows(self, batch):
        """Rows of the layer's input matrix for ``batch`` inputs: ``batch`` for an FC layer,
        ``batch P Q`` (one per output position) for a convolution."""
        return batch if self.conv is None else self.conv.rows(batch)

    @property
    def shape(self):
        """The weight matrix shape ``(K, C)``."""
        return (self.out_features, self.in_features)

    @property
    def weights(self):
        """Number of weights ``K * C``."""
        return self.out_features * self.in_features

    @property
    def dense_bytes(self):
        """Bytes of the dense binary16 weight matrix."""
        return 2 * self.weights

    @property
    def nnz(self):
        """Number of weights kept after pruning to :attr:`density`."""
        return int(round(self.density * self.weights))


#: The paper's layers, by name (C -> K at the paper's density).
LAYERS = {spec.name: spec for spec in (
    LayerSpec("alexnet-fc6", "AlexNet", 9216, 4096, 0.09),
    LayerSpec("alexnet-fc7", "AlexNet", 4096, 4096, 0.09),
    LayerSpec("alexnet-fc8", "AlexNet", 4096, 1000, 0.25),
    LayerSpec("vgg16-fc6", "VGG-16", 25088, 4096, 0.04),
    LayerSpec("vgg16-fc7", "VGG-16", 4096, 4096, 0.04),
    LayerSpec("vgg16-fc8", "VGG-16", 4096, 1000, 0.23),
)}


def _conv_spec(name, k, c, hw, r, stride, pad, density):
    geo = convolution.Geometry(k, c, hw, hw, (r, r), (stride, stride), (pad,) * 4, name)
    return LayerSpec(name, "AlexNet", geo.C, k, density, geo)


#: AlexNet's convolution layers (Krizhevsky et al. 2012; ``groups = 1``: conv2, conv4 and
#: conv5 over all the channels of the layer before, as one tower), pruned to Deep
#: Compression's densities (Han et al., the paper's [3]: 84, 38, 35, 37 and 37 %).
CONV_LAYERS = {spec.name: spec for spec in (
    _conv_spec("alexnet-conv1", 96, 3, 227, 11, 4, 0, 0.84),
    _conv_spec("alexnet-conv2", 256, 96, 27, 5, 1, 2, 0.38),
    _conv_spec("alexnet-conv3", 384, 256, 13, 3, 1, 1, 0.35),
    _conv_spec("alexnet-conv4", 384, 384, 13, 3, 1, 1, 0.37),
    _conv_spec("alexnet-conv5", 256, 384, 13, 3, 1, 1, 0.37),
)}
LAYERS.update(CONV_LAYERS)


def layer_names():
    """Return the zoo's layer names in table order."""
    return tuple(LAYERS)


def get_layer(name):
    """Return the :class:`LayerSpec` called ``name`` (case-insensitive, ``_`` = ``-``).

    Raises
    ------
    FdpuError
        For an unknown name; the message lists the known ones.
    """
    key = str(name).strip().lower().replace("_", "-")
    if key not in LAYERS:
        raise FdpuError(f"unknown layer {name!r}; known layers: {', '.join(LAYERS)}")
    return LAYERS[key]


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise FdpuError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise FdpuError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


#: The largest input length C: a row is counted by one ITER/FACC count (16 bits).
MAX_FEATURES = 0xFFFF
#: The most weights (K x C) and inputs (N x C) a layer may have: 2**28 binary16 values,
#: 512 MiB each (VGG-16 FC6, the zoo's largest, has 102.8 M weights).
MAX_ELEMENTS = 1 << 28
#: The largest batch N (rows of the input matrix: AlexNet conv1 at batch 64 has 193,600).
MAX_BATCH = 1 << 18


def check_sizes(K=None, C=None, N=None, where="layer"):
    """Refuse a layer shape or batch beyond the limits above, before anything is allocated
    (``None`` skips a size); the message gives the limit."""
    if C is not None and C > MAX_FEATURES:
        raise FdpuError(f"{where}: in_features C = {C:,} exceeds {MAX_FEATURES:,} (one ITER/FACC "
                        f"count per row)")
    if N is not None and N > MAX_BATCH:
        raise FdpuError(f"{where}: batch N = {N:,} exceeds {MAX_BATCH:,}")
    for name, a, b in (("weights K x C", K, C), ("inputs N x C", N, C)):
        if a is not None and b is not None and a * b > MAX_ELEMENTS:
            raise FdpuError(f"{where}: {name} = {a:,} x {b:,} = {a * b:,} values exceeds "
                            f"{MAX_ELEMENTS:,} ({MAX_ELEMENTS * 2 >> 20} MiB of binary16)")


def make_weights(spec_or_shape, density=None, seed=0):
    """Return seeded synthetic pruned weights, a ``K x C`` float16 matrix.

    Parameters
    ----------
    spec_or_shape : LayerSpec or str or tuple of int
        A zoo layer (object or name) or a shape ``(K, C)``.
    density : float, optional
        Fraction of weights kept, in [0, 1]; defaults to the layer's density (required with a
        shape).
    seed : int
        Non-negative seed.

    Returns
    -------
    numpy.ndarray
        He-normal weights (std ``sqrt(2 / C)``), cast to float16, magnitude-pruned to
        ``round(density * K * C)`` kept elements.
    """
    if isinstance(spec_or_shape, str):
        spec_or_shape = get_layer(spec_or_shape)
    if isinstance(spec_or_shape, LayerSpec):
        shape = spec_or_shape.shape
        if density is None:
            density = spec_or_shape.density
    else:
        try:
            k, c = spec_or_shape
        except (TypeError, ValueError):
            raise FdpuError(f"weights shape must be a LayerSpec, a layer name or (K, C), "
                            f"got {spec_or_shape!r}") from None
        shape = (_check_positive(k, "K (out_features)"), _check_positive(c, "C (in_features)"))
        check_sizes(K=shape[0], C=shape[1], where="weights")
        if density is None:
            raise FdpuError("density is required when make_weights is given a shape")
    density = check_density(density)
    rng = np.random.default_rng([_check_seed(seed), 0x3E16])
    w = rng.standard_normal(shape, dtype=np.float32)
    w *= np.float32(math.sqrt(2.0 / shape[1]))
    return positive_zeros(prune(w.astype(np.float16), density))


def make_inputs(c, batch=1, seed=0):
    """Return seeded synthetic post-ReLU inputs, an ``N x C`` float16 matrix.

    Parameters
    ----------
    c : int
        Input length ``C``.
    batch : int
        Batch size ``N``.
    seed : int
        Non-negative seed.

    Returns
    -------
    numpy.ndarray
        ``max(0, z)`` with ``z`` standard normal, in float16: non-negative, about half zeros.
    """
    c = _check_positive(c, "C (in_features)")
    batch = _check_positive(batch, "batch")
    check_sizes(C=c, N=batch, where="inputs")
    return _activations((batch, c), seed)


def _activations(shape, seed):
    """Return seeded ``max(0, z)`` of ``shape``, ``z`` standard normal, in float16."""
    rng = np.random.default_rng([_check_seed(seed), 0x1A1A])
    z = rng.standard_normal(shape, dtype=np.float32)
    np.maximum(z, np.float32(0), out=z)
    return z.astype(np.float16)


def make_layer_inputs(spec, batch=1, seed=0):
    """Return the seeded synthetic input rows of zoo layer ``spec`` for ``batch`` inputs:
    :func:`make_inputs` for an FC layer; for a convolution, ``batch`` images of
    :func:`make_inputs`'s values (``C H W`` each), unrolled (:func:`sw.compiler.conv.unroll`,
    zeros in the padding): ``batch P Q`` rows of ``C R S``."""
    if spec.conv is None:
        return make_inputs(spec.in_features, batch, seed)
    g = spec.conv
    check_sizes(C=spec.in_features, N=spec.rows(_check_positive(batch, "batch")),
                where=f"{spec.name}: inputs")
    images = _activations((batch, g.channels * g.height * g.width), seed)
    return convolution.unroll(g, images.reshape(batch, g.channels, g.height, g.width))


def load_npy(path, what="array"):
    """Read one numeric array from the ``.npy`` file ``path``, checked before it is read.

    The file must be a regular file (never opened blocking: a named pipe is refused at once)
    holding one ``.npy`` array: its header (version 1.0 or 2.0) is read first and must declare
    a numeric dtype (bool, integer, float or complex; never objects, so nothing is unpickled)
    of at most :data:`sw.compiler.npyfile.MAX_ARRAY_BYTES` bytes (2 GiB), and the data must
    be exactly as long as the header declares (:func:`sw.compiler.npyfile.read_npy`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        What the file should hold, for error messages (e.g. ``"weights"``).

    Raises
    ------
    FdpuError
        Naming ``path``: not a regular file, an ``.npz`` archive, not a ``.npy`` file (a
        pickle, text...), an unreadable header, a dtype that is not numeric, a declared size
        above the limit, a truncated file or trailing bytes.
    OSError
        If it does not exist or cannot be read.
    """
    path = os.fspath(path)
    hint = f"{what} must be a .npy array saved with numpy.save"
    with npyfile.open_regular(path, hint) as f:
        size = os.fstat(f.fileno()).st_size
        return npyfile.read_npy(f, size, path, npyfile.NUMERIC, hint=hint)


def _check_float(arr, path, what):
    if not np.issubdtype(arr.dtype, np.floating):
        raise FdpuError(f"{path}: {what} dtype is {arr.dtype}; allowed: float16, float32, "
                        f"float64")
    if arr.size == 0:
        raise FdpuError(f"{path}: {what} array is empty (shape {arr.shape})")
    if not np.isfinite(arr).all():
        raise FdpuError(f"{path}: {what} contain NaN or infinity; all values must be finite")
    with np.errstate(over="ignore", under="ignore"):
        half = arr.astype(np.float16)
    if not np.isfinite(half).all():
        raise FdpuError(f"{path}: {what} exceed the float16 range (|x| <= 65504)")
    return half


def load_weights(path):
    """Read a user's ``K x C`` weight matrix from a ``.npy`` file, as float16.

    Raises
    ------
    FdpuError
        If the file is not a 2-D finite floating-point ``.npy`` array within float16 range.
    """
    arr = load_npy(path, "weights")
    if arr.ndim != 2:
        raise FdpuError(f"{os.fspath(path)}: weights must be 2-D (K x C), got {arr.ndim}-D "
                        f"of shape {arr.shape}")
    check_sizes(K=arr.shape[0], C=arr.shape[1], where=f"{os.fspath(path)}: weights")
    _check_float(arr, os.fspath(path), "weights")
    half, flushed = to_weights(arr, os.fspath(path))
    if flushed:
        warnings.warn(FdpuWarning(f"{os.fspath(path)}: {flushed:,} non-zero weight(s) round to "
                                  f"zero in binary16 (|x| < 2**-25) and are not stored"))
    return half


def load_inputs(path, c):
    """Read a user's inputs (``N x C``, or one vector of length ``C``) as ``N x C`` float16.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npy`` file.
    c : int
        The layer's input length ``C`` (columns of its weights), which the inputs must match.

    Raises
    ------
    FdpuError
        If the file is not a 1-D or 2-D finite floating-point ``.npy`` array within float16
        range with ``C`` columns.
    """
    arr = load_npy(path, "inputs")
    p = os.fspath(path)
    if arr.ndim not in (1, 2):
        raise FdpuError(f"{p}: inputs must be 1-D (C) or 2-D (N x C), got {arr.ndim}-D of "
                        f"shape {arr.shape}")
    if arr.shape[-1] != c:
        raise FdpuError(f"{p}: inputs have {arr.shape[-1]} columns but the weights have "
                        f"C = {c}; inputs must be N x {c}")
    return check_inputs(arr, c, p)


def check_inputs(arr, c, where):
    """Return the inputs ``arr`` (``N x C`` or one vector of ``C``, floating point) as ``N x C``
    float16, checked as :func:`load_inputs` checks a file's (``where`` names them)."""
    check_sizes(C=c, N=arr.size // max(c, 1), where=f"{where}: inputs")
    return _check_float(np.asarray(arr).reshape(-1, c), where, "inputs")


def check_images(arr, where):
    """Return the images ``arr`` (``N x C x H x W``, floating point) as float16, checked as
    :func:`load_inputs` checks a file's values (``where`` names them); their rows, once
    unrolled, are checked by the layer's sizes."""
    return _check_float(np.asarray(arr), where, "inputs")


def load_bias(path, k):
    """Read a user's per-output bias (a 1-D ``.npy`` of length ``K``) as float16.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npy`` file.
    k : int
        The layer's outputs ``K`` (rows of its weights), which the bias must match.

    Raises
    ------
    FdpuError
        If the file is not a 1-D finite floating-point ``.npy`` array of ``K`` values within
        float16 range.
    """
    arr = load_npy(path, "bias")
    p = os.fspath(path)
    if arr.ndim != 1:
        raise FdpuError(f"{p}: bias must be 1-D (one value per output, K = {k}), got "
                        f"{arr.ndim}-D of shape {arr.shape}")
    if arr.shape[0] != k:
        raise FdpuError(f"{p}: bias has {arr.shape[0]} values but the layer has K = {k} "
                        f"outputs; bias must have {k}")
    return _check_float(arr, p, "bias values")
