"""``fdpu fpu-check``: run binary16 vectors through the RTL SIMD-4 unit and report mismatches.

::

    fdpu fpu-check --sim verilator --op fma --vectors f16_mulAdd.txt
    fdpu fpu-check --sim icarus --op add --random 10000 --seed 7

``--vectors FILE`` reads Berkeley TestFloat ``testfloat_gen`` output (:mod:`sw.models.testfloat`:
operands, expected result, flags, in hex; flags ignored).  ``--random N`` generates N cases
mixing edge classes (zeros, subnormals, boundaries, infinities, NaNs, near-cancellation) with
uniform bit patterns and takes the expected results from :mod:`sw.spec.fp16`.  The cases run four
lanes per operation through the generated Verilog of top ``fpu`` on the chosen simulator
(:mod:`tb.fpu.check`).

NaN policy: every NaN the unit produces is the canonical ``0x7E00``, so an expected NaN (any
pattern) matches ``0x7E00`` only.  The report gives the mismatch count, the first few
mismatches with operands, expected and got, and the throughput: cases per second of
simulation wall time and per simulated cycle.  Exit status 1 on any mismatch, 2 on bad input.
"""

import random
import time

import numpy as np

from sw.models.testfloat import read_vectors
from sw.spec.errors import FdpuError
from sw.spec.system import SIMULATORS
from tb.fpu import model
from tb.fpu.check import mismatches, run_vectors

_OPS = ("fma", "mul", "add", "sub")


#: The most random cases one run generates (tests/test_fpu.py's slow runs take 10^6 at a
#: time; 10^8 cases of four lanes are a few GB).
MAX_RANDOM = 100_000_000


def register(subparsers):
    """Add the ``fpu-check`` command."""
    parser = subparsers.add_parser(
        "fpu-check", help="check the RTL binary16 unit against TestFloat or random vectors",
        description="Run binary16 vectors through the generated Verilog of the SIMD-4 unit "
                    "and report mismatches and throughput.  An expected NaN matches the "
                    "canonical NaN 0x7E00 only.",
        epilog="example: fdpu fpu-check --sim verilator --op fma --random 100000 --seed 1")
    parser.add_argument("--sim", required=True, choices=SIMULATORS,
                        help="simulator")
    parser.add_argument("--op", required=True, choices=_OPS,
                        help="operation: fma (a*b+c, 3 operands), mul, add, sub (2 operands)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--vectors", metavar="FILE",
                        help="TestFloat testfloat_gen file: operands, result, flags in hex")
    source.add_argument("--random", metavar="N", type=int,
                        help="generate N cases (edge classes and random bits), checked "
                             "against sw.spec.fp16")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of --random and of the pacing (default: random, printed)")
    parser.add_argument("--idle", type=float, default=0.0, metavar="P",
                        help="probability of an idle input cycle (default 0: full rate)")
    parser.add_argument("--stall", type=float, default=0.0, metavar="P",
                        help="probability of a backpressure cycle (default 0)")
    parser.add_argument("--show", type=int, default=5, metavar="K",
                        help="print the first K mismatches (default 5)")
    parser.set_defaults(func=run)


def _check_args(args):
    if args.random is not None and not 1 <= args.random <= MAX_RANDOM:
        raise FdpuError(f"--random N must be a number of cases in 1..{MAX_RANDOM:,} (each is "
                        f"held in memory for the run), not {args.random}")
    for name in ("idle", "stall"):
        value = getattr(args, name)
        if not 0.0 <= value < 1.0:
            raise FdpuError(f"--{name} must be a probability in [0, 1), not {value}")
    if args.show < 0:
        raise FdpuError(f"--show must be a non-negative count, not {args.show}")


def run(args):
    """Run the check; return 0 when every case matches, 1 otherwise."""



    _check_args(args)
    arity = model.ARITY[args.op]
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(31)
    if args.vectors is not None:
        lanes, expected = read_vectors(args.vectors, arity)
        origin = f"from {args.vectors}"
    else:
        lanes = model.random_operands(args.op, args.random, np.random.default_rng(seed))
        expected = model.reference(args.op, *lanes)
        origin = f"random, seed {seed}"
    count = len(expected)
    print(f"fpu-check: {count} {args.op} cases ({origin}) on {args.sim}", flush=True)
    started = time.monotonic()
    run = run_vectors(args.op, lanes, args.sim, idle=args.idle, stall=args.stall, seed=seed)
    bad = mismatches(run.got, expected)
    print(f"mismatches: {len(bad)} of {count}")
    for i in bad[:args.show]:
        operands = " ".join(f"{int(x[i]):04X}" for x in lanes)
        print(f"  case {i}: {args.op} {operands}: expected {int(expected[i]):04X}, "
              f"got {int(run.got[i]):04X}")
    rate = count / run.drive_s if run.drive_s > 0 else float("inf")
    print(f"throughput: {count} cases in {run.cycles} cycles ({count / run.cycles:.2f} "
          f"cases/cycle, 4 lanes per operation); {run.drive_s:.2f} s simulated = "
          f"{rate:,.0f} cases/s wall; simulator run {run.run_s:.1f} s, build "
          f"{run.build_s:.1f} s, total {time.monotonic() - started:.1f} s")
    return 1 if len(bad) else 0
