"""Pipelined 32-bit integer unit (address arithmetic, masks, compares).

Contract
--------
* **Operation.** Each operation carries one :class:`IntOp` and three 32-bit two's-complement
  operands ``a``, ``b``, ``c``:

  =====  ===========================  =====  =================================
  ADD    ``a + b``                    SHL    ``a << b[4:0]``
  SUB    ``a - b``                    SHR    ``a >> b[4:0]`` (logical)
  MUL    ``a * b`` (low 32 bits)      SRA    ``a >> b[4:0]`` (arithmetic)
  MADD   ``a * b + c`` (low 32 bits)  EQ     ``1 if a == b else 0``
  AND    ``a & b``                    LT     ``1 if a < b else 0`` (signed)
  OR     ``a | b``                    LTU    ``1 if a < b else 0`` (unsigned)
  XOR    ``a ^ b``                    MOV    ``a``
  =====  ===========================  =====  =================================

  Results wrap modulo 2^32; only the low five bits of ``b`` count for shifts.
* **Handshake.** ``i_op`` and ``o_res`` are :mod:`amaranth.lib.stream` streams; the ``tag``
  comes back unchanged with the result.
* **Latency.** :data:`LATENCY` = 2 cycles from an ``i_op`` transfer to ``o_res.valid``.
* **Throughput.** One operation per cycle; stages advance when the next one is empty or
  advancing (bubbles squeezed out under backpressure).  ``i_op.ready`` depends
  combinationally on ``o_res.ready``, never on ``i_op.valid``.
* **Ordering.** In order; nothing lost or duplicated.

Pipeline::

    i_op ── S1: logic, add/sub, shifts, compares -> r1;  three 16x16 partial products
        ── S2: MUL/MADD: low + (cross << 16) (+ c);  else r1                      ── o_res

The 32x32 multiply is split into 16x16 products (``a_lo*b_lo`` and the low halves of the two
cross products; ``a_hi*b_hi`` only affects bits above 31), so no single stage holds a full
32-bit multiplier followed by an adder.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["IntOp", "LATENCY", "alu_op_layout", "alu_res_layout", "IntAlu"]

#: Cycles from an ``i_op`` transfer to the result being valid on ``o_res``.
LATENCY = 2


class IntOp(enum.Enum, shape=4):
    """Operation of :class:`IntAlu`."""
    ADD = 0
    SUB = 1
    MUL = 2
    MADD = 3
    AND = 4
    OR = 5
    XOR = 6
    SHL = 7
    SHR = 8
    SRA = 9
    EQ = 10
    LT = 11
    LTU = 12
    MOV = 13


def check_tag_width(tag_width):
    """Raise ``TypeError`` unless ``tag_width`` (of an execution unit's result tag) is >= 1."""
    if not isinstance(tag_width, int) or isinstance(tag_width, bool) or tag_width < 1:
        raise TypeError(f"tag_width must be a positive integer, not {tag_width!r}")


def alu_op_layout(tag_width):
    """Return the payload layout of :class:`IntAlu`'s ``i_op`` stream.

    Parameters
    ----------
    tag_width : int
        Width of the pass-through ``tag`` field.
    """
    check_tag_width(tag_width)
    return data.StructLayout({"op": IntOp, "a": 32, "b": 32, "c": 32, "tag": tag_width})


def alu_res_layout(tag_width):
    """Return the payload layout of :class:`IntAlu`'s ``o_res`` stream.

    Parameters
    ----------
    tag_width : int
        Width of the pass-through ``tag`` field.
    """
    check_tag_width(tag_width)
    return data.StructLayout({"result": 32, "tag": tag_width})


def _shift_right(value, amount, fill):
    """Shift ``value`` right by ``amount``, filling with ``fill`` (log shifter)."""
    for k, bit in enumerate(amount):
        step = 1 << k
        shifted = Cat(value[step:], fill.replicate(step))
        value = Mux(bit, shifted, value)
    return value


def _shift_left(value, amount):
    """Shift ``value`` left by ``amount``, keeping ``len(value)`` bits (log shifter)."""
    width = len(value)
    for k, bit in enumerate(amount):
        step = 1 << k
        value = Mux(bit, Cat(Const(0, step), value[:width - step]), value)
    return value


class IntAlu(wiring.Component):
    """Pipelined 32-bit integer unit (see the module docstring).

    Parameters
    ----------
    tag_width : int
        Width of the ``tag`` passed unchanged from ``i_op`` to ``o_res``.

    Attributes
    ----------
    i_op : In(stream.Signature(alu_op_layout(tag_width)))
        Operations: ``op``, ``a``, ``b``, ``c``, ``tag``.
    o_res : Out(stream.Signature(alu_res_layout(tag_width)))
        Results: ``result``, ``tag``, in operation order.
    """

    def __init__(self, tag_width=8):
        try:
            check_tag_width(tag_width)
        except TypeError:
            self._MustUse__silence = True   # a rejected object is not an unused design
            raise
        self._tag_width = tag_width
        super().__init__({
            "i_op": In(stream.Signature(alu_op_layout(tag_width))),
            "o_res": Out(stream.Signature(alu_res_layout(tag_width))),
        })

    @property
    def tag_width(self):
        """Width of the pass-through tag."""
        return self._tag_width

    def elaborate(self, platform):
        m = Module()
        s1 = Signal(data.StructLayout({
            "r1": 32,          # result of every op but MUL/MADD
            "low": 32,         # a_lo * b_lo
            "cross": 16,       # low halves of a_hi * b_lo + a_lo * b_hi
            "c": 32,
            "mul": 1,
            "madd": 1,
            "tag": self._tag_width,
        }), name="s1", reset_less=True)   # data: only s1_valid needs a reset
        s1_valid = Signal()

        load2 = Signal()
        load1 = Signal()
        m.d.comb += [
            load2.eq(~self.o_res.valid | self.o_res.ready),
            load1.eq(~s1_valid | load2),
            self.i_op.ready.eq(load1),
        ]

        op = self.i_op.payload
        a, b = op.a, op.b
        r1 = Signal(32)
        is_mul = Signal()
        is_madd = Signal()
        with m.Switch(op.op):
            with m.Case(IntOp.MUL):
                m.d.comb += [is_mul.eq(1), is_madd.eq(0)]
            with m.Case(IntOp.MADD):
                m.d.comb += [is_mul.eq(1), is_madd.eq(1)]
            with m.Case(IntOp.ADD):
                m.d.comb += r1.eq((a + b)[:32])
            with m.Case(IntOp.SUB):
                m.d.comb += r1.eq((a - b)[:32])
            with m.Case(IntOp.AND):
                m.d.comb += r1.eq(a & b)
            with m.Case(IntOp.OR):
                m.d.comb += r1.eq(a | b)
            with m.Case(IntOp.XOR):
                m.d.comb += r1.eq(a ^ b)
            with m.Case(IntOp.SHL):
                m.d.comb += r1.eq(_shift_left(a, b[:5]))
            with m.Case(IntOp.SHR):
                m.d.comb += r1.eq(_shift_right(a, b[:5], Const(0, 1)))
            with m.Case(IntOp.SRA):
                m.d.comb += r1.eq(_shift_right(a, b[:5], a[31]))
            with m.Case(IntOp.EQ):
                m.d.comb += r1.eq(a == b)
            with m.Case(IntOp.LT):
                m.d.comb += r1.eq(a.as_signed() < b.as_signed())
            with m.Case(IntOp.LTU):
                m.d.comb += r1.eq(a < b)
            with m.Default():
                m.d.comb += [r1.eq(a), is_mul.eq(0), is_madd.eq(0)]

        a_lo, a_hi = a[:16], a[16:]
        b_lo, b_hi = b[:16], b[16:]
        with m.If(load1):
            m.d.sync += [
                s1_valid.eq(self.i_op.valid),
                s1.r1.eq(r1),
                s1.low.eq(a_lo * b_lo),
                s1.cross.eq(((a_hi * b_lo)[:16] + (a_lo * b_hi)[:16])[:16]),
                s1.c.eq(op.c),
                s1.mul.eq(is_mul),
                s1.madd.eq(is_madd),
                s1.tag.eq(op.tag),
            ]

        product = Signal(32)
        m.d.comb += product.eq((s1.low + Cat(Const(0, 16), s1.cross))[:32])
        with m.If(load2):
            m.d.sync += [
                self.o_res.valid.eq(s1_valid),
                self.o_res.payload.tag.eq(s1.tag),
                self.o_res.payload.result.eq(
                    Mux(s1.mul, (product + Mux(s1.madd, s1.c, 0))[:32], s1.r1)),
            ]
        return m
