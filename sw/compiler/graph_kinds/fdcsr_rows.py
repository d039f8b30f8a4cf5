"""What the FD-CSR graphs (``switch``, ``gather``) share: the item's FD-CSR data and its decode.

Contract (``docs/dataflow.md``, "Item data" and "The gather graph")
-------------------------------------------------------------------
An item's data are its FD-CSR encoding (:func:`sw.compiler.fdcsr.encode`, 16 columns a row):
``colidx`` (2 bytes a row), ``rowoff`` *relocated* to ``item base + 2 x rowoff`` (4 bytes a
row, 8-aligned after ``colidx``), then the stored ``values``.  Per context an ``ITER`` over the
input block (a 16-column row at a time) feeds one inner ``ITER`` per 4 lane groups, which
names its 4 input loads; per weight row a ``BSCAN`` takes the row's ``colidx`` and relocated
``rowoff`` (through a ``MOV``) and emits, per column, the stored weight's value address
``- (off_v - 2)`` or 0 for a zero weight; how that token reaches the row's value loads
(``LDHBZ``: address 0 gives ``+0.0`` without a Dbuf access) is the kind's
(:meth:`FdcsrKind.row_addresses`).  Every column's FACC steps (``Cw`` a row).
"""

import numpy as np

from sw.compiler import fdcsr
from sw.compiler.fdcsr import ROW
from sw.compiler.graph_kinds.base import align, chunks
from sw.compiler.graph_kinds.sparse import SparseKind
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, loop_imm

__all__ = ["FdcsrKind"]


def _rows(spec):
    """Return the FD-CSR rows of one item (``kb`` weight rows of ``Cw / 16``)."""
    return spec.kb * (spec.Cw // ROW)


class FdcsrKind(SparseKind):
    """The common part of the FD-CSR graphs (module doc)."""
    column_unit = ROW
    dummy_reads_any = False       # zero weights skip the value loads' Dbuf accesses

    def item_bytes(self, spec, nnz):
        r = _rows(spec)
        return align(2 * r, 4) + align(4 * r, 8) + 2 * nnz

    def encode(self, spec, blk):
        enc = fdcsr.encode(blk)
        return enc, self.item_bytes(spec, enc.nnz)

    def item_data(self, spec, blk, enc, nbytes, base):
        r = _rows(spec)
        out = bytearray(nbytes)
        out[0:2 * r] = enc.colidx.astype("<u2").tobytes()
        o = align(2 * r, 4)
        rel = np.uint64(base) + 2 * enc.rowoff.astype(np.uint64)
        if r and int(rel.max()) >= 1 << 32:
            raise FdpuError(f"item data at {base:#x} reach past the 32-bit address space")
        out[o:o + 4 * r] = rel.astype("<u4").tobytes()
        o += align(4 * r, 8)
        out[o:] = enc.values.view("<u2").tobytes()
        return bytes(out)

    def row_addresses(self, g, spec, add, k, bs, lds):
        """Deliver row ``k``'s BSCAN tokens (``bs``) to its value loads ``lds``."""
        raise NotImplementedError

    def add_streams(self, g, spec, add, ld_b, ld_x, facc):
        kb, gb, Cw = spec.kb, spec.gb, spec.Cw
        r16 = Cw // ROW
        it_x = add("itX", Op.ITER, imm=loop_imm(r16, 8 * ROW))
        g.connect(ld_x, it_x, 0)
        # One inner ITER per 4 lane groups: each names its 4 input loads directly, where one
        # ITER would feed 8 loads through MOVs (INT issues per column; docs/dataflow.md).
        it_xi = [add("itXi", Op.ITER, imm=loop_imm(ROW, 8), lane=q)
                 for q in range(len(chunks(gb)))]
        g.fanout(it_x, [(v, 0) for v in it_xi])
        it_c = add("itC", Op.ITER, imm=loop_imm(r16, 2))
        it_r = add("itR", Op.ITER, imm=loop_imm(r16, 4))
        g.fanout(ld_b, [(it_c, 0), (it_r, 0)])
        off_r = align(2 * kb * r16, 4)
        off_v = off_r + align(4 * kb * r16, 8)
        ci, ro, w = [], [], []
        for k in range(kb):
            # The decode of one FD-CSR row: BSCAN takes the row's colidx and its relocated
            # rowoff, base = item base + 2 x rowoff (pass_memory stores it so), and emits, per
            # column, the stored weight's value address - (off_v - 2) (never 0) or 0 for a
            # zero weight.  The value loads are LDHBZ: address 0 gives +0.0 without a Dbuf
            # access.
            ci.append(add("ci", Op.LDH, imm=2 * k * r16, row=k))
            ro.append(add("ro", Op.LDW, imm=off_r + 4 * k * r16, row=k))
            bs = add("bs", Op.BSCAN, imm=ROW, row=k)
            g.connect(ci[k], bs, 0)
            # The row base goes through a MOV: straight into BSCAN.1 the rowoff load retires
            # on the PE's memory lane 1 with the input loads and, running ahead of BSCAN, its
            # waiting entries cost the FACCs' inputs (measured slower; docs/dataflow.md).
            rb = add("rb", Op.MOV, row=k)
            g.connect(ro[k], rb, 0)
            g.connect(rb, bs, 1)
            lds = [add("ld", Op.LDHBZ, imm=off_v - 2, row=k, lane=q)
                   for q in range(len(chunks(gb, spec.wfan)))]
            w.append(lds)
            self.row_addresses(g, spec, add, k, bs, lds)
        g.fanout(it_c, [(x, 0) for x in ci])
        g.fanout(it_r, [(x, 0) for x in ro])
        x = [add("x", Op.LDD, imm=j * 8 * Cw, lane=j) for j in range(gb)]
        for it, lanes in zip(it_xi, chunks(gb)):
            g.fanout(it, [(x[j], 0) for j in lanes])
        for k in range(kb):
            for ld, lanes in zip(w[k], chunks(gb, spec.wfan)):
                # With wfan 16 a value load feeds its FACCs through a MOV tree: feed-forward
                # (not in the SWITCH loop).  fan_pipe0 gives its MOVs the pipe0 hint (issue
                # beside the loads, leaving pipe 2 to the BSCAN -> SWITCH -> join loop);
                # measured slower on the RTL, so off by default (docs/mapping.md).
                g.fanout(ld, [(facc[k][j], 0) for j in lanes], pipe0=spec.fan_pipe0)
        for j in range(gb):
            g.fanout(x[j], [(facc[k][j], 1) for k in range(kb)])

    def golden_events(self, plan, graph, placement, w16):
        nz = np.zeros(plan.kblocks * plan.kb, dtype=np.int64)
        nz[:plan.K] = np.count_nonzero(w16.view(np.uint16) != 0, axis=1)
        nz = nz.reshape(plan.kblocks, plan.kb)
        per_engine = np.zeros((plan.engines, plan.kb), dtype=np.int64)
        items = np.arange(plan.items)
        engine = (items % plan.per_pass) % plan.engines
        np.add.at(per_engine, engine, nz[plan.item_blocks[0]])
        # A weight row's SWITCH takes the True branch, and its value loads (LDHBZ) access
        # memory, once per stored weight.
        switch_true, accesses = {}, {}
        for node in graph.nodes:
            if node.op is Op.SWITCH:
                e, k = node.meta["engine"], node.meta["row"]
                switch_true[placement.where[node.id]] = int(per_engine[e, k])
            elif node.op is Op.LDHBZ:
                e, k = node.meta["engine"], node.meta["row"]
                accesses[placement.where[node.id]] = int(per_engine[e, k])
        return switch_true, accesses, {}
