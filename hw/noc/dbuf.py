"""The Dbuf: one scratch-pad bank on the mesh edge, serving LOAD and STORE flits.

::

    i_req ──> check (mine? aligned? size?) ──> SRAM read / byte write ──> format REPLY
          ──> [FIFO] ──> o_reply
    (accepted only while the reply FIFO has a free slot: a credit counter)

Contract
--------
Requests
    ``i_req`` carries LOAD and STORE flits (:mod:`sw.spec.packet` bodies: ``addr``, ``size`` =
    log2 bytes, ``bcast``, reply-to ``src_x``/``src_y``, ``slot``, ``tag``, STORE ``data``).
    ``addr`` is global (:meth:`sw.spec.arch.ArrayParams.dbuf_of`).  One request per cycle.
    The edge-multicast kinds are served as their unicast kinds (MLOAD as LOAD, MSTORE as
    STORE) at ``addr``'s offset in this Dbuf, whatever Dbuf number ``addr`` names.
Replies
    Exactly one REPLY flit per request except an MSTORE (posted: none), to ``(src_x,
    src_y)``, with the request's ``slot`` and ``tag``.  An MSTORE that breaks a rule below
    writes nothing and sets a flag that the next MLOAD's reply reports as ``err`` (then
    cleared).  LOAD: ``data`` = the ``2**size`` bytes at ``addr`` zero-extended, or with
    ``bcast`` the 2-byte value in all four 16-bit lanes.  STORE: writes the low ``2**size``
    bytes of ``data`` at ``addr``, answers ``data = 0``.  ``err = 1`` (nothing written,
    ``data = 0``) when the address belongs to another Dbuf or is past the memory, is not
    aligned to the size, ``size`` is 0 (1-byte accesses do not exist), ``bcast`` is set with
    ``size != 1``, or the flit is neither LOAD nor STORE.  Nothing is ever dropped.
Ordering and latency
    Replies leave in request order (a plain pipeline), so in order per requester.  A request
    accepted on edge *t* is offered as a reply from edge *t + 2*.  The request port is
    ``ready`` while the reply FIFO (``reply_depth`` flits, default 4) has a free slot counting
    the request in flight; with ``reply_depth >= 3`` it serves one request per cycle.
Deadlock
    The Dbuf waits only on its reply port; replies travel on the reply network, which never
    waits on requests (``docs/noc.md``).
"""

from amaranth import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.spec import check_params
from hw.lib.sram import Sram
from hw.noc.flit import Bits, FlitKind, body_view, flit_layout
from sw.spec.arch import ArrayParams

__all__ = ["Dbuf"]


def _shift(value, amount, unit, *, left):
    """Shift ``value`` by ``amount * unit`` bits, keeping its width (a log shifter)."""
    width = len(value)
    for k, bit in enumerate(amount):
        step = unit << k
        if step >= width:
            shifted = C(0, width)
        elif left:
            shifted = Cat(C(0, step), value[:width - step])
        else:
            shifted = Cat(value[step:], C(0, step))
        value = Mux(bit, shifted, value)
    return value


class Dbuf(wiring.Component):
    """Build Dbuf ``index`` of the array ``params`` (size ``params.dbuf_bytes``).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        The array (address map, flit format); the bank holds ``params.dbuf_bytes`` bytes.
    index : int
        This Dbuf's number (its addresses are ``index * dbuf_bytes`` onwards).
    reply_depth : int
        Reply FIFO depth, at least 2.
    inline_bits : int
        Banks up to this many bits are an Amaranth ``Memory``; larger ones an instance of
        the behavioural model (:mod:`hw.lib.sram`).
    init_file : str
        ``$readmemh`` file for a behavioural bank.

    Attributes
    ----------
    i_req : In(stream.Signature(flit_layout(params)))
    o_reply : Out(stream.Signature(flit_layout(params)))
    """

    def __init__(self, params=ArrayParams(), index=0, *, reply_depth=4, inline_bits=1 << 20,
                 init_file=""):
        check_params(params)
        if not isinstance(index, int) or isinstance(index, bool) \
                or not 0 <= index < params.num_dbufs:
            raise ValueError(f"index must be a Dbuf number 0..{params.num_dbufs - 1}, "
                             f"not {index!r}")
        if not isinstance(reply_depth, int) or isinstance(reply_depth, bool) or reply_depth < 2:
            raise TypeError(f"reply_depth must be an integer >= 2, not {reply_depth!r}")
        self.params, self.index, self.reply_depth = params, index, reply_depth
        self.layout = flit_layout(params)
        self.sram = Sram(64, params.dbuf_bytes // 8, inline_bits=inline_bits,
                         init_file=init_file)
        flit = stream.Signature(self.layout)
        super().__init__({"i_req": In(flit), "o_reply": Out(flit)})

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.sram = sram = self.sram
        m.submodules.replies = out = fifo.SyncFIFO(width=self.layout.size, depth=self.reply_depth)

        req = self.i_req.payload
        store = body_view(req, FlitKind.STORE, p)
        offset_bits = (p.dbuf_bytes - 1).bit_length()

        # Credits: free reply slots not yet promised to an accepted request.
        kind = Bits(req.kind.as_value())
        m_load, m_store = kind == FlitKind.MLOAD.value, kind == FlitKind.MSTORE.value
        is_load = (kind == FlitKind.LOAD.value) | m_load
        is_store = (kind == FlitKind.STORE.value) | m_store
        multicast = m_load | m_store
        # A posted (multicast) STORE gets no reply, so it takes no reply slot.
        credits = Signal(range(self.reply_depth + 1), init=self.reply_depth)
        take = self.i_req.valid & self.i_req.ready
        answered = Signal()
        m.d.comb += answered.eq(take & ~m_store)
        give = out.r_rdy & out.r_en
        m.d.comb += self.i_req.ready.eq(credits.any())
        m.d.sync += credits.eq(credits + give - answered)

        addr, size = store.addr, store.size
        # A multicast copy is written at its offset in every Dbuf it reaches.
        mine = (Bits(addr[offset_bits:]) == self.index) | multicast
        size_bits = Bits(size)
        s1, s2, s3 = size_bits == 1, size_bits == 2, size_bits == 3
        misaligned = (addr[0] & (s1 | s2 | s3)) | (addr[1] & (s2 | s3)) | (addr[2] & s3)
        err = Signal()
        m.d.comb += err.eq(~(is_load | is_store) | ~mine | misaligned | ~(s1 | s2 | s3)
                           | (store.bcast & ~s1 & is_load))
        # A posted STORE's error waits for the next MLOAD's reply.
        posted_err = Signal()
        with m.If(take & m_store & err):
            m.d.sync += posted_err.eq(1)
        with m.Elif(take & m_load):
            m.d.sync += posted_err.eq(0)

        # Store: the low 2**size bytes of data move to their byte lanes; one lane enable each.
        lanes = Signal(8)
        m.d.comb += lanes.eq(Mux(s3, C(0xFF, 8), Mux(s2, C(0x0F, 8), C(0x03, 8))))
        shift = addr[:3]
        wr_data = Signal(64)
        wr_en = Signal(8)
        m.d.comb += [
            wr_data.eq(_shift(store.data, shift, 8, left=True)),
            wr_en.eq(_shift(lanes, shift, 1, left=True)),
        ]
        word = addr[3:offset_bits]
        m.d.comb += [
            sram.addr.eq(word),
            sram.rd_en.eq(take & is_load & ~err),
            sram.wr_en.eq(Mux(take & is_store & ~err, wr_en, C(0, 8))),
            sram.wr_data.eq(wr_data),
        ]

        # Stage 2 (the SRAM read): what the reply needs besides the read word.
        pend = Signal()
        pend_err, pend_load, pend_bcast = Signal(), Signal(), Signal()
        pend_shift, pend_lanes = Signal(3), Signal(8)
        pend_x, pend_y = Signal(len(store.src_x)), Signal(len(store.src_y))
        pend_slot, pend_tag = Signal(len(store.slot)), Signal(len(store.tag))
        m.d.sync += [
            pend.eq(answered),
            pend_err.eq(err | (m_load & posted_err)), pend_load.eq(is_load),
            pend_bcast.eq(store.bcast),
            pend_shift.eq(shift), pend_lanes.eq(lanes),
            pend_x.eq(store.src_x), pend_y.eq(store.src_y),
            pend_slot.eq(store.slot), pend_tag.eq(store.tag),
        ]
        loaded = _shift(sram.rd_data, pend_shift, 8, left=False)
        mask = Cat(*(pend_lanes[i].replicate(8) for i in range(8)))
        value = loaded & mask
        half = value[:16]
        load_data = Mux(pend_bcast, Cat(half, half, half, half), value)

        reply = Signal(self.layout)
        body = body_view(reply, FlitKind.REPLY, p)
        m.d.comb += [
            reply.kind.eq(FlitKind.REPLY),
            reply.dst_x.eq(pend_x),
            reply.dst_y.eq(pend_y),
            body.slot.eq(pend_slot),
            body.tag.eq(pend_tag),
            body.err.eq(pend_err),
            body.data.eq(Mux(pend_load & ~pend_err, load_data, Const(0, 64))),
            out.w_data.eq(reply),
            out.w_en.eq(pend),
            self.o_reply.payload.eq(out.r_data),
            self.o_reply.valid.eq(out.r_rdy),
            out.r_en.eq(self.o_reply.ready),
        ]
        return m


def build_dbuf(rows=2, cols=2, index=0, dbuf_bytes=4096, reply_depth=4):
    """Return a :class:`Dbuf` for ``fdpu verilog --top dbuf``."""
    return Dbuf(ArrayParams(rows=rows, cols=cols, dbuf_bytes=dbuf_bytes), index,
                reply_depth=reply_depth)
