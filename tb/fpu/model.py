"""Reference model and vector generator for the SIMD-4 binary16 unit (:mod:`hw.pe.fpu`).

The reference is :mod:`sw.spec.fp16`, the project's bit-exact binary16 arithmetic; this module only
maps :class:`hw.pe.fpu.FpOp` names onto it and generates operands that hit the interesting
classes (zeros, subnormals, boundaries, infinities, NaNs, near-overflow, exact cancellation),
not only uniform random bits.  Everything works on numpy ``uint16`` arrays of lanes.
"""

import numpy as np

from sw.spec import fp16

__all__ = ["OPS", "ARITY", "reference", "softfloat_reference", "edge_values",
           "random_operands"]

#: Operation names accepted here and by ``fdpu fpu-check``, mapped to ``hw.pe.fpu.FpOp`` names.
OPS = {"fma": "FMADD", "mul": "FMUL", "add": "FADD", "sub": "FSUB", "mov": "MOV", "max": "MAX"}

#: Number of source operands of each operation (TestFloat files list this many).
ARITY = {"fma": 3, "mul": 2, "add": 2, "sub": 2, "mov": 1, "max": 2}

_EDGE = np.array([
    0x0000, 0x0001, 0x0002, 0x0003, 0x01FF, 0x0200, 0x03FE, 0x03FF,   # zero, subnormals
    0x0400, 0x0401, 0x07FF, 0x0800,                                   # smallest normals
    0x1400, 0x2400, 0x2E66, 0x3555, 0x3BFF, 0x3C00, 0x3C01, 0x3E00,   # around one
    0x4000, 0x4200, 0x5640, 0x7000, 0x77FF, 0x7800, 0x7BFE, 0x7BFF,   # large, max finite
    0x7C00,                                                           # infinity
    0x7C01, 0x7D00, 0x7DFF, 0x7E00, 0x7E01, 0x7FFF,                   # sNaN and qNaN
], dtype=np.uint16)


def edge_values():
    """Return the edge-class binary16 patterns, both signs, as a ``uint16`` array."""
    return np.concatenate([_EDGE, _EDGE | np.uint16(0x8000)])


def reference(op, a, b=None, c=None):
    """Return the expected lanes of ``op`` applied to lanes ``a``, ``b``, ``c``.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    a, b, c : array_like of uint16
        Operand lanes (``b``, ``c`` only where the operation reads them).

    Returns
    -------
    numpy.ndarray of uint16
    """
    if op == "fma":
        return np.asarray(fp16.fma(a, b, c), dtype=np.uint16)
    if op == "mul":
        return np.asarray(fp16.mul(a, b), dtype=np.uint16)
    if op == "add":
        return np.asarray(fp16.add(a, b), dtype=np.uint16)
    if op == "sub":
        return np.asarray(fp16.sub(a, b), dtype=np.uint16)
    if op == "mov":
        return np.asarray(a, dtype=np.uint16).copy()
    if op == "max":
        return np.asarray(fp16.maximum(a, b), dtype=np.uint16)
    raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")


def softfloat_reference(op, a, b=None, c=None):
    """Return what Berkeley SoftFloat (``softfloatpy``) computes, NaNs mapped to ``0x7E00``.

    An independent cross-check of :mod:`sw.spec.fp16` and the generator of the checked-in
    TestFloat-format vectors; one Python call per lane, so for thousands of cases, not
    millions.  Parameters and result as for :func:`reference`.
    """
    if op not in ("fma", "mul", "add", "sub", "mov"):
        raise ValueError(f"SoftFloat has no {op!r}; op must be fma, mul, add, sub or mov")
    import softfloatpy as sf

    def f16(x):
        return sf.Float16.from_bytes(int(x).to_bytes(2, "big"))

    def run(*xs):
        if op == "fma":
            r = sf.f16_mul_add(*map(f16, xs))
        elif op == "mul":
            r = sf.f16_mul(*map(f16, xs))
        elif op == "add":
            r = sf.f16_add(*map(f16, xs))
        elif op == "sub":
            r = sf.f16_sub(*map(f16, xs))
        else:
            return int(xs[0])
        return 0x7E00 if r.is_nan() else int.from_bytes(r.to_bytes(), "big")

    sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
    operands = [np.asarray(x, dtype=np.uint16).ravel() for x in (a, b, c)[:ARITY[op]]]
    return np.array([run(*xs) for xs in zip(*operands)], dtype=np.uint16)


def _classes(rng, n):
    """Return ``n`` operands drawn from a mix of value classes."""
    edge = edge_values()
    kind = rng.integers(0, 8, n)
    sign = rng.integers(0, 2, n).astype(np.uint16) << np.uint16(15)
    frac = rng.integers(0, 1 << 10, n).astype(np.uint16)
    exp = rng.integers(0, 32, n).astype(np.uint16)
    # Exponents near the ends of the range: subnormal, tiny normal, near overflow.
    near_end = rng.choice(np.array([0, 1, 2, 13, 14, 15, 16, 28, 29, 30], dtype=np.uint16), n)
    # Exponents around one, where sums of products and addends overlap most.
    near_one = rng.integers(10, 21, n).astype(np.uint16)
    out = rng.integers(0, 1 << 16, n).astype(np.uint16)                    # uniform bits
    out = np.where(kind == 1, edge[rng.integers(0, len(edge), n)], out)
    out = np.where(kind == 2, sign | (near_end << np.uint16(10)) | frac, out)
    out = np.where((kind == 3) | (kind == 4), sign | (near_one << np.uint16(10)) | frac, out)
    out = np.where(kind == 5, sign | (exp << np.uint16(10)) | (frac & np.uint16(0x7)), out)
    out = np.where(kind == 6, sign | (exp << np.uint16(10)) | (frac | np.uint16(0x3F8)), out)
    return out.astype(np.uint16)


def random_operands(op, n, rng):
    """Return ``ARITY[op]`` arrays of ``n`` operand lanes for ``op``, mixing value classes.

    For ``fma``, ``add`` and ``sub`` a third of the cases make the addend cancel the product
    (or the other summand) exactly or to within a few ulps, where the fused rounding and the
    sign of zero are hardest.  For ``max`` a third of the cases make ``b`` equal to ``a``, its
    negation or one ulp away (equal values, ``+-0`` pairs, the comparison's last bit).

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    n : int
        Number of cases.
    rng : numpy.random.Generator
        Source of randomness (seeded by the caller, who prints the seed).

    Returns
    -------
    tuple of numpy.ndarray of uint16
    """
    operands = [_classes(rng, n) for _ in range(ARITY[op])]
    if op in ("fma", "add", "sub") and n:
        near = rng.random(n) < 0.33
        jitter = rng.choice(np.array([0, 0, 0, 1, 2, 0xFFFF, 0xFFFE], dtype=np.uint16), n)
        if op == "fma":
            target = np.asarray(fp16.mul(operands[0], operands[1]), dtype=np.uint16)
            target = target ^ np.uint16(0x8000)
        elif op == "add":
            target = operands[0] ^ np.uint16(0x8000)
        else:
            target = operands[0]
        last = operands[-1]
        operands[-1] = np.where(near, (target + jitter).astype(np.uint16), last)
    if op == "max" and n:
        near = rng.random(n) < 0.33
        a = operands[0]
        twin = np.where(rng.random(n) < 0.5, a ^ np.uint16(0x8000), a)
        twin = (twin + rng.choice(np.array([0, 0, 1, 0xFFFF], dtype=np.uint16), n))
        operands[1] = np.where(near, twin.astype(np.uint16), operands[1])
    return tuple(operands)
