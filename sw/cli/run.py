"""``fdpu run``: run an FC layer on a simulator and check it against the float64 reference.

``fdpu run [--sim golden] (--layer NAME | --in-features C --out-features K | --weights W.npy)
[--inputs X.npy] [--bias B.npy] [--relu] [--density D] [--batch N] [--mode dense|sparse]
[--rows R --cols C]
[--seed S] [--engine auto|exact|fast] [--order-seed S] [--out Y.npy] [--json PATH]``

Weights come from ``--weights`` (``K x C``) or are the seeded synthetic weights of the zoo
layer or shape, pruned to ``--density`` (default: the layer's; 1.0 for a shape; user weights
are pruned only when ``--density`` is given).  Inputs come from ``--inputs`` (``N x C``) or are
seeded synthetic post-ReLU activations of ``--batch`` rows.  ``--bias`` (a length-``K`` vector)
and ``--relu`` add the epilogue ``y = relu(acc + b)``, computed on the array after each
output's accumulation.  ``--engine exact`` runs the
assembled images token by token (:func:`sw.models.golden.run_image`), ``fast`` the vectorized path,
``auto`` the exact one for small layers.  The result is compared with the float64 reference
within the bound of :mod:`sw.models.reference`; the exit status is 0 when it holds, 1 when not, 2
for bad input.  ``--sim icarus|verilator`` runs the same layer on the generated RTL and compares
it bit for bit with the golden model (:mod:`sw.cli.rtl`).
"""

import sys
import time

import numpy as np
from rich.table import Table

from sw.cli.options import (add_hw_args, add_layer_args, array_params, check_layer_options,
                            conv_record, graph_name, plan_layer, plan_options, resolve,
                            system_of)
from sw.cli.output import check_outputs, console, progress_bar, save_npy, write_json
from sw.cli import model, rtl
from sw.compiler import balance
from sw.compiler.graph_kinds import graph_kind
from sw.models import golden_fc, reference
from sw.spec.errors import FdpuError

def register(subparsers):
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run", help="run an FC layer on the golden model or the RTL and check it",
        description="Build the dense or sparse FC graph of a layer, map and assemble it, run "
                    "it on a simulator and check the binary16 result against a float64 "
                    "reference within a documented error bound (docs/golden.md).")
    parser.add_argument("--sim", choices=("golden", "icarus", "verilator", "model"),
                        default="golden",
                        help="golden: the golden model (default); icarus, verilator: the "
                             "generated RTL of the FDPU top, checked bit for bit against the "
                             "golden model (the same run as 'fdpu rtl'); model: the "
                             "performance model's cycles, utilization and external bytes, in "
                             "about a second (no result; docs/perf.md)")
    add_layer_args(parser)
    add_hw_args(parser)
    rtl.add_checkpoint_args(parser)
    run = parser.add_argument_group("golden model")
    run.add_argument("--engine", choices=golden_fc.ENGINES, default="auto",
                     help="exact: token-by-token interpreter of the image; fast: vectorized, "
                          "same bits and counts; auto: exact for small layers (default)")
    run.add_argument("--order-seed", type=int, metavar="S",
                     help="seed of the exact engine's delivery-order randomizer")
    run.add_argument("--no-feedback", action="store_true",
                     help="drop the SWITCH feedback edges (sparse, exact engine): shows the "
                          "context-order error of PAPER.md Fig. 7")
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="Y.npy", help="write the N x K binary16 result")
    out.add_argument("--json", metavar="PATH",
                     help="write match, instruction counts, bytes and tokens as JSON")
    parser.set_defaults(func=run_command)


def check_options(args):
    """Refuse, before any work, options that do not go together or values out of range (what
    can be checked without the weights); :func:`run_command` and ``fdpu sweep`` call it."""
    if args.sim == "model":
        model.check_model_options(args)
    elif args.sim != "golden":
        if args.max_cycles is not None and args.max_cycles < 1:
            raise FdpuError(f"--max-cycles must be a positive number of cycles per pass, got "
                            f"{args.max_cycles}")
        rtl.check_checkpoint_args(args)
        golden_only = [flag for flag, given in (
            ("--engine", args.engine != "auto"), ("--order-seed", args.order_seed is not None),
            ("--no-feedback", args.no_feedback)) if given]
        if golden_only:
            raise FdpuError(f"{', '.join(golden_only)} "
                            f"{'applies' if len(golden_only) == 1 else 'apply'} to --sim golden "
                            f"only, not --sim {args.sim}")
    else:
        if args.golden != "auto":
            raise FdpuError("--golden chooses the reference of an RTL run (--sim "
                            "icarus|verilator); with --sim golden use --engine")
        rtl_only = [flag for flag, given in (("--max-cycles", args.max_cycles is not None),
                                             ("--waves", args.waves),
                                             ("--checkpoint", args.checkpoint is not None),
                                             ("--segment-passes",
                                              args.segment_passes is not None)) if given]
        if rtl_only:
            raise FdpuError(f"{', '.join(rtl_only)} {'applies' if len(rtl_only) == 1 else 'apply'}"
                            f" to an RTL simulation (--sim icarus|verilator), not to --sim "
                            f"golden")
    if args.order_seed is not None and args.order_seed < 0:
        raise FdpuError(f"--order-seed must be a non-negative integer, got {args.order_seed}")
    if args.no_feedback and args.mode != "sparse":
        raise FdpuError("--no-feedback applies to --mode sparse only")
    if args.no_feedback and not graph_kind(args.mode, args.sparse_graph).has_feedback:
        raise FdpuError("--no-feedback drops the SWITCH graph's feedback edges: it needs "
                        "--sparse-graph switch (the gather graph, the default, has no SWITCH)")
    check_layer_options(args)
    params = array_params(args)
    system_of(args, params)
    plan_options(args, feedback=not args.no_feedback)


def run_command(args):
    """Run the layer; return 0 if the result is within the bound, 1 if not."""
    check_options(args)
    check_outputs([("--out", args.out), ("--json", args.json)],
                  [("--weights", args.weights), ("--inputs", args.inputs),
                   ("--bias", args.bias)])
    if args.sim == "model":
        return model.run_model_command(args)
    if args.sim != "golden":
        return rtl.run_rtl_command(args)
    name, w, x, params = resolve(args)
    plan = plan_layer(args, w, x, params, feedback=not args.no_feedback)
    size = plan.K * plan.Cw * plan.groups
    exact = golden_fc.exact_for(args.engine, plan)
    if args.no_feedback and not exact:
        raise FdpuError("--no-feedback needs --engine exact (the fast path cannot misorder)")
    if args.order_seed is not None and not exact:
        how = "--engine fast" if args.engine == "fast" else (
            f"--engine auto, which takes the fast path for this layer ({size:,} weight-lane-"
            f"group products > {golden_fc.EXACT_LIMIT:,})")
        raise FdpuError(f"--order-seed seeds the exact engine's delivery order; it has no effect "
                        f"with {how}: give --engine exact")
    start = time.perf_counter()
    with progress_bar("golden model", "passes" if exact else "input columns") as show:
        res = golden_fc.run_fc(plan, w, x, exact=exact, seed=args.order_seed,
                               validate=not args.no_feedback, progress=show)
    seconds = time.perf_counter() - start
    chk = reference.check(res.result, w, x, mu=res.running, steps=plan.Cw, bias=plan.bias,
                          relu=plan.relu)
    c = res.counters
    weights = plan.K * plan.C
    record = dict(sim="golden", engine="exact" if exact else "fast", layer=name,
                  K=plan.K, C=plan.C, N=plan.N, mode=plan.mode, rows=params.rows,
                  cols=params.cols, slots=params.slots, int_issue=params.int_issue,
                  nnz=int(np.count_nonzero(w.view(np.uint16))),
                  plan=plan.describe(), graph=graph_name(plan),
                  load_balance=balance.load_balance(plan, w),
                  match=chk.holds, check=chk.as_dict(),
                  counters=c.as_dict(), instructions_per_weight=c.instructions / weights,
                  seconds=seconds)
    note = conv_record(args, record, plan.N, system_of(args, params))
    table = Table(title=f"fdpu run --sim golden: {name} ({plan.mode}, batch {plan.N}, "
                        f"{params.rows}x{params.cols} PEs)", title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("engine", record["engine"])
    table.add_row("graph", record["graph"])
    table.add_row("weights K x C", f"{plan.K} x {plan.C} ({record['nnz']:,} non-zero)")
    table.add_row("blocking kb x gb", f"{plan.kb} rows x {plan.gb} lane groups")
    table.add_row("engines / contexts / passes",
                  f"{plan.engines} / {plan.contexts} / {plan.passes}"
                  + (f" ({plan.chunks} contexts an item, streamed)" if plan.chunks > 1 else ""))
    table.add_row("load balance (engines' mean / max FACC steps)",
                  f"{record['load_balance']:.3f}")
    table.add_row("match (error bound holds)", "yes" if chk.holds else
                  f"NO ({chk.failures} outputs)")
    table.add_row("max |error| / max bound", f"{chk.max_error:.3g} / {chk.max_bound:.3g}")
    table.add_row("instructions", f"{c.instructions:,}")
    table.add_row("instructions per weight", f"{record['instructions_per_weight']:.2f}")
    for op, n in sorted(c.ops.items(), key=lambda kv: -kv[1]):
        table.add_row(f"  {op}", f"{n:,}")
    table.add_row("tokens PE-local / mesh", f"{c.tokens_local:,} / {c.tokens_mesh:,}")
    table.add_row("memory packets / hops", f"{c.mem_packets:,} / {c.mem_hops:,}")
    table.add_row("Dbuf bytes loaded / stored", f"{c.bytes_read:,} / {c.bytes_written:,}")
    table.add_row("golden model time", f"{seconds:.2f} s")
    console().print(table)
    if note:
        console().print(note)
    console().print("cycles, utilization and external bytes: fdpu run --sim model (the "
                    "performance model) or --sim verilator (the RTL)")
    if args.out:
        save_npy(args.out, res.result)
    if args.json:
        write_json(args.json, record)
    if not chk.holds:
        print(f"fdpu run: result is NOT within the error bound ({chk.failures} outputs)",
              file=sys.stderr)
        return 1
    return 0
