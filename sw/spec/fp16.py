"""Bit-exact IEEE 754 binary16 arithmetic on uint16 bit patterns: the FDPU number format.

Contract
--------
* Every operand is an array_like of *bit patterns*: integers in ``0..0xFFFF`` (Python ints,
  lists, numpy arrays of any integer dtype).  Operands broadcast against each other like numpy
  operands.  Anything else (floats, booleans, negative values, values above 0xFFFF, ragged
  lists) raises :class:`sw.spec.errors.FdpuError` naming the argument.
* Every result is a ``numpy.ndarray`` of dtype ``uint16`` with the broadcast shape; when the
  broadcast shape is ``()`` (all operands scalar) the result is a ``numpy.uint16`` scalar.
* Arithmetic is IEEE 754-2019 binary16 with roundTiesToEven: ``add``, ``sub``, ``mul`` and
  ``fma`` (``a * b + c`` rounded *once*) return the correctly rounded result.  Subnormal
  operands and results are kept (no flush to zero); overflow gives a correctly signed infinity;
  the sign of an exact zero follows IEEE (``x + -x = +0``, ``-0 + -0 = -0``).
* ``maximum`` is IEEE 754-2019 ``maximum``: the larger operand, returned unchanged (no
  rounding), with ``-0 < +0``; a NaN operand gives ``QNAN``.
* NaN policy: every NaN result, whether produced (``inf - inf``, ``0 * inf``) or propagated
  from a NaN operand (quiet or signalling, any payload, any sign), is the canonical quiet NaN
  ``QNAN = 0x7E00``.  Exception flags are not modelled.

SIMD-4 tokens
-------------
An FP token is a 64-bit word holding four binary16 lanes, lane ``i`` in bits ``16*i+15 ..
16*i`` (lane 0 in bits 15:0).  :func:`pack4` / :func:`unpack4` convert between ``(..., 4)``
uint16 lanes and uint64 words; ``simd4_add``, ``simd4_sub``, ``simd4_mul``, ``simd4_fma`` and
``simd4_max`` apply the scalar operation lane by lane to words (integers in ``0..2**64-1``).

Implementation
--------------
Operands are decoded exactly to float64.  A sum of two binary16 values spans at most 41 bits
and a product at most 22 significant bits, so ``a + b`` and ``a * b`` are exact in float64;
the single rounding is the final float64 -> binary16 one.  For ``fma`` the float64 sum
``s = p + c`` can be inexact: its exact error ``e`` comes from TwoSum and ``s`` is moved to
round-to-odd (if ``e != 0`` and the last significand bit of ``s`` is 0, step one ulp toward
``e``); round-to-odd at 53 bits followed by round-to-nearest-even at 11 bits equals one
rounding of the exact value, since 53 >= 11 + 2.  The float64 -> binary16 rounding is done
here with integer operations on the float64 bit pattern (RNE, subnormals, overflow), so the
result does not depend on how a given numpy build converts to float16.  ``docs/fp16.md``
gives the full argument and what the tests check.
"""

import numpy as np

from sw.spec.errors import FdpuError

__all__ = [
    "POS_ZERO", "NEG_ZERO", "ONE", "NEG_ONE", "POS_INF", "NEG_INF", "QNAN", "MAX_FINITE",
    "MIN_NORMAL", "MIN_SUBNORMAL", "SIGN_MASK", "EXP_MASK", "FRAC_MASK",
    "add", "sub", "mul", "fma", "maximum", "from_float", "to_float", "is_nan", "positive_zeros",
    "to_weights",
    "pack4", "unpack4", "simd4_add", "simd4_sub", "simd4_mul", "simd4_fma", "simd4_max",
]

#: +0.0
POS_ZERO = 0x0000
#: -0.0
NEG_ZERO = 0x8000
#: +1.0
ONE = 0x3C00
#: -1.0
NEG_ONE = 0xBC00
#: +infinity
POS_INF = 0x7C00
#: -infinity
NEG_INF = 0xFC00
#: The canonical quiet NaN; every NaN result is exactly this pattern.
QNAN = 0x7E00
#: Largest finite value, 65504.0 (its negative is ``MAX_FINITE | SIGN_MASK``).
MAX_FINITE = 0x7BFF
#: Smallest positive normal value, 2**-14.
MIN_NORMAL = 0x0400
#: Smallest positive subnormal value, 2**-24.
MIN_SUBNORMAL = 0x0001
#: Sign bit.
SIGN_MASK = 0x8000
#: Exponent field (bits 14:10).
EXP_MASK = 0x7C00
#: Fraction field (bits 9:0).
FRAC_MASK = 0x03FF

_LANES = 4
_LANE_SHIFTS = np.arange(_LANES, dtype=np.uint64) * np.uint64(16)

# float64 layout, on the int64 view of the magnitude.
_F64_FRAC_BITS = 52
_F64_BIAS = 1023
_F64_HIDDEN = np.int64(1) << _F64_FRAC_BITS
_F64_ABS_MASK = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_F64_INF = np.int64(0x7FF0_0000_0000_0000)
# Unbiased exponent below which binary16 results are subnormal; quantum there is 2**-24.
_F16_EMIN = -14
_F16_EMAX = 15
_F16_FRAC_BITS = 10
# Right shift that keeps the 11 significant bits of a normal result.
_NORMAL_SHIFT = _F64_FRAC_BITS - _F16_FRAC_BITS
# Any larger shift leaves nothing and rounds to zero; capping keeps shifts defined.
_MAX_SHIFT = _F64_FRAC_BITS + 3


def _as_uint(x, name, bits):
    """Validate integers in ``0..2**bits-1`` and return them as an unsigned numpy array."""
    dtype = np.uint16 if bits == 16 else np.uint64
    top = (1 << bits) - 1
    allowed = f"integers in 0..0x{top:X}"
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise FdpuError(f"{name} must be an array_like of {allowed}; "
                        f"numpy cannot read it as an array ({exc})") from None
    if arr.dtype.kind == "f" and not isinstance(x, (np.ndarray, np.generic)):
        # numpy reads a list holding ints beyond int64 as float64: look at the ints themselves.
        arr = np.array(x, dtype=object)
    if arr.dtype == object:
        # Python ints too large for int64/uint64 land here; so do mixed-type lists.
        flat = arr.ravel().tolist()
        if not all(type(v) is int for v in flat):
            kinds = sorted({type(v).__name__ for v in flat if type(v) is not int})
            raise FdpuError(f"{name} must hold {allowed}, but it holds {', '.join(kinds)}")
        lo, hi = (min(flat), max(flat)) if flat else (0, 0)
    elif arr.dtype.kind in "iu":
        if arr.dtype == dtype:
            return arr
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    else:
        raise FdpuError(f"{name} must hold {allowed} (bit patterns), "
                        f"not values of dtype {arr.dtype}")
    if lo < 0 or hi > top:
        bad = lo if lo < 0 else hi
        raise FdpuError(f"{name} holds {bad}, outside the allowed range: {allowed}")
    return arr.astype(dtype)


def _bits(x, name):
    """Validate binary16 bit patterns and return them as a uint16 array."""
    return _as_uint(x, name, 16)


def _decode(bits):
    """Return the exact float64 values of uint16 bit patterns (NaNs stay NaN)."""
    return bits.view(np.float16).astype(np.float64)


def _result(bits):
    """Return a uint16 result array, or a ``numpy.uint16`` scalar for a 0-d result."""
    return bits[()] if bits.ndim == 0 else bits


def _round_to_f16(x):
    """Round float64 values to binary16 bit patterns, ties to even, NaN -> ``QNAN``.

    Works on the float64 bit pattern: the 53-bit significand is shifted right so that the
    binary16 quantum (``2**(E-10)`` for a normal result, ``2**-24`` for a subnormal one) becomes
    the unit, rounded to nearest even, and added to the exponent field.  A round-up that
    carries out of the significand moves into the next binade by the same addition, and out of
    the largest binade into ``POS_INF``; values from 65520 up therefore become infinity.
    """
    x = np.asarray(x, dtype=np.float64)
    u = x.view(np.int64)
    mag = u & _F64_ABS_MASK
    sign = ((u >> 48) & SIGN_MASK).astype(np.uint16)
    exp = (mag >> _F64_FRAC_BITS) - _F64_BIAS
    sig = (mag & (_F64_HIDDEN - 1)) | _F64_HIDDEN
    shift = np.minimum(_NORMAL_SHIFT + np.maximum(_F16_EMIN - exp, 0), _MAX_SHIFT)
    q = sig >> shift
    rem = sig - (q << shift)
    half = np.int64(1) << (shift - 1)
    q += (rem > half) | ((rem == half) & ((q & 1) == 1))
    # Zeros and float64 subnormals have exp <= -1023: the capped shift rounds them to 0.
    base = np.maximum(exp - _F16_EMIN, 0) << _F16_FRAC_BITS
    out = np.where(exp > _F16_EMAX, POS_INF, base + q).astype(np.uint16)
    out |= sign
    return np.where(mag > _F64_INF, np.uint16(QNAN), out)


def _round_to_odd(s, e):
    """Return ``s`` moved to round-to-odd, given the exact error ``e`` of the sum ``s``.

    ``s`` is the float64 round-to-nearest of an exact value ``s + e``.  If ``e == 0`` the
    value is exact.  Otherwise the round-to-odd result is whichever of the two float64
    neighbours enclosing ``s + e`` has an odd significand: ``s`` itself when it is odd, else the
    neighbour of ``s`` on ``e``'s side (one step of the magnitude bit pattern, up when ``s``
    and ``e`` have the same sign, down otherwise).  Non-finite ``s`` is returned unchanged.
    """
    u = s.view(np.int64)
    fix = (e != 0) & ((u & 1) == 0) & np.isfinite(s)
    step = np.where(np.signbit(s) == np.signbit(e), 1, -1)
    return np.where(fix, u + step, u).view(np.float64)


def add(a, b):
    """Add binary16 bit patterns ``a + b`` with one RNE rounding.

    Parameters
    ----------
    a, b : array_like of int
        Bit patterns in ``0..0xFFFF``; broadcast against each other.

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
        The correctly rounded sum; NaN results are ``QNAN``.
    """
    fa, fb = _decode(_bits(a, "a")), _decode(_bits(b, "b"))
    with np.errstate(invalid="ignore"):
        return _result(_round_to_f16(fa + fb))


def sub(a, b):
    """Subtract binary16 bit patterns ``a - b`` with one RNE rounding.

    Parameters
    ----------
    a, b : array_like of int
        Bit patterns in ``0..0xFFFF``; broadcast against each other.

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
        The correctly rounded difference; NaN results are ``QNAN``.
    """
    fa, fb = _decode(_bits(a, "a")), _decode(_bits(b, "b"))
    with np.errstate(invalid="ignore"):
        return _result(_round_to_f16(fa - fb))


def mul(a, b):
    """Multiply binary16 bit patterns ``a * b`` with one RNE rounding.

    Parameters
    ----------
    a, b : array_like of int
        Bit patterns in ``0..0xFFFF``; broadcast against each other.

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
        The correctly rounded product; NaN results are ``QNAN``.
    """
    fa, fb = _decode(_bits(a, "a")), _decode(_bits(b, "b"))
    with np.errstate(invalid="ignore"):
        return _result(_round_to_f16(fa * fb))


def fma(a, b, c):
    """Compute the fused multiply-add ``a * b + c`` of binary16 bit patterns, rounded once.

    Parameters
    ----------
    a, b, c : array_like of int
        Bit patterns in ``0..0xFFFF``; broadcast against each other.

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
        The exact ``a * b + c`` rounded to nearest even; NaN results (a NaN operand,
        ``0 * inf``, ``inf - inf``) are ``QNAN``.
    """
    fa, fb, fc = _decode(_bits(a, "a")), _decode(_bits(b, "b")), _decode(_bits(c, "c"))
    with np.errstate(invalid="ignore"):
        p = fa * fb  # exact: 11 x 11 significand bits, exponent well inside float64
        s = p + fc
        # TwoSum (Knuth): e is the exact rounding error of s for finite operands.
        bv = s - p
        e = (p - (s - bv)) + (fc - bv)
        return _result(_round_to_f16(_round_to_odd(s, e)))


def maximum(a, b):
    """Return the IEEE 754-2019 ``maximum`` of binary16 bit patterns ``a`` and ``b``.

    The larger operand, exactly (its bit pattern, no rounding); ``-0.0`` is below ``+0.0``, so
    ``maximum(-0.0, +0.0)`` is ``+0.0`` in either order; equal operands give that value; a NaN
    operand (quiet or signalling, any payload) gives ``QNAN``.  ``maximum(x, +0.0)`` is ReLU.

    Parameters
    ----------
    a, b : array_like of int
        Bit patterns in ``0..0xFFFF``; broadcast against each other.

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
    """
    ua, ub = _bits(a, "a"), _bits(b, "b")
    nan = ((ua & ~np.uint16(SIGN_MASK)) > POS_INF) | ((ub & ~np.uint16(SIGN_MASK)) > POS_INF)

    def key(u):
        # Order of the values as integers: the magnitude, negated and less one when negative
        # (so -0.0 is -1, below +0.0 at 0).
        mag = (u & ~np.uint16(SIGN_MASK)).astype(np.int32)
        return np.where(u >> np.uint16(15) != 0, -mag - 1, mag)

    out = np.where(key(ua) >= key(ub), ua, ub)
    return _result(np.where(nan, np.uint16(QNAN), out).astype(np.uint16))


def from_float(x):
    """Round real numbers to binary16 bit patterns, ties to even, NaN -> ``QNAN``.

    Parameters
    ----------
    x : array_like of real numbers
        Floats of any precision or integers.  Values of magnitude 65520 or more (and
        infinities) become signed infinities; tiny values become subnormals or signed zeros.
        ``numpy.longdouble`` input is rounded once as well (via float64 round-to-odd).

    Returns
    -------
    numpy.ndarray of uint16, or numpy.uint16
        The bit patterns.
    """
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise FdpuError(f"x must be an array_like of real numbers; "
                        f"numpy cannot read it as an array ({exc})") from None
    if arr.dtype.kind not in "iuf":
        raise FdpuError(f"x must hold real numbers (integers or floats), "
                        f"not values of dtype {arr.dtype}")
    with np.errstate(invalid="ignore", over="ignore"):
        s = arr.astype(np.float64)
        # Integers beyond 2**53 may round in float64, but all of them become infinity anyway.
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
            # float64(x) rounds once; its exact error is x - s in the wide format.
            s = _round_to_odd(s, (arr - s).astype(np.float64))
        return _result(_round_to_f16(s))


def to_float(bits):
    """Return the exact float64 values of binary16 bit patterns.

    Parameters
    ----------
    bits : array_like of int
        Bit patterns in ``0..0xFFFF``.

    Returns
    -------
    numpy.ndarray of float64
        Same shape as ``bits`` (0-d array for a scalar); NaN patterns give NaN.
    """
    return _decode(_bits(bits, "bits"))


def is_nan(bits):
    """Return whether binary16 bit patterns are NaN (exponent all ones, fraction non-zero).

    Parameters
    ----------
    bits : array_like of int
        Bit patterns in ``0..0xFFFF``.

    Returns
    -------
    numpy.ndarray of bool
    """
    return (_bits(bits, "bits") & 0x7FFF) > POS_INF


def pack4(lanes):
    """Pack four binary16 lanes into a 64-bit SIMD-4 token word, lane 0 in bits 15:0.

    Parameters
    ----------
    lanes : array_like of int, shape (..., 4)
        Bit patterns in ``0..0xFFFF``; the last axis holds lanes 0..3.

    Returns
    -------
    numpy.ndarray of uint64, shape (...), or numpy.uint64
        The words; a ``numpy.uint64`` scalar for a single token of shape ``(4,)``.
    """
    arr = _bits(lanes, "lanes")
    if arr.ndim == 0 or arr.shape[-1] != _LANES:
        raise FdpuError(f"lanes must have shape (..., {_LANES}) (one value per SIMD lane), "
                        f"not shape {arr.shape}")
    return _result(np.bitwise_or.reduce(arr.astype(np.uint64) << _LANE_SHIFTS, axis=-1))


def unpack4(words):
    """Split 64-bit SIMD-4 token words into their four binary16 lanes (inverse of pack4).

    Parameters
    ----------
    words : array_like of int
        Words in ``0..2**64-1``.

    Returns
    -------
    numpy.ndarray of uint16, shape ``words.shape + (4,)``
        Lane ``i`` is bits ``16*i+15 .. 16*i``.
    """
    arr = _as_uint(words, "words", 64)
    return ((arr[..., None] >> _LANE_SHIFTS) & np.uint64(0xFFFF)).astype(np.uint16)


def _simd4(op, names, words):
    """Apply a binary16 operation lane-wise to SIMD-4 words and pack the result."""
    lanes = [unpack4(_as_uint(w, n, 64)) for n, w in zip(names, words)]
    return pack4(op(*lanes))


def simd4_add(a, b):
    """Add SIMD-4 words lane-wise (see :func:`add`); returns uint64 words."""
    return _simd4(add, "ab", (a, b))


def simd4_sub(a, b):
    """Subtract SIMD-4 words lane-wise (see :func:`sub`); returns uint64 words."""
    return _simd4(sub, "ab", (a, b))


def simd4_mul(a, b):
    """Multiply SIMD-4 words lane-wise (see :func:`mul`); returns uint64 words."""
    return _simd4(mul, "ab", (a, b))


def simd4_fma(a, b, c):
    """Compute ``a * b + c`` on SIMD-4 words lane-wise (see :func:`fma`); returns uint64 words."""
    return _simd4(fma, "abc", (a, b, c))


def simd4_max(a, b):
    """Return the lane-wise ``maximum`` of SIMD-4 words (see :func:`maximum`) as uint64 words."""
    return _simd4(maximum, "ab", (a, b))


def positive_zeros(values):
    """Return a binary16 copy of ``values`` with every ``-0.0`` made ``+0.0``.

    A weight of either zero is not stored (FD-CSR, the sparse graphs, nnz and density count
    both as zero); making them one value where weights enter keeps every later test of "is
    this weight stored" a test of its bits against ``0x0000``.
    """
    out = np.array(values, dtype=np.float16, copy=True)
    out[out == 0] = 0                          # -0.0 == 0 is true: both become +0.0
    return out


def to_weights(values, what):
    """Return finite real ``values`` as binary16 weights: rounded to nearest even, both zeros
    ``+0.0`` (:func:`positive_zeros`), and the number of non-zero values that binary16 rounded
    to zero (underflow), for a warning naming ``what``.  Overflow is the caller's check."""
    arr = np.asarray(values)
    with np.errstate(over="ignore", under="ignore"):
        half = positive_zeros(arr.astype(np.float16))
    flushed = int(np.count_nonzero((arr != 0) & (half == 0)))
    return half, flushed
