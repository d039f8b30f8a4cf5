"""The gather graph: FD-CSR without a branch, the default sparse graph.

Contract (``docs/dataflow.md``, "The gather graph")
---------------------------------------------------
The FD-CSR decode of :mod:`~sw.compiler.graph_kinds.fdcsr_rows`, its BSCAN tokens going
straight to the row's value loads (``LDHBZ`` turns address 0 into ``+0.0``): the same weights
in the same order as the ``switch`` graph, so the same bits, without the SWITCH loop.  Its
weight streams (each row's BSCAN tokens, value loads and FACCs in turn) are a term of the
performance model: ``Cw x (wstream + fan x kb + credit / operand_depth)``.
"""

import numpy as np

from sw.compiler.graph_kinds.fdcsr_rows import FdcsrKind

__all__ = ["Gather"]


class Gather(FdcsrKind):
    """The gather graph (module doc)."""
    name = "gather"
    title = "sparse: gather"

    def row_addresses(self, g, spec, add, k, bs, lds):
        # No branch: BSCAN's tokens are the value loads' addresses.
        g.fanout(bs, [(v, 0) for v in lds])

    def model_terms(self, spec, k, depth):
        return {"weight stream": np.float64(spec.Cw * (k.wstream + k.fan * spec.kb
                                                       + k.credit / depth))}
