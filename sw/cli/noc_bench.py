"""``fdpu noc-bench``: offered vs accepted load and latency of the RTL mesh (Verilator).

Traffic generation, injection queues and counters run in HDL (:mod:`tb.noc.bench`); Python
only configures a run and reads the counters back.  Rates are flits/node/cycle; latency is
network latency, ejection cycle - injection cycle + 1 (routers crossed + 1 at zero load; source
queueing excluded), measured on flits ejected in the measurement window; the 99th percentile
from a 1-in-num_pes sample of them (:mod:`tb.noc.bench`).
The goal figures and measured values are in ``docs/noc.md``.
"""

import json
import tempfile
from collections import Counter
from pathlib import Path

from sw.cli.options import as_options
from sw.cli.output import check_outputs, replacing, write_json
from sw.models.noc import PATTERNS
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from tb.host import runner
from tb.noc.bench import BIN_SHIFT, BINS, NocBench


#: The most cycles a bench may measure or warm up (its counters hold 2^31 - 1 with room).
MAX_CYCLES = 10_000_000


def register(subparsers):
    """Add the ``noc-bench`` parser."""
    parser = subparsers.add_parser(
        "noc-bench", help="measure throughput and latency of the RTL mesh",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--pattern", default="uniform", choices=sorted(PATTERNS))
    parser.add_argument("--rate", type=float, default=0.1,
                        help="offered load, flits/node/cycle in (0, 1]")
    parser.add_argument("--cycles", type=int, default=20000, help="measured cycles")
    parser.add_argument("--warmup", type=int, default=2000, help="cycles before measuring")
    parser.add_argument("--depth", type=int, default=4,
                        help="router input FIFO depth (2..64)")
    parser.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    parser.add_argument("--sweep", metavar="PNG",
                        help="sweep the offered load and draw latency vs offered load")
    parser.add_argument("--points", type=int, default=10,
                        help="sweep points (1..100, default 10; with --sweep)")
    parser.set_defaults(func=run)


def mean_routers(params, pattern):
    """Return the mean number of routers a flit of ``pattern`` crosses (``len(route)``).

    The destinations are weighted as the HDL generator draws them (:mod:`tb.noc.bench`):
    uniform coordinates are ``(v * cols) >> 8`` for a uniform byte ``v``; hotspot sends 1/4 of
    the flits to the centre.  At zero load the latency is this plus one (docs/noc.md).
    """
    xs = Counter((v * params.cols) >> 8 for v in range(256))
    ys = Counter((v * params.rows) >> 8 for v in range(256))
    uniform = [((tx, ty), xs[tx] * ys[ty] / 65536) for tx in xs for ty in ys]
    total = 0.0
    for (x, y) in params.pe_coords():
        if pattern == "uniform":
            dests = uniform
        elif pattern == "hotspot":
            dests = [(d, w * 0.75) for d, w in uniform] + \
                [((params.cols // 2, params.rows // 2), 0.25)]
        elif pattern == "transpose":
            dests = [((y, x), 1.0)]
        elif pattern == "bitcomp":
            dests = [((params.cols - 1 - x, params.rows - 1 - y), 1.0)]
        else:
            dests = [(((x + 1) % params.cols, y), 1.0)]
        total += sum(w * len(params.route((x, y), d)) for d, w in dests)
    return total / params.num_pes


def measure(rows, cols, pattern, rate, cycles, warmup=2000, depth=4, sim="verilator"):
    """Run one load point on the RTL; return a dict of rates and latencies."""

    params = ArrayParams(rows=rows, cols=cols)
    if pattern == "transpose" and rows != cols:
        raise FdpuError(f"pattern transpose needs a square array, not {rows}x{cols}")
    if not 0 < rate <= 1:
        raise FdpuError(f"--rate must be in (0, 1] flits/node/cycle, not {rate}")
    if cycles < 100 or warmup < 0:
        raise FdpuError(f"--cycles must be >= 100 and --warmup >= 0, not {cycles}/{warmup}")
    nodes = params.num_pes
    with tempfile.TemporaryDirectory(prefix="fdpu-noc-") as tmp:
        out = Path(tmp) / "counters.json"
        cfg = {"pattern": pattern, "rate": rate, "warmup": warmup, "measure": cycles,
               "out": str(out), "nodes": nodes, "bins": BINS}
        # Pattern and rate are inputs of the bench: every point of every sweep reuses one
        # build per (shape, depth, simulator).
        runner.run_cocotb(NocBench(params, depth), {}, "tb.noc.run_bench", sim,
                   name=f"noc_bench_{rows}x{cols}_d{depth}",
                   extra_env={"FDPU_BENCH": json.dumps(cfg)}, timeout_s=3600)
        counters = json.loads(out.read_text())
    ejected = sum(counters["ejected"])
    routers = mean_routers(params, pattern)
    hist = counters["hist"]
    sampled = sum(hist)
    p99 = None
    if sampled:
        need, seen = 0.99 * sampled, 0
        for b, count in enumerate(hist):
            seen += count
            if seen >= need:
                p99 = (b + 1) << BIN_SHIFT if b < BINS - 1 else None
                break
    return {
        "rows": rows, "cols": cols, "pattern": pattern, "depth": depth, "cycles": cycles,
        "offered": sum(counters["generated"]) / (nodes * cycles),
        "accepted": ejected / (nodes * cycles),
        # The slowest node's ejection rate: under transpose (a permutation) the slowest
        # source's throughput, which the XY bound (1/7 on 8 x 8) limits.
        "min_node_accepted": min(counters["ejected"]) / cycles,
        "avg_latency": sum(counters["latency"]) / ejected if ejected else None,
        "p99_latency": p99,
        "max_latency": max(counters["max_latency"]),
        # Zero-load latency is routers + 1: at low load this is 1.00 cycle per router.
        "mean_routers": routers,
        "cycles_per_router": (sum(counters["latency"]) / ejected - 1) / routers
        if ejected else None,
        "p99_samples": sampled,
        "p99_note": None if p99 is not None or not sampled else
        f"above {(BINS - 1) << BIN_SHIFT} cycles (histogram overflow)",
        "bad_flits": counters["bad"],
    }


def _plot(path, results, title):
    """Draw average and p99 latency against the offered load (matplotlib) into ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    xs = [r["offered"] for r in results]
    for key, label, colour in (("avg_latency", "average", "tab:red"),
                               ("p99_latency", "99th percentile", "tab:blue")):
        pts = [(x, r[key]) for x, r in zip(xs, results) if r[key] is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", color=colour, label=label)
    ax.set_xlabel("offered load, flits/node/cycle")
    ax.set_ylabel("network latency, cycles")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _line(r):
    p99 = r["p99_latency"] if r["p99_latency"] is not None else (r["p99_note"] or "-")
    avg = f"{r['avg_latency']:.2f}" if r["avg_latency"] is not None else "-"
    per = f"{r['cycles_per_router']:.2f}" if r["cycles_per_router"] is not None else "-"
    return (f"{r['rows']}x{r['cols']} {r['pattern']:9s} offered {r['offered']:.4f} "
            f"accepted {r['accepted']:.4f} (slowest node {r['min_node_accepted']:.4f}) "
            f"flits/node/cycle  latency avg {avg} "
            f"p99 {p99} cycles  ({per} per router of {r['mean_routers']:.2f})  "
            f"bad {r['bad_flits']}")


def check_args(args):
    """Refuse bad options before any simulation (the same rules :func:`measure` applies)."""
    with as_options("rows", "cols"):
        ArrayParams(rows=args.rows, cols=args.cols)
    if args.pattern == "transpose" and args.rows != args.cols:
        raise FdpuError(f"pattern transpose needs a square array, not {args.rows}x{args.cols}")
    if not 0 < args.rate <= 1:
        raise FdpuError(f"--rate must be in (0, 1] flits/node/cycle, not {args.rate}")
    if not 100 <= args.cycles <= MAX_CYCLES or not 0 <= args.warmup <= MAX_CYCLES:
        raise FdpuError(f"--cycles must be in 100..{MAX_CYCLES:,} and --warmup in "
                        f"0..{MAX_CYCLES:,} (the bench's cycle counters), not "
                        f"{args.cycles}/{args.warmup}")
    if not 2 <= args.depth <= 64:
        raise FdpuError(f"--depth must be in 2..64 flits (the routers' input FIFOs hold at "
                        f"least 2), got {args.depth}")
    if args.points != 10 and not args.sweep:
        raise FdpuError("--points sets the points of a --sweep; give --sweep PNG")
    if not 1 <= args.points <= 100:
        raise FdpuError(f"--points must be in 1..100, got {args.points}")
    check_outputs([("--json", args.json), ("--sweep", args.sweep)])


def run(args):
    """Run ``fdpu noc-bench``."""
    check_args(args)
    if args.sweep:
        rates = [round(args.rate * (k + 1) / args.points, 4) for k in range(args.points)] \
            if args.rate < 1 else [round((k + 1) / args.points * 0.6, 4)
                                   for k in range(args.points)]
        results = []
        for rate in rates:
            r = measure(args.rows, args.cols, args.pattern, rate, args.cycles, args.warmup,
                        args.depth, args.sim)
            print(_line(r), flush=True)
            results.append(r)
        _plot(args.sweep, results, f"{args.rows} x {args.cols} mesh, {args.pattern} traffic, "
                                   f"depth {args.depth} ({args.sim})")
        print(f"latency (red: average, blue: p99) vs offered load: {args.sweep}")
        saturation = max(r["accepted"] for r in results)
        print(f"saturation (max accepted): {saturation:.4f} flits/node/cycle")
        payload = {"points": results, "saturation": saturation}
    else:
        payload = measure(args.rows, args.cols, args.pattern, args.rate, args.cycles,
                          args.warmup, args.depth, args.sim)
        print(_line(payload))
    if args.json:
        write_json(args.json, payload)
    bad = payload["bad_flits"] if not args.sweep else sum(r["bad_flits"] for r in results)
    return 1 if bad else 0
