"""Time FD-CSR on a zoo layer: build, prune, encode, validate, decode, to SciPy.

Usage::

    .venv/bin/python scripts/bench_fdcsr.py [--layer vgg16-fc6] [--seed 0] [--repeat 3]

Prints the best wall time of each step over ``--repeat`` runs (except the build, run once) and
checks that the decode is bit-exact.  Default layer: VGG-16 FC6 (4096 x 25088 at 4 %), the
largest of the zoo.
"""

import argparse
import sys
import time

import numpy as np

from sw.compiler import fdcsr, layers, prune


def best_of(repeat, fn):
    """Return (best wall time in seconds, last result) of ``repeat`` calls of ``fn``."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main(argv=None):
    """Run the benchmark and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="vgg16-fc6", help="zoo layer (default: vgg16-fc6)")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default: 0)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per step")
    args = parser.parse_args(argv)
    spec = layers.get_layer(args.layer)
    t = time.perf_counter()
    w = layers.make_weights(spec, seed=args.seed)
    build = time.perf_counter() - t
    unpruned = layers.make_weights(spec, 1.0, seed=args.seed)
    t_prune, pruned = best_of(1, lambda: prune.prune(unpruned, spec.density))
    assert np.array_equal(pruned, w)
    unpruned = pruned = None  # free them before the timed steps
    t_enc, enc = best_of(args.repeat, lambda: fdcsr.encode(w))
    t_val, _ = best_of(args.repeat, enc.validate)
    t_dec, dense = best_of(args.repeat, enc.decode)
    t_sci, _ = best_of(args.repeat, enc.to_scipy)
    exact = np.array_equal(dense.view(np.uint16), w.view(np.uint16))
    s = enc.stats()
    print(f"{spec.name}: {spec.out_features} x {spec.in_features} = {spec.weights:,} weights, "
          f"density {s.density:.4f}, nnz {s.nnz:,}")
    print(f"  build (He-normal float32 -> float16 -> prune): {build:6.2f} s")
    print(f"  prune     {t_prune:6.3f} s  (float16, keep {spec.nnz:,})")
    print(f"  encode    {t_enc:6.3f} s  ({spec.weights / t_enc / 1e6:,.0f} M weights/s)")
    print(f"  validate  {t_val:6.3f} s")
    print(f"  decode    {t_dec:6.3f} s  (bit-exact: {exact})")
    print(f"  to_scipy  {t_sci:6.3f} s")
    print(f"  FD-CSR {s.total_bytes:,} B = values {s.values_bytes:,} + colidx {s.colidx_bytes:,}"
          f" + rowoff {s.rowoff_bytes:,}; dense {s.dense_bytes:,} B; ratio {s.ratio:.4f} "
          f"({s.compression:.2f}x smaller)")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
