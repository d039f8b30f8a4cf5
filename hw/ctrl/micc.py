"""The MicC: configures the PE array from the Cbufs, then streams contexts and counts their ends.

::

    host regs --start--> IDLE -> CONFIG -> DRAIN -> HOLD -> CTX <-> (window) -> WAIT -> DONE

    port p (0 .. ports-1), each with its own Cbuf region and its own edge port:
    Cbuf word (1 cycle) -> record header? latch : make flit -> [out FIFO, 4]
        -> each PE of the record's span (INSN words moved to it) -> o_flit[_p]
    (CONFIG data word -> CONFIG flit; port 0 after configuring: CTX template -> OPERAND flit
    with the context ID)
    i_flit (CTX_END, always ready) -> end counter of that context -> retire in order

Contract
--------
Host registers (ports, sampled on ``i_start``): ``i_n_config`` (port 0) and ``i_n_config_<p>``
(port ``p >= 1``) words of configuration records at the start of each port's Cbuf region;
``i_n_ctx`` CTX template words (one per CTX slot) after port 0's records; ``i_contexts``;
``i_window`` (``1 .. operand_depth``); ``i_ends`` (END messages per context); ``i_ctx_base``
(the first context ID: alternate passes of a double-buffered layer number their contexts
from 0 and from ``contexts``, so that they read alternate halves of the descriptor tables);
``i_keep`` (the PEs hold this configuration from the previous run, which left them as
configuring does: no CONFIG, DRAIN, start in HOLD) and ``i_end_base`` (the ENDs the END slots
sent since they were configured: the IDs the ENDs of this run carry start there).  With
``ports = P`` the Cbufs are cut into ``P`` regions of ``words / P`` words (whole banks,
:class:`hw.ctrl.cbuf.Cbuf`); port ``p`` reads only region ``p`` (its ``rd_addr_<p>`` is an offset
in it), so the ports never compete for a bank.  The Cbuf words are 64 bits; the record and
template formats are :func:`sw.spec.cbuf.cbuf_header_layout` and
:func:`sw.spec.cbuf.cbuf_template_layout`, and :func:`sw.compiler.image.expand_cbuf` is one port's
expansion in Python.

1. CONFIG (skipped with ``i_keep``): every port reads one Cbuf word per cycle; a record
   header is latched (no flit), each of its ``count`` data words leaves as one CONFIG flit
   per PE of the header's span (its destination to destination + ``(span_x, span_y)``, ``x``
   fastest; an INSN word moved to each PE, :func:`sw.spec.cbuf.move_insn_part`) with the
   header's ``what`` and the running ``(slot, index)``, one flit per cycle per port when the
   mesh accepts.  The ports run in parallel and independently.
2. DRAIN: until every port's last flit left and ``drain`` cycles passed; with
   ``delivered=True`` (the top) also until ``i_delivered`` (CONFIG flits ejected into PEs
   since the start, counted by the top) equals the CONFIG flits sent, so no context token
   can overtake a CONFIG flit whatever the traffic on the mesh (``docs/system.md``).
3. HOLD: while ``i_hold`` (the top: the data of context ``o_issued`` are not all in the
   Dbufs yet, the DMA-in that overlaps the configuration), no context starts.
4. CTX: context ``c`` (0, 1, ...) is started only while ``issued - retired < window`` and
   ``i_hold`` is low (the top lowers it per context when its data are in: ``docs/system.md``,
   "Contexts start when their data are in"); its start is one OPERAND flit per template word
   with ``data = i_ctx_base + c`` (its ID), in Cbuf order, on port 0.
   With ``window = 1`` every context waits for the previous one to end: the dependence
   control for contexts that depend on each other (the image's ``window`` chooses it).
5. Each CTX_END flit carries its context ID and a ``count`` of END messages (ISA
   v1.2, 0 counts as 1; the ID is the END slot's count of earlier ENDs minus ``i_end_base``,
   ``0 .. contexts-1`` whatever ``i_ctx_base``); the end counter of that context (a table
   indexed by the ID's low bits) adds the count; the oldest context retires when its counter
   reaches ``i_ends``.  ``o_ends`` counts END messages (the sum of the counts), not flits.
   DONE when ``retired == contexts``; ``o_done`` stays high until the next start.

Errors (sticky until the next start, bits of ``o_error`` = :class:`sw.spec.status.MiccError`)
end the run in DONE with ``o_done`` low: a configuration larger than a port's Cbuf region, bad
registers, a flit other than CTX_END, an end for a context not in flight, more ends than
``i_ends`` for a context, a Cbuf write (``i_cbuf_write``) while the MicC runs.  ``o_cycles``
counts the cycles from start to DONE, ``o_config_cycles`` those spent configuring (CONFIG and
DRAIN), ``o_hold_cycles`` those in which the next context waited for ``i_hold`` with no
context in flight (HOLD, and CTX with the array idle: waiting for the DMA, not for the array),
``o_config_hidden`` the configuring cycles during which ``i_hold`` was high (configuration
that ran behind the DMA).
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, increment, popcount, zero_extend
from hw.lib.spec import check_params, shaped_enum
from hw.noc.flit import Bits, FlitKind, body_view, flit_layout
from sw.spec import status
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import (cbuf_header_layout, cbuf_template_layout, cbuf_words,
                          dest_fields, valid_parts, word_bits, word_parts)
from sw.spec.packet import ConfigWhat, Kind
from sw.spec.status import MiccError

__all__ = ["Micc", "MiccState", "build_micc"]


#: The MicC's state register: :class:`sw.spec.status.MiccState` with its
#: :data:`~sw.spec.status.STATE_BITS`-bit shape.
MiccState = shaped_enum(status.MiccState, status.STATE_BITS, module=__name__)


def _zx(value, width=32):
    """Return ``value`` (a value or a view) zero-extended to ``width`` bits."""
    return zero_extend(value.as_value() if hasattr(value, "as_value") else value, width)


def _sfx(port):
    """Return the suffix of port ``port``'s signal names ("" for port 0)."""
    return f"_{port}" if port else ""


class Micc(wiring.Component):
    """Build the micro-controller (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Flit format, ``operand_depth`` (the largest window), Cbuf size.
    drain : int, optional
        Least cycles between the last CONFIG flit and the first context; default
        ``2 * (rows + cols) + 8`` (the furthest PE from a single source), 2 with
        ``delivered``.
    ports : int
        Configuration ports (1 .. 4), each with its own output stream and Cbuf region; must
        divide ``params.cbufs``.
    delivered : bool
        DRAIN also waits for ``i_delivered`` to reach the CONFIG flits sent (the top counts
        CONFIG flits ejected into PEs).
    """

    def __init__(self, params=ArrayParams(), *, drain=None, ports=1, delivered=False):
        check_params(params)
        if not isinstance(ports, int) or isinstance(ports, bool) or not 1 <= ports <= 4 \
                or params.cbufs % ports:
            raise TypeError(f"ports must be an integer in 1..4 dividing cbufs "
                            f"({params.cbufs}), not {ports!r}")
        if drain is None:
            drain = 2 if delivered else 2 * (params.rows + params.cols) + 8
        if not isinstance(drain, int) or isinstance(drain, bool) or drain < 1:
            raise TypeError(f"drain must be a positive integer, not {drain!r}")
        self.params, self.drain, self.ports = params, drain, ports
        self.delivered = bool(delivered)
        self.words = cbuf_words(params) * params.cbufs
        self.region = self.words // ports
        flit = stream.Signature(flit_layout(params))
        abits = max(1, (self.region - 1).bit_length())
        members = {}
        for q in range(ports):
            s = _sfx(q)
            members.update({
                f"o_flit{s}": Out(flit), f"rd_en{s}": Out(1), f"rd_addr{s}": Out(abits),
                f"rd_data{s}": In(word_bits(params)), f"i_n_config{s}": In(32)})
        super().__init__({
            **members,
            "i_flit": In(flit),
            "i_start": In(1),
            "i_n_ctx": In(16), "i_contexts": In(32),
            "i_window": In(8), "i_ends": In(16), "i_ctx_base": In(32),
            "i_keep": In(1), "i_end_base": In(32),
            "i_hold": In(1), "i_cbuf_write": In(1), "i_delivered": In(32),
            "o_state": Out(MiccState), "o_done": Out(1), "o_error": Out(len(MiccError)),
            "o_issued": Out(32), "o_retired": Out(32), "o_ends": Out(32), "o_cycles": Out(48),
            "o_config_cycles": Out(48), "o_hold_cycles": Out(48), "o_config_hidden": Out(48),
            "o_flits": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace()           # the signals the parts below share
        self._registers(m, s)
        s.ports = [self._port(m, s, q) for q in range(self.ports)]
        sent = [q.o_flit.valid & q.o_flit.ready for q in s.ports]
        m.d.sync += s.flits.eq((s.flits + popcount(sent, 32))[:32])
        self._ends(m, s)
        self._counters(m, s)
        self._sequencer(m, s)
        return m

    def _registers(self, m, s):
        """The sequencer's state, the job's registers and the host's counters."""
        # A typed register rather than ``m.FSM``: the error exit (any state -> DONE) and the
        # start (IDLE or DONE -> CONFIG) take priority over every state's own transition, and
        # the host reads fixed values (``o_state``).
        s.state = state = Signal(MiccState)
        s.err = err = Signal(len(MiccError))
        s.issued = Signal(32)
        s.retired = Signal(32)
        s.ends_seen = Signal(32)
        s.cycles = Signal(48)
        s.config_cycles = Signal(48)
        s.hold_cycles = Signal(48)
        s.held = Signal()
        s.flits, s.hidden = Signal(32, name="flits"), Signal(48, name="hidden")
        s.n_ctx, s.contexts = Signal(32, name="n_ctx"), Signal(32, name="contexts")
        s.window = Signal(32)
        s.ends = Signal(16)
        s.ctx_base = Signal(32)
        s.end_base = Signal(32)
        s.running = ~equals(state, MiccState.IDLE) & ~equals(state, MiccState.DONE)
        m.d.comb += [
            self.o_state.eq(state), self.o_error.eq(err),
            self.o_done.eq(equals(state, MiccState.DONE) & ~err.any()),
            self.o_issued.eq(s.issued), self.o_retired.eq(s.retired),
            self.o_ends.eq(s.ends_seen), self.o_cycles.eq(s.cycles),
            self.o_config_cycles.eq(s.config_cycles), self.o_hold_cycles.eq(s.hold_cycles),
            self.o_flits.eq(s.flits), self.o_config_hidden.eq(s.hidden),
        ]

    def _port(self, m, s, q):
        """Return configuration port ``q``'s reader: a Cbuf read (one cycle) into a small
        FIFO, issued only when the FIFO has room for it counting the read in flight, so nothing
        is ever dropped; the records' words become CONFIG flits, each sent to every PE of its
        record's span (:meth:`_spread`).  Port 0 also reads the CTX templates once configured
        (``pend_is_ctx``, ``pend_ctx``: the ID the flit carries)."""
        p = self.params
        lay = flit_layout(p)
        sfx = _sfx(q)
        rd_en, rd_addr, rd_data = (getattr(self, f"{n}{sfx}")
                                   for n in ("rd_en", "rd_addr", "rd_data"))
        o_flit = getattr(self, f"o_flit{sfx}")
        # An entry: the flit to the span's first PE, then the span.
        out = fifo.SyncFIFO(width=lay.size + p.x_bits + p.y_bits, depth=4)
        m.submodules[f"out{sfx}"] = out
        pend = Signal(name=f"pend{sfx}")
        can_read = Signal(name=f"can_read{sfx}")
        level = Bits(out.w_level)
        m.d.comb += can_read.eq((level < 3) | ((level == 3) & ~pend))
        m.d.sync += pend.eq(rd_en)
        hdr = data.View(data.StructLayout(cbuf_header_layout(p).struct_fields()), rd_data)
        r_what, r_x, r_y = Signal(2, name=f"r_what{sfx}"), \
            Signal(p.x_bits, name=f"r_x{sfx}"), Signal(p.y_bits, name=f"r_y{sfx}")
        r_sx, r_sy = Signal(p.x_bits, name=f"r_sx{sfx}"), Signal(p.y_bits, name=f"r_sy{sfx}")
        r_slot = Signal(p.slot_bits, name=f"r_slot{sfx}")
        r_index = Signal(len(hdr.index), name=f"r_index{sfx}")
        r_left = Signal(16, name=f"r_left{sfx}")
        is_data = r_left.any()
        cfg_flit = Signal(lay, name=f"cfg_flit{sfx}")
        cview = body_view(cfg_flit, Kind.CONFIG, p)
        m.d.comb += [
            cfg_flit.kind.eq(FlitKind.CONFIG), cfg_flit.dst_x.eq(r_x),
            cfg_flit.dst_y.eq(r_y), cview.what.eq(r_what), cview.index.eq(r_index),
            cview.slot.eq(r_slot), cview.data.eq(rd_data),
        ]
        pend_cfg = pend
        if q == 0:
            s.pend_is_ctx, s.pend_ctx = Signal(name="pend_is_ctx"), Signal(32, name="pend_ctx")
            pend_cfg = pend & ~s.pend_is_ctx
        with m.If(pend_cfg):
            with m.If(is_data):
                # INSN: index counts the instruction word's parts, then the slot moves on.
                wrap = equals(r_what, ConfigWhat.INSN) & equals(r_index, word_parts(p) - 1)
                m.d.sync += [r_left.eq(r_left - 1),
                             r_index.eq(Mux(wrap, 0, increment(r_index))),
                             r_slot.eq(Mux(wrap, increment(r_slot), r_slot))]
            with m.Else():
                m.d.sync += [r_what.eq(hdr.what), r_x.eq(hdr.dst_x), r_y.eq(hdr.dst_y),
                             r_slot.eq(hdr.slot), r_index.eq(hdr.index),
                             r_left.eq(hdr.count), r_sx.eq(hdr.span_x), r_sy.eq(hdr.span_y)]
        cfg_entry = Cat(cfg_flit.as_value(), r_sx, r_sy)
        if q == 0:
            tpl = data.View(data.StructLayout(cbuf_template_layout(p).struct_fields()), rd_data)
            ctx_flit = Signal(lay)
            oview = body_view(ctx_flit, Kind.OPERAND, p)
            m.d.comb += [
                ctx_flit.kind.eq(FlitKind.OPERAND), ctx_flit.dst_x.eq(tpl.dst_x),
                ctx_flit.dst_y.eq(tpl.dst_y), oview.slot.eq(tpl.slot),
                oview.operand.eq(tpl.operand), oview.data.eq(_zx(s.pend_ctx, 64)),
                out.w_en.eq(pend & (s.pend_is_ctx | is_data)),
                out.w_data.eq(Mux(s.pend_is_ctx,
                                  Cat(ctx_flit.as_value(), Const(0, p.x_bits + p.y_bits)),
                                  cfg_entry)),
            ]
        else:
            m.d.comb += [out.w_en.eq(pend & is_data), out.w_data.eq(cfg_entry)]
        self._spread(m, out, o_flit, sfx)
        return SimpleNamespace(rd_en=rd_en, rd_addr=rd_addr, can_read=can_read, pend=pend,
                               out=out, o_flit=o_flit, rptr=Signal(32, name=f"rptr{sfx}"),
                               left=Signal(32, name=f"left{sfx}"), r_left=r_left,
                               n_config=getattr(self, f"i_n_config{sfx}"))

    def _spread(self, m, out, o_flit, sfx):
        """Send the FIFO's head entry to every PE of its span, ``x`` fastest, then pop it: the
        flit to PE ``(x0 + a, y0 + b)`` carries an INSN word moved by ``(a, b)``
        (:func:`sw.spec.cbuf.move_insn_part`; the valid bits an earlier part holds are kept
        from the last such word sent, ``kept``)."""
        p = self.params
        lay = flit_layout(p)
        head = Signal(lay, name=f"head{sfx}")
        sx, sy = Signal(p.x_bits, name=f"head_sx{sfx}"), Signal(p.y_bits, name=f"head_sy{sfx}")
        a, b = Signal(p.x_bits, name=f"a{sfx}"), Signal(p.y_bits, name=f"b{sfx}")
        kept = Signal(p.MAX_DESTS, name=f"kept{sfx}")
        m.d.comb += Cat(head.as_value(), sx, sy).eq(out.r_data)
        hview = body_view(head, Kind.CONFIG, p)
        word = hview.data
        is_insn = (Bits(head.kind.as_value()) == FlitKind.CONFIG.value) \
            & equals(hview.what, ConfigWhat.INSN)
        moved = Signal(64, name=f"moved{sfx}")
        m.d.comb += moved.eq(word)
        fields = dest_fields(p)
        for part in range(word_parts(p)):
            mine = [f for f in fields if f.part == part]
            if not mine:
                continue
            patched = [word[i] for i in range(64)]
            for f in mine:
                valid = word[f.valid_lo] if f.valid_part == part else kept[f.dest]
                step = a if f.axis == "x" else b
                value = (word[f.lo:f.lo + f.width] + step)[:f.width]
                value = Mux(valid, value, word[f.lo:f.lo + f.width])
                for i in range(f.width):
                    patched[f.lo + i] = value[i]
            with m.If(is_insn & equals(hview.index, part)):
                m.d.comb += moved.eq(Cat(*patched))
        flit = Signal(lay, name=f"spread{sfx}")
        fview = body_view(flit, Kind.CONFIG, p)
        m.d.comb += [flit.eq(head), flit.dst_x.eq((head.dst_x + a)[:p.x_bits]),
                     flit.dst_y.eq((head.dst_y + b)[:p.y_bits]), fview.data.eq(moved)]
        last_x, last_y = a == sx, b == sy
        last = last_x & last_y
        m.d.comb += [o_flit.valid.eq(out.r_rdy), o_flit.payload.eq(flit),
                     out.r_en.eq(o_flit.ready & last)]
        with m.If(out.r_rdy & o_flit.ready):
            with m.If(last):
                m.d.sync += [a.eq(0), b.eq(0)]
                for part, bits in valid_parts(p).items():
                    with m.If(is_insn & equals(hview.index, part)):
                        m.d.sync += [kept[dest].eq(word[bit]) for dest, bit in bits]
            with m.Elif(last_x):
                m.d.sync += [a.eq(0), b.eq(increment(b))]
            with m.Else():
                m.d.sync += a.eq(increment(a))
        with m.If(self.i_start):
            m.d.sync += kept.eq(0)

    def _ends(self, m, s):
        """CTX_END flits: counted per context in flight, checked, and the oldest context
        retired when its count reaches ``ends``.

        One counter per context in flight, indexed by the ID's low bits (the window is at most
        operand_depth <= table, so two contexts in flight never share an entry).
        """
        p = self.params
        table = 1 << max(1, (p.operand_depth - 1).bit_length())
        tbits = (table - 1).bit_length()
        s.counts = counts = [Signal(16, name=f"ends{i}") for i in range(table)]
        inc = Signal(table)
        fl = self.i_flit.payload
        end_body = body_view(fl, Kind.CTX_END, p)
        end_id = Signal(32)
        age = Signal(32)
        s.outstanding = Signal(32)
        m.d.comb += [self.i_flit.ready.eq(1), end_id.eq(end_body.data[:32] - s.end_base),
                     age.eq(end_id - s.retired), s.outstanding.eq(s.issued - s.retired)]
        got = self.i_flit.valid
        is_end = Bits(fl.kind.as_value()) == Kind.CTX_END.value
        # In flight: retired <= id <= issued (the context being started counts) and inside
        # the table.
        in_flight = (age <= s.outstanding) & ~age[tbits:].any()
        good_end = got & is_end & in_flight & (end_id < s.contexts)
        # a CTX_END flit stands for ``count`` END messages (0 counts as 1).
        n_end = Signal(16)
        m.d.comb += n_end.eq(Mux(end_body.count.any(), end_body.count, 1))
        with m.If(got):
            m.d.sync += s.ends_seen.eq((s.ends_seen + Mux(is_end, _zx(n_end), Const(1, 32)))[:32])
        with m.If(got & ~is_end):
            m.d.sync += s.err[MiccError.BAD_FLIT].eq(1)
        with m.If(got & is_end & ~good_end):
            m.d.sync += s.err[MiccError.BAD_END].eq(1)
        # The Cbufs are single-ported: a write while the MicC reads them corrupts its reads.
        with m.If(self.i_cbuf_write & s.running):
            m.d.sync += s.err[MiccError.CBUF_BUSY].eq(1)
        for i in range(table):
            m.d.comb += inc[i].eq(good_end & equals(end_id[:tbits], i))
        head = Signal(16)
        m.d.comb += head.eq(counts[0])
        for i in range(1, table):
            with m.If(equals(s.retired[:tbits], i)):
                m.d.comb += head.eq(counts[i])
        retire = Signal()
        m.d.comb += retire.eq((s.retired < s.issued) & (head == s.ends) & s.ends.any())
        for i in range(table):
            mine = equals(s.retired[:tbits], i)
            with m.If(retire & mine):
                m.d.sync += counts[i].eq(Mux(inc[i], n_end, 0))
                with m.If(inc[i]):
                    m.d.sync += s.err[MiccError.BAD_END].eq(1)
            with m.Elif(inc[i]):
                m.d.sync += counts[i].eq((counts[i] + n_end)[:16])
                with m.If(n_end > (s.ends - counts[i])[:16]):     # (counts[i] <= ends holds)
                    m.d.sync += s.err[MiccError.BAD_END].eq(1)
        with m.If(retire):
            m.d.sync += s.retired.eq(increment(s.retired))

    def _counters(self, m, s):
        """The host's cycle counters, and the error exit (any state -> DONE)."""
        state = s.state
        with m.If(s.running):
            m.d.sync += s.cycles.eq(increment(s.cycles))
        with m.If(equals(state, MiccState.CONFIG) | equals(state, MiccState.DRAIN)):
            m.d.sync += s.config_cycles.eq(increment(s.config_cycles))
            with m.If(self.i_hold):
                m.d.sync += s.hidden.eq(increment(s.hidden))
        with m.If(equals(state, MiccState.HOLD) | s.held):
            m.d.sync += s.hold_cycles.eq(increment(s.hold_cycles))
        with m.If(s.err.any() & ~equals(state, MiccState.IDLE)):
            m.d.sync += state.eq(MiccState.DONE)

    def _start_errors(self, s):
        """Return the error bits a start raises: a configuration larger than a port's region,
        bad window or end registers, a Cbuf write in progress."""
        p = self.params
        # A port's words > its region, with truncated (lint-clean) adds that cannot overflow.
        nb = self.region.bit_length() + 1
        total = (self.i_n_config[:nb - 1] + self.i_n_ctx[:nb - 1])[:nb]
        too_big = (self.i_n_config[nb - 1:].any() | self.i_n_ctx[nb - 1:].any()
                   | (Bits(total) > self.region))
        for q in s.ports[1:]:
            too_big = too_big | (Bits(q.n_config) > self.region)
        bad = (~self.i_window.any() | (Bits(self.i_window) > p.operand_depth)
               | (self.i_contexts.any() & (~self.i_n_ctx.any() | ~self.i_ends.any())))
        start_err = {MiccError.CONFIG_TOO_BIG: too_big, MiccError.BAD_REGS: bad,
                     MiccError.CBUF_BUSY: self.i_cbuf_write}
        return Cat(*[start_err.get(e, Const(0, 1)) for e in MiccError])

    def _sequencer(self, m, s):
        """The states: CONFIG (the ports read their records), DRAIN (the last CONFIG flits
        reach their PEs), HOLD (the host's DMA-in), CTX (one context's templates at a time,
        while fewer than ``window`` are in flight), WAIT (the last ones retire), DONE."""
        state, ports = s.state, s.ports
        k, k_next = Signal(32, name="k"), Signal(32, name="k_next")
        in_ctx = Signal()
        wait = Signal(16)
        # The array idle (no context in flight) and the next context waiting for its data
        # (counted in o_hold_cycles, as HOLD is).
        m.d.comb += s.held.eq(equals(state, MiccState.CTX) & ~in_ctx & (s.issued != s.contexts)
                              & ~s.outstanding.any() & self.i_hold)
        m.d.comb += k_next.eq(increment(k))
        idle_out = Cat(*[~q.left.any() & ~q.pend & ~q.out.r_rdy for q in ports]).all()
        with m.If(self.i_start & ~s.running):
            m.d.sync += [
                state.eq(Mux(self.i_keep, MiccState.HOLD, MiccState.CONFIG)),
                s.err.eq(self._start_errors(s)), s.end_base.eq(self.i_end_base),
                s.n_ctx.eq(_zx(self.i_n_ctx)),
                s.contexts.eq(self.i_contexts), s.window.eq(_zx(self.i_window)),
                s.ends.eq(self.i_ends), s.ctx_base.eq(self.i_ctx_base),
                s.issued.eq(0), s.retired.eq(0), s.ends_seen.eq(0), s.cycles.eq(0),
                s.config_cycles.eq(0), s.hold_cycles.eq(0), s.flits.eq(0), in_ctx.eq(0),
                s.hidden.eq(0), wait.eq(self.drain),
            ] + [c.eq(0) for c in s.counts]
            # Kept: nothing to configure, the templates right after port 0's records.
            for q in ports:
                m.d.sync += [q.rptr.eq(Mux(self.i_keep, q.n_config, 0)),
                             q.left.eq(Mux(self.i_keep, 0, q.n_config)), q.r_left.eq(0)]
            m.d.sync += s.pend_is_ctx.eq(0)
        with m.Elif(~s.err.any()):
            with m.If(equals(state, MiccState.CONFIG)):
                for q in ports:
                    with m.If(q.left.any() & q.can_read):
                        m.d.comb += [q.rd_en.eq(1), q.rd_addr.eq(q.rptr)]
                        m.d.sync += [q.rptr.eq(increment(q.rptr)), q.left.eq(q.left - 1)]
                with m.If(idle_out):
                    m.d.sync += [state.eq(MiccState.DRAIN), wait.eq(self.drain)]
            with m.Elif(equals(state, MiccState.DRAIN)):
                with m.If(wait.any()):
                    m.d.sync += wait.eq(wait - 1)
                delivered = (self.i_delivered == s.flits) if self.delivered else Const(1, 1)
                with m.If(~wait.any() & delivered):
                    m.d.sync += state.eq(MiccState.HOLD)
            with m.Elif(equals(state, MiccState.HOLD)):
                with m.If(~self.i_hold):
                    m.d.sync += state.eq(MiccState.CTX)
            with m.Elif(equals(state, MiccState.CTX)):
                q0 = ports[0]
                with m.If(~in_ctx):
                    with m.If(s.issued == s.contexts):
                        m.d.sync += state.eq(MiccState.WAIT)
                    with m.Elif((s.outstanding < s.window) & ~self.i_hold):
                        m.d.sync += [in_ctx.eq(1), k.eq(0)]
                with m.Elif(q0.can_read):
                    addr = Signal(32)
                    m.d.comb += [addr.eq(q0.rptr + k), q0.rd_en.eq(1), q0.rd_addr.eq(addr)]
                    m.d.sync += [k.eq(k_next), s.pend_is_ctx.eq(1),
                                 s.pend_ctx.eq((s.issued + s.ctx_base)[:32])]
                    with m.If(k_next == s.n_ctx):
                        m.d.sync += [in_ctx.eq(0), s.issued.eq(increment(s.issued))]
            with m.Elif(equals(state, MiccState.WAIT)):
                with m.If(s.retired == s.contexts):
                    m.d.sync += state.eq(MiccState.DONE)


def build_micc(rows=2, cols=2, cbufs=2, cbuf_bytes=1024, operand_depth=ArrayParams().operand_depth,
               ports=1):
    """Return a :class:`Micc` for ``fdpu verilog --top micc``."""
    return Micc(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                            operand_depth=operand_depth), ports=ports)
