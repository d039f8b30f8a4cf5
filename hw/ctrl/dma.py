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
    ``move`` (Dbuf to Dbuf: ``ext`` is the global Dbuf address of the source), ``mcast``
    (edge multicast, see Dbufs), ``copies`` (multicast, see Dbufs).  They run in order, one
    at a time.
    ``ext``, ``local`` and ``length`` are multiples of 8 (Cbuf: of the Cbuf word,
    :func:`sw.spec.cbuf.word_bits` / 8); a Dbuf range lies inside one Dbuf; a Cbuf range inside
    the Cbufs; ``out`` with ``cbuf`` does not exist, nor ``cbuf`` on a DMA built with
    ``cbuf=False``, nor ``move`` with ``out`` or ``cbuf``; a MOVE's source range lies inside
    one Dbuf (like the destination, checked also when ``length = 0`` for the Dbuf of its
    first byte); ``copies`` is 0 with ``out`` or ``cbuf`` and names no Dbuf past the last
    one (also when ``length = 0``).  ``length = 0`` moves nothing: it is a *fence*, which
    waits until every STORE before it is acknowledged and then counts one in ``o_fences``
    (the host puts one after the data each group of contexts reads, and the top lets those
    contexts start when every channel has passed it: ``docs/system.md``, "Contexts start
    when their data are in").  A MOVE whose source range
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
    ``o_cycles`` the cycles of the last job; ``o_fences`` the fences passed since the start
    (16 bits, wrapping).
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
    Edge multicast (``mcast``): one MSTORE flit per word and target (posted: no
    acknowledgement), which the mesh writes into every Dbuf of
    :func:`sw.spec.dma.edge_targets` from this DMA's port to that target; after the last word
    one MLOAD per target (first, then the copies, each to the descriptor's first offset
    there), which each of those Dbufs answers after its copies of the words, so their
    replies acknowledge the descriptor (``n`` per target, a constant per Dbuf, is what the DMA
    then waits for): one request cycle per word and target however many Dbufs take it.  With
    ``copies`` one word read from external memory reaches several edge lines (the targets on
    other edges than this DMA's).
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

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, increment, lowest_one, zero_extend
from hw.lib.spec import check_params, shaped_enum
from hw.noc.flit import Bits, FlitKind, body_view, flit_layout
from sw.spec import status
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_words, word_bits
from sw.spec.dma import DESC_BYTES, WORD_BITS, descriptor_layout, edge_targets
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


def _add_small(x, small):
    """Return ``x + small`` modulo ``2 ** len(x)`` for a narrower ``small``, with adders of
    equal widths or a 1-bit operand (lint-clean): the low bits, then the high ones with the
    carry."""
    w = len(small)
    low = x[:w] + small
    return Cat(low[:w], (x[w:] + low[w])[:len(x) - w])


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
            "o_fences": Out(16),
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
        s = SimpleNamespace()           # the signals the parts below share
        self._registers(m, s)
        self._read_side(m, s)
        self._descriptor(m, s)
        self._checks(m, s)
        self._requests(m, s)
        self._cbuf_words(m, s)
        self._pops(m, s)
        self._replies(m, s)
        self._sequencer(m, s)
        return m

    def _edge(self, index):
        """Return the edge coordinate ``(x + 1, y + 1)`` of Dbuf ``index`` (a signal).

        A Mux chain, not an Array: Yosys writes an Array lookup as a case statement in an
        ``always @*`` block, which Icarus never evaluates while its index keeps the value it had
        at time 0 (a first descriptor of all-zero words left the target X).
        """
        p = self.params
        x, y = Const(0, p.x_bits), Const(0, p.y_bits)
        for k in reversed(range(p.num_dbufs)):
            hit = equals(index, k)
            x = Mux(hit, Const(p.dbuf_coord(k)[0] + 1, p.x_bits), x)
            y = Mux(hit, Const(p.dbuf_coord(k)[1] + 1, p.y_bits), y)
        return x, y

    def _registers(self, m, s):
        """The sequencer's state and the host's registers."""
        # A typed register rather than ``m.FSM``: a start (from IDLE or DONE) is one transition
        # of two states, and the host reads fixed values (``o_state``).
        s.state = state = Signal(DmaState)
        s.err = err = Signal(len(DmaError))
        s.cycles = Signal(32)
        s.rd_bytes = Signal(40)
        s.wr_bytes = Signal(40)
        s.list_addr = Signal(32)
        s.count = Signal(16)
        s.index = Signal(16)
        s.fences = Signal(16)
        s.fence = Signal()                  # the descriptor in CHECK .. FINISH is a fence
        m.d.comb += [
            self.o_state.eq(state), self.o_error.eq(err), self.o_desc.eq(s.index),
            self.o_busy.eq(~equals(state, DmaState.IDLE) & ~equals(state, DmaState.DONE)),
            self.o_done.eq(equals(state, DmaState.DONE) & ~err.any()),
            self.o_halt.eq(equals(state, DmaState.DONE)),
            self.o_rd_bytes.eq(s.rd_bytes), self.o_wr_bytes.eq(s.wr_bytes),
            self.o_cycles.eq(s.cycles), self.o_fences.eq(s.fences),
        ]
        with m.If(self.o_busy):
            m.d.sync += s.cycles.eq(increment(s.cycles))

    def _read_side(self, m, s):
        """External reads and a MOVE's replies into ``rdq``, in order.

        A read or a MOVE's LOAD is issued only while rdq has room for it counting the words in
        flight to it (``rd_flight``: reads and MOVE loads).  The two never overlap (a MOVE
        issues no external read before its last STORE, so not before its last LOAD), but a
        MOVE's reply would win a cycle where both arrive.
        """
        p, depth = self.params, self.outstanding
        s.lbits = lbits = depth.bit_length()              # counts 0 .. depth
        m.submodules.rdq = s.rdq = rdq = fifo.SyncFIFO(width=64, depth=depth)
        s.rd_addr, s.rd_left = Signal(32, name="rd_addr"), Signal(32, name="rd_left")
        s.rd_flight = Signal(lbits, name="rd_flight")
        s.room = Signal()
        used = _wide(m, s.rd_flight + rdq.w_level, lbits + 1, "rd_used")
        m.d.comb += s.room.eq(Bits(used) < depth)
        s.rbody = body_view(self.i_rep.payload, FlitKind.REPLY, p)
        s.mv_back = self.i_rep.valid & equals(s.rbody.tag, 1)
        m.d.comb += [
            self.o_ext_rd.valid.eq(s.rd_left.any() & s.room),
            self.o_ext_rd.payload.eq(s.rd_addr),
            rdq.w_en.eq(self.i_ext_rdata.valid | s.mv_back),
            rdq.w_data.eq(Mux(s.mv_back, s.rbody.data, self.i_ext_rdata.payload)),
            self.i_ext_rdata.ready.eq(rdq.w_rdy & ~s.mv_back),
        ]
        s.rd_go = self.o_ext_rd.valid & self.o_ext_rd.ready
        s.rd_back = self.i_ext_rdata.valid & self.i_ext_rdata.ready
        with m.If(s.rd_go):
            m.d.sync += [s.rd_addr.eq(_add8(s.rd_addr)), s.rd_left.eq(s.rd_left - 1)]
        with m.If(s.rd_back):
            m.d.sync += s.rd_bytes.eq(_add8(s.rd_bytes))

    def _descriptor(self, m, s):
        """The descriptor being run and its Dbuf targets.

        Its two words shift in through ``desc1`` (word 0 ends in ``desc0``); the fields are
        those of the one descriptor layout (:mod:`sw.spec.dma`).  The targets: the first Dbuf
        of ``local`` (its edge coordinate ``xs, ys``), its copy targets as a mask of Dbufs (bit
        ``d``: Dbuf ``d``) and whether one is past the last Dbuf; a MOVE's source Dbuf (from
        ``ext``, ``sx, sy``); the next target of the current word (the lowest Dbuf of
        ``rest``: ``nx, ny, nk``).
        """
        p = self.params
        s.desc0, s.desc1 = Signal(WORD_BITS, name="desc0"), Signal(WORD_BITS, name="desc1")
        s.got = Signal(2)
        s.pre, s.mode_out = Signal(name="pre"), Signal(name="mode_out")
        desc = data.View(data.StructLayout(descriptor_layout().struct_fields()),
                         Cat(s.desc0, s.desc1))
        s.ext, s.loc, s.length = desc.ext, desc.local, desc.length      # length: 31 bits
        s.is_out, s.is_cbuf, s.is_move, s.copies = desc.out, desc.cbuf, desc.move, desc.copies
        s.is_mcast = desc.mcast
        s.shift = shift = (p.dbuf_bytes - 1).bit_length()
        # end = loc + length without a wider adder: the wrap shows as end < loc.
        s.end, last = Signal(32, name="end"), Signal(32, name="last")
        m.d.comb += [s.end.eq(_add_length(s.loc, s.length)), last.eq((s.end - 1)[:32])]
        s.wraps = s.end < s.loc
        s.first_idx, s.last_idx = s.loc[shift:], last[shift:]
        nd = p.num_dbufs
        s.kbits = kbits = (nd - 1).bit_length()
        s.xs = Signal(p.x_bits)
        s.ys = Signal(p.y_bits)
        s.targets = Signal(nd)
        mask, past = Const(0, nd), Const(0, 1)
        for k in reversed(range(nd)):
            hit = equals(s.first_idx, k)
            mask = Mux(hit, zero_extend(Cat(Const(0, k + 1), s.copies), nd), mask)
            if nd - 1 - k < len(s.copies):
                past = Mux(hit, s.copies[nd - 1 - k:].any(), past)
        s.past = past
        xs, ys = self._edge(s.first_idx)
        m.d.comb += [s.xs.eq(xs), s.ys.eq(ys), s.targets.eq(mask)]
        # An edge-multicast descriptor's acknowledgements: one per Dbuf the mesh writes from
        # this channel's port to each target Dbuf (a constant per Dbuf,
        # sw.spec.dma.edge_targets), collected by one MLOAD per target; ``reach`` is that of
        # the current target ``dst_k`` (below).
        s.port_reach = [len(edge_targets(p, p.dbuf_at(*self.coord), k)) for k in range(nd)]
        s.reach = Signal(range(max(s.port_reach) + 1), name="reach")
        s.src_end, src_last = Signal(32, name="src_end"), Signal(32, name="src_last")
        m.d.comb += [s.src_end.eq(_add_length(s.ext, s.length)), src_last.eq((s.src_end - 1)[:32])]
        s.src_first_idx, s.src_last_idx = s.ext[shift:], src_last[shift:]
        s.sx, s.sy = Signal(p.x_bits, name="sx"), Signal(p.y_bits, name="sy")
        sx, sy = self._edge(s.src_first_idx)
        m.d.comb += [s.sx.eq(sx), s.sy.eq(sy)]
        # The current STORE target (edge coordinate and Dbuf number), the LOAD target (OUT: the
        # Dbuf of ``local``, MOVE: the source Dbuf), the descriptor's copy targets and those the
        # current word still goes to after this one.
        s.dst_x = Signal(p.x_bits)
        s.dst_y = Signal(p.y_bits)
        s.dst_k = Signal(kbits)
        s.ld_x, s.ld_y = Signal(p.x_bits, name="ld_x"), Signal(p.y_bits, name="ld_y")
        s.copy_mask, s.rest = Signal(nd, name="copy_mask"), Signal(nd, name="rest")
        nx, ny, nk = Const(0, p.x_bits), Const(0, p.y_bits), Const(0, kbits)
        for k in reversed(range(nd)):                   # a priority Mux chain, lowest wins
            nx = Mux(s.rest[k], Const(p.dbuf_coord(k)[0] + 1, p.x_bits), nx)
            ny = Mux(s.rest[k], Const(p.dbuf_coord(k)[1] + 1, p.y_bits), ny)
            nk = Mux(s.rest[k], Const(k, kbits), nk)
        s.nx, s.ny, s.nk = nx, ny, nk
        n = Const(0, len(s.reach))
        for k in reversed(range(nd)):
            n = Mux(equals(s.dst_k, k), Const(s.port_reach[k], len(s.reach)), n)
        m.d.comb += s.reach.eq(n)

    def _checks(self, m, s):
        """``s.bad``: the descriptor breaks a rule of the module doc (checked in CHECK)."""
        p, wb = self.params, self.word_bytes
        s.wshift = wshift = (wb - 1).bit_length()
        misaligned = s.ext[:3].any() | s.loc[:3].any() | s.length[:3].any()
        # An empty descriptor spans no Dbuf: its ``last`` (loc - 1) may be in the one before.
        dbuf_bad = (s.wraps | (s.length.any() & (s.first_idx != s.last_idx))
                    | ~(Bits(s.first_idx) < p.num_dbufs))
        # Multicast is for IN and MOVE descriptors into the Dbufs, to Dbufs that exist.
        copies_bad = s.copies.any() & (s.is_out | s.is_cbuf | s.past)
        # Edge multicast likewise (with copies, each target's edge line takes its MSTOREs).
        mcast_bad = s.is_mcast & (s.is_out | s.is_cbuf)
        # A MOVE: neither OUT nor CBUF, its source (aligned with ``ext``) inside one Dbuf.
        src_bad = ((s.src_end < s.ext) | (s.length.any() & (s.src_first_idx != s.src_last_idx))
                   | ~(Bits(s.src_first_idx) < p.num_dbufs))
        move_bad = s.is_move & (s.is_out | s.is_cbuf | src_bad)
        cbuf_bad = (s.is_out | s.loc[:wshift].any() | s.length[:wshift].any() | s.wraps
                    | (Bits(s.end) > self.cbuf_words * wb))
        if not self.cbuf:
            cbuf_bad = Const(1, 1)
        s.bad = (misaligned | Mux(s.is_cbuf, cbuf_bad, dbuf_bad) | copies_bad | mcast_bad
                 | move_bad)

    def _requests(self, m, s):
        """STOREs (IN and MOVE into the Dbufs) of the words in ``rdq`` and LOADs (OUT into
        ``repq``, MOVE into ``rdq``, ``tag`` 1 marking the MOVE's) into the request mesh.

        A MOVE has both; a STORE goes first (it frees rdq), a LOAD takes the cycles without
        one.  A word is done with its last target's STORE: then rdq pops and the next word
        starts at the first Dbuf; else the next target of the same word follows.
        """
        p, depth = self.params, self.outstanding
        s.st_addr = Signal(32)
        s.st_left = Signal(32)
        s.acks = Signal(32)
        s.ld_addr = Signal(32)
        s.ld_left = Signal(32)
        s.ld_flight = Signal(s.lbits)
        s.wr_addr, s.wr_left = Signal(32, name="wr_addr"), Signal(32, name="wr_left")
        req = self.o_req.payload
        body = body_view(req, FlitKind.STORE, p)
        cx, cy = self.coord
        s.moving = moving = equals(s.state, DmaState.MOVE)
        s.store_v = store_v = (moving & ~s.is_out & ~s.is_cbuf & s.st_left.any()
                               & s.rdq.r_rdy)
        # An edge-multicast descriptor's MLOADs, after its last MSTORE, one per target Dbuf
        # (the first, then its copies, as the STOREs go): every Dbuf a target's MSTOREs reach
        # answers that target's MLOAD after its copies of the words (the same route, in
        # order).
        s.sync_left = Signal(name="sync_left")
        sync_v = moving & s.sync_left & ~s.st_left.any()
        m.submodules.repq = s.repq = repq = fifo.SyncFIFO(width=64, depth=depth)
        ld_room = Signal()
        ld_used = _wide(m, s.ld_flight + repq.w_level, s.lbits + 1, "ld_used")
        m.d.comb += ld_room.eq(Bits(ld_used) < depth)
        load_v = moving & s.ld_left.any() & Mux(s.is_move, s.room, s.is_out & ld_room)
        # A STORE's address: the word's offset in the current target Dbuf; an MLOAD's: the
        # descriptor's first offset there.
        st_at = zero_extend(Cat(s.st_addr[:s.shift], s.dst_k), 32)
        sync_at = zero_extend(Cat(s.loc[:s.shift], s.dst_k), 32)
        load_kind = Mux(sync_v, FlitKind.MLOAD, FlitKind.LOAD)
        m.d.comb += [
            req.kind.eq(Mux(store_v, Mux(s.is_mcast, FlitKind.MSTORE, FlitKind.STORE),
                            load_kind)),
            req.dst_x.eq(Mux(store_v | sync_v, s.dst_x, s.ld_x)),
            req.dst_y.eq(Mux(store_v | sync_v, s.dst_y, s.ld_y)),
            body.addr.eq(Mux(store_v, st_at, Mux(sync_v, sync_at, s.ld_addr))), body.size.eq(3),
            body.bcast.eq(0), body.src_x.eq(cx + 1), body.src_y.eq(cy + 1), body.slot.eq(0),
            body.tag.eq(~store_v & ~sync_v & s.is_move),
            body.data.eq(s.rdq.r_data),
            self.o_req.valid.eq(store_v | sync_v | load_v),
        ]
        sent = self.o_req.valid & self.o_req.ready
        s.st_sent, s.ld_sent = sent & store_v, sent & ~store_v & ~sync_v
        s.sync_sent = sent & ~store_v & sync_v
        # After the last word the targets start again at the first (``_first_target``): each
        # MLOAD moves on to the next, the last one ends the descriptor's requests.
        with m.If(s.sync_sent):
            with m.If(s.rest.any()):
                m.d.sync += [s.dst_x.eq(s.nx), s.dst_y.eq(s.ny), s.dst_k.eq(s.nk),
                             s.rest.eq(s.rest & ~lowest_one(s.rest))]
            with m.Else():
                m.d.sync += s.sync_left.eq(0)
        s.word_done = ~s.rest.any()
        with m.If(s.st_sent):
            with m.If(s.word_done):
                m.d.sync += [s.st_addr.eq(_add8(s.st_addr)), s.st_left.eq(s.st_left - 1)]
                m.d.sync += self._first_target(s)
            with m.Else():
                m.d.sync += [s.dst_x.eq(s.nx), s.dst_y.eq(s.ny), s.dst_k.eq(s.nk),
                             s.rest.eq(s.rest & ~lowest_one(s.rest))]
        with m.If(s.ld_sent):
            m.d.sync += [s.ld_addr.eq(_add8(s.ld_addr)), s.ld_left.eq(s.ld_left - 1)]

    def _first_target(self, s, copies=None):
        """Return the assignments that make the descriptor's first Dbuf the STORE target, with
        ``copies`` (default: the descriptor's copy mask) still to go."""
        return [s.dst_x.eq(s.xs), s.dst_y.eq(s.ys), s.dst_k.eq(s.first_idx[:s.kbits]),
                s.rest.eq(s.copy_mask if copies is None else copies)]

    def _cbuf_words(self, m, s):
        """Cbuf words: beats of one word collect in ``cb_word``, then one write."""
        wb = self.word_bytes
        beats = wb // 8
        s.cb_addr = Signal(len(self.cbuf_wr_addr))
        s.beat = Signal(max(1, s.wshift - 3))
        cb_word = Signal(wb * 8)
        s.cbuf_v = cbuf_v = (s.moving & ~s.is_out & s.is_cbuf & s.st_left.any()
                             & s.rdq.r_rdy)
        full = Signal(wb * 8)
        m.d.comb += full.eq(Cat(cb_word[64:], s.rdq.r_data) if beats > 1 else s.rdq.r_data)
        last_beat = equals(s.beat, beats - 1) if beats > 1 else Const(1, 1)
        m.d.comb += [self.cbuf_wr_addr.eq(s.cb_addr), self.cbuf_wr_data.eq(full),
                     self.cbuf_wr_en.eq(cbuf_v & last_beat)]
        with m.If(cbuf_v):
            m.d.sync += [cb_word.eq(full), s.st_left.eq(s.st_left - 1)]
            if beats > 1:
                m.d.sync += s.beat.eq(Mux(last_beat, 0, increment(s.beat)))
            with m.If(last_beat):
                m.d.sync += s.cb_addr.eq(increment(s.cb_addr))

    def _pops(self, m, s):
        """Pops of ``rdq``: descriptor words (FETCH), STORE data, Cbuf beats; after an error
        the prefetched words of the next descriptor are dropped (FINISH)."""
        fetch_pop = equals(s.state, DmaState.FETCH) & s.rdq.r_rdy & ~s.got[1]
        drop = equals(s.state, DmaState.FINISH) & s.err.any() & s.rdq.r_rdy
        m.d.comb += s.rdq.r_en.eq(fetch_pop | (s.store_v & self.o_req.ready & s.word_done)
                                  | s.cbuf_v | drop)
        with m.If(fetch_pop):
            m.d.sync += [s.desc1.eq(s.rdq.r_data), s.desc0.eq(s.desc1), s.got.eq(increment(s.got))]

    def _replies(self, m, s):
        """Replies: STORE acks are counted, OUT load data go to ``repq`` and on to external
        memory, MOVE load data (``tag`` 1) to ``rdq`` (:meth:`_read_side`).

        ``mode_out`` (the flags of the descriptor that last started moving) tells acks from
        load data: an OUT descriptor starts only when no ack is outstanding, and the next one
        only when its loads are all back, so replies of the two kinds never mix.  ``acks``
        counts the STOREs sent and not yet acknowledged (one ack each, so a descriptor expects
        words * (1 + popcount(copies))); a descriptor leaves MOVE only with every STORE sent,
        so ``acks = 0`` then means every STORE so far is acknowledged.  A MOVE descriptor runs
        with ``mode_out`` 0: the acks of its STOREs (tag 0) are counted, the replies of its
        LOADs (tag 1) go to rdq.
        """
        m.d.comb += self.i_rep.ready.eq(1)
        rep_ok = self.i_rep.valid & ~equals(s.rbody.tag, 1)
        with m.If(self.i_rep.valid & s.rbody.err):
            m.d.sync += s.err[DmaError.DBUF_ERROR].eq(1)
        expect = _wide(m, Mux(s.sync_sent, s.reach, s.st_sent & ~s.is_mcast), len(s.reach),
                       "expect")
        m.d.sync += s.acks.eq(_add_small(s.acks, expect) - (rep_ok & ~s.mode_out))
        m.d.comb += [s.repq.w_en.eq(rep_ok & s.mode_out), s.repq.w_data.eq(s.rbody.data)]
        m.d.sync += s.ld_flight.eq(s.ld_flight + (s.ld_sent & s.is_out) - (rep_ok & s.mode_out))
        # Words in flight to rdq: an external read or a MOVE's LOAD goes out, one comes back.
        m.d.sync += s.rd_flight.eq(s.rd_flight + (s.rd_go | (s.ld_sent & s.is_move))
                                   - (s.rd_back | s.mv_back))
        wpay = self.o_ext_wr.payload
        m.d.comb += [self.o_ext_wr.valid.eq(s.repq.r_rdy), wpay.addr.eq(s.wr_addr),
                     wpay.data.eq(s.repq.r_data), s.repq.r_en.eq(self.o_ext_wr.ready)]
        with m.If(self.o_ext_wr.valid & self.o_ext_wr.ready):
            m.d.sync += [s.wr_addr.eq(_add8(s.wr_addr)), s.wr_left.eq(s.wr_left - 1),
                         s.wr_bytes.eq(_add8(s.wr_bytes))]

    def _sequencer(self, m, s):
        """The states.  Descriptor i + 1 is fetched while descriptor i moves (its two reads
        are issued once the data reads of i are), and a descriptor into the Dbufs does not
        wait for its STORE acks: ``acks`` counts the acks of every descriptor in flight,
        awaited before an OUT descriptor starts (its LOADs then see every earlier STORE) and at
        the end of the list.  So a run of IN descriptors streams with a few cycles between
        them.  A MOVE starts with no ack outstanding too (its LOADs see every earlier STORE),
        and fetches the next descriptor only after its last STORE, so that the fetched words
        never land in rdq among its words.
        """
        words = zero_extend(s.length[3:], 32)
        dshift = (DESC_BYTES - 1).bit_length()          # descriptors are DESC_BYTES-aligned
        last = Signal()
        m.d.comb += last.eq(increment(s.index) == s.count)

        def read_next():
            # The two reads of the next descriptor in the list.
            return [s.rd_left.eq(2), s.rd_addr.eq(s.list_addr),
                    s.list_addr.eq(Cat(s.list_addr[:dshift], increment(s.list_addr[dshift:])))]

        def fetch(index):
            return [s.state.eq(DmaState.FETCH), s.got.eq(0), s.pre.eq(0), s.index.eq(index)]

        def state(value):
            return equals(s.state, value)

        # An If chain on the state, not m.Switch: Yosys writes a Switch as one case statement
        # per register without the encodings no state has, which the lint counts
        # (CASEINCOMPLETE).
        with m.If(self.i_start & (state(DmaState.IDLE) | state(DmaState.DONE))):
            m.d.sync += fetch(0) + [
                s.err.eq(0), s.cycles.eq(0), s.mode_out.eq(0), s.fences.eq(0), s.fence.eq(0),
                s.sync_left.eq(0),
                s.list_addr.eq(Cat(self.i_list[:dshift], increment(self.i_list[dshift:]))),
                s.count.eq(self.i_count),
                s.rd_addr.eq(self.i_list), s.rd_left.eq(Mux(self.i_count.any(), 2, 0))]
            with m.If(~self.i_count.any()):
                m.d.sync += s.state.eq(DmaState.DONE)
            with m.If(self.i_list[:dshift].any()):
                m.d.sync += [s.state.eq(DmaState.DONE), s.err[DmaError.BAD_DESC].eq(1)]
        with m.Elif(state(DmaState.FETCH)):
            with m.If(s.got[1]):
                m.d.sync += s.state.eq(DmaState.CHECK)
        with m.Elif(state(DmaState.CHECK)):
            with m.If(s.bad):
                m.d.sync += [s.err[DmaError.BAD_DESC].eq(1), s.state.eq(DmaState.FINISH)]
            with m.Elif(~s.length.any()):
                m.d.sync += [s.state.eq(DmaState.FINISH), s.fence.eq(1)]
            with m.Elif(~(s.is_out | s.is_move) | ~s.acks.any()):
                out, move = s.is_out, s.is_move
                m.d.sync += self._first_target(s, s.targets) + [
                    s.state.eq(DmaState.MOVE), s.mode_out.eq(out),
                    s.ld_x.eq(Mux(move, s.sx, s.xs)), s.ld_y.eq(Mux(move, s.sy, s.ys)),
                    s.copy_mask.eq(s.targets),
                    s.st_addr.eq(s.loc), s.st_left.eq(Mux(out, 0, words)),
                    s.ld_addr.eq(Mux(move, s.ext, s.loc)),
                    s.ld_left.eq(Mux(out | move, words, 0)),
                    s.wr_addr.eq(s.ext), s.wr_left.eq(Mux(out, words, 0)),
                    s.rd_addr.eq(s.ext), s.rd_left.eq(Mux(out | move, 0, words)),
                    s.cb_addr.eq(s.loc[s.wshift:s.wshift + len(s.cb_addr)]), s.beat.eq(0),
                    s.sync_left.eq(s.is_mcast),
                ]
        with m.Elif(state(DmaState.MOVE)):
            with m.If(~s.rd_left.any() & ~s.pre & ~last & ~(s.is_move & s.st_left.any())):
                m.d.sync += read_next() + [s.pre.eq(1)]
            with m.If(~s.st_left.any() & ~s.ld_left.any() & ~s.sync_left & (s.pre | last)):
                with m.If(s.mode_out | last | s.err.any()):
                    m.d.sync += s.state.eq(DmaState.FINISH)
                with m.Else():
                    m.d.sync += fetch(increment(s.index))
        with m.Elif(state(DmaState.FINISH)):
            # Every store acknowledged and every load's word written out; a fence counts.
            with m.If(~s.acks.any() & ~s.wr_left.any() & ~s.ld_flight.any()):
                m.d.sync += s.fence.eq(0)
                with m.If(s.fence & ~s.err.any()):
                    m.d.sync += s.fences.eq(increment(s.fences))
                with m.If(s.err.any()):
                    with m.If(~s.rd_left.any() & ~s.rd_flight.any() & ~s.rdq.r_rdy):
                        m.d.sync += s.state.eq(DmaState.DONE)
                with m.Elif(last):
                    m.d.sync += [s.state.eq(DmaState.DONE), s.index.eq(increment(s.index))]
                with m.Else():
                    m.d.sync += fetch(increment(s.index))
                    with m.If(~s.pre):
                        m.d.sync += read_next()


def build_dma(rows=1, cols=1, cbufs=1, cbuf_bytes=1024, dbuf_bytes=4096, outstanding=64):
    """Return a :class:`Dma` for ``fdpu verilog --top dma``."""
    return Dma(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                           dbuf_bytes=dbuf_bytes), outstanding=outstanding)
