"""S1 of an issue pipe: the instruction's operands, the destinations it serves, the pops.

Contract (all combinational)
----------------------------
* ``i_insn``: the instruction in S1; ``i_tokens[k]``: the head token of its operand ``k``
  FIFO (:class:`hw.pe.operand_store.OperandStore`); ``i_regs``: the PE's registers.
* ``o_value[k]``: operand ``k``: register ``reg<k>`` when bit ``k`` of ``regmask`` is set,
  else the token.  ``o_has``: bit ``k``, the instruction takes operand ``k`` (``nsrc``).
* ``o_dmask``: the destinations to serve: the valid ones; a ``SWITCH`` keeps those of its
  branch (the first ``ntrue`` when the low 32 bits of operand 1 are not zero, the others
  otherwise); an ``MCAST`` those whose bits are set in nibble ``imm[2:0]`` of operand 1.
* ``o_local``: bit ``i``, destination ``i`` is served, is this PE (``i_coord``) and gets a
  result (``i_emits``: a FACC step before its last emits none), so it needs an entry reserved
  in this PE's operand store.
* ``o_pop``: with ``i_fire`` (the instruction fires, not a continuation), bit ``k``: pop the
  head of operand ``k``'s FIFO (a token operand it takes), unless bit ``k`` of ``i_keep`` is
  set (the firing does not take that operand: a FACC with a count operand past the first step
  of its accumulation keeps operand 2).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals
from hw.lib.spec import check_params
from hw.pe.layouts import coord_layout, insn_struct
from sw.spec.isa import MCAST_NIBBLES, Op

__all__ = ["OperandSelect"]


class OperandSelect(wiring.Component):
    """One pipe's S1 operand and destination selection (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Operands, destinations, registers, instruction layout.
    pipe : int
        The pipe's number (names the signals in the Verilog).
    """

    def __init__(self, params, pipe):
        self._MustUse__silence = True      # (a rejected one is never elaborated: no warning)
        check_params(params)
        self._params, self._pipe = params, pipe
        p = params
        self._MustUse__silence = False
        super().__init__({
            "i_insn": In(insn_struct(p)),
            "i_tokens": In(p.TOKEN_BITS).array(p.MAX_OPERANDS),
            "i_regs": In(p.TOKEN_BITS).array(p.regs),
            "i_coord": In(coord_layout(p)),
            "i_emits": In(1),
            "i_fire": In(1),
            "i_keep": In(p.MAX_OPERANDS),
            "o_value": Out(p.TOKEN_BITS).array(p.MAX_OPERANDS),
            "o_has": Out(p.MAX_OPERANDS),
            "o_dmask": Out(p.MAX_DESTS),
            "o_local": Out(p.MAX_DESTS),
            "o_pop": Out(p.MAX_OPERANDS),
        })

    def elaborate(self, platform):
        m = Module()
        p, pp, insn = self._params, self._pipe, self.i_insn
        K, ND = p.MAX_OPERANDS, p.MAX_DESTS
        for k in range(K):
            # A register operand by a case statement (Verilator: a few branches), not a
            # shift of the 16 concatenated registers (a 1,024-bit word operation).
            regv = Signal(p.TOKEN_BITS, name=f"regv{pp}_{k}")
            with m.Switch(getattr(insn, f"reg{k}")):
                for r in range(p.regs):
                    with m.Case(r):
                        m.d.comb += regv.eq(self.i_regs[r])
            m.d.comb += self.o_value[k].eq(Mux(insn.regmask[k], regv, self.i_tokens[k]))
        has = self.o_has
        m.d.comb += [has[0].eq(insn.nsrc.any()), has[1].eq(insn.nsrc[1]),
                     has[2].eq(insn.nsrc.all())]

        # Destinations to serve; SWITCH keeps one branch.
        valid_d = Cat(*[getattr(insn, f"d{i}_valid") for i in range(ND)])
        cond = self.o_value[1][:32].any()
        first_n = Signal(ND, name=f"first_n{pp}")     # bit i: i < ntrue
        with m.Switch(insn.ntrue):
            for j in range(ND + 1):
                with m.Case(j):
                    m.d.comb += first_n.eq((1 << j) - 1)
            with m.Default():
                m.d.comb += first_n.eq((1 << ND) - 1)
        taken = Mux(cond, first_n, ~first_n)
        is_switch = equals(insn.op, int(Op.SWITCH))
        # MCAST: the destinations whose bits in nibble imm[2:0] of the mask are set.
        sel = Signal(ND, name=f"mcast_sel{pp}")
        with m.Switch(insn.imm[:3]):
            for n in range(MCAST_NIBBLES):
                with m.Case(n):
                    m.d.comb += sel.eq(self.o_value[1][4 * n:4 * n + ND])
        is_mcast = equals(insn.op, int(Op.MCAST))
        m.d.comb += self.o_dmask.eq(valid_d & Mux(is_switch, taken,
                                                  Mux(is_mcast, sel, (1 << ND) - 1)))

        coord = self.i_coord
        for i in range(ND):
            here = (getattr(insn, f"d{i}_x") == coord.x) & (getattr(insn, f"d{i}_y") == coord.y)
            m.d.comb += self.o_local[i].eq(self.o_dmask[i] & here & self.i_emits)
        for k in range(K):
            m.d.comb += self.o_pop[k].eq(self.i_fire & has[k] & ~insn.regmask[k]
                                         & ~self.i_keep[k])
        return m
