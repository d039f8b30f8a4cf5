"""Stage S1 of the FP pipe: the picked instruction and its operands as one SIMD-4 operation.

Contract
--------
Combinational (no state, no handshake): the FP pipe's S1 offers ``o_fpu`` to its
:class:`hw.pe.fpu.SimdFpu` and fires when the unit and the room check accept (``i_go``).

* ``i_insn``: the instruction word of the slot in S1; ``i_a``, ``i_b``, ``i_c``: operands 0-2
  (tokens or registers); ``i_has_b``, ``i_has_c``: operand 1, 2 given (else the FP immediate
  ``imm[15:0]`` broadcast to the four lanes); ``i_facc``: the slot's FACC accumulator and
  count (``acc``, ``count``) read at the pick; ``i_slot``: the slot; ``i_ectx``: its END
  count; ``i_dmask``: the destinations to serve.
* FACC's ``count`` is 0 at the first step of an accumulation (the accumulator is then -0.0 in
  each lane).  With ``nsrc = 2`` it counts the steps done, up to the immediate's ``count``;
  with ``nsrc = 3`` (a count operand, the immediate's ``count`` 0) it counts down the steps
  left: the first step loads it from ``c[47:32]`` (:func:`sw.spec.isa.token_count`), a count
  of 0 taken as 1 and reported on ``o_bad_count``; a count operand with its continue bit
  (``c[48]``, :data:`sw.spec.isa.TOKEN_CONTINUE_AT`) starts the sum from the slot's ``acc``
  (the last run's result, which the last step wrote back) instead of -0.0.  Either way the step whose new count equals
  the immediate's ``count`` is the last: the new count is 0 and the result leaves.  A span
  ``s`` (``imm[31:16]``, ``nsrc = 2``: :func:`sw.spec.isa.facc_imm`) makes every ``2**s``-th
  step emit too, keeping its count (the sum goes on).
* ``o_emits``: the result leaves (every FP instruction but a FACC step before its last); the
  room check counts local destinations only then.
* ``o_keep_c``: the step does not take operand 2 (a FACC with a count operand past its first
  step: the next accumulation's count stays in its FIFO).
* ``o_fpu``: the operation (``op``, ``a``, ``b``, ``c``; FACC is FMADD with ``c`` the
  accumulator) and its tag (:func:`hw.pe.layouts.fp_tag_layout`: destinations, END, and for
  FACC the slot and the new count, which the PE writes back when the unit's result comes out).
* With ``i_go``: ``o_end_inc`` counts an END; ``o_busy_set`` marks a FACC slot busy while its
  step is in the unit (its next step needs the new accumulator); ``o_bad_count`` raises
  :attr:`sw.spec.status.PeError.BAD_COUNT` (a count operand of 0).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals
from hw.lib.spec import check_params
from hw.pe.fpu import FpOp
from hw.pe.layouts import (fp_tag_layout, insn_dest, insn_struct,
                           loop_imm_struct)
from sw.spec.isa import TOKEN_CONTINUE_AT, TOKEN_COUNT_AT, Op

__all__ = ["FpStep", "FP_OPS", "NEG_ZERO4"]

#: Four binary16 -0.0 lanes: the start value of a FACC accumulator.
NEG_ZERO4 = 0x8000_8000_8000_8000

#: The ISA's FP operations by their FPU operation.
FP_OPS = {Op.FADD: FpOp.FADD, Op.FSUB: FpOp.FSUB, Op.FMUL: FpOp.FMUL, Op.FMADD: FpOp.FMADD,
          Op.FACC: FpOp.FMADD, Op.FIMM: FpOp.MOV, Op.FMAX: FpOp.MAX}


def facc_state_layout():
    """Return a slot's FACC state: the 64-bit ``acc`` and the 16-bit ``count`` (the steps done,
    or with a count operand the steps left; 0 at the start of an accumulation)."""
    return data.StructLayout({"acc": 64, "count": 16})


class FpStep(wiring.Component):
    """S1 of the FP pipe as an FPU operation (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Sizes the instruction word and the tag.
    """

    def __init__(self, params):
        check_params(params)
        self._params = params
        super().__init__({
            "i_insn": In(insn_struct(params)),
            "i_a": In(params.TOKEN_BITS),
            "i_b": In(params.TOKEN_BITS),
            "i_c": In(params.TOKEN_BITS),
            "i_has_b": In(1),
            "i_has_c": In(1),
            "i_facc": In(facc_state_layout()),
            "i_slot": In(params.slot_bits),
            "i_ectx": In(32),
            "i_dmask": In(params.MAX_DESTS),
            "i_go": In(1),
            "o_emits": Out(1),
            "o_keep_c": Out(1),
            "o_fpu": Out(data.StructLayout({"op": FpOp, "a": 64, "b": 64, "c": 64,
                                            "tag": fp_tag_layout(params)})),
            "o_end_inc": Out(1),
            "o_busy_set": Out(1),
            "o_bad_count": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        insn, go = self.i_insn, self.i_go
        opv = [self.i_a, self.i_b, self.i_c]
        imm32 = Signal(32, name="imm1")
        m.d.comb += imm32.eq(insn.imm)
        limm = data.View(loop_imm_struct(), imm32)   # count (FACC's firings per result)
        fimm = Signal(64, name="fimm1")
        m.d.comb += fimm.eq(imm32[:16].replicate(4))
        is_facc = Signal(name="is_facc1")
        is_fimm = Signal(name="is_fimm1")
        m.d.comb += [is_facc.eq(equals(insn.op, int(Op.FACC))),
                     is_fimm.eq(equals(insn.op, int(Op.FIMM)))]

        # FACC state of this slot.  A count operand (nsrc 3) turns the up-counter of the steps
        # done into a down-counter of the steps left, loaded at the first step: one adder
        # for both, and the last step is the one whose new count equals imm[15:0] (0 then).
        emits = self.o_emits
        acc = Signal(64, name="acc1")
        newcount = Signal(16, name="newcount1")
        fr = self.i_facc
        counted = Signal(name="facc_counted1")        # FACC with a count operand
        first = Signal(name="facc_first1")            # ... at the first step of a sum
        tcount = Signal(16, name="facc_tcount1")      # its count operand's count
        bad = Signal(name="facc_bad1")                # ... is 0: taken as 1
        cont = Signal(name="facc_cont1")              # ... continues the last run's sum
        m.d.comb += [
            counted.eq(is_facc & self.i_has_c),
            first.eq(~fr.count.any()),
            tcount.eq(opv[2][TOKEN_COUNT_AT:TOKEN_COUNT_AT + 16]),
            bad.eq(counted & first & ~tcount.any()),
            cont.eq(counted & first & opv[2][TOKEN_CONTINUE_AT]),
            acc.eq(Mux(first & ~cont, Const(NEG_ZERO4, 64), fr.acc)),
            newcount.eq((Mux(counted & first, Cat(tcount[0] | bad, tcount[1:]), fr.count)
                         + Mux(counted, Const(0xFFFF, 16), Const(1, 16)))[:16]),
            self.o_keep_c.eq(counted & ~first),
        ]
        # The last step of an accumulation restarts it; with a span s (imm[31:16], no count
        # operand) every 2**s-th step also emits, and the sum goes on (a partial result).
        last = Signal(name="facc_last1")
        mid = Signal(name="facc_mid_emit1")
        span = Signal(4, name="facc_span1")
        m.d.comb += [
            last.eq(newcount == limm.count),
            span.eq(limm.step[:4]),
            mid.eq(is_facc & ~counted & span.any()
                   & ~(newcount & ((Const(1, 16) << span) - 1)[:16]).any()),
            emits.eq(~is_facc | last | mid),
        ]

        tag = self.o_fpu.tag
        fop = Signal(FpOp, name="fpu_op")
        fa, fb, fc = (Signal(64, name=f"fpu_{n}") for n in "abc")
        m.d.comb += [fb.eq(Mux(self.i_has_b, opv[1], fimm))]
        with m.Switch(insn.op):
            for op, code in FP_OPS.items():
                with m.Case(int(op)):
                    m.d.comb += fop.eq(code)
            with m.Default():
                m.d.comb += fop.eq(FpOp.MOV)
        m.d.comb += [
            fa.eq(Mux(is_fimm, fimm, opv[0])),
            fc.eq(Mux(is_facc, acc, Mux(self.i_has_c, opv[2], fimm))),
        ]
        m.d.comb += [tag.dests[i].eq(insn_dest(insn, i)) for i in range(p.MAX_DESTS)]
        end1 = insn.end & emits
        m.d.comb += [self.o_end_inc.eq(go & end1), tag.ectx.eq(self.i_ectx)]
        m.d.comb += [tag.dmask.eq(self.i_dmask), tag.end.eq(end1),
                     tag.facc.eq(is_facc), tag.emit.eq(emits),
                     tag.slot.eq(self.i_slot),
                     tag.count.eq(Mux(~is_facc | last, Const(0, 16), newcount))]
        m.d.comb += [self.o_fpu.op.eq(fop), self.o_fpu.a.eq(fa), self.o_fpu.b.eq(fb),
                     self.o_fpu.c.eq(fc)]
        m.d.comb += [self.o_busy_set.eq(go & is_facc), self.o_bad_count.eq(go & bad)]
        return m
