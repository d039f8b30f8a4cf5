"""SIMD-4 binary16 fused multiply-add unit.

Contract
--------
* **Operation.** Each operation carries one :class:`FpOp` and three 64-bit operands ``a``,
  ``b``, ``c``, each four IEEE 754 binary16 lanes (lane 0 in bits 15:0).  Every lane computes,
  independently, with the same op:

  ========  =================  ===============================================
  op        result             how
  ========  =================  ===============================================
  FMADD     ``a * b + c``      fused: exact product and sum, **one** rounding
  FMUL      ``a * b``          ``a * b + (-0)``  (keeps the sign of ``a * b``)
  FADD      ``a + b``          ``a * 1.0 + b``
  FSUB      ``a - b``          ``a * 1.0 + (-b)``
  MOV       ``a``              raw bit copy of ``a`` (FIMM, moves; NaNs untouched)
  MAX       ``maximum(a, b)``  IEEE 754-2019 ``maximum``: the larger operand's bits
                               (``-0 < +0``), chosen in S1; NaN if either is NaN
  ========  =================  ===============================================

  Rounding is round-to-nearest-even; subnormal inputs and outputs are supported (no flush to
  zero); overflow gives a signed infinity; every NaN result of an arithmetic op is the
  canonical quiet NaN ``0x7E00``.  Zero results follow IEEE 754: an exact zero sum of operands
  of opposite sign is ``+0``, ``-0 + -0`` is ``-0``.  Results are bit-exact with
  :mod:`sw.spec.fp16`.
* **Handshake.** ``i_op`` and ``o_res`` are :mod:`amaranth.lib.stream` streams.  The ``tag``
  of an operation is returned unchanged with its result (the PE routes results with it).
* **Latency.** :data:`LATENCY` = 4 cycles from an ``i_op`` transfer to ``o_res.valid``
  (with ``o_res.ready`` held high).
* **Throughput.** One SIMD-4 operation per cycle.  Each stage holds at most one operation and
  advances when the stage after it is empty or advancing; bubbles are squeezed out while
  ``o_res`` stalls.  ``i_op.ready`` depends combinationally on ``o_res.ready`` (a chain of
  four ORs), never on ``i_op.valid``.
* **Ordering.** Results leave in the order operations entered; none is lost or duplicated.

Pipeline (one lane; the four lanes are identical)::

    i_op ─┬─ S1: op decode, operand unpack, 11x11 multiply, exponent sums, specials
          │        prod[22] psh[6] sigc[11] csh[6] signs, nan/inf flags
          ├─ S2: align product and addend in an 81-bit fixed-point window, add / subtract
          │        mag[81] sign
          ├─ S3: leading-zero count (balanced tree), normalise (shift capped at the
          │        subnormal boundary), fold the tail into guard + sticky
          │        man[11] guard sticky exp[6]
          └─ S4: round to nearest even, pack, overflow to inf, specials, MOV  ─> o_res

MOV and MAX bypass the arithmetic: S1 selects the result (``a``, or the larger of ``a`` and
``b``: one 15-bit magnitude comparison per lane) and S2-S4 carry it beside the datapath, so
every op has the same latency and the pipeline stays in order.

Why an 81-bit window: binary16's exponent range is so narrow that the exact value of
``a * b + c`` is an integer multiple of 2^-48 below 2^81 * 2^-48.  The unit adds product and
addend *exactly* in that window, so there is no alignment sticky logic and only one rounding,
after normalisation (``docs/arith.md``).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.pe.alu import check_tag_width

__all__ = ["FpOp", "F16", "SIMD4", "LATENCY", "fpu_op_layout", "fpu_res_layout", "SimdFpu"]

#: Cycles from an ``i_op`` transfer to the result being valid on ``o_res``.
LATENCY = 4

#: One IEEE 754 binary16 number.
F16 = data.StructLayout({"frac": 10, "exp": 5, "sign": 1})

#: Four binary16 lanes in a 64-bit token, lane 0 in bits 15:0.
SIMD4 = data.ArrayLayout(F16, 4)

_ONE = 0x3C00
_NEG_ZERO = 0x8000
_QNAN = 0x7E00
_INF = 0x7C00

# Fixed-point window of the exact sum: bit i weighs 2^(i - 48).
_WINDOW = 81
# Normalisation never shifts the leading one above the subnormal boundary: a result whose
# leading one sits below bit 34 (2^-14) is subnormal and keeps its LSB at bit 24 (2^-24).
_MAX_NORM_SHIFT = _WINDOW - 1 - 34


class FpOp(enum.Enum, shape=3):
    """Operation of :class:`SimdFpu` (the same for all four lanes)."""
    FMADD = 0
    FMUL = 1
    FADD = 2
    FSUB = 3
    MOV = 4
    MAX = 5


def fpu_op_layout(tag_width):
    """Return the payload layout of :class:`SimdFpu`'s ``i_op`` stream.

    Parameters
    ----------
    tag_width : int
        Width of the pass-through ``tag`` field.
    """
    check_tag_width(tag_width)
    return data.StructLayout({"op": FpOp, "a": SIMD4, "b": SIMD4, "c": SIMD4,
                              "tag": tag_width})


def fpu_res_layout(tag_width):
    """Return the payload layout of :class:`SimdFpu`'s ``o_res`` stream.

    Parameters
    ----------
    tag_width : int
        Width of the pass-through ``tag`` field.
    """
    check_tag_width(tag_width)
    return data.StructLayout({"result": SIMD4, "tag": tag_width})


_S1_LANE = data.StructLayout({
    "prod": 22,        # significand product, exact
    "psh": 6,          # its position in the window: (ea - 1) + (eb - 1)
    "sigc": 11,        # addend significand
    "csh": 5,          # its position in the window: 24 + (ec - 1)
    "sp": 1,           # sign of the product
    "sc": 1,           # sign of the addend
    "nan": 1,
    "inf": 1,
    "inf_sign": 1,
})

_S2_LANE = data.StructLayout({
    "mag": _WINDOW,    # |a * b + c|, exact, bit i weighs 2^(i - 48)
    "sign": 1,
    "nan": 1,
    "inf": 1,
    "inf_sign": 1,
})

_S3_LANE = data.StructLayout({
    "man": 11,         # significand with hidden bit (0 for subnormals), truncated
    "guard": 1,
    "sticky": 1,
    "exp": 6,          # biased exponent - 1 of the truncated result, if it is normal
    "sign": 1,
    "nan": 1,
    "inf": 1,
    "inf_sign": 1,
})


def _zext(value, width):
    """Zero-extend ``value`` to ``width`` bits (operands of one operator have one width, so
    the emitted Verilog is free of Verilator WIDTH warnings)."""
    return Cat(value, Const(0, width - len(value)))


def _shift_left(value, amount, width):
    """Return ``value`` shifted left by ``amount`` bits, truncated or zero-extended to ``width``.

    One shift operator (synthesis makes it a log shifter): a chain of constant shifts and
    multiplexers written out costs Verilator a wide shift and select per stage, which made the
    FPU the PE's most expensive part to simulate.  Written as a right shift by ``~amount`` of
    ``value`` placed above ``2**len(amount) - 1`` zeros: a right shift keeps its operand's
    width, so the emitted Verilog has no WIDTH warning (a variable left shift widens its
    result).  ``value``'s top bit must not be a constant, and the shifted operand is at least
    ``width`` wide: Yosys drops constant top bits, and the operators reading the result would
    then see a narrower operand."""
    while (1 << len(amount)) - 1 + len(value) < width:    # (so no constant top bits)
        amount = Cat(amount, Const(0, 1))
    pad = (1 << len(amount)) - 1
    return (Cat(Const(0, pad), value) >> ~amount)[:width]


def _unpack(x):
    """Return (significand, effective exponent, is_zero, is_inf, is_nan) of a binary16 view."""
    exp_zero = ~x.exp.any()
    exp_max = x.exp.all()
    frac_zero = ~x.frac.any()
    sig = Cat(x.frac, ~exp_zero)
    eff_exp = Mux(exp_zero, 1, x.exp)
    return sig, eff_exp, exp_zero & frac_zero, exp_max & frac_zero, exp_max & ~frac_zero


def _lzc(value):
    """Return (all_zero, leading_zero_count) of ``value`` (power-of-two width), as a tree."""
    width = len(value)
    if width == 1:
        return ~value[0], Const(0, 0)
    half = width // 2
    lo_zero, lo_count = _lzc(value[:half])
    hi_zero, hi_count = _lzc(value[half:])
    count = Mux(hi_zero, Cat(lo_count, Const(1, 1)), Cat(hi_count, Const(0, 1)))
    return hi_zero & lo_zero, count


def _maximum(m, a, b, name):
    """Return IEEE 754-2019 ``maximum(a, b)`` of one lane: the larger operand's bits, ``-0`` below
    ``+0``; the canonical NaN if either operand is NaN."""
    result = Signal(16, name=name)
    nan = (a.exp.all() & a.frac.any()) | (b.exp.all() & b.frac.any())
    mag_a = Cat(a.frac, a.exp)
    mag_b = Cat(b.frac, b.exp)
    # Signs differ: the positive one (so +0 beats -0).  Same sign: the larger magnitude if
    # positive, the smaller if negative; equal operands have equal bits, either will do.
    a_wins = Mux(a.sign != b.sign, ~a.sign, (mag_a > mag_b) ^ a.sign)
    m.d.comb += result.eq(Mux(nan, Const(_QNAN, 16),
                              Mux(a_wins, a.as_value(), b.as_value())))
    return result


def _stage1(m, op, a, b, c, s1):
    """Unpack the operands of one lane, multiply, and detect special results."""
    one = F16(Const(_ONE, 16))
    b_eff = Signal(F16)
    c_eff = Signal(F16)
    with m.Switch(op):
        with m.Case(FpOp.FMUL):
            m.d.comb += [b_eff.eq(b), c_eff.eq(_NEG_ZERO)]
        with m.Case(FpOp.FADD):
            m.d.comb += [b_eff.eq(one), c_eff.eq(b)]
        with m.Case(FpOp.FSUB):
            m.d.comb += [b_eff.eq(one), c_eff.eq(b), c_eff.sign.eq(~b.sign)]
        with m.Default():
            m.d.comb += [b_eff.eq(b), c_eff.eq(c)]

    sig_a, exp_a, zero_a, inf_a, nan_a = _unpack(a)
    sig_b, exp_b, zero_b, inf_b, nan_b = _unpack(b_eff)
    sig_c, exp_c, _, inf_c, nan_c = _unpack(c_eff)
    sp = a.sign ^ b_eff.sign
    inf_p = inf_a | inf_b
    invalid = (inf_a & zero_b) | (zero_a & inf_b) | (inf_p & inf_c & (sp != c_eff.sign))
    nan_in = (nan_a | nan_b) | nan_c
    return [
        s1.prod.eq(sig_a * sig_b),
        s1.psh.eq((exp_a - 1)[:5] + (exp_b - 1)[:5]),
        s1.sigc.eq(sig_c),
        s1.csh.eq((exp_c - 1)[:5]),
        s1.sp.eq(sp),
        s1.sc.eq(c_eff.sign),
        s1.nan.eq(nan_in | invalid),
        s1.inf.eq(inf_p | inf_c),
        s1.inf_sign.eq(Mux(inf_p, sp, c_eff.sign)),
    ]


def _stage2(m, s1, s2):
    """Add the product and the addend exactly in the fixed-point window."""
    prod = Signal(_WINDOW - 1)
    addend = Signal(_WINDOW - 1)
    m.d.comb += [
        prod.eq(_shift_left(s1.prod, s1.psh, _WINDOW - 1)),
        addend.eq(Cat(Const(0, 24), _shift_left(s1.sigc, s1.csh, _WINDOW - 1 - 24))),
    ]
    sum_ = (prod + addend)[:_WINDOW]
    p_minus_c = (prod - addend)[:_WINDOW - 1]
    c_minus_p = (addend - prod)[:_WINDOW - 1]
    c_bigger = addend > prod
    same = s1.sp == s1.sc
    mag = Mux(same, sum_, Mux(c_bigger, c_minus_p, p_minus_c))
    sign = Mux(same, s1.sp, Mux(c_bigger, s1.sc, s1.sp))
    # An exact zero is -0 only when both terms are negative (-0 + -0); otherwise +0 (RNE).
    exact_zero = Mux(same, ~(prod | addend).any(), prod == addend)
    return [
        s2.mag.eq(mag),
        s2.sign.eq(Mux(exact_zero, s1.sp & s1.sc, sign)),
        s2.nan.eq(s1.nan),
        s2.inf.eq(s1.inf),
        s2.inf_sign.eq(s1.inf_sign),
    ]


def _stage3(m, s2, s3):
    """Normalise: shift the leading one to the top, but not past the subnormal boundary."""
    # Count leading zeros of the bits above the subnormal boundary only; the ones padded
    # below them cap the count (the shift) at _MAX_NORM_SHIFT, the subnormal alignment.
    top = s2.mag[_WINDOW - _MAX_NORM_SHIFT:]
    pad = 64 - len(top)
    _, count = _lzc(Cat(Const((1 << pad) - 1, pad), top))
    shift = Signal(range(_MAX_NORM_SHIFT + 1))
    m.d.comb += shift.eq(count)
    norm = Signal(_WINDOW)
    m.d.comb += norm.eq(_shift_left(s2.mag, shift, _WINDOW))
    return [
        s3.man.eq(norm[_WINDOW - 11:]),
        s3.guard.eq(norm[_WINDOW - 12]),
        s3.sticky.eq(norm[:_WINDOW - 12].any()),
        s3.exp.eq((Const(_MAX_NORM_SHIFT, 6) - shift)[:6]),
        s3.sign.eq(s2.sign),
        s3.nan.eq(s2.nan),
        s3.inf.eq(s2.inf),
        s3.inf_sign.eq(s2.inf_sign),
    ]


class SimdFpu(wiring.Component):
    """Pipelined SIMD-4 binary16 fused multiply-add unit (see the module docstring).

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` passed unchanged from ``i_op`` to ``o_res``.

    Attributes
    ----------
    i_op : In(stream.Signature(fpu_op_layout(tag_width)))
        Operations: ``op``, ``a``, ``b``, ``c`` (:data:`SIMD4`), ``tag``.
    o_res : Out(stream.Signature(fpu_res_layout(tag_width)))
        Results: ``result`` (:data:`SIMD4`), ``tag``, in operation order.
    """

    def __init__(self, tag_width=8):
        try:
            check_tag_width(tag_width)
        except TypeError:
            self._MustUse__silence = True   # a rejected object is not an unused design
            raise
        self._tag_width = tag_width
        super().__init__({
            "i_op": In(stream.Signature(fpu_op_layout(tag_width))),
            "o_res": Out(stream.Signature(fpu_res_layout(tag_width))),
        })

    @property
    def tag_width(self):
        """Width of the pass-through tag."""
        return self._tag_width

    def elaborate(self, platform):
        m = Module()
        lanes = range(4)
        # bypass: the result is ``passed`` as it is (MOV, MAX), not the rounded datapath's.
        ctl = data.StructLayout({"bypass": 1, "passed": SIMD4, "tag": self._tag_width})

        # Data registers need no reset (only the valid bits say what they hold): less area.
        s1 = [Signal(_S1_LANE, name=f"s1_lane{i}", reset_less=True) for i in lanes]
        s2 = [Signal(_S2_LANE, name=f"s2_lane{i}", reset_less=True) for i in lanes]
        s3 = [Signal(_S3_LANE, name=f"s3_lane{i}", reset_less=True) for i in lanes]
        c1, c2, c3 = (Signal(ctl, name=f"s{k}_ctl", reset_less=True) for k in (1, 2, 3))
        valid = [Signal(name=f"s{k}_valid") for k in (1, 2, 3)] + [self.o_res.valid]

        # A stage may load when it is empty or its content moves on this cycle.
        load = [Signal(name=f"s{k}_load") for k in (1, 2, 3, 4)]
        m.d.comb += load[3].eq(~valid[3] | self.o_res.ready)
        for k in (2, 1, 0):
            m.d.comb += load[k].eq(~valid[k] | load[k + 1])
        m.d.comb += self.i_op.ready.eq(load[0])

        with m.If(load[0]):
            m.d.sync += valid[0].eq(self.i_op.valid)
        for k in (1, 2, 3):
            with m.If(load[k]):
                m.d.sync += valid[k].eq(valid[k - 1])

        op = self.i_op.payload
        s1_next = []
        s2_next = []
        s3_next = []
        for i in lanes:
            s1_next += _stage1(m, op.op, op.a[i], op.b[i], op.c[i], s1[i])
            s2_next += _stage2(m, s1[i], s2[i])
            s3_next += _stage3(m, s2[i], s3[i])
        is_max = Signal(name="s0_is_max")
        m.d.comb += is_max.eq(op.op == FpOp.MAX)
        passed = [Mux(is_max, _maximum(m, op.a[i], op.b[i], f"s0_max{i}"), op.a[i].as_value())
                  for i in lanes]
        with m.If(load[0]):
            m.d.sync += s1_next
            m.d.sync += [c1.bypass.eq((op.op == FpOp.MOV) | is_max), c1.passed.eq(Cat(*passed)),
                         c1.tag.eq(op.tag)]
        with m.If(load[1]):
            m.d.sync += s2_next
            m.d.sync += c2.eq(c1)
        with m.If(load[2]):
            m.d.sync += s3_next
            m.d.sync += c3.eq(c2)

        res = self.o_res.payload
        with m.If(load[3]):
            m.d.sync += res.tag.eq(c3.tag)
            for i in lanes:
                s = s3[i]
                round_up = s.guard & (s.sticky | s.man[0])
                # The hidden bit of a normal significand makes the exponent field; a rounding
                # carry out of the fraction increments it (up to infinity).
                exp_field = (s.exp + s.man[10])[:6]
                packed = Signal(16, name=f"s4_packed{i}")
                m.d.comb += packed.eq((Cat(s.man[:10], exp_field) + round_up)[:16])
                overflow = packed[15] | packed[10:15].all()
                with m.If(c3.bypass):
                    m.d.sync += res.result[i].eq(c3.passed[i])
                with m.Elif(s.nan):
                    m.d.sync += res.result[i].eq(_QNAN)
                with m.Elif(s.inf | overflow):
                    m.d.sync += res.result[i].eq(Cat(Const(_INF, 15), Mux(s.inf, s.inf_sign,
                                                                            s.sign)))
                with m.Else():
                    m.d.sync += res.result[i].eq(Cat(packed[:15], s.sign))
        return m
