"""The per-slot execution state: END counts, SCAN/ITER/BSCAN/BPOS state, FACC accumulators.

Three kinds of state outlive one firing of a slot, each in a memory of one entry per slot:

* the END count: the END messages the slot has sent, i.e. the context ID its next END
  carries.  Two memories, one for the INT pipes and one for the FP pipe (a slot is in one
  pipe); read combinationally in S1 and incremented when an instruction with END fires (a
  store's count rides in its reorder pool entry to the acknowledgement, which sends it).
* the INT state (:func:`hw.pe.layouts.int_state_layout`): SCAN's sum and firings, an emitting
  ITER's next value and tokens left, an emitting BSCAN's running address, tokens left and mask
  bits not yet scanned, an emitting BPOS's base and mask bits not yet emitted.  Read at the
  pick (a synchronous read, ready in S1), written in S1 by the slot's own INT pipe.
* the FACC state (:func:`hw.pe.fp_step.facc_state_layout`): the partial sum and its count
  (steps done, or with a count operand steps left), read at the pick and written when the FPU
  returns an accumulation step.

Contract
--------
* ``i_ends[pp]`` (``slot``, ``inc``), ``o_ends[pp]``: pipe ``pp``'s END count of ``slot``
  (combinational) and its increment.  Pipe 1 is the FP pipe; the others share the INT memory
  (a slot is in one pipe's S1 at a time, so they never write the same entry).
* ``i_scan[j]`` (``pick``: the slot read; ``slot``, ``en``, ``data``: the write) and
  ``o_scan[j]`` (the state of the slot picked a cycle earlier): INT pipe ``j``
  (``int_pipes[j]``).
* ``i_facc`` (``pick``; ``slot``, ``en``, ``data``), ``o_facc``: the same for the FP pipe.
* ``i_clear`` (``valid``, ``slot``): configuring ``slot`` zeroes its state, winning over every
  write of that cycle (it borrows pipe 0's, pipe 1's and the FACC write ports: configuration
  precedes the run).  Memories keep their contents over a reset, and a slot's previous
  program may have left an END count, an ITER value or a partial sum behind.
"""

from amaranth import Module
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.logic import increment
from hw.lib.spec import check_params
from hw.pe.fp_step import facc_state_layout
from hw.pe.layouts import int_state_layout

__all__ = ["SlotState"]


class SlotState(wiring.Component):
    """The state memories of the slots (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        The slots.
    int_pipes : tuple of int
        The INT pipes' numbers: ``(0,)``, or ``(0, 2)`` with ``params.int_issue == 2``.
    """

    def __init__(self, params, int_pipes):
        self._MustUse__silence = True      # (a rejected one is never elaborated: no warning)
        check_params(params)
        if tuple(int_pipes) not in ((0,), (0, 2)):
            raise TypeError(f"int_pipes must be (0,) or (0, 2), not {int_pipes!r}")
        self._params, self._int_pipes = params, tuple(int_pipes)
        sb = params.slot_bits
        pipes = 3 if self._int_pipes == (0, 2) else 2  # INT, FP (, the second INT)

        def access(layout):
            return data.StructLayout({"pick": sb, "slot": sb, "en": 1, "data": layout})

        self._MustUse__silence = False
        super().__init__({
            "i_ends": In(data.StructLayout({"slot": sb, "inc": 1})).array(pipes),
            "o_ends": Out(32).array(pipes),
            "i_scan": In(access(int_state_layout())).array(len(self._int_pipes)),
            "o_scan": Out(int_state_layout()).array(len(self._int_pipes)),
            "i_facc": In(access(facc_state_layout())),
            "o_facc": Out(facc_state_layout()),
            "i_clear": In(data.StructLayout({"valid": 1, "slot": sb})),
        })

    def elaborate(self, platform):
        m = Module()
        S = self._params.slots
        clear = self.i_clear
        ends = [Memory(shape=32, depth=S, init=[]) for _ in range(2)]      # INT, FP
        m.submodules.ends_mem0, m.submodules.ends_mem1 = ends
        for pp, (req, count) in enumerate(zip(self.i_ends, self.o_ends)):
            mem = ends[1 if pp == 1 else 0]
            r, w = mem.read_port(domain="comb"), mem.write_port()
            m.d.comb += [r.addr.eq(req.slot), count.eq(r.data),
                         w.addr.eq(req.slot), w.data.eq(increment(r.data)), w.en.eq(req.inc)]
            if pp < 2:
                with m.If(clear.valid):
                    m.d.comb += [w.addr.eq(clear.slot), w.en.eq(1), w.data.eq(0)]

        m.submodules.scan_mem = scan = Memory(shape=int_state_layout(), depth=S, init=[])
        m.submodules.facc_mem = facc = Memory(shape=facc_state_layout(), depth=S, init=[])
        accesses = list(zip(self.i_scan, self.o_scan, [scan] * len(self.i_scan)))
        for j, (req, state, mem) in enumerate(accesses + [(self.i_facc, self.o_facc, facc)]):
            r, w = mem.read_port(), mem.write_port()
            m.d.comb += [r.addr.eq(req.pick), state.eq(r.data),
                         w.addr.eq(req.slot), w.en.eq(req.en), w.data.eq(req.data)]
            if j == 0 or mem is facc:
                with m.If(clear.valid):
                    m.d.comb += [w.addr.eq(clear.slot), w.en.eq(1), w.data.eq(0)]
        return m
