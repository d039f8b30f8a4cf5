"""Prove ``sw.spec.fp16`` bit-exact: against Berkeley SoftFloat and an exact rational reference.

Two independent references:

* Berkeley SoftFloat 3 (``softfloatpy``: ``f16_add``, ``f16_mul``, ``f16_mul_add``) in
  round-to-nearest-even; any NaN it returns must be ``QNAN`` (0x7E00) from us.
* ``_exact_*`` below: operands decoded exactly into ``fractions.Fraction``, the IEEE special
  cases written out, the exact result rounded to binary16 (ties to even, subnormals, overflow).

Random tests draw bit patterns so that every exponent class (zero, subnormal, each binade,
infinity, NaN) and the hard relations between operands (cancellation, near ties, tiny product
against a large addend and the reverse, results near underflow and overflow) are well covered.
They print their seed; set ``FDPU_SEED`` to replay another one.  ``-m slow`` runs millions.
"""

import os
from fractions import Fraction

import numpy as np
import pytest
import softfloatpy as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.spec import fp16
from sw.spec.errors import FdpuError

SEED = int(os.environ.get("FDPU_SEED", "20250516"))
QNAN = fp16.QNAN

# --------------------------------------------------------------------------------------------
# Reference 1: Berkeley SoftFloat.

sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
_SF = [sf.Float16.from_bytes(i.to_bytes(2, "big")) for i in range(1 << 16)]
_SF_OPS = {"add": sf.f16_add, "sub": sf.f16_sub, "mul": sf.f16_mul, "fma": sf.f16_mul_add}
_OURS = {"add": fp16.add, "sub": fp16.sub, "mul": fp16.mul, "fma": fp16.fma}


def _canonical(bits):
    """Map every NaN pattern to QNAN (SoftFloat's default NaN depends on its build)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return np.where((bits & 0x7FFF) > 0x7C00, np.uint16(QNAN), bits)


def _softfloat(op, *operands):
    """Return SoftFloat's results for bit-pattern arrays (broadcast), NaNs canonical."""
    sf.set_rounding_mode(sf.RoundingMode.NEAR_EVEN)
    arrays = np.broadcast_arrays(*[np.asarray(x, dtype=np.uint16) for x in operands])
    fn, t = _SF_OPS[op], _SF
    lists = [a.ravel().tolist() for a in arrays]
    if op == "fma":
        raw = b"".join([fn(t[x], t[y], t[z]).to_bytes() for x, y, z in zip(*lists)])
    else:
        raw = b"".join([fn(t[x], t[y]).to_bytes() for x, y in zip(*lists)])
    out = np.frombuffer(raw, dtype=">u2").astype(np.uint16).reshape(arrays[0].shape)
    return _canonical(out)


# --------------------------------------------------------------------------------------------
# Reference 2: exact rational arithmetic.

_NAN, _INF, _FIN = "nan", "inf", "fin"


def _decode_exact(bits):
    """Return (kind, negative, magnitude as Fraction) for one bit pattern."""
    bits = int(bits)
    neg = bool(bits >> 15)
    exp, frac = (bits >> 10) & 0x1F, bits & 0x3FF
    if exp == 0x1F:
        return (_NAN, neg, None) if frac else (_INF, neg, None)
    if exp == 0:
        return _FIN, neg, Fraction(frac, 1 << 24)
    return _FIN, neg, Fraction(1024 + frac, 1 << 25) * Fraction(2) ** exp


def _round_exact(neg, mag):
    """Round an exact non-negative Fraction to binary16 (RNE) and attach the sign."""
    sign = 0x8000 if neg else 0
    if mag == 0:
        return sign
    k = mag * (1 << 24)  # in units of the smallest subnormal
    t = k.numerator.bit_length() - k.denominator.bit_length()
    if Fraction(2) ** t > k:
        t -= 1  # now 2**t <= k < 2**(t+1)
    qe = max(t - 10, 0)  # quantum 2**qe units: 11 significant bits, or the subnormal grid
    n = k / (1 << qe)
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    units = whole << qe
    if units > 65504 * (1 << 24):
        return sign | 0x7C00
    if units < 1024:
        return sign | units
    e = units.bit_length() - 1
    return sign | ((e - 9) << 10) | ((units >> (e - 10)) - 1024)


def _signed(neg, mag):
    return -mag if neg else mag


def _exact_add(a, b):
    ka, na, ma = _decode_exact(a)
    kb, nb, mb = _decode_exact(b)
    if _NAN in (ka, kb):
        return QNAN
    if ka == _INF and kb == _INF:
        return QNAN if na != nb else (0xFC00 if na else 0x7C00)
    if _INF in (ka, kb):
        return 0xFC00 if (na if ka == _INF else nb) else 0x7C00
    s = _signed(na, ma) + _signed(nb, mb)
    if s == 0:
        return 0x8000 if (na and nb and ma == 0 and mb == 0) else 0
    return _round_exact(s < 0, abs(s))


def _exact_mul(a, b):
    ka, na, ma = _decode_exact(a)
    kb, nb, mb = _decode_exact(b)
    neg = na != nb
    if _NAN in (ka, kb):
        return QNAN
    if _INF in (ka, kb):
        if (ka == _FIN and ma == 0) or (kb == _FIN and mb == 0):
            return QNAN
        return 0xFC00 if neg else 0x7C00
    return _round_exact(neg, ma * mb)


def _exact_fma(a, b, c):
    ka, na, ma = _decode_exact(a)
    kb, nb, mb = _decode_exact(b)
    kc, nc, mc = _decode_exact(c)
    if _NAN in (ka, kb, kc):
        return QNAN
    np_ = na != nb
    if _INF in (ka, kb):
        if (ka == _FIN and ma == 0) or (kb == _FIN and mb == 0):
            return QNAN
        if kc == _INF and nc != np_:
            return QNAN
        return 0xFC00 if np_ else 0x7C00
    if kc == _INF:
        return 0xFC00 if nc else 0x7C00
    mp = ma * mb
    s = _signed(np_, mp) + _signed(nc, mc)
    if s == 0:
        return 0x8000 if (np_ and nc and mp == 0 and mc == 0) else 0
    return _round_exact(s < 0, abs(s))


def _exact_sub(a, b):
    return _exact_add(a, b ^ 0x8000)  # IEEE: a - b is a + (-b), signed zeros included


_EXACT = {"add": _exact_add, "sub": _exact_sub, "mul": _exact_mul, "fma": _exact_fma}


def _exact(op, *operands):
    arrays = np.broadcast_arrays(*[np.asarray(x, dtype=np.uint16) for x in operands])
    fn = _EXACT[op]
    out = [fn(*args) for args in zip(*[a.ravel().tolist() for a in arrays])]
    return np.array(out, dtype=np.uint16).reshape(arrays[0].shape)


# --------------------------------------------------------------------------------------------
# Operand generators.


def _rng(label):
    """Return a generator for one test; the seed is printed (shown by pytest on failure)."""
    print(f"{label}: seed {SEED} (set FDPU_SEED to change)")
    return np.random.default_rng([SEED, sum(map(ord, label))])


_EDGE_FRACS = np.array([0, 1, 2, 0x1FF, 0x200, 0x201, 0x3FE, 0x3FF])


def _make(rng, exp_field):
    """Return patterns with the given exponent fields (clipped to 0..31), random sign/fraction."""
    exp_field = np.clip(exp_field, 0, 31).astype(np.int64)
    n = exp_field.shape[0]
    frac = np.where(rng.random(n) < 0.25, rng.choice(_EDGE_FRACS, n), rng.integers(0, 1024, n))
    sign = rng.integers(0, 2, n)
    return ((sign << 15) | (exp_field << 10) | frac).astype(np.uint16)


def _sample(rng, n):
    """Return patterns: 1/4 uniform, 3/4 with a uniform exponent field (each class ~1/32)."""
    strat = _make(rng, rng.integers(0, 32, n))
    return np.where(rng.random(n) < 0.25, rng.integers(0, 1 << 16, n), strat).astype(np.uint16)


def _exp_field(bits):
    return (np.asarray(bits, dtype=np.int64) >> 10) & 0x1F


def _nudge(rng, bits, spread):
    """Return patterns a few steps (in bit-pattern order, same sign) away from ``bits``."""
    mag = np.asarray(bits, dtype=np.int64) & 0x7FFF
    mag = np.clip(mag + rng.integers(-spread, spread + 1, mag.shape), 0, 0x7C00)
    return ((np.asarray(bits, dtype=np.int64) & 0x8000) | mag).astype(np.uint16)


def _operands(rng, op, n):
    """Return operand arrays for ``op`` mixing uniform and adversarial relations."""
    a = _sample(rng, n)
    cls = rng.integers(0, 4, n)
    # b: independent; same exponent neighbourhood; -a nudged (cancellation); result at the
    # edges (for mul/fma: product exponent near underflow, the subnormal range or overflow).
    edge_target = rng.choice(np.array([-12, -6, -3, -1, 0, 1, 2, 29, 30, 31, 32]), n)
    b = np.select(
        [cls == 0, cls == 1, cls == 2],
        [_sample(rng, n),
         _make(rng, _exp_field(a) + rng.integers(-12, 13, n)),
         _nudge(rng, a ^ 0x8000, 4)],
        _make(rng, edge_target - _exp_field(a) + 15),
    ).astype(np.uint16)
    if op == "add":
        return a, b
    if op == "sub":
        return a, b ^ 0x8000
    if op == "mul":
        return a, np.where(cls == 2, _sample(rng, n), b).astype(np.uint16)
    # c: independent; near -a*b (cancellation leaves the product's rounding error); at the
    # product's exponent +-12; far above the product (tiny p vs c) or far below it.
    p = fp16.mul(a, b)
    pe = _exp_field(a) + _exp_field(b) - 15
    ccls = rng.integers(0, 5, n)
    c = np.select(
        [ccls == 0, ccls == 1, ccls == 2, ccls == 3],
        [_sample(rng, n),
         _nudge(rng, p ^ 0x8000, 3),
         _make(rng, pe + rng.integers(-12, 13, n)),
         _make(rng, pe + rng.integers(11, 40, n))],
        _make(rng, pe - rng.integers(11, 40, n)),
    ).astype(np.uint16)
    return a, b, c


def _check(op, operands, reference, label):
    got = np.asarray(_OURS[op](*operands), dtype=np.uint16)
    want = reference(op, *operands)
    bad = np.flatnonzero(got.ravel() != want.ravel())
    if bad.size:
        arrays = np.broadcast_arrays(*operands)
        rows = [" ".join(f"{int(x.ravel()[i]):#06x}" for x in arrays)
                + f" -> got {int(got.ravel()[i]):#06x} want {int(want.ravel()[i]):#06x}"
                for i in bad[:10]]
        pytest.fail(f"{label}: {bad.size} of {got.size} {op} results differ (seed {SEED}):\n"
                    + "\n".join(rows))


# --------------------------------------------------------------------------------------------
# The exact reference itself.


def test_exact_reference_decodes_every_pattern_like_to_float():
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = fp16.to_float(bits)
    for i in range(0, 1 << 16, 7):  # every 7th pattern keeps this fast; all classes hit
        kind, neg, mag = _decode_exact(i)
        if kind == _NAN:
            assert np.isnan(got[i])
        elif kind == _INF:
            assert got[i] == (-np.inf if neg else np.inf)
        else:
            assert Fraction(float(got[i])) == _signed(neg, mag)
            assert np.signbit(got[i]) == neg


def test_exact_rounding_known_values():
    assert _round_exact(False, Fraction(1)) == 0x3C00
    assert _round_exact(False, Fraction(65504)) == 0x7BFF
    assert _round_exact(False, Fraction(65520)) == 0x7C00  # tie with 65536: even is inf
    assert _round_exact(False, Fraction(65520) - Fraction(1, 1 << 40)) == 0x7BFF
    assert _round_exact(False, Fraction(1, 1 << 25)) == 0x0000  # half the min subnormal
    assert _round_exact(True, Fraction(3, 1 << 25)) == 0x8002  # 1.5 units: tie to 2
    assert _round_exact(False, Fraction(1, 1 << 14)) == 0x0400
    assert _round_exact(False, Fraction(2047, 1 << 25)) == 0x0400  # 1023.5 units -> 1024


# --------------------------------------------------------------------------------------------
# Targeted classes, checked against both references.


def _both(op, *operands, label):
    _check(op, operands, _softfloat, label + " vs SoftFloat")
    _check(op, operands, _exact, label + " vs exact")


def test_known_results():
    assert fp16.add(0x3C00, 0x3C00) == 0x4000
    assert fp16.add(0x3C00, 0x1000) == 0x3C00  # 1 + 2**-11: tie, stays on even 1.0
    assert fp16.add(0x3C01, 0x1000) == 0x3C02  # tie from odd: up to even
    assert fp16.add(0x7BFF, 0x4C00) == 0x7C00  # 65504 + 16 = 65520: tie -> inf
    assert fp16.add(0x7BFF, 0x4BFF) == 0x7BFF  # 65504 + 15.99
    assert fp16.add(0x0001, 0x8001) == 0x0000
    assert fp16.add(0x8000, 0x8000) == 0x8000
    assert fp16.add(0x0000, 0x8000) == 0x0000
    assert fp16.add(0x7C00, 0xFC00) == QNAN
    assert fp16.sub(0x7C00, 0x7C00) == QNAN
    assert fp16.mul(0x0000, 0xFC00) == QNAN
    assert fp16.mul(0x8000, 0x3C00) == 0x8000
    assert fp16.mul(0x0200, 0x3800) == 0x0100  # subnormal * 0.5, exact
    assert fp16.mul(0x0001, 0x3800) == 0x0000  # 2**-25: tie -> 0
    assert fp16.mul(0x0003, 0x3800) == 0x0002  # 1.5 units: tie -> 2
    assert fp16.mul(0x4200, fp16.from_float(683)) == 0x6800  # 2049: tie -> 2048
    assert fp16.mul(0x4700, fp16.from_float(293)) == 0x6802  # 2051: tie -> 2052
    assert fp16.fma(0x4700, fp16.from_float(293), 0x8001) == 0x6801  # 2051 - 2**-24 -> 2050
    assert fp16.fma(0x4700, fp16.from_float(293), 0x0001) == 0x6802
    assert fp16.fma(0x3C00, 0x3C00, 0xBC00) == 0x0000  # 1*1 - 1 = +0
    assert fp16.fma(0x8000, 0x3C00, 0x8000) == 0x8000  # -0 + -0
    assert fp16.fma(0x8000, 0x8000, 0x8000) == 0x0000  # +0 + -0
    assert fp16.fma(0x0001, 0x0001, 0x8000) == 0x0000  # 2**-48 rounds to +0
    assert fp16.fma(0x0001, 0x8001, 0x0000) == 0x8000  # -2**-48 rounds to -0
    assert fp16.fma(0x0001, 0x8001, 0x3C00) == 0x3C00  # 1 - 2**-48
    assert fp16.fma(0x0001, 0x8001, 0x3C01) == 0x3C01
    assert fp16.fma(0x7C00, 0x3C00, 0xFC00) == QNAN
    assert fp16.fma(0x7C00, 0x0000, 0x3C00) == QNAN
    assert fp16.fma(0x3C00, 0x3C00, 0x7E01) == QNAN
    assert fp16.fma(0x7BFF, 0x7BFF, 0xFC00) == 0xFC00  # finite overflow product + -inf


def test_nan_inputs_give_canonical_nan():
    nans = np.array([b for b in range(1 << 16) if (b & 0x7FFF) > 0x7C00], dtype=np.uint16)
    others = np.array([0, 0x8000, 0x3C00, 0x7C00, 0xFC00, 0x0001, 0x7BFF, 0x7E00])[:, None]
    for op in ("add", "mul"):
        assert np.all(_OURS[op](nans, others) == QNAN)
        assert np.all(_OURS[op](others, nans) == QNAN)
    assert np.all(fp16.fma(nans, others, 0x3C00) == QNAN)
    assert np.all(fp16.fma(0x3C00, others, nans) == QNAN)
    assert np.all(fp16.sub(nans, others) == QNAN)
    _both("add", nans[::50], others, label="NaN operands")


def test_invalid_operations():
    z = np.array([0x0000, 0x8000], dtype=np.uint16)
    inf = np.array([0x7C00, 0xFC00], dtype=np.uint16)
    _both("mul", z[:, None], inf, label="0 * inf")
    _both("add", inf[:, None], inf, label="inf + inf")
    finite = np.array([0x0000, 0x8000, 0x0001, 0x3C00, 0xFBFF])[:, None, None]
    _both("fma", inf[:, None], z, finite, label="inf * 0 + c")
    _both("fma", inf[:, None], np.array([0x3C00, 0x7BFF, 0x0001]), inf[:, None, None],
          label="inf * x +- inf")
    big = np.array([0x7BFF, 0xFBFF], dtype=np.uint16)
    _both("fma", big[:, None], np.array([0x7BFF, 0x5800]), inf[:, None, None],
          label="overflowing product + inf")


def test_exact_cancellation_gives_positive_zero():
    x = np.arange(0x7C00, dtype=np.uint16)  # every finite non-negative pattern
    assert np.all(fp16.add(x, x ^ 0x8000) == 0)
    assert np.all(fp16.add(x ^ 0x8000, x) == 0)
    assert np.all(fp16.sub(x, x) == 0)
    assert np.all(fp16.fma(x, 0x3C00, x ^ 0x8000) == 0)
    assert np.all(fp16.fma(x ^ 0x8000, 0xBC00, x ^ 0x8000) == 0)


def test_signed_zeros():
    zeros = np.array([0x0000, 0x8000], dtype=np.uint16)
    ys = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x3C00, 0xBC00], dtype=np.uint16)
    _both("add", zeros[:, None], zeros, label="+-0 + +-0")
    _both("mul", zeros[:, None], ys, label="+-0 * y")
    _both("fma", zeros[:, None, None], ys[:, None], zeros, label="+-0 * y + +-0")
    _both("fma", ys[:, None, None], zeros[:, None], zeros, label="y * +-0 + +-0")
    tiny = np.array([0x0001, 0x8001, 0x0100, 0x8100], dtype=np.uint16)
    _both("fma", tiny[:, None, None], tiny[:, None], zeros, label="underflowing product + 0")


def test_overflow_boundary():
    rng = _rng("overflow")
    n = 3000
    a = _make(rng, rng.integers(15, 31, n))
    # b so that |a*b| lands near 65504..65536: the exponent fields add up to ~30 + 15.
    b = _nudge(rng, fp16.from_float(65520.0 / np.abs(fp16.to_float(a))), 2)
    _both("mul", a, b, label="a*b near 65520")
    c = _nudge(rng, fp16.from_float(np.where(rng.random(n) < 0.5, 65520.0, -65520.0)
                                    - fp16.to_float(fp16.mul(a, b))), 3)
    _both("fma", a, b, c, label="a*b + c near 65520")
    top = np.arange(0x7B00, 0x7C01, dtype=np.uint16)
    _both("add", top[:, None], np.array([0x4BFF, 0x4C00, 0x4C01, 0x4800, 0x5000, 0x0001]),
          label="top binade + 8..32")


def test_subnormal_results():
    rng = _rng("subnormal")
    n = 3000
    sub = _make(rng, rng.integers(0, 3, n))
    _both("add", sub, _make(rng, rng.integers(0, 3, n)), label="small + small")
    a = _sample(rng, n)
    b = _make(rng, rng.integers(-12, 2, n) - _exp_field(a) + 15)
    _both("mul", a, b, label="product in the subnormal range")
    c = _make(rng, rng.integers(0, 3, n))
    _both("fma", a, b, c, label="subnormal product + subnormal c")


def test_ties():
    rng = _rng("ties")
    n = 3000
    # add: y is exactly half an ulp of x (a tie), or a quarter ulp, of either sign; half of
    # the y get a random fraction instead (near ties).
    x = _make(rng, rng.integers(13, 31, n)).astype(np.int64)
    for shift in (11, 12):
        frac = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 1024, n))
        y = (rng.integers(0, 2, n) << 15) | ((_exp_field(x) - shift) << 10) | frac
        _both("add", x, y, label=f"add x + 2**-{shift} x")
    # mul: products with exactly 12 significant bits (midpoints); odd 12-bit m = p * q.
    m = 2 * rng.integers(1024, 2048, n) + 1
    m = m[np.isin(m % 3, [0])]
    a = fp16.from_float(3.0 * 2.0 ** rng.integers(-20, 10, m.size))
    b = fp16.from_float((m // 3) * 2.0 ** rng.integers(-30, -2, m.size))
    _both("mul", a, b, label="product on a midpoint")
    # fma: a midpoint product plus a tiny c of either sign (the float32 double-rounding trap).
    c = _make(rng, rng.integers(0, 8, m.size))
    _both("fma", a, b, c, label="midpoint product + tiny c")


def test_fma_round_to_odd_cases():
    rng = _rng("round-to-odd")
    n = 4000
    # Tiny product against c: p + c is inexact in float64, TwoSum's error is non-zero.
    a = _make(rng, rng.integers(0, 6, n))
    b = _make(rng, rng.integers(0, 6, n))
    c = _make(rng, rng.integers(12, 31, n))
    p, cc = fp16.to_float(a) * fp16.to_float(b), fp16.to_float(c)
    s = p + cc
    err = (p - (s - (s - p))) + (cc - (s - p))
    assert np.count_nonzero(err) > n // 4, "the class should exercise inexact float64 sums"
    _both("fma", a, b, c, label="tiny product vs c")
    # Tiny c against the product, and c on the product's exponent (cancellation).
    a, b = _sample(rng, n), _sample(rng, n)
    _both("fma", a, b, _make(rng, rng.integers(0, 4, n)), label="tiny c vs product")
    _both("fma", a, b, _nudge(rng, fp16.mul(a, b) ^ 0x8000, 2), label="c ~ -a*b")


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_hypothesis_against_exact(a, b, c):
    assert int(fp16.add(a, b)) == _exact_add(a, b)
    assert int(fp16.mul(a, b)) == _exact_mul(a, b)
    assert int(fp16.fma(a, b, c)) == _exact_fma(a, b, c)


# --------------------------------------------------------------------------------------------
# Exhaustive and random checks against SoftFloat.

_FIXED = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3555, 0x3800, 0x3C00,
                   0xBC00, 0x3C01, 0xBBFF, 0x4248, 0x6800, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                   0x7E00], dtype=np.uint16)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_exhaustive_over_a_with_fixed_b(op):
    a = np.arange(1 << 16, dtype=np.uint16)
    _check(op, (a[None, :], _FIXED[:, None]), _softfloat, "every a with fixed b")


def test_exhaustive_fma_over_a_with_fixed_b_c():
    a = np.arange(1 << 16, dtype=np.uint16)
    bc = np.array([[0x3C00, 0x8000], [0x3C00, 0xBC00], [0x3555, 0x0001], [0x1400, 0xB401],
                   [0x7BFF, 0xFBFF]], dtype=np.uint16)
    _check("fma", (a[None, :], bc[:, :1], bc[:, 1:]), _softfloat, "every a with fixed b, c")


@pytest.mark.parametrize("op,n", [("add", 500_000), ("sub", 200_000), ("mul", 500_000),
                                  ("fma", 600_000)])
def test_random_against_softfloat(op, n):
    rng = _rng(f"random {op}")
    _check(op, _operands(rng, op, n), _softfloat, f"random {op}")


def test_random_against_exact():
    rng = _rng("random exact")
    for op, n in (("add", 3000), ("sub", 1000), ("mul", 3000), ("fma", 6000)):
        _check(op, _operands(rng, op, n), _exact, f"random {op} vs exact")


@pytest.mark.slow
@pytest.mark.parametrize("op", ["add", "mul", "fma"])
def test_random_against_softfloat_millions(op):
    n = int(os.environ.get("FDPU_FP16_SLOW_N", "30000000"))
    rng = _rng(f"slow {op}")
    chunk = 1_000_000
    for start in range(0, n, chunk):
        _check(op, _operands(rng, op, min(chunk, n - start)), _softfloat,
               f"slow random {op}, chunk at {start}")
    print(f"slow {op}: {n} cases bit-exact against SoftFloat")


# --------------------------------------------------------------------------------------------
# Conversions.


def test_maximum_known_results():
    # IEEE 754-2019 maximum on the cases that decide it: zeros, signs, subnormals, infinities,
    # NaNs, equal operands.
    pos0, neg0, one, neg_one = 0x0000, 0x8000, 0x3C00, 0xBC00
    cases = [(neg0, pos0, pos0), (pos0, neg0, pos0), (neg0, neg0, neg0), (neg_one, pos0, pos0),
             (neg_one, 0xC000, neg_one), (0x0001, 0x0002, 0x0002), (0x8001, 0x8002, 0x8001),
             (0x8001, neg0, neg0), (0x7C00, 0x7BFF, 0x7C00), (0xFC00, 0xFBFF, 0xFBFF),
             (0x7C01, one, fp16.QNAN), (one, 0xFE00, fp16.QNAN), (0xFC00, 0x7D00, fp16.QNAN),
             (one, one, one), (0x7BFF, 0x7BFF, 0x7BFF)]
    a, b, want = (np.array(x, dtype=np.uint16) for x in zip(*cases))
    assert fp16.maximum(a, b).tolist() == want.tolist()
    assert fp16.maximum(b, a).tolist() == want.tolist()        # commutative, zeros included
    # Exact: the result is one of the operands (or the NaN), and not below either.
    rng = np.random.default_rng([SEED, 7])
    x, y = (rng.integers(0, 1 << 16, 20000).astype(np.uint16) for _ in range(2))
    got = fp16.maximum(x, y)
    nan = fp16.is_nan(x) | fp16.is_nan(y)
    assert (got[nan] == fp16.QNAN).all()
    assert ((got == x) | (got == y))[~nan].all()
    fx, fy, fg = fp16.to_float(x), fp16.to_float(y), fp16.to_float(got)
    assert ((fg >= fx) & (fg >= fy))[~nan].all()
    # ReLU: maximum(x, +0).
    relu = fp16.maximum(x, pos0)
    assert ((relu == pos0) | (fp16.to_float(relu) > 0))[~fp16.is_nan(x)].all()


def _exact_maximum(a, b):
    """IEEE 754-2019 maximum of two patterns, written out with Python floats."""
    x, y = float(fp16.to_float(a)), float(fp16.to_float(b))
    if x != x or y != y:
        return QNAN
    if x == y == 0:
        return b if a & 0x8000 else a           # +0 unless both are -0
    return a if x > y else b if y > x else a


@pytest.mark.parametrize("b", [0x0000, 0x8000, 0x0001, 0x83FF, 0x3C00, 0xBC00, 0x7BFF, 0x7C00,
                               0xFC00, 0x7E00, 0xFD01])
def test_maximum_exhaustive_over_a(b):
    a = np.arange(1 << 16, dtype=np.uint16)
    want = np.array([_exact_maximum(int(x), b) for x in a], dtype=np.uint16)
    assert np.array_equal(fp16.maximum(a, b), want)
    assert np.array_equal(fp16.maximum(b, a), want)


def test_to_float_is_exact_and_from_float_inverts_it():
    bits = np.arange(1 << 16, dtype=np.uint16)
    values = fp16.to_float(bits)
    assert values.dtype == np.float64
    assert np.isnan(values).sum() == 2046
    assert np.array_equal(fp16.is_nan(bits), np.isnan(values))
    back = fp16.from_float(values)
    assert np.array_equal(back, _canonical(bits))
    assert fp16.to_float(0x7BFF) == 65504.0 and fp16.to_float(0x0001) == 2.0 ** -24


def test_from_float_rounds_every_midpoint_to_even():
    # Rounding is correct everywhere iff it is monotone and every boundary is right: check
    # every midpoint between adjacent finite values, and its float64 neighbours.
    v = fp16.to_float(np.arange(0x7C00, dtype=np.uint16))
    lo = np.arange(0x7BFF, dtype=np.uint16)
    mid = (v[:-1] + v[1:]) / 2
    even = np.where(lo % 2 == 0, lo, lo + 1)
    for sign, sbit in ((1.0, 0), (-1.0, 0x8000)):
        assert np.array_equal(fp16.from_float(sign * mid), even | sbit)
        assert np.array_equal(fp16.from_float(sign * np.nextafter(mid, 0)), lo | sbit)
        assert np.array_equal(fp16.from_float(sign * np.nextafter(mid, np.inf)), (lo + 1) | sbit)
    top = np.array([65504.0, np.nextafter(65520.0, 0), 65520.0, 1e300, np.inf, -65520.0])
    assert fp16.from_float(top).tolist() == [0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0x7C00, 0xFC00]
    tiny = np.array([2.0 ** -25, np.nextafter(2.0 ** -25, 1), 5e-324, -0.0, -2.0 ** -26])
    assert fp16.from_float(tiny).tolist() == [0x0000, 0x0001, 0x0000, 0x8000, 0x8000]


def test_from_float_other_dtypes():
    assert fp16.from_float(np.float32(1.5)) == 0x3E00
    assert fp16.from_float(np.float16(-2.0)) == 0xC000
    assert fp16.from_float([1, 2, 70000]).tolist() == [0x3C00, 0x4000, 0x7C00]
    assert fp16.from_float(np.nan) == QNAN
    assert fp16.from_float(-np.nan) == QNAN
    # A longdouble just above a binary16 midpoint must round up (one rounding, not two).
    x = np.longdouble(1) + np.longdouble(2.0 ** -11) + np.longdouble(2.0) ** -60
    want = 0x3C01 if np.finfo(np.longdouble).nmant > 60 else 0x3C00
    assert fp16.from_float(x) == want


def test_scalar_and_shape_results():
    r = fp16.add(0x3C00, 0x3C00)
    assert isinstance(r, np.uint16) and r == 0x4000
    r = fp16.fma([[1, 2]], [[3], [4]], np.uint8(0))
    assert r.dtype == np.uint16 and r.shape == (2, 2)
    assert fp16.mul(np.arange(0, dtype=np.int32), 1).shape == (0,)
    assert fp16.add(np.uint64(0x3C00), 2 ** 15).dtype == np.uint16
    assert fp16.add([0x3C00, 0xFFFF], np.array([0, 1], dtype=np.int8)).tolist() == [0x3C00, QNAN]


@pytest.mark.parametrize("bad,what", [
    (1.0, "holds float"), (-1, "holds -1"), (0x10000, "holds 65536"), ([1, 2.5], "float"),
    ("1", "dtype <U1"), (True, "dtype bool"), ([[1], [1, 2]], "cannot read"),
    (2 ** 70, "outside"), (np.array([1, -3], dtype=np.int64), "holds -3"),
    ([1, None], "NoneType"),
])
def test_invalid_operands_raise(bad, what):
    for call, name in ((lambda x: fp16.add(x, 1), "a"), (lambda x: fp16.mul(1, x), "b"),
                       (lambda x: fp16.fma(1, 1, x), "c"), (lambda x: fp16.to_float(x), "bits")):
        with pytest.raises(FdpuError, match=rf"^{name} ") as exc:
            call(bad)
        assert what in str(exc.value)
        assert "0..0xFFFF" in str(exc.value)


def test_invalid_from_float_and_pack_inputs():
    with pytest.raises(FdpuError, match="x must hold real numbers"):
        fp16.from_float("1.0")
    with pytest.raises(FdpuError, match="x must hold real numbers"):
        fp16.from_float(1 + 2j)
    with pytest.raises(FdpuError, match=r"lanes must have shape \(\.\.\., 4\)"):
        fp16.pack4([1, 2, 3])
    with pytest.raises(FdpuError, match="lanes"):
        fp16.pack4([1, 2, 3, -4])
    with pytest.raises(FdpuError, match="words holds -1"):
        fp16.unpack4(-1)
    with pytest.raises(FdpuError, match="0x10000000000000000|0xFFFFFFFFFFFFFFFF"):
        fp16.unpack4(2 ** 64)
    with pytest.raises(FdpuError, match="c must hold"):
        fp16.simd4_fma(1, 2, 0.5)


# --------------------------------------------------------------------------------------------
# SIMD-4 words.


def test_pack4_layout_and_round_trip():
    assert fp16.pack4([0x1111, 0x2222, 0x3333, 0x4444]) == 0x4444_3333_2222_1111
    assert isinstance(fp16.pack4([1, 2, 3, 4]), np.uint64)
    assert fp16.unpack4(0xFFFF_0000_8000_0001).tolist() == [1, 0x8000, 0, 0xFFFF]
    assert fp16.unpack4(2 ** 64 - 1).tolist() == [0xFFFF] * 4
    rng = _rng("pack4")
    lanes = rng.integers(0, 1 << 16, (5, 7, 4)).astype(np.uint16)
    words = fp16.pack4(lanes)
    assert words.dtype == np.uint64 and words.shape == (5, 7)
    assert np.array_equal(fp16.unpack4(words), lanes)
    w = rng.integers(0, 2 ** 63, 100, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    assert np.array_equal(fp16.pack4(fp16.unpack4(w)), w)
    assert np.array_equal(fp16.unpack4(w.tolist()), fp16.unpack4(w))  # big ints in a list


def test_simd4_ops_are_lane_wise():
    rng = _rng("simd4")
    n = 2000
    la, lb, lc = (_sample(rng, 4 * n).reshape(n, 4) for _ in range(3))
    wa, wb, wc = fp16.pack4(la), fp16.pack4(lb), fp16.pack4(lc)
    assert np.array_equal(fp16.unpack4(fp16.simd4_add(wa, wb)), fp16.add(la, lb))
    assert np.array_equal(fp16.unpack4(fp16.simd4_sub(wa, wb)), fp16.sub(la, lb))
    assert np.array_equal(fp16.unpack4(fp16.simd4_mul(wa, wb)), fp16.mul(la, lb))
    assert np.array_equal(fp16.unpack4(fp16.simd4_fma(wa, wb, wc)), fp16.fma(la, lb, lc))
    assert np.array_equal(fp16.unpack4(fp16.simd4_max(wa, wb)), fp16.maximum(la, lb))
    # Against SoftFloat directly, and broadcasting a scalar word.
    _check("fma", (la, lb, lc), _softfloat, "simd4 lanes")
    # a * 1 + -0 is a itself for every non-NaN a (signed zeros included), given as ints.
    one, neg_zero = int(fp16.pack4([fp16.ONE] * 4)), int(fp16.pack4([fp16.NEG_ZERO] * 4))
    assert np.array_equal(fp16.simd4_fma(wa, one, neg_zero), fp16.pack4(_canonical(la)))


def test_round_to_odd_step():
    # Binary16 fma never needs it (docs/fp16.md), so check the helper directly: s is the
    # float64 rounding of s + e; the result is the odd neighbour enclosing s + e.
    s = np.array([1.0, 1.0, -1.0, -1.0, 1.0 + 2.0 ** -52, 3.0, np.inf, 0.0])
    e = np.array([2.0 ** -60, -2.0 ** -60, 2.0 ** -60, -2.0 ** -60, 2.0 ** -60, 0.0, 1.0, 0.0])
    want = np.array([1.0 + 2.0 ** -52, 1.0 - 2.0 ** -53, -1.0 + 2.0 ** -53, -1.0 - 2.0 ** -52,
                     1.0 + 2.0 ** -52, 3.0, np.inf, 0.0])
    assert np.array_equal(fp16._round_to_odd(s, e), want)
