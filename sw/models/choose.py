"""The default plan of a layer: double-buffered or not, whichever the performance model
predicts faster end to end.

Contract
--------
:func:`best_plan` takes an :class:`~sw.compiler.fc_layer.FcLayer` with its weights, the
:class:`~sw.spec.arch.ArrayParams`, the :class:`~sw.compiler.fc_layer.PlanOptions` and the
:class:`~sw.models.perf.System` it will run in.  An explicit ``double_buffer`` (``True`` or
``False``) is honoured.  Otherwise, when the double-buffered plan takes more than one pass
(double buffering halves the Dbuf space a pass has, so it can add passes and re-read the
inputs more often: a loss for some layers, alexnet-fc6 sparse among them, docs/system.md; a
gain where one pass's DMA-in would wait alone, vgg16-fc7 dense at batch 64 without early
start) both plans are predicted and the one with fewer end-to-end cycles is returned.  The
decision is the planner's one rule (:func:`sw.compiler.planner.plan_fc`), with the
performance model's cycles as its cost.  Without ``system.overlap`` nothing overlaps, so no
plan is double-buffered.  The return is ``(plan, {double_buffer: predicted cycles})`` (empty
when nothing was compared).

:func:`best_run` makes the same choice for early start (``System.early_start``): given
``early_start=None`` (no ``--[no-]early-start``) and an overlapped system, it takes each
setting's best plan and returns the faster ``(plan, system)``.  Early start lets a pass's
contexts begin before its whole DMA-in is in, but the rest of the DMA-in then shares the
Dbufs with them (each word costs the contexts ``steal`` cycles at a busy Dbuf, docs/perf.md):
a graph bound by its Dbuf requests, the skip graph on convolutions for one, can lose more than
it gains.  An explicit ``True`` or ``False`` is honoured.
"""

from dataclasses import replace

from sw.compiler import planner
from sw.compiler.fc_layer import PlanOptions
from sw.models import perf
from sw.spec.errors import FdpuError

__all__ = ["best_plan", "best_run"]


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
    cycles = {}

    def cost(plan):
        cycles[plan.double_buffer] = perf.predict(plan, layer.weights, system).cycles
        return cycles[plan.double_buffer]
    return planner.plan_fc(layer, params, options, cost=cost), cycles


def best_run(layer, params, options=None, system=perf.System(), early_start=None):
    """Return ``(plan, system)``: :func:`best_plan` in ``system`` with ``early_start`` as given,
    or, with ``early_start=None`` and ``system.overlap``, the plan and early-start setting the
    model predicts fastest (early start on when they tie).  The plan is made once: the
    double-buffering choice compares each plan at its better setting."""
    if early_start is not None or not system.overlap:
        chosen = system if early_start is None else replace(system, early_start=early_start)
        return best_plan(layer, params, options, chosen)[0], chosen
    if layer.weights is None:
        raise FdpuError("choosing between plans by their predicted cycles needs the layer's "
                        "weights (FcLayer.of)")
    settings = {early: replace(system, early_start=early) for early in (True, False)}
    cycles = {}

    def cost(plan):
        for early, chosen in settings.items():
            cycles[plan.double_buffer, early] = perf.predict(plan, layer.weights,
                                                             chosen).cycles
        return min(cycles[plan.double_buffer, early] for early in settings)
    plan = planner.plan_fc(layer, params, options or PlanOptions(), cost=cost)
    if (plan.double_buffer, True) not in cycles:         # one plan: nothing was compared
        cost(plan)
    early = cycles[plan.double_buffer, True] <= cycles[plan.double_buffer, False]
    return plan, settings[early]
