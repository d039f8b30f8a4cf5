"""Print the PE microbenchmarks: issue rate, FMADD/FACC throughput, dependent-pair latency.

Usage: ``.venv/bin/python scripts/bench_pe.py [--sim icarus|verilator] [--json FILE]``

Runs ``tb.pe.test_bench`` on the generated Verilog of one PE (1 x 1 array parameters, 32
slots) and prints the figures that ``docs/pe.md`` quotes.  Nothing is asserted.
"""

import argparse
import json
import tempfile
from pathlib import Path

from tb.pe.cases import PARAMS_1X1, top_params
from tb.runner import run_cocotb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", default="icarus", choices=["icarus", "verilator"])
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.json"
        run_cocotb("pe", top_params(PARAMS_1X1), "tb.pe.test_bench", args.sim,
                   extra_env={"FDPU_PE_BENCH_OUT": str(path)})
        res = json.loads(path.read_text())
    print(f"\nPE microbenchmarks ({args.sim}, {PARAMS_1X1.slots} slots, operand depth "
          f"{PARAMS_1X1.operand_depth}); rates in instructions per cycle")
    for name in ("issue_int", "issue_fp", "issue_dual"):
        rates = res[name]
        print(f"  {name:22s} " + ", ".join(f"{k} {v:.2f}" for k, v in rates.items())
              + f"  (total {sum(rates.values()):.2f})")
    for name, v in res.items():
        if name.startswith(("fmadd", "facc")):
            key = "fmadd_per_cycle" if name.startswith("fmadd") else "facc_per_cycle"
            print(f"  {name:22s} {v[key]:.2f} per cycle = {v['flops_per_cycle']:.1f} flop/cycle")
    for name in ("pair_int", "pair_fp"):
        v = res[name]
        print(f"  {name:22s} same PE: fire -> dependent fire {v['fire_to_dependent_fire']} "
              f"cycles; one hop: {v['one_hop_pair']} cycles (fire -> flit out "
              f"{v['fire_to_flit_out']}, mesh 2, flit in -> fire {v['flit_in_to_fire']})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
