"""The DMA: moves descriptors' worth of 64-bit words between external memory and the Dbufs/Cbufs,
and from Dbuf to Dbuf.

::

    host: i_start, i_list, i_count        external memory port (64-bit words, valid/ready)
              |                                o_ext_rd ---> (byte address)
        [descriptor fetch] <-- rdq [FIFO] <--- i_ext_rdata  (in request order)
              |                 |  ^           o_ext_wr ---> (address, data)
              |                 |  +---------- MOVE: replies (tag 1) <- i_rep
         IN: STORE flits -> o_req (request mesh, edge port (-1, 0))  ... acks <- i_rep
             Cbuf words  -> cbuf_wr_*                          (REPLY flits, always ready)
        OUT: LOAD flits  -> o_req ... replies <- i_rep -> repq [FIFO] -> o_ext_wr
       MOVE: LOAD flits (tag 1) -> o_req, then the words as IN (STOREs -> o_req)

Contract
--------
Descriptors
    ``i_count`` descriptors of :data:`sw.spec.dma.DESC_BYTES` (16) bytes at external byte
    address ``i_list`` (16-aligned, else ``BAD_DESC`` at once), each two little-endian 64-bit
    words laid out as :func:`sw.spec.dma.descriptor_layout`: ``ext`` (external byte address),
    ``local`` (a global Dbuf address of :mod:`sw.spec.arch`, or with ``cbuf`` a byte offset
    into the Cbufs), ``length`` in bytes, ``out`` (chip to external memory), ``cbuf``,
    ``move`` (Dbuf to Dbuf: ``ext`` is the global Dbuf address of the source), ``copies``
    (multicast, see Dbufs).  They run in order, one at a time.
    ``ext``, ``local`` and ``length`` are multiples of 8 (Cbuf: of the Cbuf word,
    :func:`sw.spec.cbuf.word_bits` / 8); a Dbuf range lies inside one Dbuf; a Cbuf range inside
    the Cbufs; ``out`` with ``cbuf`` does not exist, nor ``cbuf`` on a DMA built with
    ``cbuf=False``, nor ``move`` with ``out`` or ``cbuf``; a MOVE's source range lies inside
    one Dbuf (like the destination, checked also when ``length = 0`` for the Dbuf of its
    first byte); ``copies`` is 0 with ``out`` or ``cbuf`` and names no Dbuf past the last
    one (also when ``length = 0``).  ``length = 0`` is a no-op.  A MOVE whose source range
    overlaps a destination range (its copies included) is not checked: its result is
    undefined, and the host must not write one.  A descriptor list runs with the next
    descriptor's fetch overlapping the current one's move, and without waiting for the STORE
    acks of an IN or MOVE descriptor (they are awaited before an OUT or MOVE descriptor and at
    the end).
Errors (``o_error``, bits of :class:`sw.spec.status.DmaError`, sticky until the next start)
    A descriptor breaking a rule above stops the job before it moves a byte of that
    descriptor (``BAD_DESC``); a Dbuf reply with ``err`` (``DBUF_ERROR``) stops it after the
    current descriptor.  Either way the DMA reaches DONE: ``o_halt`` rises, ``o_done`` does not.
Host
    ``i_start`` (one-cycle pulse, taken in IDLE or DONE) samples ``i_list`` and ``i_count``;
    ``o_busy`` until DONE; ``o_done`` (no error) / ``o_halt`` (done or error) stay until the
    next start.  ``o_rd_bytes`` / ``o_wr_bytes`` count the external bytes read (descriptors
    included) and written since reset (a MOVE adds only its descriptor's 16 bytes read);
    ``o_cycles`` the cycles of the last job.
External port
    ``o_ext_rd`` carries 8-aligned byte addresses; ``i_ext_rdata`` returns one word per
    request, in request order, any latency later.  At most ``outstanding`` reads are in
    flight or buffered: the DMA issues a read only when its read FIFO has room for the word
    counting those in flight, so ``i_ext_rdata`` is always ready and the port runs one word
    per cycle when the latency is below ``outstanding``.  ``o_ext_wr`` carries
    ``(addr, data)``; a write is complete when it is accepted.
Dbufs
    IN: one STORE flit (8 bytes) per word and target Dbuf into the request mesh at the DMA's
    edge port.  The targets are :func:`sw.spec.dma.copy_targets` of ``copies`` and the Dbuf
    ``k`` of ``local``: Dbuf ``k``, then Dbuf ``k + 1 + i`` for each set bit ``i`` ascending,
    each written at the same offset within it (multicast).  A word is read from external
    memory once (``o_rd_bytes`` counts it once) and goes to its targets in that order, one
    STORE a cycle while the mesh accepts, before the next word does: ``1 + popcount(copies)``
    cycles per word at best.  The descriptor completes when every STORE has been acknowledged.
    OUT: LOAD flits, issued only while the reply FIFO (``outstanding`` words) has room counting
    the loads in flight; the replies of one descriptor come from one Dbuf over one XY path, so
    they arrive in order.  ``i_rep`` (REPLY flits addressed to the DMA) is always ready: the
    DMA never makes the reply network wait, so it adds no protocol-deadlock cycle
    (``docs/system.md``).
    MOVE: one LOAD flit per word (``tag`` 1; OUT's have ``tag`` 0) to the source Dbuf, at
    ``ext``, ``ext + 8``, ...; the replies (tag 1, in order: one Dbuf, one XY path) go into
    the read FIFO, and from there to the destination Dbuf and its copies exactly as an IN
    descriptor's words (same STOREs, same acks).  A LOAD is issued only while the read FIFO
    has room counting the words in flight to it, so ``i_rep`` stays always ready (a MOVE's
    reply and external read data in one cycle: the reply is taken, ``i_ext_rdata.ready`` is
    low).  STOREs and LOADs share ``o_req``: a STORE goes first when both are ready (it frees
    the FIFO), so a word costs ``2 + popcount(copies)`` request cycles at best.  A MOVE starts
    only with no STORE ack outstanding (its LOADs see every earlier STORE), and issues the
    reads of the next descriptor only after its last STORE (so they never queue among its
    words).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, increment, lowest_one, zero_extend
from hw.lib.spec import check_params, shaped_enum
from hw.noc.flit import Bits, FlitKind, body_view, flit_layout
from sw.spec import status
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_words, word_bits
from sw.spec.dma import DESC_BYTES, WORD_BITS, descriptor_layout
from sw.spec.status import DmaError

__all__ = ["Dma", "DmaState", "ext_write_layout", "build_dma"]


#: The DMA's state register: :class:`sw.spec.status.DmaState` with its
#: :data:`~sw.spec.status.STATE_BITS`-bit shape.
DmaState = shaped_enum(status.DmaState, status.STATE_BITS, module=__name__)


def _add8(x):
    """Return ``x + 8`` for a multiple of 8, modulo ``2 ** len(x)`` (lint-clean widths)."""
    return Cat(x[:3], increment(x[3:]))


def _add_length(addr, length):
    """Return ``addr + length`` modulo ``2 ** 32`` for a 32-bit address and a 31-bit length,
    with adders of equal widths (lint-clean): the low 31 bits, then bit 31 with the carry."""
    low = addr[:31] + length
    return Cat(low[:31], addr[31] ^ low[31])


def _wide(m, x, width, name):
    """Return a ``width``-bit signal holding ``x`` zero-extended."""
    sig = Signal(width, name=name)
    m.d.comb += sig.eq(x)
    return sig


def ext_write_layout():
    """Return the payload of an external-memory write: ``addr`` (byte, 8-aligned), ``data``."""
    return data.StructLayout({"addr": 32, "data": 64})


class Dma(wiring.Component):
    """Build the DMA of the array ``params`` (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Address map, flit format, Cbuf size.
    coord : tuple of int
        The edge coordinate where the DMA injects requests and receives replies.
    outstanding : int
        Depth of the read and reply FIFOs: external reads (and Dbuf loads) in flight at most.
    cbuf : bool
        The DMA has the Cbufs' write port; without it (the extra channels of a multi-channel
        top) a ``cbuf`` descriptor is ``BAD_DESC``.
    """

    def __init__(self, params=ArrayParams(), *, coord=(-1, 0), outstanding=64, cbuf=True):
        check_params(params)
        if params.dbuf_at(*coord) is None:
            raise ValueError(f"coord must be an edge port coordinate of the array, not "
                             f"{coord!r}")
        if not isinstance(outstanding, int) or isinstance(outstanding, bool) \
                or outstanding < 2 or outstanding & (outstanding - 1):
            raise TypeError(f"outstanding must be a power of two >= 2, not {outstanding!r}")
        self.params, self.coord, self.outstanding = params, coord, outstanding
        self.cbuf = bool(cbuf)
        self.cbuf_words = cbuf_words(params) * params.cbufs
        self.word_bytes = word_bits(params) // 8
        flit = stream.Signature(flit_layout(params))
        cabits = max(1, (self.cbuf_words - 1).bit_length())
        super().__init__({
            "i_start": In(1), "i_list": In(32), "i_count": In(16),
            "o_state": Out(DmaState), "o_busy": Out(1), "o_done": Out(1), "o_halt": Out(1),
            "o_error": Out(len(DmaError)), "o_desc": Out(16),
            "o_rd_bytes": Out(40), "o_wr_bytes": Out(40), "o_cycles": Out(32),
            "o_ext_rd": Out(stream.Signature(32)),
            "i_ext_rdata": In(stream.Signature(64)),
            "o_ext_wr": Out(stream.Signature(ext_write_layout())),
            "o_req": Out(flit),
            "i_rep": In(flit),
            "cbuf_wr_en": Out(1), "cbuf_wr_addr": Out(cabits),
            "cbuf_wr_data": Out(word_bits(params)),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        depth = self.outstanding
        lbits = depth.bit_length()              # counts 0 .. depth

        # The sequencer's state; ``o_state`` shows it to the host.  A typed register rather than
        # ``m.FSM``: a start (from IDLE or DONE) is one transition of two states, and the host
        # reads fixed values.
        state = Signal(DmaState)
        err = Signal(len(DmaError))
        cycles, rd_bytes, wr_bytes = Signal(32), Signal(40), Signal(40)
        list_addr, count, index = Signal(32), Signal(16), Signal(16)

        def is_state(s):
            return equals(state, s)

        m.d.comb += [
            self.o_state.eq(state), self.o_error.eq(err), self.o_desc.eq(index),
            self.o_busy.eq(~is_state(DmaState.IDLE) & ~is_state(DmaState.DONE)),
            self.o_done.eq(is_state(DmaState.DONE) & ~err.any()),
            self.o_halt.eq(is_state(DmaState.DONE)),
            self.o_rd_bytes.eq(rd_bytes), self.o_wr_bytes.eq(wr_bytes), self.o_cycles.eq(cycles),
        ]
        with m.If(self.o_busy):
            m.d.sync += cycles.eq(increment(cycles))

        # Read side: words requested from external memory, and a MOVE's words loaded from its
        # source Dbuf, land in rdq, in order.  A read or a MOVE's LOAD is issued only while rdq
        # has room for it counting the words in flight to it (``rd_flight``: reads and MOVE
        # loads).  The two never overlap (a MOVE issues no external read before its last
        # STORE, so not before its last LOAD), but a MOVE's reply would win a cycle where both
        # arrive.
        m.submodules.rdq = rdq = fifo.SyncFIFO(width=64, depth=depth)
        rd_addr, rd_left = Signal(32), Signal(32)
        rd_flight = Signal(lbits, name="rd_flight")
        room = Signal()
        m.d.comb += room.eq(Bits(_wide(m, rd_flight + rdq.w_level, lbits + 1, "rd_used")) < depth)
        rep = self.i_rep.payload
        rbody = body_view(rep, FlitKind.REPLY, p)
        mv_back = self.i_rep.valid & equals(rbody.tag, 1)
        m.d.comb += [
            self.o_ext_rd.valid.eq(rd_left.any() & room),
            self.o_ext_rd.payload.eq(rd_addr),
            rdq.w_en.eq(self.i_ext_rdata.valid | mv_back),
            rdq.w_data.eq(Mux(mv_back, rbody.data, self.i_ext_rdata.payload)),
            self.i_ext_rdata.ready.eq(rdq.w_rdy & ~mv_back),
        ]
        rd_go = self.o_ext_rd.valid & self.o_ext_rd.ready
        rd_back = self.i_ext_rdata.valid & self.i_ext_rdata.ready
        with m.If(rd_go):
            m.d.sync += [rd_addr.eq(_add8(rd_addr)), rd_left.eq(rd_left - 1)]
        with m.If(rd_back):
            m.d.sync += rd_bytes.eq(_add8(rd_bytes))

        # The descriptor being run.
        # Its two words shift in through desc1 (word 0 ends in desc0); the fields are those of
        # the one descriptor layout (sw.spec.dma).
        desc0, desc1 = Signal(WORD_BITS), Signal(WORD_BITS)
        got = Signal(2)
        pre, mode_out = Signal(), Signal()
        desc_layout = data.StructLayout(descriptor_layout().struct_fields())
        desc = data.View(desc_layout, Cat(desc0, desc1))
        ext, loc = desc.ext, desc.local
        length = desc.length                            # 31 bits
        is_out, is_cbuf, is_move, copies = desc.out, desc.cbuf, desc.move, desc.copies

        # Dbuf target of the descriptor: its number and edge coordinate (biased).
        shift = (p.dbuf_bytes - 1).bit_length()
        # end = loc + length without a wider adder: the wrap shows as end < loc.
        end, last = Signal(32), Signal(32)
        m.d.comb += [end.eq(_add_length(loc, length)), last.eq((end - 1)[:32])]
        wraps = end < loc
        first_idx, last_idx = loc[shift:], last[shift:]
        # The descriptor's first Dbuf: its edge coordinate (xs, ys), its copy targets as a mask
        # of Dbufs (bit d: Dbuf d; ``copies`` shifted past the first Dbuf) and whether a copy
        # target is past the last Dbuf.  A Mux chain, not an Array: Yosys writes an Array
        # lookup as a case statement in an ``always @*`` block, which Icarus never evaluates
        # while its index keeps the value it had at time 0 (a first descriptor of all-zero
        # words left the target X).
        nd = p.num_dbufs
        kbits = (nd - 1).bit_length()
        xs, ys, targets = Signal(p.x_bits), Signal(p.y_bits), Signal(nd)
        tx, ty = Const(0, p.x_bits), Const(0, p.y_bits)
        tm, past = Const(0, nd), Const(0, 1)
        for k in reversed(range(nd)):
            hit = equals(first_idx, k)
            tx = Mux(hit, Const(p.dbuf_coord(k)[0] + 1, p.x_bits), tx)
            ty = Mux(hit, Const(p.dbuf_coord(k)[1] + 1, p.y_bits), ty)
            tm = Mux(hit, zero_extend(Cat(Const(0, k + 1), copies), nd), tm)
            if nd - 1 - k < len(copies):
                past = Mux(hit, copies[nd - 1 - k:].any(), past)
        m.d.comb += [xs.eq(tx), ys.eq(ty), targets.eq(tm)]
        # A MOVE's source Dbuf (from ``ext``): its edge coordinate (sx, sy), a Mux chain too.
        src_end, src_last = Signal(32), Signal(32)
        m.d.comb += [src_end.eq(_add_length(ext, length)), src_last.eq((src_end - 1)[:32])]
        src_first_idx = ext[shift:]
        sx, sy = Signal(p.x_bits), Signal(p.y_bits)
        tx, ty = Const(0, p.x_bits), Const(0, p.y_bits)
        for k in reversed(range(nd)):
            hit = equals(src_first_idx, k)
            tx = Mux(hit, Const(p.dbuf_coord(k)[0] + 1, p.x_bits), tx)
            ty = Mux(hit, Const(p.dbuf_coord(k)[1] + 1, p.y_bits), ty)
        m.d.comb += [sx.eq(tx), sy.eq(ty)]
        # The current STORE target (edge coordinate and Dbuf number), the LOAD target (OUT: the
        # Dbuf of ``local``, MOVE: the source Dbuf), the descriptor's copy targets and those the
        # current word still goes to after this one.
        dst_x, dst_y, dst_k = Signal(p.x_bits), Signal(p.y_bits), Signal(kbits)
        ld_x, ld_y = Signal(p.x_bits), Signal(p.y_bits)
        copy_mask, rest = Signal(nd), Signal(nd)
        # The next target: the lowest Dbuf of ``rest`` (a priority Mux chain, lowest wins).
        nx, ny, nk = Const(0, p.x_bits), Const(0, p.y_bits), Const(0, kbits)
        for k in reversed(range(nd)):
            nx = Mux(rest[k], Const(p.dbuf_coord(k)[0] + 1, p.x_bits), nx)
            ny = Mux(rest[k], Const(p.dbuf_coord(k)[1] + 1, p.y_bits), ny)
            nk = Mux(rest[k], Const(k, kbits), nk)

        # Checks (CHECK state).
        wb = self.word_bytes
        wshift = (wb - 1).bit_length()
        misaligned = ext[:3].any() | loc[:3].any() | length[:3].any()
        # An empty descriptor spans no Dbuf: its ``last`` (loc - 1) may be in the one before.
        dbuf_bad = (wraps | (length.any() & (first_idx != last_idx))
                    | ~(Bits(first_idx) < p.num_dbufs))
        # Multicast is for IN and MOVE descriptors into the Dbufs, to Dbufs that exist.
        copies_bad = copies.any() & (is_out | is_cbuf | past)
        # A MOVE: neither OUT nor CBUF, its source (aligned with ``ext``) inside one Dbuf.
        src_bad = ((src_end < ext) | (length.any() & (src_first_idx != src_last[shift:]))
                   | ~(Bits(src_first_idx) < p.num_dbufs))
        move_bad = is_move & (is_out | is_cbuf | src_bad)
        cbuf_bad = (is_out | loc[:wshift].any() | length[:wshift].any() | wraps
                    | (Bits(end) > self.cbuf_words * wb))
        if not self.cbuf:
            cbuf_bad = Const(1, 1)
        bad = misaligned | Mux(is_cbuf, cbuf_bad, dbuf_bad) | copies_bad | move_bad

        # Move counters.
        st_addr, st_left, acks = Signal(32), Signal(32), Signal(32)
        ld_addr, ld_left, ld_flight = Signal(32), Signal(32), Signal(lbits)
        wr_addr, wr_left = Signal(32), Signal(32)
        cb_addr, beat = Signal(len(self.cbuf_wr_addr)), Signal(max(1, wshift - 3))
        beats = wb // 8
        cb_word = Signal(wb * 8)

        # Requests into the request mesh: STOREs (IN and MOVE into the Dbufs) of the words in
        # rdq, LOADs (OUT into repq, MOVE into rdq, ``tag`` 1 marking the MOVE's).  A MOVE has
        # both; a STORE goes first (it frees rdq), a LOAD takes the cycles without one.
        req = self.o_req.payload
        body = body_view(req, FlitKind.STORE, p)
        cx, cy = self.coord
        moving = is_state(DmaState.MOVE)
        store_v = moving & ~is_out & ~is_cbuf & st_left.any() & rdq.r_rdy
        m.submodules.repq = repq = fifo.SyncFIFO(width=64, depth=depth)
        ld_room = Signal()
        ld_used = _wide(m, ld_flight + repq.w_level, lbits + 1, "ld_used")
        m.d.comb += ld_room.eq(Bits(ld_used) < depth)
        load_v = moving & ld_left.any() & Mux(is_move, room, is_out & ld_room)
        # A STORE's address: the word's offset in the current target Dbuf.
        st_at = zero_extend(Cat(st_addr[:shift], dst_k), 32)
        m.d.comb += [
            req.kind.eq(Mux(store_v, FlitKind.STORE, FlitKind.LOAD)),
            req.dst_x.eq(Mux(store_v, dst_x, ld_x)), req.dst_y.eq(Mux(store_v, dst_y, ld_y)),
            body.addr.eq(Mux(store_v, st_at, ld_addr)), body.size.eq(3), body.bcast.eq(0),
            body.src_x.eq(cx + 1), body.src_y.eq(cy + 1), body.slot.eq(0),
            body.tag.eq(~store_v & is_move),
            body.data.eq(rdq.r_data),
            self.o_req.valid.eq(store_v | load_v),
        ]
        sent = self.o_req.valid & self.o_req.ready
        st_sent, ld_sent = sent & store_v, sent & ~store_v
        # A word is done with its last target's STORE: then rdq pops, the next word starts at
        # the first Dbuf (the descriptor's words stay put while it moves: the next one is
        # popped in FETCH); else the next target of the same word follows in the next cycle.
        word_done = ~rest.any()
        with m.If(st_sent):
            with m.If(word_done):
                m.d.sync += [st_addr.eq(_add8(st_addr)), st_left.eq(st_left - 1),
                             dst_x.eq(xs), dst_y.eq(ys), dst_k.eq(first_idx[:kbits]),
                             rest.eq(copy_mask)]
            with m.Else():
                m.d.sync += [dst_x.eq(nx), dst_y.eq(ny), dst_k.eq(nk),
                             rest.eq(rest & ~lowest_one(rest))]
        with m.If(ld_sent):
            m.d.sync += [ld_addr.eq(_add8(ld_addr)), ld_left.eq(ld_left - 1)]

        # Cbuf words: beats of one word collect in cb_word, then one write.
        cbuf_v = moving & ~is_out & is_cbuf & st_left.any() & rdq.r_rdy
        full = Signal(wb * 8)
        m.d.comb += full.eq(Cat(cb_word[64:], rdq.r_data) if beats > 1 else rdq.r_data)
        last_beat = equals(beat, beats - 1) if beats > 1 else Const(1, 1)
        m.d.comb += [self.cbuf_wr_addr.eq(cb_addr), self.cbuf_wr_data.eq(full),
                     self.cbuf_wr_en.eq(cbuf_v & last_beat)]
        with m.If(cbuf_v):
            m.d.sync += [cb_word.eq(full), st_left.eq(st_left - 1)]
            if beats > 1:
                m.d.sync += beat.eq(Mux(last_beat, 0, increment(beat)))
            with m.If(last_beat):
                m.d.sync += cb_addr.eq(increment(cb_addr))

        # Pops of rdq: descriptor words (FETCH), STORE data, Cbuf beats.
        fetch_pop = is_state(DmaState.FETCH) & rdq.r_rdy & ~got[1]
        # After an error the prefetched words of the next descriptor are dropped (FINISH).
        drop = is_state(DmaState.FINISH) & err.any() & rdq.r_rdy
        m.d.comb += rdq.r_en.eq(fetch_pop | (store_v & self.o_req.ready & word_done) | cbuf_v
                                | drop)
        with m.If(fetch_pop):
            m.d.sync += [desc1.eq(rdq.r_data), desc0.eq(desc1), got.eq(increment(got))]

        # Replies: store acks are counted, OUT load data goes to repq, then to external memory,
        # MOVE load data (``tag`` 1) to rdq (above).
        m.d.comb += self.i_rep.ready.eq(1)
        rep_ok = self.i_rep.valid & ~equals(rbody.tag, 1)
        with m.If(self.i_rep.valid & rbody.err):
            m.d.sync += err[DmaError.DBUF_ERROR].eq(1)
        # ``mode_out`` (the flags of the descriptor that last started moving) tells acks from
        # load data: an OUT descriptor starts only when no ack is outstanding, and the next one
        # only when its loads are all back, so replies of the two kinds never mix.  ``acks``
        # counts the STOREs sent and not yet acknowledged (one ack each, so a descriptor
        # expects words * (1 + popcount(copies))); a descriptor leaves MOVE only with every
        # STORE sent, so ``acks = 0`` then means every STORE so far is acknowledged.
        # A MOVE descriptor runs with ``mode_out`` 0: the acks of its STOREs (tag 0) are
        # counted, the replies of its LOADs (tag 1) go to rdq.
        m.d.sync += acks.eq(acks + st_sent - (rep_ok & ~mode_out))
        m.d.comb += [repq.w_en.eq(rep_ok & mode_out), repq.w_data.eq(rbody.data)]
        m.d.sync += ld_flight.eq(ld_flight + (ld_sent & is_out) - (rep_ok & mode_out))
        # Words in flight to rdq: an external read or a MOVE's LOAD goes out, one comes back.
        m.d.sync += rd_flight.eq(rd_flight + (rd_go | (ld_sent & is_move)) - (rd_back | mv_back))
        wpay = self.o_ext_wr.payload
        m.d.comb += [self.o_ext_wr.valid.eq(repq.r_rdy), wpay.addr.eq(wr_addr),
                     wpay.data.eq(repq.r_data), repq.r_en.eq(self.o_ext_wr.ready)]
        with m.If(self.o_ext_wr.valid & self.o_ext_wr.ready):
            m.d.sync += [wr_addr.eq(_add8(wr_addr)), wr_left.eq(wr_left - 1),
                         wr_bytes.eq(_add8(wr_bytes))]

        # Sequencer.  Descriptor i + 1 is fetched while descriptor i moves (its two reads are
        # issued once the data reads of i are), and a descriptor into the Dbufs does not wait
        # for its STORE acks: ``acks`` counts the acks of every descriptor in flight, awaited
        # before an OUT descriptor starts (its LOADs then see every earlier STORE) and at the
        # end of the list.  So a run of IN descriptors streams with a few cycles between them.
        # A MOVE starts with no ack outstanding too (its LOADs see every earlier STORE), and
        # fetches the next descriptor only after its last STORE, so that the fetched words never
        # land in rdq among its words.
        words = length[3:]
        dshift = (DESC_BYTES - 1).bit_length()          # descriptors are DESC_BYTES-aligned
        last = Signal()
        m.d.comb += last.eq(increment(index) == count)
        next_list = Cat(list_addr[:dshift], increment(list_addr[dshift:]))

        def fetch_next():
            # Issue the two reads of the next descriptor unless they are issued already.
            return [rd_left.eq(2), rd_addr.eq(list_addr), list_addr.eq(next_list), pre.eq(1)]

        with m.If(self.i_start & (is_state(DmaState.IDLE) | is_state(DmaState.DONE))):
            m.d.sync += [state.eq(DmaState.FETCH), err.eq(0), cycles.eq(0),
                         list_addr.eq(Cat(self.i_list[:dshift],
                                          increment(self.i_list[dshift:]))),
                         count.eq(self.i_count), index.eq(0),
                         rd_addr.eq(self.i_list), rd_left.eq(Mux(self.i_count.any(), 2, 0)),
                         got.eq(0), pre.eq(0), mode_out.eq(0)]
            with m.If(~self.i_count.any()):
                m.d.sync += state.eq(DmaState.DONE)
            with m.If(self.i_list[:dshift].any()):
                m.d.sync += [state.eq(DmaState.DONE), err[DmaError.BAD_DESC].eq(1)]
        with m.Elif(is_state(DmaState.FETCH)):
            with m.If(got[1]):
                m.d.sync += state.eq(DmaState.CHECK)
        with m.Elif(is_state(DmaState.CHECK)):
            with m.If(bad):
                m.d.sync += [err[DmaError.BAD_DESC].eq(1), state.eq(DmaState.FINISH)]
            with m.Elif(~length.any()):
                m.d.sync += state.eq(DmaState.FINISH)
            with m.Elif(~(is_out | is_move) | ~acks.any()):
                m.d.sync += [
                    state.eq(DmaState.MOVE), mode_out.eq(is_out),
                    dst_x.eq(xs), dst_y.eq(ys), dst_k.eq(first_idx[:kbits]),
                    ld_x.eq(Mux(is_move, sx, xs)), ld_y.eq(Mux(is_move, sy, ys)),
                    copy_mask.eq(targets), rest.eq(targets),
                    st_addr.eq(loc), st_left.eq(Mux(is_out, 0, zero_extend(words, 32))),
                    ld_addr.eq(Mux(is_move, ext, loc)),
                    ld_left.eq(Mux(is_out | is_move, zero_extend(words, 32), 0)),
                    wr_addr.eq(ext), wr_left.eq(Mux(is_out, zero_extend(words, 32), 0)),
                    rd_addr.eq(ext), rd_left.eq(Mux(is_out | is_move, 0, zero_extend(words, 32))),
                    cb_addr.eq(loc[wshift:wshift + len(cb_addr)]), beat.eq(0),
                ]
        with m.Elif(is_state(DmaState.MOVE)):
            with m.If(~rd_left.any() & ~pre & ~last & ~(is_move & st_left.any())):
                m.d.sync += fetch_next()
            with m.If(~st_left.any() & ~ld_left.any() & (pre | last)):
                with m.If(mode_out | last | err.any()):
                    m.d.sync += state.eq(DmaState.FINISH)
                with m.Else():
                    m.d.sync += [state.eq(DmaState.FETCH), got.eq(0), pre.eq(0),
                                 index.eq(increment(index))]
        with m.Elif(is_state(DmaState.FINISH)):
            # Every store acknowledged and every load's word written out.
            with m.If(~acks.any() & ~wr_left.any() & ~ld_flight.any()):
                with m.If(err.any()):
                    with m.If(~rd_left.any() & ~rd_flight.any() & ~rdq.r_rdy):
                        m.d.sync += state.eq(DmaState.DONE)
                with m.Elif(last):
                    m.d.sync += [state.eq(DmaState.DONE), index.eq(increment(index))]
                with m.Else():
                    m.d.sync += [state.eq(DmaState.FETCH), got.eq(0), pre.eq(0),
                                 index.eq(increment(index))]
                    with m.If(~pre):
                        m.d.sync += [rd_left.eq(2), rd_addr.eq(list_addr),
                                     list_addr.eq(next_list)]
        return m


def build_dma(rows=1, cols=1, cbufs=1, cbuf_bytes=1024, dbuf_bytes=4096, outstanding=64):
    """Return a :class:`Dma` for ``fdpu verilog --top dma``."""
    return Dma(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                           dbuf_bytes=dbuf_bytes), outstanding=outstanding)
