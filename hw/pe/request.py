"""The LOAD/STORE request of a memory instruction (pipe 0's S1).

Contract
--------
Combinational (no state, no handshake): the PE pushes ``o_flit`` into its request FIFO when
the memory instruction in S1 fires and ``o_in_range`` holds.

* ``i_insn``: the load or store instruction; ``i_a``: operand 0 (the address token; the
  address is its low 32 bits plus ``imm``); ``i_b``: operand 1 (a store's data); ``i_coord``:
  this PE (not biased), the reply's destination; ``i_entry``: the reorder pool entry the
  access takes (its low ``TAG_BITS`` bits go in ``tag``, the others in ``slot``; the Dbuf
  echoes both).
* ``o_flit``: the LOAD or STORE flit to the Dbuf that holds the address
  (:meth:`sw.spec.arch.ArrayParams.dbuf_coord`): ``addr``, ``size`` (log2 of the bytes less
  one), ``bcast`` (LDHB, LDHBZ: broadcast the half to four lanes), ``data`` (stores; 0 for
  loads).
* ``o_in_range``: the address names a Dbuf (else the PE sends nothing and raises BAD_ADDRESS).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, is_one_of
from hw.lib.spec import check_params
from hw.noc.flit import FlitKind, body_view, flit_layout
from hw.pe.layouts import coord_layout, insn_struct
from sw.spec.arch import bits_for
from sw.spec.isa import Op
from sw.spec.packet import TAG_BITS, Kind, bias

__all__ = ["MemRequest"]

_LOADS = tuple(op for op in Op if op.is_load)
_STORES = tuple(op for op in Op if op.is_store)
_SIZE = {2: 1, 4: 2, 8: 3}


def _biased(v, width):
    """Return ``v + 1`` in ``width`` bits (a coordinate as flits carry it:
    ``sw.spec.packet.bias``)."""
    return (v + 1)[:width]


class MemRequest(wiring.Component):
    """The request flit of a load or store (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        The address map (Dbufs and their coordinates) and the flit layout.
    entries : int
        Reorder pool entries (a power of two): ``i_entry`` has ``log2(entries)`` bits.
    """

    def __init__(self, params, entries):
        check_params(params)
        self._params = params
        super().__init__({
            "i_insn": In(insn_struct(params)),
            "i_a": In(params.TOKEN_BITS),
            "i_b": In(params.TOKEN_BITS),
            "i_coord": In(coord_layout(params)),
            "i_entry": In(entries.bit_length() - 1),
            "o_flit": Out(flit_layout(params)),
            "o_in_range": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        insn, coord, entry = self.i_insn, self.i_coord, self.i_entry
        is_store = is_one_of(insn.op, _STORES)
        addr = Signal(32, name="ls_addr")
        m.d.comb += addr.eq((self.i_a[:32] + insn.imm)[:32])
        req = self.o_flit
        nb = bits_for(p.num_dbufs)
        dbuf = Signal(nb, name="ls_dbuf")
        m.d.comb += dbuf.eq(addr[p.dbuf_addr_bits:][:nb])
        dxy = Signal(p.x_bits + p.y_bits, name="ls_dbuf_xy")
        dbuf_bad = Signal(name="ls_dbuf_bad")
        m.d.comb += self.o_in_range.eq(~dbuf_bad & ~addr[p.dbuf_addr_bits + nb:].any())
        with m.Switch(dbuf):
            for i in range(p.num_dbufs):
                cx, cy = p.dbuf_coord(i)
                with m.Case(i):
                    m.d.comb += dxy.eq(Cat(Const(bias(cx), p.x_bits),
                                           Const(bias(cy), p.y_bits)))
            if p.num_dbufs < 1 << nb:
                with m.Default():
                    m.d.comb += [dxy.eq(0), dbuf_bad.eq(1)]
        size = Signal(2, name="ls_size")
        with m.Switch(insn.op):
            for op in _LOADS + _STORES:
                with m.Case(int(op)):
                    m.d.comb += size.eq(_SIZE[op.access_bytes])
            with m.Default():
                m.d.comb += size.eq(0)
        body = body_view(req, Kind.STORE, p)        # (a LOAD's fields are a STORE's first)
        m.d.comb += [
            req.kind.eq(Mux(is_store, FlitKind.STORE, FlitKind.LOAD)),
            req.dst_x.eq(dxy[:p.x_bits]),
            req.dst_y.eq(dxy[p.x_bits:]),
            body.addr.eq(addr),
            body.size.eq(size),
            body.bcast.eq(equals(insn.op, int(Op.LDHB)) | equals(insn.op, int(Op.LDHBZ))),
            body.src_x.eq(_biased(coord.x, p.x_bits)),
            body.src_y.eq(_biased(coord.y, p.y_bits)),
            body.slot.eq(entry[TAG_BITS:]),
            body.tag.eq(entry[:TAG_BITS]),
            body.data.eq(Mux(is_store, self.i_b, Const(0, 64))),
        ]
        return m
