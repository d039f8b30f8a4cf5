"""Benchmark the RTL system: simulated cycles per second and the FC figures of the paper.

Each case runs an FC layer through ``tb.host.runtime.run_fc_rtl`` (one simulation: every pass DMA
in, compute, DMA out), checks it bit for bit against the golden model and prints one line:
simulator, array, layer, cycles (total / compute / DMA), simulated cycles per wall and per CPU
second of the simulator (the ``--backdoor-in`` writes excluded), utilization and
dense-equivalent utilization, external bytes, peak bandwidth requirement, build, load and
run seconds and the simulator's peak resident memory.  The JSON record also has the
``timeline``: per 100,000 cycles of a phase, the wall and CPU seconds and resident MiB, to
tell a rate that drops or memory that grows with the cycles from a fixed cost.

Usage::

    python scripts/bench_rtl.py speed                 # 8x8 on Verilator + 1x1 on Icarus
    python scripts/bench_rtl.py fc8 --batch 1 4 64    # alexnet-fc8, dense and sparse, 8x8 Verilator
    python scripts/bench_rtl.py fc8 --batch 64 --mode sparse --sparse-graph switch \\
        --operand-depth 4 --backdoor-in                            # the paper's SWITCH graph
    python scripts/bench_rtl.py case --sim icarus --rows 1 --cols 1 --slots 32 \\
        --in-features 64 --out-features 8 --batch 8 --mode sparse --density 0.25
    python scripts/bench_rtl.py first --layer alexnet-fc6 --batch 64 --mode dense \\
        --first-passes 2
                                 # the first passes of a layer too long to simulate whole

The array and system default to the README's configuration (``ArrayParams()``,
``System()``); ``speed`` keeps the small PE it was first measured on.

``first`` runs the first ``--first-passes`` passes of ``--layer`` (double-buffered unless
``--no-double-buffer``), checks their outputs against the golden model's and prints per pass
the DMA-in, contexts, the DMA behind another pass's contexts and the hold.

``--early-start`` starts each context when its own data are in (``docs/system.md``; every
case and ``first``).  ``--json PATH`` appends one JSON record per case.  ``--backdoor-in`` (not the default, and
labeled in every line and record) loads each pass's Dbufs and Cbufs by backdoor instead of
simulating the DMA-in, to measure the compute of layers whose DMA-in would take too long to
simulate; the line then also gives the DMA-in estimate of the measured DMA model (one word
per cycle at 8 B/cycle plus about the memory latency per descriptor, docs/system.md).
"""

import argparse
import json
import sys
import time

import numpy as np

from sw.runtime.layer import rtl_figures as figures
from sw.compiler import fc_plan, layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from sw.spec.system import System
from tb.host import runtime
from tb.host.job_plan import MemModel

ARRAY, SYSTEM = ArrayParams(), System()     # the defaults: the README's configuration


def run_case(sim, rows, cols, slots, K, C, N, mode, density, *, layer=None, seed=0,
             dbuf_bytes=1 << 21, max_cycles=None, exact=True, int_issue=ARRAY.int_issue,
             backdoor_in=False, dma_channels=SYSTEM.dma_channels, config_ports=4, overlap=True,
             sparse_graph=fc_plan.DEFAULT_SPARSE_GRAPH, operand_depth=ARRAY.operand_depth,
             early_start=None, edge_multicast=SYSTEM.edge_multicast,
             config_spans=SYSTEM.config_spans):
    """Run one case; return its record (see the module doc).

    ``sparse_graph`` is the sparse engine's graph (``sw.compiler.fc_plan.SPARSE_GRAPHS``; sparse
    only); a ``skip`` plan's rows are balanced by their stored weights.  ``early_start``
    ``None``: ``System``'s rule (on with ``overlap``), off with ``backdoor_in`` (no DMA-in).
    """
    if backdoor_in and early_start is None:
        early_start = False
    system = System(dma_channels=dma_channels, config_ports=config_ports, overlap=overlap,
                    early_start=early_start, edge_multicast=edge_multicast,
                    config_spans=config_spans)
    p = ArrayParams(rows=rows, cols=cols, slots=slots, dbuf_bytes=dbuf_bytes,
                    int_issue=int_issue, operand_depth=operand_depth)
    if layer:
        w = layers.make_weights(layers.get_layer(layer), density, seed)
    else:
        w = layers.make_weights((K, C), density, seed)
    x = layers.make_inputs(w.shape[1], N, seed)
    plan = planner.plan_fc(FcLayer.of(w, N), p, PlanOptions(mode, sparse_graph))
    t0 = time.perf_counter()
    ref = golden_fc.run_fc(plan, w, x, exact=exact)
    golden_s = time.perf_counter() - t0

    last = []

    def show(note):
        # The runtime polls twice a second; print a line only when the note changed.
        rss = f", {note['rss_mb']:,} MiB resident" if note.get("rss_mb") else ""
        line = f"  ... pass {note['pass_index']}/{note['passes']} {note['phase']} " \
               f"{note['cycles']:,} cycles{rss}"
        if last[-1:] != [line]:
            last.append(line)
            print(line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    y, job = runtime.run_fc_rtl(plan, w, x, sim, max_cycles=max_cycles, progress=show,
                                backdoor_in=backdoor_in, system=system)
    wall = time.perf_counter() - t0
    rec = figures(plan, w, x, ref, y, job, system)
    rec.pop("golden_counters")
    backdoor_s = job.wall_s.get("backdoor_s") or 0.0
    rec.update(sim=sim, layer=layer or f"{K}x{C}", density=density, golden_s=golden_s,
               wall_s=wall, build_s=job.wall_s["build_s"], sim_s=job.wall_s["run_s"],
               cycles_per_s=rec["cycles"] / max(job.wall_s["run_s"] - backdoor_s, 1e-9),
               load_s=job.wall_s["load_s"], backdoor_s=backdoor_s,
               sim_cpu_s=job.wall_s.get("run_cpu_s"),
               cycles_per_cpu_s=rec["cycles"] / max((job.wall_s.get("run_cpu_s") or 0)
                                                    - backdoor_s, 1e-9),
               max_rss_mb=job.wall_s.get("max_rss_mb"),
               timeline=job.wall_s.get("timeline"),
               nnz=int(np.count_nonzero(np.asarray(w, np.float16).view(np.uint16))),
               int_issue=int_issue, dma_channels=dma_channels, config_ports=config_ports,
               overlap=overlap, early_start=system.early_start,
               edge_multicast=system.edge_multicast, config_spans=system.config_spans,
               wall_clock=time.strftime("%H:%M:%S"))
    note = ""
    if backdoor_in:
        mem = MemModel()
        est = sum(i // 8 for i in job.ext_in) // dma_channels \
            + sum(n for n, _ in job.descriptors) // dma_channels * (mem.latency + 8)
        rec["dma_in_estimate"] = est
        note = (f" [DMA-in by BACKDOOR, not simulated; estimate {est:,} cycles at 8 B/cycle, "
                f"latency {mem.latency}, {dma_channels} DMA channel(s)]")
    graph = f" ({plan.sparse_graph} graph, {plan.kb} x {plan.gb})" if mode == "sparse" else ""
    print(f"{sim} {rows}x{cols} slots {slots}: {rec['layer']} {mode}{graph} N={N} "
          f"density {density}: match {rec['match']}; cycles {rec['cycles']:,} (compute "
          f"{rec['compute_cycles']:,} of which configuration {rec['config_cycles']:,}, "
          f"{rec['config_hidden_cycles']:,} of it behind the DMA-in; DMA "
          f"{rec['dma_cycles']:,}) at "
          f"{rec['cycles_per_s']:,.0f} cycles/s ({rec['cycles_per_cpu_s']:,.0f} per CPU "
          f"second); utilization {rec['utilization']:.2%}, "
          f"dense-equivalent {rec['dense_utilization']:.2%}; external bytes "
          f"{rec['external_bytes']:,}, peak bandwidth {rec['peak_bandwidth']:.2f} B/cycle; "
          f"build {rec['build_s']:.0f} s, load {rec['load_s']:.1f} s, simulation "
          f"{rec['sim_s']:.0f} s (backdoor writes {backdoor_s:.1f} s of it), simulator peak "
          f"{rec['max_rss_mb'] or 0:,} MiB resident{note}",
          flush=True)
    return rec


def first_passes(args, mode):
    """Run the first ``args.first_passes`` passes of ``args.layer``; return their record."""
    p = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots, int_issue=args.int_issue,
                    operand_depth=args.operand_depth)
    density = 1.0 if mode == "dense" else (args.density or layers.get_layer(args.layer).density)
    w = layers.make_weights(layers.get_layer(args.layer), density, 0)
    n = args.batch[0]
    x = layers.make_inputs(w.shape[1], n, 0)
    graph = args.sparse_graph if mode == "sparse" else None
    plan = planner.plan_fc(FcLayer.of(w, n), p,
                           PlanOptions(mode, graph, double_buffer=args.double_buffer))
    k = min(args.first_passes, plan.passes)
    ref = golden_fc.run_fc(plan, w, x, exact=False).result.copy()
    mask = np.zeros(ref.shape, dtype=bool)
    for q in range(k):
        for i in plan.pass_items(q):
            kbi, gbi = plan.item(i)
            rows = [r for r in plan.item_rows(kbi) if r < plan.K]
            mask[gbi * plan.gb * 4:(gbi + 1) * plan.gb * 4, rows] = True
    ref[~mask] = 0
    t0 = time.perf_counter()
    y, job = runtime.run_fc_rtl(plan, w, x, args.sim, first_passes=k,
                                dma_channels=args.dma_channels, config_ports=args.config_ports,
                                overlap=True, double_buffer=plan.double_buffer,
                                early_start=args.early_start is not False,
                                edge_multicast=args.edge_multicast,
                                config_spans=args.config_spans)
    wall = time.perf_counter() - t0
    match = bool(np.array_equal(y.view(np.uint16), ref.view(np.uint16)))
    passes = job.overlaps() if job.double_buffer else [
        dict(pass_index=j, in_cycles=r.in_cycles, out_cycles=r.out_cycles,
             hold_cycles=r.hold_cycles, span_cycles=r.span_cycles + r.out_cycles)
        for j, r in enumerate(job.passes)]
    for r, o in zip(job.passes, passes):
        o.update(compute_cycles=r.compute_cycles, context_cycles=r.context_cycles)
    rec = dict(layer=args.layer, mode=mode, graph=plan.sparse_graph if mode == "sparse" else
               "dense", N=n, passes_run=k, passes=plan.passes, contexts=plan.contexts,
               double_buffer=plan.double_buffer, early_start=args.early_start is not False,
               edge_multicast=args.edge_multicast, config_spans=args.config_spans,
               match=match,
               cycles=job.cycles,
               compute_cycles=job.compute_cycles, dma_cycles=job.dma_cycles,
               ext_read_bytes=job.final["o_ext_rd_bytes"], pass_cycles=passes,
               sim_s=job.wall_s["run_s"], wall_s=wall, rows=p.rows, cols=p.cols,
               slots=p.slots, int_issue=p.int_issue, operand_depth=p.operand_depth,
               dma_channels=args.dma_channels)
    db = ", double-buffered" if plan.double_buffer else ""
    print(f"{args.sim} {p.rows}x{p.cols}: {args.layer} {mode} N={n}, first {k} of {plan.passes} "
          f"passes ({plan.contexts} contexts each{db}): match {match}; cycles {job.cycles:,} "
          f"(compute {job.compute_cycles:,}, DMA {job.dma_cycles:,}); simulation "
          f"{rec['sim_s']:.0f} s", flush=True)
    for o in passes:
        print("  pass " + ", ".join(f"{key} {v:,}" for key, v in o.items()
                                    if key != "pass_index"), flush=True)
    return rec


def main(argv=None):
    """Run the chosen benchmark; return 0 when every case matched the golden model."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("speed", "fc8", "case", "first"))
    ap.add_argument("--layer", default="alexnet-fc6", help="the layer of 'first'")
    ap.add_argument("--first-passes", type=int, default=2, metavar="P")
    ap.add_argument("--double-buffer", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--operand-depth", type=int, default=ARRAY.operand_depth)
    ap.add_argument("--sim", choices=("icarus", "verilator"), default="verilator")
    ap.add_argument("--rows", type=int, default=ARRAY.rows)
    ap.add_argument("--cols", type=int, default=ARRAY.cols)
    ap.add_argument("--slots", type=int, default=ARRAY.slots)
    ap.add_argument("--in-features", type=int, default=64)
    ap.add_argument("--out-features", type=int, default=64)
    ap.add_argument("--batch", type=int, nargs="+", default=[4])
    ap.add_argument("--mode", choices=("dense", "sparse", "both"), default="both")
    ap.add_argument("--density", type=float, default=None)
    ap.add_argument("--int-issue", type=int, choices=(1, 2), default=ARRAY.int_issue)
    ap.add_argument("--dma-channels", type=int, default=SYSTEM.dma_channels)
    ap.add_argument("--config-ports", type=int, default=4,
                    help="MicC configuration ports (1..4; default 4)")
    ap.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                    help="configure while the DMA-in runs (default on)")
    ap.add_argument("--early-start", action=argparse.BooleanOptionalAction, default=None,
                    help="start each context when its own data are in (docs/system.md; "
                         "default: on with --overlap and the DMA-in simulated)")
    ap.add_argument("--edge-multicast", action=argparse.BooleanOptionalAction,
                    default=SYSTEM.edge_multicast,
                    help="send an input block an edge's Dbufs hold as one multicast flit a "
                         "word (docs/system.md; default "
                         f"{'on' if SYSTEM.edge_multicast else 'off'})")
    ap.add_argument("--config-spans", action=argparse.BooleanOptionalAction,
                    default=SYSTEM.config_spans,
                    help="Cbuf records of spans of PEs (docs/system.md; default "
                         f"{'on' if SYSTEM.config_spans else 'off'})")
    ap.add_argument("--golden", choices=("fast", "exact"), default="fast",
                    help="golden engine of the reference (both are bit-exact; fast: vectorized)")
    ap.add_argument("--backdoor-in", action="store_true",
                    help="load the Dbufs/Cbufs by backdoor instead of simulating the DMA-in "
                         "(labeled; DMA-in reported as an estimate)")
    ap.add_argument("--sparse-graph", choices=fc_plan.SPARSE_GRAPHS,
                    default=fc_plan.DEFAULT_SPARSE_GRAPH,
                    help="sparse engine graph: the branch-free gather graph (default), the "
                         "paper's SWITCH graph or the zero-skipping skip graph "
                         "(docs/dataflow.md)")
    ap.add_argument("--json", metavar="PATH", help="append one JSON record per case")
    args = ap.parse_args(argv)
    modes = ("dense", "sparse") if args.mode == "both" else (args.mode,)
    records = []
    if args.what == "first":
        records += [first_passes(args, mode) for mode in modes]
    elif args.what == "speed":
        # The speed case keeps the PE and system it was first measured on (docs/harness.md):
        # 64 slots at operand depth 4, one INT issue, one DMA channel.
        small = dict(int_issue=1, operand_depth=4, dma_channels=1, early_start=False,
                     edge_multicast=False, config_spans=False)
        records.append(run_case("verilator", 8, 8, 64, 64, 256, 16, "sparse", 0.25, **small))
        records.append(run_case("icarus", 1, 1, 32, 8, 64, 8, "sparse", 0.25,
                                dbuf_bytes=4096, **small))
    elif args.what == "fc8":
        for n in args.batch:
            for mode in modes:
                density = 1.0 if mode == "dense" else (args.density or 0.25)
                records.append(run_case(args.sim, args.rows, args.cols, args.slots, 0, 0, n,
                                        mode, density, layer="alexnet-fc8", exact=False,
                                        int_issue=args.int_issue,
                                        backdoor_in=args.backdoor_in,
                                        dma_channels=args.dma_channels,
                                        config_ports=args.config_ports,
                                        overlap=args.overlap,
                                        sparse_graph=args.sparse_graph,
                                        operand_depth=args.operand_depth,
                                        early_start=args.early_start,
                                        edge_multicast=args.edge_multicast,
                                        config_spans=args.config_spans))
    else:
        for n in args.batch:
            for mode in modes:
                density = 1.0 if mode == "dense" and args.density is None else \
                    (args.density if args.density is not None else 0.25)
                records.append(run_case(args.sim, args.rows, args.cols, args.slots,
                                        args.out_features, args.in_features, n, mode,
                                        density, dbuf_bytes=1 << 21 if args.sim == "verilator"
                                        else 4096, int_issue=args.int_issue,
                                        backdoor_in=args.backdoor_in,
                                        dma_channels=args.dma_channels,
                                        config_ports=args.config_ports,
                                        overlap=args.overlap,
                                        exact=args.golden == "exact",
                                        sparse_graph=args.sparse_graph,
                                        operand_depth=args.operand_depth,
                                        early_start=args.early_start,
                                        edge_multicast=args.edge_multicast,
                                        config_spans=args.config_spans))
    if args.json:
        with open(args.json, "a") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
    return 0 if all(r["match"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
