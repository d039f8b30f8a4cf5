"""Count how often per simulated cycle each part of a Verilated model is evaluated.

Runs a binary built by ``scripts/speed/build.py`` idle under ``valgrind --tool=callgrind``
twice (``--short`` and ``--long`` cycles) and prints, per function, the calls per cycle (the
difference of the two runs divided by the difference of cycles, so start-up work cancels).
For a hierarchical build, ``<block>::eval_step`` per cycle divided by the number of instances
is how many times each child model is evaluated per cycle; ``protectlib_seq_update`` and
``protectlib_combo_update`` say why (clock edges, input changes).

``--instr``: instructions per idle cycle instead (callgrind's total, the same difference of
two runs; deterministic, so independent of the machine's load), and the instructions of the
busy job (``job.txt`` replayed whole).

Usage::

    .venv/bin/python scripts/speed/evals.py build/speed/head8 base [--top 40]
    .venv/bin/python scripts/speed/evals.py build/speed/job2 edge --instr [--busy]
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


def instructions(binary, job, cycles=None):
    """Return the instructions callgrind counts for ``binary`` (idle ``cycles``, or the job)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        idle = [] if cycles is None else ["--idle", str(cycles)]
        proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                               str(binary), str(job), *idle],
                              capture_output=True, text=True, check=True)
        return int(re.search(r"Collected : (\d+)", proc.stderr).group(1))


def main(argv=None):
    """Print the calls per cycle of the most called functions."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job")
    ap.add_argument("variant")
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=60)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--match", default="", help="only functions whose name has this text")
    ap.add_argument("--instr", action="store_true",
                    help="print instructions per idle cycle (and of the job with --busy)")
    ap.add_argument("--busy", action="store_true", help="with --instr: also the whole job")
    args = ap.parse_args(argv)
    job = Path(args.job)
    binary = job / args.variant / "obj" / "Vfdpu_system"
    if args.instr:
        a = instructions(binary, job / "job.txt", args.short)
        b = instructions(binary, job / "job.txt", args.long)
        print(f"{job} {args.variant}: {(b - a) / (args.long - args.short):,.0f} instructions "
              f"per idle cycle")
        if args.busy:
            print(f"{job} {args.variant}: {instructions(binary, job / 'job.txt'):,} "
                  f"instructions for the job")
        return 0
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
