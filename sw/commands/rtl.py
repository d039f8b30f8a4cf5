"""``fdpu rtl``: run an FC layer on the generated RTL and check it bit for bit against the golden
model.

``fdpu rtl --sim icarus|verilator`` takes the layer options of ``fdpu run`` (``--layer``,
``--in-features/--out-features``, ``--weights``, ``--inputs``, ``--density``, ``--batch``,
``--mode``, ``--rows``, ``--cols``, ``--seed``) plus ``--slots``, ``--dbuf-bytes``,
``--max-cycles``, ``--waves`` and ``--json``.  It plans and assembles the layer as the golden
model does, runs every pass's image on the top (:func:`sw.runtime.run_fc_rtl`), runs the same
images on the golden model's exact interpreter, and prints: match (bit for bit); cycles;
utilization (floating-point operations executed / (peak per cycle x cycles)) and the
dense-equivalent utilization (2 K C N / (peak x cycles)); external bytes (Dbuf contents loaded
plus results read back) and the bandwidth that needs at this speed; a per-PE busy map.  Exit
status 0 on a bit-exact match, 1 on a mismatch, 2 for bad input or an RTL error/timeout.
"""

import sys
import time

import numpy as np
from rich.table import Table

from .. import golden, graphs, runtime
from ..arch import ArrayParams
from ..errors import FdpuError
from .fdcsr import console, write_json
from .run import add_layer_args, resolve

#: Floating-point operations per firing (4 lanes; FMA = 2 operations per lane).
FLOPS = {"FACC": 8, "FMADD": 8, "FMUL": 4, "FADD": 4, "FSUB": 4}


def register(subparsers):
    """Add the ``rtl`` command."""
    parser = subparsers.add_parser(
        "rtl", help="run an FC layer on the RTL (Icarus/Verilator), check it against the golden "
                    "model",
        description="Build, map and assemble an FC layer, run it on the generated Verilog of the "
                    "FDPU top and compare the result bit for bit with the golden model.")
    parser.add_argument("--sim", choices=("icarus", "verilator"), default="verilator",
                        help="HDL simulator (default verilator)")
    add_layer_args(parser)
    add_hw_args(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="Y.npy", help="write the N x K binary16 result")
    out.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.set_defaults(func=run_rtl_command)


def add_hw_args(parser):
    """Add the RTL options (``--slots``, ``--dbuf-bytes``, ``--max-cycles``, ``--waves``)."""
    hw = parser.add_argument_group("hardware (RTL simulators)")
    hw.add_argument("--slots", type=int, default=64, help="instruction slots per PE (default 64)")
    hw.add_argument("--dbuf-bytes", type=int, default=1 << 21,
                    help="bytes per Dbuf (default 2 MiB)")
    hw.add_argument("--max-cycles", type=int, metavar="N",
                    help="cycle bound per pass (default 200k + 2k per context)")
    hw.add_argument("--waves", action="store_true", help="record a waveform (FST)")


def run_rtl_command(args):
    """Run the layer on the RTL; return 0 on a bit-exact match with the golden model."""
    name, w, x, base = resolve(args)
    params = ArrayParams(rows=base.rows, cols=base.cols, slots=args.slots,
                         dbuf_bytes=args.dbuf_bytes)
    plan = graphs.plan_fc(w.shape[0], w.shape[1], x.shape[0], args.mode, params)
    t0 = time.perf_counter()
    ref = golden.run_fc(plan, w, x, exact=True)
    golden_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    y, runs = runtime.run_fc_rtl(plan, w, x, args.sim, max_cycles=args.max_cycles,
                                 waves=args.waves)
    rtl_s = time.perf_counter() - t0
    rec = figures(plan, w, x, ref, y, runs)
    rec.update(sim=args.sim, layer=name, golden_s=golden_s, rtl_s=rtl_s,
               waves=[r.waves for r in runs if r.waves])
    table = Table(title=f"fdpu rtl --sim {args.sim}: {name} ({plan.mode}, batch {plan.N}, "
                        f"{params.rows}x{params.cols} PEs)", title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("match (bit for bit with the golden model)",
                  "yes" if rec["match"] else f"NO ({rec['mismatches']} outputs)")
    table.add_row("passes / contexts", f"{plan.passes} / {plan.contexts}")
    table.add_row("cycles", f"{rec['cycles']:,}")
    table.add_row("instructions fired (RTL / golden)",
                  f"{rec['rtl_instructions']:,} / {rec['golden_instructions']:,}")
    table.add_row("FP utilization (ops / peak)", f"{rec['utilization']:.2%}")
    table.add_row("dense-equivalent utilization", f"{rec['dense_utilization']:.2%}")
    table.add_row("external bytes (loaded + read back)", f"{rec['external_bytes']:,}")
    table.add_row("bandwidth needed at this speed", f"{rec['bytes_per_cycle']:.2f} B/cycle")
    table.add_row("Dbuf requests / mesh flits", f"{rec['dbuf_requests']:,} / "
                                                f"{rec['mesh_flits']:,}")
    table.add_row("wall: golden / RTL", f"{golden_s:.1f} s / {rtl_s:.1f} s")
    console().print(table)
    console().print("per-PE busy (instructions fired / cycles), row by row:")
    for row in rec["busy_map"]:
        console().print("  " + " ".join(f"{b:5.1%}" for b in row))
    if args.out:
        with open(args.out, "wb") as f:
            np.save(f, y)
    if args.json:
        write_json(args.json, rec)
    if not rec["match"]:
        print(f"fdpu rtl: the RTL result differs from the golden model in "
              f"{rec['mismatches']} outputs", file=sys.stderr)
        return 1
    return 0


def figures(plan, w, x, ref, y, runs):
    """Return the JSON-friendly figures of an RTL run against its golden run ``ref``."""
    p = plan.params
    cycles = sum(r.cycles for r in runs)
    diff = y.view(np.uint16) != ref.result.view(np.uint16)
    flops = sum(FLOPS.get(op, 0) * n for op, n in ref.counters.ops.items())
    peak = p.num_pes * p.LANES * 2
    busy = np.zeros(p.num_pes)
    rtl_insns = 0
    for r in runs:
        fires = np.array(r.status["int_fires"]) + np.array(r.status["fp_fires"])
        busy += fires
        rtl_insns += int(fires.sum())
    ext = sum(len(b) for b in _segments_bytes(plan, w, x)) + plan.N * plan.K * 2
    return dict(
        match=not diff.any(), mismatches=int(diff.sum()), K=plan.K, C=plan.C, N=plan.N,
        mode=plan.mode, rows=p.rows, cols=p.cols, slots=p.slots, passes=plan.passes,
        contexts=plan.contexts, cycles=cycles, pass_cycles=[r.cycles for r in runs],
        flops=flops, utilization=flops / max(1, peak * cycles),
        dense_utilization=2 * plan.K * plan.C * plan.N / max(1, peak * cycles),
        rtl_instructions=rtl_insns, golden_instructions=ref.counters.instructions,
        external_bytes=ext, bytes_per_cycle=ext / max(1, cycles),
        dbuf_requests=sum(r.status["o_dbuf_reqs"] for r in runs),
        mesh_flits=sum(r.status["o_mesh_flits"] for r in runs),
        busy_map=(busy / max(1, cycles)).reshape(p.rows, p.cols).tolist(),
        golden_counters=ref.counters.as_dict())


def _segments_bytes(plan, w, x):
    for p in range(plan.passes):
        segments, _ = graphs.pass_memory(plan, np.asarray(w, np.float16),
                                         np.asarray(x, np.float16), p)
        yield from segments.values()
