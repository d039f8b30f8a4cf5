#!/usr/bin/env python3
"""Where a layer's end-to-end time goes, against the bound set by its compute or its traffic.

For each point (layer, batch, graph) the table gives, from an RTL record (``--records``, the
paper's RTL evaluation by default) or else the performance model (``fdpu run --sim model``):

* ``bound`` = max(compute cycles, the layer's minimal external bytes / the port bandwidth),
  the port bandwidth being ``dma_channels x mem_bandwidth`` (the README's system: 4 x 8 B);
* ``reached`` = bound / end-to-end cycles (1.0: the layer runs at its bound);
* ``ext / min``: external bytes against the minimum (each weight, input and output once);
* ``DMA-in``: the passes' DMA-in cycles, and ``x floor``: those cycles against the external
  bytes they read at the port bandwidth (above 1: the DMA-in is bound by the words it sends
  into the Dbufs, one STORE a word and a copy per Dbuf that reads an input block, not by the
  port);
* ``waits``: the cycles the contexts wait for their pass's DMA-in (HOLD);
* ``overlapped``: the end-to-end cycles if each pass's contexts ran beside its own DMA-in
  (early start at the finest grain), every pass taking max(DMA-in, compute) plus its exposed DMA-out;
  ``one copy``: the same with the DMA-in at its port floor (inputs delivered without a
  STORE per copy); ``at minimum``: the bound itself.

    python scripts/bound_analysis.py                          # the issue's points
    python scripts/bound_analysis.py --points alexnet-fc8:64:skip vgg16-fc7:4:dense
    python scripts/bound_analysis.py --source model           # the model only
    python scripts/bound_analysis.py --early-start            # the model, early start
    python scripts/bound_analysis.py --early-start --edge-multicast   # and edge multicast
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from sw.models import figures

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "paper" / "rtl" / "records.json"
POINTS = ["alexnet-fc8:4:dense", "alexnet-fc8:4:skip", "alexnet-fc8:64:dense",
          "alexnet-fc8:64:skip", "alexnet-fc8:64:switch", "vgg16-fc7:4:dense",
          "vgg16-fc7:4:skip", "vgg16-fc7:64:dense", "vgg16-fc7:64:skip",
          "vgg16-fc7:64:switch"]


def point_args(point):
    """Return the ``fdpu run`` arguments of ``layer:batch:graph``."""
    layer, batch, graph = point.split(":")
    args = ["--layer", layer, "--batch", batch]
    if graph == "dense":
        return args + ["--mode", "dense"]
    return args + ["--mode", "sparse", "--sparse-graph", graph]


def rtl_record(records, point):
    """Return the RTL result of ``point`` in ``records`` (a sweep's records.json), or None."""
    want = set(point_args(point))
    for r in records:
        if r.get("sim") in ("verilator", "icarus") and want <= set(r["command"].split()) \
                and r["command"].split()[r["command"].split().index("--batch") + 1] \
                == point.split(":")[1] and (point.endswith("dense") or
                                            point.split(":")[2] in r["command"]):
            return r["result"]
    return None


def model_result(point, extra=()):
    """Return ``fdpu run --sim model``'s JSON record of ``point`` (``extra``: more options)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.json"
        subprocess.run([sys.executable, "-m", "sw.cli", "run", "--sim", "model",
                        *point_args(point), *extra, "--json", str(path)], cwd=ROOT, check=True,
                       capture_output=True)
        return json.loads(path.read_text())


def analyse(x):
    """Return the table's figures of one run record ``x``."""
    port = x["dma_channels"] * x["mem_bandwidth"]
    floor = x["min_external_bytes"] / port
    bound = figures.bound(compute_cycles=x["compute_cycles"], min_bytes=x["min_external_bytes"],
                          dma_channels=x["dma_channels"], mem_bandwidth=x["mem_bandwidth"],
                          cycles=x["cycles"])["bound_cycles"]
    passes = x["pass_cycles"]
    dma_in = sum(p["dma_in"] for p in passes)
    in_floor = sum(p["ext_in"] for p in passes) / port
    last_out = passes[-1]["dma_out"]
    overlapped = sum(max(p["dma_in"] - p.get("in_hidden", 0), p["compute"]) for p in passes)
    one_copy = sum(max(p["ext_in"] / port, p["compute"]) for p in passes)
    return dict(compute=x["compute_cycles"], cycles=x["cycles"], floor=floor, bound=bound,
                reached=bound / x["cycles"], ext=x["external_bytes"] / x["min_external_bytes"],
                passes=len(passes), dma_in=dma_in, in_x=dma_in / max(1.0, in_floor),
                waits=x.get("hold_cycles", 0), overlapped=overlapped + last_out,
                one_copy=one_copy + last_out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", nargs="+", default=POINTS, metavar="LAYER:BATCH:GRAPH")
    ap.add_argument("--source", choices=("rtl", "model"), default="rtl",
                    help="rtl: the RTL record where --records has one, else the model")
    ap.add_argument("--records", type=Path, default=RECORDS)
    ap.add_argument("--early-start", action="store_true",
                    help="the model with each context starting when its data are in "
                         "(implies --source model)")
    ap.add_argument("--edge-multicast", action="store_true",
                    help="the model with input blocks sent by edge multicast (implies "
                         "--source model)")
    args = ap.parse_args(argv)
    # Named either way: without them, the system the paper's RTL records were measured on.
    flags = ["--early-start" if args.early_start else "--no-early-start",
             "--edge-multicast" if args.edge_multicast else "--no-edge-multicast"]
    if args.early_start or args.edge_multicast:
        args.source = "model"
    records = json.loads(args.records.read_text()) if args.source == "rtl" else []
    head = ["point", "from", "passes", "compute", "traffic floor", "end to end", "reached",
            "ext / min", "DMA-in", "x floor", "waits", "overlapped", "one copy", "at minimum"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    for point in args.points:
        x, src = rtl_record(records, point), "RTL"
        if x is None:
            x, src = model_result(point, flags), "model"
        a = analyse(x)
        print(f"| {point} | {src} | {a['passes']} | {a['compute']:,} | {a['floor']:,.0f} | "
              f"{a['cycles']:,} | {a['reached']:.2f} | {a['ext']:.2f} | {a['dma_in']:,} | "
              f"{a['in_x']:.2f} | {a['waits']:,} | {a['overlapped']:,.0f} "
              f"({a['bound'] / a['overlapped']:.2f}) | {a['one_copy']:,.0f} "
              f"({a['bound'] / a['one_copy']:.2f}) | {a['bound']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
