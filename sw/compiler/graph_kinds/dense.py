"""The dense graph: every weight of the item's block, column by column.

Contract (``docs/dataflow.md``, "The dense engine")
---------------------------------------------------
An item's data are its ``kb x Cw`` binary16 weights column-major (``kb`` per column, the
defaults of :class:`~sw.compiler.graph_kinds.base.GraphKind`).  Per context an ``ITER`` over
the input block (8 bytes a column) feeds ``gb`` input loads, an ``ITER`` over the weight block
(``2 kb`` bytes a column) feeds ``kb`` weight loads (a streamed engine's context: its
``columns``, from the context's descriptor); load ``w[k]`` feeds the ``gb`` FACCs of row
``k`` (operand 0), load ``x[j]`` the ``kb`` FACCs of lane group ``j`` (operand 1).
"""

from sw.compiler.graph_kinds.base import GraphKind
from sw.spec.isa import Op, loop_imm

__all__ = ["Dense"]


class Dense(GraphKind):
    """The dense graph (module doc)."""
    name = "dense"
    title = "dense"
    mode = "dense"
    streams = True

    def add_streams(self, g, spec, add, ld_b, ld_x, facc):
        kb, gb, Cw = spec.kb, spec.gb, spec.Cw
        it_x = add("itX", Op.ITER, imm=loop_imm(spec.columns, 8))
        g.connect(ld_x, it_x, 0)
        it_w = add("itW", Op.ITER, imm=loop_imm(spec.columns, 2 * kb))
        g.connect(ld_b, it_w, 0)
        w = [add("w", Op.LDHB, imm=2 * k, row=k) for k in range(kb)]
        g.fanout(it_w, [(x, 0) for x in w])
        x = [add("x", Op.LDD, imm=j * 8 * Cw, lane=j) for j in range(gb)]
        g.fanout(it_x, [(v, 0) for v in x])
        for k in range(kb):
            g.fanout(w[k], [(facc[k][j], 0) for j in range(gb)])
        for j in range(gb):
            g.fanout(x[j], [(facc[k][j], 1) for k in range(kb)])
