"""Print the PE microbenchmarks and the FC layers' cycles per FACC on one PE.

Usage: ``.venv/bin/python scripts/bench_pe.py [--sim icarus|verilator] [--fc-only]
[--int-issue 1|2] [--slots N] [--layer K,C,N] [--sparse-graph gather|switch] [--seed N] [--diag]
[--json FILE]``

Runs ``tb.pe.bench_micro`` on the generated Verilog of one PE (1 x 1 array parameters, 32
slots) and prints the figures that ``docs/pe.md`` quotes: issue rates, FMADD/FACC
throughput, dependent-pair latencies.  Then runs two FC images of the golden-model
toolchain (a ``4 x 32`` layer at batch 8, dense and sparse: the default gather graph or the
paper's SWITCH graph) through ``tb.pe.bench_pe`` with
no idle or backpressure (Dbuf latency 2..30 cycles) and prints the cycles per FACC, where
one FACC is one SIMD-4 multiply-add (8 flop).  Nothing is asserted.
"""

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from sw.compiler import fc_plan
from tb.host.runner import run_cocotb
from tb.pe import cases
from tb.pe.cases import PARAMS_1X1, top_params

#: The FC layer of the benchmark: ``k x c`` weights, batch ``n``.
FC_LAYER = (4, 32, 8)


def micro(sim, tmp):
    """Run the microbenchmarks; return their figures."""
    path = Path(tmp) / "bench.json"
    run_cocotb("pe", top_params(PARAMS_1X1), "tb.pe.bench_micro", sim,
               extra_env={"FDPU_PE_BENCH_OUT": str(path)})
    return json.loads(path.read_text())


def fc(sim, tmp, int_issue=1, seed=20261130, slots=None, layer=FC_LAYER, probe=False,
       depth=None, pool=32, sparse_graph=fc_plan.DEFAULT_SPARSE_GRAPH):
    """Run the dense and sparse FC images; return ``{mode: {cycles, facc, ...}}``.

    ``slots`` overrides the PE's slots (default: the tests' 32), ``layer`` is ``(k, c, n)``;
    ``probe`` adds the per-cycle stall counts of :class:`tb.pe.probe.StallProbe`; ``depth``
    overrides the operand FIFO depth, ``pool`` sets the reorder pool entries,
    ``sparse_graph`` is the sparse image's graph (``sw.compiler.fc_plan.SPARSE_GRAPHS``).
    """
    k, c, n = layer
    p = dataclasses.replace(PARAMS_1X1, int_issue=int_issue,
                            **({"slots": slots, "dbuf_bytes": 1 << 16} if slots else {}),
                            **({"operand_depth": depth} if depth else {}))
    folders = [str(cases.save_case(Path(tmp) / mode,
                                   cases.fc_image(mode, k, c, n, p, seed,
                                                  sparse_graph=sparse_graph),
                                   f"fc-{mode}"))
               for mode in ("dense", "sparse")]
    out = Path(tmp) / "fc.json"
    run_cocotb("pe", dict(top_params(p), pool=pool), "tb.pe.bench_pe", sim,
               testcase="golden_images",
               extra_env={"FDPU_PE_CASES": json.dumps(folders), "FDPU_PE_STRESS": "0,0",
                          "FDPU_PE_RESULTS": str(out), "FDPU_PE_PROBE": "1" if probe else "0"},
               seed=seed, timeout_s=3600)
    res = {}
    for case in json.loads(out.read_text()):
        facc = case["ops"].get("FACC", 0)
        res[case["name"]] = dict(cycles=case["cycles"], facc=facc,
                                 facc_per_cycle=facc / case["cycles"],
                                 int_fired=sum(v for op, v in case["ops"].items()
                                               if op not in ("FACC", "FIMM", "FMUL", "FMADD",
                                                             "FADD", "FSUB", "FMAX")))
        if "stalls" in case:
            res[case["name"]]["stalls"] = case["stalls"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="icarus", choices=["icarus", "verilator"])
    ap.add_argument("--fc-only", action="store_true", help="only the FC cycles per FACC")
    ap.add_argument("--int-issue", type=int, default=1, choices=[1, 2],
                    help="INT/CTRL issues per cycle of the PE running the FC layers")
    ap.add_argument("--slots", type=int, help="slots of the FC runs' PE (default 32)")
    ap.add_argument("--layer", default=",".join(map(str, FC_LAYER)),
                    help="the FC layer K,C,N (default %(default)s)")
    ap.add_argument("--depth", type=int, help="operand FIFO depth (default 4)")
    ap.add_argument("--pool", type=int, default=32, help="reorder pool entries (default 32)")
    ap.add_argument("--diag", action="store_true",
                    help="count FP-pipe and memory-lane stall reasons per cycle (slow)")
    ap.add_argument("--seed", type=int, default=20261130,
                    help="seed of the FC layers' data and the Dbuf latencies (default %(default)s)")
    ap.add_argument("--sparse-graph", default=fc_plan.DEFAULT_SPARSE_GRAPH,
                    choices=fc_plan.SPARSE_GRAPHS,
                    help="the sparse FC image's graph (default: the gather graph)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = {} if args.fc_only else micro(args.sim, tmp)
        layer = tuple(int(v) for v in args.layer.split(","))
        res["fc"] = fc(args.sim, tmp, args.int_issue, seed=args.seed, slots=args.slots,
                       layer=layer, probe=args.diag, depth=args.depth, pool=args.pool,
                       sparse_graph=args.sparse_graph)
    print(f"\nPE microbenchmarks ({args.sim}, {PARAMS_1X1.slots} slots, operand depth "
          f"{PARAMS_1X1.operand_depth}); rates in instructions per cycle")
    if not args.fc_only:
        for name in ("issue_int", "issue_fp", "issue_dual"):
            rates = res[name]
            print(f"  {name:22s} " + ", ".join(f"{k} {v:.2f}" for k, v in rates.items())
                  + f"  (total {sum(rates.values()):.2f})")
        for name, v in res.items():
            if name.startswith(("fmadd", "facc")):
                key = "fmadd_per_cycle" if name.startswith("fmadd") else "facc_per_cycle"
                print(f"  {name:22s} {v[key]:.2f} per cycle = {v['flops_per_cycle']:.1f} "
                      f"flop/cycle")
        for name in ("pair_int", "pair_fp"):
            v = res[name]
            print(f"  {name:22s} same PE: fire -> dependent fire {v['fire_to_dependent_fire']} "
                  f"cycles; one hop: {v['one_hop_pair']} cycles (fire -> flit out "
                  f"{v['fire_to_flit_out']}, mesh 2, flit in -> fire {v['flit_in_to_fire']})")
    k, c, n = layer
    print(f"FC layer {k} x {c}, batch {n}, on one PE with int_issue {args.int_issue}, "
          f"{args.slots or PARAMS_1X1.slots} slots, sparse: the {args.sparse_graph} graph "
          f"(incl. configuration):")
    for name, v in res["fc"].items():
        print(f"  {name:22s} {v['facc']} FACC in {v['cycles']} cycles = "
              f"{v['facc_per_cycle']:.3f} FACC/cycle ({v['int_fired']} INT/MEM firings)")
        if "stalls" in v:
            print("    stalls: " + ", ".join(f"{a} {b}" for a, b in sorted(v["stalls"].items())))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
