"""Print where the FC engines lose time on the PE array: placement, link loads, measured runs.

Usage: ``.venv/bin/python scripts/diag_array.py [--rows R] [--cols C] [--mode dense|sparse]
[--homes current|straight] [--run icarus|verilator] [--in-features C --out-features K
--batch N --density D --slots S --int-issue 1|2 --dma-channels D] [--json FILE]``

Static part (no simulation, instant): the plan of the layer (``sw.graphs.plan_fc``), each
engine's PE and home Dbuf, the routers each load crosses (request + reply), and the load of
every mesh link when every engine runs at 1 FACC/cycle (``loads per FACC`` of the engine:
dense ``(kb + gb) / (kb * gb)``).  A link carrying more than 1 flit/cycle caps the engines
through it at ``1 / load`` of full speed, and every engine runs the same work, so the busiest
link bounds the contexts' FP utilization: that bound is printed.

``--homes`` chooses the home-Dbuf policy: ``current`` is ``sw.graphs._homes`` as it is;
``straight`` replaces it (a monkeypatch of this process only) by :func:`homes_straight`, which
gives each PE a Dbuf on its own row or column (the XY route is then a straight line, so a link
only ever carries the flows of one Dbuf) with the fewest hops (an assignment problem).

``--run icarus|verilator`` then runs the layer on the RTL (``fdpu run``, bit-exact check
included) with that policy and prints the measured utilization of the contexts next to the
bound.  Nothing is asserted; the exit status is ``fdpu run``'s.

Example (the 8 x 8 reference layer, ~1-2 minutes on Verilator with a cached build)::

    .venv/bin/python scripts/diag_array.py --homes straight --run verilator
"""

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from sw import graphs
from sw.arch import ArrayParams, Dir

#: Step of each mesh direction, ``(dx, dy)``.
STEP = {Dir.EAST: (1, 0), Dir.WEST: (-1, 0), Dir.NORTH: (0, -1), Dir.SOUTH: (0, 1)}
#: The unpatched policy, kept before any monkeypatch.
CURRENT_HOMES = graphs._homes


def homes_straight(params, count):
    """Return ``[(pe, dbuf)]`` for ``count`` engines, each Dbuf on the PE's row or column.

    Every Dbuf takes at most ``ceil(P / D)`` engines (as :func:`sw.graphs._homes`); among the
    assignments where each PE's home is on its own row or column (a straight XY route) the one
    with the least sum of squared hop counts is chosen (``scipy.optimize.linear_sum_assignment``);
    a PE with no straight choice left falls back to the nearest (penalized, so only when the
    shape forces it).  With ``count`` below the PE count the engines go to the PEs nearest
    their homes, as in ``_homes``.
    """
    pes = params.pe_coords()
    cap = -(-params.num_pes // params.num_dbufs)
    seats = [d for d in range(params.num_dbufs) for _ in range(cap)]
    coords = [params.dbuf_coord(d) for d in seats]
    cost = np.empty((len(pes), len(seats)))
    for i, pe in enumerate(pes):
        for j, (dx, dy) in enumerate(coords):
            hops = len(params.route(pe, (dx, dy)))
            cost[i, j] = hops * hops + (0 if dx == pe[0] or dy == pe[1] else 10_000)
    rows, cols = linear_sum_assignment(cost)
    homes = {pes[i]: seats[j] for i, j in zip(rows, cols)}
    chosen = pes if count >= len(pes) else sorted(pes, key=lambda q: (
        len(params.route(q, params.dbuf_coord(homes[q]))), q[1], q[0]))[:count]
    chosen = sorted(chosen, key=lambda q: (q[1], q[0]))
    return [(pe, homes[pe]) for pe in chosen]


POLICIES = {"current": CURRENT_HOMES, "straight": homes_straight}


def link_loads(params, homes, rate):
    """Return ``{(net, (x, y), port): flits per cycle}`` for loads at ``rate`` per engine.

    Each load is a request from the engine's PE to its home Dbuf (request mesh) and a reply
    back (reply mesh, entering at the router next to the Dbuf).  A key's router is the one
    whose output ``port`` carries the flits; ``(net, "dbufK", "inject")`` is Dbuf ``K``'s
    reply port.
    """
    load = collections.Counter()

    def walk(src, dst, net):
        cur = src
        for port in params.route(src, dst):
            load[(net, cur, port.name)] += rate
            if port is Dir.LOCAL:
                break
            cur = (cur[0] + STEP[port][0], cur[1] + STEP[port][1])

    for pe, d in homes:
        dx, dy = params.dbuf_coord(d)
        walk(pe, (dx, dy), "req")
        load[("rep", f"dbuf{d}", "inject")] += rate
        entry = (min(max(dx, 0), params.cols - 1), min(max(dy, 0), params.rows - 1))
        walk(entry, pe, "rep")
    return load


def loads_per_facc(plan):
    """Return the Dbuf loads one FACC of the plan's engine needs (dense ``(kb+gb)/(kb*gb)``).

    Sparse engines load a colidx and a rowoff per 16-weight row and group of 4 weights, plus
    the non-zero values; that is counted from the golden model's instruction mix instead, so
    this returns the dense figure only for dense plans and ``None`` otherwise.
    """
    if plan.mode != "dense":
        return None
    return (plan.kb + plan.gb) / (plan.kb * plan.gb)


def static_report(params, plan, policy):
    """Print placement, hops and the link-load bound; return the figures as a dict."""
    homes = POLICIES[policy](params, len(plan.homes))
    hops = [len(params.route(pe, params.dbuf_coord(d))) for pe, d in homes]
    per_dbuf = collections.Counter(d for _, d in homes)
    rate = loads_per_facc(plan)
    print(f"{params.rows}x{params.cols} {plan.mode}: engines {len(homes)} ({plan.kb} x "
          f"{plan.gb}), homes policy '{policy}', engines per Dbuf "
          f"{dict(sorted(collections.Counter(per_dbuf.values()).items()))}")
    print(f"  routers crossed PE -> home Dbuf (each way): histogram "
          f"{dict(sorted(collections.Counter(hops).items()))}, mean {np.mean(hops):.2f}, "
          f"max {max(hops)}")
    grid = [["  ."] * params.cols for _ in range(params.rows)]
    for (x, y), d in homes:
        grid[y][x] = f"{d:3d}"
    print("  home Dbuf per PE (row by row):")
    for row in grid:
        print("   " + " ".join(row))
    out = dict(policy=policy, hops=hops, homes=[[list(pe), d] for pe, d in homes])
    if rate is None:
        print("  link loads: dense plans only")
        return out
    load = link_loads(params, homes, rate)
    worst = max(load.values())
    top = load.most_common(6)
    print(f"  loads per FACC {rate:.3f}; at 1 FACC/cycle per engine the busiest links carry:")
    for (net, where, port), v in top:
        print(f"    {net:3s} {str(where):9s} {port:6s} {v:.3f} flits/cycle")
    bound = min(1.0, 1.0 / worst)
    print(f"  => link bound on the contexts' FP utilization: {100 * bound:.1f} %")
    out.update(rate=rate, max_link=worst, link_bound=bound)
    return out


def main(argv=None):
    """Parse the options, print the static report, run the RTL when asked."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--mode", choices=graphs.MODES, default="dense")
    ap.add_argument("--in-features", type=int, default=256)
    ap.add_argument("--out-features", type=int, default=96)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--density", type=float, default=None)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--int-issue", type=int, choices=(1, 2), default=2)
    ap.add_argument("--dma-channels", type=int, default=4)
    ap.add_argument("--homes", choices=sorted(POLICIES), default="current")
    ap.add_argument("--run", choices=("icarus", "verilator"), default=None)
    ap.add_argument("--json", default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)

    params = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots,
                         int_issue=args.int_issue)
    plan = graphs.plan_fc(args.out_features, args.in_features, args.batch, args.mode, params)
    figures = static_report(params, plan, args.homes)
    status = 0
    if args.run:
        graphs._homes = POLICIES[args.homes]
        from sw import cli
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run.json"
            cmd = ["run", "--sim", args.run, "--in-features", str(args.in_features),
                   "--out-features", str(args.out_features), "--batch", str(args.batch),
                   "--mode", args.mode, "--rows", str(args.rows), "--cols", str(args.cols),
                   "--slots", str(args.slots), "--int-issue", str(args.int_issue),
                   "--dma-channels", str(args.dma_channels), "--golden", "fast",
                   "--json", str(path)]
            if args.density is not None:
                cmd += ["--density", str(args.density)]
            status = cli.main(cmd)
            run = json.loads(path.read_text()) if path.exists() else {}
        if run:
            print(f"measured ({args.run}, homes '{args.homes}'): match {run['match']}, "
                  f"contexts {run['context_cycles']} cycles, FP utilization of the contexts "
                  f"{100 * run['utilization_contexts']:.1f} %"
                  + (f" (link bound {100 * figures['link_bound']:.1f} %)"
                     if 'link_bound' in figures else ""))
            figures["run"] = {k: run[k] for k in ("match", "cycles", "compute_cycles",
                                                  "config_cycles", "context_cycles",
                                                  "utilization_contexts", "dbuf_requests")}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
