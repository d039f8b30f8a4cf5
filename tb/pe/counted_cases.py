"""PE test programs of the data-dependent instructions: ``BPOS``, ``ITER`` with a token count and
``FACC`` with a count operand (``docs/isa.md``), with their results written out from the ISA's
text.

:func:`emitters_image` stores every token of token-count ITERs and BPOSes (and has a count-0 ITER
and an all-zero BPOS that must send nothing); :func:`counted_facc_image` sums rows of varying
length with counted FACCs whose count arrives early or late.  :func:`counted_tables` draws the
data of both from a seed; ``*_reference`` give the bytes they store.  Built and run like
:mod:`tb.pe.cases` (plain Python; the bench only reads the saved case).
"""

import random

import numpy as np

from sw.compiler.asm import assemble
from sw.compiler.dfg import Graph
from sw.compiler.place import place
from sw.spec import fp16
from sw.spec.isa import Op, count_token, loop_imm
from tb.pe.graph_parts import chain, ctx_address, imm_node

__all__ = ["COUNTED_MAX_CONTEXTS", "counted_block", "check_counted", "counted_tables",
           "emitters_reference", "emitters_image", "counted_facc_reference", "counted_facc_image"]


#: Data-dependent cases (:func:`emitters_image`, :func:`counted_facc_image`): at most this many
#: contexts, each with a 256-byte block in Dbufs 1 and up.
COUNTED_MAX_CONTEXTS = 12
#: The first contexts' BPOS masks of :func:`emitters_image` (low 32 bits; random high halves):
#: count 32 (bit 0, bit 31, all ones, the ends, then random), count 20 (bit 19 only, bit 0
#: and bits at 20 and up, all ones, then random) and the masks of the sinks that must never
#: emit (none, bit 31 only, bits at 8 and up only).
_EM_DOWN = [1, 1 << 31, 0xFFFF_FFFF, 0x8000_0001]
_EM_UP = [1 << 19, 0xFFF0_0001, 0xFFFF_FFFF]
_EM_NONE = [0, 1 << 31, 0xFFFF_FF00]
#: :func:`emitters_image`'s tables in Dbuf 0 (8 bytes per context each): the ITER's count
#: tokens, the masks of the count-32 and count-20 BPOS, the count-32 BPOS's count tokens and
#: the sinks' tokens.
_EM_W, _EM_DOWN_AT, _EM_UP_AT, _EM_D, _EM_Z = 0, 128, 256, 384, 512
#: Where a context's block holds each stream: the count-32 BPOS's words (step -4 from 124),
#: the count-20 BPOS's halfwords (step 2 from 128), the ITER's halfwords (from 168), the two
#: sums of acknowledgements (the ENDs).
_EM_AT_DOWN, _EM_AT_UP, _EM_AT_ITER, _EM_AT_T, _EM_AT_T2 = 124, 128, 168, 240, 248
#: The first contexts' FACC counts of :func:`counted_facc_image` (then random in 1..6).
_CF_COUNTS = [1, 6, 2, 1, 5, 3]
#: Whether the first contexts' count tokens have the continue bit (then random).
_CF_CONTINUES = [False, True, True, False, True]
#: :func:`counted_facc_image`'s tables in Dbuf 0: the FACCs' count tokens, their BPOS masks
#: (8 bytes per context each), the binary16 values and the SIMD-4 weights.
_CF_V, _CF_N, _CF_VAL, _CF_ONE = 0, 128, 256, 320
_CF_VALUES, _CF_WEIGHTS = 32, 16
_CF_AT_EARLY, _CF_AT_LATE = 240, 248


def counted_block(params, c):
    """Return context ``c``'s 256-byte block (in Dbufs 1 and up)."""
    return params.dbuf_bytes + 256 * c


def check_counted(params, contexts):
    """Raise ``ValueError`` unless ``contexts`` blocks fit Dbufs 1 and up."""
    if not 1 <= contexts <= COUNTED_MAX_CONTEXTS or \
            contexts * 256 > params.memory_bytes - params.dbuf_bytes:
        raise ValueError(f"{contexts} contexts: 1 .. {COUNTED_MAX_CONTEXTS} blocks of 256 bytes "
                         f"in Dbufs 1 and up")


def _popcount(v):
    return bin(v).count("1")


def counted_tables(seed, contexts):
    """Return the data of :func:`emitters_image` and :func:`counted_facc_image` (a dict).

    ``down``, ``up`` (64-bit masks of the count-32 and count-20 BPOS: at least one set bit
    among the low 32 resp. 20, random high halves), ``none`` (64-bit sink masks: no set bit
    among the low 8, count 0 in bits 47:32); ``facc_counts`` (1..6), ``offsets`` (each
    FACC row's first value), ``facc_masks`` (64-bit: ``facc_count`` set bits among the low
    16, random bits above), ``continues`` (the count token's continue bit: the context's sums go
    on from the previous context's; never context 0's), ``values`` (binary16 bit patterns),
    ``weights`` (SIMD-4 words).
    The ITER of :func:`emitters_image` emits ``popcount(up & 0xFFFFF)`` tokens (1..20).
    """
    rng = random.Random(seed)

    def first(table, i, draw):
        return table[i] if i < len(table) else draw()

    def some_bits(width):
        return rng.choice([rng.getrandbits(width), 1 << rng.randrange(width),
                           rng.getrandbits(width) & rng.getrandbits(width)]) or 1

    t = dict(down=[], up=[], none=[], facc_counts=[], offsets=[], facc_masks=[])
    for c in range(contexts):
        t["down"].append(first(_EM_DOWN, c, lambda: some_bits(32)) | rng.getrandbits(32) << 32)
        t["up"].append(first(_EM_UP, c, lambda: some_bits(20) | rng.getrandbits(12) << 20)
                       | rng.getrandbits(32) << 32)
        t["none"].append(first(_EM_NONE, c, lambda: rng.getrandbits(24) << 8)
                         | rng.getrandbits(16) << 48)
        k = first(_CF_COUNTS, c, lambda: rng.randint(1, 6))
        t["facc_counts"].append(k)
        t["offsets"].append(rng.randint(0, _CF_VALUES - k))
        bits = rng.sample(range(16), k)
        t["facc_masks"].append(sum(1 << b for b in bits) | rng.getrandbits(48) << 16)
    # Whether each context's FACCs go on from the previous context's sums (the count token's
    # continue bit), from a generator of their own so that the other tables stay as they were.
    more = random.Random(seed + 0x5EED)
    t["continues"] = [c > 0 and first(_CF_CONTINUES, c, lambda: more.random() < 0.5)
                      for c in range(contexts)]
    t["values"] = [int(v) for v in np.asarray([rng.uniform(-4, 4) for _ in range(_CF_VALUES)],
                                              dtype=np.float16).view(np.uint16)]
    t["weights"] = [int(fp16.pack4(np.asarray([rng.uniform(-2, 2) for _ in range(4)],
                                              dtype=np.float16).view(np.uint16)))
                    for _ in range(_CF_WEIGHTS)]
    return t


def emitters_reference(params, seed, contexts):
    """Return ``{address: bytes}``: what :func:`emitters_image` stores, by the ISA's text.

    BPOS emits ``base + j * step`` per set bit ``j < count`` of the mask's low 32 bits, in
    increasing ``j``; ITER with count 0 emits ``count`` tokens ``start + i * step`` of its
    count token (bits 47:32, 31:0); each token is stored at itself (STW, STH).
    """
    t = counted_tables(seed, contexts)
    out = {}
    for c in range(contexts):
        block = counted_block(params, c)
        for mask, count, step, at, size in ((t["down"][c], 32, -4, _EM_AT_DOWN, 4),
                                            (t["up"][c], 20, 2, _EM_AT_UP, 2)):
            for j in range(count):
                if mask >> j & 1:
                    a = block + at + j * step
                    out[a] = (a & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        for i in range(_popcount(t["up"][c] & 0xF_FFFF)):
            a = block + _EM_AT_ITER + 2 * i
            out[a] = (a & 0xFFFF).to_bytes(2, "little")
    return out


def emitters_image(params, contexts, seed, pe=(0, 0)):
    """Return a graph of ITER with a token count and BPOS whose every token is stored, and of
    the two with no token to emit (:func:`counted_tables` gives the data,
    :func:`emitters_reference` the stores).

    Per context ``c`` (its 256-byte block ``B`` in Dbufs 1 and up):

    * BPOS count 32, step -4 from ``B + 124`` over ``down[c]``: STW of each token at itself;
      a FACC with a count operand (the popcount, from a table) sums the store
      acknowledgements and STD stores the sum at ``B + 248`` (an END);
    * BPOS count 20, step 2 from ``B + 128`` over ``up[c]`` and an ITER of count 0, step 2,
      over the count token ``(B + 168, popcount of up's low 20 bits)``: STH of each token at
      itself; a FACC with that count token as its count operand sums the two streams'
      acknowledgements (one from each), STD at ``B + 240`` (an END).  So every store is in
      before its context ends;
    * an ITER of count 0 and a BPOS of count 8 over ``none[c]`` (count 0 in its bits 47:32, no
      set bit among the low 8): each fires once per context and emits nothing (its STW would
      store at a wrong address or none, and fire).
    """
    check_counted(params, contexts)
    t = counted_tables(seed, contexts)
    g = Graph(f"emitters-{seed}")
    words = {
        _EM_W: [count_token(counted_block(params, c) + _EM_AT_ITER, _popcount(m & 0xF_FFFF))
                for c, m in enumerate(t["up"])],
        _EM_DOWN_AT: t["down"], _EM_UP_AT: t["up"],
        _EM_D: [count_token(0, _popcount(m & 0xFFFF_FFFF)) for m in t["down"]],
        _EM_Z: t["none"],
    }
    segments = {at: b"".join(v.to_bytes(8, "little") for v in vs) for at, vs in words.items()}

    def node(op, imm=0, end=False):
        return g.add(op, imm=imm, end=end, pe=pe, group=pe)

    def store_self(src, op):
        st = node(op)
        g.fanout(src, [(st, 0), (st, 1)])
        return st

    c = node(Op.CTX)
    c8 = chain(g, c, [(Op.SHL, 3)], pe)
    block = ctx_address(g, c, params.dbuf_bytes, 8, pe)
    ld = {at: node(Op.LDD, imm=at) for at in words}
    g.fanout(c8, [(n, 0) for n in ld.values()])
    down = node(Op.BPOS, imm=loop_imm(32, -4))
    up = node(Op.BPOS, imm=loop_imm(20, 2))
    it = node(Op.ITER, imm=loop_imm(0, 2))
    g.connect(ld[_EM_DOWN_AT], down, 0)
    g.connect(ld[_EM_UP_AT], up, 0)
    g.connect(chain(g, block, [(Op.ADD, _EM_AT_DOWN)], pe), down, 1)
    g.connect(chain(g, block, [(Op.ADD, _EM_AT_UP)], pe), up, 1)
    sum2, sum1 = node(Op.FACC), node(Op.FACC)
    g.fanout(store_self(down, Op.STW), [(sum2, 0), (sum2, 1)])
    g.connect(ld[_EM_D], sum2, 2)
    g.connect(store_self(up, Op.STH), sum1, 0)
    g.connect(store_self(it, Op.STH), sum1, 1)
    g.fanout(ld[_EM_W], [(it, 0), (sum1, 2)])
    ends = [node(Op.STD, imm=at, end=True) for at in (_EM_AT_T, _EM_AT_T2)]
    g.fanout(block, [(st, 0) for st in ends])
    g.connect(sum1, ends[0], 1)
    g.connect(sum2, ends[1], 1)
    # The emitters with nothing to emit, into stores that must never fire.
    it0, bp0 = node(Op.ITER, imm=loop_imm(0, 1)), node(Op.BPOS, imm=loop_imm(8, 4))
    g.fanout(ld[_EM_Z], [(it0, 0), (bp0, 0), (bp0, 1)])
    store_self(it0, Op.STW)
    store_self(bp0, Op.STW)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


def counted_facc_reference(params, seed, contexts):
    """Return ``{address: bytes}``: what :func:`counted_facc_image` stores, by the ISA's text:
    per context the sum of ``facc_counts[c]`` products from -0.0, or with ``continues[c]``
    from the previous context's sum (values ``offsets[c] ..`` times the weights at the set
    bits of ``facc_masks[c]``, in order), twice."""
    t = counted_tables(seed, contexts)
    out = {}
    for c in range(contexts):
        o = t["offsets"][c]
        bits = [j for j in range(16) if t["facc_masks"][c] >> j & 1]
        if not t["continues"][c]:
            acc = 0x8000_8000_8000_8000
        for i, j in enumerate(bits):
            acc = int(fp16.simd4_fma(t["values"][o + i] * 0x0001_0001_0001_0001,
                                     t["weights"][j], acc))
        for at in (_CF_AT_EARLY, _CF_AT_LATE):
            out[counted_block(params, c) + at] = acc.to_bytes(8, "little")
    return out


def counted_facc_image(params, contexts, seed, late_hops=3, pe=(0, 0)):
    """Return a graph of two FACCs with a count operand over data-dependent streams
    (:func:`counted_tables` gives the data, :func:`counted_facc_reference` the sums).

    Per context ``c``: an ITER of count 0, step 2, over the count token ``(values + 2
    offsets[c], facc_counts[c])`` gives value addresses (LDHB), a BPOS count 16, step 8, over
    ``facc_masks[c]`` weight addresses (LDD); two FACCs sum the products, one whose count
    operand is that count token (it arrives before its first step's operands) and one whose
    count operand comes ``late_hops`` MOVs later, each sum from -0.0 or, where the token's
    continue bit is set, from the previous context's; STD of each sum at ``B + 240``, ``B + 248``
    (both END).  With the MicC's window 4 contexts are in flight: a FACC's next count operand
    often waits in its FIFO while the steps of the accumulation before it go on.
    """
    check_counted(params, contexts)
    t = counted_tables(seed, contexts)
    g = Graph(f"counted-facc-{seed}")
    segments = {
        _CF_V: b"".join(count_token(_CF_VAL + 2 * o, k, cont).to_bytes(8, "little")
                        for o, k, cont in zip(t["offsets"], t["facc_counts"], t["continues"])),
        _CF_N: b"".join(v.to_bytes(8, "little") for v in t["facc_masks"]),
        _CF_VAL: b"".join(v.to_bytes(2, "little") for v in t["values"]),
        _CF_ONE: b"".join(v.to_bytes(8, "little") for v in t["weights"]),
    }

    def node(op, imm=0, end=False):
        return g.add(op, imm=imm, end=end, pe=pe, group=pe)

    c = node(Op.CTX)
    c8 = chain(g, c, [(Op.SHL, 3)], pe)
    block = ctx_address(g, c, params.dbuf_bytes, 8, pe)
    counts, masks = node(Op.LDD, imm=_CF_V), node(Op.LDD, imm=_CF_N)
    g.fanout(c8, [(counts, 0), (masks, 0)])
    rows = node(Op.ITER, imm=loop_imm(0, 2))
    vals = node(Op.LDHB)
    g.connect(rows, vals, 0)
    cols = node(Op.BPOS, imm=loop_imm(16, 8))
    g.connect(masks, cols, 0)
    g.connect(imm_node(g, c, _CF_ONE, pe), cols, 1)
    weights = node(Op.LDD)
    g.connect(cols, weights, 0)
    early, late = node(Op.FACC), node(Op.FACC)
    g.fanout(counts, [(rows, 0), (early, 2)] + ([] if late_hops else [(late, 2)]))
    if late_hops:
        g.connect(chain(g, counts, [(Op.MOV, 0)] * late_hops, pe), late, 2)
    g.fanout(vals, [(early, 0), (late, 0)])
    g.fanout(weights, [(early, 1), (late, 1)])
    for acc, at in ((early, _CF_AT_EARLY), (late, _CF_AT_LATE)):
        st = node(Op.STD, imm=at, end=True)
        g.connect(block, st, 0)
        g.connect(acc, st, 1)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)
