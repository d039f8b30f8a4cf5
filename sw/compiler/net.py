"""A network: a chain of fully-connected and convolution layers, each with an optional bias
and activation, and the host steps between them.

Contract
--------
A :class:`Net` is a list of layers, each a :class:`Dense` or a :class:`Conv`, with host steps
(:mod:`sw.compiler.host_steps`: pooling, flattening) before the first, between two and after
the last.  A :class:`Dense` layer holds

* ``weights``: the ``K x C`` binary16 matrix (``O[n][k] = sum_c W[k][c] * I[n][c]``, the
  layer convention of :mod:`sw.compiler.layers`);
* ``bias``: ``K`` binary16 values or ``None``;
* ``activation``: ``"relu"`` or ``None``;
* ``name``: where it came from (the ONNX node, the ``.npz`` key), for messages.

A :class:`Conv` layer holds ``K x C x R x S`` binary16 weights, a bias and an activation as a
:class:`Dense` does, a ``stride`` and ``pads``; it runs on the array as the matrix
multiplication of :mod:`sw.compiler.conv` (its ``K x (C R S)`` :attr:`Conv.matrix` by the
unrolled inputs).  Every layer has :attr:`~Dense.matrix` (the weights the array runs) and
``with_matrix`` (the same layer with other weights of that shape, e.g. pruned).
:func:`layer_shapes` follows a value's shape through the layers and the steps between them and
refuses one that does not chain, naming the layer.

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

from sw.compiler import conv as convolution
from sw.compiler.host_steps import describe, run_steps
from sw.compiler.layers import check_sizes
from sw.compiler.npyfile import Archive
from sw.spec.errors import FdpuError, FdpuWarning
from sw.spec.fp16 import to_weights

__all__ = ["ACTIVATIONS", "Dense", "Conv", "Net", "from_npz", "reference", "prepare_inputs",
           "first_shape", "run_between", "layer_shapes", "run_layer_float32", "head", "predictions"]

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

    @property
    def matrix(self):
        """The ``K x C`` binary16 weights the array runs."""
        return self.weights

    def with_matrix(self, matrix):
        """Return this layer with the weights ``matrix`` (``K x C``)."""
        return Dense(matrix, self.bias, self.activation, self.name)

    def describe(self):
        """Return ``K x C`` for reports."""
        return f"{self.K} x {self.C}"


def _pair(value, what, low):
    """Return ``value`` (one integer or two) as a pair of integers ``>= low``."""
    vals = tuple(int(v) for v in np.atleast_1d(np.asarray(value)).reshape(-1))
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2 or min(vals) < low:
        raise FdpuError(f"{what}: {value!r}; it is two integers >= {low}")
    return vals


@dataclass(frozen=True)
class Conv:
    """One 2-D convolution layer of a network (see the module doc).

    Construct it with the weights in any float dtype; ``__post_init__`` converts them (and
    the bias) to binary16 once, through :class:`sw.compiler.net.Dense`'s checks of the
    ``K x (C R S)`` matrix.
    """

    weights: np.ndarray
    bias: np.ndarray | None = None
    activation: str | None = None
    stride: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)
    name: str = ""

    def __post_init__(self):
        w = np.asarray(self.weights)
        if w.ndim != 4 or 0 in w.shape:
            raise FdpuError(f"{self.name}: convolution weights must be K x C x R x S, got shape "
                            f"{w.shape}")
        flat = Dense(w.reshape(w.shape[0], -1), self.bias, self.activation, self.name)
        object.__setattr__(self, "weights", flat.weights.reshape(w.shape))
        object.__setattr__(self, "bias", flat.bias)
        object.__setattr__(self, "stride", _pair(self.stride, f"{self.name}: strides", 1))
        pads = tuple(int(v) for v in np.asarray(self.pads).reshape(-1))
        if len(pads) != 4 or min(pads) < 0:
            raise FdpuError(f"{self.name}: pads {self.pads!r}; they are four integers >= 0 "
                            f"(top, left, bottom, right)")
        object.__setattr__(self, "pads", pads)

    @property
    def K(self):
        """Output channels (filters)."""
        return self.weights.shape[0]

    @property
    def C(self):
        """Columns of :attr:`matrix`: ``C R S`` (the FC view's input length)."""
        return int(np.prod(self.weights.shape[1:]))

    @property
    def channels(self):
        """Input channels."""
        return self.weights.shape[1]

    @property
    def kernel(self):
        """``(R, S)``."""
        return self.weights.shape[2:]

    @property
    def matrix(self):
        """The ``K x (C R S)`` binary16 weights the array runs (columns in ``(c, r, s)``
        order)."""
        return self.weights.reshape(self.K, -1)

    def with_matrix(self, matrix):
        """Return this layer with the weights of ``matrix`` (``K x (C R S)``, e.g. pruned)."""
        return Conv(np.asarray(matrix).reshape(self.weights.shape), self.bias, self.activation,
                    self.stride, self.pads, self.name)

    def describe(self):
        """Return :func:`sw.compiler.conv.describe` of this layer."""
        return convolution.describe(self)


def _local(name, source):
    """Return a layer's ``name`` without its ``source`` prefix (``"PATH: W1"`` -> ``"W1"``)."""
    prefix = f"{source}: "
    return name[len(prefix):] if source and name.startswith(prefix) else name


@dataclass(frozen=True)
class Net:
    """A chain of layers (:class:`Dense`, :class:`Conv`), each consuming the previous one's
    outputs, and the host steps an exported model computes around and between them
    (:mod:`sw.compiler.host_steps`).

    ``pre`` turns the model's input (``input_name``, of shape ``N x input_shape`` when the
    model says) into the first layer's input (``N x C``, or ``N x C x H x W`` for a
    convolution); ``between[i]`` (a tuple of steps, possibly empty) turns layer ``i``'s
    outputs into layer ``i + 1``'s inputs (pooling, flattening); ``post`` computes the model's
    ``outputs`` (their names, in order) from the last layer's outputs, the value called
    ``core``.  Without steps (a ``.npz`` network) the one output is the last layer's.
    """

    layers: tuple
    source: str = ""
    pre: tuple = ()
    post: tuple = ()
    outputs: tuple = ("y",)
    core: str = "y"
    input_name: str = "x"
    input_shape: tuple | None = None
    between: tuple = ()

    def __post_init__(self):
        layers = tuple(self.layers)
        if not layers:
            raise FdpuError(f"{self.source}: the network has no FC or convolution layer")
        between = tuple(tuple(steps) for steps in self.between) or ((),) * (len(layers) - 1)
        if len(between) != len(layers) - 1:
            raise FdpuError(f"{self.source}: {len(between)} lists of host steps between "
                            f"{len(layers)} layers; there is one list per pair of layers")
        for prev, layer, steps in zip(layers, layers[1:], between):
            if isinstance(layer, Dense) and isinstance(prev, Dense) and not steps \
                    and layer.C != prev.K:
                here, there = (_local(x.name, self.source) for x in (layer, prev))
                raise FdpuError(f"{self.source}: {here} takes C = {layer.C} inputs but "
                                f"{there} gives K = {prev.K} outputs")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "between", between)

    @property
    def C(self):
        """Input features of the first layer (a convolution: its input channels)."""
        first = self.layers[0]
        return first.channels if isinstance(first, Conv) else first.C

    @property
    def convolutional(self):
        """Whether a layer is a convolution."""
        return any(isinstance(layer, Conv) for layer in self.layers)

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
    """Return the first layer's float32 inputs from the model's input ``x`` (any rank, one
    row per batch element): ``x`` through the host steps before the layers, or as it is."""
    x = np.asarray(x)
    if not net.pre:
        return x.astype(np.float32)
    values = run_steps(net.pre, {net.input_name: x.astype(np.float32)})
    out = values[net.pre[-1].outputs[0]]
    return np.asarray(out, dtype=np.float32)


def first_shape(net):
    """Return the first layer's input shape without the batch (``(C,)``, or ``(C, H, W)`` for a
    convolution), or ``None`` when the model does not fix it (a convolution's image size left
    open by the model's input)."""
    first = net.layers[0]
    if not isinstance(first, Conv):
        return (first.C,)
    if net.input_shape is None:
        return None
    x = prepare_inputs(net, np.zeros((1,) + tuple(net.input_shape), np.float32))
    return tuple(x.shape[1:])


def run_between(net, i, y):
    """Return layer ``i + 1``'s float32 inputs from layer ``i``'s outputs ``y``: the host steps
    between them (:attr:`Net.between`), or ``y`` as it is."""
    steps = net.between[i]
    y = np.asarray(y, dtype=np.float32)
    if not steps:
        return y
    values = run_steps(steps, {steps[0].inputs[0]: y})
    return np.asarray(values[steps[-1].outputs[0]], dtype=np.float32)


def _layer_input(layer, shape, where):
    """Check that a value of ``shape`` (without the batch) is ``layer``'s input; return the
    layer's output shape."""
    if isinstance(layer, Conv):
        if len(shape) != 3 or shape[0] != layer.channels:
            raise FdpuError(f"{where}: takes N x {layer.channels} x H x W inputs, but gets N x "
                            f"{' x '.join(map(str, shape))}")
        p, q = convolution.out_size(layer, shape[1], shape[2])
        return (layer.K, p, q)
    if shape != (layer.C,):
        raise FdpuError(f"{where}: takes N x {layer.C} inputs, but gets N x "
                        f"{' x '.join(map(str, shape))}")
    return (layer.K,)


def layer_shapes(net, shape):
    """Return each layer's input shape (without the batch) when the first layer's inputs have
    ``shape`` (without the batch), and last the last layer's output shape, following the
    values through the layers and the host steps between them; a shape that does not chain is
    an error naming the layer."""
    shape, out = tuple(int(d) for d in shape), []
    for i, layer in enumerate(net.layers):
        out.append(shape)
        shape = _layer_input(layer, shape, f"{net.source}: {_local(layer.name, net.source)}")
        if i + 1 < len(net.layers) and net.between[i]:
            try:
                y = run_between(net, i, np.zeros((1,) + shape, np.float32))
            except FdpuError as exc:
                raise FdpuError(f"{net.source}: between layers {i} and {i + 1}: {exc}") from None
            shape = tuple(y.shape[1:])
            if y.shape[0] != 1:
                raise FdpuError(f"{net.source}: the host steps {describe(net.between[i])} "
                                f"change the batch dimension (1 row becomes {y.shape[0]})")
    return out + [shape]


def run_layer_float32(layer, x):
    """Return ``layer`` on ``x`` in float32 (the binary16 weights and bias in float32
    arithmetic): the reference a run's accuracy is measured against."""
    x = np.asarray(x, dtype=np.float32)
    flat = convolution.unroll(layer, x) if isinstance(layer, Conv) else x
    y = flat @ layer.matrix.astype(np.float32).T
    if layer.bias is not None:
        y = y + layer.bias.astype(np.float32)
    if layer.activation == "relu":
        y = np.maximum(y, np.float32(0))
    if isinstance(layer, Conv):
        y = convolution.fold(layer, y, x.shape[0], x.shape[2], x.shape[3])
    return y


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
    """Return the float32 evaluation of ``net`` on the first layer's inputs ``x``: the binary16
    weights and biases in float32 arithmetic, the host steps between the layers in float32;
    the accuracy baseline of a run."""
    y = np.asarray(x, dtype=np.float32)
    for i, layer in enumerate(net.layers):
        y = run_layer_float32(layer, y)
        if i + 1 < len(net.layers):
            y = run_between(net, i, y)
    return y
