"""The FC planner: the blocking, the engines' homes and the contexts per pass of a layer.

Contract (``docs/mapping.md`` has the reasoning)
------------------------------------------------
:func:`plan_fc` checks a layer's shape and options and returns its
:class:`~sw.compiler.fc_plan.FcPlan`: the cheapest blocking
(:func:`sw.compiler.blocking.choose_blocking`) whose single item fits a Dbuf, one engine per PE
up to the number of items with its home Dbuf (:func:`sw.compiler.home_dbufs.engine_homes`),
as many contexts per pass as fit the Dbufs, and each engine's descriptor table
(:data:`~sw.compiler.fc_plan.ENTRY_BYTES` per context) at the start of its home Dbuf, the
tables of a Dbuf's engines in engine order.
"""

from dataclasses import replace

import numpy as np

from sw.compiler import home_dbufs
from sw.compiler.balance import balanced_rows
from sw.compiler.blocking import SKIP_DENSITY, blocking_costs, choose_blocking, engine_costs
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.fc_plan import ENTRY_BYTES, LANES, FcPlan, align
from sw.compiler.graph_kinds import GRAPHS, WFANS, graph_kind, may_skip_zeros
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError

__all__ = ["plan_fc"]


def plan_fc(layer, *args, **kwargs):
    """Return the :class:`~sw.compiler.fc_plan.FcPlan` of a layer, built once and whole.

    Two forms, one planner:

    * ``plan_fc(layer, params=None, options=None, cost=None)``: ``layer`` an
      :class:`~sw.compiler.fc_layer.FcLayer` (shape and batch, the rows' stored weights or a
      density, bias, ReLU), ``params`` an :class:`~sw.spec.arch.ArrayParams` (default: the
      README's configuration), ``options`` a :class:`~sw.compiler.fc_layer.PlanOptions`
      (default: every choice the planner's); ``cost(plan)``, if given, is what double
      buffering is decided by (below; :func:`sw.models.choose.best_plan` gives the
      performance model's end-to-end cycles).  The layer's ``row_nnz`` is used where the plan
      runs a graph that skips zero weights (its rows balanced over the engines; not for a
      split plan, whose rows keep their order).
    * ``plan_fc(K, C, N, mode="sparse", params=None, kb=None, gb=None, feedback=True,
      contexts=None, wfan=None, fan_pipe0=False, sparse_graph=None, row_nnz=None,
      double_buffer=None, bias=None, relu=False, split=1)``: the same from loose arguments
      (as below); a ``row_nnz`` given for a graph that does the same work per row, or with a
      split, is refused.

    ``kb``/``gb`` (and, sparse, ``wfan``: lane groups per value load, one of
    :data:`~sw.compiler.fc_plan.WFANS`) default to the blocking with the lowest estimated time
    that fits the slots (``docs/mapping.md``); ``contexts`` (per pass) defaults to as many as fit
    the Dbufs.  ``fan_pipe0`` (sparse, ``wfan`` 16) gives the value loads' MOV trees the ISA's
    ``pipe0`` hint: an experiment, off by default (slower on the RTL, docs/mapping.md); the
    blocking choice does not depend on it.  ``sparse_graph`` (sparse) is one of
    :data:`~sw.compiler.fc_plan.SPARSE_GRAPHS`: the branch-free ``gather`` graph
    (:data:`~sw.compiler.fc_plan.DEFAULT_SPARSE_GRAPH`) or the paper's ``switch`` graph (its
    feedback edges dropped with ``feedback=False``, for the order-hazard demo) or the
    zero-skipping ``skip`` graph; ``None`` (the default) picks ``skip`` when ``row_nnz`` is
    given and the blocking estimate of ``skip`` at the layer's density is lower than that of
    :data:`~sw.compiler.fc_plan.DEFAULT_SPARSE_GRAPH`, else the latter.  ``row_nnz`` (the
    stored weights of each of the ``K`` rows; sparse, ``skip`` or ``None``) also orders a
    ``skip`` plan's rows into items so that the engines' work is even
    (:func:`sw.compiler.balance.balanced_rows`); without it the rows go in order.
    ``double_buffer`` gives consecutive passes alternate halves of the Dbufs (the DMA of the
    next and previous passes then overlaps a pass's contexts, ``docs/system.md``); ``None``
    (the default) turns it on when one item fits half a Dbuf and the double-buffered plan
    takes more than one pass, and, given a ``cost``, costs less; without a ``cost``, only
    for a layer that takes more than one pass with whole Dbufs (the one place this is
    decided).  ``bias`` (``K`` finite values, rounded to binary16) and
    ``relu`` add the epilogue ``y = relu(acc + bias)`` after each output's FACC
    (:attr:`~sw.compiler.fc_plan.FcPlan.bias`, docs/dataflow.md).  ``split`` (``S > 1``)
    plans the partial sums of a split reduction (:mod:`sw.compiler.split`): ``K`` is ``S``
    times the layer's padded rows, ``kb`` and ``gb`` must be given, ``kb`` dividing ``K /
    S``, and every one of the ``S`` column slices must hold at least one of the ``C`` columns.

    Raises
    ------
    FdpuError
        For a bad mode, shape or batch, or a layer whose single item does not fit a Dbuf.
    """
    if isinstance(layer, FcLayer):
        return _plan(layer, *args, **kwargs)
    return _plan_args(layer, *args, **kwargs)


def _plan_args(K, C, N, mode="sparse", params=None, kb=None, gb=None, feedback=True,
               contexts=None, wfan=None, fan_pipe0=False, sparse_graph=None, row_nnz=None,
               double_buffer=None, bias=None, relu=False, split=1, chunks=1):
    """Return :func:`plan_fc` of its loose-argument form."""
    options = PlanOptions(mode, sparse_graph, kb, gb, wfan, contexts, feedback, fan_pipe0,
                          double_buffer, split, chunks)
    layer = FcLayer(K, C, N, bias=bias, relu=relu)
    if row_nnz is not None:
        if not may_skip_zeros(mode, sparse_graph):
            names = [k for k in GRAPHS.values() if k.skips_zeros]
            whose = "graphs'" if len(names) > 1 else "graph's"
            raise FdpuError(f"row_nnz balances the {' and '.join(k.name for k in names)} "
                            f"{whose} rows: it needs mode {names[0].mode!r} and sparse_graph "
                            f"{' or '.join(repr(k.name) for k in names)} or None (the other "
                            f"graphs do the same work per row)")
        layer = FcLayer(K, C, N, row_nnz=row_nnz, bias=layer.bias_values, relu=relu)
        if split != 1:
            raise FdpuError("a split plan keeps its rows in order (row_nnz would balance them "
                            "across slices)")
    return _plan(layer, params, options)


def _plan(layer, params=None, options=None, cost=None):
    """Return the plan of ``layer`` with ``options`` on ``params`` (see :func:`plan_fc`)."""
    params = params or ArrayParams()
    opts = options or PlanOptions()
    mode, kb, gb, wfan, contexts = opts.mode, opts.kb, opts.gb, opts.wfan, opts.contexts
    feedback, split, double_buffer = opts.feedback, opts.split, opts.double_buffer
    K, C, N = layer.K, layer.C, layer.N
    bias, relu = layer.bias, layer.relu
    kinds = [k for k in GRAPHS.values() if k.mode == mode]
    if align(C, min(k.column_unit for k in kinds)) > 0xFFFF:
        raise FdpuError(f"in_features {C} exceeds the ITER/FACC count limit of 65535")
    groups = -(-N // LANES)
    for name, v, most, what in (("kb", kb, K, f"out_features {K}"),
                                ("gb", gb, groups, f"the {groups} lane groups of batch {N}")):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                              or not 1 <= v <= most):
            raise FdpuError(f"{name} must be an integer in 1..{most} ({what}), got {v!r}")
    _check_split(split, K, C, kb, gb, FcPlan(opts.named_graph, K, C, N, params, 1, 1,
                                            split=split))
    row_nnz = None if split != 1 or layer.row_nnz is None else np.asarray(layer.row_nnz)
    if opts.sparse_graph is None:
        kind = _auto_graph(mode, K, C, N, params, row_nnz, kb, gb, wfan)
    else:
        kind = opts.named_graph
    if kind.max_kb is not None and kb is not None and kb > kind.max_kb:
        raise FdpuError(f"kb must be at most {kind.max_kb} for the {kind.name} graph "
                        f"(its items' rows), got {kb}")
    if not kind.skips_zeros:
        row_nnz = None
    density = layer.stored_density if split == 1 else None
    density = SKIP_DENSITY if density is None or not kind.skips_zeros else density
    cw = FcPlan(kind, K, C, N, params, 1, 1, split=split).Cw
    if cw > 0xFFFF:
        raise FdpuError(f"in_features {C} exceeds the {kind.name} graph's limit of "
                        f"{0xFFFF // kind.column_unit * kind.column_unit} (its items cover "
                        f"{kind.column_unit} columns at a time)")
    if not feedback and not kind.has_feedback:
        having = [k for k in GRAPHS.values() if k.has_feedback]
        raise FdpuError(f"feedback=False drops the {' and '.join(k.name.upper() for k in having)}"
                        f" graph's feedback edges: it needs mode {having[0].mode!r} and "
                        f"sparse_graph {' or '.join(repr(k.name) for k in having)} (the "
                        f"{', '.join(k.name for k in GRAPHS.values() if not k.has_feedback)}"
                        f" graphs have none)")
    if kb is None or gb is None:
        # The cheapest blocking whose single item fits a Dbuf; a given kb, gb or wfan is kept.
        shape = FcPlan(kind, K, C, N, params, 1, 1, feedback, bias=bias, relu=relu,
                       double_buffer=bool(double_buffer)).engine
        for ckb, cgb, cwfan in choose_blocking(shape, K, groups, params, kb, gb, wfan,
                                               density):
            probe = FcPlan(kind, K, C, N, params, ckb, cgb, feedback, cwfan, bias=bias,
                           relu=relu, double_buffer=bool(double_buffer))
            probe = replace(probe, homes=_homes(probe))
            if _fits(probe, 1):
                kb, gb, wfan = ckb, cgb, cwfan
                break
        else:
            given = "".join(f", {n}={v}" for n, v in (("kb", kb), ("gb", gb), ("wfan", wfan))
                            if v is not None)
            raise FdpuError(f"every blocking of the {K} x {C} layer (batch {N}, {mode}{given}) "
                            f"has a work item that needs more than the {_room(probe)}; use "
                            f"fewer in_features, bigger Dbufs or another blocking"
                            + (" or no double buffering" if double_buffer else ""))
    wfan = WFANS[0] if wfan is None else wfan
    plan = FcPlan(kind, K, C, N, params, kb, gb, feedback, wfan, fan_pipe0=opts.fan_pipe0,
                  bias=bias, relu=relu, split=split, double_buffer=bool(double_buffer))
    plan = replace(plan, chunks=_check_chunks(opts.chunks or 1, plan))
    slots = engine_costs(replace(plan.engine, Cw=min(cw, 64), chunks=1))[0]
    if slots > params.slots:
        raise FdpuError(f"a {mode} engine with kb={kb}, gb={gb} needs {slots} instruction "
                        f"slots; the PE has {params.slots}")
    plan = replace(plan, homes=_homes(plan))
    if contexts is not None:
        full = -(-plan.items // plan.engines)
        if isinstance(contexts, bool) or not isinstance(contexts, (int, np.integer)) \
                or not 1 <= contexts <= full:
            raise FdpuError(f"contexts must be an integer in 1..{full} (the contexts per engine "
                            f"of this layer), got {contexts!r}")
        if not _fits(plan, int(contexts)):
            raise FdpuError(f"{contexts} contexts per pass of the {K} x {C} layer (batch {N}, "
                            f"{mode}) need more than the {_room(plan)}")
    else:
        contexts = _most_contexts(plan)
        if contexts is None:
            raise FdpuError(
                f"one work item of the {K} x {C} layer (batch {N}, {mode}) needs more than "
                f"the {_room(plan)}; use fewer in_features or bigger Dbufs"
                + (" or no double buffering" if plan.double_buffer else ""))
    per_dbuf, desc_base = {}, []
    for pe, d in plan.homes:
        i = per_dbuf.get(d, 0)
        per_dbuf[d] = i + 1
        desc_base.append(params.dbuf_base(d) + i * int(contexts) * plan.chunks * ENTRY_BYTES)
    plan = replace(plan, contexts=int(contexts), desc_base=tuple(desc_base))
    if row_nnz is not None:
        plan = replace(plan, row_order=balanced_rows(row_nnz, kb, plan.row_block_engines()))
    if double_buffer is None and (plan.passes > 1 or cost is not None):
        # The one rule of double buffering: a layer is double-buffered if one item fits half
        # a Dbuf and then it takes several passes, and, with a cost, it costs less; without
        # a cost, only a layer of several passes anyway.
        try:
            double = _plan(layer, params, replace(opts, double_buffer=True,
                                                  sparse_graph=plan.sparse_graph))
        except FdpuError:
            return plan
        if double.passes > 1 and (cost is None or cost(double) < cost(plan)):
            return double
    return plan


def _check_split(split, K, C, kb, gb, probe):
    """Refuse a ``split`` that does not fit the layer (see :func:`plan_fc`); ``probe`` is the
    plan's shape with ``split``."""
    if split == 1:
        return
    if kb is None or gb is None:
        raise FdpuError("a split plan needs kb and gb (its row blocks must not straddle "
                        "slices)")
    if K % split or (K // split) % kb:
        raise FdpuError(f"split {split}: out_features {K} must be split x a multiple of kb "
                        f"({kb}): each slice's rows padded to whole row blocks")
    if (split - 1) * probe.Cw >= C:
        raise FdpuError(f"split {split}: slices of {probe.Cw} columns leave the last one "
                        f"without any of the {C} in_features; use at most "
                        f"{-(-C // probe.Cw) if probe.Cw < C else 1} slices")


def _check_chunks(chunks, plan):
    """Return ``chunks`` if a streamed plan of ``plan``'s graph and shape may have that many
    contexts per item (see :class:`~sw.compiler.fc_layer.PlanOptions`), else refuse it."""
    if chunks == 1:
        return 1
    kind, cw = plan.graph, plan.Cw
    if not kind.streams:
        names = ", ".join(k.name for k in GRAPHS.values() if k.streams)
        raise FdpuError(f"chunks {chunks}: the {kind.name} graph does not stream an item over "
                        f"several contexts (the {names} graph does)")
    if plan.split != 1:
        raise FdpuError(f"chunks {chunks}: a split plan keeps one context per item")
    allowed = kind.stream_columns(cw)
    if cw % chunks or cw // chunks not in allowed:
        ok = sorted(cw // per for per in allowed)
        unit = ("a multiple of 32" if kind.skips_zeros else "a power of two (at least 2)")
        raise FdpuError(f"chunks {chunks}: each context of the {kind.name} graph must step over "
                        f"{unit} of the item's {cw} columns; allowed: "
                        f"{', '.join(map(str, ok)) or 'none'}")
    return chunks


def _room(plan):
    """Return the words naming what one pass may fill, for errors."""
    n = plan.params.dbuf_bytes
    return f"half of the {n} bytes of a Dbuf (double buffering)" if plan.double_buffer \
        else f"{n} bytes of a Dbuf"


def _homes(plan):
    """Return the engines' ``(pe, home Dbuf)`` pairs of ``plan``: one engine per PE up to its
    items."""
    params = plan.params
    return tuple(home_dbufs.engine_homes(params, min(params.num_pes, plan.items)))


def _most_contexts(plan):
    """Return the most contexts per pass that fit the Dbufs (``None`` if one does not)."""
    lo, hi = 1, -(-plan.items // plan.engines)
    if not _fits(plan, 1):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(plan, mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _auto_graph(mode, K, C, N, params, row_nnz, kb, gb, wfan):
    """Return the graph kind a plan without a named one runs (see :func:`plan_fc`): the
    default, or a graph that skips zero weights where the layer's stored weights make its
    blocking estimate lower."""
    default = graph_kind(mode)
    if row_nnz is None or default.skips_zeros:
        return default
    density = float(np.maximum(1, row_nnz).sum()) / (K * C)
    groups = -(-N // LANES)
    best = {}
    for kind in [default] + [k for k in GRAPHS.values()
                             if k.mode == mode and k.skips_zeros and k.auto]:
        shape = FcPlan(kind, K, C, N, params, 1, 1).engine
        cands = blocking_costs(shape, K, groups, params, kb, gb, wfan, density)
        if cands:
            best[kind] = cands[0]["rounds"] * cands[0]["per_ctx"]
    return min(best, key=lambda k: (best[k], k is not default), default=default)


def _fits(plan, contexts):
    """Return whether the fullest Dbuf holds a pass of ``plan`` at ``contexts`` per engine."""
    plan = replace(plan, contexts=contexts)
    per = {}
    for _, d in plan.homes:
        per[d] = per.get(d, 0) + 1
    worst = max(per.values())
    # Input slots: as many as the most any pass's colouring uses (FcPlan.pass_inputs).
    slots = max(max((s for s, _ in plan.pass_inputs(p).values()), default=0)
                for p in range(plan.passes)) + 1
    # Per Dbuf: its slots' outputs, and one copy of each row block its items read.
    blocks = max(max(plan.pass_weight_blocks(p).values()) for p in range(plan.passes))
    need = (plan.input_offset(slots) + worst * contexts * (plan.output_bytes + 8)
            + blocks * (plan.item_bound + plan.bias_bytes))
    return need <= plan.region_bytes
