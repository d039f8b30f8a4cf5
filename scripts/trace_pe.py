"""Trace every firing of the one-PE FC benchmark and print the sparse engine's loop times.

Usage: ``.venv/bin/python scripts/trace_pe.py [--sim icarus|verilator] [--layer K,C,N]
[--mode sparse|dense] [--slots 128] [--int-issue 2] [--kb KB --gb GB] [--wfan N]
[--mem-delay LO,HI] [--json FILE]``

Runs the FC image of ``scripts/bench_pe.py`` (same parameters, seed and Dbuf latency 2..30)
through ``tb.pe.bench_pe``'s ``golden_images`` with a probe that records, every cycle, which
slot each issue pipe fired (``go<p>``, ``s1_slot<p>``) or picked without firing
(``s1_valid<p>`` without ``go<p>``: no room downstream, unit busy); a diagnosis of internals,
not an interface.  Prints per pipe the firings and the picks without firing, per role of the
engine graph (``sw.compiler.graphs`` node meta) the firings, the mean interval between consecutive
firings of one slot and the picks without firing, the SWITCH loop's trip times (SWITCH firing
-> next firing of the same SWITCH, split by the branch taken: zero when its ``IMM`` fired in
between), the same-PE latency SWITCH -> join, and the golden model's cycle estimate of the
same image.  ``--kb/--gb/--wfan`` force a blocking (``sw.compiler.planner.plan_fc``'s arguments;
wfan: lane groups per sparse value load, 4 or 16) in this process, for experiments.

When imported by cocotb (``FDPU_TRACE_OUT`` set) the module is the test module itself.
"""

import os

if os.environ.get("FDPU_TRACE_OUT"):
    # Inside the simulator: wrap the stall probe of tb.pe.bench_pe with a firing recorder.
    import json

    import cocotb
    from cocotb.triggers import ReadOnly, RisingEdge

    import tb.pe.bench_pe as _pe_test

    class _Tracer(_pe_test.StallProbe):
        def __init__(self, dut, fp_slots, mem_slots=()):
            super().__init__(dut, fp_slots, mem_slots)
            self.fired = []
            pipes = [p for p in range(3) if hasattr(dut, f"go{p}")]
            self._pipes = [(p, getattr(dut, f"go{p}"), getattr(dut, f"s1_slot{p}"),
                            getattr(dut, f"s1_valid{p}")) for p in pipes]
            self._trace = cocotb.start_soon(self._record())

        async def _record(self):
            cycle = 0
            while True:
                await RisingEdge(self.dut.clk)
                await ReadOnly()
                if self.dut.rst.value == 1:
                    continue
                cycle += 1
                for p, go, slot, valid in self._pipes:
                    if go.value.is_resolvable and int(go.value) == 1:
                        self.fired.append((cycle, p, int(slot.value)))
                    elif valid.value.is_resolvable and int(valid.value) == 1:
                        # Picked but did not fire (a destination without room, a busy unit).
                        self.fired.append((cycle, p + 10, int(slot.value)))

        def stop(self):
            self._trace.cancel()
            super().stop()

        def report(self):
            rep = super().report()
            with open(os.environ["FDPU_TRACE_OUT"], "a") as out:
                out.write(json.dumps(self.fired) + "\n")
            return rep

    _pe_test.StallProbe = _Tracer
    golden_images = _pe_test.golden_images


def main():
    import argparse
    import dataclasses
    import json
    import statistics
    import tempfile
    from pathlib import Path

    from sw.compiler import fc_plan, graphs, planner
    from sw.compiler.place import place
    from sw.models.golden import run_image
    from sw.spec.isa import Op
    from tb.host.runner import run_cocotb
    from tb.pe import cases
    from tb.pe.cases import PARAMS_1X1, top_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="icarus", choices=["icarus", "verilator"])
    ap.add_argument("--layer", default="6,64,32")
    ap.add_argument("--mode", default="sparse", choices=list(fc_plan.MODES))
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--int-issue", type=int, default=2, choices=[1, 2])
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--kb", type=int)
    ap.add_argument("--gb", type=int)
    ap.add_argument("--wfan", type=int, choices=[4, 16])
    ap.add_argument("--sparse-graph", default=fc_plan.DEFAULT_SPARSE_GRAPH,
                    choices=list(fc_plan.SPARSE_GRAPHS))
    ap.add_argument("--mem-delay", default="2,30", help="Dbuf latency lo,hi (default 2,30)")
    ap.add_argument("--json", help="write the firing trace and the summary here")
    args = ap.parse_args()
    k, c, n = (int(v) for v in args.layer.split(","))
    if args.kb or args.gb or args.wfan or args.sparse_graph != fc_plan.DEFAULT_SPARSE_GRAPH:
        plan_fc = planner.plan_fc
        planner.plan_fc = lambda *a, **kw: plan_fc(*a, **dict(kw, kb=args.kb, gb=args.gb,
                                                                wfan=args.wfan,
                                                                sparse_graph=args.sparse_graph))
    p = dataclasses.replace(PARAMS_1X1, int_issue=args.int_issue, slots=args.slots,
                            dbuf_bytes=1 << 16)
    image = cases.fc_image(args.mode, k, c, n, p, args.seed)
    plan = planner.plan_fc(k, c, n, args.mode, p)
    g = graphs.build_graph(plan)
    pl = place(g, p)
    node_at = {pl.where[nid][2]: g.nodes[nid]
               for nid in range(len(g.nodes))}
    est = run_image(image)
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(cases.save_case(Path(tmp) / args.mode, image, f"fc-{args.mode}"))
        out = Path(tmp) / "trace.jsonl"
        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            v for v in (here, os.environ.get("PYTHONPATH")) if v)
        run_cocotb("pe", dict(top_params(p), pool=32), "trace_pe", args.sim,
                   testcase="golden_images",
                   extra_env={"FDPU_PE_CASES": json.dumps([folder]), "FDPU_PE_STRESS": "0,0",
                              "FDPU_PE_PROBE": "1", "FDPU_TRACE_OUT": str(out),
                              "FDPU_PE_MEM_DELAY": args.mem_delay},
                   seed=args.seed, timeout_s=3600)
        fired = json.loads(out.read_text().splitlines()[0])
    wasted = [(cyc, p - 10, slot) for cyc, p, slot in fired if p >= 10]
    fired = [f for f in fired if f[1] < 10]
    by_slot = {}
    for cyc, _, slot in fired:
        by_slot.setdefault(slot, []).append(cyc)
    cycles = max(cyc for cyc, _, _ in fired)
    facc = sum(len(v) for s, v in by_slot.items() if node_at[s].op is Op.FACC)
    print(f"{args.mode} {plan.kb} x {plan.gb}, layer {k} x {c} batch {n}, {args.sim}: "
          f"{facc} FACC, last firing at cycle {cycles}; golden estimate {est.time} cycles")
    roles = {}
    for s, times in by_slot.items():
        role = node_at[s].meta.get("role", "?")
        roles.setdefault(role, []).append(times)
    lost = {}
    for _, _, slot in wasted:
        role = node_at[slot].meta.get("role", "?")
        lost[role] = lost.get(role, 0) + 1
    span = cycles - min(cyc for cyc, _, _ in fired) + 1
    for pipe in sorted({p for _, p, _ in fired}):
        n = sum(1 for _, p, _ in fired if p == pipe)
        w = sum(1 for _, p, _ in wasted if p == pipe)
        print(f"pipe {pipe}: {n} firings, {w} picks without firing, in {span} cycles "
              f"({n / span:.2f} firings/cycle)")
    print(f"{'role':10s} {'slots':>5s} {'firings':>8s} {'mean gap':>9s} {'no-fire picks':>14s}")
    for role, lists in sorted(roles.items()):
        gaps = [b - a for t in lists for a, b in zip(t, t[1:])]
        print(f"{role:10s} {len(lists):5d} {sum(map(len, lists)):8d} "
              f"{statistics.mean(gaps) if gaps else 0:9.1f} {lost.get(role, 0):14d}")
    summary = dict(cycles=cycles, estimate=est.time, facc=facc)
    sws = [s for s, nd in node_at.items() if nd.op is Op.SWITCH]
    if sws:
        # Branch of each SWITCH firing: did its zero branch (fz) fire before the next one?
        trips = {True: [], False: []}
        lat = []
        for s in sws:
            row = node_at[s].meta.get("row")
            lane = node_at[s].meta.get("lane")
            peers = {node_at[t].meta.get("role"): by_slot.get(t, [])
                     for t in node_at if node_at[t].meta.get("row") == row
                     and node_at[t].meta.get("lane") == lane
                     and node_at[t].meta.get("role") in ("jn", "ld", "fz")}
            ts = by_slot.get(s, [])
            zeros = set(peers.get("fz", []))
            jn = peers.get("jn", [])
            for a, b in zip(ts, ts[1:]):
                taken = not any(a < t < b for t in zeros)
                trips[taken].append(b - a)
            lat += [j - a for a, j in zip(ts, jn)]
        for taken, v in trips.items():
            if v:
                print(f"SWITCH trip ({'kept weight' if taken else 'zero weight'}): "
                      f"{len(v)} trips, mean {statistics.mean(v):.1f}, median "
                      f"{statistics.median(v)}, max {max(v)} cycles")
        if lat:
            print(f"SWITCH -> join firing: mean {statistics.mean(lat):.1f} cycles")
        summary["trips"] = {str(k2): v for k2, v in trips.items()}
    if args.json:
        # slots: each slot's node name (``e0.ld2.0``: engine, role, row, lane), to read the trace.
        names = {str(slot): nd.name for slot, nd in node_at.items()}
        Path(args.json).write_text(json.dumps(dict(summary=summary, fired=fired,
                                                   wasted=wasted, slots=names)))


if __name__ == "__main__" and not os.environ.get("FDPU_TRACE_OUT"):
    main()
