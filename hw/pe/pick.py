"""Stage S0 of an issue pipe: pick one ready slot (round robin), hold it in S1 for a cycle.

Contract
--------
* ``i_ready``: the slots of this pipe that could issue (opcode known, every token operand
  present and not busy, or busy and ready to continue); the slot in S1 is left out here, so
  a slot is never in S0 and S1 at once.  ``i_noroom``: the slots whose last pick found a local
  destination full; they go last (picked only when no other slot of the pipe is ready).
  ``i_busy`` (pipes with ``continuations``): the emitting ITER/BSCAN/BPOS slots; a pick of
  one is a *continuation*.
* ``o_pick`` (combinational, S0): ``valid`` (a slot is picked this cycle), ``slot``, ``cont``;
  the PE addresses the instruction, operand and state memories with it, whose synchronous
  reads are ready in S1.
* ``o_s1`` (registered, S1): the previous cycle's pick (``valid``, ``slot``, ``cont``) and
  ``hot``, ``slot`` one-hot over the slots, masked by ``valid``.  Every pick enters S1; what
  S1 does not fire is picked again later.
* Round robin: the search starts after the previous pick, so every ready slot of a pipe is
  picked within ``slots`` picks (among the slots that are not ``noroom``).
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.select import bit_at, onehot, round_robin

__all__ = ["SlotPicker"]


class SlotPicker(wiring.Component):
    """One pipe's S0 pick and S1 register (see the module docstring).

    Parameters
    ----------
    slots : int
        Instruction slots (the width of the vectors).
    continuations : bool
        Whether busy slots continue (INT pipes: ITER, BSCAN and BPOS emit over several picks).
    pipe : int
        The pipe's number (names the signals in the Verilog).
    """

    def __init__(self, slots, continuations, pipe):
        if not (isinstance(slots, int) and slots >= 2 and slots & (slots - 1) == 0):
            raise TypeError(f"slots must be a power of two of at least 2, not {slots!r}")
        self._slots, self._cont, self._pipe = slots, bool(continuations), pipe
        sb = slots.bit_length() - 1
        pick = data.StructLayout({"valid": 1, "slot": sb, "cont": 1})
        super().__init__({
            "i_ready": In(slots),
            "i_noroom": In(slots),
            "i_busy": In(slots),
            "o_pick": Out(pick),
            "o_s1": Out(data.StructLayout({"valid": 1, "slot": sb, "cont": 1, "hot": slots})),
        })

    def elaborate(self, platform):
        m = Module()
        S, pp = self._slots, self._pipe
        sb = S.bit_length() - 1
        s1_valid = Signal(name=f"s1_valid{pp}")
        s1_slot = Signal(sb, name=f"s1_slot{pp}")
        s1_cont = Signal(name=f"s1_cont{pp}")
        s1_hot = onehot(m, s1_slot, S, f"dec_s1_{pp}")
        s1_in = Signal(S, name=f"s1_in{pp}")
        m.d.comb += s1_in.eq(s1_hot & s1_valid.replicate(S))
        ready = Signal(S, name=f"ready{pp}")
        m.d.comb += ready.eq(self.i_ready & ~s1_in)
        # Slots whose last pick found a local destination full go last: they are
        # picked only when no other slot of the pipe is ready (a full consumer FIFO
        # otherwise costs the pipe one issue cycle per retry, e.g. input loads running
        # ahead of their FACCs crowd out the loads those FACCs wait for).
        fresh = Signal(S, name=f"fresh{pp}")
        m.d.comb += fresh.eq(ready & ~self.i_noroom)
        cand = Signal(S, name=f"cand{pp}")
        m.d.comb += cand.eq(Mux(fresh.any(), fresh, ready))
        any_rdy, pick, last = round_robin(m, cand, f"pick{pp}")
        cont = Signal(name=f"cont{pp}")
        if self._cont:
            m.d.comb += cont.eq(bit_at(self.i_busy, pick))
        slot0 = Signal(sb, name=f"slot0_{pp}")
        m.d.comb += slot0.eq(pick)
        with m.If(any_rdy):
            m.d.sync += last.eq(pick)
        m.d.sync += [s1_valid.eq(any_rdy), s1_slot.eq(slot0), s1_cont.eq(cont)]
        m.d.comb += [self.o_pick.valid.eq(any_rdy), self.o_pick.slot.eq(slot0),
                     self.o_pick.cont.eq(cont),
                     self.o_s1.valid.eq(s1_valid), self.o_s1.slot.eq(s1_slot),
                     self.o_s1.cont.eq(s1_cont), self.o_s1.hot.eq(s1_in)]
        return m
