"""Benchmark the zero-skipping ``skip`` graph on the RTL against the dense and gather graphs.

Every point is one ``scripts/bench_rtl.py`` case (one simulation, bit for bit against the
golden model), on the 8 x 8 Verilator model with 128 slots at operand depth 2 (the defaults;
the records without an ``operand_depth`` key ran at depth 4), two INT issues and 4 DMA channels
unless told otherwise, the Dbufs loaded by backdoor (``--backdoor-in``: compute is what is
measured; the DMA-in is reported as an estimate).  Per point it prints compute cycles, FP
utilization (FACC steps, padding included), nnz utilization (useful multiply-adds / peak), the
load-balance efficiency, external bytes, and for ``skip`` (and ``reuse``, when named) its
compute cycles over the dense graph's.

Usage::

    python scripts/bench_skip.py fc8 --batch 1 4 64 --json docs/data/skip_fc8.jsonl
    python scripts/bench_skip.py fc8 --batch 64 --density 0.09 0.04 --graphs skip \\
        --json docs/data/skip_fc8.jsonl
    python scripts/bench_skip.py sweep --in-features 1024 --out-features 256 --batch 64 \\
        --json docs/data/skip_sweep.jsonl --plot docs/img/skip_speedup.png

The JSON file is a result cache: a point already in it (same layer, shape, density, batch,
graph and array) is not run again, so an interrupted run resumes; ``--plot`` draws the
sweep's speed-up over dense against density beside the ideal ``1 / density``.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rtl  # noqa: E402  (the case runner beside this script)

GRAPHS = ("dense", "gather", "skip")


def _key(layer, k, c, density, batch, graph, args):
    return dict(layer=layer, K=k, C=c, density=density, N=batch, graph=graph,
                rows=args.rows, cols=args.cols, slots=args.slots, int_issue=args.int_issue,
                dma_channels=args.dma_channels,
                **({"operand_depth": args.operand_depth} if args.operand_depth != 4 else {}))


def _cached(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _point(args, cache, layer, k, c, density, batch, graph):
    key = _key(layer, k, c, density, batch, graph, args)
    for rec in cache:
        if rec.get("key") == key:
            return rec
    mode = "dense" if graph == "dense" else "sparse"
    rec = bench_rtl.run_case(
        "verilator", args.rows, args.cols, args.slots, k or 0, c or 0, batch, mode, density,
        layer=layer, exact=False, int_issue=args.int_issue, backdoor_in=True,
        operand_depth=args.operand_depth,
        dma_channels=args.dma_channels, sparse_graph="gather" if graph == "dense" else graph)
    rec["key"] = key
    for drop in ("timeline", "busy_map", "dma_descriptors", "pass_cycles"):
        rec.pop(drop, None)
    cache.append(rec)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return rec


def _issue(rec):
    """FP issue utilization (records before the metrics were renamed call it utilization)."""
    return rec.get("issue_utilization", rec["utilization"])


def _useful(rec):
    """Useful utilization (records before the rename call it nnz_utilization)."""
    return rec["nnz_utilization"] if "nnz_utilization" in rec else rec["utilization"]


def _line(rec, dense):
    ratio = rec["compute_cycles"] / dense["compute_cycles"] if dense else float("nan")
    k = rec["key"]
    print(f"{k['layer'] or str(k['K']) + 'x' + str(k['C'])} density {k['density']} batch "
          f"{k['N']} {k['graph']:6}: match {rec['match']}, compute {rec['compute_cycles']:,} "
          f"cycles ({ratio:.3f} x dense), FP issue util {_issue(rec):.1%}, util "
          f"{_useful(rec):.1%}, load balance {rec['load_balance']:.3f}, external "
          f"{rec['external_bytes']:,} B", flush=True)


def _run(args, cache, layer, k, c, densities, batches, graphs):
    out = []
    for batch in batches:
        dense = None
        if {"dense", "skip", "reuse"} & set(graphs):
            dense = _point(args, cache, layer, k, c, 1.0, batch, "dense")
        for density in densities:
            for graph in graphs:
                rec = dense if graph == "dense" else _point(args, cache, layer, k, c,
                                                             density, batch, graph)
                _line(rec, dense)
                out.append((density, batch, graph, rec, dense))
    return out


def _plot(points, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    skip = sorted((d, dn["compute_cycles"] / r["compute_cycles"])
                  for d, _, g, r, dn in points if g == "skip")
    gather = sorted((d, dn["compute_cycles"] / r["compute_cycles"])
                    for d, _, g, r, dn in points if g == "gather")
    fig, ax = plt.subplots(figsize=(6, 4))
    ds = [d for d, _ in skip]
    ax.plot(ds, [1 / d for d in ds], "k--", label="ideal 1 / density")
    ax.plot(ds, [s for _, s in skip], "o-", label="skip graph (RTL)")
    if gather:
        ax.plot([d for d, _ in gather], [s for _, s in gather], "s-", label="gather graph (RTL)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("density (stored weights / weights)")
    ax.set_ylabel("speed-up over dense (compute cycles)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    """Run the chosen benchmark; return 0 when every point matched the golden model."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("fc8", "sweep"))
    ap.add_argument("--batch", type=int, nargs="+", default=[64])
    ap.add_argument("--density", type=float, nargs="+", default=None,
                    help="densities (fc8: 0.25, the paper's; sweep: 0.04 0.09 0.25 0.5 1)")
    ap.add_argument("--graphs", nargs="+", choices=GRAPHS + ("reuse",), default=list(GRAPHS),
                    help="graphs to run (default: %(default)s; reuse runs only when named)")
    ap.add_argument("--in-features", type=int, default=1024)
    ap.add_argument("--out-features", type=int, default=256)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--operand-depth", type=int, default=2,
                    help="tokens per operand (default 2: the paper's 6 KB operand buffer with "
                         "128 slots; the records without it ran at 4)")
    ap.add_argument("--int-issue", type=int, choices=(1, 2), default=2)
    ap.add_argument("--dma-channels", type=int, default=4)
    ap.add_argument("--json", metavar="PATH", help="the result cache (JSON lines)")
    ap.add_argument("--plot", metavar="PNG", help="sweep: draw the speed-up against density")
    args = ap.parse_args(argv)
    cache = _cached(args.json)
    if args.what == "fc8":
        points = _run(args, cache, "alexnet-fc8", None, None, args.density or [0.25],
                      args.batch, args.graphs)
    else:
        points = _run(args, cache, None, args.out_features, args.in_features,
                      args.density or [0.04, 0.09, 0.25, 0.5, 1.0], args.batch, args.graphs)
        if args.plot:
            title = (f"{args.rows} x {args.cols} RTL (Verilator): {args.out_features} x "
                     f"{args.in_features}, batch {', '.join(map(str, args.batch))}, "
                     f"{args.slots} slots, {args.int_issue} INT issues")
            _plot(points, args.plot, title)
    return 0 if all(r["match"] for *_, r, _ in points) else 1


if __name__ == "__main__":
    sys.exit(main())
