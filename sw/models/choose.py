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

:func:`best_run` also chooses whether a layer *streams* (``PlanOptions.chunks``, a work item
over several contexts that each start when their share of the data is in, docs/dataflow.md;
the dense and skip graphs stream), when no count is given: only where streaming can gain and
an overlapped system.  A dense plan is tried streamed where its predicted DMA-in is longer
than its contexts (the contexts of one pass wait for it): the plan whose contexts step over
:data:`STREAM_MIN_COLUMNS` columns each (the most contexts an item :func:`stream_counts`
allows) is predicted with early start, and it is taken if it is faster.  Not the count the
model predicts fastest: on vgg16-fc7 dense at batch 4 it predicts 8 and 16 contexts an item
alike, the RTL measured 16 at 1,203,856 cycles and 8 at 1,648,344 (docs/system.md).  A
compute-bound layer keeps one context per item: streaming adds stores and per-context costs
and runs the DMA beside the contexts, which slows them.

A sparse plan whose contexts wait :data:`WAIT_SHARE` of its predicted time or more for their
data is tried with *half its row block* too (twice the contexts a pass, each starting when its
smaller share of the data is in), when no ``kb`` is given, and, on the skip graph, streamed as
above; the fastest predicted of the plan and these is taken.  One halving, not the model's
best row block, because the model is optimistic where more contexts run beside the DMA-in.
On the 8 x 8 RTL, batch 4, the skip graph (docs/system.md): alexnet-fc8 140,595 cycles at
``kb`` 4 against 155,052 at 8 and 155,957 at 2 (the model: 140,855, 161,973, 130,713);
vgg16-fc7 140,455 at 4 against 149,781 at 8.
"""

from dataclasses import replace

from sw.compiler import planner
from sw.compiler.fc_layer import PlanOptions
from sw.models import perf
from sw.spec.errors import FdpuError

__all__ = ["best_plan", "best_run", "stream_counts", "STREAM_MIN_COLUMNS"]

#: The fewest columns a streamed context steps over when the model chooses the count (fewer,
#: and the context's own costs, its descriptor loads and stores, weigh on it).
STREAM_MIN_COLUMNS = 256
#: The most contexts per item the model considers.
STREAM_MAX_CHUNKS = 64
#: The share of a layer's predicted time its contexts wait for their data from which a graph
#: that does not stream is predicted with half its row block too.
WAIT_SHARE = 0.1


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


def stream_counts(plan):
    """Return the contexts per item the model may choose for ``plan``'s layer: each a power
    of two of at least :data:`STREAM_MIN_COLUMNS` of its ``Cw`` columns, at most
    :data:`STREAM_MAX_CHUNKS` (none for a graph that does not stream or a split plan)."""
    if not plan.graph.streams or plan.split != 1:
        return []
    cw, per, out = plan.Cw, STREAM_MIN_COLUMNS, []
    allowed = plan.graph.stream_columns(cw)
    while per < cw:
        if per in allowed and cw // per <= STREAM_MAX_CHUNKS:
            out.append(cw // per)
        per *= 2
    return out


def best_run(layer, params, options=None, system=perf.System(), early_start=None):
    """Return ``(plan, system)``: :func:`best_plan` in ``system`` with ``early_start`` as given,
    or, with ``early_start=None`` and ``system.overlap``, the plan and early-start setting the
    model predicts fastest (early start on when they tie).  The plan is made once: the
    double-buffering choice compares each plan at its better setting.  With
    ``options.chunks`` ``None``, the streaming choice of the module doc follows."""
    options = options or PlanOptions()
    if options.chunks is not None:
        return _best_run(layer, params, options, system, early_start)
    plan, chosen = _best_run(layer, params, replace(options, chunks=1), system, early_start)
    finer = _finer(plan, options)
    if early_start is False or not system.overlap or not finer:
        return plan, chosen
    once = perf.predict(plan, layer.weights, chosen)
    if not _waits(plan, once):
        return plan, chosen
    early = replace(system, early_start=True)
    best, best_cycles = (plan, chosen), once.cycles
    for opts in finer:
        try:
            cand = planner.plan_fc(layer, params, opts)
        except FdpuError:                  # the finer plan does not fit: keep the plan
            continue
        cycles = perf.predict(cand, layer.weights, early).cycles
        if cycles < best_cycles:
            best, best_cycles = (cand, early), cycles
    return best


def _finer(plan, options):
    """Return the options of the finer plans :func:`best_run` may predict beside ``plan``: a
    streamed plan for a graph that streams; a sparse graph's (or one that does not stream),
    unless the row block was given, also the plan with half its row block (twice the
    contexts)."""
    kept = dict(double_buffer=plan.double_buffer)
    out = []
    if stream_counts(plan):
        out.append(replace(options, chunks=stream_counts(plan)[0], **kept))
    if (plan.graph.sparse or not plan.graph.streams) and options.kb is None and plan.kb > 1 \
            and plan.split == 1:
        out.append(replace(options, chunks=1, kb=plan.kb // 2, **kept))
    return out


def _waits(plan, once):
    """Return whether ``plan`` (predicted ``once``) waits for its data enough to try its finer
    plan: a streaming graph where a pass's DMA-in is longer than its contexts, another where
    its contexts wait :data:`WAIT_SHARE` of the layer's time or more."""
    if plan.graph.streams and not plan.graph.sparse:
        return any(f.dma_in > f.contexts for f in once.passes)
    return sum(f.hold for f in once.passes) >= WAIT_SHARE * once.cycles


def _best_run(layer, params, options, system, early_start):
    """Return :func:`best_run`'s choice for a given ``options.chunks``."""
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
