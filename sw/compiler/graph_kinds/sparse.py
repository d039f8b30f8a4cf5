"""What every sparse graph shares: compressed weights, value loads that fan out, held loads.

Contract (``docs/dataflow.md`` and ``docs/perf.md``)
----------------------------------------------------
A sparse graph (FD-CSR's ``switch`` and ``gather``, the bitmask ``skip``) stores the non-zero
weights only: at the least 2 bytes a stored weight and a 1-bit mask a weight
(:meth:`SparseKind.min_weight_bytes`), and only the stored weights' FMAs are useful work.
Its value loads feed ``wfan`` lane groups (:data:`~sw.compiler.graph_kinds.base.WFANS`; 16
only above 4 lane groups).  Its loads reach the Dbuf over the mesh, so the blocking chooser
counts the busiest link, and a full operand queue holds a load back: the performance model
multiplies the loads' share by ``1 + shallow / operand_depth`` (the SWITCH graph by its own
constant, the skip graph by a factor of the loads its engines keep in flight,
:meth:`~sw.compiler.graph_kinds.skip.Skip.held`).
"""

from sw.compiler.graph_kinds.base import WFANS, GraphKind

__all__ = ["SparseKind"]


class SparseKind(GraphKind):
    """The common part of the sparse graphs (module doc)."""
    mode = "sparse"

    def fanouts(self, gb):
        return WFANS if gb > WFANS[0] else WFANS[:1]

    def chooser_terms(self, pipes, scale, Cw, per_dbuf, mem, links):
        return {"mesh link": mem * links() * scale}

    def held(self, k, spec, depth, sharers):
        return 1 + k.shallow / depth

    def min_weight_bytes(self, dense_weights, nnz):
        return 2 * nnz + -(-dense_weights // 8)

    def useful_weights(self, dense_weights, nnz):
        return nnz
