"""The skip graph: only the stored weights' work, from a bitmask of the item's weights.

Contract (``docs/dataflow.md``, "The skip graph")
-------------------------------------------------
A weight is stored where its bit pattern is not ``0x0000`` (FD-CSR's rule); a row with none
stores column 0 (an explicit ``+0.0``: a counted FACC needs at least one step;
:func:`skip_stored`).  An item's data (:func:`offsets`): ``kb x Cw / 32`` mask words (``u32``,
row-major; bit ``c`` of word ``r`` of row ``k`` says column ``32 r + c`` is stored: FD-CSR's
``colidx`` of two rows), ``kb`` row words (a count token: the address of the row's first value
and its stored values in bits 47:32, :func:`sw.spec.isa.count_token`), then the stored values
row-major.  Per weight row ``k`` of the engine: the row word feeds an ``ITER`` of the row's
``n`` value addresses (count from the token) and, as operand 2, the row's FACCs (count ``n``);
per mask word a ``BPOS`` emits the input address of each stored weight, which ``gb`` input
loads turn into the FACCs' operand 1.  Both streams hold ``n`` tokens per row and context, in
column order, so the FACC steps, instructions and cycles scale with the stored weights.

A *streamed* item (``spec.chunks`` contexts, each over ``spec.columns`` columns, a multiple
of 32) is ``chunks`` such blocks of its columns, one per context, :meth:`Skip.chunk_bytes`
apart (each sized for all its weights stored; the DMA loads only the stored ones,
:meth:`Skip.piece_bytes`); a row with no stored weight among a context's columns stores the
first of them; every context's row words but the first's have the continue bit
(:data:`sw.spec.isa.TOKEN_CONTINUE_AT`), so each row's FACCs carry one sum over the item's
contexts, each storing its partial sum, the last the output.
"""

import numpy as np

from sw.compiler import balance
from sw.compiler.graph_kinds.base import align, chunks
from sw.compiler.graph_kinds.sparse import SparseKind
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, count_token, loop_imm

__all__ = ["Skip", "SKIP_WORD", "skip_stored", "offsets", "row_values", "value_stream"]

#: The columns one mask word covers (two FD-CSR rows).
SKIP_WORD = 32


def skip_stored(Cw, blk, chunks=1):
    """Return the ``kb x Cw`` stored-weight map of the float16 block ``blk`` (module doc) of an
    item streamed over ``chunks`` contexts: a row with no stored weight among a context's
    ``Cw / chunks`` columns stores the first of them.

    That extra step of an all-zero row adds ``+0.0 x I[n][0]`` to ``-0.0``: ``+0.0`` for a
    non-negative finite input, ``-0.0`` for a negative one, where the dense graph's all-zero
    row gives ``+0.0`` unless every input is negative (docs/dataflow.md, "The skip graph").
    """
    u = np.zeros((blk.shape[0], Cw), dtype=np.uint16)
    u[:, :blk.shape[1]] = blk.view(np.uint16)
    stored = u != 0
    per = Cw // chunks
    parts = stored.reshape(blk.shape[0], chunks, per)
    parts[..., 0] |= ~parts.any(axis=2)
    return stored


def offsets(spec):
    """Return the ``(mask words, row words, values)`` byte offsets in a context's block of
    the item's data (the item's only block unless it streams: module doc)."""
    words = 4 * spec.kb * (spec.columns // SKIP_WORD)
    return 0, align(words, 8), align(words, 8) + 8 * spec.kb


def row_values(spec, blk, stored, base, off_v, continues=False):
    """Return ``(values, tokens)`` of an item block stored at ``base`` whose values start at
    ``off_v``: the stored values row-major (``<u2`` bytes) and each row's count token (the
    address of its first value, its stored weights; ``continues``: its continue bit)."""
    u = np.zeros((spec.kb, stored.shape[1]), dtype=np.uint16)
    u[:, :blk.shape[1]] = blk.view(np.uint16)
    values = u[stored]                     # row-major: each row's stored values in order
    counts = stored.sum(axis=1)
    first = base + off_v + 2 * np.concatenate([[0], np.cumsum(counts)[:-1]])
    if spec.kb and int(first[-1]) + 2 * int(counts[-1]) >= 1 << 32:
        raise FdpuError(f"item data at {base:#x} reach past the 32-bit address space")
    tokens = [count_token(int(a), int(n), continues) for a, n in zip(first, counts)]
    return values.astype("<u2").tobytes(), tokens


def value_stream(g, spec, add, rw, facc, k):
    """Add row ``k``'s values: its row word ``rw`` feeds an ITER of the row's value addresses
    (the count from the token) and, as operand 2, the row's FACCs; a value load per ``wfan``
    lane groups feeds their operand 0."""
    it_v = add("itV", Op.ITER, imm=loop_imm(0, 2), row=k)
    g.fanout(rw, [(it_v, 0)] + [(facc[k][j], 2) for j in range(spec.gb)])
    lanes = chunks(spec.gb, spec.wfan)
    lds = [add("ld", Op.LDHB, row=k, lane=q) for q in range(len(lanes))]
    g.fanout(it_v, [(v, 0) for v in lds])
    for ld, group in zip(lds, lanes):
        g.fanout(ld, [(facc[k][j], 0) for j in group])


class Skip(SparseKind):
    """The zero-skipping graph (module doc)."""
    name = "skip"
    title = "sparse: skip (zero-skipping)"
    column_unit = SKIP_WORD
    skips_zeros = True
    dummy_reads_any = False       # an item's steps are its stored weights
    streams = True

    def stored(self, Cw, blk, chunks=1):
        return skip_stored(Cw, blk, chunks)

    def stored_count(self, nnz, chunks=1):
        return np.maximum(chunks, nnz)

    def steps(self, Cw, nnz, chunks=1):
        return np.maximum(chunks, np.asarray(nnz, dtype=np.int64))

    def row_steps(self, Cw, rows, chunks=1):
        if chunks == 1:
            return super().row_steps(Cw, rows)
        return skip_stored(Cw, np.asarray(rows, dtype=np.float16), chunks).sum(axis=1)

    def stream_columns(self, Cw):
        # A context's columns are whole mask words; its counted FACCs need no span.
        return [per for per in range(SKIP_WORD, Cw // 2 + 1, SKIP_WORD) if Cw % per == 0]

    def chunk_bytes(self, spec):
        if spec.chunks == 1:
            return 0
        return offsets(spec)[2] + align(2 * spec.kb * spec.columns, 8)

    def item_bytes(self, spec, nnz):
        if spec.chunks > 1:
            return spec.chunks * self.chunk_bytes(spec)
        return offsets(spec)[2] + align(2 * nnz, 8)

    def piece_bytes(self, spec, nnz, enc=None):
        if spec.chunks == 1:
            return None
        fixed = offsets(spec)[2]
        if enc is None:
            return [fixed + align(-(-2 * int(nnz) // spec.chunks), 8)] * spec.chunks
        per = enc.reshape(spec.kb, spec.chunks, spec.columns).sum(axis=(0, 2))
        return [fixed + align(2 * int(n), 8) for n in per]

    def encode(self, spec, blk):
        stored = skip_stored(spec.Cw, blk, spec.chunks)
        return stored, self.item_bytes(spec, int(stored.sum()))

    def item_data(self, spec, blk, stored, nbytes, base):
        off_m, off_t, off_v = offsets(spec)
        kb, cols = spec.kb, spec.columns
        r32 = cols // SKIP_WORD
        step = self.chunk_bytes(spec) or nbytes
        out = bytearray(nbytes)
        wide = np.zeros((kb, spec.Cw), dtype=np.float16)
        wide[:, :blk.shape[1]] = blk
        for q in range(spec.chunks):
            at = q * step
            part = stored[:, q * cols:(q + 1) * cols]
            words = np.packbits(part.reshape(kb, r32, SKIP_WORD), axis=2, bitorder="little")
            out[at + off_m:at + off_m + 4 * kb * r32] = words.tobytes()
            values, tokens = row_values(spec, wide[:, q * cols:(q + 1) * cols], part,
                                        base + at, off_v, continues=q > 0)
            out[at + off_t:at + off_t + 8 * kb] = np.array(tokens, dtype="<u8").tobytes()
            out[at + off_v:at + off_v + len(values)] = values
        return bytes(out)

    def facc_count(self, spec):
        return 0

    def add_streams(self, g, spec, add, ld_b, ld_x, facc):
        kb, gb, Cw, r32 = spec.kb, spec.gb, spec.Cw, spec.columns // SKIP_WORD
        off_m, off_t, _ = offsets(spec)
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
            value_stream(g, spec, add, rw[k], facc, k)

    def golden_events(self, plan, graph, placement, w16):
        # Every BPOS and value ITER emits one token per stored weight of its row.
        per_engine = balance.engine_row_steps(plan, w16)
        emitted = {}
        for node in graph.nodes:
            if node.op is Op.BPOS or node.op is Op.ITER and node.meta.get("role") == "itV":
                emitted[placement.where[node.id]] = int(per_engine[node.meta["engine"],
                                                                   node.meta["row"]])
        return {}, {}, emitted

    def held(self, k, spec, depth, sharers):
        # A stored weight's value load and its gb input loads each fill an operand queue of
        # their own, so the engines sharing a Dbuf keep up to sharers x (gb + 1) x depth loads
        # in flight to it: the more, the less a full queue leaves the Dbuf idle (docs/perf.md,
        # "Loads in flight").
        return 1 + k.queue + k.inflight / (sharers * (spec.gb + 1) * depth)

    def shared_by(self, spec):
        # A value feeds the gb FACCs of its row.
        return spec.gb

    def row_round_trip(self, k):
        # Each row has its own BPOS, input loads and value loads, at most operand-depth
        # tokens in flight each (docs/perf.md, "Rows in parallel").
        return k.row_trip
