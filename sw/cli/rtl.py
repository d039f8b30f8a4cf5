"""``fdpu rtl``: run an FC layer on the generated RTL and check it bit for bit against the golden
model.

``fdpu rtl --sim icarus|verilator`` takes the layer options of ``fdpu run`` (``--layer``,
``--in-features/--out-features``, ``--weights``, ``--inputs``, ``--density``, ``--batch``,
``--mode``, ``--rows``, ``--cols``, ``--seed``) plus ``--slots``, ``--dbuf-bytes``,
``--max-cycles``, ``--mem-latency``, ``--mem-bandwidth``, ``--dma-channels``,
``--config-ports``, ``--[no-]overlap``, ``--waves``, ``--checkpoint``, ``--segment-passes``
and ``--json``.  It plans
and assembles the layer as the golden model does, runs every pass in ONE simulation of the top
with its external memory (:func:`tb.host.runtime.run_fc_rtl`: per pass DMA in, compute, DMA out;
a progress bar per pass), runs the same images on the golden model's exact interpreter, and
prints: match (bit for bit); cycles (end to end; compute = configuration + contexts; DMA
in + out; with ``--overlap``, the default, the configuration runs behind the DMA-in, so the
end-to-end cycles are less than their sum: the table shows how much configuration the DMA-in
hid and how long the configured array waited for it); utilization (floating-point
operations executed / (peak per cycle x compute cycles)), the dense-equivalent utilization
(2 K C N / (peak x compute cycles)) and the end-to-end one (all cycles); external bytes the
DMA read and wrote, the peak bandwidth requirement
(:attr:`tb.host.run_results.JobRun.peak_bandwidth`) and the DMA's achieved bandwidth; a per-PE
busy map.  Exit status 0 on a bit-exact match, 1 on a mismatch, 2 for bad input or an RTL
error/timeout.

``--checkpoint DIR`` makes a long run resumable: the passes run in segments of
``--segment-passes`` (one simulation each), each finished segment is kept in ``DIR``, and the
same command run again simulates only the segments ``DIR`` does not hold
(:mod:`tb.host.checkpoint`, docs/system.md).
"""

import os
import sys
import time

from rich.table import Table

from sw.cli.options import add_hw_args, add_layer_args, conv_record, plan_run, resolve
from sw.cli.output import (BOUND_ROW, Bars, bound_text, check_outputs, console, save_npy,
                           write_json)
from sw.runtime import layer
from sw.runtime.layer import RtlOptions
from sw.spec.errors import FdpuError
from sw.spec.system import SIMULATORS
from tb.host.job_plan import MemModel


def register(subparsers):
    """Add the ``rtl`` command."""
    parser = subparsers.add_parser(
        "rtl", help="run an FC layer on the RTL (Icarus/Verilator), check it against the golden "
                    "model",
        description="Build, map and assemble an FC layer, run it on the generated Verilog of the "
                    "FDPU top and compare the result bit for bit with the golden model.")
    parser.add_argument("--sim", choices=SIMULATORS, default="verilator",
                        help="HDL simulator (default verilator)")
    add_layer_args(parser)
    add_hw_args(parser)
    add_checkpoint_args(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="Y.npy", help="write the N x K binary16 result")
    out.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.set_defaults(func=run_rtl_command)


def add_checkpoint_args(parser):
    """Add ``--checkpoint`` and ``--segment-passes`` (``fdpu rtl``, ``fdpu run``)."""
    grp = parser.add_argument_group("resumable runs (RTL)")
    grp.add_argument("--checkpoint", metavar="DIR",
                     help="run the passes in segments, one simulation each, keep each finished "
                          "segment in DIR and, run again with the same DIR, simulate only the "
                          "segments it does not hold (a stopped run resumes; docs/system.md)")
    grp.add_argument("--segment-passes", type=int, metavar="N",
                     help="passes per segment with --checkpoint (default: 1 where segments "
                          "give the cycles of a run straight through, else the whole layer as "
                          "one segment: a double-buffered layer, a memory below 8 B/cycle; N "
                          "splits anyway, its cycles then differ)")


def check_checkpoint_args(args):
    """Refuse a bad ``--checkpoint``/``--segment-passes`` before any work."""
    checkpoint = getattr(args, "checkpoint", None)
    segment = getattr(args, "segment_passes", None)
    if segment is not None and checkpoint is None:
        raise FdpuError("--segment-passes applies with --checkpoint DIR only")
    if segment is not None and segment < 1:
        raise FdpuError(f"--segment-passes must be a positive number of passes, got {segment}")
    if checkpoint is not None and os.path.exists(checkpoint) and not os.path.isdir(checkpoint):
        raise FdpuError(f"--checkpoint {checkpoint}: exists and is not a directory (give a "
                        f"directory, new or kept by an earlier run)")


def rtl_options(args):
    """Return the :class:`~sw.runtime.layer.RtlOptions` of the simulation options."""
    return RtlOptions(max_cycles=args.max_cycles, waves=args.waves,
                      checkpoint=getattr(args, "checkpoint", None),
                      segment_passes=getattr(args, "segment_passes", None))


def run_rtl_command(args):
    """Run the layer on the RTL; return 0 on a bit-exact match with the golden model."""
    check_outputs([("--out", args.out), ("--json", args.json)],
                  [("--weights", args.weights), ("--inputs", args.inputs),
                   ("--bias", args.bias)])
    if args.max_cycles is not None and args.max_cycles < 1:
        raise FdpuError(f"--max-cycles must be a positive number of cycles per pass, got "
                        f"{args.max_cycles}")
    check_checkpoint_args(args)
    name, w, x, params = resolve(args)
    # The memory's registers, then the system: bad values fail before anything runs.
    MemModel(latency=args.mem_latency, bandwidth=args.mem_bandwidth).registers()
    plan, system = plan_run(args, w, x, params)
    t0 = time.perf_counter()
    ref, exact = layer.golden(plan, w, x, args.golden, reporter=Bars())
    golden_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    y, job = layer.simulate(plan, w, x, args.sim, system, rtl_options(args), reporter=Bars())
    rtl_s = time.perf_counter() - t0
    rec = layer.rtl_figures(plan, w, x, ref, y, job, system)
    rec.update(sim=args.sim, layer=name, golden="exact" if exact else "fast",
               golden_s=golden_s, rtl_s=rtl_s, waves=job.waves,
               mem_latency=system.mem_latency, mem_bandwidth=system.mem_bandwidth,
               dma_channels=system.dma_channels, config_ports=system.config_ports,
               overlap=system.overlap, early_start=system.early_start,
               edge_multicast=system.edge_multicast, config_spans=system.config_spans,
               build_s=job.wall_s["build_s"], sim_s=job.wall_s["run_s"],
               cycles_per_s=job.cycles / max(1e-9, job.wall_s["run_s"]),
               segments=job.wall_s.get("segments", 1), resumed=job.wall_s.get("resumed", 0))
    note = conv_record(args, rec, plan.N, system)
    table = Table(title=f"fdpu rtl --sim {args.sim}: {name} ({plan.mode}, batch {plan.N}, "
                        f"{params.rows}x{params.cols} PEs)", title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("match (bit for bit with the golden model)",
                  "yes" if rec["match"] else f"NO ({rec['mismatches']} outputs)")
    table.add_row("graph / blocking kb x gb", f"{rec['graph']} / {plan.kb} x {plan.gb}")
    table.add_row("passes / contexts", f"{plan.passes} / {plan.contexts}"
                  + (f" x {plan.chunks} (streamed)" if plan.chunks > 1 else "")
                  + (" (double-buffered)" if plan.double_buffer else "")
                  + (", inputs by edge multicast" if rec["edge_multicast"] else ""))
    table.add_row("load balance (engines' mean / max FACC steps)",
                  f"{rec['load_balance']:.3f}")
    table.add_row("cycles: end to end / compute (configuration + contexts) / DMA (in + out)",
                  f"{rec['cycles']:,} / {rec['compute_cycles']:,} / {rec['dma_cycles']:,}")
    table.add_row("instructions fired (RTL / golden)",
                  f"{rec['rtl_instructions']:,} / {rec['golden_instructions']:,}")
    table.add_row("utilization (useful multiply-adds / peak, compute cycles)",
                  f"{rec['utilization']:.2%}")
    table.add_row("FP issue utilization (FP operations issued, padding included / peak)",
                  f"{rec['issue_utilization']:.2%}")
    table.add_row("  of which configuring the PEs / running contexts",
                  f"{rec['config_cycles']:,} / {rec['context_cycles']:,} cycles")
    table.add_row(f"configuration hidden behind the DMA-in / exposed ({rec['config_ports']} "
                  f"port{'s' if rec['config_ports'] > 1 else ''})",
                  f"{rec['config_hidden_cycles']:,} / {rec['config_exposed_cycles']:,} cycles")
    if rec["overlap"]:
        table.add_row("configured array waiting for the DMA-in (not compute)"
                      + (", each context started when its data were in (--early-start)"
                         if rec["early_start"] else ""),
                      f"{rec['hold_cycles']:,} cycles")
    if rec["early_start"] and not plan.double_buffer:
        started = sum(r["started_in"] or 0 for r in rec["pass_cycles"])
        table.add_row("contexts started before their pass's DMA-in ended (+ at most 1 a pass)",
                      f"{started:,} of "
                      f"{sum(plan.pass_micc_contexts(p) for p in range(plan.passes)):,}")
    if plan.double_buffer:
        pc = rec["pass_cycles"]
        table.add_row("DMA behind other passes' contexts: in / out (of all DMA)",
                      f"{sum(r['in_hidden'] for r in pc):,} / "
                      f"{sum(r['out_hidden'] for r in pc):,} (of {rec['dma_cycles']:,}) cycles")
    table.add_row("utilization of the contexts (after configuration)",
                  f"{rec['utilization_contexts']:.2%}")
    table.add_row("dense-equivalent utilization (2 K C N / peak)",
                  f"{rec['dense_utilization']:.2%}")
    table.add_row("utilization end to end (with DMA)", f"{rec['utilization_end_to_end']:.2%}")
    table.add_row(BOUND_ROW, bound_text(rec))
    table.add_row("external bytes read / written (DMA)",
                  f"{rec['ext_read_bytes']:,} / {rec['ext_write_bytes']:,}")
    table.add_row("external bytes: the layer's minimum (weights, sparse: values + 1-bit mask; "
                  "inputs; outputs)", f"{rec['min_external_bytes']:,} "
                  f"({rec['external_bytes'] / max(1, rec['min_external_bytes']):.2f} x)")
    table.add_row("peak bandwidth requirement", f"{rec['peak_bandwidth']:.2f} B/cycle")
    table.add_row("DMA bandwidth achieved", f"{rec['dma_bandwidth']:.2f} B/cycle")
    table.add_row("simulation speed", f"{rec['cycles_per_s']:,.0f} cycles/s "
                                      f"(build {rec['build_s']:.0f} s)")
    table.add_row("Dbuf requests / mesh flits", f"{rec['dbuf_requests']:,} / "
                                                f"{rec['mesh_flits']:,}")
    table.add_row(f"wall: golden ({rec['golden']}) / RTL", f"{golden_s:.1f} s / {rtl_s:.1f} s")
    if getattr(args, "checkpoint", None) is not None:
        whole = rec["segments"] == 1 and plan.passes > 1
        table.add_row("segments: simulated / loaded from --checkpoint"
                      + (" (the whole layer: its passes overlap or the memory is below 8 "
                         "B/cycle; --segment-passes splits anyway)" if whole else ""),
                      f"{rec['segments'] - rec['resumed']} / {rec['resumed']}")
    console().print(table)
    if note:
        console().print(note)
    console().print("per-PE busy (instructions fired / cycles), row by row:")
    for row in rec["busy_map"]:
        console().print("  " + " ".join(f"{b:5.1%}" for b in row))
    if args.out:
        save_npy(args.out, y)
    if args.json:
        write_json(args.json, rec)
    if not rec["match"]:
        print(f"fdpu rtl: the RTL result differs from the golden model in "
              f"{rec['mismatches']} outputs", file=sys.stderr)
        return 1
    return 0
