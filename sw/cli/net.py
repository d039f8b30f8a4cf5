"""``fdpu net``: run a whole network (MLP or CNN), layer by layer, on a simulator and check
every layer.

``fdpu net MODEL [--inputs X.npy [--labels y.npy] [--limit N] | --batch N [--seed S]]
[--sim golden|model|icarus|verilator] [--mode dense|sparse] [--sparse-graph G] [--density D]
[--rows R --cols C ...] [--[no-]chain] [--[no-]split] [--out Y.npy] [--json PATH]``

``MODEL`` is an ONNX file (``.onnx``, :func:`sw.compiler.onnx_import.load`) or a network
``.npz`` (:func:`sw.compiler.net.from_npz`).  Each layer is planned with its own bias and
ReLU, computed on the array (``y = relu(x W^T + b)``), and run on the chosen simulator; its
binary16 outputs are the next layer's inputs: kept in the Dbufs where the two layers chain on
chip (:mod:`sw.compiler.chain`, ``--[no-]chain``), else streamed by the host.  A layer with
few work items may run as the two stages of a split reduction (:mod:`sw.compiler.split`,
``--[no-]split``), each a row of the report.

* ``golden``: :func:`sw.models.golden_fc.run_fc` (exact for small layers, as ``fdpu run``);
  a layer matches when its result is within the float64 bound of
  :func:`sw.models.reference.check` on its own inputs.
* ``model``: the same golden values and check, and the performance model's cycles,
  utilization and external bytes per layer (:func:`sw.models.perf.predict`).
* ``icarus``/``verilator``: :func:`tb.host.runtime.run_fc_rtl` per layer; a layer matches when
  the RTL's result equals the golden model's run of the same plan and inputs bit for bit; the
  RTL's result feeds the next layer.

An ONNX model's host steps (:mod:`sw.compiler.host_steps`: what the exporter put before the
first layer and after the last) run on the host, in float32; the report lists them.  With
``--labels`` the report gives the accuracy of FDPU's outputs and of the float32 evaluation of
the same network (:func:`sw.compiler.net.reference`, the weights as run) on the same binary16
inputs, as the model's task says (:attr:`sw.compiler.net.Net.task`: top-1, a binary class, or
for a regressor the error against float32 instead); ``--reference onnxruntime`` compares
every graph output with onnxruntime's run of the file.

A convolution layer (:mod:`sw.compiler.conv`) runs as the matrix multiplication of its
``K x (C R S)`` weights by its inputs unrolled on the host (one row per output position);
pooling and flattening between layers run on the host (:data:`sw.compiler.host_steps.MID_OPS`)
and the report names them.  Exit status 0 when every layer matches, 1 when one does not, 2
for bad input.
"""

import argparse
import dataclasses
import importlib.util
import os
import sys

import numpy as np
from rich.table import Table

from sw.cli.options import DEFAULTS, add_hw_args, array_params, plan_options, system_of
from sw.cli.output import Bars, check_outputs, console, save_npy, write_json
from sw.compiler import fc_plan, layers, net, onnx_import
from sw.compiler.prune import check_density, prune
from sw.models import golden_fc
from sw.runtime.layer import RtlOptions
from sw.runtime.network import NetOptions, run_network
from sw.spec.errors import FdpuError, deferred_warnings
from sw.spec.system import SIMULATORS
from tb.host.job_plan import MemModel

__all__ = ["register", "check_options", "load_model", "load_labels", "net_command"]

#: The model file types ``fdpu net`` reads, by suffix.
MODEL_TYPES = {".onnx": "an ONNX model", ".npz": "a network .npz (W0, b0, W1, ...)"}


def register(subparsers):
    """Add the ``net`` command."""
    parser = subparsers.add_parser(
        "net", help="run a network (an MLP or a CNN: ONNX or .npz) layer by layer and check "
                    "every layer",
        description="Plan every FC and convolution layer of a network with its bias and ReLU "
                    "on the array (a convolution as a matrix multiplication of its unrolled "
                    "inputs), run the layers one after the other on a simulator (each layer's "
                    "binary16 outputs are the next one's inputs, pooling and flattening on the "
                    "host between them), check each layer and report per layer and in total; "
                    "with --labels, the top-1 accuracy against the float32 "
                    "evaluation of the same network (docs/net.md).")
    parser.add_argument("model", metavar="MODEL",
                        help="the network: an ONNX model (.onnx) or a network .npz")
    parser.add_argument("--sim", choices=("golden", "model", "icarus", "verilator"),
                        default="golden",
                        help="golden: the golden model, each layer checked against float64 "
                             "(default); model: the same, with the performance model's cycles "
                             "per layer; icarus, verilator: the RTL, each layer bit for bit "
                             "against the golden model")
    data = parser.add_argument_group("inputs and labels")
    data.add_argument("--inputs", metavar="X.npy", help="the N x C inputs of the network (.npy)")
    data.add_argument("--labels", metavar="y.npy",
                      help="the N classes of the inputs (integers in 0..K-1): top-1 accuracy")
    data.add_argument("--limit", type=int, metavar="N",
                      help="run the first N rows of --inputs (and --labels) only")
    data.add_argument("--batch", type=int, metavar="N",
                      help="rows of seeded synthetic inputs without --inputs (default 1)")
    data.add_argument("--seed", type=int, default=0, metavar="S",
                      help="seed of the synthetic inputs (default 0)")
    arr = parser.add_argument_group("graph and array")
    arr.add_argument("--mode", choices=fc_plan.MODES, default="sparse",
                     help="dense graph, or the paper's sparse FD-CSR graph (default sparse)")
    arr.add_argument("--sparse-graph", choices=fc_plan.SPARSE_GRAPHS,
                     help="sparse: skip, gather or switch (default: per layer, as fdpu run "
                          "chooses at the layer's density)")
    arr.add_argument("--density", type=float, metavar="D",
                     help="prune every layer's weights to this fraction in [0, 1] (default: "
                          "the model's weights as they are)")
    arr.add_argument("--rows", type=int, default=DEFAULTS["rows"], metavar="R",
                     help=f"PE rows (default {DEFAULTS['rows']})")
    arr.add_argument("--cols", type=int, default=DEFAULTS["cols"], metavar="C",
                     help=f"PE columns (default {DEFAULTS['cols']})")
    add_hw_args(parser)
    parser.add_argument("--chain", action=argparse.BooleanOptionalAction, default=None,
                        help="--sim model|icarus|verilator: keep each layer's outputs in the "
                             "Dbufs as the next layer's inputs (MOVE descriptors, no external "
                             "traffic); --chain needs every link to chain, --no-chain streams "
                             "every layer's outputs through the host (default: chain where "
                             "both layers fit the Dbufs in one pass)")
    parser.add_argument("--split", action=argparse.BooleanOptionalAction, default=None,
                        help="split the reduction of a layer whose work items fill at most "
                             "half of the PEs over column slices on more engines, then add the "
                             "partial sums on the array (a second, skip-graph stage); --split "
                             "splits every such layer, --no-split none (default: where the "
                             "performance model predicts the two stages faster)")
    gold = parser.add_argument_group("golden model")
    gold.add_argument("--engine", choices=golden_fc.ENGINES, default="auto",
                      help="--sim golden|model: exact (token by token), fast (vectorized, the "
                           "same bits) or auto (exact for small layers; default)")
    gold.add_argument("--reference", choices=("onnxruntime",),
                      help="also run the original ONNX file on onnxruntime (the nets extra) "
                           "with the same inputs and report, per graph output, the agreement "
                           "(labels) or the largest absolute difference (scores)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="Y.npy", help="write the network's N x K binary16 outputs")
    out.add_argument("--json", metavar="PATH", help="write every layer's figures as JSON")
    # The per-layer options of fdpu run that plan_options reads: each layer brings its own.
    parser.set_defaults(func=net_command, kb=None, gb=None, wfan=None, bias=None, relu=False)


def check_options(args):
    """Refuse, before any work, a model that is neither ``.onnx`` nor ``.npz``, options that
    do not go together and values out of range."""
    suffix = os.path.splitext(args.model)[1].lower()
    if suffix not in MODEL_TYPES:
        raise FdpuError(f"{args.model}: not a network file; MODEL is "
                        f"{' or '.join(f'{v} ({k})' for k, v in MODEL_TYPES.items())}")
    for flag, path in (("--inputs", args.inputs), ("--labels", args.labels)):
        if path is not None and not path.strip():
            raise FdpuError(f"{flag}: the path is empty (give a .npy file, or leave {flag} out)")
    if args.seed < 0:
        raise FdpuError(f"--seed must be a non-negative integer, got {args.seed}")
    for flag, value in (("--batch", args.batch), ("--limit", args.limit)):
        if value is not None and value < 1:
            raise FdpuError(f"{flag} must be at least 1, got {value}")
    if args.batch is not None:
        layers.check_sizes(N=args.batch, where="--batch")
    if args.inputs is None:
        given = [flag for flag, v in (("--labels", args.labels), ("--limit", args.limit)) if v]
        if given:
            raise FdpuError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} "
                            f"--inputs X.npy (synthetic inputs have no classes)")
    elif args.batch is not None:
        raise FdpuError("--batch makes synthetic inputs; with --inputs use --limit N to run "
                        "the first N rows")
    if args.density is not None:
        check_density(args.density, "--density")
    if args.reference and suffix != ".onnx":
        raise FdpuError(f"--reference onnxruntime runs an ONNX model; {args.model} is a network "
                        f".npz")
    if args.reference and importlib.util.find_spec("onnxruntime") is None:
        raise FdpuError("--reference onnxruntime needs the onnxruntime package: pip install -e "
                        ".[nets] (or pip install onnxruntime)")
    rtl_sim = args.sim in SIMULATORS
    wrong = [flag for flag, given, ok in (
        ("--max-cycles", args.max_cycles is not None, rtl_sim),
        ("--waves", args.waves, rtl_sim),
        ("--golden", args.golden != "auto", rtl_sim),
        ("--engine", args.engine != "auto", not rtl_sim)) if given and not ok]
    if args.chain is not None and args.sim == "golden":
        raise FdpuError(f"--{'' if args.chain else 'no-'}chain applies to --sim "
                        f"model|icarus|verilator, not to --sim golden (the golden model's "
                        f"numbers are the same either way)")
    if wrong:
        where = ("an RTL simulation (--sim icarus|verilator)" if args.sim in ("golden", "model")
                 else "--sim golden|model")
        raise FdpuError(f"{', '.join(wrong)} {'applies' if len(wrong) == 1 else 'apply'} to "
                        f"{where}, not to --sim {args.sim}")
    if args.max_cycles is not None and args.max_cycles < 1:
        raise FdpuError(f"--max-cycles must be a positive number of cycles per pass, got "
                        f"{args.max_cycles}")
    params = array_params(args)
    system_of(args, params)
    plan_options(args)
    if rtl_sim:
        MemModel(latency=args.mem_latency, bandwidth=args.mem_bandwidth).registers()
    return params


def load_model(path):
    """Return the :class:`~sw.compiler.net.Net` of ``path`` (``.onnx`` or ``.npz``)."""
    if os.path.splitext(path)[1].lower() == ".onnx":
        return onnx_import.load(path)
    return net.from_npz(path)


def load_labels(path, n, k):
    """Read ``n`` class labels (a 1-D integer ``.npy``, each in ``0 .. k-1``; a binary
    classifier's ``k`` is 2) from ``path``."""
    arr = layers.load_npy(path, "labels")
    if arr.dtype.kind not in "iu":
        raise FdpuError(f"{path}: labels have dtype {arr.dtype}; they must be integers (the "
                        f"class of each input row, 0..{k - 1})")
    if arr.ndim != 1 or arr.shape[0] != n:
        raise FdpuError(f"{path}: labels have shape {arr.shape}; they must be 1-D with one "
                        f"class per input row ({n})")
    bad = (arr < 0) | (arr >= k)
    if bad.any():
        i = int(np.argmax(bad))
        raise FdpuError(f"{path}: label {int(arr[i])} at row {i} is outside 0..{k - 1} (the "
                        f"network has K = {k} outputs); {int(bad.sum())} label(s) out of range")
    return arr.astype(np.int64)


def _inputs(args, model):
    """Return the first layer's inputs (binary16, ``N x C`` or ``N x C x H x W``: the model's
    input through its host steps before the layers), the model's inputs as given (float32,
    for a reference run) and the labels (or ``None``)."""
    if args.inputs is None:
        if args.reference and model.pre:
            raise FdpuError(f"--reference onnxruntime: {args.model} has host steps before its "
                            f"layers, so its inputs are not the first layer's; give --inputs "
                            f"X.npy in the model's input shape")
        shape = net.first_shape(model)
        if shape is None:
            raise FdpuError(f"{args.model}: the model leaves its input's image size open, so "
                            f"synthetic inputs have no shape; give --inputs X.npy")
        x = layers.make_inputs(int(np.prod(shape)), args.batch or 1, args.seed)
        x = x.reshape((-1,) + shape)
        return x, x.astype(np.float32), None
    if model.pre or model.convolutional:
        x, raw = _prepared_inputs(args.inputs, model)
    else:
        x = layers.load_inputs(args.inputs, model.C)
        raw = x.astype(np.float32)
    if args.labels and model.task == "regressor":
        raise FdpuError(f"--labels: {args.model} is a regressor (one output without a "
                        f"classifier's head); it is scored by its error against float32, "
                        f"not by labels")
    classes = 2 if model.task == "binary" else model.K
    y = load_labels(args.labels, x.shape[0], classes) if args.labels else None
    if args.limit is not None:
        if args.limit > x.shape[0]:
            raise FdpuError(f"--limit {args.limit} exceeds the {x.shape[0]} rows of "
                            f"{args.inputs}")
        x, raw = x[:args.limit], raw[:args.limit]
        y = None if y is None else y[:args.limit]
    return x, raw, y


def _prepared_inputs(path, model):
    """Read the model's inputs from ``path`` (``N x input_shape``, any rank) and run the host
    steps before the layers on them; return the first layer's binary16 inputs and the inputs
    as read (float32)."""
    arr = layers.load_npy(path, "inputs")
    shape = model.input_shape
    if shape is not None:
        if arr.shape == shape:
            arr = arr[None]
        if arr.shape[1:] != shape:
            raise FdpuError(f"{path}: inputs have shape {arr.shape}; {model.source} takes "
                            f"N x {' x '.join(map(str, shape))} (its input "
                            f"'{model.input_name}')")
    if arr.dtype.kind != "f":
        raise FdpuError(f"{path}: inputs have dtype {arr.dtype}; they must be floating point")
    if not np.isfinite(arr).all():
        raise FdpuError(f"{path}: inputs hold NaN or infinity")
    try:
        x = net.prepare_inputs(model, arr)
    except FdpuError as exc:
        raise FdpuError(f"{path}: {exc}") from None
    first = model.layers[0]
    if isinstance(first, net.Conv):
        if x.ndim != 4 or x.shape[1] != first.channels:
            raise FdpuError(f"{path}: inputs of shape {arr.shape} become {x.shape} through the "
                            f"model's host steps; the first layer, a convolution, takes "
                            f"N x {first.channels} x H x W")
        return layers.check_images(x, os.fspath(path)), arr.astype(np.float32)
    if x.ndim != 2 or x.shape[1] != model.C:
        raise FdpuError(f"{path}: inputs of shape {arr.shape} become {x.shape} through the "
                        f"model's host steps; the first layer takes N x {model.C}")
    return layers.check_inputs(x, model.C, os.fspath(path)), arr.astype(np.float32)


def net_command(args):
    """Run the network; return 0 if every layer matches, 1 if not."""
    params = check_options(args)
    check_outputs([("--out", args.out), ("--json", args.json)],
                  [("MODEL", args.model), ("--inputs", args.inputs), ("--labels", args.labels)])
    system = system_of(args, params)
    with deferred_warnings():            # a refused input: its error line alone
        model = load_model(args.model)
        x0, raw, labels = _inputs(args, model)
        run_net = model if args.density is None else dataclasses.replace(model, layers=tuple(
            layer.with_matrix(prune(layer.matrix, args.density)) for layer in model.layers))
    rtl = RtlOptions(max_cycles=args.max_cycles, waves=args.waves)
    x, ran = run_network(run_net, x0, params, plan_options(args), system,
                         NetOptions(args.sim, args.engine, args.golden, args.chain, args.split,
                                    rtl, args.model), Bars())
    record = {**dict(sim=args.sim, model=args.model, N=int(x0.shape[0]), inputs=args.inputs,
                     labels=args.labels, mode=args.mode, density=args.density), **ran}
    recs = record["layers"]
    y_ref = net.reference(run_net, x0)
    record.update(task=run_net.task, outputs=list(run_net.outputs),
                  host_steps=dict(before=[s.label for s in run_net.pre],
                                  between=[[s.label for s in steps]
                                           for steps in run_net.between],
                                  after=[s.label for s in run_net.post]))
    outputs = net.head(run_net, x.astype(np.float32))   # the model's outputs, on the host
    ours, ref = net.predictions(run_net, x), net.predictions(run_net, y_ref)
    if ours is None:
        err = np.abs(x.astype(np.float32) - y_ref)
        record.update(max_abs_error=float(err.max()), mean_abs_error=float(err.mean()))
    else:
        record["predictions_differ"] = int((ours != ref).sum())
    if labels is not None:
        record["accuracy"] = float((ours == labels).mean())
        record["accuracy_float32"] = float((ref == labels).mean())
    if args.reference:
        record["onnxruntime"] = _onnxruntime(args.model, raw, outputs)
    _print(record, args, params)
    if args.out:
        save_npy(args.out, x)
    if args.json:
        write_json(args.json, record)
    if not record["match"]:
        bad = [str(r["index"]) for r in recs if not r["match"]]
        print(f"fdpu net: layer(s) {', '.join(bad)} do not match ("
              + ("the float64 error bound" if args.sim in ("golden", "model")
                 else "bit for bit with the golden model") + ")", file=sys.stderr)
        return 1
    return 0


def _onnxruntime(path, raw, ours):
    """Run ``path`` on onnxruntime with the model's inputs ``raw``; return per graph output the
    agreement with ``ours`` (integer outputs: the fraction of equal rows) or the largest
    absolute difference (float outputs)."""
    import onnxruntime
    try:
        sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        theirs = sess.run(None, {sess.get_inputs()[0].name: raw})
    except Exception as exc:  # noqa: BLE001: onnxruntime raises its own exception types
        raise FdpuError(f"--reference onnxruntime: {path} does not run on onnxruntime "
                        f"({type(exc).__name__}: {str(exc)[:160]})") from None
    out = {}
    for (name, mine), other in zip(ours.items(), theirs):
        if isinstance(other, list):              # ZipMap: a map per row, keys in class order
            other = np.array([[row[k] for k in sorted(row)] for row in other], np.float32)
        other, mine = np.asarray(other), np.asarray(mine)
        if other.size != mine.size:
            out[name] = dict(error=f"shapes differ: {mine.shape} here, {other.shape} there")
        elif other.dtype.kind in "iub":
            rows = mine.reshape(mine.shape[0] if mine.ndim else 1, -1)
            equal = (rows == other.reshape(rows.shape)).all(axis=1)
            out[name] = dict(agreement=float(equal.mean()))
        else:
            diff = np.abs(mine.astype(np.float64) - other.reshape(mine.shape).astype(np.float64))
            out[name] = dict(max_abs_difference=float(diff.max()) if diff.size else 0.0)
    return out


def _match_cell(r):
    """Return the report's match cell of a layer record."""
    if not r["match"]:
        return f"NO ({r['check']['failures'] if 'check' in r else r['mismatches']} outputs)"
    if r.get("checked_at", r["index"]) != r["index"]:
        return f"yes (through layer {r['checked_at']})"
    return "yes"


def _print(record, args, params):
    """Print the per-layer table, the totals and the accuracy."""
    recs = record["layers"]
    figures = args.sim != "golden"
    how = ("within the float64 bound" if args.sim in ("golden", "model")
           else "bit for bit with golden")
    t = Table(title=f"fdpu net --sim {args.sim}: {args.model} ({args.mode}, batch "
                    f"{record['N']}, {params.rows}x{params.cols} PEs)", title_justify="left")
    for col in ("layer", "K x C", "non-zero (density)", "graph", "bias / relu",
                f"match ({how})"):
        t.add_column(col, justify="right" if col in ("K x C", "non-zero (density)") else "left")
    if figures:
        t.add_column("inputs / outputs")
        for col in ("cycles (compute)", "utilization", "external bytes (min)",
                    "bound reached"):
            t.add_column(col, justify="right")
    for r in recs:
        row = [f"{r['index']} {r['name']}", f"{r['K']} x {r['C']}"
               + (f" (conv, {r['N']:,} rows)" if "conv" in r else ""),
               f"{r['nnz']:,} ({r['density']:.1%})", r["graph"],
               f"{'yes' if r['bias'] else 'no'} / {'yes' if r['relu'] else 'no'}",
               _match_cell(r)]
        if figures:
            row += [f"{'chip' if r['chained_in'] else 'host'} / "
                    f"{'chip' if r['chained_out'] else 'host'}",
                    f"{r['cycles']:,} ({r['compute_cycles']:,})", f"{r['utilization']:.2%}",
                    f"{r['external_bytes']:,} ({r['min_external_bytes']:,})",
                    f"{r['bound_reached']:.0%} ({r['bound_by']})"]
        t.add_row(*row)
    if figures:
        tot = record["total"]
        t.add_section()
        t.add_row("total", "", f"{sum(r['nnz'] for r in recs):,}", "", "",
                  "yes" if record["match"] else "NO", "",
                  f"{tot['cycles']:,} ({tot['compute_cycles']:,})", f"{tot['utilization']:.2%}",
                  f"{tot['external_bytes']:,} ({tot['min_external_bytes']:,})",
                  f"{tot['bound_reached']:.0%}")
    console().print(t)
    steps = record["host_steps"]
    for where in ("before", "after"):
        if steps[where]:
            console().print(f"host steps {where} the layers (float32, on the host): "
                            + " -> ".join(steps[where]))
    for i, between in enumerate(steps["between"]):
        if between:
            console().print(f"host steps between layers {i} and {i + 1} (float32, on the "
                            f"host): " + " -> ".join(between))
    for r in recs:
        if "conv" in r:
            console().print(
                f"layer {r['index']}: convolution {r['conv']} on "
                f"{' x '.join(map(str, r['input_shape']))} -> "
                f"{' x '.join(map(str, r['output_shape']))}, run as {r['K']} x {r['C']} by "
                f"{r['N']:,} unrolled rows (unrolled on the host: {r['input_bytes']:,} input "
                f"bytes become {r['unrolled_input_bytes']:,})")
    what = {"classifier": "top-1", "binary": "binary class (output > 0)"}.get(record["task"])
    if what is None:
        console().print(f"regressor: FDPU's outputs against the float32 reference: max "
                        f"absolute error {record['max_abs_error']:.4g}, mean "
                        f"{record['mean_abs_error']:.4g}")
    elif "accuracy" in record:
        n = record["N"]
        console().print(f"{what} accuracy on {n} rows: FDPU {record['accuracy']:.2%}, float32 "
                        f"reference {record['accuracy_float32']:.2%}; predictions differ on "
                        f"{record['predictions_differ']} of {n}")
    else:
        console().print(f"predictions ({what}) differing from the float32 reference: "
                        f"{record['predictions_differ']} of {record['N']}")
    for name, cmp in record.get("onnxruntime", {}).items():
        if "agreement" in cmp:
            what = f"agrees on {cmp['agreement']:.2%} of the rows"
        elif "max_abs_difference" in cmp:
            what = f"largest absolute difference {cmp['max_abs_difference']:.4g}"
        else:
            what = cmp["error"]
        console().print(f"onnxruntime, output '{name}': {what}")
    if args.sim == "model":
        console().print("cycles and bytes from the performance model (docs/perf.md)")
    if figures:
        for link in record["links"]:
            a, b = link["layers"]
            console().print(f"layer {a} -> {b}: " + (
                "kept on chip (MOVE descriptors, Dbuf to Dbuf)" if link["on_chip"] else
                f"streamed through the host, not counted ({link['streamed_because']})"))
