"""An array of PEs on the request/reply :class:`hw.noc.mesh.Noc`, edge ports left open.

This is the PE issue's test vehicle for multi-PE images (the system issue builds the real top
with Dbufs, Cbufs and the MicC).  Every PE ``(x, y)`` is a :class:`hw.pe.pe.Pe`; its ``o_req`` and
``o_rep`` are merged (:class:`Merge2`) into the Noc's LOCAL input, which steers LOAD/STORE to
the request mesh and the rest to the reply mesh; the reply mesh's LOCAL output feeds
``i_flit``.  Per edge port ``k`` (Dbuf numbering of :meth:`sw.spec.arch.ArrayParams.dbuf_coord`)
the array exposes ``o_req[k]`` (requests for Dbuf ``k``), ``i_reply[k]`` (flits injected into
the reply network there: Dbuf replies, and the MicC's configuration and context IDs at its
port) and ``o_reply[k]`` (reply-network flits addressed to the port: CTX_END to the MicC).
``o_error[n]`` and ``o_fire[n]`` are the PEs' status ports, ``n = y * cols + x``.  A request
ejected at a PE (``Noc.o_stray``, which no well-formed program sends) is sunk and counted in
``o_stray``.  Every port carries the one flit layout (:func:`hw.noc.flit.flit_layout`) and
is wired with ``wiring.connect``.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.shared import Shared
from hw.lib.spec import check_params
from hw.noc.mesh import Noc
from hw.noc.flit import flit_layout
from hw.pe.layouts import error_layout
from hw.pe.pe import Pe
from sw.spec.arch import ArrayParams

__all__ = ["Merge2", "PeArray", "make_pe_array"]


class Merge2(wiring.Component):
    """Merge two flit streams into one, alternating priority; a choice holds until taken."""

    def __init__(self, width):
        super().__init__({"i_a": In(stream.Signature(width)), "i_b": In(stream.Signature(width)),
                          "o_flit": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        held = Signal()            # o_flit offered and not taken: keep the choice
        sel = Signal()             # 0: a, 1: b
        prefer_b = Signal()
        choose = Signal()
        m.d.comb += choose.eq(Mux(held, sel,
                                  Mux(self.i_a.valid & self.i_b.valid, prefer_b, self.i_b.valid)))
        m.d.comb += [
            self.o_flit.valid.eq(Mux(choose, self.i_b.valid, self.i_a.valid)),
            self.o_flit.payload.eq(Mux(choose, self.i_b.payload, self.i_a.payload)),
            self.i_a.ready.eq(~choose & self.o_flit.ready),
            self.i_b.ready.eq(choose & self.o_flit.ready),
        ]
        m.d.sync += [held.eq(self.o_flit.valid & ~self.o_flit.ready), sel.eq(choose)]
        with m.If(self.o_flit.valid & self.o_flit.ready):
            m.d.sync += prefer_b.eq(~choose)
        return m


class PeArray(wiring.Component):
    """``rows x cols`` PEs on the Noc (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
    micc : tuple of int
        MicC coordinate (an edge port), the CTX_END destination of every PE.
    depth : int
        Router input FIFO depth.
    """

    def __init__(self, params, micc=(-1, 0), depth=4):
        check_params(params)
        self.params, self.micc, self.depth = params, micc, depth
        flit = stream.Signature(flit_layout(params))
        n, d = params.num_pes, params.num_dbufs
        super().__init__({
            "o_req": Out(flit).array(d),
            "i_reply": In(flit).array(d),
            "o_reply": Out(flit).array(d),
            "o_error": Out(error_layout(params)).array(n),
            "o_fire": Out(14).array(n),
            "o_stray": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.noc = noc = Noc(p, depth=self.depth)
        width = flit_layout(p).size
        for (x, y) in p.pe_coords():
            n = y * p.cols + x
            # The coordinate is an input, so every PE is one shared Verilog module.
            pe = Shared(Pe(p, micc=self.micc), key=("pe_array_pe", p, self.micc), name="array_pe")
            merge = Merge2(width)
            m.submodules[f"pe_{x}_{y}"] = pe
            m.d.comb += [pe.i_coord.x.eq(x), pe.i_coord.y.eq(y)]
            wiring.connect(m, pe.o_req, merge.i_a)
            wiring.connect(m, pe.o_rep, merge.i_b)
            wiring.connect(m, merge.o_flit, noc.i_local[n])
            wiring.connect(m, noc.o_local[n], pe.i_flit)
            m.submodules[f"merge_{x}_{y}"] = merge
            m.d.comb += [
                noc.o_stray[n].ready.eq(1),
                self.o_error[n].eq(pe.o_error),
                self.o_fire[n].eq(pe.o_fire),
            ]
            with m.If(noc.o_stray[n].valid):
                m.d.sync += self.o_stray.eq(self.o_stray + 1)
        for k in range(p.num_dbufs):
            wiring.connect(m, noc.o_req[k], wiring.flipped(self.o_req[k]))
            wiring.connect(m, wiring.flipped(self.i_reply[k]), noc.i_reply[k])
            wiring.connect(m, noc.o_reply[k], wiring.flipped(self.o_reply[k]))
            m.d.comb += noc.i_req[k].valid.eq(0)
        return m


_PE = ArrayParams()


def make_pe_array(rows=2, cols=2, slots=_PE.slots, operand_depth=_PE.operand_depth,
                  regs=_PE.regs, dbuf_bytes=1024, micc_x=-1, micc_y=0, depth=4,
                  int_issue=_PE.int_issue):
    """Return a :class:`PeArray` built from plain integers (for the benches): by default the
    default PE (``ArrayParams()``) in a 2 x 2 array with 1 KiB Dbufs."""
    params = ArrayParams(rows=rows, cols=cols, slots=slots, operand_depth=operand_depth,
                         regs=regs, dbuf_bytes=dbuf_bytes, int_issue=int_issue)
    return PeArray(params, (micc_x, micc_y), depth)
