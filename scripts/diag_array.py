"""Print where the FC engines lose time on the PE array: placement, link loads, measured runs.

Usage: ``.venv/bin/python scripts/diag_array.py [--rows R] [--cols C] [--mode dense|sparse]
[--homes current|straight] [--run icarus|verilator] [--in-features C --out-features K
--batch N --density D --slots S --int-issue 1|2 --dma-channels D] [--json FILE]``

Static part (no simulation, instant): the plan of the layer (``sw.compiler.planner.plan_fc``), each
engine's PE and home Dbuf, the routers each load crosses (request + reply), and the load of
every mesh link when every engine runs at 1 FACC/cycle (``loads per FACC`` of the engine:
dense ``(kb + gb) / (kb * gb)``).  A link carrying more than 1 flit/cycle caps the engines
through it at ``1 / load`` of full speed, and every engine runs the same work, so the busiest
link bounds the contexts' FP utilization: that bound is printed.

``--homes`` chooses the home-Dbuf policy: ``current`` is ``sw.compiler.home_dbufs.engine_homes``
as it is (since commit d587c9f the straight policy below); ``nearest`` the greedy it was
before (each PE the nearest Dbuf with room: on the 8 x 8 four engines' loads share links);
``straight`` replaces it (a monkeypatch of this process only) by :func:`homes_straight`, which
gives each PE a Dbuf on its own row or column (the XY route is then a straight line, so a link
only ever carries the flows of one Dbuf) with the fewest hops (an assignment problem).
``pairs`` and ``transposed`` are experiments (their docstrings).

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

from sw.compiler import fc_plan, graphs, home_dbufs, planner
from sw.spec.arch import ArrayParams, Dir

#: Step of each mesh direction, ``(dx, dy)``.
STEP = {Dir.EAST: (1, 0), Dir.WEST: (-1, 0), Dir.NORTH: (0, -1), Dir.SOUTH: (0, 1)}
#: The unpatched policy, kept before any monkeypatch.
CURRENT_HOMES = home_dbufs.engine_homes


def homes_straight(params, count, cap=None):
    """Return ``[(pe, dbuf)]`` for ``count`` engines, each Dbuf on the PE's row or column.

    The policy of :func:`sw.compiler.home_dbufs.engine_homes` (since d587c9f; before the
    monkeypatch of this process).  ``cap`` overrides the engines per Dbuf (an experiment:
    ``straight2`` puts two engines on each Dbuf used, as the 8 x 8 has, on a smaller array).
    """
    return CURRENT_HOMES(params, count, cap)


def homes_pairs(params, count):
    """Return ``[(pe, dbuf)]`` with two engines per north/south Dbuf, in the PE's column.

    An experiment for arrays of 4 rows: the 8 x 8's ratio of two engines per Dbuf (and short
    straight routes: rows 0-1 to the north Dbuf of their column, rows 2-3 to the south one)
    on a small array.
    """
    if params.rows != 4:
        raise SystemExit("--homes pairs needs --rows 4")
    homes = [((x, y), params.dbuf_at(x, -1 if y < 2 else params.rows))
             for y in range(params.rows) for x in range(params.cols)]
    return homes[:count]


def homes_transposed(params, count):
    """Return :func:`homes_straight` mirrored on the diagonal (square arrays; an experiment).

    The same routes with rows and columns swapped: whether a slow engine follows its PE or
    its Dbuf (edge port).
    """
    if params.rows != params.cols:
        raise SystemExit("--homes transposed needs a square array")
    homes = dict(homes_straight(params, params.num_pes))
    out = []
    for (x, y) in sorted(homes, key=lambda q: (q[1], q[0])):
        dx, dy = params.dbuf_coord(homes[(y, x)])
        out.append(((x, y), params.dbuf_at(dy, dx)))
    return out[:count]


def homes_nearest(params, count):
    """Return ``[(pe, dbuf)]`` as ``sw.compiler.home_dbufs.engine_homes`` did before commit
    d587c9f (the greedy).

    Each PE, edge PEs first, takes the nearest Dbuf with room (``ceil(P / D)`` engines each);
    the interior PEs of the 8 x 8 get Dbufs 4-7 routers away whose routes cross (kept here to
    rerun the round-4 measurements of docs/pe.md).
    """
    pes = params.pe_coords()
    dist = {pe: sorted((len(params.route(pe, params.dbuf_coord(d))), d)
                       for d in range(params.num_dbufs)) for pe in pes}
    cap = -(-params.num_pes // params.num_dbufs)
    load = [0] * params.num_dbufs
    homes = {}
    for pe in sorted(pes, key=lambda p: (dist[p][0][0], p[1], p[0])):
        for _, d in dist[pe]:
            if load[d] < cap:
                load[d] += 1
                homes[pe] = d
                break
    chosen = pes if count >= len(pes) else sorted(pes, key=lambda p: (
        len(params.route(p, params.dbuf_coord(homes[p]))), p[1], p[0]))[:count]
    chosen = sorted(chosen, key=lambda p: (p[1], p[0]))
    return [(pe, homes[pe]) for pe in chosen]


POLICIES = {"current": CURRENT_HOMES, "nearest": homes_nearest, "straight": homes_straight,
            "pairs": homes_pairs, "transposed": homes_transposed}


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
    homes = plan.homes
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


def end_join():
    """Monkeypatch ``sw.compiler.graphs.build_engine``: one END per engine instead of one per store.

    Every store of an item ends its context (``kb * gb`` CTX_END messages per engine and
    context, all through the MicC's one port at one flit per cycle: 1,536 on the 8 x 8's
    6 x 4 engines).  Here the stores lose their END and send their acknowledgement (a 0 token)
    into a binary tree of ``ADD``s (``kb * gb - 1`` of them; an operand takes one producer),
    whose root carries the END: the context still ends only after every store is written.
    An experiment of this script (the graphs are ``sw/compiler/graphs.py``'s).
    """
    from sw.spec.isa import Op
    plain = graphs.build_engine

    def build_engine(g, spec, e, desc=0, pe=None):
        ids = plain(g, spec, e, desc=desc, pe=pe)
        level = list(ids["st"])
        for st in level:
            g.nodes[st].end = False
        n = 0
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level) - 1, 2):
                j = g.add(Op.ADD, 2, 0, False, f"e{e}.endjoin{n}", group=e, pe=pe, engine=e,
                          role="endjoin")
                n += 1
                g.connect(level[i], j, 0)
                g.connect(level[i + 1], j, 1)
                nxt.append(j)
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        g.nodes[level[0]].end = True
        return ids

    graphs.build_engine = build_engine


def _probe_runner(out, period, watch=None):
    """Make the runtime run ``tb.top.bench_probe`` (samples to ``out``) instead of the job."""
    import tb.host.runner
    plain = tb.host.runner.run_cocotb

    def run_cocotb(top, params, test_module, sim, **kwargs):
        if test_module == "tb.top.bench_run":
            test_module = "tb.top.bench_probe"
            env = dict(kwargs.pop("extra_env", None) or {})
            env.update(FDPU_PROBE_OUT=str(out), FDPU_PROBE_PERIOD=str(period))
            if watch:
                env["FDPU_PROBE_WATCH"] = json.dumps(watch)
            kwargs["extra_env"] = env
        return plain(top, params, test_module, sim, **kwargs)

    tb.host.runner.run_cocotb = run_cocotb


def breakdown(probe, run, params):
    """Print where the contexts' cycles went, from the sampled FACC counters; return it.

    Per PE: the sample of its first and last FACC (to within one period), its FACC count and
    its rate between them.  Array: the spread of the first FACCs (context start skew and
    pipeline fill), the slowest PE's span, the tail after the fastest PE finished.
    """
    period = probe["period"]
    clock = np.array(probe["clock"], dtype=np.int64)
    fp = np.array(probe["fp"], dtype=np.int64)          # samples x PEs
    # Keep the compute phase only: the counters restart at the compute start, so take the
    # samples after the last restart of the (single-pass) job.
    extra = {k: np.array(probe[k], dtype=np.int64) for k in ("dbuf_reqs", "ends", "cycles",
                                                             "config_cycles") if k in probe}
    total = fp.sum(axis=1)
    start = int(np.flatnonzero(np.diff(total) < 0)[-1] + 1) if (np.diff(total) < 0).any() else 0
    clock, fp = clock[start:], fp[start:]
    extra = {k: v[start:] for k, v in extra.items()}
    final = fp[-1]
    first = np.array([clock[np.argmax(fp[:, n] > 0)] for n in range(fp.shape[1])])
    last = np.array([clock[np.argmax(fp[:, n] >= final[n])] for n in range(fp.shape[1])])
    span = np.maximum(last - first, 1)
    rate = final / span
    t0 = first.min()
    print(f"  time breakdown of the contexts (FACC counters sampled every {period} cycles; "
          f"times from the first FACC of the array):")
    print(f"    contexts {run['context_cycles']} cycles; first FACC of the array to the last: "
          f"{last.max() - t0}; FACC per PE {int(final.max())} (1 FACC/cycle would take "
          f"{int(final.max())})")
    print(f"    first FACC per PE: spread {first.max() - t0} cycles; last FACC: from "
          f"{last.min() - t0} to {last.max() - t0} (tail {last.max() - last.min()})")
    print(f"    FACC/cycle per PE between its first and last FACC: min {rate.min():.3f} "
          f"mean {rate.mean():.3f} max {rate.max():.3f}")
    grid = rate.reshape(params.rows, params.cols)
    print("    per-PE FACC/cycle (row by row):")
    for row in grid:
        print("      " + " ".join(f"{v:.2f}" for v in row))
    if "cycles" in extra and "config_cycles" in extra:
        # The MicC's cycle counter runs from the compute start to the end of the contexts
        # (when it stops, the contexts have ended; they began `context_cycles` earlier).
        run_clock = clock - extra["cycles"]
        begin = int(run_clock[extra["cycles"] > 0].min())
        ctx0 = begin + int(extra["cycles"].max()) - int(run["context_cycles"])
        ends = extra["ends"]
        done = clock[np.argmax(ends >= ends.max())]
        reqs = extra["dbuf_reqs"]
        req_last = clock[np.argmax(reqs >= reqs.max())]
        print(f"    contexts start (configuration done) to the first FACC: {t0 - ctx0}; last "
              f"FACC to the last Dbuf request: {req_last - last.max()}; to the last CTX_END "
              f"at the MicC: {done - last.max()} (to within {period})")
    # The array's FACC rate per window: where in time the loss is.
    busy = np.flatnonzero(np.diff(fp.sum(axis=1)) > 0)
    if len(busy):
        lo, hi = busy[0], busy[-1] + 1
        steps = np.diff(fp.sum(axis=1))[lo:hi] / (period * fp.shape[1])
        parts = np.array_split(steps, min(10, len(steps)))
        print("    array FACC/cycle/PE over time (10 windows): "
              + " ".join(f"{p.mean():.2f}" for p in parts))
    return dict(period=period, samples=fp.tolist(), clock=clock.tolist(),
                first=(first - t0).tolist(), last=(last - t0).tolist(), facc=final.tolist(),
                rate=rate.tolist())


def main(argv=None):
    """Parse the options, print the static report, run the RTL when asked."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--mode", choices=fc_plan.MODES, default="dense")
    ap.add_argument("--in-features", type=int, default=256)
    ap.add_argument("--out-features", type=int, default=96)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--density", type=float, default=None)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--int-issue", type=int, choices=(1, 2), default=2)
    ap.add_argument("--dma-channels", type=int, default=4)
    ap.add_argument("--kb", type=int, default=None, help="force the blocking (rows per item)")
    ap.add_argument("--gb", type=int, default=None, help="force the blocking (lane groups)")
    ap.add_argument("--end-join", action="store_true",
                    help="experiment: one CTX_END per engine and context (the stores' acks "
                         "counted by a FACC join, see end_join) instead of one per store")
    ap.add_argument("--homes", choices=sorted(POLICIES), default="current")
    ap.add_argument("--run", choices=("icarus", "verilator"), default=None)
    ap.add_argument("--probe", type=int, default=0, metavar="CYCLES",
                    help="with --run: sample the per-PE FACC counters every CYCLES cycles "
                         "(tb.top.bench_probe) and print the time breakdown")
    ap.add_argument("--watch", default=None, metavar="JSON",
                    help="with --probe on icarus: record internal signals of one block per "
                         "cycle (tb.top.bench_probe, FDPU_PROBE_WATCH)")
    ap.add_argument("--json", default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)
    import tb.host.runner
    saved = (home_dbufs.engine_homes, planner.plan_fc, graphs.build_engine,
             tb.host.runner.run_cocotb)
    try:
        return _main(args)
    finally:
        # The experiments monkeypatch these for this process; callers (tests) get them back.
        (home_dbufs.engine_homes, planner.plan_fc, graphs.build_engine,
         tb.host.runner.run_cocotb) = saved


def _main(args):
    """Run the parsed options of :func:`main`."""
    params = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots,
                         int_issue=args.int_issue)
    if args.kb or args.gb:
        plain_plan = planner.plan_fc

        def plan_fc(*a, **kw):
            kw.update(kb=args.kb, gb=args.gb)
            return plain_plan(*a, **kw)

        planner.plan_fc = plan_fc
    home_dbufs.engine_homes = POLICIES[args.homes]
    if args.end_join:
        end_join()
    plan = planner.plan_fc(args.out_features, args.in_features, args.batch, args.mode, params)
    figures = static_report(params, plan, args.homes)
    status = 0
    if args.run:
        from sw import cli
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run.json"
            samples = Path(tmp) / "probe.json"
            if args.probe:
                _probe_runner(samples, args.probe, json.loads(args.watch) if args.watch else None)
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
            probe = json.loads(samples.read_text()) if samples.exists() else None
        if run:
            print(f"measured ({args.run}, homes '{args.homes}'): match {run['match']}, "
                  f"contexts {run['context_cycles']} cycles, FP utilization of the contexts "
                  f"{100 * run['utilization_contexts']:.1f} %"
                  + (f" (link bound {100 * figures['link_bound']:.1f} %)"
                     if 'link_bound' in figures else ""))
            figures["run"] = {k: run[k] for k in ("match", "cycles", "compute_cycles",
                                                  "config_cycles", "context_cycles",
                                                  "utilization_contexts", "dbuf_requests")}
        if run and probe:
            figures["breakdown"] = breakdown(probe, run, params)
            for key in ("watch", "missing", "children"):
                if key in probe:
                    figures[key] = probe[key]
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
