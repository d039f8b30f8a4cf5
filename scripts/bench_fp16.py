"""Time the bit-exact binary16 operations of ``sw.spec.fp16`` on random operands.

Usage::

    .venv/bin/python scripts/bench_fp16.py [--n 10000000] [--chunk 1000000] [--repeat 3] [--seed 0]

Draws ``--n`` random bit patterns per operand (uniform over all 65536 patterns, NaNs and
infinities included), then times ``add``, ``mul``, ``fma`` and ``simd4_fma`` over them in chunks
of ``--chunk`` elements (the chunk bounds the temporaries; one call per chunk).  Prints the best
of ``--repeat`` runs in M op/s (for ``simd4_fma``: M lane-op/s, i.e. 4 per word).  Exits with
status 1 if fma is below the 1 M op/s goal.
"""

import argparse
import sys
import time

import numpy as np

from sw.spec import fp16

GOAL_FMA_MOPS = 1.0


def best_of(repeat, fn):
    """Return the best wall time in seconds of ``repeat`` calls of ``fn``."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def chunked(op, operands, chunk):
    """Return a function applying ``op`` to ``operands`` chunk by chunk."""
    n = operands[0].shape[0]

    def run():
        for start in range(0, n, chunk):
            op(*(x[start:start + chunk] for x in operands))
    return run


def main(argv=None):
    """Run the benchmark and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="operands per op (10**7)")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="elements per call")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per op")
    parser.add_argument("--seed", type=int, default=0, help="operand seed (default: 0)")
    args = parser.parse_args(argv)
    if args.n < 4 or args.chunk < 4 or args.repeat < 1:
        parser.error("--n and --chunk must be at least 4, --repeat at least 1")
    rng = np.random.default_rng(args.seed)
    a, b, c = (rng.integers(0, 1 << 16, args.n, dtype=np.uint16) for _ in range(3))
    words = [fp16.pack4(x[: args.n // 4 * 4].reshape(-1, 4)) for x in (a, b, c)]
    print(f"sw.spec.fp16 on {args.n:,} random operands, chunks of {args.chunk:,}, "
          f"best of {args.repeat}, numpy {np.__version__}")
    rates = {}
    for name, op, operands, per_item in (
            ("add", fp16.add, (a, b), 1), ("mul", fp16.mul, (a, b), 1),
            ("fma", fp16.fma, (a, b, c), 1),
            ("simd4_fma", fp16.simd4_fma, words, 4)):
        items = operands[0].shape[0]
        t = best_of(args.repeat, chunked(op, operands, max(1, args.chunk // per_item)))
        rates[name] = items * per_item / t / 1e6
        unit = "M lane-op/s" if per_item > 1 else "M op/s"
        print(f"  {name:<10} {t:7.3f} s  {rates[name]:8.1f} {unit}")
    ok = rates["fma"] >= GOAL_FMA_MOPS
    print(f"fma goal {GOAL_FMA_MOPS} M op/s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
