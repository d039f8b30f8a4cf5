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
  columns of a binary classifier's probabilities (``1 - p`` and ``p``).

Anything else is refused by the importer with the node's name (:mod:`sw.compiler.onnx_import`).
"""

from dataclasses import dataclass, field

import numpy as np

from sw.spec.errors import FdpuError

__all__ = ["PRE_OPS", "POST_OPS", "HostStep", "run_steps", "describe"]

#: Operators run on the host before the first FC layer: conversions and flattening.
PRE_OPS = ("Cast", "Identity", "Flatten", "Reshape")

#: Operators run on the host after the last FC layer.
POST_OPS = PRE_OPS + ("Softmax", "LogSoftmax", "Sigmoid", "ArgMax", "ArrayFeatureExtractor",
                      "ZipMap", "Concat", "Add", "Sub", "Mul", "Div")

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


_OPS = {
    "Cast": _cast, "Identity": lambda step, x: x, "Flatten": _flatten, "Reshape": _reshape,
    "Softmax": _softmax, "LogSoftmax": lambda step, x: _softmax(step, x, log=True),
    "Sigmoid": _sigmoid, "ArgMax": _argmax, "ArrayFeatureExtractor": _feature_extractor,
    "ZipMap": _zipmap, "Concat": _concat, "Add": _binary(np.add), "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply), "Div": _binary(np.divide),
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
