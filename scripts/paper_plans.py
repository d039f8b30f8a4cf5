#!/usr/bin/env python3
"""Does this tree run the paper's RTL records as they were run? Compare their plans with today's.

An RTL record of ``fdpu paper --source rtl`` (its cache, ``docs/data/paper-rtl`` by default)
holds the plan its source chose: blocking, passes, contexts, graph, double buffering, early
start, edge multicast and the system. The planner of a later tree may choose differently (its
performance model, which the chooser consults, is re-fitted as RTL points come in), and then
the record no longer describes what this tree would run. For every bit-exact Verilator record
of the given source this script plans the same point here (``fdpu run ... --sim model``, in
this process) and prints, per point, whether every planning field is the same, and the fields
that differ. With the hardware unchanged since that source (``git diff <commit> -- hw`` empty),
a point whose plan is the same here runs here as it ran there, cycle for cycle.

    python scripts/paper_plans.py                      # every source in the cache
    python scripts/paper_plans.py --source 4bb66a42    # one source (digest prefix)

Exit status 0 when every compared point plans the same, 1 otherwise.
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The fields of a record that the plan and the system decide (besides ``plan`` itself).
FIELDS = ("passes", "contexts", "graph", "double_buffer", "early_start", "edge_multicast",
          "overlap", "dma_channels", "config_ports", "mem_latency", "mem_bandwidth", "rows",
          "cols", "slots", "int_issue", "operand_depth", "dbuf_bytes")


def records(cache, source=None):
    """Return the bit-exact Verilator records of ``cache`` (of sources starting ``source``)."""
    out = []
    for name in sorted(os.listdir(cache)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(cache, name)) as f:
            rec = json.load(f)
        if rec.get("sim") != "verilator" or rec.get("status") != 0 or \
                not rec.get("result", {}).get("match"):
            continue
        if source and not rec.get("source", "").startswith(source):
            continue
        out.append(rec)
    return out


def model_args(args):
    """The record's ``fdpu run`` arguments with ``--sim model`` instead of its simulator."""
    out, it = [], iter(args)
    for a in it:
        if a == "--sim":
            next(it)
            continue
        if not a.startswith("--sim="):
            out.append(a)
    return ["run", *out, "--sim", "model"]


def plan_here(args):
    """Return today's model record of the point run by ``fdpu run <args>``."""
    from sw.cli import app
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "point.json")
        with contextlib.redirect_stdout(io.StringIO()):
            status = app.main([*model_args(args), "--json", path])
        if status:
            raise RuntimeError(f"fdpu {' '.join(model_args(args))} exited {status}")
        with open(path) as f:
            return json.load(f)


def differences(then, now):
    """Return ``[(field, then, now)]`` for the planning fields that differ."""
    diff = [(f"plan.{k}", then["plan"].get(k), now["plan"].get(k))
            for k in sorted(set(then["plan"]) | set(now["plan"]))
            if then["plan"].get(k) != now["plan"].get(k)]
    diff += [(k, then.get(k), now.get(k)) for k in FIELDS if then.get(k) != now.get(k)]
    return diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(ROOT / "docs" / "data" / "paper-rtl"),
                    help="the paper's RTL result cache (default docs/data/paper-rtl)")
    ap.add_argument("--source", help="only the records of this source digest (a prefix)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.cache):
        print(f"paper_plans: --cache {args.cache}: not a directory", file=sys.stderr)
        return 2
    recs = records(args.cache, args.source)
    if not recs:
        print(f"paper_plans: no bit-exact Verilator record in {args.cache}"
              + (f" of source {args.source}" if args.source else ""), file=sys.stderr)
        return 2
    same = 0
    for rec in sorted(recs, key=lambda r: (r["source"], r["name"])):
        diff = differences(rec["result"], plan_here(rec["args"]))
        same += not diff
        text = "same plan" if not diff else "; ".join(f"{k}: {a} -> {b}" for k, a, b in diff)
        print(f"{rec['source'][:8]}  {rec['name']:60s} {text}")
    print(f"{same} of {len(recs)} records plan the same here")
    return 0 if same == len(recs) else 1


if __name__ == "__main__":
    sys.exit(main())
