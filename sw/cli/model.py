"""``fdpu run --sim model`` and ``fdpu model-check``: the performance model from the command line.

``fdpu run --sim model`` takes the layer, graph, array and system options of
``fdpu run --sim verilator`` and prints, in about a second for any layer, what the RTL run
would report: per pass the DMA-in, configuration, context, compute, end-to-end and DMA-out
cycles and the external bytes, and in total the cycles, the utilizations, the external bytes
beside the layer's minimum and the peak bandwidth (:func:`sw.models.perf.predict`, calibrated
against the RTL: ``fdpu model-check`` prints its error on every calibration point).  No
result is computed (``--out`` is refused), nor are the options that only a simulation has
(``--max-cycles``, ``--waves``, ``--golden``, ``--engine``, ``--order-seed``,
``--no-feedback``).
"""

import argparse
import contextlib
import io
import json
import os
import tempfile

import numpy as np
from rich.table import Table

from sw.cli import net as net_cli
from sw.cli.options import conv_record, graph_name, plan_run, resolve
from sw.cli.output import BOUND_ROW, bound_text, check_outputs, console, megabytes, write_json
from sw.compiler import balance
from sw.models import perf, perf_fit
from sw.spec.errors import FdpuError

#: The checkout (calibration paths are given relative to it).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = ["register", "check_model_options", "run_model_command", "model_check_command",
           "check_all", "predict_network"]

#: Options ``fdpu run`` has that the model refuses (``(flag, attribute, default)``).
_SIM_ONLY = (("--out", "out", None), ("--max-cycles", "max_cycles", None),
             ("--waves", "waves", False), ("--golden", "golden", "auto"),
             ("--engine", "engine", "auto"), ("--order-seed", "order_seed", None),
             ("--no-feedback", "no_feedback", False), ("--checkpoint", "checkpoint", None),
             ("--segment-passes", "segment_passes", None))


def register(subparsers):
    """Add the ``model-check`` command."""
    parser = subparsers.add_parser(
        "model-check", help="the performance model against its RTL calibration points",
        description="Predict every calibration point of the performance model "
                    "(sw/models/calibration.json) and print predicted and measured cycles, "
                    "their relative error, the errors per effect the points exercise (graph, "
                    "array, batch, operand depth, passes, the DMA's options) and the mean and "
                    "largest error, for the points the constants were fitted on and for the "
                    "held-out points apart.")
    parser.add_argument("--point", nargs="+", metavar="NAME", help="check only these points")
    parser.add_argument("--json", metavar="PATH", help="write every row and the summary")
    parser.set_defaults(func=model_check_command)


def model_check_command(args):
    """Print the model's error on its calibration points; return 0."""
    check_outputs([("--json", args.json)])
    cal = perf_fit.load()
    names = {p["name"] for p in cal["points"] + list(cal.get("networks", ()))}
    unknown = sorted(set(args.point or ()) - names)
    if unknown:
        raise FdpuError(f"--point: no calibration point named {', '.join(unknown)} (there are: "
                        f"{', '.join(sorted(names))})")
    rows, summary = check_all(cal, args.point)
    perf_fit.print_check(rows, summary, console())
    if args.json:
        write_json(args.json, dict(rows=rows, summary=summary, effects=perf_fit.by_effect(rows),
                                   constants=cal["constants"]))
    return 0


def check_all(calibration, names=None):
    """Return ``(rows, summary)`` of :func:`sw.models.perf_fit.check` over the calibration's
    single-layer points and its network points (each layer a row; ``names`` limits both)."""
    rows, _ = perf_fit.check(calibration, names)
    rows += perf_fit.network_rows(calibration, predict_network, names)
    return rows, perf_fit.summarize(rows)


def predict_network(argv):
    """Return the record of ``fdpu net <argv>`` (``--sim model``; files named relative to the
    checkout, as the calibration stores them), printing nothing."""
    argv = [os.path.join(ROOT, a) if not a.startswith("-") and not os.path.isabs(a)
            and os.path.exists(os.path.join(ROOT, a)) else a for a in argv]
    parser = argparse.ArgumentParser(prog="fdpu")
    net_cli.register(parser.add_subparsers())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "net.json")
        args = parser.parse_args(["net", *argv, "--json", path])
        with contextlib.redirect_stdout(io.StringIO()):
            args.func(args)
        with open(path) as f:
            return json.load(f)


def check_model_options(args):
    """Refuse the options of ``fdpu run`` that only a simulation has."""
    given = [flag for flag, attr, default in _SIM_ONLY if getattr(args, attr, default) != default]
    if given:
        raise FdpuError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to a "
                        f"simulation, not to --sim model (the performance model computes no "
                        f"result)")


def run_model_command(args):
    """Run ``fdpu run --sim model``: predict the layer's figures; return 0."""
    check_model_options(args)
    name, w, x, params = resolve(args)
    plan, system = plan_run(args, w, x, params)
    pred = perf.predict(plan, w, system)
    rec = pred.as_dict()
    rec.update(sim="model", layer=name, K=plan.K, C=plan.C, N=plan.N, mode=plan.mode,
               graph=graph_name(plan), plan=plan.describe(), passes=plan.passes,
               contexts=plan.contexts, load_balance=balance.load_balance(plan, w),
               nnz=int(np.count_nonzero(np.asarray(w, np.float16).view(np.uint16))),
               rows=params.rows, cols=params.cols,
               slots=params.slots, int_issue=params.int_issue,
               operand_depth=params.operand_depth, dbuf_bytes=params.dbuf_bytes,
               dma_channels=system.dma_channels, mem_latency=system.mem_latency,
               mem_bandwidth=system.mem_bandwidth, config_ports=system.config_ports,
               overlap=system.overlap, early_start=system.early_start,
               edge_multicast=system.edge_multicast, config_spans=system.config_spans,
               double_buffer=plan.double_buffer,
               calibration=os.path.relpath(perf_fit.CALIBRATION, ROOT), seed=args.seed)
    pt = perf_fit.measured_point(rec)
    rec["rtl_point"] = None if pt is None else dict(
        name=pt["name"], holdout=pt["holdout"], command=pt["command"],
        error=perf_fit.error_of(rec, pt))
    note = conv_record(args, rec, plan.N, system)
    _print(rec, pred, plan, params)
    if note:
        console().print(note)
    if args.json:
        write_json(args.json, rec)
    return 0


def _print(rec, pred, plan, params):
    """Print the prediction: totals, then one row per pass."""
    t = Table(title=f"fdpu run --sim model: {rec['layer']} ({plan.mode}, batch {plan.N}, "
                    f"{params.rows}x{params.cols} PEs, {params.slots} slots, "
                    f"{params.int_issue} INT issue{'s' if params.int_issue > 1 else ''}, "
                    f"{rec['dma_channels']} DMA channel{'s' if rec['dma_channels'] > 1 else ''})",
              title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("graph / blocking kb x gb", f"{rec['graph']} / {plan.kb} x {plan.gb}")
    t.add_row("passes / contexts per pass", f"{plan.passes} / {plan.contexts}"
              + (f" x {plan.chunks} (streamed)" if plan.chunks > 1 else "")
              + (" (double-buffered)" if plan.double_buffer else "")
              + (", each context started when its data are in" if rec["early_start"] else "")
              + (", inputs by edge multicast" if rec["edge_multicast"] else ""))
    t.add_row("load balance (engines' mean / max FACC steps)", f"{rec['load_balance']:.3f}")
    t.add_row("cycles: end to end / compute (configuration + contexts) / DMA (in + out)",
              f"{rec['cycles']:,} / {rec['compute_cycles']:,} / {rec['dma_cycles']:,}")
    t.add_row("utilization (useful multiply-adds / peak, compute cycles)",
              f"{rec['utilization']:.2%}")
    t.add_row("FP issue utilization (FP operations issued, padding included / peak)",
              f"{rec['issue_utilization']:.2%}")
    t.add_row("dense-equivalent utilization (2 K C N / peak)", f"{rec['dense_utilization']:.2%}")
    t.add_row("utilization end to end (with DMA)", f"{rec['utilization_end_to_end']:.2%}")
    t.add_row(BOUND_ROW, bound_text(rec))
    t.add_row("external MB read / written (DMA)",
              f"{megabytes(rec['ext_read_bytes'])} / {megabytes(rec['ext_write_bytes'])}")
    t.add_row("external MB: the layer's minimum (weights, sparse: values + 1-bit mask; "
              "inputs; outputs)",
              f"{megabytes(rec['min_external_bytes'])} "
              f"({rec['external_bytes'] / max(1, rec['min_external_bytes']):.2f} x)")
    t.add_row("peak bandwidth requirement", f"{rec['peak_bandwidth']:.2f} B/cycle")
    t.add_row("busiest resource (most contexts)", pred.passes[0].bound)
    t.add_row("model time", f"{rec['model_seconds']:.2f} s")
    t.add_row("measured on the RTL", _measured_text(rec["rtl_point"]))
    console().print(t)
    p = Table(title="per pass (cycles; bytes)", title_justify="left")
    cols = ["pass", "DMA-in", "config", "contexts", "compute", "waits for DMA", "span",
            "DMA-out", "bytes in", "bytes out"]
    if plan.double_buffer:
        cols[2:2] = ["in behind prev."]
        cols[9:9] = ["out behind next"]
    for col in cols:
        p.add_column(col, justify="right")
    for i, f in enumerate(pred.passes):
        row = [str(i), f"{f.dma_in:,}", f"{f.config:,}", f"{f.contexts:,}",
               f"{f.compute:,}", f"{f.hold:,}", f"{f.span:,}", f"{f.dma_out:,}",
               f"{f.ext_in:,}", f"{f.ext_out:,}"]
        if plan.double_buffer:
            row[2:2] = [f"{f.in_hidden:,}"]
            row[9:9] = [f"{f.out_hidden:,}"]
        p.add_row(*row)
    console().print(p)
    console().print("figures from the performance model (docs/perf.md; its error against the "
                    "RTL: fdpu model-check)")


def _measured_text(pt):
    """Return the model's error against the RTL run of this very point, if one was made."""
    if pt is None:
        return "not this configuration (fdpu model-check: the error on the points that are)"

    def pct(v):
        return "-" if v is None else f"{v:+.1%}"
    return (f"calibration point {pt['name']}{' (held out)' if pt['holdout'] else ''}: model "
            f"error compute {pct(pt['error']['compute'])}, end to end "
            f"{pct(pt['error']['cycles'])}")
