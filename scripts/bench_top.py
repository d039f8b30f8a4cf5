"""Benchmark the FDPU top: simulated cycles per second and utilization of an FC layer on the RTL.

Usage::

    .venv/bin/python scripts/bench_top.py --sim verilator --rows 1 --cols 1 --slots 32 \\
        --out-features 8 --in-features 64 --batch 8 --mode sparse --density 0.25

Prints one line per run: layer, array, cycles, RTL wall seconds (simulation only, after the
build), simulated cycles per second, utilization, dense-equivalent utilization and whether the
result matched the golden model bit for bit; ``--json`` appends the record to a file.
"""

import argparse
import json
import sys
import time


from sw.runtime.layer import rtl_figures as figures
from sw.compiler import fc_plan, layers, planner
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from tb.host import runtime


def main(argv=None):
    """Run the benchmark; return 0 when the RTL matched the golden model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", choices=("icarus", "verilator"), default="verilator")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--cols", type=int, default=1)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--dbuf-bytes", type=int, default=4096)
    ap.add_argument("--layer", help="a zoo layer instead of --out/--in-features")
    ap.add_argument("--out-features", type=int, default=8)
    ap.add_argument("--in-features", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--mode", choices=fc_plan.MODES, default="sparse")
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--json", metavar="PATH", help="append the record (JSON lines)")
    args = ap.parse_args(argv)
    p = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots, dbuf_bytes=args.dbuf_bytes)
    if args.layer:
        w = layers.make_weights(layers.get_layer(args.layer), args.density, 0)
    else:
        w = layers.make_weights((args.out_features, args.in_features), args.density, 0)
    x = layers.make_inputs(w.shape[1], args.batch, 0)
    plan = planner.plan_fc(w.shape[0], w.shape[1], x.shape[0], args.mode, p)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    t0 = time.perf_counter()
    y, job = runtime.run_fc_rtl(plan, w, x, args.sim, max_cycles=10_000_000)
    wall = time.perf_counter() - t0
    rec = figures(plan, w, x, ref, y, job)
    sim_s = job.wall_s["run_s"]
    rec.update(sim=args.sim, wall_s=wall, sim_s=sim_s, build_s=job.wall_s["build_s"],
               cycles_per_s=rec["cycles"] / max(sim_s, 1e-9))
    print(f"{args.sim} {p.rows}x{p.cols} slots {p.slots}: {plan.mode} K={plan.K} C={plan.C} "
          f"N={plan.N}: {rec['cycles']:,} cycles in {sim_s:.2f} s simulated "
          f"({rec['cycles_per_s']:,.0f} cycles/s), utilization {rec['utilization']:.2%}, "
          f"dense-equivalent {rec['dense_utilization']:.2%}, match {rec['match']}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({k: v for k, v in rec.items() if k != "golden_counters"}) + "\n")
    return 0 if rec["match"] else 1


if __name__ == "__main__":
    sys.exit(main())
