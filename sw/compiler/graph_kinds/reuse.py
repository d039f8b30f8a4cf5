"""The reuse graph: the skip graph column by column, each input loaded once for the item's rows.

Contract (``docs/dataflow.md``, "The reuse graph")
--------------------------------------------------
The stored weights and the results are the skip graph's (:func:`~sw.compiler.graph_kinds.skip
.skip_stored`: the same FACC steps in the same column order, so the same bits).  Where the skip
graph loads a row's input for each of its stored weights, the reuse graph walks the columns
that *any* of the item's ``kb`` (at most 4) rows stores, loads each such input once per lane
group and hands it by a masked multicast (``MCAST``, ``docs/isa.md``) to the FACCs of the rows
that store that column.  An item's data (:func:`offsets`): ``Cw / 32`` union mask words
(``u32``: bit ``c`` of word ``r``, some row stores column ``32 r + c``), the union token (a
count token: the address of the row bits and the union's columns), ``kb`` row words (as the
skip graph's), the row bits (one ``u16`` per union column, bit ``k``: row ``k`` stores it; the
MCAST's nibble 0) and the stored values row-major.
"""

import numpy as np

from sw.compiler import balance
from sw.compiler.graph_kinds.base import align
from sw.compiler.graph_kinds.skip import SKIP_WORD, Skip, row_values, skip_stored, value_stream
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, count_token, loop_imm

__all__ = ["Reuse", "MAX_ROWS", "offsets", "union_columns"]

#: The rows an item may hold: one MCAST (one nibble of destinations) per lane group.
MAX_ROWS = ArrayParams.MAX_DESTS


def offsets(spec, union):
    """Return the item's ``(union mask words, union token, row words, row bits, values)`` byte
    offsets for ``union`` columns stored by some row (module doc)."""
    words = align(4 * (spec.Cw // SKIP_WORD), 8)
    bits = words + 8 + 8 * spec.kb
    return 0, words, words + 8, bits, bits + align(2 * union, 8)


def union_columns(stored):
    """Return the columns (indices) some row of the ``kb x Cw`` stored map ``stored`` holds."""
    return np.flatnonzero(np.asarray(stored).any(axis=0))


class Reuse(Skip):
    """The input-sharing zero-skipping graph (module doc)."""
    name = "reuse"
    title = "sparse: reuse (zero-skipping, inputs shared by the rows)"
    auto = False                 # the chooser and the model do not count its shared loads yet
    max_kb = MAX_ROWS

    def item_bytes(self, spec, nnz):
        # The union is not known from the stored count: at most min(Cw, nnz) columns.
        return offsets(spec, min(spec.Cw, int(nnz)))[4] + align(2 * int(nnz), 8)

    def encode(self, spec, blk):
        if spec.kb > MAX_ROWS:
            raise FdpuError(f"the reuse graph takes at most {MAX_ROWS} rows an item "
                            f"(one MCAST's destinations), not kb = {spec.kb}")
        stored = skip_stored(spec.Cw, blk)
        union = len(union_columns(stored))
        return stored, offsets(spec, union)[4] + align(2 * int(stored.sum()), 8)

    def item_data(self, spec, blk, stored, nbytes, base):
        kb, r32 = spec.kb, spec.Cw // SKIP_WORD
        cols = union_columns(stored)
        off_m, off_u, off_t, off_r, off_v = offsets(spec, len(cols))
        out = bytearray(nbytes)
        any_row = stored.any(axis=0)
        out[off_m:off_m + 4 * r32] = np.packbits(any_row.reshape(r32, SKIP_WORD), axis=1,
                                                 bitorder="little").tobytes()
        bits = (stored[:, cols] * (1 << np.arange(kb))[:, None]).sum(axis=0)
        out[off_r:off_r + 2 * len(cols)] = bits.astype("<u2").tobytes()
        values, tokens = row_values(spec, blk, stored, base, off_v)
        tokens = [count_token(base + off_r, len(cols))] + tokens
        out[off_u:off_u + 8 * (kb + 1)] = np.array(tokens, dtype="<u8").tobytes()
        out[off_v:off_v + len(values)] = values
        return bytes(out)

    def add_streams(self, g, spec, add, ld_b, ld_x, facc):
        kb, gb, Cw, r32 = spec.kb, spec.gb, spec.Cw, spec.Cw // SKIP_WORD
        if kb > MAX_ROWS:
            raise FdpuError(f"the reuse graph takes at most {MAX_ROWS} rows an item, "
                            f"not kb = {kb}")
        off_m, off_u, off_t, _, _ = offsets(spec, 0)
        # The union's input addresses: a BPOS per union mask word.
        it_m = add("itM", Op.ITER, imm=loop_imm(r32, 4))
        it_x = add("itX", Op.ITER, imm=loop_imm(r32, 8 * SKIP_WORD))
        g.connect(ld_x, it_x, 0)
        union = add("union", Op.LDD, imm=off_u)
        rw = [add("rw", Op.LDD, imm=off_t + 8 * k, row=k) for k in range(kb)]
        g.fanout(ld_b, [(it_m, 0), (union, 0)] + [(v, 0) for v in rw])
        mask = add("mask", Op.LDW, imm=off_m)
        g.connect(it_m, mask, 0)
        bp = add("bpos", Op.BPOS, imm=loop_imm(SKIP_WORD, 8))
        g.connect(mask, bp, 0)
        g.connect(it_x, bp, 1)
        # The row bits of each union column: which rows' FACCs take its input.
        it_r = add("itR", Op.ITER, imm=loop_imm(0, 2))
        g.connect(union, it_r, 0)
        rbits = add("rbits", Op.LDH)
        g.connect(it_r, rbits, 0)
        x = [add("x", Op.LDD, imm=j * 8 * Cw, lane=j) for j in range(gb)]
        g.fanout(bp, [(v, 0) for v in x])
        mc = [add("mcast", Op.MCAST, imm=0, lane=j) for j in range(gb)]
        g.fanout(rbits, [(m, 1) for m in mc])
        for j in range(gb):
            g.connect(x[j], mc[j], 0)
            for k in range(kb):
                g.connect(mc[j], facc[k][j], 1)
        # The values, as the skip graph's: a row's stored values in column order.
        for k in range(kb):
            value_stream(g, spec, add, rw[k], facc, k)

    def golden_events(self, plan, graph, placement, w16):
        # Per engine: the union's columns (BPOS, the row-bits ITER) and each row's stored
        # weights (its value ITER; what each MCAST sends to that row's FACC).
        per_row = balance.engine_row_steps(plan, w16)
        per_union = engine_union_steps(plan, w16)
        emitted = {}
        for node in graph.nodes:
            e, role = node.meta.get("engine"), node.meta.get("role")
            where = placement.where[node.id]
            if role in ("bpos", "itR"):
                emitted[where] = int(per_union[e])
            elif role == "itV":
                emitted[where] = int(per_row[e, node.meta["row"]])
            elif role == "mcast":
                emitted[where] = [int(per_row[e, k]) for k in range(plan.kb)]
        return {}, {}, emitted


def engine_union_steps(plan, w16):
    """Return every engine's union columns over the whole run (per lane group): the inputs the
    reuse graph loads for each lane group, dummy items (one stored column) included."""
    w = np.zeros((plan.kblocks * plan.kb, plan.C), dtype=np.float16)
    w[:plan.K] = np.asarray(w16, dtype=np.float16)
    rows = np.asarray(plan.rows)
    union = np.array([len(union_columns(skip_stored(plan.Cw, w[rows[b * plan.kb:(b + 1)
                                                                  * plan.kb]])))
                      for b in range(plan.kblocks)], dtype=np.int64)
    steps = np.zeros(plan.engines, dtype=np.int64)
    for p in range(plan.passes):
        items = np.asarray(plan.pass_items(p))
        np.add.at(steps, np.arange(len(items)) % plan.engines, union[plan.item_blocks[0][items]])
        for slot in range(len(items), plan.pass_contexts(p) * plan.engines):
            steps[slot % plan.engines] += 1
    return steps
