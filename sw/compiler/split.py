"""Split reduction: a layer with few outputs reduces over column slices on more engines.

Contract (``docs/net.md``, "Split reduction", has the measurements)
-------------------------------------------------------------------
An FC layer's work items are ``kblocks x gblocks`` blocks of output rows and lane groups, each
reducing over all ``C`` inputs on one engine.  A layer with few outputs at a small batch has
fewer items than the array has PEs (the digits MLP's last layer: 10 outputs, 20 items on 64
PEs).  :func:`split_layer` runs such a ``K x C`` layer as two stages instead:

1. **partial sums**: a *split* plan (``FcPlan.split = S``, the layer's blocking) of ``S x Kp``
   rows (``Kp``: ``K`` rounded up to the row blocking ``kb``).  Row ``s Kp + k`` is the layer's
   row ``k`` on column slice ``s`` (columns ``s Cw .. (s + 1) Cw - 1``, ``Cw = ceil(C / S)``
   rounded up to the graph's column unit), zero elsewhere (:func:`partial_weights`); its
   items reduce over their slice only, so ``S`` times as many engines share the work.  No
   bias, no activation;
2. **sum**: a ``K x S Kp`` layer over the ones of :func:`sum_weights` (row ``k``: ``1.0`` at
   columns ``s Kp + k``), on the ``skip`` graph (``S`` steps per output), with the layer's
   bias and ReLU.  The partial sums stay on chip between the two when
   :mod:`sw.compiler.chain` can chain them.

The numbers follow the graphs: output ``(n, k)`` is ``relu(fma(1, P_{S-1}, ... fma(1, P_0,
-0.0)) + b)`` where ``P_s`` is slice ``s``'s FACC chain from ``-0.0``, each step rounded to
binary16 as the instructions round (a different order of roundings from the unsplit layer's
single chain, so the bits may differ from an unsplit run; both are within the float64 bound of
:func:`sw.models.reference.check`).  The golden model runs the two stages as it runs any
layer, so it mirrors the hardware bit for bit.

:func:`ways` chooses ``S`` for a plan (``1``: no split): as many slices as fill the PEs with the
layer's items, each slice holding at least one column unit.
"""

import dataclasses

import numpy as np

from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.fc_plan import FcPlan, align
from sw.compiler.graph_kinds import GRAPHS
from sw.compiler.planner import plan_fc
from sw.spec.errors import FdpuError

__all__ = ["Split", "ways", "partial_weights", "sum_weights", "split_layer", "SUM_GRAPH"]

#: The graph of the sum stage: it steps over the stored weights only, so each output takes
#: ``S`` steps (its ``S`` ones), not ``S x Kp``.
SUM_GRAPH = GRAPHS["skip"]


@dataclasses.dataclass(frozen=True)
class Split:
    """The two stages of a split layer: plans and binary16 weights (see the module doc)."""
    ways: int
    partial: FcPlan
    partial_weights: np.ndarray
    total: FcPlan
    total_weights: np.ndarray


def ways(plan):
    """Return the column slices ``plan``'s layer would split its reduction into (``1``: none).

    A layer splits when it runs in one pass and its items fill at most half of the PEs; then
    into ``S = PEs // items`` slices, fewer where ``C`` has not that many column units (16
    columns for the FD-CSR graphs, 32 for ``skip``, 1 dense).
    """
    if plan.split != 1 or plan.passes != 1 or 2 * plan.items > plan.params.num_pes:
        return 1
    s = min(plan.params.num_pes // plan.items, -(-plan.C // plan.column_unit))
    if s < 2:
        return 1
    cw = align(-(-plan.C // s), plan.column_unit)
    return -(-plan.C // cw)


def partial_weights(weights, split, kp, cw):
    """Return the ``split x kp`` by ``C`` binary16 weights of the partial-sum stage: row
    ``s kp + k`` is row ``k`` of ``weights`` (``K x C``) on columns ``s cw .. (s + 1) cw - 1``,
    zero elsewhere and on the padding rows ``k >= K``."""
    w = np.asarray(weights, dtype=np.float16)
    k, c = w.shape
    out = np.zeros((split * kp, c), dtype=np.float16)
    for s in range(split):
        lo, hi = s * cw, min(c, (s + 1) * cw)
        out[s * kp:s * kp + k, lo:hi] = w[:, lo:hi]
    return out


def sum_weights(k, split, kp):
    """Return the ``k x split kp`` binary16 ones that add a row's ``split`` partial sums."""
    out = np.zeros((k, split * kp), dtype=np.float16)
    for s in range(split):
        out[np.arange(k), s * kp + np.arange(k)] = 1.0
    return out


def split_layer(plan, weights, split=None):
    """Return the :class:`Split` of ``plan``'s layer (``weights``: its ``K x C``) into
    ``split`` slices (default :func:`ways`); ``None`` when that is 1.

    The partial-sum stage keeps ``plan``'s mode, graph and blocking (``kb``, ``gb``, ``wfan``);
    the sum stage is planned for the ``skip`` graph with ``plan``'s bias and ReLU.  Raises
    :class:`FdpuError` for a split that does not fit the layer or the Dbufs.
    """
    split = ways(plan) if split is None else split
    if split == 1:
        return None
    kp = plan.kblocks * plan.kb
    part = plan_fc(FcLayer(split * kp, plan.C, plan.N), plan.params, PlanOptions(
        plan.mode, plan.sparse_graph, plan.kb, plan.gb,
        wfan=plan.wfan if plan.graph.sparse else None, feedback=plan.feedback, split=split))
    if part.passes != 1:
        raise FdpuError(f"split {split}: the partial sums of the {plan.K} x {plan.C} layer "
                        f"take {part.passes} passes; a split layer runs in one")
    bias = None if plan.bias is None else \
        np.array(plan.bias, dtype=np.uint16).view(np.float16)
    total = plan_fc(FcLayer(plan.K, split * kp, plan.N, bias=bias, relu=plan.relu),
                    plan.params, PlanOptions(SUM_GRAPH.mode, SUM_GRAPH.name))
    return Split(split, part, partial_weights(weights, split, kp, part.Cw), total,
                 sum_weights(plan.K, split, kp))
