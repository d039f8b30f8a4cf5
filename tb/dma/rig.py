"""The DMA's test world: :class:`hw.ctrl.dma.Dma` with the external memory model, a request and a
reply mesh, every Dbuf and the Cbufs, and no PEs or MicC.

The DMA sits where the top puts it (the west edge port of row 0); ``i_req_stall`` (0..255)
withholds its requests from the mesh in random cycles (an LFSR, no Python per cycle), on top
of the memory model's own latency, bandwidth and stalls.  Backdoor paths: ``extmem.sram``,
``dbuf<k>.sram``, ``cbuf.bank<i>`` (each ``.bank.storage``).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.ctrl.cbuf import Cbuf
from hw.ctrl.dma import Dma, DmaState
from hw.noc.dbuf import Dbuf
from hw.noc.mesh import Mesh
from sw.spec.arch import ArrayParams
from sw.spec.status import DmaError
from tb.host.extmem import ExtMem

__all__ = ["DmaRig", "make_dma_rig"]


class DmaRig(wiring.Component):
    """DMA + external memory + meshes + Dbufs + Cbufs (see the module doc)."""

    def __init__(self, params, ext_bytes=1 << 14):
        self.params, self.ext_bytes = params, ext_bytes
        self.port = params.dbuf_at(-1, 0)
        super().__init__({
            "i_start": In(1), "i_list": In(32), "i_count": In(16),
            "o_busy": Out(1), "o_done": Out(1), "o_halt": Out(1),
            "o_error": Out(len(DmaError)), "o_desc": Out(16), "o_state": Out(DmaState),
            "o_rd_bytes": Out(40), "o_wr_bytes": Out(40), "o_cycles": Out(32),
            "o_fences": Out(16),
            "i_mem_latency": In(16), "i_mem_bw": In(8), "i_mem_stall": In(8),
            "i_req_stall": In(8),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.dma = dma = Dma(p, coord=p.dbuf_coord(self.port))
        m.submodules.extmem = mem = ExtMem(self.ext_bytes)
        m.submodules.req = req = Mesh(p)
        m.submodules.rep = rep = Mesh(p)
        m.submodules.cbuf = cbuf = Cbuf(p, behavioural=True)
        wiring.connect(m, dma.o_ext_rd, mem.i_rd)
        wiring.connect(m, mem.o_rdata, dma.i_ext_rdata)
        wiring.connect(m, dma.o_ext_wr, mem.i_wr)
        m.d.comb += [mem.i_latency.eq(self.i_mem_latency), mem.i_bw.eq(self.i_mem_bw),
                     mem.i_stall.eq(self.i_mem_stall),
                     cbuf.wr_en.eq(dma.cbuf_wr_en), cbuf.wr_addr.eq(dma.cbuf_wr_addr),
                     cbuf.wr_data.eq(dma.cbuf_wr_data), cbuf.rd_en.eq(0)]
        for name in ("i_start", "i_list", "i_count"):
            m.d.comb += getattr(dma, name).eq(getattr(self, name))
        for name in ("o_busy", "o_done", "o_halt", "o_error", "o_desc", "o_state",
                     "o_rd_bytes", "o_wr_bytes", "o_cycles", "o_fences"):
            m.d.comb += getattr(self, name).eq(getattr(dma, name))
        lfsr = Signal(16, init=0x1D2B)
        m.d.sync += lfsr.eq(Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15]))
        gate = Signal()
        m.d.comb += gate.eq(~(lfsr[8:] < self.i_req_stall))
        for n in range(p.num_pes):
            m.d.comb += [req.i_local[n].valid.eq(0), rep.i_local[n].valid.eq(0),
                         req.o_local[n].ready.eq(1), rep.o_local[n].ready.eq(1)]
        for k in range(p.num_dbufs):
            dbuf = Dbuf(p, k, inline_bits=0)
            m.submodules[f"dbuf{k}"] = dbuf
            wiring.connect(m, req.o_edge[k], dbuf.i_req)
            wiring.connect(m, dbuf.o_reply, rep.i_edge[k])
            if k == self.port:
                m.d.comb += [req.i_edge[k].payload.eq(dma.o_req.payload),
                             req.i_edge[k].valid.eq(dma.o_req.valid & gate),
                             dma.o_req.ready.eq(req.i_edge[k].ready & gate)]
                wiring.connect(m, rep.o_edge[k], dma.i_rep)
            else:
                m.d.comb += [req.i_edge[k].valid.eq(0), rep.o_edge[k].ready.eq(1)]
        return m


def make_dma_rig(rows=1, cols=2, dbuf_bytes=1024, cbufs=2, cbuf_bytes=512, ext_bytes=1 << 14):
    """Return a :class:`DmaRig` built from plain integers."""
    return DmaRig(ArrayParams(rows=rows, cols=cols, dbuf_bytes=dbuf_bytes, cbufs=cbufs,
                              cbuf_bytes=cbuf_bytes, slots=64, operand_depth=4,
                              int_issue=1), ext_bytes)
