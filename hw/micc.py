"""The MicC: configures the PE array from the Cbufs, then streams contexts and counts their ends.

::

    host regs --start--> IDLE -> CONFIG -> DRAIN -> CTX <-> (window) -> WAIT -> DONE

    Cbuf word (1 cycle) -> record header? latch : make flit -> [out FIFO, 4] -> o_flit
    (CONFIG data word -> CONFIG flit; CTX template -> OPERAND flit with the context ID)
    i_flit (CTX_END, always ready) -> end counter of that context -> retire in order

Contract
--------
Host registers (ports, sampled on ``i_start``): ``i_n_config`` words of configuration
records at Cbuf words ``0 .. n_config-1``; ``i_n_ctx`` CTX template words (one per CTX slot)
at words ``n_config ..``; ``i_contexts``; ``i_window`` (``1 .. operand_depth``); ``i_ends``
(END messages per context).  The Cbuf words are 64 bits; the record and template formats are
:func:`sw.image.cbuf_header_layout` and :func:`sw.image.cbuf_template_layout`, and
:func:`sw.image.expand_cbuf` is this block's expansion in Python.

1. CONFIG: one Cbuf word per cycle; a record header is latched (no flit), each of its
   ``count`` data words leaves as one CONFIG flit with the header's ``what`` and destination
   and the running ``(slot, index)``, one per cycle when the mesh accepts.
2. DRAIN: ``drain`` cycles after the last one left (enough for the furthest PE: a single
   source into always-ready sinks cannot congest), so no context token overtakes a CONFIG.
3. CTX: context ``c`` (0, 1, ...) is started only while ``issued - retired < window``; its
   start is one OPERAND flit per template word with ``data = c``, in Cbuf order.  With ``window = 1`` every
   context waits for the previous one to end: the dependence control for contexts that depend
   on each other (the image's ``window`` chooses it).
4. Each CTX_END flit carries its context ID (ISA v1.1); the end counter of that context (a
   table indexed by the ID's low bits) counts it; the oldest context retires when its counter
   reaches ``i_ends``.  DONE when ``retired == contexts``; ``o_done`` stays high until the next
   start.

Errors (sticky until the next start, bits of ``o_error`` = :class:`MiccError`) end the run in
DONE with ``o_done`` low: a configuration larger than the Cbufs, bad registers, a flit other
than CTX_END, an end for a context not in flight, more ends than ``i_ends`` for a context.
``o_cycles`` counts the cycles from start to DONE, ``o_config_cycles`` those of them spent
configuring (CONFIG and DRAIN, before the first context).
"""

import enum

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from sw.arch import ArrayParams, bits_for
from sw.image import cbuf_header_layout, cbuf_template_layout, word_parts
from sw.packet import ConfigWhat, Kind

from .cbuf import _eq, _inc, _zx, cbuf_words, word_bits
from .noc_types import Bits, FlitKind, body_layout, flit_layout

__all__ = ["Micc", "MiccError", "MiccState", "build_micc"]


class MiccState(enum.IntEnum):
    """The MicC's state (``o_state``)."""
    IDLE = 0
    CONFIG = 1
    DRAIN = 2
    CTX = 3
    WAIT = 4
    DONE = 5


class MiccError(enum.IntEnum):
    """Bit positions of ``o_error``."""
    #: ``n_config + n_ctx`` exceeds the Cbufs' words.
    CONFIG_TOO_BIG = 0
    #: ``window`` outside ``1 .. operand_depth``, or contexts without CTX slots or ENDs.
    BAD_REGS = 1
    #: A flit other than CTX_END reached the MicC.
    BAD_FLIT = 2
    #: A CTX_END for a context that is not in flight, or more ends than ``i_ends``.
    BAD_END = 3


class Micc(wiring.Component):
    """Build the micro-controller (see the module doc).

    Parameters
    ----------
    params : sw.arch.ArrayParams
        Flit format, ``operand_depth`` (the largest window), Cbuf size.
    drain : int, optional
        Cycles between the last CONFIG flit and the first context; default
        ``2 * (rows + cols) + 8``.
    """

    def __init__(self, params=ArrayParams(), *, drain=None):
        if not isinstance(params, ArrayParams):
            raise TypeError(f"params must be an sw.arch.ArrayParams, not {params!r}")
        drain = 2 * (params.rows + params.cols) + 8 if drain is None else drain
        if not isinstance(drain, int) or isinstance(drain, bool) or drain < 1:
            raise TypeError(f"drain must be a positive integer, not {drain!r}")
        self.params, self.drain = params, drain
        self.words = cbuf_words(params) * params.cbufs
        flit = stream.Signature(flit_layout(params))
        abits = max(1, (self.words - 1).bit_length())
        super().__init__({
            "o_flit": Out(flit),
            "i_flit": In(flit),
            "rd_en": Out(1), "rd_addr": Out(abits), "rd_data": In(word_bits(params)),
            "i_start": In(1),
            "i_n_config": In(32), "i_n_ctx": In(16), "i_contexts": In(32),
            "i_window": In(8), "i_ends": In(16),
            "o_state": Out(3), "o_done": Out(1), "o_error": Out(len(MiccError)),
            "o_issued": Out(32), "o_retired": Out(32), "o_ends": Out(32), "o_cycles": Out(48),
            "o_config_cycles": Out(48), "o_flits": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        lay = flit_layout(p)
        table = 1 << max(1, (p.operand_depth - 1).bit_length())
        tbits = (table - 1).bit_length()

        def zx(value, width=32):
            return _zx(value.as_value() if hasattr(value, "as_value") else value, width)

        def is_state(s):
            return _eq(state, s)

        state = Signal(3)
        err = Signal(len(MiccError))
        issued, retired, ends_seen = Signal(32), Signal(32), Signal(32)
        cycles, config_cycles, flits = Signal(48), Signal(48), Signal(32)
        n_config, n_ctx, contexts = Signal(32), Signal(32), Signal(32)
        window, ends = Signal(32), Signal(16)
        m.d.comb += [
            self.o_state.eq(state), self.o_error.eq(err),
            self.o_done.eq(is_state(MiccState.DONE) & ~err.any()),
            self.o_issued.eq(issued), self.o_retired.eq(retired), self.o_ends.eq(ends_seen),
            self.o_cycles.eq(cycles), self.o_config_cycles.eq(config_cycles),
            self.o_flits.eq(flits),
        ]

        # Output: Cbuf read (one cycle) into a small FIFO; a read is issued only when the FIFO
        # has room for it counting the read in flight, so nothing is ever dropped.
        m.submodules.out = out = fifo.SyncFIFO(width=lay.size, depth=4)
        pend, pend_ctx, pend_is_ctx = Signal(), Signal(32), Signal()
        can_read = Signal()
        level = Bits(out.w_level)
        m.d.comb += can_read.eq((level < 3) | ((level == 3) & ~pend))
        m.d.sync += pend.eq(self.rd_en)

        # CONFIG words: a record header (when no data word of a record is due) or data.
        hdr_lay = data.StructLayout(cbuf_header_layout(p).struct_fields())
        tpl_lay = data.StructLayout(cbuf_template_layout(p).struct_fields())
        hdr = data.View(hdr_lay, self.rd_data)
        tpl = data.View(tpl_lay, self.rd_data)
        r_what, r_x, r_y = Signal(2), Signal(p.x_bits), Signal(p.y_bits)
        r_slot, r_index = Signal(p.slot_bits), Signal(len(hdr.index))
        r_left = Signal(16)
        is_data = r_left.any()
        parts = word_parts(p)
        cfg_flit, ctx_flit = Signal(lay), Signal(lay)
        cview = data.View(body_layout(FlitKind.CONFIG, p), cfg_flit.body)
        oview = data.View(body_layout(FlitKind.OPERAND, p), ctx_flit.body)
        m.d.comb += [
            cfg_flit.kind.eq(FlitKind.CONFIG), cfg_flit.dst_x.eq(r_x), cfg_flit.dst_y.eq(r_y),
            cview.what.eq(r_what), cview.index.eq(r_index), cview.slot.eq(r_slot),
            cview.data.eq(self.rd_data),
            ctx_flit.kind.eq(FlitKind.OPERAND), ctx_flit.dst_x.eq(tpl.dst_x),
            ctx_flit.dst_y.eq(tpl.dst_y), oview.slot.eq(tpl.slot),
            oview.operand.eq(tpl.operand), oview.data.eq(zx(pend_ctx, 64)),
        ]
        with m.If(pend & ~pend_is_ctx):
            with m.If(is_data):
                # INSN: index counts the instruction word's parts, then the slot moves on.
                wrap = _eq(r_what, ConfigWhat.INSN) & _eq(r_index, parts - 1)
                m.d.sync += [r_left.eq(r_left - 1),
                             r_index.eq(Mux(wrap, 0, _inc(r_index))),
                             r_slot.eq(Mux(wrap, _inc(r_slot), r_slot))]
            with m.Else():
                m.d.sync += [r_what.eq(hdr.what), r_x.eq(hdr.dst_x), r_y.eq(hdr.dst_y),
                             r_slot.eq(hdr.slot), r_index.eq(hdr.index), r_left.eq(hdr.count)]
        m.d.comb += [
            out.w_en.eq(pend & (pend_is_ctx | is_data)),
            out.w_data.eq(Mux(pend_is_ctx, ctx_flit.as_value(), cfg_flit.as_value())),
            self.o_flit.valid.eq(out.r_rdy),
            self.o_flit.payload.eq(out.r_data),
            out.r_en.eq(self.o_flit.ready),
        ]
        with m.If(self.o_flit.valid & self.o_flit.ready):
            m.d.sync += flits.eq(_inc(flits))

        # End counters: one per context in flight, indexed by the ID's low bits (the window is
        # at most operand_depth <= table, so two contexts in flight never share an entry).
        counts = [Signal(16, name=f"ends{i}") for i in range(table)]
        inc = Signal(table)
        fl = self.i_flit.payload
        end_body = data.View(body_layout(FlitKind.CTX_END, p), fl.body)
        end_id, age, outstanding = Signal(32), Signal(32), Signal(32)
        m.d.comb += [self.i_flit.ready.eq(1), end_id.eq(end_body.data[:32]),
                     age.eq(end_id - retired), outstanding.eq(issued - retired)]
        got = self.i_flit.valid
        is_end = Bits(fl.kind.as_value()) == Kind.CTX_END.value
        # In flight: retired <= id <= issued (the context being started counts) and inside
        # the table.
        in_flight = (age <= outstanding) & ~age[tbits:].any()
        good_end = got & is_end & in_flight & (end_id < contexts)
        with m.If(got):
            m.d.sync += ends_seen.eq(_inc(ends_seen))
        with m.If(got & ~is_end):
            m.d.sync += err[MiccError.BAD_FLIT].eq(1)
        with m.If(got & is_end & ~good_end):
            m.d.sync += err[MiccError.BAD_END].eq(1)
        for i in range(table):
            m.d.comb += inc[i].eq(good_end & _eq(end_id[:tbits], i))
        head = Signal(16)
        m.d.comb += head.eq(counts[0])
        for i in range(1, table):
            with m.If(_eq(retired[:tbits], i)):
                m.d.comb += head.eq(counts[i])
        retire = Signal()
        m.d.comb += retire.eq((retired < issued) & (head == ends) & ends.any())
        for i in range(table):
            mine = _eq(retired[:tbits], i)
            with m.If(retire & mine):
                m.d.sync += counts[i].eq(zx(inc[i], 16))
                with m.If(inc[i]):
                    m.d.sync += err[MiccError.BAD_END].eq(1)
            with m.Elif(inc[i]):
                m.d.sync += counts[i].eq(_inc(counts[i]))
                with m.If(counts[i] >= ends):
                    m.d.sync += err[MiccError.BAD_END].eq(1)
        with m.If(retire):
            m.d.sync += retired.eq(_inc(retired))

        # Sequencer.
        rptr, left, k, k_next = Signal(32), Signal(32), Signal(32), Signal(32)
        in_ctx = Signal()
        wait = Signal(16)
        m.d.comb += k_next.eq(_inc(k))
        with m.If(~is_state(MiccState.IDLE) & ~is_state(MiccState.DONE)):
            m.d.sync += cycles.eq(_inc(cycles))
        with m.If(is_state(MiccState.CONFIG) | is_state(MiccState.DRAIN)):
            m.d.sync += config_cycles.eq(_inc(config_cycles))
        with m.If(err.any() & ~is_state(MiccState.IDLE)):
            m.d.sync += state.eq(MiccState.DONE)
        # n_config + n_ctx > words, with a truncated (lint-clean) add that cannot overflow.
        nb = self.words.bit_length() + 1
        total = Signal(nb)
        m.d.comb += total.eq((self.i_n_config[:nb - 1] + self.i_n_ctx[:nb - 1])[:nb])
        too_big = (self.i_n_config[nb - 1:].any() | self.i_n_ctx[nb - 1:].any()
                   | (Bits(total) > self.words))
        bad = (~self.i_window.any() | (Bits(self.i_window) > p.operand_depth)
               | (self.i_contexts.any() & (~self.i_n_ctx.any() | ~self.i_ends.any())))
        with m.If(self.i_start & (is_state(MiccState.IDLE) | is_state(MiccState.DONE))):
            m.d.sync += [
                state.eq(MiccState.CONFIG),
                err.eq(Cat(too_big, bad, Const(0, 2))),
                n_config.eq(self.i_n_config), n_ctx.eq(zx(self.i_n_ctx)),
                contexts.eq(self.i_contexts), window.eq(zx(self.i_window)),
                ends.eq(self.i_ends),
                issued.eq(0), retired.eq(0), ends_seen.eq(0), cycles.eq(0), config_cycles.eq(0), flits.eq(0),
                rptr.eq(0), left.eq(self.i_n_config), in_ctx.eq(0), r_left.eq(0),
            ] + [c.eq(0) for c in counts]
        with m.Elif(~err.any()):
            with m.If(is_state(MiccState.CONFIG)):
                with m.If(~left.any()):
                    with m.If(~pend & ~out.r_rdy):
                        m.d.sync += [state.eq(MiccState.DRAIN), wait.eq(self.drain)]
                with m.Elif(can_read):
                    m.d.comb += [self.rd_en.eq(1), self.rd_addr.eq(rptr)]
                    m.d.sync += [rptr.eq(_inc(rptr)), left.eq(left - 1), pend_is_ctx.eq(0)]
            with m.Elif(is_state(MiccState.DRAIN)):
                m.d.sync += wait.eq(wait - 1)
                with m.If(~wait.any()):
                    m.d.sync += state.eq(MiccState.CTX)
            with m.Elif(is_state(MiccState.CTX)):
                with m.If(~in_ctx):
                    with m.If(issued == contexts):
                        m.d.sync += state.eq(MiccState.WAIT)
                    with m.Elif(outstanding < window):
                        m.d.sync += [in_ctx.eq(1), k.eq(0)]
                with m.Elif(can_read):
                    addr = Signal(32)
                    m.d.comb += [addr.eq(n_config + k), self.rd_en.eq(1),
                                 self.rd_addr.eq(addr)]
                    m.d.sync += [k.eq(k_next), pend_is_ctx.eq(1), pend_ctx.eq(issued)]
                    with m.If(k_next == n_ctx):
                        m.d.sync += [in_ctx.eq(0), issued.eq(_inc(issued))]
            with m.Elif(is_state(MiccState.WAIT)):
                with m.If(retired == contexts):
                    m.d.sync += state.eq(MiccState.DONE)
        return m


def build_micc(rows=2, cols=2, cbufs=2, cbuf_bytes=1024, operand_depth=4):
    """Return a :class:`Micc` for ``fdpu verilog --top micc``."""
    return Micc(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                            operand_depth=operand_depth))
