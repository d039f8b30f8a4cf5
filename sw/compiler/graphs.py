"""FC-layer engine graphs: one self-contained engine per PE, and the numbers they compute.

Contract (``docs/dataflow.md`` has the reasoning)
-------------------------------------------------
:func:`build_engine` adds one engine of an :class:`~sw.compiler.fc_plan.FcPlan` to a
:class:`~sw.compiler.dfg.Graph` (all its edges PE-local); :func:`build_graph` builds the whole
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

from sw.compiler.dbuf_layout import skip_stored
from sw.compiler.dfg import Graph
from sw.compiler.fc_plan import SKIP_WORD, align
from sw.compiler.fdcsr import ROW
from sw.spec import fp16
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op, loop_imm

__all__ = ["build_engine", "build_graph", "fc_result"]


def _chunks(gb, k=ArrayParams.MAX_DESTS):
    """Return the lane groups ``0 .. gb-1`` in runs of at most ``k``."""
    return [range(q, min(gb, q + k)) for q in range(0, gb, k)]


def build_engine(g, plan, e, pe=None, dbuf=None):
    """Add engine ``e`` of ``plan`` to graph ``g``; return its node ids by role.

    Every node gets ``group = e`` and ``meta`` ``engine``/``role``/``row``/``lane``.  The
    engine reads its descriptor at ``plan.desc_base[e] + 16 * ctx``.
    """
    kb, gb, Cw = plan.kb, plan.gb, plan.Cw
    desc = plan.desc_base[e] if plan.desc_base else 0
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
    ld_c = add("ldC", Op.LDW, imm=desc + 12) if plan.bias is not None else None
    g.fanout(a, [(ld_b, 0), (ld_x, 0), (ld_o, 0)] + ([(ld_c, 0)] if ld_c is not None else []))
    # The skip graph's FACCs take their count (the row's stored weights) as operand 2.
    facc = [[add("facc", Op.FACC, imm=0 if plan.skip else Cw, row=k, lane=j)
             for j in range(gb)] for k in range(kb)]
    st = [[add("st", Op.STD, imm=(j * plan.output_stride + k) * 8, end=True, row=k, lane=j)
           for j in range(gb)] for k in range(kb)]
    result = _epilogue(g, plan, add, ld_c, facc)
    for k in range(kb):
        for j in range(gb):
            g.connect(result[k][j], st[k][j], 1)
    g.fanout(ld_o, [(st[k][j], 0) for k in range(kb) for j in range(gb)])
    if plan.skip:
        _skip_streams(g, plan, add, ld_b, ld_x, facc)
        return ids
    if plan.mode == "dense":
        it_x = add("itX", Op.ITER, imm=loop_imm(Cw, 8))
        g.connect(ld_x, it_x, 0)
        it_w = add("itW", Op.ITER, imm=loop_imm(Cw, 2 * kb))
        g.connect(ld_b, it_w, 0)
        w = [add("w", Op.LDHB, imm=2 * k, row=k) for k in range(kb)]
        g.fanout(it_w, [(x, 0) for x in w])
    else:
        r16 = plan.R16
        it_x = add("itX", Op.ITER, imm=loop_imm(r16, 8 * ROW))
        g.connect(ld_x, it_x, 0)
        # One inner ITER per 4 lane groups: each names its 4 input loads directly, where one
        # ITER would feed 8 loads through MOVs (INT issues per column; docs/dataflow.md).
        it_xi = [add("itXi", Op.ITER, imm=loop_imm(ROW, 8), lane=q)
                 for q in range(len(_chunks(gb)))]
        g.fanout(it_x, [(v, 0) for v in it_xi])
        it_c = add("itC", Op.ITER, imm=loop_imm(r16, 2))
        it_r = add("itR", Op.ITER, imm=loop_imm(r16, 4))
        g.fanout(ld_b, [(it_c, 0), (it_r, 0)])
        off_r = align(2 * kb * r16, 4)
        off_v = off_r + align(4 * kb * r16, 8)
        gather = plan.sparse_graph == "gather"
        ci, ro, w = [], [], []
        for k in range(kb):
            # The decode of one FD-CSR row: BSCAN takes the row's colidx and its
            # relocated rowoff, base = item base + 2 x rowoff (pass_memory stores it so), and
            # emits, per column, the stored weight's value address - (off_v - 2) (never 0) or
            # 0 for a zero weight.  The value loads are LDHBZ: address 0 gives +0.0
            # without a Dbuf access.
            ci.append(add("ci", Op.LDH, imm=2 * k * r16, row=k))
            ro.append(add("ro", Op.LDW, imm=off_r + 4 * k * r16, row=k))
            bs = add("bs", Op.BSCAN, imm=ROW, row=k)
            g.connect(ci[k], bs, 0)
            # The row base goes through a MOV: straight into BSCAN.1 the rowoff load retires
            # on the PE's memory lane 1 with the input loads and, running ahead of BSCAN, its
            # waiting entries cost the FACCs' inputs (measured slower; docs/dataflow.md).
            rb = add("rb", Op.MOV, row=k)
            g.connect(ro[k], rb, 0)
            g.connect(rb, bs, 1)
            lds = [add("ld", Op.LDHBZ, imm=off_v - 2, row=k, lane=q)
                   for q in range(len(_chunks(gb, plan.wfan)))]
            w.append(lds)
            if gather:
                # No branch: BSCAN's tokens are the value loads' addresses.
                g.fanout(bs, [(v, 0) for v in lds])
                continue
            sw = add("sw", Op.SWITCH, 3 if plan.feedback else 2, row=k)
            # The same token is the data and the condition.
            g.fanout(bs, [(sw, 0), (sw, 1)])
            # The SWITCH chooses the *address* of the weight: a stored weight's address
            # (taken branch, straight to the join) or, for a zero weight, IMM 0, which the
            # LDHBZ value loads turn into +0.0 without a Dbuf access.  The join (MOV) feeds
            # the value loads, whose replies the PE forwards in issue order, and the feedback
            # edge: the SWITCH -> join loop is two or three same-PE firings, without the Dbuf
            # round trip of the paper's SWITCH -> LD | FIMM -> join (docs/dataflow.md).
            fz = add("fz", Op.IMM, imm=0, row=k)
            jn = add("jn", Op.MOV, row=k)
            g.connect(sw, jn, 0, branch=True)
            g.connect(sw, fz, 0, branch=False)
            g.connect(fz, jn, 0)
            # One value load per wfan lane groups (wfan 4: naming its FACCs directly, no MOV
            # tree on the INT pipe; the loads issue on the memory pipe).
            if plan.feedback:
                g.connect(jn, sw, 2, init=1)
            g.fanout(jn, [(v, 0) for v in lds])
        g.fanout(it_c, [(x, 0) for x in ci])
        g.fanout(it_r, [(x, 0) for x in ro])
    x = [add("x", Op.LDD, imm=j * 8 * Cw, lane=j) for j in range(gb)]
    if plan.mode == "dense":
        g.fanout(it_x, [(v, 0) for v in x])
        for k in range(kb):
            g.fanout(w[k], [(facc[k][j], 0) for j in range(gb)])
    else:
        for it, lanes in zip(it_xi, _chunks(gb)):
            g.fanout(it, [(x[j], 0) for j in lanes])
        for k in range(kb):
            for ld, lanes in zip(w[k], _chunks(gb, plan.wfan)):
                # With wfan 16 a value load feeds its FACCs through a MOV tree: feed-forward
                # (not in the SWITCH loop).  plan.fan_pipe0 gives its MOVs the pipe0 hint
                # (issue beside the loads, leaving pipe 2 to the BSCAN -> SWITCH -> join
                # loop); measured slower on the RTL, so off by default (docs/mapping.md).
                g.fanout(ld, [(facc[k][j], 0) for j in lanes], pipe0=plan.fan_pipe0)
    for j in range(gb):
        g.fanout(x[j], [(facc[k][j], 1) for k in range(kb)])
    return ids


def _epilogue(g, plan, add, ld_c, facc):
    """Add the epilogue of each output after its FACC; return the nodes whose result is stored.

    With a bias, ``ld_c`` (the item's bias block address) feeds one ``LDHB`` per weight row
    (its bias, broadcast to the four lanes), which feeds the row's ``gb`` ``FADD``s; with
    ReLU an ``FMAX #0`` follows.  Every node fires once per context (PE-local edges).
    """
    kb, gb = plan.kb, plan.gb
    out = facc
    if plan.bias is not None:
        loads = [add("bias", Op.LDHB, imm=2 * k, row=k) for k in range(kb)]
        g.fanout(ld_c, [(v, 0) for v in loads])
        added = [[add("badd", Op.FADD, 2, row=k, lane=j) for j in range(gb)] for k in range(kb)]
        for k in range(kb):
            for j in range(gb):
                g.connect(out[k][j], added[k][j], 0)
            g.fanout(loads[k], [(added[k][j], 1) for j in range(gb)])
        out = added
    if plan.relu:
        relu = [[add("relu", Op.FMAX, 1, imm=fp16.POS_ZERO, row=k, lane=j) for j in range(gb)]
                for k in range(kb)]
        for k in range(kb):
            for j in range(gb):
                g.connect(out[k][j], relu[k][j], 0)
        out = relu
    return out


def _skip_streams(g, plan, add, ld_b, ld_x, facc):
    """Add the ``skip`` graph's weight and input streams, feeding ``facc[k][j]``.

    Per weight row ``k``: the row word (a count token: the row's first value address and its
    stored weights ``n``) feeds an ``ITER`` of ``n`` value addresses (count from the token)
    and, as the count operand, the row's FACCs; per 32-column mask word a ``BPOS`` emits the
    input address of each stored weight, which ``gb`` input loads (one per lane group) turn
    into the FACCs' operand 1.  Both streams hold ``n`` tokens per row and context, in column
    order (docs/dataflow.md, "The skip graph").
    """
    kb, gb, Cw, r32 = plan.kb, plan.gb, plan.Cw, plan.R32
    off_m, off_t, _ = plan.skip_offsets
    it_m = add("itM", Op.ITER, imm=loop_imm(r32, 4))
    it_x = add("itX", Op.ITER, imm=loop_imm(r32, 8 * SKIP_WORD))
    g.connect(ld_x, it_x, 0)
    rw = [add("rw", Op.LDD, imm=off_t + 8 * k, row=k) for k in range(kb)]
    g.fanout(ld_b, [(it_m, 0)] + [(v, 0) for v in rw])
    masks = [add("mask", Op.LDW, imm=off_m + 4 * k * r32, row=k) for k in range(kb)]
    g.fanout(it_m, [(v, 0) for v in masks])
    bp = [add("bpos", Op.BPOS, imm=loop_imm(SKIP_WORD, 8), row=k) for k in range(kb)]
    g.fanout(it_x, [(v, 1) for v in bp])
    for k in range(kb):
        g.connect(masks[k], bp[k], 0)
        x = [add("x", Op.LDD, imm=j * 8 * Cw, row=k, lane=j) for j in range(gb)]
        g.fanout(bp[k], [(v, 0) for v in x])
        for j in range(gb):
            g.connect(x[j], facc[k][j], 1)
        it_v = add("itV", Op.ITER, imm=loop_imm(0, 2), row=k)
        g.fanout(rw[k], [(it_v, 0)] + [(facc[k][j], 2) for j in range(gb)])
        lds = [add("ld", Op.LDHB, row=k, lane=q) for q in range(len(_chunks(gb, plan.wfan)))]
        g.fanout(it_v, [(v, 0) for v in lds])
        for ld, lanes in zip(lds, _chunks(gb, plan.wfan)):
            g.fanout(ld, [(facc[k][j], 0) for j in lanes])


def build_graph(plan):
    """Return the whole graph of ``plan``: one engine per home PE, pinned there."""
    g = Graph(f"fc-{plan.mode}-{plan.K}x{plan.C}-n{plan.N}")
    for e, (pe, d) in enumerate(plan.homes):
        build_engine(g, plan, e, pe=pe, dbuf=d)
    return g


def fc_result(plan, weights, inputs, running=False, progress=None):
    """Return the ``N x K`` float16 result the graph computes, vectorized over ``k`` and ``n``.

    Mirrors the accumulation order of the module doc exactly (binary16 FMA via
    :mod:`sw.spec.fp16`); the ``skip`` graph steps only over the stored weights
    (:func:`sw.compiler.dbuf_layout.skip_stored`); the epilogue adds the bias (one rounding)
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
    keep = skip_stored(plan, w.view(np.float16)).T if plan.skip else None
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
