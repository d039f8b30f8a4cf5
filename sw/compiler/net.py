"""A network: a chain of fully-connected layers, each with an optional bias and activation.

Contract
--------
A :class:`Net` is a list of :class:`Dense` layers, ``layers[i].C == layers[i - 1].K``.  A
:class:`Dense` layer holds

* ``weights``: the ``K x C`` binary16 matrix (``O[n][k] = sum_c W[k][c] * I[n][c]``, the
  layer convention of :mod:`sw.compiler.layers`);
* ``bias``: ``K`` binary16 values or ``None``;
* ``activation``: ``"relu"`` or ``None``;
* ``name``: where it came from (the ONNX node, the ``.npz`` key), for messages.

Weights and biases are converted to binary16 once, here, and checked: finite, within the
binary16 range, with the right shapes.  :func:`from_npz` reads the documented ``.npz`` layout;
:mod:`sw.compiler.onnx_import` reads ONNX.  :func:`reference` evaluates a net in float32 (the
accuracy baseline of a run).

The ``.npz`` layout: arrays ``W0 .. W{n-1}`` (``K_i x C_i``, any float dtype), optional
``b0 .. b{n-1}`` (``K_i``), optional ``act``: ``n`` strings, each ``relu`` or ``none``
(default: ``relu`` after every layer but the last).  No other keys.
"""

import re
import warnings
from dataclasses import dataclass

import numpy as np

from sw.compiler.host_steps import run_steps
from sw.compiler.layers import check_sizes
from sw.compiler.npyfile import Archive
from sw.spec.errors import FdpuError, FdpuWarning
from sw.spec.fp16 import to_weights

__all__ = ["ACTIVATIONS", "Dense", "Net", "from_npz", "reference", "prepare_inputs", "head",
           "predictions"]

#: The activations a layer may have (``None``: none).
ACTIVATIONS = ("relu",)


def _half(values, what):
    """Return ``values`` as binary16 (both zeros ``+0.0``), refusing NaN, infinities and
    overflow and warning about non-zero values that round to zero."""
    arr = np.asarray(values)
    if not np.issubdtype(arr.dtype, np.floating) and not np.issubdtype(arr.dtype, np.integer):
        raise FdpuError(f"{what}: dtype {arr.dtype} is not a number type")
    if not np.isfinite(arr).all():
        raise FdpuError(f"{what}: holds NaN or infinity; all values must be finite")
    half, flushed = to_weights(arr, what)
    if not np.isfinite(half).all():
        raise FdpuError(f"{what}: values beyond the binary16 range (|x| <= 65504)")
    if flushed:
        warnings.warn(FdpuWarning(f"{what}: {flushed:,} non-zero value(s) round to zero in "
                                  f"binary16 (|x| < 2**-25)"))
    return half


@dataclass(frozen=True)
class Dense:
    """One FC layer of a :class:`Net` (see the module docstring)."""

    weights: np.ndarray
    bias: np.ndarray | None = None
    activation: str | None = None
    name: str = ""

    def __post_init__(self):
        w = _half(self.weights, f"{self.name}: weights")
        if w.ndim != 2 or 0 in w.shape:
            raise FdpuError(f"{self.name}: weights must be a non-empty K x C matrix, got shape "
                            f"{w.shape}")
        check_sizes(K=w.shape[0], C=w.shape[1], where=f"{self.name}: weights")
        object.__setattr__(self, "weights", w)
        if self.bias is not None:
            b = _half(self.bias, f"{self.name}: bias").reshape(-1)
            if b.shape != (w.shape[0],):
                raise FdpuError(f"{self.name}: bias has {b.size} values, the layer has K = "
                                f"{w.shape[0]} outputs")
            object.__setattr__(self, "bias", b)
        if self.activation not in (None,) + ACTIVATIONS:
            raise FdpuError(f"{self.name}: activation {self.activation!r}; allowed: "
                            f"{', '.join(ACTIVATIONS)} or none")

    @property
    def K(self):
        return self.weights.shape[0]

    @property
    def C(self):
        return self.weights.shape[1]


def _local(name, source):
    """Return a layer's ``name`` without its ``source`` prefix (``"PATH: W1"`` -> ``"W1"``)."""
    prefix = f"{source}: "
    return name[len(prefix):] if source and name.startswith(prefix) else name


@dataclass(frozen=True)
class Net:
    """A chain of :class:`Dense` layers, each consuming the previous one's outputs, and the
    host steps an exported model computes around them (:mod:`sw.compiler.host_steps`).

    ``pre`` turns the model's input (``input_name``, of shape ``N x input_shape`` when the
    model says) into the first layer's ``N x C``; ``post`` computes the model's ``outputs``
    (their names, in order) from the last layer's outputs, the value called ``core``.  Without
    steps (a ``.npz`` network) the one output is the last layer's.
    """

    layers: tuple
    source: str = ""
    pre: tuple = ()
    post: tuple = ()
    outputs: tuple = ("y",)
    core: str = "y"
    input_name: str = "x"
    input_shape: tuple | None = None

    def __post_init__(self):
        layers = tuple(self.layers)
        if not layers:
            raise FdpuError(f"{self.source}: the network has no FC layer")
        for prev, layer in zip(layers, layers[1:]):
            if layer.C != prev.K:
                here, there = (_local(x.name, self.source) for x in (layer, prev))
                raise FdpuError(f"{self.source}: {here} takes C = {layer.C} inputs but "
                                f"{there} gives K = {prev.K} outputs")
        object.__setattr__(self, "layers", layers)

    @property
    def C(self):
        """Input features of the network."""
        return self.layers[0].C

    @property
    def K(self):
        """Outputs of the network's last layer."""
        return self.layers[-1].K

    @property
    def task(self):
        """Return what the network's outputs are, for scoring: ``"classifier"`` (top-1 over
        the last layer's ``K > 1`` outputs), ``"binary"`` (one output, a class by its sign:
        the exported ``Sigmoid`` at 0.5) or ``"regressor"`` (one output without a
        classifier's head: scored by its error)."""
        ops = {step.op for step in self.post}
        if self.K > 1:
            return "classifier"
        if ops & {"Sigmoid", "ArgMax", "ArrayFeatureExtractor", "ZipMap", "Softmax",
                  "LogSoftmax"}:
            return "binary"
        return "regressor"


def from_npz(path):
    """Return the :class:`Net` of a ``.npz`` file in the layout of the module docstring."""
    with Archive(path, "a network .npz", "write W0, b0, W1, ... with numpy.savez") as z:
        keys = set(z.members) | set(z.others)
        ws = sorted((int(m.group(1)) for k in keys if (m := re.fullmatch(r"W(\d+)", k))))
        if not ws:
            raise FdpuError(f"{path}: no weights: a network .npz holds W0, W1, ... (K x C each)")
        if ws != list(range(len(ws))):
            raise FdpuError(f"{path}: weight keys must be W0 .. W{len(ws) - 1} without gaps, "
                            f"got {', '.join(f'W{i}' for i in ws)}")
        n = len(ws)
        allowed = {f"W{i}" for i in range(n)} | {f"b{i}" for i in range(n)} | {"act"}
        extra = sorted(keys - allowed)
        if extra:
            raise FdpuError(f"{path}: unexpected key(s) {', '.join(extra)}; allowed: W0.., "
                            f"b0.., act")
        acts = ["relu"] * (n - 1) + ["none"]
        if "act" in keys:
            raw = z.read("act", kinds="U")
            if raw.shape != (n,):
                raise FdpuError(f"{path}: act must list {n} activations (one a layer), got shape "
                                f"{raw.shape}")
            acts = [str(a).lower() for a in raw]
        layers = []
        for i in range(n):
            act = acts[i]
            if act not in ("none",) + ACTIVATIONS:
                raise FdpuError(f"{path}: act[{i}] is {act!r}; allowed: relu, none")
            bias = z.read(f"b{i}", kinds="fiu") if f"b{i}" in keys else None
            layers.append(Dense(z.read(f"W{i}", kinds="fiu"), bias,
                                None if act == "none" else act, name=f"{path}: W{i}"))
    return Net(tuple(layers), source=str(path))


def prepare_inputs(net, x):
    """Return the first layer's ``N x C`` float32 inputs from the model's input ``x`` (any
    rank, one row per batch element): ``x`` through the host steps before the layers, or
    as it is."""
    x = np.asarray(x)
    if not net.pre:
        return x.astype(np.float32)
    values = run_steps(net.pre, {net.input_name: x.astype(np.float32)})
    out = values[net.pre[-1].outputs[0]]
    return np.asarray(out, dtype=np.float32)


def head(net, y):
    """Return the model's outputs (name -> array, in the graph's order) from the last layer's
    float32 outputs ``y``: the host steps after the layers, run in numpy."""
    values = run_steps(net.post, {net.core: np.asarray(y, dtype=np.float32)})
    return {name: values[name] for name in net.outputs}


def predictions(net, y):
    """Return the class of each row of the last layer's outputs ``y`` (``N x K``): the index of
    the largest (``classifier``; Softmax and the class labels' lookup keep the order) or
    ``y > 0`` (``binary``: the Sigmoid's 0.5); ``None`` for a regressor."""
    task = net.task
    if task == "classifier":
        return np.asarray(y).argmax(axis=1)
    if task == "binary":
        return (np.asarray(y)[:, 0] > 0).astype(np.int64)
    return None


def reference(net, x):
    """Return the float32 evaluation of ``net`` on inputs ``x`` (``N x C``): the binary16
    weights and biases in float32 arithmetic, the accuracy baseline of a run."""
    y = np.asarray(x, dtype=np.float32)
    for layer in net.layers:
        y = y @ layer.weights.astype(np.float32).T
        if layer.bias is not None:
            y = y + layer.bias.astype(np.float32)
        if layer.activation == "relu":
            y = np.maximum(y, np.float32(0))
    return y
