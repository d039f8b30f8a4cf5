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
  ``o_flit``.  After the last destination, ``end`` sends a CTX_END flit (``data`` = ``ectx``,
  ``count`` = 1) to the MicC (the PE merges those of one context).
* Throughput: a result occupies the dispatcher as many cycles as its busiest port needs (one
  per destination with one local port); ``i_res.ready`` is high when it is idle or
  finishing its last step, so results flow at one per cycle.  ``i_res.ready`` depends
  combinationally on ``o_local.ready`` / ``o_flit.ready``, never on ``i_res.valid``.
* ``i_coord``: this PE's coordinate (not biased), a run-time input so that one Verilog module
  serves every PE of the array; it decides which destinations are local.
* Ordering: results in arrival order (a result's destinations are distinct FIFOs, so their
  order within the result does not matter); ``o_local`` and ``o_flit`` words come from
  registers and stay stable while offered.

:class:`ReplyPort` merges the dispatchers' flits into the PE's ``o_rep`` and coalesces their
CTX_END messages:

* ``i_flit[j]`` (dispatcher ``j``, lower ``j`` first): an OPERAND flit goes into a ``depth``-word
  FIFO (one per cycle, the lowest ``j`` first); a CTX_END flit goes into the END
  *accumulator* ``(ctx, count)``: every CTX_END offered in a cycle whose context ID (``data``
  bits 31:0) equals the accumulator's (or, when it is empty, the lowest offered one's) is
  taken and adds 1; the others wait (their dispatcher stalls) until the accumulator empties.
* The accumulator moves into the END *output register* when that is empty or leaving and the
  accumulator is *ripe*: ``hold`` cycles passed without a new END of its context (an END of
  another context waiting, or a count of ``2**15``, ripens it at once); the output register
  sends one CTX_END with ``data`` = ``ctx`` and ``count`` = its ENDs.  So a burst of one
  context's ENDs (an engine's stores acknowledged at the end of a pass) leaves as one flit,
  and while ``o_rep`` is blocked they pile up in one flit.  ``hold`` delays a context's
  retirement by at most ``hold`` cycles; ``hold = 0`` merges only while blocked.
* ``o_rep`` offers the FIFO's head first; the END register only when the FIFO is empty, so an
  END never overtakes a flit that entered the FIFO before it (and, once offered, it stays
  until taken: stream rules).  The END path cannot deadlock: OPERAND flits of a context are
  finite, and the MicC always sinks CTX_END.
* A count never exceeds ``2**15 + len(i_flit)`` (the accumulator stops merging at ``2**15``),
  below the 16-bit field's limit.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.fifo import StreamFIFO
from hw.lib.logic import equals
from hw.lib.spec import check_params
from hw.noc.flit import FlitKind, body_view, flit_layout
from hw.pe.layouts import coord_layout, dispatch_layout, local_layout
from sw.spec.packet import END_COUNT_BITS, Kind, bias

__all__ = ["Dispatcher", "ReplyPort", "HOLD"]

#: Default quiet cycles of :class:`ReplyPort`'s END accumulator (see the module docstring).
HOLD = 16


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
        check_params(params)
        if local_ports not in (1, params.MAX_DESTS):
            raise ValueError(f"local_ports must be 1 or {params.MAX_DESTS}, not {local_ports!r}")
        self._params, self._micc, self._nl = params, micc, local_ports
        super().__init__({
            "i_coord": In(coord_layout(params)),
            "i_res": In(stream.Signature(dispatch_layout(params))),
            "o_local": Out(stream.Signature(local_layout(params))).array(local_ports),
            "o_flit": Out(stream.Signature(flit_layout(params))),
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
        operand, end = body_view(flit, Kind.OPERAND, p), body_view(flit, Kind.CTX_END, p)
        with m.If(have_dest):
            m.d.comb += [
                flit.kind.eq(FlitKind.OPERAND),
                flit.dst_x.eq(dest.x + 1),
                flit.dst_y.eq(dest.y + 1),
                operand.slot.eq(dest.slot),
                operand.operand.eq(dest.operand),
                operand.data.eq(cur.data),
            ]
        with m.Else():
            m.d.comb += [
                flit.kind.eq(FlitKind.CTX_END),
                flit.dst_x.eq(bias(self._micc[0])),
                flit.dst_y.eq(bias(self._micc[1])),
                end.data.eq(cur.ectx),
                end.count.eq(1),
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


class ReplyPort(wiring.Component):
    """Merge the dispatchers' flits into one reply output, coalescing CTX_END messages.

    See the module docstring for the contract.

    Parameters
    ----------
    params : ArrayParams
    micc : tuple of int
        Coordinate of the MicC, the destination of the CTX_END flits.
    ports : int
        Number of ``i_flit`` inputs (at least 1).
    depth : int
        Words of the OPERAND FIFO (at least 1).
    hold : int
        Quiet cycles (0 .. 255, default :data:`HOLD`) the accumulator waits for more ENDs of
        its context before it moves to the output register.
    """

    def __init__(self, params, micc, ports, depth=4, hold=HOLD):
        check_params(params)
        for name, value in (("ports", ports), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(hold, int) or isinstance(hold, bool) or not 0 <= hold <= 255:
            raise ValueError(f"hold must be an integer from 0 to 255, not {hold!r}")
        self._params, self._micc, self._n, self._depth = params, micc, ports, depth
        self._hold = hold
        super().__init__({
            "i_flit": In(stream.Signature(flit_layout(params))).array(ports),
            "o_rep": Out(stream.Signature(flit_layout(params))),
        })

    def elaborate(self, platform):
        m = Module()
        p, n = self._params, self._n
        flit_w = flit_layout(p).size
        m.submodules.rep_q = rep_q = StreamFIFO(width=flit_w, depth=self._depth)

        is_end = [Signal(name=f"is_end{j}") for j in range(n)]
        ctx_of = [body_view(self.i_flit[j].payload, Kind.CTX_END, p).data[:32] for j in range(n)]
        for j in range(n):
            m.d.comb += is_end[j].eq(self.i_flit[j].payload.kind == FlitKind.CTX_END)

        # OPERAND flits -> the FIFO, the lowest port first.
        taken = Const(0, 1)
        for j in range(n):
            port = self.i_flit[j]
            want = port.valid & ~is_end[j]
            grant = want & ~taken
            with m.If(grant):
                m.d.comb += [rep_q.i_data.payload.eq(port.payload), rep_q.i_data.valid.eq(1)]
            with m.If(~is_end[j]):
                m.d.comb += port.ready.eq(grant & rep_q.i_data.ready)
            taken = taken | want

        # CTX_END flits -> the accumulator -> the END output register.
        acc_valid, acc_ctx = Signal(), Signal(32)
        acc_count = Signal(END_COUNT_BITS)
        out_valid, out_ctx = Signal(), Signal(32)
        out_count = Signal(END_COUNT_BITS)
        first_ctx = Signal(32)                      # the lowest offered END's context
        for j in reversed(range(n)):
            with m.If(self.i_flit[j].valid & is_end[j]):
                m.d.comb += first_ctx.eq(ctx_of[j])
        target = Signal(32)
        m.d.comb += target.eq(Mux(acc_valid, acc_ctx, first_ctx))
        take = Signal(n)
        room = ~acc_valid | ~acc_count[-1]          # stop merging at 2 ** 15
        for j in range(n):
            port = self.i_flit[j]
            m.d.comb += take[j].eq(port.valid & is_end[j] & (ctx_of[j] == target) & room)
            with m.If(is_end[j]):
                m.d.comb += port.ready.eq(take[j])
        wide_added = Signal(END_COUNT_BITS)          # the ENDs taken this cycle
        terms = [Mux(take[j], Const(1, END_COUNT_BITS), Const(0, END_COUNT_BITS))
                 for j in range(n)]
        total = terms[0]
        for t in terms[1:]:
            total = (total + t)[:END_COUNT_BITS]
        m.d.comb += wide_added.eq(total)

        # o_rep: the FIFO's head, else the END register (only when the FIFO is empty); an
        # offered END stays offered until taken.
        end_locked = Signal()
        offer_end = Signal()
        m.d.comb += offer_end.eq(out_valid & (~rep_q.level.any() | end_locked))
        out_flit = Signal(flit_layout(p))
        m.d.comb += [
            out_flit.kind.eq(FlitKind.CTX_END),
            out_flit.dst_x.eq(bias(self._micc[0])),
            out_flit.dst_y.eq(bias(self._micc[1])),
            body_view(out_flit, Kind.CTX_END, p).data.eq(out_ctx),
            body_view(out_flit, Kind.CTX_END, p).count.eq(out_count),
        ]
        m.d.comb += [
            self.o_rep.valid.eq(offer_end | rep_q.o_data.valid),
            self.o_rep.payload.eq(Mux(offer_end, out_flit.as_value(), rep_q.o_data.payload)),
            rep_q.o_data.ready.eq(self.o_rep.ready & ~offer_end),
        ]
        out_sent = Signal()
        m.d.comb += out_sent.eq(offer_end & self.o_rep.ready)
        m.d.sync += end_locked.eq(offer_end & ~self.o_rep.ready)

        # The accumulator moves on after ``hold`` cycles without a new END of its context, at
        # once when an END of another context waits or the count reached 2 ** 15.
        quiet = Signal(range(256))                  # 0 .. hold (saturates)
        at_hold = equals(quiet, self._hold)
        ripe = Signal()
        other = Cat(*[self.i_flit[j].valid & is_end[j] & ~take[j] for j in range(n)]).any()
        m.d.comb += ripe.eq(at_hold | other | acc_count[-1])
        with m.If(take.any()):
            m.d.sync += quiet.eq(0)
        with m.Elif(acc_valid & ~at_hold):
            m.d.sync += quiet.eq((quiet + 1)[:8])
        move = Signal()                             # accumulator -> output register
        m.d.comb += move.eq(acc_valid & ripe & (~out_valid | out_sent))
        with m.If(move):
            m.d.sync += [out_valid.eq(1), out_ctx.eq(acc_ctx), out_count.eq(acc_count)]
        with m.Elif(out_sent):
            m.d.sync += out_valid.eq(0)
        with m.If(move):
            m.d.sync += [acc_valid.eq(take.any()), acc_ctx.eq(target), acc_count.eq(wide_added)]
        with m.Elif(take.any()):
            m.d.sync += [acc_valid.eq(1), acc_ctx.eq(target),
                         acc_count.eq((Mux(acc_valid, acc_count, 0) + wide_added)[:END_COUNT_BITS])]
        return m
