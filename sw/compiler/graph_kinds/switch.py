"""The paper's SWITCH graph: FD-CSR whose zero weights branch to an immediate +0.0 address.

Contract (``docs/dataflow.md``, "The sparse engine", and ``docs/mapping.md``)
----------------------------------------------------------------------------
The FD-CSR decode of :mod:`~sw.compiler.graph_kinds.fdcsr_rows`; per weight row a ``SWITCH``
whose data and condition are the BSCAN token chooses the *address* of the weight: a stored
weight's (taken branch, straight to the join) or, for a zero weight, ``IMM 0``.  The join
(``MOV``) feeds the row's value loads and, with ``feedback`` (the default), the SWITCH's
operand 2 (one initial token): the edge that keeps the columns in order (PAPER.md section 4);
``feedback=False`` drops it (the order-hazard demonstration).  The loop bounds the engine: the
blocking chooser counts :data:`~sw.compiler.blocking.SPARSE_LOOP_CYCLES` per column and the
INT pipes at their measured occupancy, the performance model ``Cw x loop`` per context.
"""

import numpy as np

from sw.compiler.graph_kinds.fdcsr_rows import FdcsrKind
from sw.spec.isa import Op

__all__ = ["Switch", "SPARSE_LOOP_CYCLES", "SPARSE_INT_UTIL", "SPARSE_P0_UTIL"]

#: Cycles one weight row's SWITCH loop takes per column on the RTL PE (SWITCH -> join ->
#: SWITCH, plus IMM for a zero weight).  The loop's RTL latency (medians: 11 cycles for a
#: stored weight, 17 for a zero one) gives 15.5 at 25 % density, plus ~1.5 cycles of
#: round-robin wait per firing (2.75 firings) with pipe 2 about half busy.  Measured on one PE
#: (3 x 8 wfan 16): SWITCH trips of 23 (stored) and 28 (zero) cycles on average while the
#: engine ran at 30 cycles per column, bound by pipe 2, not by the loop.  Used only to choose
#: the blocking.
SPARSE_LOOP_CYCLES = 20
#: Pipe-2 (INT/CTRL) occupancy the SWITCH graph's engine reaches on the RTL PE (0.61 on one
#: PE and the 8 x 8, 3 x 8 wfan 16; 0.68 on alexnet-fc8 batch 64, 3 x 8 wfan 16: 27.1 cycles
#: per column).  0.61 would rank the 8 x 8's wfan 4 engine first, which measures slower (73.6
#: against 78.6 %).  Used only to choose the blocking.
SPARSE_INT_UTIL = 0.68
#: Pipe-0 (loads, stores, ITER tokens) occupancy the SWITCH graph's engine reaches on the RTL
#: PE where two engines share each Dbuf (the 8 x 8): 0.51 on alexnet-fc8 batch 64 with its
#: 4 x 8 wfan 4 engine (19.2 issues in 38.0 cycles per column, the bound: its pipe 2 is at
#: 0.43) and 0.52 with 3 x 8 wfan 16.  With a Dbuf per engine (one PE, 3 x 8 wfan 4) it
#: reached 0.64 and did not bind, so the term applies only to shared Dbufs (docs/mapping.md).
#: Used only to choose the blocking.
SPARSE_P0_UTIL = 0.5


class Switch(FdcsrKind):
    """The paper's SWITCH graph (module doc)."""
    name = "switch"
    title = "sparse: SWITCH (paper)"
    has_feedback = True

    def row_addresses(self, g, spec, add, k, bs, lds):
        sw = add("sw", Op.SWITCH, 3 if spec.feedback else 2, row=k)
        # The same token is the data and the condition.
        g.fanout(bs, [(sw, 0), (sw, 1)])
        # The SWITCH chooses the *address* of the weight: a stored weight's address (taken
        # branch, straight to the join) or, for a zero weight, IMM 0, which the LDHBZ value
        # loads turn into +0.0 without a Dbuf access.  The join (MOV) feeds the value loads,
        # whose replies the PE forwards in issue order, and the feedback edge: the SWITCH ->
        # join loop is two or three same-PE firings, without the Dbuf round trip of the
        # paper's SWITCH -> LD | FIMM -> join (docs/dataflow.md).
        fz = add("fz", Op.IMM, imm=0, row=k)
        jn = add("jn", Op.MOV, row=k)
        g.connect(sw, jn, 0, branch=True)
        g.connect(sw, fz, 0, branch=False)
        g.connect(fz, jn, 0)
        # One value load per wfan lane groups (wfan 4: naming its FACCs directly, no MOV tree
        # on the INT pipe; the loads issue on the memory pipe).
        if spec.feedback:
            g.connect(jn, sw, 2, init=1)
        g.fanout(jn, [(v, 0) for v in lds])

    def chooser_terms(self, pipes, scale, Cw, per_dbuf, mem, links):
        terms = {"int util": pipes[0] * scale / SPARSE_INT_UTIL}
        if len(pipes) == 2 and per_dbuf > 1:
            terms["pipe 0 util"] = pipes[1] * scale / SPARSE_P0_UTIL
        terms["switch loop"] = Cw * SPARSE_LOOP_CYCLES
        return {**terms, **super().chooser_terms(pipes, scale, Cw, per_dbuf, mem, links)}

    def held(self, k, spec, depth, sharers):
        # Its own constant: the loads issue at the rate of the feedback loops, so a full
        # operand queue holds them back less than the gather graph's (docs/perf.md).
        return 1 + k.switch_held / depth

    def model_terms(self, spec, k, depth):
        return {"switch loop": np.float64(spec.Cw * k.loop)}
