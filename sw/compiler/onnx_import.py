"""Import an MLP from ONNX: a chain of fully-connected layers as a :class:`~sw.compiler.net.Net`.

Contract
--------
:func:`load` reads an ONNX model (``onnx``, an optional dependency: ``pip install -e
.[nets]``) and splits its graph in three, from its one input:

1. **host steps before the layers**: a chain of ``Cast``, ``Identity``, ``Flatten`` and
   ``Reshape`` (a constant shape) that turns the input (any rank) into ``N x C``
   (:data:`sw.compiler.host_steps.PRE_OPS`);
2. **the FC layers**, run on the array: a chain in which each value feeds one node, of

   * ``Gemm(A, B[, C])`` with ``A`` the activations and ``B``, ``C`` initializers: ``transA``
     must be 0; ``transB = 1`` takes ``B`` as ``K x C`` (PyTorch's ``Linear``), ``transB =
     0`` as ``C x K``; ``alpha`` scales the weights and ``beta`` the bias (both folded in, in
     float32, before the conversion to binary16); ``C`` is a scalar, ``K`` or ``1 x K``;
   * ``MatMul(X, W)`` with ``W`` a ``C x K`` initializer;
   * an ``Add`` of a ``K`` (or ``1 x K``) initializer right after a ``MatMul`` or a ``Gemm``
     without bias, as that layer's bias;
   * ``Relu`` right after a layer: that layer's activation;

3. **host steps after the layers**: every other node, each one of
   :data:`sw.compiler.host_steps.POST_OPS` (``Softmax``, ``Sigmoid``, ``ArgMax``, ``ZipMap``,
   the class labels' ``ArrayFeatureExtractor``, a binary classifier's ``Sub``/``Concat``, ...)
   reading only the last layer's outputs, other such steps and constants; the graph's outputs
   (one or more: skl2onnx writes a label beside the probabilities) are computed from them.

Anything else (another operator, a weight that is not an initializer, a branch before or
between the layers, a second input, a layer after a host step, a shape that does not chain) is
an :class:`~sw.spec.errors.FdpuError` naming the node (``op_type`` and name) and what is
allowed.  The host steps are run once on a row of zeros at load, so a step that cannot run on
this network is refused before any work starts.

Initializers kept in *external data* (``onnx.save_model(save_as_external_data=True)``, torch's
``MODEL.onnx.data``) are read by :func:`external_bytes`, relative to the model file's folder
(never the current directory): a location that is absolute, leaves that folder (``..`` or a
symbolic link out of it), is not a regular file (a FIFO, a device, a folder) or holds fewer
bytes than the tensor declares is an error naming the tensor and the file, raised before
anything is read.
"""

import os
import stat

import numpy as np

from sw.compiler.host_steps import MID_OPS, POST_OPS, PRE_OPS, HostStep
from sw.compiler.net import Conv, Dense, Net, head, layer_shapes, prepare_inputs
from sw.compiler.npyfile import MAX_ARRAY_BYTES
from sw.spec.errors import FdpuError

__all__ = ["load", "external_bytes"]

#: Operators that make a layer on the array.
LAYER_OPS = ("Conv", "Gemm", "MatMul")

#: Operators the importer takes into a layer: the layer's own, its bias, a BatchNormalization
#: (folded into a convolution's or an FC layer's weights) and its ReLU.
SUPPORTED = LAYER_OPS + ("Add", "BatchNormalization", "Relu")


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


def external_bytes(tensor, folder, path):
    """Return the bytes of initializer ``tensor`` whose data lie in an external file, checked
    (see the module doc); ``folder`` is the model file's folder, ``path`` the model (for
    messages)."""
    onnx, _ = _onnx()
    info = {e.key: e.value for e in tensor.external_data}
    what = f"{path}: initializer '{tensor.name}'"
    location = info.get("location", "")
    if not location:
        raise FdpuError(f"{what}: external data without a location")
    if os.path.isabs(location) or location.startswith(("/", "\\")):
        raise FdpuError(f"{what}: external data location '{location}' is absolute; it must be "
                        f"a file in the model's folder")
    root = os.path.realpath(folder)
    file = os.path.join(folder, location)
    if os.path.commonpath([root, os.path.realpath(file)]) != root:
        raise FdpuError(f"{what}: external data location '{location}' leaves the model's "
                        f"folder {folder or '.'}; it must be a file in that folder")
    try:
        mode = os.stat(file).st_mode
    except OSError as exc:
        raise FdpuError(f"{what}: external data file {file}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise FdpuError(f"{what}: external data file {file} is not a regular file")
    try:
        offset = int(info.get("offset", 0) or 0)
        length = None if info.get("length") in (None, "") else int(info["length"])
    except ValueError:
        raise FdpuError(f"{what}: external data offset/length must be integers, got "
                        f"{info.get('offset')!r}/{info.get('length')!r}") from None
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError):
        raise FdpuError(f"{what}: external data of element type {tensor.data_type} is not "
                        f"supported (numbers only)") from None
    need = int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
    if length is not None and length != need:
        raise FdpuError(f"{what}: external data length {length:,} bytes, but its shape "
                        f"{tuple(tensor.dims)} needs {need:,}")
    if offset < 0 or need > MAX_ARRAY_BYTES:
        raise FdpuError(f"{what}: external data offset {offset} and {need:,} bytes: the offset "
                        f"must be >= 0 and a tensor at most {MAX_ARRAY_BYTES:,} bytes")
    size = os.path.getsize(file)
    if offset + need > size:
        raise FdpuError(f"{what}: external data file {file} has {size:,} bytes; the tensor "
                        f"needs {need:,} from offset {offset:,}")
    with open(file, "rb") as f:
        f.seek(offset)
        data = f.read(need)
    if len(data) != need:
        raise FdpuError(f"{what}: external data file {file} ended early (read {len(data):,} "
                        f"of {need:,} bytes)")
    return data


#: The operator domains a model's nodes may use: ONNX's and (for skl2onnx's host steps)
#: ONNX-ML's.
DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
#: The element types of an initializer: binary floating point, and integers for the host steps'
#: shapes and indices.
TENSOR_TYPES = {1: "FLOAT", 10: "FLOAT16", 11: "DOUBLE", 16: "BFLOAT16", 6: "INT32",
                7: "INT64"}
#: The element types of the network's input (the layers take real values).
INPUT_TYPES = {1: "FLOAT", 10: "FLOAT16", 11: "DOUBLE"}
#: The opsets of the default domain the importer reads.
MIN_OPSET = 7


def _check_model(onnx, numpy_helper, model, path):
    """Refuse, before anything is read from it, a model that is not sound as a whole: an
    opset outside :data:`MIN_OPSET` .. the installed onnx's; a node of another domain than
    :data:`DOMAINS`, of an operator ONNX does not define at the model's opset, with an
    attribute the operator does not have or of another type, or that reads a value no
    earlier node, initializer or input makes (a cycle, or nodes out of order); an initializer
    of a type outside :data:`TENSOR_TYPES`, with a negative dimension, more than the size
    limit, or data that disagree with its dimensions; an input of a type outside
    :data:`INPUT_TYPES` or with a negative dimension.  Each is one error naming the node,
    tensor or input."""
    top = onnx.defs.onnx_opset_version()
    opsets = {o.domain or "": o.version for o in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx", 13))
    if not MIN_OPSET <= opset <= top:
        raise FdpuError(f"{path}: opset {opset} of the default domain; the importer reads "
                        f"opsets {MIN_OPSET}..{top} (the installed onnx's)")
    graph = model.graph
    made = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        where = f"{path}: {_label(node)}"
        if not any(node.output):
            raise FdpuError(f"{where}: has no output")
        if node.domain not in DOMAINS:
            raise FdpuError(f"{where}: domain {node.domain!r} is not supported (allowed: "
                            f"{', '.join(repr(d) for d in DOMAINS)})")
        domain = "" if node.domain == "ai.onnx" else node.domain
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, opset), domain)
        except Exception:  # noqa: BLE001: onnx raises SchemaError
            raise FdpuError(f"{where}: ONNX defines no operator {node.op_type!r} in domain "
                            f"{node.domain or 'ai.onnx'!r} at opset "
                            f"{opsets.get(domain, opset)}") from None
        for attr in node.attribute:
            want = schema.attributes.get(attr.name)
            if want is None:
                raise FdpuError(f"{where}: attribute {attr.name!r} is not one of "
                                f"{node.op_type}'s ({', '.join(sorted(schema.attributes))})")
            if attr.type != want.type:
                raise FdpuError(f"{where}: attribute {attr.name!r} is of type "
                                f"{onnx.AttributeProto.AttributeType.Name(attr.type)}; "
                                f"{node.op_type} takes "
                                f"{onnx.AttributeProto.AttributeType.Name(want.type)}")
        for value in node.input:
            if value and value not in made:
                raise FdpuError(f"{where}: reads '{value}' before any node makes it (a cycle, "
                                f"or nodes out of order)")
        made.update(node.output)
    for tensor in graph.initializer:
        where = f"{path}: initializer '{tensor.name}'"
        if tensor.data_type not in TENSOR_TYPES:
            name = onnx.TensorProto.DataType.Name(tensor.data_type) \
                if tensor.data_type in onnx.TensorProto.DataType.values() else tensor.data_type
            raise FdpuError(f"{where}: element type {name} is not supported (allowed: "
                            f"{', '.join(TENSOR_TYPES.values())})")
        if any(d < 0 for d in tensor.dims):
            raise FdpuError(f"{where}: negative dimension in {list(tensor.dims)}")
        if int(np.prod(tensor.dims, dtype=object)) * 8 > MAX_ARRAY_BYTES:
            raise FdpuError(f"{where}: dimensions {list(tensor.dims)} exceed the size limit of "
                            f"{MAX_ARRAY_BYTES:,} bytes")
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            try:
                numpy_helper.to_array(tensor)
            except Exception as exc:  # noqa: BLE001: onnx and numpy raise several types
                raise FdpuError(f"{where}: its data do not match its dimensions "
                                f"{list(tensor.dims)} ({type(exc).__name__})") from None
    inits = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        if tt.elem_type not in INPUT_TYPES:
            name = onnx.TensorProto.DataType.Name(tt.elem_type) \
                if tt.elem_type in onnx.TensorProto.DataType.values() else tt.elem_type
            raise FdpuError(f"{path}: input '{value.name}' is of type {name}; the layers take "
                            f"{', '.join(INPUT_TYPES.values())}")
        dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value")]
        if any(d < 0 for d in dims):
            raise FdpuError(f"{path}: input '{value.name}' has a negative dimension")


def _label(node):
    return f"node {node.op_type} '{node.name or (node.output[0] if node.output else '')}'"


def load(path):
    """Return the :class:`Net` of the ONNX model at ``path`` (see the module docstring)."""
    onnx, _ = _onnx()
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
    _check_model(onnx, _onnx()[1], model, path)
    graph = _Graph(path, model)
    pre, value, node = graph.pre_steps()
    layers, between, core, node = graph.layers(value, node)
    post, outputs = graph.post_steps(core)
    if not layers:
        raise FdpuError(f"{path}: the network has no layer (Conv, Gemm or MatMul) on the chain "
                        f"from its input")
    dims = graph.input_dims
    shape = tuple(dims[1:]) if len(dims) >= 2 and all(dims[1:]) else None
    made = []
    for kind, w, b, act, label, conv in layers:
        name = f"{path}: {label}"
        made.append(Conv(w, b, act, name=name, **conv) if kind == "conv" else
                    Dense(w, b, act, name=name))
    net = Net(tuple(made), source=path, pre=tuple(pre), post=tuple(post), outputs=outputs,
              core=core, input_name=graph.input_name, input_shape=shape,
              between=tuple(tuple(steps) for steps in between))
    _check_steps(net, path)
    return net


class _Graph:
    """One ONNX graph being read: its initializers (external data loaded on first use), the
    nodes that read each value, the nodes taken so far; one method per part of the graph."""

    def __init__(self, path, model):
        self.path, graph = path, model.graph
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 13)
        self.inits = {t.name: t for t in graph.initializer}
        inputs = [i for i in graph.input if i.name not in self.inits]
        if len(inputs) != 1 or not graph.output:
            raise FdpuError(f"{path}: a network here has one input and at least one output; "
                            f"this graph has {len(inputs)} input(s) and {len(graph.output)} "
                            f"output(s)")
        self.graph, self.input_name = graph, inputs[0].name
        self.input_dims = [d.dim_value if d.HasField("dim_value") else None
                           for d in inputs[0].type.tensor_type.shape.dim]
        self.consumers = {}
        for node in graph.node:
            for name in dict.fromkeys(node.input):            # a node counts once per value
                self.consumers.setdefault(name, []).append(node)
        self.arrays, self.used = {}, set()

    def array(self, name):
        """Return initializer ``name`` as an array (its external data read and checked)."""
        if name not in self.arrays:
            onnx, numpy_helper = _onnx()
            tensor = self.inits[name]
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                inline = onnx.TensorProto()
                inline.CopyFrom(tensor)
                inline.raw_data = external_bytes(tensor, os.path.dirname(self.path), self.path)
                del inline.external_data[:]
                inline.data_location = onnx.TensorProto.DEFAULT
                tensor = inline
            self.arrays[name] = numpy_helper.to_array(tensor)
        return self.arrays[name]

    def const(self, node, name, what):
        """Return the float32 value of ``node``'s constant input ``name`` (``what`` it is)."""
        if name not in self.inits:
            raise FdpuError(f"{self.path}: {_label(node)}: its {what} '{name}' must be an "
                            f"initializer (a constant), not computed")
        return self.array(name).astype(np.float32)

    def step(self, node, allowed, where):
        """Return ``node`` as a :class:`HostStep`, refused unless its operator is ``allowed``
        ``where`` it is."""
        if node.op_type not in allowed:
            raise FdpuError(f"{self.path}: {_label(node)} {where} is not supported; the "
                            f"importer takes {', '.join(allowed)} there (run on the host), "
                            f"{', '.join(SUPPORTED)} for the layers on the array")
        if node.op_type == "Reshape" and node.input[1] not in self.inits:
            raise FdpuError(f"{self.path}: {_label(node)}: its shape '{node.input[1]}' must "
                            f"be an initializer (a constant)")
        self.used.add(id(node))
        return HostStep(node.op_type, tuple(node.input), tuple(node.output),
                        node.name or node.output[0], _attrs(node),
                        {n: self.array(n) for n in node.input if n in self.inits}, self.opset)

    def only_user(self, value):
        """Return the one node that reads ``value``, or None (none, or several)."""
        users = self.consumers.get(value, [])
        return users[0] if len(users) == 1 else None

    def pre_steps(self):
        """Return the host steps before the first layer, the value they end at and the node
        after them: a chain of :data:`PRE_OPS` from the input."""
        path, value, pre = self.path, self.input_name, []
        node = self.only_user(value)
        while node is not None and node.op_type in PRE_OPS:
            pre.append(self.step(node, PRE_OPS, "before the first layer"))
            value = node.output[0]
            node = self.only_user(value)
        if node is None and len(self.consumers.get(value, [])) > 1:
            raise FdpuError(f"{path}: value '{value}' feeds {len(self.consumers[value])} nodes "
                            f"before the first layer; the layers are a chain (no branches)")
        if node is not None and node.op_type in SUPPORTED and node.op_type not in LAYER_OPS:
            raise FdpuError(f"{path}: {_label(node)}: a {node.op_type} must follow an FC layer "
                            f"or a convolution (Conv, Gemm or MatMul)")
        if node is not None and node.op_type not in SUPPORTED:
            raise FdpuError(f"{path}: {_label(node)} is not supported; before the first "
                            f"layer the importer takes {', '.join(PRE_OPS)} (run on the host), "
                            f"then the layers: {', '.join(SUPPORTED)}")
        return pre, value, node

    def layers(self, value, node):
        """Return the layers (``[kind, weights, bias, activation, label, conv attributes]``)
        of the chain that starts at ``node`` reading ``value``, the host steps between each
        two (:data:`MID_OPS`), the value the last layer ends at and the node after the
        chain."""
        layers, between = [], []
        while node is not None and node.op_type in LAYER_OPS:
            layer, value, node = self.layer(value, node)
            layers.append(layer)
            steps, after, nxt = [], value, node
            while nxt is not None and nxt.op_type in MID_OPS:
                steps.append(nxt)
                after = nxt.output[0]
                nxt = self.only_user(after)
            if nxt is not None and nxt.op_type in LAYER_OPS:
                between.append([self.step(n, MID_OPS, "between two layers") for n in steps])
                value, node = after, nxt
        return layers, between, value, node

    def layer(self, value, node):
        """Return one layer from its ``Conv``, ``Gemm`` or ``MatMul`` ``node`` reading
        ``value``, with the bias ``Add``, the ``BatchNormalization`` and the ``Relu`` that
        follow it; the value it ends at and the node after it."""
        path = self.path
        if node.input[0] != value:
            raise FdpuError(f"{path}: {_label(node)}: the activations must be its first input")
        if node.op_type == "Conv":
            layer = self._conv(node)
        elif node.op_type == "Gemm":
            layer = self._gemm(node)
        else:
            w = self.const(node, node.input[1], "weight")
            if w.ndim != 2:
                raise FdpuError(f"{path}: {_label(node)}: the weight must be 2-D, got shape "
                                f"{w.shape}")
            layer = ["dense", w.T, None, None, _label(node), {}]
        self.used.add(id(node))
        value = node.output[0]
        node = self.only_user(value)
        if node is not None and node.op_type == "Add" and _is_bias(node, value, layer,
                                                                     self.inits):
            other = node.input[1] if node.input[0] == value else node.input[0]
            c = self.const(node, other, "bias")
            k = layer[1].shape[0]
            shapes = ((k,), (1, k)) if layer[0] == "dense" else ((k,), (k, 1, 1), (1, k, 1, 1))
            if c.shape not in shapes:
                raise FdpuError(f"{path}: {_label(node)}: bias of shape {c.shape} does not "
                                f"match the K = {k} outputs")
            layer[2] = c.reshape(-1)
            value, node = self._take(node)
        if node is not None and node.op_type == "BatchNormalization":
            self._fold_batchnorm(node, layer)
            value, node = self._take(node)
        if node is not None and node.op_type == "Relu":
            layer[3] = "relu"
            value, node = self._take(node)
        if node is not None and node.op_type in ("Relu", "BatchNormalization"):
            raise FdpuError(f"{path}: {_label(node)}: a {node.op_type} must follow an FC layer "
                            f"or a convolution (one each, a BatchNormalization before the "
                            f"Relu)")
        return layer, value, node

    def _take(self, node):
        """Mark ``node`` as part of a layer; return its output and the node reading it."""
        self.used.add(id(node))
        return node.output[0], self.only_user(node.output[0])

    def _conv(self, node):
        """Return the layer of a ``Conv`` node (2-D, ``group`` 1, no dilation)."""
        path, attrs = self.path, _attrs(node)
        w = self.const(node, node.input[1], "weight W")
        if w.ndim != 4:
            raise FdpuError(f"{path}: {_label(node)}: a {w.ndim - 2}-D convolution; the "
                            f"importer takes 2-D ones (weights K x C x R x S)")
        if attrs.get("group", 1) != 1:
            raise FdpuError(f"{path}: {_label(node)}: group = {attrs['group']}; grouped and "
                            f"depthwise convolutions are not supported (group 1 only)")
        if any(d != 1 for d in attrs.get("dilations", (1, 1))):
            raise FdpuError(f"{path}: {_label(node)}: dilations {list(attrs['dilations'])} "
                            f"are not supported (1 only)")
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
        if kernel != tuple(w.shape[2:]):
            raise FdpuError(f"{path}: {_label(node)}: kernel_shape {list(kernel)} disagrees "
                            f"with the weights' {list(w.shape[2:])}")
        strides = tuple(attrs.get("strides", (1, 1)))
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else str(auto)
        if auto not in ("NOTSET", "", "VALID"):
            raise FdpuError(f"{path}: {_label(node)}: auto_pad {auto}; the importer takes "
                            f"explicit pads (NOTSET) or VALID")
        pads = (0, 0, 0, 0) if auto == "VALID" else tuple(attrs.get("pads", (0, 0, 0, 0)))
        if len(strides) != 2 or len(pads) != 4:
            raise FdpuError(f"{path}: {_label(node)}: strides {list(strides)} and pads "
                            f"{list(pads)}; a 2-D convolution has two strides and four pads")
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = self.const(node, node.input[2], "bias B")
            if bias.shape != (w.shape[0],):
                raise FdpuError(f"{path}: {_label(node)}: bias B of shape {bias.shape}; it "
                                f"has one value per output channel ({w.shape[0]})")
        return ["conv", w, bias, None, _label(node), dict(stride=strides, pads=pads)]

    def _fold_batchnorm(self, node, layer):
        """Fold the inference ``BatchNormalization`` ``node`` into ``layer``'s weights and
        bias (float64, then binary16 once): ``y = g (x - mean) / sqrt(var + eps) + b``."""
        path = self.path
        if len([o for o in node.output if o]) > 1 or _attrs(node).get("training_mode", 0):
            raise FdpuError(f"{path}: {_label(node)}: a training-mode BatchNormalization "
                            f"(running statistics as outputs) is not supported; export the "
                            f"model in eval mode")
        k = layer[1].shape[0]
        names = ("scale", "B", "input_mean", "input_var")
        vals = [self.const(node, n, what).astype(np.float64)
                for n, what in zip(node.input[1:5], names)]
        for v, what in zip(vals, names):
            if v.shape != (k,):
                raise FdpuError(f"{path}: {_label(node)}: {what} of shape {v.shape}; it has "
                                f"one value per output channel ({k})")
        scale, shift, mean, var = vals
        eps = float(_attrs(node).get("epsilon", 1e-5))
        if (var + eps <= 0).any():
            raise FdpuError(f"{path}: {_label(node)}: input_var + epsilon is not positive")
        g = scale / np.sqrt(var + eps)
        w = layer[1].astype(np.float64)
        layer[1] = (w * g.reshape((k,) + (1,) * (w.ndim - 1))).astype(np.float32)
        b = np.zeros(k) if layer[2] is None else layer[2].astype(np.float64)
        layer[2] = ((b - mean) * g + shift).astype(np.float32)
        layer[4] += f" + {_label(node)[5:]}"

    def _gemm(self, node):
        """Return the layer of a ``Gemm`` node (alpha and beta folded in)."""
        path, attrs = self.path, _attrs(node)
        for name in ("transA", "transB"):
            if attrs.get(name, 0) not in (0, 1):
                raise FdpuError(f"{path}: {_label(node)}: {name} = {attrs[name]}; it is 0 or 1")
        if attrs.get("transA", 0):
            raise FdpuError(f"{path}: {_label(node)}: transA = 1 (transposed activations) is "
                            f"not supported")
        b = self.const(node, node.input[1], "weight B")
        if b.ndim != 2:
            raise FdpuError(f"{path}: {_label(node)}: B must be 2-D, got shape {b.shape}")
        w = (b if attrs.get("transB", 0) else b.T) * np.float32(attrs.get("alpha", 1.0))
        bias = None
        if len(node.input) > 2 and node.input[2]:
            c = self.const(node, node.input[2], "bias C") * np.float32(attrs.get("beta", 1.0))
            if c.size not in (1, w.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                raise FdpuError(f"{path}: {_label(node)}: bias C of shape {c.shape} does not "
                                f"broadcast to the K = {w.shape[0]} outputs")
            bias = np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()
        return ["dense", w, bias, None, _label(node), {}]

    def post_steps(self, core):
        """Return the host steps after the last layer (every node not taken yet, in graph
        order, reading only ``core``, their own outputs and constants) and the graph's output
        names, each computed from ``core``."""
        path, post, known, derived = self.path, [], {core}, {core}
        for node in self.graph.node:
            if id(node) in self.used:
                continue
            if node.op_type in SUPPORTED and node.op_type not in POST_OPS:
                shared = [n for n in node.input if len(self.consumers.get(n, [])) > 1]
                if shared:
                    raise FdpuError(f"{path}: value '{shared[0]}' feeds "
                                    f"{len(self.consumers[shared[0]])} nodes; the FC layers are "
                                    f"a chain (no branches)")
                raise FdpuError(f"{path}: {_label(node)} is not on the chain of layers from "
                                f"the input (a branch, or a layer after a host step the array "
                                f"does not take between layers); the layers run on the array "
                                f"as one chain, with {', '.join(MID_OPS)} between them on the "
                                f"host")
            st = self.step(node, POST_OPS, "after the last FC layer")
            for name in node.input:
                if name and name not in self.inits and name not in known:
                    raise FdpuError(f"{path}: {_label(node)} reads '{name}', which is not "
                                    f"computed by the last FC layer or a host step after it")
            known.update(n for n in node.output if n)
            if derived & set(node.input):
                derived.update(n for n in node.output if n)
            post.append(st)
        outputs = tuple(o.name for o in self.graph.output)
        for name in outputs:
            if name not in derived:
                raise FdpuError(f"{path}: the graph's output '{name}' is not computed from the "
                                f"last FC layer ('{core}')")
        return post, outputs


def _is_bias(node, value, layer, inits):
    """Return whether the ``Add`` ``node`` is the bias of ``layer``, just before it: a
    constant added to ``value`` right after a layer that has no bias yet."""
    if layer[2] is not None:
        return False
    if value not in node.input:
        return False
    other = node.input[1] if node.input[0] == value else node.input[0]
    return other in inits


def _local(net):
    """Return the first layer's node label without the file's name."""
    name = net.layers[0].name
    return name.split(": ", 1)[1] if ": " in name else name


def _check_steps(net, path):
    """Run the host steps on one zero row and follow its shape through the layers, so that a
    step that cannot run on this network (a shape that does not flatten to the first layer's
    inputs, a pool larger than its input, an index out of range) is an error before any work
    starts."""
    first = net.layers[0]
    want = f"N x {first.channels} x H x W" if isinstance(first, Conv) else f"N x {first.C}"
    if net.input_shape is None:
        if isinstance(first, Conv):          # H and W come with the inputs: checked then
            return
        out = (net.K,)
    else:
        shape = net.input_shape
        try:
            x = prepare_inputs(net, np.zeros((1,) + tuple(shape), np.float32))
        except FdpuError as exc:
            raise FdpuError(f"{path}: {exc}") from None
        fits = (x.ndim == 4 and x.shape[:2] == (1, first.channels)) \
            if isinstance(first, Conv) else x.shape == (1, first.C)
        if not fits and not net.pre:
            raise FdpuError(f"{path}: the input is N x {' x '.join(map(str, shape))} but the "
                            f"first layer ({_local(net)}) takes {want}")
        if not fits:
            raise FdpuError(f"{path}: the input of shape {shape} becomes {x.shape[1:]} "
                            f"before the first layer, which takes {want}")
        out = layer_shapes(net, x.shape[1:])[-1]
    try:
        head(net, np.zeros((1,) + tuple(out), np.float32))
    except FdpuError as exc:
        raise FdpuError(f"{path}: {exc}") from None
