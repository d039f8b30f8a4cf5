"""The report of the paper's evaluation: Markdown tables, Fig. 10 and Fig. 11 as PNG, the
paper's statements beside ours.

:func:`write` takes the records of :func:`sw.sweep.paper.points` (and, for an RTL report, the
performance model's records of the same points, to print the model's error on each) and writes
``report.md``, ``fig10_utilization.png``, ``fig11_bandwidth.png``, ``records.json`` and
``table.csv`` into a directory.
"""

import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sw.compiler.graph_kinds import GRAPHS  # noqa: E402
from sw.spec.errors import FdpuError  # noqa: E402
from sw.spec.files import replacing, write_text  # noqa: E402
from sw.sweep import paper, table  # noqa: E402

__all__ = ["write", "FIG10", "FIG11"]

FIG10 = "fig10_utilization.png"
FIG11 = "fig11_bandwidth.png"

#: Bar colours of the graphs (dense grey, the paper's SWITCH graph orange, ours blue/green; a
#: graph not listed takes the next of matplotlib's default colours).
_COLOURS = {"dense": "#7f7f7f", "switch": "#ff7f0e", "gather": "#1f77b4", "skip": "#2ca02c"}
_MORE = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


def _colour(g):
    """Return the bar colour of graph ``g``."""
    extra = [name for name in GRAPHS if name not in _COLOURS]
    return _COLOURS.get(g) or _MORE[extra.index(g) % len(_MORE)]
_SHORT = {"alexnet-fc6": "AlexNet FC6\n9 %", "alexnet-fc8": "AlexNet FC8\n25 %",
          "vgg16-fc7": "VGG-16 FC7\n4 %"}


def _index(records):
    return {(r["point"]["layer"], r["point"]["batch"], paper.graph_of(r)): r for r in records}


def _grouped(ax, by, layers, batch, graphs, value, scale=1.0):
    width = 0.8 / max(1, len(graphs))
    for i, g in enumerate(graphs):
        xs, ys = [], []
        for j, layer in enumerate(layers):
            r = by.get((layer, batch, g))
            v = None if r is None else value(r["result"])
            if v is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(v * scale)
        ax.bar(xs, ys, width, color=_colour(g), label=GRAPHS[g].title)
    ax.set_xticks(range(len(layers)), [_SHORT.get(layer, layer) for layer in layers],
                  fontsize=8)
    ax.set_title(f"batch {batch}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def _figures(by, layers, batches, graphs, out_dir, source_note):
    fig, axes = plt.subplots(2, len(batches), figsize=(4 * len(batches), 7), squeeze=False)
    for col, batch in enumerate(batches):
        _grouped(axes[0][col], by, layers, batch, graphs, paper.paper_utilization, 100)
        _grouped(axes[1][col], by, layers, batch, graphs,
                 lambda x: x.get("dense_utilization"), 100)
        axes[0][col].set_ylim(0, 100)
    axes[0][0].set_ylabel("utilization, % of peak\n(FP operations executed: the paper's metric)")
    axes[1][0].set_ylabel("dense-equivalent utilization, %\n(2 K C N / peak: speed vs dense)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Fig. 10: computing-resource utilization, dense vs sparse ({source_note})",
                 fontsize=10)
    fig.tight_layout()
    with replacing(os.path.join(out_dir, FIG10)) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 4.2), squeeze=False)
    for col, batch in enumerate(batches):
        _grouped(axes[0][col], by, layers, batch, graphs, lambda x: x.get("peak_bandwidth"))
    axes[0][0].set_ylabel("peak memory bandwidth\nrequirement, bytes/cycle")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(graphs), fontsize=8)
    fig.suptitle(f"Fig. 11: peak memory-bandwidth requirement, dense vs sparse "
                 f"({source_note})", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    with replacing(os.path.join(out_dir, FIG11)) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def _pct(v):
    return "-" if v is None else f"{v:.1%}"


def _mb(v):
    return "-" if v is None else f"{v / 1e6:,.2f}"


def _err(model, rtl, field):
    if model is None or rtl is None or not rtl["result"].get(field):
        return "-"
    return f"{model['result'][field] / rtl['result'][field] - 1:+.1%}"


def _bound(model):
    """Return the performance model's busiest resource of a model record's first pass."""
    if model is None:
        return "-"
    passes = model["result"].get("pass_cycles") or [{}]
    return passes[0].get("bound") or "-"


def _checked(check):
    """Return the cell of a model point's error against the RTL run of the same point."""
    if check is None:
        return "-"
    e = check["error"]
    return (f"{e['compute']:+.1%} / " + ("-" if e["cycles"] is None else f"{e['cycles']:+.1%}")
            + f" ({check['point']}{', held out' if check['holdout'] else ''})")


def _points_table(by, layers, batches, graphs, model_by, rtl_checks=None):
    head = ["layer", "batch", "graph", "passes", "compute cycles", "cycles end to end",
            "utilization (paper's metric)", "useful utilization", "dense-equivalent",
            "end to end", "external MB (minimum)", "peak B/cycle"]
    head += ["bound"]
    if model_by is not None:
        head += ["match", "model error: compute / end to end"]
    if rtl_checks is not None:
        head += ["measured error: compute / end to end (RTL point)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|" + "---:|" * (len(head) - 3)]
    for layer in layers:
        for batch in batches:
            for g in graphs:
                r = by.get((layer, batch, g))
                if r is None:
                    continue
                x = r["result"]
                row = [layer, str(batch), g, str(x["passes"]), f"{x['compute_cycles']:,}",
                       f"{x['cycles']:,}", _pct(paper.paper_utilization(x)),
                       _pct(x["utilization"]), _pct(x["dense_utilization"]),
                       _pct(x["utilization_end_to_end"]),
                       f"{_mb(x['external_bytes'])} ({_mb(x['min_external_bytes'])})",
                       f"{x['peak_bandwidth']:.2f}"]
                m = r if model_by is None else model_by.get((layer, batch, g))
                row.append(_bound(m))
                if model_by is not None:
                    row += ["yes" if x.get("match") else "NO",
                            f"{_err(m, r, 'compute_cycles')} / {_err(m, r, 'cycles')}"]
                if rtl_checks is not None:
                    row.append(_checked(rtl_checks.get(r["name"])))
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _ratio_table(by, layers, batches, graphs):
    sparse = [g for g in graphs if g != "dense"]
    lines = ["| layer | batch | dense B/cycle | " + " | ".join(
        f"{g}: B/cycle (dense / {g})" for g in sparse) + " |",
        "|---|---:|---:|" + "---:|" * len(sparse)]
    for layer in layers:
        for batch in batches:
            d = by.get((layer, batch, "dense"))
            if d is None:
                continue
            dv = d["result"]["peak_bandwidth"]
            row = [layer, str(batch), f"{dv:.2f}"]
            for g in sparse:
                s = by.get((layer, batch, g))
                sv = None if s is None else s["result"]["peak_bandwidth"]
                row.append("-" if not sv else f"{sv:.2f} ({dv / sv:.2f}x)")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _ours(key, value):
    if value is None:
        return "-"
    if key == "bandwidth_ratio":
        return f"{value[0]:.2f}x to {value[1]:.2f}x"
    if key == "vs_cpu_gpu":
        return f"mean utilization at batch 64: {value:.1%}"
    if key == "batch64_gap":
        return f"{value * 100:.1f} points lower" if value >= 0 else \
            f"{-value * 100:.1f} points higher"
    return f"{value * 100:.1f} points"


#: Why our figures can differ from the paper's, per statement (the mechanisms; the numbers are
#: in the tables).
WHY = {
    "small_batch_gap": "At batch 1 and 4 an engine has one lane group, so each weight loaded "
                       "from a Dbuf serves one multiply-add. The dense graph is then bound by "
                       "the Dbufs' bandwidth, the SWITCH graph by its feedback loop (at most one "
                       "context between a SWITCH and its join, so each weight position waits "
                       "for the loop), the gather graph by its weight stream (the *bound* "
                       "column: the performance model's busiest resource per point). This is "
                       "where this implementation differs from the paper's, whose sparse graph "
                       "keeps pace with dense at small batch. The skip graph executes only the "
                       "stored weights' multiply-adds: by the paper's metric it is low, yet it "
                       "finishes first (dense-equivalent utilization).",
    "batch64_gap": "At batch 64 an engine holds several lane groups per weight and the dense "
                   "graph is bound by its FP issue. The SWITCH graph's decode is shared by the "
                   "lane groups of a value load and runs on two INT issues beside the FP one "
                   "(the paper's two integer units), so its gap is of the paper's size; the "
                   "gather graph keeps pace with dense. The skip graph, bound by the Dbufs (a "
                   "stored weight's input is loaded once per lane group), executes far fewer "
                   "operations and finishes several times sooner than dense.",
    "bandwidth_ratio": "The peak bandwidth requirement is the largest (bytes in and out of a "
                       "pass) / (its compute cycles) over passes. The sparse graphs read "
                       "FD-CSR (values, 2 bytes a stored weight, plus one 16-bit mask and "
                       "offset per 16 weights) instead of 2 bytes a weight; the SWITCH and "
                       "gather graphs also take longer to compute, which lowers their "
                       "requirement further, and the skip graph less time, which raises it: "
                       "it moves the fewest bytes but needs them fastest.",
    "across_sparsity": "Listed as the largest spread of the metric between the three layers at "
                       "one batch. The three layers also differ in shape and in the passes "
                       "their Dbufs need, not only in sparsity.",
    "vs_cpu_gpu": "The CPU, GPU and mobile-GPU figures are the EIE paper's measurements and are "
                  "not reproduced here; the row gives our batch-64 sparse utilization, the "
                  "quantity the paper compared with them, and the section \"A CPU beside "
                  "FDPU\" measures the machine that made this report on the same layers.",
}


def write(records, out_dir, *, source, command, config, model_records=None, model_error=None,
          missing=(), cpu=None, rtl_checks=None):
    """Write the report of ``records`` into ``out_dir``.

    ``source`` is ``"rtl"`` or ``"model"``; ``command`` the command that made it; ``config``
    a dict of the configuration (printed); ``model_records`` (RTL reports) the model's records
    of the same points; ``model_error`` the model's error summary on its calibration points;
    ``missing`` the names of the points without a record (listed, not plotted); ``cpu`` the
    host CPU's measurements on the same layers (:func:`sw.sweep.cpu.measure_points`), set
    beside FDPU's utilization and written to ``cpu.json``; ``rtl_checks`` (model reports),
    per record name whose very point the RTL ran, the calibration point's name, whether it
    was held out and the model's error against it (a column of the points' table).
    """
    os.makedirs(out_dir, exist_ok=True)
    every = records
    conv_records = [r for r in records if r["point"]["layer"] in paper.CONV_LAYERS]
    records = [r for r in records if r["point"]["layer"] not in paper.CONV_LAYERS]
    if not records:
        raise FdpuError("the report needs at least one of the paper's FC layers "
                        f"({', '.join(paper.LAYERS)}); the convolution layers are compared "
                        f"with it")
    by = _index(records)
    layers = [l for l in paper.LAYERS if any(k[0] == l for k in by)]
    batches = [b for b in paper.BATCHES if any(k[1] == b for k in by)]
    graphs = [g for g in paper.GRAPHS if any(k[2] == g for k in by)]
    model_by = _index(model_records) if model_records is not None else None
    if source == "rtl":
        matched = sum(1 for r in records if r["result"].get("match"))
        note = "8 x 8 RTL on Verilator"
        origin = (f"Every figure is measured on the generated Verilog of the 8 x 8 FDPU top "
                  f"under Verilator, each layer loaded through the DMA from the external-memory "
                  f"model, computed and stored back; {matched} of {len(records)} results are "
                  f"bit-exact against the golden model. The last column gives the calibrated "
                  f"performance model's error on each point (`fdpu paper --source model`).")
    else:
        note = "performance model"
        err = model_error or {}
        origin = ("Every figure is the calibrated performance model's (`sw/models/perf.py`, "
                  "constants in `sw/models/calibration.json`), not a simulation. Its error on "
                  "its RTL calibration points (`fdpu model-check`): "
                  + "; ".join(f"{label}: compute mean {v['compute']['mean']:.1%}, max "
                              f"{v['compute']['max']:.1%}"
                              + (f", end to end mean {v['end_to_end']['mean']:.1%}, max "
                                 f"{v['end_to_end']['max']:.1%}"
                                 if v.get("end_to_end", {}).get("mean") is not None else "")
                              for label, v in err.items())
                  + ". `fdpu paper --source rtl` measures the same points on the RTL.")
        if rtl_checks is not None:
            origin += (f" The last column of the points' table gives, for the {len(rtl_checks)} "
                       f"point(s) the RTL ran as configured here (a calibration point with the "
                       f"same weights, plan, array and system), the model's error against "
                       f"that run.")
    _figures(by, layers, batches, graphs, out_dir, note)
    ours = paper.summary(records)
    sparse = [g for g in graphs if g != "dense"]
    lines = [
        f"# The paper's evaluation on FDPU ({note})",
        "",
        f"Made by `{command}`. {origin}",
        "",
    ]
    if missing:
        lines += [f"**{len(missing)} of {len(records) + len(missing)} points are not measured "
                  f"yet** (not in the cache; the statements below use the points that are): "
                  + ", ".join(missing) + ".", ""]
    lines += [

        "**Configuration** (the README's, every point): " + ", ".join(
            f"{k} {v}" for k, v in config.items()) + ". The peak is 64 PEs x 4 lanes x 2 "
        "operations = 512 operations per cycle, the paper's 512 Gop/s at 1 GHz. Layers are the "
        "zoo's seeded synthetic weights pruned to the paper's densities (docs/layers.md), not "
        "the Caffe/Deep Compression weights; cycles depend on where the zeros are only through "
        "the rows' counts of stored weights.",
        "",
        "**The metrics.** *Utilization (the paper's metric)*: floating-point operations executed "
        "for real batch elements / (peak x compute cycles): the paper's SWITCH graph executes a "
        "multiply-add for every weight, zero or not, and this counts them as it does (so do the "
        "gather graph's; the skip graph executes only the stored weights'); lanes of padding "
        "(batch 1 fills one lane of four) are not counted. *Useful utilization*: only the "
        "multiply-adds of stored weights (dense: all) with real batch elements. "
        "*Dense-equivalent*: 2 K C N / (peak x compute cycles), the speed against the dense "
        "graph (above 100 % when zeros are skipped). *End to end*: useful work over all cycles, "
        "DMA included. Compute cycles are configuration plus contexts; end to end counts the "
        "DMA phases the computation does not hide (docs/system.md). *Bound*: the resource the "
        "performance model finds busiest in the first pass (docs/perf.md).",
        "",
        "## Figures",
        "",
        f"![Fig. 10: utilization]({FIG10})",
        "",
        f"![Fig. 11: peak bandwidth]({FIG11})",
        "",
        "## The paper's statements beside ours",
        "",
        "| the paper | " + " | ".join(f"ours: {g}" for g in sparse) + " |",
        "|---|" + "---|" * len(sparse),
    ]
    for key, text in paper.STATEMENTS.items():
        lines.append(f"| {text} | " + " | ".join(_ours(key, ours[key].get(g)) for g in sparse)
                     + " |")
    lines += ["", "Utilizations in this table are the paper's metric (FP operations executed). "
              "Why ours differ:", ""]
    lines += [f"* **{paper.STATEMENTS[k]}**: {WHY[k]}" for k in paper.STATEMENTS]
    lines += ["", "## Every point", "",
              _points_table(by, layers, batches, graphs, model_by, rtl_checks), "",
              "## Peak memory-bandwidth requirement, dense / sparse", "",
              _ratio_table(by, layers, batches, graphs), ""]
    if cpu is not None:
        lines += _cpu_section(cpu, by, layers, batches, graphs)
    if conv_records:
        lines += _conv_section(conv_records)
    lines += [
              "The records of every point (all figures, the command, tool versions, the source "
              "digest) are in `records.json`; `table.csv` has one row per point.", ""]
    write_text(os.path.join(out_dir, "report.md"), "\n".join(lines))
    write_text(os.path.join(out_dir, "records.json"),
               json.dumps(every + (model_records or []), indent=1, allow_nan=False) + "\n")
    write_text(os.path.join(out_dir, "table.csv"), table.to_csv(every + (model_records or [])))
    if cpu is not None:
        write_text(os.path.join(out_dir, "cpu.json"),
                   json.dumps(cpu, indent=1, allow_nan=False) + "\n")


def _cpu_section(cpu, by, layers, batches, graphs):
    """Return the report's lines setting the host CPU's measured utilization beside FDPU's
    (the paper's Table 4 compares them at batch 64)."""
    host, top = cpu["machine"], cpu["peak"]
    sparse = [g for g in graphs if g != "dense"]
    meas = {(p["layer"], p["batch"], p["mode"]): p for p in cpu["points"]}
    nominal = (f"; nominal {top['nominal'] / 1e9:,.0f} GFLOP/s ({top['nominal_how']})"
               if top.get("nominal") else "")
    lines = ["## A CPU beside FDPU (the paper's Table 4)", "",
             f"The host that made this report, measured on {cpu['date']} (`sw/sweep/cpu.py`): "
             f"**{host['cpu']}**, {host['cores']} core(s) at {host['mhz']} MHz as reported, "
             f"vector flags {', '.join(host['vector_flags']) or 'none'}, {host['blas']}, "
             f"numpy {host['numpy']}, scipy {host['scipy']}, {host['system']}. Its peak: "
             f"**{top['measured'] / 1e9:,.1f} GFLOP/s measured** ({top['measured_how']})"
             f"{nominal}. The CPU runs the same seeded layers in float32: dense as a BLAS "
             f"product on every core, sparse as scipy's CSR matrix times the dense inputs "
             f"(one core); utilization = useful operations (2 K C N dense, 2 nnz N sparse, "
             f"FDPU's definition) per second over the measured peak. FDPU's columns are its "
             f"useful utilization of the compute cycles (records above): the stored weights' "
             f"multiply-adds only, as the CPU's; the paper's Table 4 set its own metric "
             f"(every multiply-add its SWITCH graph executes, zeros included) beside the "
             f"CPU's. Wall-clock times on a shared machine: each the best of three runs.", "",
             "| layer | batch | CPU dense GFLOP/s (utilization) | FDPU dense | "
             "CPU sparse (CSR) GFLOP/s (utilization) | "
             + " | ".join(f"FDPU {g}" for g in sparse) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(sparse)]
    gaps = {g: [] for g in sparse}
    for layer in layers:
        for batch in batches:
            d, sp = meas.get((layer, batch, "dense")), meas.get((layer, batch, "sparse"))
            if d is None or sp is None:
                continue
            row = [layer, str(batch),
                   f"{d['flops_per_s'] / 1e9:,.2f} ({d['utilization']:.1%})",
                   _fdpu_util(by.get((layer, batch, "dense"))),
                   f"{sp['flops_per_s'] / 1e9:,.2f} ({sp['utilization']:.1%})"]
            for g in sparse:
                rec = by.get((layer, batch, g))
                row.append(_fdpu_util(rec))
                if rec is not None and batch == 64:
                    gaps[g].append(rec["result"]["utilization"] - sp["utilization"])
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for g, v in gaps.items():
        if v:
            lines.append(f"* At batch 64, FDPU's {g} graph's useful utilization is "
                         f"{100 * sum(v) / len(v):+.1f} points beside this CPU's sparse "
                         f"product on average (the paper: +43.15 against a Core i7-5930K, from "
                         f"the EIE paper's measurements).")
    return lines + [""]


def _fdpu_util(rec):
    return "-" if rec is None else f"{rec['result']['utilization']:.1%}"


def _conv_section(records):
    """Return the report's lines on the convolution layers: the paper's section 6 sentence,
    per layer and batch the weights' share of the input data and each graph's compute cycles
    and external bytes, and what the skip graph changes."""
    rows = paper.conv_summary(records)
    lines = ["## Convolution layers (the paper's section 6)", "",
             f"The paper: *{paper.CONV_STATEMENT}*.", "",
             "Each convolution runs as the matrix multiplication of its `K x (C R S)` weights "
             "by its inputs unrolled on the host, one row per output position "
             "(docs/net.md, \"Convolution layers\"); weights share = the dense binary16 "
             "weights over the batch's input bytes (not unrolled); compute cycles against the "
             "dense graph's on the same layer and batch; external bytes against the layer's "
             "own minimum (weights, the input once, the outputs).", "",
             "| layer | batch | weights share of the input data | "
             + " | ".join(f"{g}: compute cycles (x dense)" for g in paper.CONV_GRAPHS)
             + " | " + " | ".join(f"{g}: external MB (x min)" for g in paper.CONV_GRAPHS)
             + " |",
             "|---|---:|---:|" + "---:|" * (2 * len(paper.CONV_GRAPHS))]
    for (layer, batch), row in rows.items():
        cells = [layer, str(batch), f"{row['weights_share']:.2%}"]
        for g in paper.CONV_GRAPHS:
            v = row["graphs"].get(g)
            cells.append("-" if v is None else f"{v['compute']:,} ({v['vs_dense']:.3f})")
        for g in paper.CONV_GRAPHS:
            v = row["graphs"].get(g)
            cells.append("-" if v is None else f"{_mb(v['external'])} ({v['vs_min']:.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    def spread(values, fmt="{:.2f}"):
        return (fmt.format(min(values)) + "-" + fmt.format(max(values))) if values else "-"

    def ratios(graph, key, invert=False):
        out = []
        for r in rows.values():
            if graph in r["graphs"] and "dense" in r["graphs"]:
                a, b = r["graphs"]["dense"][key], r["graphs"][graph][key]
                out.append(a / max(1, b) if invert else b / max(1, a))
        return out

    at64 = [r["weights_share"] for (_, b), r in rows.items() if b == 64]
    lines += ["", f"* **Weights a small share of the data**: at batch 64 the dense weights are "
                  f"{spread(at64, '{:.2%}')} of the input bytes here (the paper: 0.35-19.35 "
                  f"%); so the layer's minimal traffic falls only to "
                  f"{spread(ratios('skip', 'minimum'))} x dense's with the weights in "
                  f"FD-CSR (skip graph), {spread(ratios('switch', 'minimum'))} x with the "
                  f"paper's: the paper's reasoning holds for the minimum."]
    if ratios("switch", "compute"):
        lines.append(f"* **The paper's graph gains nothing in compute**: the SWITCH graph "
                     f"executes a multiply-add for every weight, so a pruned convolution takes "
                     f"{spread(ratios('switch', 'compute'))} x the dense graph's compute "
                     f"cycles: the paper's conclusion holds for its graph.")
    skip = {}
    for (layer, _), r in rows.items():
        if "skip" in r["graphs"]:
            skip.setdefault(layer, []).append(r["graphs"]["skip"]["vs_dense"])
    faster = sorted(layer for layer, v in skip.items() if max(v) < 1)
    slower = sorted(layer for layer, v in skip.items() if max(v) >= 1)
    if skip:
        text = (f"* **The skip graph changes it where enough weights are pruned**: its work is "
                f"the stored weights only, so {', '.join(faster) or 'no layer'} "
                f"compute{'s' if len(faster) == 1 else ''} in "
                f"{spread([x for layer in faster for x in skip[layer]])} x the dense graph's "
                f"cycles")
        if slower:
            text += (f", while {', '.join(slower)} take"
                     f"{'s' if len(slower) == 1 else ''} "
                     f"{spread([x for layer in slower for x in skip[layer]])} x (few weights "
                     f"pruned, short rows: the skip graph's decode outweighs what it skips)")
        lines.append(text + "; not the density's ratio: the skip graph's Dbuf requests per "
                     "weight bound it (docs/dataflow.md).")
    moved = [v["vs_min"] for r in rows.values() for v in r["graphs"].values()]
    if moved:
        lines.append(f"* **Traffic as run**: every graph moves {spread(moved, '{:.1f}')} x its "
                     f"layer's minimum: the inputs, unrolled on the host, cross the port once "
                     f"per window and once per pass that reads them; the skip graph moves "
                     f"{spread(ratios('skip', 'external', invert=True))} x fewer bytes than "
                     f"dense (fewer weight bytes per pass, so fewer passes reload the "
                     f"inputs).")
    return lines + [""]
