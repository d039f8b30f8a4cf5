"""PE test program of the masked multicast ``MCAST`` (``docs/isa.md``): a block of rows that
share each loaded input, column by column, the sums written out from the ISA's text.

:func:`mcast_tables` draws the data from a seed, :func:`mcast_image` builds the graph,
:func:`mcast_reference` gives the bytes it stores.  Built and run like :mod:`tb.pe.cases`
(plain Python; the bench only reads the saved case).
"""

import random

import numpy as np

from sw.compiler.asm import assemble
from sw.compiler.dfg import Graph
from sw.compiler.place import place
from sw.spec import fp16
from sw.spec.isa import Op, count_token, loop_imm
from tb.pe.counted_cases import COUNTED_MAX_CONTEXTS, check_counted, counted_block
from tb.pe.graph_parts import ctx_address, imm_node

__all__ = ["MCAST_MAX_CONTEXTS", "MCAST_ROWS", "MCAST_COLS", "mcast_tables", "mcast_reference",
           "mcast_image"]

#: Contexts (a 256-byte block each in Dbufs 1 and up, as :mod:`tb.pe.counted_cases`), rows of
#: the block (the MCAST's destinations; its fourth mask bit selects nothing) and columns.
MCAST_MAX_CONTEXTS = COUNTED_MAX_CONTEXTS
MCAST_ROWS = 3
MCAST_COLS = 12
#: The shared inputs (SIMD-4 words, one per column) in Dbuf 0.
_IN = 0
#: A context's block: the rows' count tokens (value address, stored weights), the column
#: mask, the row-bits count token, the row-bits words (one per column the BPOS emits), the
#: values (row after row), the sums.
_AT_COUNT, _AT_MASK, _AT_RB_TOKEN, _AT_RB, _AT_VAL, _AT_OUT = 0, 24, 32, 40, 88, 224


def mcast_tables(seed, contexts, nibble):
    """Return the data of :func:`mcast_image` (a dict).

    Per context: ``rows`` (each row's stored columns, a 12-bit mask with at least one bit),
    ``mask`` (64-bit: the columns the BPOS emits among its low 12 bits, the union of the
    rows' and some columns no row stores; random bits above), ``row_bits`` (per emitted
    column a 32-bit word: random, with nibble ``nibble`` = the rows storing the column in bits
    0-2 and a random bit 3, which selects no destination), ``values`` (binary16 bit patterns
    of each row's stored weights); ``inputs``: a SIMD-4 word per column.
    """
    rng = random.Random(seed)
    t = dict(rows=[], mask=[], row_bits=[], values=[])
    for c in range(contexts):
        rows = [rng.choice([rng.getrandbits(MCAST_COLS), 1 << rng.randrange(MCAST_COLS),
                            (1 << MCAST_COLS) - 1]) or 1 for _ in range(MCAST_ROWS)]
        union = 0
        for r in rows:
            union |= r
        extra = rng.getrandbits(MCAST_COLS) & rng.getrandbits(MCAST_COLS)
        mask = union | extra | rng.getrandbits(52) << MCAST_COLS
        words = []
        for j in range(MCAST_COLS):
            if mask >> j & 1:
                sel = sum(1 << k for k, r in enumerate(rows) if r >> j & 1)
                sel |= rng.getrandbits(1) << 3
                w = rng.getrandbits(32) & ~(0xF << 4 * nibble) | sel << 4 * nibble
                words.append(w)
        values = [[int(v) for v in np.asarray([rng.uniform(-4, 4) for _ in range(bin(r).count(
            "1"))], dtype=np.float16).view(np.uint16)] for r in rows]
        t["rows"].append(rows)
        t["mask"].append(mask)
        t["row_bits"].append(words)
        t["values"].append(values)
    t["inputs"] = [int(fp16.pack4(np.asarray([rng.uniform(-2, 2) for _ in range(4)],
                                             dtype=np.float16).view(np.uint16)))
                   for _ in range(MCAST_COLS)]
    return t


def _segments(params, t, contexts):
    """Return the image's data: the inputs in Dbuf 0 and each context's tables in its block."""
    segments = {_IN: b"".join(v.to_bytes(8, "little") for v in t["inputs"])}
    for c in range(contexts):
        b = counted_block(params, c)
        at, counts = b + _AT_VAL, []
        for vals in t["values"][c]:
            counts.append(count_token(at, len(vals)))
            segments[at] = b"".join(v.to_bytes(2, "little") for v in vals)
            at += 2 * len(vals)
        words = t["row_bits"][c]
        segments[b + _AT_COUNT] = b"".join(v.to_bytes(8, "little") for v in counts + [
            t["mask"][c], count_token(b + _AT_RB, len(words))])
        segments[b + _AT_RB] = b"".join(w.to_bytes(4, "little") for w in words)
    return segments


def mcast_reference(params, seed, contexts, nibble=5):
    """Return ``{address: bytes}``: what :func:`mcast_image` stores, by the ISA's text: per
    context and row the sum from -0.0 of the row's values times the inputs of its columns,
    in column order; and the tables the host writes into the blocks."""
    t = mcast_tables(seed, contexts, nibble)
    out = {a: v for a, v in _segments(params, t, contexts).items() if a >= params.dbuf_bytes}
    for c in range(contexts):
        for k, row in enumerate(t["rows"][c]):
            acc = 0x8000_8000_8000_8000
            cols = [j for j in range(MCAST_COLS) if row >> j & 1]
            for v, j in zip(t["values"][c][k], cols):
                acc = int(fp16.simd4_fma(v * 0x0001_0001_0001_0001, t["inputs"][j], acc))
            out[counted_block(params, c) + _AT_OUT + 8 * k] = acc.to_bytes(8, "little")
    return out


def mcast_image(params, contexts, seed, nibble=5, pe=(0, 0)):
    """Return a graph in which one MCAST sends each loaded input to the rows that store its
    column (:func:`mcast_tables` gives the data, :func:`mcast_reference` the sums).

    Per context ``c`` (its block ``B``): a BPOS (count 12, step 8) over the column mask gives
    the input addresses (LDD); an ITER of count 0, step 4, over the row-bits count token gives
    the row-bits words (LDW); ``MCAST input, row bits`` (imm ``nibble``) sends each input to
    the FACCs of the rows whose bits are set (none for a column no row stores).  Per row an
    ITER of count 0, step 2, over its count token gives its values (LDHB); a FACC whose count
    operand is that token sums values times inputs; STD at ``B + 224 + 8 k`` (each an END).
    """
    check_counted(params, contexts)
    t = mcast_tables(seed, contexts, nibble)
    g = Graph(f"mcast-{seed}-{nibble}")
    segments = _segments(params, t, contexts)

    def node(op, imm=0, end=False, nsrc=None):

        return g.add(op, nsrc, imm=imm, end=end, pe=pe, group=pe)

    c = node(Op.CTX)
    block = ctx_address(g, c, params.dbuf_bytes, 8, pe)
    counts = [node(Op.LDD, imm=_AT_COUNT + 8 * k) for k in range(MCAST_ROWS)]
    mask, rb_token = node(Op.LDD, imm=_AT_MASK), node(Op.LDD, imm=_AT_RB_TOKEN)
    sums = [node(Op.FACC) for _ in range(MCAST_ROWS)]
    stores = [node(Op.STD, imm=_AT_OUT + 8 * k, end=True) for k in range(MCAST_ROWS)]
    g.fanout(block, [(n, 0) for n in counts + [mask, rb_token] + stores])
    cols = node(Op.BPOS, imm=loop_imm(MCAST_COLS, 8))
    g.connect(mask, cols, 0)
    g.connect(imm_node(g, c, _IN, pe), cols, 1)
    inputs = node(Op.LDD)
    g.connect(cols, inputs, 0)
    rb_iter, rb = node(Op.ITER, imm=loop_imm(0, 4)), node(Op.LDW)
    g.connect(rb_token, rb_iter, 0)
    g.connect(rb_iter, rb, 0)
    mc = node(Op.MCAST, imm=nibble, nsrc=2)
    g.connect(inputs, mc, 0)
    g.connect(rb, mc, 1)
    for k in range(MCAST_ROWS):
        it, val = node(Op.ITER, imm=loop_imm(0, 2)), node(Op.LDHB)
        g.fanout(counts[k], [(it, 0), (sums[k], 2)])
        g.connect(it, val, 0)
        g.connect(val, sums[k], 0)
        g.connect(mc, sums[k], 1)
        g.connect(sums[k], stores[k], 1)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)
