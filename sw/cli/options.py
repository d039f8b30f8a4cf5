"""The options that ``fdpu run``, ``fdpu rtl`` and ``fdpu asm`` share: which layer and data,
the graph and array (:func:`add_layer_args`, :func:`plan_options`, :func:`resolve`), and the
RTL simulation's hardware options (:func:`add_hw_args`)."""

import argparse
import warnings
from contextlib import contextmanager

import numpy as np

from sw.compiler import conv, fc_plan, layers
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.prune import check_density, prune
from sw.models import choose, golden_fc
from sw.runtime.layer import conv_figures
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError, FdpuWarning, deferred_warnings
from sw.spec.system import DEFAULT as SYSTEM
from sw.spec.system import System

_ARRAY = ArrayParams()

__all__ = ["DEFAULTS", "add_layer_args", "check_layer_options", "plan_options", "layer_of",
           "as_options", "plan_layer", "plan_run", "system_of", "check_system", "graph_name",
           "resolve", "add_array_args", "add_hw_args", "array_params", "conv_of", "conv_record"]

#: The configuration every command defaults to, the one the README's figures are measured on:
#: ``ArrayParams()`` (the paper's 8 x 8 array, its 6 KB operand buffer, its two integer units,
#: 2 MiB Dbufs) in the system ``System()`` (4 DMA channels, one per array edge).  Read from
#: those two values, never written here.
DEFAULTS = dict(rows=_ARRAY.rows, cols=_ARRAY.cols, slots=_ARRAY.slots,
                operand_depth=_ARRAY.operand_depth, int_issue=_ARRAY.int_issue,
                dbuf_bytes=_ARRAY.dbuf_bytes, dma_channels=SYSTEM.dma_channels)

def add_layer_args(parser):
    """Add the options that choose a layer, its data, the mode and the array."""
    src = parser.add_argument_group("layer and data")
    src.add_argument("--layer", metavar="NAME",
                     help=f"a zoo layer: {', '.join(layers.layer_names())}")
    src.add_argument("--in-features", type=int, metavar="C", help="C of a synthetic layer")
    src.add_argument("--out-features", type=int, metavar="K", help="K of a synthetic layer")
    src.add_argument("--weights", metavar="W.npy", help="the K x C weight matrix (.npy)")
    src.add_argument("--inputs", metavar="X.npy", help="the N x C inputs (.npy)")
    src.add_argument("--bias", metavar="B.npy",
                     help="a bias per output (1-D .npy of length K), added on the array after "
                          "each output's accumulation (FADD, rounded once)")
    src.add_argument("--density", type=float, metavar="D",
                     help="prune the weights to this fraction in [0, 1] (default: the layer's "
                          "density; 1.0 for --in/--out-features; user weights as they are)")
    src.add_argument("--batch", type=int, metavar="N",
                     help="batch size of synthetic inputs (default 1)")
    src.add_argument("--seed", type=int, default=0, metavar="S",
                     help="seed of the synthetic weights and inputs (default 0)")
    arr = parser.add_argument_group("graph and array")
    arr.add_argument("--mode", choices=fc_plan.MODES, default="sparse",
                     help="dense graph, or the paper's sparse FD-CSR graph (default sparse)")
    arr.add_argument("--sparse-graph", choices=fc_plan.SPARSE_GRAPHS,
                     help="sparse: the skip graph, whose work is the stored weights only, the "
                          "branch-free gather graph (BSCAN's token addresses the value load) or "
                          "the paper's SWITCH graph with its feedback edges (the same bits as "
                          "gather); default: skip where the blocking estimate says it is faster "
                          "at the layer's density, else gather (docs/dataflow.md)")
    arr.add_argument("--relu", action="store_true",
                     help="apply ReLU to each output on the array, after the bias (FMAX #0.0)")
    arr.add_argument("--kb", type=int, metavar="K",
                     help="output rows per engine (default: the blocking chooser's)")
    arr.add_argument("--gb", type=int, metavar="G",
                     help="lane groups (4 batch elements) per engine (default: the chooser's)")
    arr.add_argument("--chunks", type=int, metavar="N",
                     help="dense and the skip graph: contexts per work item (a streamed "
                          "plan: each steps over 1/N of the item's columns and starts when its "
                          "share of the weights is in, docs/dataflow.md; default: 1, or where "
                          "the layer waits for its DMA-in, the count the performance model "
                          "predicts fastest)")
    arr.add_argument("--wfan", type=int, choices=fc_plan.WFANS,
                     help="sparse: lane groups per value load (default: the chooser's)")
    arr.add_argument("--rows", type=int, default=DEFAULTS["rows"], metavar="R",
                     help=f"PE rows (default {DEFAULTS['rows']})")
    arr.add_argument("--cols", type=int, default=DEFAULTS["cols"], metavar="C",
                     help=f"PE columns (default {DEFAULTS['cols']})")


def plan_options(args, feedback=True):
    """Return the :class:`~sw.compiler.fc_layer.PlanOptions` of the graph options (checked;
    ``feedback``: the SWITCH graph's feedback edges)."""
    if args.mode != "sparse":
        given = [flag for flag, v in (("--sparse-graph", args.sparse_graph is not None),
                                      ("--wfan", args.wfan is not None)) if v]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise FdpuError(f"{', '.join(given)} {verb} to --mode sparse only")
    double = getattr(args, "double_buffer", None)
    if double and not getattr(args, "overlap", True):
        raise FdpuError("--double-buffer overlaps the DMA with the contexts: it cannot run with "
                        "--no-overlap")
    if double is None and not getattr(args, "overlap", True):
        double = False
    with as_options("chunks"):
        return PlanOptions(mode=args.mode, sparse_graph=args.sparse_graph, kb=args.kb,
                           gb=args.gb, wfan=args.wfan, feedback=feedback, double_buffer=double,
                           chunks=getattr(args, "chunks", None))


def layer_of(args, w, n, bias=None, relu=None):
    """Return the :class:`~sw.compiler.fc_layer.FcLayer` of weights ``w`` at batch ``n``: its
    ``bias`` (default: ``--bias``, read and checked against ``K``) and ``relu`` (default:
    ``--relu``)."""
    if bias is None and getattr(args, "bias", None):
        bias = layers.load_bias(args.bias, np.asarray(w).shape[0])
    relu = bool(getattr(args, "relu", False)) if relu is None else relu
    return FcLayer.of(w, n, bias=bias, relu=relu)


def check_system(system, params):
    """Refuse system values the RTL top cannot have (the same limits as ``fdpu rtl``)."""
    if not 1 <= system.dma_channels <= params.num_dbufs:
        raise FdpuError(f"--dma-channels must be in 1..{params.num_dbufs} (the edge ports of a "
                        f"{params.rows} x {params.cols} array), got {system.dma_channels}")
    if system.config_ports not in (1, 2, 4):
        raise FdpuError(f"--config-ports must be 1, 2 or 4 (dividing the 8 Cbufs), got "
                        f"{system.config_ports}")
    bw = system.mem_bandwidth * 8
    if not 1 <= bw <= 64 or bw != int(bw):
        raise FdpuError(f"--mem-bandwidth must be a multiple of 1/8 in 1/8 .. 8 bytes per "
                        f"cycle, got {system.mem_bandwidth}")
    if not 0 <= system.mem_latency < 1 << 16:
        raise FdpuError(f"--mem-latency must be in 0 .. 65535 cycles, got {system.mem_latency}")


def system_of(args, params):
    """Return the :class:`~sw.spec.system.System` of the system options (defaults for a
    command without them), checked (:func:`check_system`)."""
    if getattr(args, "early_start", None) and not getattr(args, "overlap", SYSTEM.overlap):
        raise FdpuError("--early-start runs contexts beside their pass's DMA-in: it cannot run "
                        "with --no-overlap")
    # ``--early-start`` not given: None, which System makes ``overlap``.
    system = System(**{f: getattr(args, f, None if f == "early_start" else getattr(SYSTEM, f))
                       for f in ("dma_channels", "mem_latency", "mem_bandwidth", "config_ports",
                                 "overlap", "early_start", "edge_multicast", "config_spans")})
    check_system(system, params)
    return system


def plan_layer(args, w, x, params, feedback=True, bias=None, relu=None):
    """Return the plan of the layer (:func:`plan_run`'s)."""
    return plan_run(args, w, x, params, feedback, bias, relu)[0]


def plan_run(args, w, x, params, feedback=True, bias=None, relu=None):
    """Return ``(plan, system)`` of the layer (:func:`layer_of`, :func:`plan_options`,
    :func:`system_of`): without ``--[no-]double-buffer`` and ``--[no-]early-start`` the
    choices the performance model predicts faster (:func:`sw.models.choose.best_run`)."""
    with as_options("kb", "gb", "chunks"):
        return choose.best_run(layer_of(args, w, x.shape[0], bias, relu), params,
                               plan_options(args, feedback), system_of(args, params),
                               early_start=getattr(args, "early_start", None))


def graph_name(plan):
    """Return the name of the graph ``plan`` runs: ``dense`` or ``sparse/<sparse graph>``."""
    return plan.graph.label


def array_params(args):
    """Return the :class:`ArrayParams` of the array options (``--rows``, ``--cols``, and those
    of :func:`add_hw_args` the command has)."""
    given = {name: getattr(args, name) for name in ("slots", "operand_depth", "int_issue",
                                                    "dbuf_bytes") if hasattr(args, name)}
    with as_options("rows", "cols", *given):
        return ArrayParams(rows=args.rows, cols=args.cols, **given)


@contextmanager
def as_options(*names):
    """Name the command-line option in an :class:`FdpuError` of the block whose message begins
    with one of the parameter ``names`` (``rows must be ...`` becomes ``--rows must be ...``);
    a message about several (the Dbufs' address space) gets the options as a prefix."""
    try:
        yield
    except FdpuError as exc:
        msg = str(exc)
        first = msg.split(" ", 1)[0]
        if first in names:
            raise FdpuError("--" + first.replace("_", "-") + msg[len(first):]) from None
        if "Dbufs" in msg and "dbuf_bytes" in names:
            raise FdpuError(f"--rows/--cols/--dbuf-bytes: {msg}") from None
        raise


def check_layer_options(args):
    """Refuse bad layer and data options without loading or making any data: the seed, batch
    and density ranges, exactly one layer source, a known zoo layer, positive shapes."""
    if args.seed < 0:
        raise FdpuError(f"--seed must be a non-negative integer, got {args.seed}")
    for flag, path in (("--weights", args.weights), ("--inputs", args.inputs),
                       ("--bias", getattr(args, "bias", None))):
        if path is not None and not path.strip():
            raise FdpuError(f"{flag}: the path is empty (give a .npy file, or leave {flag} out)")
    if args.batch is not None and args.batch < 1:
        raise FdpuError(f"--batch must be at least 1, got {args.batch}")
    if args.density is not None:
        check_density(args.density, "--density")
    chosen = [n for n, v in (("--layer", args.layer), ("--weights", args.weights),
                             ("--in-features/--out-features",
                              args.in_features is not None or args.out_features is not None))
              if v]
    if len(chosen) != 1:
        raise FdpuError("give exactly one of --layer NAME, --in-features C --out-features K, "
                        f"or --weights W.npy (got {', '.join(chosen) or 'none'})")
    if args.layer:
        spec = layers.get_layer(args.layer)
        layers.check_sizes(spec.out_features, spec.in_features,
                           None if args.batch is None else spec.rows(args.batch),
                           where="--batch" if spec.conv is None else
                           f"--batch {args.batch} ({spec.name}: one row per output position)")
    if args.in_features is not None or args.out_features is not None:
        if args.in_features is None or args.out_features is None:
            raise FdpuError("--in-features and --out-features go together")
        for opt, v in (("--in-features", args.in_features),
                       ("--out-features", args.out_features)):
            if v < 1:
                raise FdpuError(f"{opt} must be a positive integer, got {v}")
        layers.check_sizes(args.out_features, args.in_features, args.batch,
                           where="--in-features/--out-features/--batch")
    elif args.batch is not None:
        layers.check_sizes(N=args.batch, where="--batch")


def resolve(args):
    """Return ``(description, weights, inputs, params)`` from the parsed options (the
    warnings of reading them issued only once all are accepted)."""
    with deferred_warnings():
        return _resolve(args)


def _resolve(args):
    params = array_params(args)
    check_layer_options(args)
    if args.weights:
        w = layers.load_weights(args.weights)
        if args.density is not None:
            w = prune(w, args.density)
        name = args.weights
    elif args.layer:
        spec = layers.get_layer(args.layer)
        w = layers.make_weights(spec, args.density, args.seed)
        name = spec.name
    else:
        w = layers.make_weights((args.out_features, args.in_features),
                                1.0 if args.density is None else args.density, args.seed)
        name = f"{args.out_features}x{args.in_features}"
    spec = layers.get_layer(args.layer) if args.layer else None
    if args.inputs and spec is not None and spec.conv is not None:
        x = _conv_inputs(args, spec)
    elif args.inputs:
        x = layers.load_inputs(args.inputs, w.shape[1])
        if args.batch is not None and args.batch != x.shape[0]:
            raise FdpuError(f"--batch {args.batch} disagrees with {args.inputs}, which holds "
                            f"{x.shape[0]} input rows")
    elif spec is not None:
        x = layers.make_layer_inputs(spec, args.batch or 1, args.seed)
    else:
        x = layers.make_inputs(w.shape[1], args.batch or 1, args.seed)
        if args.weights:
            warnings.warn(FdpuWarning(
                f"{args.weights} runs on {x.shape[0]} seeded synthetic input row(s) (--seed "
                f"{args.seed}): give --inputs X.npy to run it on yours"))
    return name, w, x, params


def _conv_inputs(args, spec):
    """Return the unrolled rows of the images in ``--inputs`` for the zoo convolution
    ``spec`` (``N x C x H x W``, the layer's shape)."""
    g = spec.conv
    arr = layers.load_npy(args.inputs, "inputs")
    want = (g.channels, g.height, g.width)
    if arr.ndim != 4 or arr.shape[1:] != want:
        raise FdpuError(f"{args.inputs}: inputs have shape {arr.shape}; {spec.name} takes "
                        f"images N x {' x '.join(map(str, want))}")
    if args.batch is not None and args.batch != arr.shape[0]:
        raise FdpuError(f"--batch {args.batch} disagrees with {args.inputs}, which holds "
                        f"{arr.shape[0]} images")
    layers.check_sizes(N=spec.rows(arr.shape[0]), where=f"{args.inputs}: inputs")
    return conv.unroll(g, layers.check_images(arr, args.inputs))


def conv_of(args):
    """Return the convolution of the options' zoo layer (its
    :class:`~sw.compiler.conv.Geometry`), or ``None``."""
    return layers.get_layer(args.layer).conv if getattr(args, "layer", None) else None


def conv_record(args, rec, rows, system):
    """Add the convolution's own figures to ``rec`` (:func:`sw.runtime.layer.conv_figures`)
    when the options' layer is a zoo convolution run on ``rows`` unrolled rows; return the
    report's line about it, or ``None``."""
    g = conv_of(args)
    if g is None:
        return None
    p, q = g.output
    images = rows // (p * q)
    conv_figures(rec, g, images, (g.channels, g.height, g.width), system)
    return (f"convolution {g.describe()}: {images} image(s) of {g.channels} x {g.height} x "
            f"{g.width} -> {g.K} x {p} x {q}, run as {rows:,} unrolled rows (unrolled on the "
            f"host: {rec['input_bytes']:,} input bytes become {rec['unrolled_input_bytes']:,}"
            f"; the minimum counts the input once)")


def add_array_args(parser):
    """Add the PE and Dbuf size options (``--slots``, ``--operand-depth``, ``--int-issue``,
    ``--dbuf-bytes``), defaults :data:`DEFAULTS`."""
    hw = parser.add_argument_group("PEs and Dbufs")
    hw.add_argument("--slots", type=int, default=DEFAULTS["slots"],
                    help=f"instruction slots per PE (default {DEFAULTS['slots']})")
    hw.add_argument("--operand-depth", type=int, default=DEFAULTS["operand_depth"],
                    metavar="D",
                    help="tokens each operand of a slot holds, the most contexts in flight "
                         f"(a power of two; default {DEFAULTS['operand_depth']}: with "
                         f"{DEFAULTS['slots']} slots the paper's 6 KB operand buffer)")
    hw.add_argument("--int-issue", type=int, choices=(1, 2), default=DEFAULTS["int_issue"],
                    help="INT/MEM/CTRL issues per PE and cycle: 1 or 2, the paper's two "
                         f"integer units (default {DEFAULTS['int_issue']}; docs/mapping.md)")
    hw.add_argument("--dbuf-bytes", type=int, default=DEFAULTS["dbuf_bytes"],
                    help="bytes per Dbuf (a power of two; default 2 MiB)")


def add_hw_args(parser):
    """Add :func:`add_array_args` and the system and simulation options (``--max-cycles``,
    ``--waves``, the external memory, DMA channels, configuration ports)."""
    add_array_args(parser)
    hw = parser.add_argument_group("system and simulation")
    hw.add_argument("--max-cycles", type=int, metavar="N",
                    help="cycle bound per pass (default 200k + 2k per context + 8 per "
                         "instruction an engine issues in the pass)")
    hw.add_argument("--waves", action="store_true", help="record a waveform (FST)")
    hw.add_argument("--mem-latency", type=int, default=SYSTEM.mem_latency, metavar="CYCLES",
                    help=f"external memory read latency in cycles (default "
                         f"{SYSTEM.mem_latency})")
    hw.add_argument("--mem-bandwidth", type=float, default=SYSTEM.mem_bandwidth, metavar="B",
                    help=f"external memory bytes per cycle, 1/8 .. 8 (default "
                         f"{SYSTEM.mem_bandwidth:g}), per channel")
    hw.add_argument("--golden", choices=golden_fc.ENGINES, default="auto",
                    help="the golden run to compare with: exact (the token-by-token interpreter "
                         "on the same images), fast (the vectorized path: the same bits and "
                         "instruction counts, seconds instead of minutes) or auto (default: exact "
                         f"up to {golden_fc.EXACT_LIMIT:,} weight x lane-group products, "
                         f"else fast)")
    hw.add_argument("--dma-channels", type=int, default=DEFAULTS["dma_channels"], metavar="W",
                    help="DMA channels, each with its own external memory and mesh edge port "
                         f"(default {DEFAULTS['dma_channels']}): W x the bandwidth")
    hw.add_argument("--config-ports", type=int, default=SYSTEM.config_ports, metavar="P",
                    help="MicC configuration ports, one per array edge, each sending the CONFIG "
                         "flits of the PEs nearest to it (1..4, dividing the 8 Cbufs; default "
                         f"{SYSTEM.config_ports})")
    hw.add_argument("--overlap", action=argparse.BooleanOptionalAction,
                    default=SYSTEM.overlap,
                    help="configure the PEs while the DMA-in fills the Dbufs (default on; "
                         "--no-overlap: DMA-in, then configuration and contexts)")
    hw.add_argument("--early-start", action=argparse.BooleanOptionalAction, default=None,
                    help="start each context as soon as its own data are in the Dbufs, beside "
                         "the rest of its pass's DMA-in (needs --overlap; default: with "
                         "--overlap, on or off as the performance model predicts faster; "
                         "fdpu net: on)")
    hw.add_argument("--edge-multicast", action=argparse.BooleanOptionalAction,
                    default=SYSTEM.edge_multicast,
                    help="send an input block that several Dbufs of an edge hold as one "
                         "multicast flit a word, which the mesh writes into each of them "
                         f"(default {'on' if SYSTEM.edge_multicast else 'off'})")
    hw.add_argument("--config-spans", action=argparse.BooleanOptionalAction,
                    default=SYSTEM.config_spans,
                    help="hold the instructions that several PEs share once in the Cbufs, in "
                         "records the MicC sends to each of those PEs (fewer bytes loaded "
                         f"before the configuration; default {'on' if SYSTEM.config_spans else 'off'}"
                         ")")
    hw.add_argument("--double-buffer", action=argparse.BooleanOptionalAction, default=None,
                    help="give consecutive passes alternate halves of the Dbufs, so the DMA "
                         "loads the next pass and stores the previous one while a pass "
                         "computes (default: on when the layer takes more than one pass with "
                         "whole Dbufs; needs --overlap)")
