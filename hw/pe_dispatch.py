"""Result dispatch of the processing element: one result to each of its destinations.

Contract
--------
* ``i_res`` takes one result: a 64-bit ``data`` word, the instruction's four destination fields
  (``x``, ``y``, ``slot``, ``operand``), a ``dmask`` of the destinations to serve (SWITCH
  clears the branch not taken) and ``end`` (also send a context-end message).
* ``o_local``: an array of ``local_ports`` streams (slot, operand, data) into the operand
  buffer, for destinations on this PE (no mesh trip).  With ``local_ports == 1`` the
  dispatcher serves the selected destinations in index order, **one per cycle**, the lowest
  one on ``o_local[0]`` if local, as an OPERAND flit on ``o_flit`` otherwise.  With
  ``local_ports == MAX_DESTS`` every pending local destination ``i`` is offered at once on
  ``o_local[i]`` (the PE's write arbiters grant those whose operand memory port is free:
  up to one per operand memory in a cycle), and beside them the lowest pending remote one on
  ``o_flit``.  After the last destination, ``end`` sends a CTX_END flit (``data`` = ``ectx``)
  to the MicC.
* Throughput: a result occupies the dispatcher as many cycles as its busiest port needs (one
  per destination with one local port); ``i_res.ready`` is high when it is idle or
  finishing its last step, so results flow at one per cycle.  ``i_res.ready`` depends
  combinationally on ``o_local.ready`` / ``o_flit.ready``, never on ``i_res.valid``.
* ``i_coord``: this PE's coordinate (not biased), a run-time input so that one Verilog module
  serves every PE of the array; it decides which destinations are local.
* Ordering: results in arrival order (a result's destinations are distinct FIFOs, so their
  order within the result does not matter); ``o_local`` and ``o_flit`` words come from
  registers and stay stable while offered.
"""

from amaranth import Const, Module, Mux, Signal
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
    local_ports : int
        1 (one destination per cycle) or ``params.MAX_DESTS`` (every local destination offered
        at once).
    """

    def __init__(self, params, micc, local_ports=1):
        if not isinstance(params, ArrayParams):
            raise TypeError(f"params must be an ArrayParams, not {params!r}")
        if local_ports not in (1, params.MAX_DESTS):
            raise ValueError(f"local_ports must be 1 or {params.MAX_DESTS}, not {local_ports!r}")
        self._params, self._micc, self._nl = params, micc, local_ports
        super().__init__({
            "i_coord": In(coord_layout(params)),
            "i_res": In(stream.Signature(dispatch_layout(params))),
            "o_local": Out(stream.Signature(local_layout(params))).array(local_ports),
            "o_flit": Out(stream.Signature(flit_union(params))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        ND = p.MAX_DESTS
        cur = Signal(dispatch_layout(p), name="cur")
        busy = Signal()
        multi = self._nl > 1

        is_local = Signal(ND)
        for i in range(ND):
            m.d.comb += is_local[i].eq((cur.dests[i].x == self.i_coord.x)
                                       & (cur.dests[i].y == self.i_coord.y))
        # The flit port serves the lowest pending destination (multi: the lowest remote one).
        fmask = Signal(ND)
        m.d.comb += fmask.eq(cur.dmask & ~is_local if multi else cur.dmask)
        idx = Signal(range(ND))
        for i in reversed(range(ND)):
            with m.If(fmask[i]):
                m.d.comb += idx.eq(i)
        dest = Signal(data.StructLayout({"x": len(cur.dests[0].x), "y": len(cur.dests[0].y),
                                         "slot": p.slot_bits, "operand": 2}))
        with m.Switch(idx):
            for i in range(ND):
                with m.Case(i):
                    m.d.comb += dest.eq(cur.dests[i])
        have_dest = cur.dmask.any()
        have_f = fmask.any()
        first = Signal(ND)                          # the lowest bit of fmask
        m.d.comb += first.eq(fmask & ~(fmask - 1)[:ND])
        f_remote = have_f & (Const(1, 1) if multi else ~(is_local & first).any())

        served = Signal(ND)                         # destinations written this cycle
        if multi:
            for i in range(ND):
                port = self.o_local[i]
                m.d.comb += [port.valid.eq(busy & cur.dmask[i] & is_local[i]),
                             port.payload.slot.eq(cur.dests[i].slot),
                             port.payload.operand.eq(cur.dests[i].operand),
                             port.payload.data.eq(cur.data),
                             served[i].eq(port.valid & port.ready)]
        else:
            port = self.o_local[0]
            m.d.comb += [port.valid.eq(busy & have_f & ~f_remote),
                         port.payload.slot.eq(dest.slot),
                         port.payload.operand.eq(dest.operand),
                         port.payload.data.eq(cur.data)]
            with m.If(port.valid & port.ready):
                m.d.comb += served.eq(first)

        m.d.comb += self.o_flit.valid.eq(busy & (f_remote | (~have_dest & cur.end)))
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

        sent = Signal()                             # the flit port moved this cycle
        m.d.comb += sent.eq(self.o_flit.valid & self.o_flit.ready)
        rest = Signal(ND)                           # still to serve after this cycle
        m.d.comb += rest.eq(cur.dmask & ~served & ~(first & (sent & have_dest).replicate(ND)))
        # Done this cycle: the last destinations went and no END follows, or the END went.
        last = Signal()
        m.d.comb += last.eq(busy & Mux(have_dest, ~rest.any() & ~cur.end, sent))
        m.d.comb += self.i_res.ready.eq(~busy | last)

        with m.If(have_dest):
            m.d.sync += cur.dmask.eq(rest)
        with m.Elif(sent):
            m.d.sync += cur.end.eq(0)
        with m.If(last):
            m.d.sync += busy.eq(0)
        with m.If(self.i_res.valid & self.i_res.ready):
            m.d.sync += [
                cur.eq(self.i_res.payload),
                busy.eq(self.i_res.payload.dmask.any() | self.i_res.payload.end),
            ]
        return m
