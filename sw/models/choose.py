"""The default plan of a layer: double-buffered or not, whichever the performance model
predicts faster end to end.

Contract
--------
:func:`best_plan` takes an :class:`~sw.compiler.fc_layer.FcLayer` with its weights, the
:class:`~sw.spec.arch.ArrayParams`, the :class:`~sw.compiler.fc_layer.PlanOptions` and the
:class:`~sw.models.perf.System` it will run in.  An explicit ``double_buffer`` (``True`` or
``False``) is honoured.  Otherwise, when the layer takes more than one pass (double buffering
halves the Dbuf space a pass has, so it can add passes and re-read the inputs more often: a
loss for some layers, alexnet-fc6 sparse among them, docs/system.md) both plans are predicted
and the one with fewer end-to-end cycles is returned; a layer of one pass is not double-
buffered.  The decision is the planner's one rule (:func:`sw.compiler.planner.plan_fc`), with
the performance model's cycles as its cost.  Without ``system.overlap`` nothing overlaps, so
no plan is double-buffered.

With ``system.early_start`` (each context starts when its own data are in) and no ``kb``
given, the row blocks are chosen by the same cost too: the planner's blocking is the cheapest
in compute, but a pass of few contexts waits for most of its DMA-in (a pass of one context,
for all of it), so the plans with ``kb`` halved down to an eighth (the same graph and ``gb``)
are predicted as well and the one with the fewest end-to-end cycles is returned
(alexnet-fc8 dense at batch 4 on the 8 x 8: ``kb`` 16, one context, against ``kb`` 2, eight;
docs/system.md).  The return is ``(plan, {double_buffer: predicted cycles})`` of the plan
returned (empty when nothing was compared).
"""

from dataclasses import replace

from sw.compiler import planner
from sw.compiler.fc_layer import PlanOptions
from sw.models import perf
from sw.spec.errors import FdpuError

__all__ = ["best_plan"]


def best_plan(layer, params, options=None, system=perf.System()):
    """Return ``(plan, predicted cycles per choice)`` (see the module doc): the planner
    decides double buffering (:func:`sw.compiler.planner.plan_fc`) by the cost this gives it,
    the performance model's end-to-end cycles in ``system``."""
    options = options or PlanOptions()
    if layer.weights is None:
        raise FdpuError("choosing between plans by their predicted cycles needs the layer's "
                        "weights (FcLayer.of)")
    if options.double_buffer is None and not system.overlap:
        options = replace(options, double_buffer=False)
    def planned(opts):
        cycles = {}

        def cost(plan):
            cycles[plan.double_buffer] = perf.predict(plan, layer.weights, system).cycles
            return cycles[plan.double_buffer]
        return planner.plan_fc(layer, params, opts, cost=cost), cycles

    plan, cycles = planned(options)
    if not (system.early_start and system.overlap) or options.kb is not None \
            or options.split != 1:
        return plan, cycles
    best = (perf.predict(plan, layer.weights, system).cycles, plan, cycles)
    for shift in (1, 2, 3):
        kb = plan.kb >> shift
        if kb < 1:
            break
        try:
            cand = planned(replace(options, kb=kb, gb=plan.gb, sparse_graph=plan.sparse_graph))
        except FdpuError:
            continue                            # this blocking does not fit the slots
        c = perf.predict(cand[0], layer.weights, system).cycles
        if c < best[0]:
            best = (c, *cand)
    return best[1], best[2]
