"""Count how often per simulated cycle each part of a Verilated model is evaluated.

Runs a binary built by ``scripts/speed/build.py`` idle under ``valgrind --tool=callgrind``
twice (``--short`` and ``--long`` cycles) and prints, per function, the calls per cycle (the
difference of the two runs divided by the difference of cycles, so start-up work cancels).
For a hierarchical build, ``<block>::eval_step`` per cycle divided by the number of instances
is how many times each child model is evaluated per cycle; ``protectlib_seq_update`` and
``protectlib_combo_update`` say why (clock edges, input changes).

Usage::

    .venv/bin/python scripts/speed/evals.py build/speed/head8 base [--top 40]
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def calls(path):
    """Return ``{function: calls}`` summed over the call sites of a callgrind output file."""
    names, total, callee = {}, {}, None
    for line in open(path):
        if line.startswith(("fn=", "cfn=")):
            m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
            if m.group(2):
                names[m.group(1)] = m.group(2).strip()
            if line.startswith("cfn="):
                callee = m.group(1)
        elif line.startswith("calls=") and callee is not None:
            total[callee] = total.get(callee, 0) + int(line.split("=")[1].split()[0])
    return {names.get(k, k): v for k, v in total.items()}


def profile(binary, job, cycles):
    """Return the call counts of ``binary`` running ``cycles`` idle cycles."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        str(binary), str(job), "--idle", str(cycles)],
                       capture_output=True, check=True)
        return calls(out)


def main(argv=None):
    """Print the calls per cycle of the most called functions."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job")
    ap.add_argument("variant")
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=60)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--match", default="", help="only functions whose name has this text")
    args = ap.parse_args(argv)
    job = Path(args.job)
    binary = job / args.variant / "obj" / "Vfdpu_system"
    a = profile(binary, job / "job.txt", args.short)
    b = profile(binary, job / "job.txt", args.long)
    span = args.long - args.short
    rows = sorted(((b.get(k, 0) - a.get(k, 0)) / span, k) for k in b if args.match in k)
    for per_cycle, name in reversed(rows[-args.top:]):
        if per_cycle > 0:
            print(f"{per_cycle:10.1f}  {name[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
