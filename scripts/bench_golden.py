"""Time the golden model on a full-size layer and print what the FC graphs cost per weight.

Usage::

    .venv/bin/python scripts/bench_golden.py                 # alexnet-fc8, sparse, batch 4
    .venv/bin/python scripts/bench_golden.py --table         # + instructions/weight table
    .venv/bin/python scripts/bench_golden.py --exact-small   # + interpreter events/second

The timed run is ``sw.golden.run_fc`` on the vectorized path (what ``fdpu run`` uses for
full-size layers), plan and graph included, reference check excluded.  ``--table`` runs
``alexnet-fc8`` (4096 -> 1000, 25 % dense) in both modes at batch 1, 4 and 64 and prints the
blocking, instructions per weight, the int/FP/memory issues per context of one engine (from
the graph's rates) and bytes read per weight.
"""

import argparse
import sys
import time

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])

from sw import golden, graphs, layers  # noqa: E402


def timed_run(name, mode, batch, seed=0):
    """Return ``(seconds, FcRun)`` of one vectorized golden run of zoo layer ``name``."""
    spec = layers.get_layer(name)
    w = layers.make_weights(spec, None, seed)
    x = layers.make_inputs(spec.in_features, batch, seed)
    start = time.perf_counter()
    plan = graphs.plan_fc(spec.out_features, spec.in_features, batch, mode)
    res = golden.run_fc(plan, w, x)
    return time.perf_counter() - start, res


def main(argv=None):
    """Run the benchmark; return the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="alexnet-fc8")
    ap.add_argument("--mode", default="sparse", choices=graphs.MODES)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--exact-small", action="store_true")
    args = ap.parse_args(argv)
    seconds, res = timed_run(args.layer, args.mode, args.batch)
    c = res.counters
    print(f"golden model, {args.layer} {args.mode} batch {args.batch}: {seconds:.2f} s "
          f"({c.instructions:,} instructions, goal < 60 s)")
    if args.table:
        print(f"\n{'mode':7} {'N':>3} {'kb x gb':>8} {'insn/weight':>12} {'FACC/weight':>12} "
              f"{'int/col':>8} {'fp/col':>7} {'mem/col':>8} {'bytes read/weight':>18}")
        for mode in graphs.MODES:
            for batch in (1, 4, 64):
                _, r = timed_run("alexnet-fc8", mode, batch)
                p = r.plan
                _, integer, fp, mem = graphs.engine_costs(mode, p.kb, p.gb, 64, loads=True)
                weights = p.K * p.C
                print(f"{mode:7} {batch:3d} {p.kb:>4} x {p.gb:<2} "
                      f"{r.counters.instructions / weights:12.2f} "
                      f"{r.counters.ops['FACC'] / weights:12.2f} {integer / 64:8.2f} "
                      f"{fp / 64:7.2f} {mem / 64:8.2f} "
                      f"{r.counters.bytes_read / weights:18.2f}")
    if args.exact_small:
        from sw.arch import ArrayParams
        w = layers.make_weights((16, 256), 0.25, 0)
        x = layers.make_inputs(256, 8, 0)
        plan = graphs.plan_fc(16, 256, 8, "sparse", ArrayParams(rows=2, cols=2))
        start = time.perf_counter()
        r = golden.run_fc(plan, w, x, exact=True, seed=1)
        s = time.perf_counter() - start
        print(f"\nexact interpreter, 16 x 256 sparse batch 8 on 2x2: {r.events:,} events in "
              f"{s:.2f} s ({r.events / s:,.0f} events/s, "
              f"{r.counters.instructions / s:,.0f} instructions/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
