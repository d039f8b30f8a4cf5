"""FC-layer engine graphs: one self-contained engine per PE, and the numbers they compute.

Contract (``docs/dataflow.md`` has the reasoning)
-------------------------------------------------
:func:`build_engine` adds one engine (an :class:`~sw.compiler.graph_kinds.base.EngineSpec`:
the plan's :attr:`~sw.compiler.fc_plan.FcPlan.engine`) to a :class:`~sw.compiler.dfg.Graph`
(all its edges PE-local; its graph kind adds the weight and input streams); :func:`build_graph` builds the whole
graph of a plan, one engine per home PE.  Each context the engine reads its descriptor (item
base, input base, output base; :mod:`sw.compiler.dbuf_layout` lays them out) and computes one
work item: ``kb x gb`` FACC chains over ``Cw`` columns, their results stored to the output
block.

Accumulation order (fixed, what the golden model and the hardware both compute): for every
``(k, n)``, ``acc = -0.0``, then ``acc = fma(W[k][c], I[n][c], acc)`` for ``c = 0 .. Cw-1`` in
order, one rounding per step (``FACC``); the ``switch`` and ``gather`` graphs feed ``+0.0``
for every weight that FD-CSR does not store, including the padding columns ``C .. Cw-1``
(whose inputs are 0); the ``skip`` graph steps only over the stored weights (a row with none
over one explicit ``+0.0`` at column 0).  A plan with an epilogue then computes, per output,
``acc = FADD(acc, b[k])`` (``plan.bias``: the row's binary16 bias, loaded by ``LDHB`` from the
item's bias block, whose address is the descriptor's fourth word) and ``acc = FMAX(acc,
+0.0)`` (``plan.relu``), each rounded as the instruction rounds, before the store.
:func:`fc_result` is that loop, vectorized.
"""

import numpy as np

from sw.compiler.dfg import Graph
from sw.spec import fp16
from sw.spec.isa import Op, facc_imm

__all__ = ["build_engine", "build_graph", "fc_result"]


def build_engine(g, spec, e, desc=0, pe=None):
    """Add engine ``e`` (an :class:`~sw.compiler.graph_kinds.base.EngineSpec`) to graph ``g``;
    return its node ids by role.

    Every node gets ``group = e`` and ``meta`` ``engine``/``role``/``row``/``lane``.  The
    engine reads its descriptor at ``desc + 16 * ctx``; its graph kind adds the streams that
    feed the FACCs (:meth:`~sw.compiler.graph_kinds.base.GraphKind.add_streams`).
    """
    kb, gb = spec.kb, spec.gb
    ids = {}

    def add(role, op, nsrc=None, imm=0, end=False, row=None, lane=None):
        name = f"e{e}.{role}" + (f"{row}" if row is not None else "") + \
            (f".{lane}" if lane is not None else "")
        nid = g.add(op, nsrc, imm, end, name, group=e, pe=pe, engine=e, role=role, row=row,
                    lane=lane)
        ids.setdefault(role, []).append(nid)
        return nid

    ctx = add("ctx", Op.CTX)
    a = add("desc", Op.SHL, 1, 4)
    g.connect(ctx, a, 0)
    ld_b = add("ldB", Op.LDW, imm=desc)
    ld_x = add("ldX", Op.LDW, imm=desc + 4)
    ld_o = add("ldO", Op.LDW, imm=desc + 8)
    ld_c = add("ldC", Op.LDW, imm=desc + 12) if spec.bias else None
    g.fanout(a, [(ld_b, 0), (ld_x, 0), (ld_o, 0)] + ([(ld_c, 0)] if ld_c is not None else []))
    count = spec.graph.facc_count(spec)
    # A streamed engine's sums run on over an item's contexts: by a span, or (a count from
    # the data) by the continue bit of its count tokens.
    imm = facc_imm(count, spec.span) if spec.span and count else count
    facc = [[add("facc", Op.FACC, imm=imm, row=k, lane=j) for j in range(gb)]
            for k in range(kb)]
    st = [[add("st", Op.STD, imm=(j * spec.output_stride + k) * 8, end=True, row=k, lane=j)
           for j in range(gb)] for k in range(kb)]
    result = _epilogue(g, spec, add, ld_c, facc)
    for k in range(kb):
        for j in range(gb):
            g.connect(result[k][j], st[k][j], 1)
    g.fanout(ld_o, [(st[k][j], 0) for k in range(kb) for j in range(gb)])
    spec.graph.add_streams(g, spec, add, ld_b, ld_x, facc)
    return ids


def _epilogue(g, spec, add, ld_c, facc):
    """Add the epilogue of each output after its FACC; return the nodes whose result is stored.

    With a bias, ``ld_c`` (the item's bias block address) feeds one ``LDHB`` per weight row
    (its bias, broadcast to the four lanes), which feeds the row's ``gb`` ``FADD``s; with
    ReLU an ``FMAX #0`` follows.  Every node fires once per context (PE-local edges).
    """
    kb, gb = spec.kb, spec.gb
    out = facc
    if spec.bias:
        loads = [add("bias", Op.LDHB, imm=2 * k, row=k) for k in range(kb)]
        g.fanout(ld_c, [(v, 0) for v in loads])
        added = [[add("badd", Op.FADD, 2, row=k, lane=j) for j in range(gb)] for k in range(kb)]
        for k in range(kb):
            for j in range(gb):
                g.connect(out[k][j], added[k][j], 0)
            g.fanout(loads[k], [(added[k][j], 1) for j in range(gb)])
        out = added
    if spec.relu:
        relu = [[add("relu", Op.FMAX, 1, imm=fp16.POS_ZERO, row=k, lane=j) for j in range(gb)]
                for k in range(kb)]
        for k in range(kb):
            for j in range(gb):
                g.connect(out[k][j], relu[k][j], 0)
        out = relu
    return out


def build_graph(plan):
    """Return the whole graph of ``plan``: one engine per home PE, pinned there."""
    g = Graph(f"fc-{plan.mode}-{plan.K}x{plan.C}-n{plan.N}")
    spec = plan.engine
    for e, (pe, _) in enumerate(plan.homes):
        build_engine(g, spec, e, desc=plan.desc_base[e] if plan.desc_base else 0, pe=pe)
    return g


def fc_result(plan, weights, inputs, running=False, progress=None):
    """Return the ``N x K`` float16 result the graph computes, vectorized over ``k`` and ``n``.

    Mirrors the accumulation order of the module doc exactly (binary16 FMA via
    :mod:`sw.spec.fp16`); the ``skip`` graph steps only over the stored weights
    (:func:`sw.compiler.graph_kinds.skip.skip_stored`); the epilogue adds the bias (one rounding)
    and applies ReLU (``sw.spec.fp16.maximum`` with ``+0.0``), as the graph does.  With
    ``running=True`` return ``(result, mu)`` where ``mu`` (``N x K`` float64) is the sum of the
    magnitudes of every rounded partial sum (before the epilogue), for the running error bound
    of :func:`sw.models.reference.check`.  ``progress``, if given, is called as
    ``progress(done, total)`` with the input columns accumulated so far (every 64 columns and
    at the end).
    """
    w = np.zeros((plan.K, plan.split * plan.Cw), dtype=np.uint16)
    w[:, :plan.C] = np.asarray(weights, dtype=np.float16).view(np.uint16)
    x = np.zeros((plan.N, plan.split * plan.Cw), dtype=np.uint16)
    x[:, :plan.C] = np.asarray(inputs, dtype=np.float16).view(np.uint16)
    acc = np.full((plan.K, plan.N), fp16.NEG_ZERO, dtype=np.uint16)
    # Each row's own columns: its slice's (a split plan), all of them otherwise.
    part = np.arange(plan.K) // (plan.slice_blocks * plan.kb)
    cols = part[:, None] * plan.Cw + np.arange(plan.Cw)[None, :]
    w = np.take_along_axis(w, cols, axis=1)
    wt = np.ascontiguousarray(w.T)
    # xt[c]: the inputs of column c of every slice (split x N), a row takes its slice's.
    xt = np.ascontiguousarray(x.reshape(plan.N, plan.split, plan.Cw).transpose(2, 1, 0))
    rows_x = (lambda c: xt[c][part]) if plan.split > 1 else (lambda c: xt[c])
    mu = np.zeros((plan.K, plan.N)) if running else None
    keep = plan.graph.stored(plan.Cw, w.view(np.float16), plan.chunks)
    keep = None if keep is None else keep.T
    for c in range(plan.Cw):
        step = fp16.fma(wt[c][:, None], rows_x(c), acc)
        acc = step if keep is None else np.where(keep[c][:, None], step, acc)
        if running:
            mu += np.abs(acc.view(np.float16).astype(np.float64))
        if progress and (c % 64 == 63 or c == plan.Cw - 1):
            progress(c + 1, plan.Cw)
    if plan.bias is not None:
        acc = fp16.add(acc, np.asarray(plan.bias, dtype=np.uint16)[:, None])
    if plan.relu:
        acc = fp16.maximum(acc, fp16.POS_ZERO)
    y = np.ascontiguousarray(acc.T).view(np.float16)
    return (y, np.ascontiguousarray(mu.T)) if running else y
