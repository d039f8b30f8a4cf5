"""Host steps: what an exported network computes before its first FC layer and after its last.

Contract
--------
Exporters wrap a network's FC layers in operations the array does not run: torch writes
``nn.Flatten`` as a ``Reshape``, the float16 converter adds ``Cast`` nodes, scikit-learn's
converter (skl2onnx) ends a classifier in ``Softmax``, ``ArgMax``, ``ArrayFeatureExtractor``
(the class labels), ``ZipMap`` and a label output beside the probabilities.  A
:class:`HostStep` is one such ONNX node, run on the host in numpy as onnxruntime runs it
(float32 where the graph computes in float32); :func:`run_steps` runs a list of them in graph
order over named values.

The operators a step may be (:data:`PRE_OPS` before the first layer, :data:`POST_OPS` after
the last) and their meaning:

* ``Cast`` (``to``: a float, integer or bool type), ``Identity``;
* ``Flatten`` (``axis``), ``Reshape`` (a constant shape; 0 copies a dimension, -1 infers one);
* ``Softmax``, ``LogSoftmax`` (``axis``, default -1 from opset 13, else 1 on the 2-D input),
  ``Sigmoid``;
* ``ArgMax`` (``axis`` default 0, ``keepdims`` default 1, ``select_last_index``);
* ``ArrayFeatureExtractor`` (``ai.onnx.ml``: ``X[..., indices]``; a 1-D ``X`` gives
  ``1 x len(indices)``);
* ``ZipMap`` (``ai.onnx.ml``): a map per row from the class labels to the probabilities; kept
  here as the probabilities themselves (the table the map is made of);
* ``Concat`` (``axis``), ``Add``, ``Sub``, ``Mul``, ``Div`` (numpy broadcasting): the two
  columns of a binary classifier's probabilities (``1 - p`` and ``p``);
* ``MaxPool``, ``AveragePool`` (2-D, on ``N x C x H x W``: ``kernel_shape``, ``strides``,
  ``pads``, ``auto_pad``, ``ceil_mode``; ``count_include_pad`` for the average; dilations
  other than 1 and a second output, the indices, are refused) and ``GlobalAveragePool``:
  pooling between two layers (:data:`MID_OPS`) or after the last.  The maximum of binary16
  values is exact; an average is summed in float32 as onnxruntime does, and becomes
  binary16 when it enters the next layer.

Anything else is refused by the importer with the node's name (:mod:`sw.compiler.onnx_import`).
"""

from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from sw.spec.errors import FdpuError

__all__ = ["PRE_OPS", "MID_OPS", "POST_OPS", "POOLS", "HostStep", "run_steps", "describe"]

#: Operators run on the host before the first layer: conversions and flattening.
PRE_OPS = ("Cast", "Identity", "Flatten", "Reshape")

#: Pooling operators (2-D, ``N x C x H x W``).
POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool")

#: Operators run on the host between two layers: pooling and flattening.
MID_OPS = ("Identity", "Flatten", "Reshape") + POOLS

#: Operators run on the host after the last layer.
POST_OPS = PRE_OPS + ("Softmax", "LogSoftmax", "Sigmoid", "ArgMax", "ArrayFeatureExtractor",
                      "ZipMap", "Concat", "Add", "Sub", "Mul", "Div") + POOLS

#: ONNX tensor element types a Cast may produce, as numpy types.
_CAST = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
         9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


@dataclass(frozen=True)
class HostStep:
    """One ONNX node run on the host (see the module doc).

    ``consts`` maps the node's constant inputs (initializers) to their arrays; ``opset`` is the
    default domain's opset of the model (``Softmax``'s default axis depends on it).
    """
    op: str
    inputs: tuple
    outputs: tuple
    name: str
    attrs: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)
    opset: int = 13

    @property
    def label(self):
        """Return ``Op 'name'`` for messages and reports."""
        return f"{self.op} '{self.name}'"

    def run(self, values):
        """Return the outputs of the step from ``values`` (a name -> array mapping)."""
        args = []
        for name in self.inputs:
            if name == "":
                args.append(None)
            elif name in self.consts:
                args.append(self.consts[name])
            elif name in values:
                args.append(values[name])
            else:
                raise FdpuError(f"node {self.label}: its input '{name}' is not computed before "
                                f"it (the graph is not in order, or has a cycle)")
        try:
            out = _OPS[self.op](self, *args)
        except FdpuError:
            raise
        except (ValueError, IndexError, TypeError) as exc:
            raise FdpuError(f"node {self.label}: {exc}") from None
        return out if isinstance(out, tuple) else (out,)


def _cast(step, x):
    to = step.attrs.get("to")
    if to not in _CAST:
        raise FdpuError(f"node {step.label}: Cast to element type {to} is not supported "
                        f"(numbers and bool only)")
    return np.asarray(x).astype(_CAST[to])


def _flatten(step, x):
    axis = step.attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(lead, -1)


def _reshape(step, x, shape):
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    if not step.attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _axis(step, x):
    default = -1 if step.opset >= 13 else 1
    return step.attrs.get("axis", default)


def _softmax(step, x, log=False):
    x = np.asarray(x, dtype=np.float32)
    axis = _axis(step, x)
    if step.opset < 13:            # the input coerced to 2-D at axis
        shape = x.shape
        x2 = _flatten(HostStep("Flatten", (), (), step.name, {"axis": axis}), x)
        return _softmax(HostStep(step.op, (), (), step.name, {"axis": 1}), x2, log) \
            .reshape(shape)
    m = x - x.max(axis=axis, keepdims=True)
    e = np.exp(m)
    s = e.sum(axis=axis, keepdims=True)
    return (m - np.log(s)).astype(np.float32) if log else (e / s).astype(np.float32)


def _sigmoid(step, x):
    x = np.asarray(x, dtype=np.float32)
    return (1 / (1 + np.exp(-x))).astype(np.float32)


def _argmax(step, x):
    axis = step.attrs.get("axis", 0)
    keep = step.attrs.get("keepdims", 1)
    if step.attrs.get("select_last_index", 0):
        flipped = np.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - np.argmax(flipped, axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if keep else idx


def _feature_extractor(step, x, indices):
    x = np.asarray(x)
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < -x.shape[-1] or idx.max() >= x.shape[-1]):
        raise FdpuError(f"node {step.label}: index out of range of the {x.shape[-1]} values")
    y = x[..., idx.reshape(-1)]
    return y.reshape(1, -1) if x.ndim == 1 else y


def _zipmap(step, x):
    return np.asarray(x, dtype=np.float32)


def _concat(step, *xs):
    return np.concatenate([np.asarray(x) for x in xs], axis=step.attrs.get("axis", 0))


def _binary(fn):
    def op(step, a, b):
        return fn(np.asarray(a), np.asarray(b))
    return op


def _pool_geometry(step, x):
    """Return ``(kernel, strides, pads, out)`` of a 2-D ``MaxPool``/``AveragePool`` on
    ``x`` (ONNX's rules: explicit ``pads`` top, left, bottom, right, or ``auto_pad``;
    ``ceil_mode`` rounds the output size up, a window then starting inside the padded
    input)."""
    if x.ndim != 4:
        raise FdpuError(f"node {step.label}: pools N x C x H x W values, got shape {x.shape}")
    a = step.attrs
    kernel = tuple(int(k) for k in a.get("kernel_shape", ()))
    if len(kernel) != 2 or min(kernel) < 1:
        raise FdpuError(f"node {step.label}: kernel_shape {list(kernel)}; a 2-D pool takes "
                        f"two sizes >= 1")
    strides = tuple(int(v) for v in a.get("strides", (1, 1)))
    if len(strides) != 2 or min(strides) < 1:
        raise FdpuError(f"node {step.label}: strides {list(strides)}; two integers >= 1")
    if any(int(d) != 1 for d in a.get("dilations", (1, 1))):
        raise FdpuError(f"node {step.label}: dilations {list(a['dilations'])} are not "
                        f"supported (1 only)")
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    size = x.shape[2:]
    if auto in ("NOTSET", ""):
        pads = tuple(int(v) for v in a.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4 or min(pads) < 0:
            raise FdpuError(f"node {step.label}: pads {list(pads)}; four integers >= 0")
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (-(-n // s) - 1) * s + k - n) for n, s, k in zip(size, strides, kernel)]
        small = [t // 2 for t in total]
        big = [t - h for t, h in zip(total, small)]
        pads = tuple(small + big) if auto == "SAME_UPPER" else tuple(big + small)
    else:
        raise FdpuError(f"node {step.label}: auto_pad {auto!r}; allowed: NOTSET, VALID, "
                        f"SAME_UPPER, SAME_LOWER")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(size, strides)]
    else:
        out = []
        for n, s, k, lo, hi in zip(size, strides, kernel, pads[:2], pads[2:]):
            span = n + lo + hi - k
            if span < 0:
                raise FdpuError(f"node {step.label}: the {kernel[0]} x {kernel[1]} window is "
                                f"larger than the input of {size[0]} x {size[1]} padded")
            o = (-(-span // s) if a.get("ceil_mode", 0) else span // s) + 1
            if a.get("ceil_mode", 0) and (o - 1) * s >= n + lo:
                o -= 1             # the last window would start in the end padding
            out.append(o)
    return kernel, strides, pads, tuple(out)


def _pool(step, x, average):
    if len([o for o in step.outputs if o]) > 1:
        raise FdpuError(f"node {step.label}: its second output (the indices) is not "
                        f"supported")
    x = np.asarray(x, dtype=np.float32)
    kernel, strides, pads, out = _pool_geometry(step, x)
    n, c, h, w = x.shape
    # Every window inside the padded and extended grid: the explicit pads, then whatever
    # ceil_mode's last windows reach beyond them.
    need = [(o - 1) * s + k for o, s, k in zip(out, strides, kernel)]
    extra = [max(0, nd - (size + lo + hi)) for nd, size, lo, hi in
             zip(need, (h, w), pads[:2], pads[2:])]
    fill = 0.0 if average else -np.inf
    widths = ((0, 0), (0, 0), (pads[0], pads[2] + extra[0]), (pads[1], pads[3] + extra[1]))
    xp = np.pad(x, widths, constant_values=fill)
    win = sliding_window_view(xp, kernel, axis=(2, 3))[:, :, ::strides[0], ::strides[1]]
    win = win[:, :, :out[0], :out[1]]
    if not average:
        return win.max(axis=(-2, -1)).astype(np.float32)
    # The divisor: the window's input elements (count_include_pad: and its explicit pads,
    # never the ceil_mode extension).
    inside = np.zeros((h + pads[0] + pads[2] + extra[0], w + pads[1] + pads[3] + extra[1]),
                      np.float32)
    if step.attrs.get("count_include_pad", 0):
        inside[:h + pads[0] + pads[2], :w + pads[1] + pads[3]] = 1
    else:
        inside[pads[0]:pads[0] + h, pads[1]:pads[1] + w] = 1
    count = sliding_window_view(inside, kernel)[::strides[0], ::strides[1]][:out[0], :out[1]]
    return (win.sum(axis=(-2, -1), dtype=np.float32) / count.sum(axis=(-2, -1))) \
        .astype(np.float32)


def _global_average(step, x):
    x = np.asarray(x, dtype=np.float32)
    if x.ndim < 3:
        raise FdpuError(f"node {step.label}: pools N x C x ... values, got shape {x.shape}")
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)


_OPS = {
    "Cast": _cast, "Identity": lambda step, x: x, "Flatten": _flatten, "Reshape": _reshape,
    "Softmax": _softmax, "LogSoftmax": lambda step, x: _softmax(step, x, log=True),
    "Sigmoid": _sigmoid, "ArgMax": _argmax, "ArrayFeatureExtractor": _feature_extractor,
    "ZipMap": _zipmap, "Concat": _concat, "Add": _binary(np.add), "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply), "Div": _binary(np.divide),
    "MaxPool": lambda step, x: _pool(step, x, average=False),
    "AveragePool": lambda step, x: _pool(step, x, average=True),
    "GlobalAveragePool": _global_average,
}
assert set(_OPS) == set(POST_OPS)


def run_steps(steps, values):
    """Run ``steps`` in order over ``values`` (name -> array, updated in place); return it."""
    for step in steps:
        for name, out in zip(step.outputs, step.run(values)):
            if name:
                values[name] = out
    return values


def describe(steps):
    """Return the steps as ``Op 'name'`` labels joined by arrows (for reports)."""
    return " -> ".join(step.label for step in steps)
