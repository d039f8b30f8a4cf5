"""``fdpu paper``: the paper's evaluation, reproduced by one command.

``fdpu paper [--source model|rtl] [--layers ...] [--batches ...] [--graphs ...]
[--scheduler local|serial|ADDRESS] [--workers N] [--cache DIR] [--out DIR] [--dry-run]``

Runs the paper's points (:mod:`sw.sweep.paper`: AlexNet FC6, AlexNet FC8 and VGG-16 FC7 at
batch 1, 4 and 64; dense, the paper's SWITCH graph and this project's gather and skip graphs;
with ``--source model`` also AlexNet's five convolution layers, dense, SWITCH and skip, for
the paper's section 6 statement on convolutions) as a sweep (:mod:`sw.cli.sweep`, cached,
on Dask) on the README's configuration, and writes
the report (:mod:`sw.sweep.report`): ``report.md`` with the tables and the paper's statements
beside ours, Fig. 10 and Fig. 11 as PNG, ``records.json`` and ``table.csv``.  ``--source
model`` (default) takes the figures from the calibrated performance model (seconds);
``--source rtl`` runs every point on the 8 x 8 RTL under Verilator (hours: the cache lets an
interrupted run resume) and the model's points too, to print its error on each.
"""

import argparse
import os

from sw.cli import sweep
from sw.cli.options import DEFAULTS
from sw.cli.output import console, progress_bar
from sw.models import perf, perf_fit
from sw.spec.errors import FdpuError
from sw.spec.files import lock_dir
from sw.sweep import cpu, grid, paper, report

__all__ = ["register", "paper_command"]


def _names(text, allowed, what):
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise FdpuError(f"--{what} {text!r}: {'unknown ' + ', '.join(bad) if bad else 'empty'} "
                        f"(allowed: {', '.join(str(a) for a in allowed)})")
    return [a for a in allowed if a in items]


def register(subparsers):
    """Add the ``paper`` command."""
    parser = subparsers.add_parser(
        "paper", help="the paper's evaluation (3 layers, batch 1/4/64, dense and sparse) "
                      "with a report and plots",
        description="Run the paper's evaluation (AlexNet FC6, AlexNet FC8, VGG-16 FC7 at batch "
                    "1, 4 and 64; dense and each sparse graph) on the performance model or the "
                    "8 x 8 RTL, and write a Markdown report with Fig. 10 and Fig. 11 and the "
                    "paper's statements beside ours.")
    parser.add_argument("--source", choices=tuple(paper.SOURCES), default="model",
                        help="model: the calibrated performance model (seconds; default); rtl: "
                             "every point on the 8 x 8 RTL under Verilator (hours, cached)")
    parser.add_argument("--layers", default=None, metavar="L,...",
                        help=f"a subset of the paper's layers and AlexNet's convolution layers "
                             f"(default {','.join(paper.LAYERS)}, and with --source model "
                             f"{','.join(paper.CONV_LAYERS)}; the convolution layers on the "
                             f"RTL take days)")
    parser.add_argument("--batches", default=",".join(map(str, paper.BATCHES)), metavar="N,...",
                        help="a subset of the paper's batches (default 1,4,64)")
    parser.add_argument("--graphs", default=",".join(paper.GRAPHS), metavar="G,...",
                        help=f"a subset of the graphs (default {','.join(paper.GRAPHS)})")
    sweep.add_execution_args(parser)
    parser.add_argument("--out", default="paper", metavar="DIR",
                        help="report directory (default ./paper)")
    parser.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True,
                        help="measure this machine's CPU on the same FC layers and batches "
                             "(float32: BLAS dense, scipy CSR sparse; seconds) and set its "
                             "utilization beside FDPU's, as the paper's Table 4 (default on)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the points and which are cached; run nothing")
    parser.add_argument("--cached-only", action="store_true",
                        help="report the points the cache holds; run none (the report says "
                             "which are missing)")
    parser.set_defaults(func=paper_command)


def paper_command(args):
    """Run ``fdpu paper``; return 0 when every point ran (and, on the RTL, matched)."""
    if args.layers is None:
        args.layers = parser_default("layers", args.source)
    layers = _names(args.layers, paper.LAYERS + paper.CONV_LAYERS, "layers")
    batches = [int(b) for b in _names(args.batches, tuple(map(str, paper.BATCHES)), "batches")]
    graphs = _names(args.graphs, paper.GRAPHS, "graphs")
    if "dense" not in graphs:
        raise FdpuError("--graphs must include dense: the report compares every sparse graph "
                        "with it")
    pts = paper.points(args.source, layers, batches, graphs)
    model_pts = paper.points("model", layers, batches, graphs) if args.source == "rtl" else []
    prepared = sweep.prepare_points(pts + model_pts, args)
    if args.dry_run:
        sweep.run_points(prepared, args.out, dry_run=True)
        return 0
    sweep.prepare_out(args.out)
    with lock_dir(args.out, "--out"):
        return _run_and_report(args, prepared, pts)


def _run_and_report(args, prepared, pts):
    """Run (or read from the cache) the points and write the report (``--out`` is locked)."""
    records, failed = sweep.run_points(prepared, args.out, cached_only=args.cached_only)
    sim = paper.SOURCES[args.source]
    ours = [r for r in records if r["sim"] == sim]
    model = [r for r in records if r["sim"] == "model"] if args.source == "rtl" else None
    system = perf.System()
    config = dict(array=f"{DEFAULTS['rows']} x {DEFAULTS['cols']}", slots=DEFAULTS["slots"],
                  **{"operand depth": DEFAULTS["operand_depth"],
                     "INT issues": DEFAULTS["int_issue"],
                     "Dbuf": f"{DEFAULTS['dbuf_bytes'] >> 20} MiB x 32",
                     "DMA channels": DEFAULTS["dma_channels"],
                     "external memory": f"{system.mem_bandwidth:g} B/cycle per channel, "
                                        f"{system.mem_latency} cycles latency",
                     "DMA-in": ", ".join(
                         name for name, on in (("overlapped with the configuration",
                                                system.overlap),
                                               ("early start", system.early_start),
                                               ("edge multicast", system.edge_multicast),
                                               ("configuration records of spans of PEs",
                                                system.config_spans))
                         if on) or "before the configuration"})
    command_tail = ""
    if os.path.abspath(args.cache) != os.path.abspath(sweep.DEFAULT_CACHE):
        command_tail += f" --cache {args.cache}"
    if args.cached_only:
        command_tail += " --cached-only"
    if not args.cpu:
        command_tail += " --no-cpu"
    command = "fdpu paper --source " + args.source + "".join(
        f" --{k} {v}" for k, v in (("layers", args.layers), ("batches", args.batches),
                                   ("graphs", args.graphs))
        if v != parser_default(k, args.source)) + command_tail
    # The model's error on its calibration points: what a model report states of itself.
    summary = perf_fit.check()[1] if args.source == "model" else None
    if not ours:
        raise FdpuError("no point has a result: nothing to report")
    missing = [f"{p['layer']} batch {p['batch']} {p.get('sparse-graph', 'dense')}"
               for p in pts if grid.point_name(p) in failed]
    measured = None
    if args.cpu:
        fc = [layer for layer in paper.LAYERS if any(r["point"]["layer"] == layer
                                                     for r in ours)]
        batches = sorted({r["point"]["batch"] for r in ours})
        with progress_bar("CPU beside FDPU", "points") as show:
            measured = cpu.measure_points(fc, batches, progress=show)
    report.write(ours, args.out, source=args.source, command=command, config=config,
                 model_records=model, model_error=summary, missing=missing, cpu=measured,
                 rtl_checks=_rtl_checks(ours) if args.source == "model" else None)
    console().print(f"wrote {os.path.join(args.out, 'report.md')}, {report.FIG10}, "
                    f"{report.FIG11}, records.json, table.csv ({len(ours)} of {len(pts)} points)")
    bad = [r["name"] for r in ours if r["status"] != 0]
    for name in bad:
        console().print(f"[red]no match[/red]: {name}")
    if args.cached_only:
        console().print(f"{len(failed)} point(s) not in the cache, not run (--cached-only)")
        return 1 if bad else 0
    for name, error in failed.items():
        console().print(f"[red]failed[/red]: {name}: {error}")
    return 1 if bad or failed else 0


def _rtl_checks(records):
    """Return, per model record's name whose very point the RTL ran (a calibration point:
    :func:`sw.models.perf_fit.measured_point`), that point's name, whether it was held out of
    the fit, and the model's error against it."""
    cal = perf_fit.load()
    out = {}
    for r in records:
        pt = perf_fit.measured_point(r["result"], cal)
        if pt is not None:
            out[r["name"]] = dict(point=pt["name"], holdout=pt["holdout"],
                                  error=perf_fit.error_of(r["result"], pt))
    return out


def parser_default(name, source="model"):
    """Return the default of ``--layers`` (of ``source``), ``--batches`` or ``--graphs``."""
    conv = paper.CONV_LAYERS if source == "model" else ()
    return {"layers": ",".join(paper.LAYERS + conv),
            "batches": ",".join(map(str, paper.BATCHES)),
            "graphs": ",".join(paper.GRAPHS)}[name]
