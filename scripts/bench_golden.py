"""Time the golden model on a full-size layer and print what the FC graphs cost per weight.

Usage::

    .venv/bin/python scripts/bench_golden.py                 # alexnet-fc8, sparse, batch 4
    .venv/bin/python scripts/bench_golden.py --table         # + instructions/weight table
    .venv/bin/python scripts/bench_golden.py --exact-small   # + interpreter events/second
    .venv/bin/python scripts/bench_golden.py --chooser 96,256,64 --slots 128 --int-issue 2

The timed run is ``sw.models.golden_fc.run_fc`` on the vectorized path (what ``fdpu run`` uses for
full-size layers), plan and graph included, reference check excluded.  ``--table`` runs
``alexnet-fc8`` (4096 -> 1000, 25 % dense) with the dense graph and both sparse graphs (the
default gather graph and the paper's SWITCH graph) at batch 1, 4 and 64 and prints the
blocking, instructions per weight, the issues per column of one engine (from the graph's
rates: every INT/MEM/CTRL issue, and split as the RTL PE's pipes with ``int_issue = 2``:
pipe 2 the INT/CTRL issues with BSCAN tokens, pipe 0 loads, stores and ITER tokens; FP;
memory accesses) and bytes read per weight.  ``--chooser K,C,N`` prints the blocking
chooser's candidates for that layer in both modes (``sw.compiler.blocking.blocking_costs``:
issues per column, the bounding term, estimated cycles), on the array of ``--rows/--cols/
--slots/--int-issue`` (``--table`` uses the same array); ``--sparse-graph`` chooses the sparse
graph of the timed run and of ``--chooser``.
"""

import argparse
import dataclasses
import sys
import time

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])

from sw.compiler import blocking, fc_plan, layers, planner
from sw.models import golden_fc  # noqa: E402
from sw.spec.arch import ArrayParams  # noqa: E402


def timed_run(name, mode, batch, seed=0, params=None, sparse_graph=fc_plan.DEFAULT_SPARSE_GRAPH):
    """Return ``(seconds, FcRun)`` of one vectorized golden run of zoo layer ``name``."""
    spec = layers.get_layer(name)
    w = layers.make_weights(spec, None, seed)
    x = layers.make_inputs(spec.in_features, batch, seed)
    start = time.perf_counter()
    plan = planner.plan_fc(spec.out_features, spec.in_features, batch, mode, params,
                           sparse_graph=sparse_graph)
    res = golden_fc.run_fc(plan, w, x)
    return time.perf_counter() - start, res


def print_chooser(K, C, N, params, top=6, sparse_graph=fc_plan.DEFAULT_SPARSE_GRAPH):
    """Print the blocking chooser's ``top`` candidates of a ``K x C`` layer at batch ``N``."""
    for mode in fc_plan.MODES:
        plan = planner.plan_fc(K, C, N, mode, params, sparse_graph=sparse_graph)
        print(f"\n{mode} {K} x {C}, batch {N}, {params.rows}x{params.cols}, {params.slots} "
              f"slots, int_issue {params.int_issue}: plan_fc picks {plan.kb} x {plan.gb}"
              + (f", wfan {plan.wfan} ({sparse_graph} graph)" if mode == "sparse" else ""))
        print(f"  {'kb x gb':>7} {'wfan':>4} {'slots':>5} {'pipe2/col':>9} {'pipe0/col':>9} "
              f"{'fp/col':>6} {'mem/col':>7} {'rounds':>6} {'cycles/ctx':>10} {'bound':>11} "
              f"{'cycles':>8}")
        for d in blocking.blocking_costs(plan.engine, K, plan.groups, params)[:top]:
            c = d["issues"]
            pipe2, pipe0 = c.pipes(2)
            print(f"  {d['kb']:>3} x {d['gb']:<2} {d['wfan']:4} {c.slots:5} {pipe2 / 64:9.2f} "
                  f"{pipe0 / 64:9.2f} {c.fp / 64:6.2f} {c.mem / 64:7.2f} {d['rounds']:6} "
                  f"{d['per_ctx']:10.0f} {d['bound']:>11} {d['cost'][0]:8.0f}")


def main(argv=None):
    """Run the benchmark; return the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="alexnet-fc8")
    ap.add_argument("--mode", default="sparse", choices=fc_plan.MODES)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--exact-small", action="store_true")
    ap.add_argument("--chooser", metavar="K,C,N")
    default = ArrayParams()                        # the README's configuration
    ap.add_argument("--rows", type=int, default=default.rows)
    ap.add_argument("--cols", type=int, default=default.cols)
    ap.add_argument("--slots", type=int, default=default.slots)
    ap.add_argument("--int-issue", type=int, default=default.int_issue, choices=(1, 2))
    ap.add_argument("--sparse-graph", default=fc_plan.DEFAULT_SPARSE_GRAPH,
                    choices=fc_plan.SPARSE_GRAPHS)
    args = ap.parse_args(argv)
    params = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots,
                         int_issue=args.int_issue)
    if args.chooser:
        print_chooser(*(int(v) for v in args.chooser.split(",")), params,
                      sparse_graph=args.sparse_graph)
        return 0
    seconds, res = timed_run(args.layer, args.mode, args.batch, sparse_graph=args.sparse_graph)
    c = res.counters
    graph = f" ({args.sparse_graph} graph)" if args.mode == "sparse" else ""
    print(f"golden model, {args.layer} {args.mode}{graph} batch {args.batch}: {seconds:.2f} s "
          f"({c.instructions:,} instructions, goal < 60 s)")
    if args.table:
        print(f"\n{'graph':7} {'N':>3} {'kb x gb':>8} {'insn/weight':>12} {'FACC/weight':>12} "
              f"{'int/col':>8} {'pipe2/col':>9} {'pipe0/col':>9} {'fp/col':>7} {'mem/col':>8} "
              f"{'bytes read/weight':>18}")
        for mode, graph in (("dense", "dense"), ("sparse", "gather"), ("sparse", "switch")):
            for batch in (1, 4, 64):
                _, r = timed_run("alexnet-fc8", mode, batch, params=params,
                                 sparse_graph=graph if mode == "sparse" else
                                 fc_plan.DEFAULT_SPARSE_GRAPH)
                p = r.plan
                c = blocking.engine_issues(dataclasses.replace(p.engine, Cw=64))
                pipe2, pipe0 = c.pipes(2)
                weights = p.K * p.C
                print(f"{graph:7} {batch:3d} {p.kb:>4} x {p.gb:<2} "
                      f"{r.counters.instructions / weights:12.2f} "
                      f"{r.counters.ops['FACC'] / weights:12.2f} {(pipe2 + pipe0) / 64:8.2f} "
                      f"{pipe2 / 64:9.2f} {pipe0 / 64:9.2f} {c.fp / 64:7.2f} {c.mem / 64:8.2f} "
                      f"{r.counters.bytes_read / weights:18.2f}")
    if args.exact_small:
        w = layers.make_weights((16, 256), 0.25, 0)
        x = layers.make_inputs(256, 8, 0)
        plan = planner.plan_fc(16, 256, 8, "sparse", ArrayParams(rows=2, cols=2))
        start = time.perf_counter()
        r = golden_fc.run_fc(plan, w, x, exact=True, seed=1)
        s = time.perf_counter() - start
        print(f"\nexact interpreter, 16 x 256 sparse batch 8 on 2x2: {r.events:,} events in "
              f"{s:.2f} s ({r.events / s:,.0f} events/s, "
              f"{r.counters.instructions / s:,.0f} instructions/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
