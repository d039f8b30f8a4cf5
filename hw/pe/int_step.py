"""Stage S1 of an INT pipe: the picked instruction and its operands as one ALU operation.

Contract
--------
Combinational (no state, no handshake): the issue pipe's S1 offers ``o_alu`` to its
:class:`hw.pe.alu.IntAlu` and fires when the unit and the room check accept (``i_go``).

* ``i_insn``: the instruction word of the slot in S1; ``i_a``, ``i_b``: its operands 0 and 1
  (tokens or registers, 64 bits; ``i_has_b``: operand 1 is given, else ``b`` is the
  immediate); ``i_cont``: a continuation pick of an emitting ITER, BSCAN or BPOS (no operands,
  the next token from ``i_state``); ``i_state``: the slot's SCAN/ITER/BSCAN/BPOS state
  (:func:`hw.pe.layouts.int_state_layout`) read at the pick; ``i_ectx``: the slot's END count;
  ``i_dmask``: the destinations to serve (SWITCH's branch, MCAST's mask bits); ``i_is_mem``: a
  load or store (pipe 0: the END of a load is never sent, a store's is sent on its
  acknowledgement).
* ``o_alu``: the ALU operation (``op``, ``a``, ``b``) and its tag
  (:func:`hw.pe.layouts.int_tag_layout`: destinations, END and its context ID, the high half
  that MOV, CTX, SWITCH and MCAST forward).
* ``o_emits``: the operation sends a token.  Low only for a firing that emits nothing: an
  ITER whose count (``imm[15:0]``, or when that is 0 ``a[47:32]``) is 0, a BPOS with no set bit
  among the low ``count`` bits of its mask; its tag serves no destination (``dmask`` 0), and
  the room check and the reservations leave its local destinations alone.
* With ``i_go`` (the instruction fires, or the continuation emits): ``o_state`` writes the
  slot's next state (``en``, ``data``), ``o_end_inc`` counts an END, ``o_busy_set`` marks the
  slot busy (an ITER/BSCAN/BPOS that has more tokens to emit) and ``o_busy_clr`` clears it
  (its last token).  An emitter sends one token per pick: ITER ``start + i * step``, BSCAN
  token ``j`` of its mask, BPOS ``base + j * step`` for the lowest set bit ``j`` of the mask
  bits left (the state keeps the base and the mask with the emitted bits cleared: zero bits
  cost no pick).
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, increment, is_one_of
from hw.lib.select import first_set
from hw.lib.spec import check_params
from hw.pe.alu import IntOp
from hw.pe.layouts import (insn_dest, insn_struct, int_state_layout,
                           int_tag_layout, loop_imm_struct)
from sw.spec.isa import Op

__all__ = ["IntStep", "INT_OPS"]

#: The ISA's integer operations by their ALU operation.
INT_OPS = {Op.ADD: IntOp.ADD, Op.SUB: IntOp.SUB, Op.MUL: IntOp.MUL, Op.AND: IntOp.AND,
           Op.OR: IntOp.OR, Op.XOR: IntOp.XOR, Op.SHL: IntOp.SHL, Op.SHR: IntOp.SHR,
           Op.SRA: IntOp.SRA, Op.EQ: IntOp.EQ, Op.LT: IntOp.LT, Op.LTU: IntOp.LTU}
_STORES = tuple(op for op in Op if op.is_store)


class IntStep(wiring.Component):
    """S1 of an INT pipe as an ALU operation and the slot's next state (module docstring).

    Parameters
    ----------
    params : ArrayParams
        Sizes the instruction word and the tag.
    pipe : int
        The pipe's number (names the signals in the Verilog).
    """

    def __init__(self, params, pipe=0):
        check_params(params)
        self._params, self._pipe = params, pipe
        super().__init__({
            "i_insn": In(insn_struct(params)),
            "i_a": In(params.TOKEN_BITS),
            "i_b": In(params.TOKEN_BITS),
            "i_has_b": In(1),
            "i_cont": In(1),
            "i_state": In(int_state_layout()),
            "i_ectx": In(32),
            "i_dmask": In(params.MAX_DESTS),
            "i_is_mem": In(1),
            "i_go": In(1),
            "o_alu": Out(data.StructLayout({"op": IntOp, "a": 32, "b": 32,
                                            "tag": int_tag_layout(params)})),
            "o_state": Out(data.StructLayout({"en": 1, "data": int_state_layout()})),
            "o_emits": Out(1),
            "o_end_inc": Out(1),
            "o_busy_set": Out(1),
            "o_busy_clr": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p, pp = self._params, self._pipe
        insn, cont, sr, go = self.i_insn, self.i_cont, self.i_state, self.i_go
        opv = [self.i_a, self.i_b]
        is_mem = self.i_is_mem
        imm32 = Signal(32, name=f"imm{pp}")
        m.d.comb += imm32.eq(insn.imm)
        limm = data.View(loop_imm_struct(), imm32)   # count, step (counting instructions)
        is_op = {op: Signal(name=f"is_{op.name.lower()}{pp}")
                 for op in (Op.SWITCH, Op.MCAST, Op.ITER, Op.SCAN, Op.BSCAN, Op.BPOS, Op.MOV,
                            Op.CTX)}
        for op, sig in is_op.items():
            m.d.comb += sig.eq(equals(insn.op, int(op)))

        tag = self.o_alu.tag
        a = Signal(32, name="alu_a")
        b = Signal(32, name="alu_b")
        iop = Signal(IntOp, name="alu_op")
        # SCAN: acc += operand 1, result operand 0 + acc (the ALU's ADD).
        scan_acc = Signal(32, name="scan_acc")
        scan_count = Signal(16, name="scan_count")
        scan_wrap = Signal(name="scan_wrap")
        m.d.comb += [scan_acc.eq((sr.acc + opv[1][:32])[:32]),
                     scan_count.eq(increment(sr.count)),
                     scan_wrap.eq(scan_count == limm.count)]
        m.d.comb += b.eq(Mux(is_op[Op.SCAN], scan_acc,
                             Mux(self.i_has_b, opv[1][:32], imm32)))
        with m.Switch(insn.op):
            for op, code in INT_OPS.items():
                with m.Case(int(op)):
                    m.d.comb += [iop.eq(code), a.eq(opv[0][:32])]
            with m.Case(int(Op.IMM)):
                m.d.comb += [iop.eq(IntOp.MOV), a.eq(imm32)]
            with m.Case(int(Op.SCAN)):
                m.d.comb += [iop.eq(IntOp.ADD), a.eq(opv[0][:32])]
            with m.Case(int(Op.CTX), int(Op.SWITCH)):
                m.d.comb += [iop.eq(IntOp.MOV), a.eq(opv[0][:32])]
            with m.Default():
                m.d.comb += [iop.eq(IntOp.MOV), a.eq(opv[0][:32])]
        # BSCAN and BPOS take mask (operand 0) and base (operand 1) at the firing, the state
        # at each continuation; only the low `count` bits of the mask count (1..32).
        count = limm.count
        step = Cat(limm.step, limm.step[-1].replicate(16))
        # (The low `count` bits: all ones shifted right by 32 - count, i.e. ~(count - 1) on 5
        # bits; a right shift keeps the width: one word operation.)
        in_count = Signal(32, name=f"mask_count{pp}")
        m.d.comb += in_count.eq(Const(0xFFFF_FFFF, 32) >> ~(count - Const(1, 16))[:5])
        mask = Signal(32, name=f"mask{pp}")
        base = Signal(32, name=f"base{pp}")
        m.d.comb += [mask.eq(Mux(cont, sr.mask, opv[0][:32] & in_count)),
                     base.eq(Mux(cont, sr.acc, opv[1][:32]))]
        # BSCAN: token j is the running address plus 2 when bit j of the mask is set, else 0.
        # The address is kept incrementally (acc += 2 * bit), so no popcount is needed.
        bs_acc = Signal(32, name=f"bscan_acc{pp}")
        m.d.comb += bs_acc.eq((base + Mux(mask[0], Const(2, 32), Const(0, 32)))[:32])
        # BPOS: the lowest set bit j of the mask left gives base + j * step, and leaves the
        # mask without it; a 5 x 16-bit product instead of a walk over the zero bits.
        bp_any, bp_j = first_set(m, mask, f"bpos{pp}")
        bp_rest = Signal(32, name=f"bpos_rest{pp}")
        bp_off = Signal(signed(32), name=f"bpos_off{pp}")
        bp_val = Signal(32, name=f"bpos_val{pp}")
        m.d.comb += [bp_rest.eq(mask & (mask - Const(1, 32))[:32]),
                     bp_off.eq(bp_j * limm.step.as_signed()),
                     bp_val.eq((base + bp_off.as_unsigned())[:32])]
        with m.If(is_op[Op.BSCAN]):
            m.d.comb += a.eq(Mux(mask[0], bs_acc, Const(0, 32)))
        with m.Elif(is_op[Op.BPOS]):
            m.d.comb += a.eq(bp_val)
        with m.Elif(cont):
            m.d.comb += a.eq(sr.acc)
        # MOV, CTX, SWITCH and MCAST forward all 64 bits: the high half rides in the tag.
        m.d.comb += [tag.wide.eq((is_op[Op.MOV] | is_op[Op.CTX] | is_op[Op.SWITCH]
                                  | is_op[Op.MCAST]) & ~cont),
                     tag.hi.eq(opv[0][32:])]
        m.d.comb += [tag.dests[i].eq(insn_dest(insn, i)) for i in range(p.MAX_DESTS)]
        # ITER: the first token is the start value; the state holds the next one.  ITER and
        # BSCAN count their tokens alike; an ITER of count 0 takes its count from the token.
        emitter = Signal(name=f"emitter{pp}")          # ITER, BSCAN or BPOS
        m.d.comb += emitter.eq(is_op[Op.ITER] | is_op[Op.BSCAN] | is_op[Op.BPOS])
        it_from = Mux(cont, sr.acc, opv[0][:32])
        it_count = Mux(count.any(), count, opv[0][32:48])
        it_left = Signal(16, name=f"it_left{pp}")      # tokens left, this one incl.
        m.d.comb += it_left.eq(Mux(cont, sr.count, it_count))
        more = Signal(name=f"emit_more{pp}")           # tokens left after this one
        m.d.comb += more.eq(Mux(is_op[Op.BPOS], bp_rest.any(), it_left[1:].any()))
        emits = self.o_emits
        m.d.comb += emits.eq(~(is_op[Op.ITER] & ~it_left.any()) & ~(is_op[Op.BPOS] & ~bp_any))
        # END: every firing but ITER's, BSCAN's, BPOS's and a load's (ISA); a store's is
        # counted here and sent on its acknowledgement with the count kept in its pool
        # entry.
        is_store = is_one_of(insn.op, _STORES)
        end0 = insn.end & ~cont & ~emitter & ~is_mem
        m.d.comb += [tag.dmask.eq(self.i_dmask & emits.replicate(p.MAX_DESTS)),
                     tag.end.eq(end0), tag.ectx.eq(self.i_ectx)]
        m.d.comb += self.o_end_inc.eq(go & (end0 | insn.end & is_mem & is_store))
        st = self.o_state.data
        m.d.comb += self.o_state.en.eq(go & (is_op[Op.SCAN] | emitter))
        with m.If(is_op[Op.ITER]):
            m.d.comb += [st.acc.eq((it_from + step)[:32]),
                         st.count.eq((it_left - Const(1, 16))[:16])]
        with m.Elif(is_op[Op.BSCAN]):
            m.d.comb += [st.acc.eq(bs_acc),
                         st.count.eq((it_left - Const(1, 16))[:16]),
                         st.mask.eq(mask[1:])]
        with m.Elif(is_op[Op.BPOS]):
            m.d.comb += [st.acc.eq(base), st.mask.eq(bp_rest)]
        with m.Else():
            m.d.comb += [st.acc.eq(Mux(scan_wrap, Const(0, 32), scan_acc)),
                         st.count.eq(Mux(scan_wrap, Const(0, 16), scan_count))]
        # (Continuous assignments, not processes: an enable of a vector update must
        # not start X on Icarus, which runs no `always @*` block at time 0.)
        m.d.comb += [self.o_busy_set.eq(go & emitter & ~cont & more),
                     self.o_busy_clr.eq(go & cont & ~more)]
        m.d.comb += [self.o_alu.op.eq(iop), self.o_alu.a.eq(a), self.o_alu.b.eq(b)]
        return m
