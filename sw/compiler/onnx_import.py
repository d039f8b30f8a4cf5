"""Import an MLP from ONNX: a chain of fully-connected layers as a :class:`~sw.compiler.net.Net`.

Contract
--------
:func:`load` reads an ONNX model (``onnx``, an optional dependency: ``pip install -e
.[nets]``) and walks its graph from its one input to its one output.  It accepts, node by node:

* ``Flatten`` (``axis`` 1) where the input already is ``N x C``, or to flatten ``N x d1 x d2
  ...`` to ``N x C`` at the start;
* ``Gemm(A, B[, C])`` with ``A`` the activations and ``B``, ``C`` initializers: ``transA``
  must be 0; ``transB = 1`` takes ``B`` as ``K x C`` (PyTorch's ``Linear``), ``transB = 0``
  as ``C x K``; ``alpha`` scales the weights and ``beta`` the bias (both folded in, in
  float32, before the conversion to binary16); ``C`` is a scalar, ``K`` or ``1 x K``;
* ``MatMul(X, W)`` with ``W`` a ``C x K`` initializer;
* an ``Add`` of a ``K`` (or ``1 x K``) initializer right after a ``MatMul`` or a ``Gemm``
  without bias, as that layer's bias;
* ``Relu`` right after a layer: that layer's activation.

Anything else (another operator, a weight that is not an initializer, a branch, a second
input, a shape that does not chain) is an :class:`~sw.spec.errors.FdpuError` naming the node
(``op_type`` and name) and what is allowed.
"""

import os

import numpy as np

from sw.compiler.net import Dense, Net
from sw.compiler.npyfile import MAX_ARRAY_BYTES
from sw.spec.errors import FdpuError

__all__ = ["load"]

#: Operators the importer takes.
SUPPORTED = ("Gemm", "MatMul", "Add", "Relu", "Flatten")


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise FdpuError("reading ONNX needs the onnx package: pip install -e .[nets] (or pip "
                        "install onnx)") from None
    return onnx, numpy_helper


def _attrs(node):
    onnx, _ = _onnx()
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _label(node):
    return f"node {node.op_type} '{node.name or node.output[0]}'"


def load(path):
    """Return the :class:`Net` of the ONNX model at ``path`` (see the module docstring)."""
    onnx, numpy_helper = _onnx()
    path = os.fspath(path)
    if not os.path.isfile(path):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        raise FdpuError(f"{path}: not a regular file")
    if os.path.getsize(path) > MAX_ARRAY_BYTES:
        raise FdpuError(f"{path}: {os.path.getsize(path):,} bytes; an ONNX model is read whole "
                        f"and may have at most {MAX_ARRAY_BYTES:,} (2 GiB)")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001: protobuf raises DecodeError and friends
        raise FdpuError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                        f"{str(exc)[:120]})") from None
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise FdpuError(f"{path}: an MLP has one input and one output; this graph has "
                        f"{len(inputs)} input(s) and {len(graph.output)} output(s)")
    consumers = {}
    for node in graph.node:
        for name in dict.fromkeys(node.input):            # a node counts once per value
            consumers.setdefault(name, []).append(node)

    def const(node, name, what):
        if name not in inits:
            raise FdpuError(f"{path}: {_label(node)}: its {what} '{name}' must be an "
                            f"initializer (a constant), not computed")
        return numpy_helper.to_array(inits[name]).astype(np.float32)

    def next_node(value):
        users = consumers.get(value, [])
        if len(users) > 1:
            raise FdpuError(f"{path}: value '{value}' feeds {len(users)} nodes; an MLP is a "
                            f"chain (no branches)")
        return users[0] if users else None

    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in inputs[0].type.tensor_type.shape.dim]
    width = int(np.prod(dims[1:])) if len(dims) >= 2 and all(dims[1:]) else None
    value, layers, node = inputs[0].name, [], None
    node = next_node(value)
    while node is not None:
        attrs = _attrs(node)
        if node.op_type not in SUPPORTED:
            raise FdpuError(f"{path}: {_label(node)} is not supported; an MLP here is made of "
                            f"{', '.join(SUPPORTED)}")
        if node.op_type == "Flatten":
            if layers or attrs.get("axis", 1) != 1:
                raise FdpuError(f"{path}: {_label(node)}: only a Flatten with axis 1 before the "
                                f"first layer is supported")
        elif node.op_type == "Gemm":
            if attrs.get("transA", 0):
                raise FdpuError(f"{path}: {_label(node)}: transA = 1 (transposed activations) "
                                f"is not supported")
            b = const(node, node.input[1], "weight B")
            if b.ndim != 2:
                raise FdpuError(f"{path}: {_label(node)}: B must be 2-D, got shape {b.shape}")
            w = (b if attrs.get("transB", 0) else b.T) * np.float32(attrs.get("alpha", 1.0))
            bias = None
            if len(node.input) > 2 and node.input[2]:
                c = const(node, node.input[2], "bias C") * np.float32(attrs.get("beta", 1.0))
                if c.size not in (1, w.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                    raise FdpuError(f"{path}: {_label(node)}: bias C of shape {c.shape} does "
                                    f"not broadcast to the K = {w.shape[0]} outputs")
                bias = np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()
            layers.append([w, bias, None, _label(node)])
        elif node.op_type == "MatMul":
            if node.input[0] != value:
                raise FdpuError(f"{path}: {_label(node)}: the activations must be its first "
                                f"input (X @ W)")
            w = const(node, node.input[1], "weight")
            if w.ndim != 2:
                raise FdpuError(f"{path}: {_label(node)}: the weight must be 2-D, got shape "
                                f"{w.shape}")
            layers.append([w.T, None, None, _label(node)])
        elif node.op_type == "Add":
            if not layers or layers[-1][1] is not None or layers[-1][2] is not None:
                raise FdpuError(f"{path}: {_label(node)}: an Add is taken only as the bias "
                                f"right after a MatMul or a Gemm without bias")
            other = node.input[1] if node.input[0] == value else node.input[0]
            c = const(node, other, "bias")
            k = layers[-1][0].shape[0]
            if c.size != k or (c.ndim == 2 and c.shape[0] != 1) or c.ndim > 2:
                raise FdpuError(f"{path}: {_label(node)}: bias of shape {c.shape} does not "
                                f"match the K = {k} outputs")
            layers[-1][1] = c.reshape(-1)
        elif node.op_type == "Relu":
            if not layers or layers[-1][2] is not None:
                raise FdpuError(f"{path}: {_label(node)}: a Relu must follow an FC layer")
            layers[-1][2] = "relu"
        value = node.output[0]
        node = next_node(value)
    if value != graph.output[0].name:
        raise FdpuError(f"{path}: the chain from the input ends at '{value}', not at the "
                        f"graph's output '{graph.output[0].name}'")
    if layers and width is not None and layers[0][0].shape[1] != width:
        raise FdpuError(f"{path}: the input has {width} features but {layers[0][3]} takes "
                        f"C = {layers[0][0].shape[1]}")
    return Net(tuple(Dense(w, b, act, name=f"{path}: {label}") for w, b, act, label in layers),
               source=path)
