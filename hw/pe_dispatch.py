"""Result dispatch of the processing element: one result to each of its destinations.

Contract
--------
* ``i_res`` takes one result: a 64-bit ``data`` word, the instruction's four destination fields
  (``x``, ``y``, ``slot``, ``operand``), a ``dmask`` of the destinations to serve (SWITCH
  clears the branch not taken) and ``end`` (also send a context-end message).
* The dispatcher serves the selected destinations in index order, **one per cycle**: a
  destination on this PE goes out on ``o_local`` (slot, operand, data: written into the
  operand buffer without a mesh trip), any other as an OPERAND flit on ``o_flit``.  After the
  last destination, ``end`` sends a CTX_END flit (``data`` = ``ectx``) to the MicC.
* Throughput: a result with ``n`` destinations (plus one step for ``end``) occupies the
  dispatcher ``n`` cycles; ``i_res.ready`` is high when it is idle or finishing its last step,
  so single-destination results flow at one per cycle.  ``i_res.ready`` depends
  combinationally on ``o_local.ready`` / ``o_flit.ready``, never on ``i_res.valid``.
* ``i_coord``: this PE's coordinate (not biased), a run-time input so that one Verilog module
  serves every PE of the array; it decides which destinations are local.
* Ordering: results in arrival order; ``o_local`` and ``o_flit`` words come from registers and
  stay stable while offered.
"""

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from sw.arch import ArrayParams
from sw.packet import Kind, bias

from .pe_types import coord_layout, dispatch_layout, flit_union, local_layout

__all__ = ["Dispatcher"]


class Dispatcher(wiring.Component):
    """Send each result to its destinations (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
    micc : tuple of int
        Coordinate of the MicC, the destination of CTX_END flits (the same for every PE).
    """

    def __init__(self, params, micc):
        if not isinstance(params, ArrayParams):
            raise TypeError(f"params must be an ArrayParams, not {params!r}")
        self._params, self._micc = params, micc
        super().__init__({
            "i_coord": In(coord_layout(params)),
            "i_res": In(stream.Signature(dispatch_layout(params))),
            "o_local": Out(stream.Signature(local_layout(params))),
            "o_flit": Out(stream.Signature(flit_union(params))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        cur = Signal(dispatch_layout(p), name="cur")
        busy = Signal()

        # The lowest destination still to serve; mask == 0 with end set is the CTX_END step.
        idx = Signal(range(p.MAX_DESTS))
        for i in reversed(range(p.MAX_DESTS)):
            with m.If(cur.dmask[i]):
                m.d.comb += idx.eq(i)
        dest = Signal(data.StructLayout({"x": len(cur.dests[0].x), "y": len(cur.dests[0].y),
                                         "slot": p.slot_bits, "operand": 2}))
        with m.Switch(idx):
            for i in range(p.MAX_DESTS):
                with m.Case(i):
                    m.d.comb += dest.eq(cur.dests[i])
        have_dest = cur.dmask.any()
        local = (dest.x == self.i_coord.x) & (dest.y == self.i_coord.y)

        m.d.comb += [
            self.o_local.valid.eq(busy & have_dest & local),
            self.o_local.payload.slot.eq(dest.slot),
            self.o_local.payload.operand.eq(dest.operand),
            self.o_local.payload.data.eq(cur.data),
            self.o_flit.valid.eq(busy & ((have_dest & ~local) | (~have_dest & cur.end))),
        ]
        flit = self.o_flit.payload
        m.d.comb += flit.as_value().eq(cur.data.replicate(2)[:len(flit.as_value())])
        with m.If(have_dest):
            m.d.comb += [
                flit.operand.kind.eq(Kind.OPERAND),
                flit.operand.dst_x.eq(dest.x + 1),
                flit.operand.dst_y.eq(dest.y + 1),
                flit.operand.slot.eq(dest.slot),
                flit.operand.operand.eq(dest.operand),
                flit.operand.data.eq(cur.data),
            ]
        with m.Else():
            m.d.comb += [
                flit.ctx_end.kind.eq(Kind.CTX_END),
                flit.ctx_end.dst_x.eq(bias(self._micc[0])),
                flit.ctx_end.dst_y.eq(bias(self._micc[1])),
                flit.ctx_end.data.eq(cur.ectx),
            ]

        step = ((self.o_local.valid & self.o_local.ready)
                | (self.o_flit.valid & self.o_flit.ready))
        rest = Signal(p.MAX_DESTS)                  # dmask without its lowest bit
        m.d.comb += rest.eq(cur.dmask & (cur.dmask - 1)[:p.MAX_DESTS])
        single = ~rest.any()
        last = step & ((~have_dest) | (single & ~cur.end))
        m.d.comb += self.i_res.ready.eq(~busy | last)

        with m.If(step):
            with m.If(have_dest):
                m.d.sync += cur.dmask.eq(rest)
            with m.Else():
                m.d.sync += cur.end.eq(0)
        with m.If(last):
            m.d.sync += busy.eq(0)
        with m.If(self.i_res.valid & self.i_res.ready):
            m.d.sync += [
                cur.eq(self.i_res.payload),
                busy.eq(self.i_res.payload.dmask.any() | self.i_res.payload.end),
            ]
        return m
