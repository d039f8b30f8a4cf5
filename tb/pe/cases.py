"""Test programs for the PE benches, built with the golden-model toolchain.

Each case is a graph (:mod:`sw.compiler.dfg`), placed (:func:`sw.compiler.place.place`), assembled
into a binary image (:func:`sw.compiler.asm.assemble`) and run on the golden interpreter
(:func:`sw.models.golden.run_image`). :func:`save_case` writes ``image.npz`` plus ``expected.json``
(memory after the run, firings per opcode, context ends, LOAD/STORE requests) into a folder; the
cocotb bench (``tb.pe.test_pe``) runs the image on the generated Verilog and compares everything bit
for bit.

Plain Python: the pytest layer builds the cases, the bench only reads them.
"""

import json
import random
from pathlib import Path

import numpy as np

from sw.compiler import dbuf_layout, fc_plan, graphs, layers, planner
from sw.compiler.asm import assemble
from sw.compiler.dfg import Graph
from sw.compiler.image import load
from sw.compiler.place import place
from sw.models.golden import run_image
from sw.spec import fp16
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op, count_token, loop_imm

__all__ = ["PARAMS_1X1", "PARAMS_2X2", "top_params", "array_params", "save_case", "swap_image",
           "read_case", "fc_image", "fig7_image", "random_image", "kernels_image",
           "bscan_image", "bscan_tables", "bscan_reference", "ldhbz_image", "ldhbz_tables",
           "ldhbz_reference", "COUNTED_MAX_CONTEXTS", "counted_tables", "emitters_image",
           "emitters_reference", "counted_facc_image", "counted_facc_reference"]

#: Array configurations of the tests: small slots, small Dbufs (fast Verilog, fast builds).
PARAMS_1X1 = ArrayParams(rows=1, cols=1, slots=32, dbuf_bytes=1024)
PARAMS_2X2 = ArrayParams(rows=2, cols=2, slots=16, dbuf_bytes=1024)


def top_params(params, x=-1, y=-1, micc=(-1, 0)):
    """Return the ``pe`` top parameters (``tb.host.tops``) of a PE of ``params``.

    ``x = y = -1`` (default): the PE takes its coordinate on ``i_coord`` (the bench drives
    ``(0, 0)``, or ``FDPU_PE_COORD``); otherwise it is built with the constant ``(x, y)``.
    """
    return dict(rows=params.rows, cols=params.cols, slots=params.slots,
                operand_depth=params.operand_depth, regs=params.regs,
                dbuf_bytes=params.dbuf_bytes, x=x, y=y, micc_x=micc[0], micc_y=micc[1],
                int_issue=params.int_issue)


def array_params(params, micc=(-1, 0), depth=4):
    """Return the ``make_pe_array`` keywords of an array of ``params``."""
    return dict(rows=params.rows, cols=params.cols, slots=params.slots,
                operand_depth=params.operand_depth, regs=params.regs,
                dbuf_bytes=params.dbuf_bytes, micc_x=micc[0], micc_y=micc[1], depth=depth)


def save_case(folder, image, name, seed=None, jitter=4):
    """Run ``image`` on the golden model and write the case into ``folder``; return the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    res = run_image(image, seed=seed, jitter=jitter)
    image.save(folder / "image.npz")
    expected = dict(name=name,
                    ops={k: int(v) for k, v in sorted(res.counters.ops.items()) if v},
                    ctx_ends=res.counters.ctx_ends,
                    requests=res.counters.mem_packets // 2,     # a request and its reply
                    memory={str(d): bytes(buf).hex() for d, buf in sorted(res.memory.bufs.items())})
    (folder / "expected.json").write_text(json.dumps(expected))
    return folder


def read_case(folder):
    """Return ``(image, expected dict)`` of a case folder."""
    folder = Path(folder)
    return load(folder / "image.npz"), json.loads((folder / "expected.json").read_text())


def fc_image(mode, k, c, n, params, seed, feedback=True, window=None,
             sparse_graph=fc_plan.DEFAULT_SPARSE_GRAPH):
    """Return the image of pass 0 of an FC layer (``k x c`` weights, batch ``n``)."""
    w = layers.make_weights((k, c), 0.4, seed)
    x = layers.make_inputs(c, n, seed + 1)
    plan = planner.plan_fc(k, c, n, mode, params, feedback=feedback, sparse_graph=sparse_graph)
    if plan.passes != 1:
        raise ValueError(f"the FC case needs one pass, the plan has {plan.passes}")
    g = graphs.build_graph(plan)
    if feedback:
        g.validate(params)
    segments, _ = dbuf_layout.pass_memory(plan, w, x, 0)
    return assemble(g, place(g, params), segments, plan.pass_contexts(0), window=window)


def _imm(g, trigger, value, pe):
    n = g.add(Op.IMM, imm=value, pe=pe, group=pe)
    g.connect(trigger, n, 0)
    return n


def _ctx_address(g, c, base, shift, pe):
    """Return a node computing ``base + (c << shift)``."""
    sh = g.add(Op.SHL, 1, imm=shift, pe=pe, group=pe)
    g.connect(c, sh, 0)
    a = g.add(Op.ADD, 1, imm=base, pe=pe, group=pe)
    g.connect(sh, a, 0)
    return a


def _chain(g, src, steps, pe):
    """Return the last node of a chain of one-operand ``steps`` ``(op, imm)`` fed by ``src``."""
    for op, imm in steps:
        n = g.add(op, 1, imm=imm, pe=pe, group=pe)
        g.connect(src, n, 0)
        src = n
    return src


def _store_stream(g, addr, value, op, offset, count, pe):
    """Store ``count`` tokens of ``value`` at ``addr``'s tokens + ``offset``; END when all are in.

    A FACC counts the stores' acknowledgements (its two operands: the ack token, twice) and
    emits once after ``count`` of them; a MOV with END then ends the context.
    """
    st = g.add(op, imm=offset, pe=pe, group=pe)
    g.connect(addr, st, 0)
    g.connect(value, st, 1)
    acks = g.add(Op.FACC, imm=count, pe=pe, group=pe)
    g.fanout(st, [(acks, 0), (acks, 1)])
    done = g.add(Op.MOV, end=True, pe=pe, group=pe)
    g.connect(acks, done, 0)


def fig7_image(params, contexts, feedback=True, long_chain=6, pe=(0, 0)):
    """Return PAPER.md Fig. 7: a SWITCH whose branches have different lengths rejoin.

    Context ``c`` takes the long branch (``long_chain`` ADDs) when ``c`` is even, the short one
    (one ADD) when odd; the join stores ``c + 1000 * branch`` at ``OUT + 8 c`` with the address
    computed on a separate path.  Without the feedback edge a fast odd context can overtake a
    slow even one at the join and the stored values land at the wrong addresses.
    """
    g = Graph("fig7" + ("" if feedback else "-nofeedback"))
    out = params.dbuf_bytes          # Dbuf 1
    c = g.add(Op.CTX, pe=pe, group=pe)
    cond = g.add(Op.AND, 1, imm=1, pe=pe, group=pe)
    g.connect(c, cond, 0)
    sw = g.add(Op.SWITCH, 3 if feedback else 2, pe=pe, group=pe)
    g.connect(c, sw, 0)
    g.connect(cond, sw, 1)
    prev, branch = sw, False          # cond == 0 (even) -> False branch: the long one
    for i in range(long_chain):
        n = g.add(Op.ADD, 1, imm=1000 if i == 0 else 0, pe=pe, group=pe)
        g.connect(prev, n, 0, branch=branch if prev == sw else None)
        prev = n
    long_end = prev
    short = g.add(Op.ADD, 1, imm=2000, pe=pe, group=pe)
    g.connect(sw, short, 0, branch=True)
    join = g.add(Op.MOV, pe=pe, group=pe)
    g.connect(long_end, join, 0)
    g.connect(short, join, 0)
    if feedback:
        g.connect(join, sw, 2, init=1)
    st = g.add(Op.STD, end=True, pe=pe, group=pe)
    g.connect(_ctx_address(g, c, out, 3, pe), st, 0)
    g.connect(join, st, 1)
    if feedback:
        g.validate(params)
    return assemble(g, place(g, params), {}, contexts)


def kernels_image(params, contexts, pe=(0, 0)):
    """Return a graph touching ITER, SCAN, FACC, loads of every size, LDHB and the stores.

    Per context ``c``: ITER emits 4 indices ``4c .. 4c+3``; LDD/LDHB of two input tables feed a
    FACC of 4 steps; SCAN sums the indices onto a loaded LDW base; LDH reads a 2-byte value;
    the results are stored with STD/STW/STH (each store ENDs).
    """
    g = Graph("kernels")
    rng = random.Random(7)
    tab_a, tab_b, tab_w = 0, 256, 512                     # Dbuf 0
    out = params.dbuf_bytes                               # Dbuf 1
    n_idx = 4 * contexts
    segments = {
        tab_a: bytes(rng.getrandbits(8) & 0x3F if i % 2 else rng.getrandbits(8)
                     for i in range(8 * min(n_idx, 32))),
        tab_b: np.asarray([rng.uniform(-2, 2) for _ in range(min(n_idx, 32))],
                          dtype=np.float16).tobytes(),
        tab_w: bytes(rng.getrandbits(8) for _ in range(4 * min(n_idx, 32))),
    }
    c = g.add(Op.CTX, pe=pe, group=pe)
    first = g.add(Op.SHL, 1, imm=2, pe=pe, group=pe)                # 4c
    g.connect(c, first, 0)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), pe=pe, group=pe)
    g.connect(first, it, 0)
    idx = g.add(Op.AND, 1, imm=31, pe=pe, group=pe)                 # tables hold 32 entries
    g.connect(it, idx, 0)
    a8 = g.add(Op.SHL, 1, imm=3, pe=pe, group=pe)
    g.connect(idx, a8, 0)
    a2 = g.add(Op.SHL, 1, imm=1, pe=pe, group=pe)
    g.connect(idx, a2, 0)
    lda = g.add(Op.LDD, imm=tab_a, pe=pe, group=pe)
    g.connect(a8, lda, 0)
    ldb = g.add(Op.LDHB, imm=tab_b, pe=pe, group=pe)
    g.connect(a2, ldb, 0)
    acc = g.add(Op.FACC, imm=4, pe=pe, group=pe)
    g.connect(lda, acc, 0)
    g.connect(ldb, acc, 1)
    # SCAN over the 4 indices, base loaded per index from tab_w (LDW).
    ldw = _chain(g, idx, [(Op.SHL, 2), (Op.LDW, tab_w)], pe)
    sc = g.add(Op.SCAN, imm=4, pe=pe, group=pe)
    g.connect(ldw, sc, 0)
    g.connect(idx, sc, 1)
    # Store the 4 SCAN outputs at one address (the last one stays: a slot's stores retire in
    # order), then a FACC of the 4 acknowledgements gives one token per context for the END.
    # LDH of a 2-byte value per context.
    ldh = _chain(g, c, [(Op.AND, 31), (Op.SHL, 1), (Op.LDH, tab_b)], pe)
    # Stores: 16 bytes per context.
    base = _ctx_address(g, c, out, 4, pe)
    s1 = g.add(Op.STD, end=True, pe=pe, group=pe)
    g.connect(base, s1, 0)
    g.connect(acc, s1, 1)
    s2a = g.add(Op.ITER, imm=4, pe=pe, group=pe)                     # step 0: the address 4 times
    g.connect(base, s2a, 0)
    s2 = g.add(Op.STW, imm=8, pe=pe, group=pe)
    g.connect(s2a, s2, 0)
    g.connect(sc, s2, 1)
    acks = g.add(Op.FACC, imm=4, pe=pe, group=pe)
    g.fanout(s2, [(acks, 0), (acks, 1)])
    done = g.add(Op.MOV, end=True, pe=pe, group=pe)
    g.connect(acks, done, 0)
    s3 = g.add(Op.STH, imm=12, end=True, pe=pe, group=pe)
    g.connect(base, s3, 0)
    g.connect(ldh, s3, 1)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


#: Masks of :func:`bscan_image` (context ``c`` takes entry ``c % 16``): none, all, the ends,
#: alternating bits, then random ones.
BSCAN_MASKS = [0, 0xFFFF_FFFF, 0x8000_0001, 0x5555_AAAA, 0x0000_18C3]
#: Bases of :func:`bscan_image` (context ``c`` takes entry ``(c + 1) % 16``, so all ones
#: meets a base that wraps past 2**32 and the ends meet 0), then random ones.
BSCAN_BASES = [0x0001_0000, 0x0000_0100, 0xFFFF_FFF0, 0]
#: The BSCAN counts of :func:`bscan_image`, and the byte offsets of their tokens in a context's
#: 256-byte output block (4 bytes per token).
BSCAN_COUNTS = ((1, 0), (16, 4), (32, 68))


def bscan_tables(seed):
    """Return ``(masks, bases)``: the 16 masks and 16 bases :func:`bscan_image` loads."""
    rng = random.Random(seed)
    masks = BSCAN_MASKS + [rng.getrandbits(32) for _ in range(16 - len(BSCAN_MASKS))]
    bases = BSCAN_BASES + [rng.getrandbits(32) for _ in range(16 - len(BSCAN_BASES))]
    return masks, bases


def bscan_reference(mask, base, count):
    """Return the ``count`` tokens of ``BSCAN mask, base`` by their definition."""
    return [(base + 2 * bin(mask & ((2 << j) - 1)).count("1")) & 0xFFFF_FFFF
            if mask >> j & 1 else 0 for j in range(count)]


def bscan_image(params, contexts, seed, pe=(0, 0)):
    """Return a graph of three BSCANs (counts 1, 16, 32) whose every token is stored.

    Context ``c`` loads mask ``c % 16`` and base ``(c + 1) % 16`` of
    :func:`bscan_tables` (LDW) into each BSCAN; an ITER per BSCAN emits the store addresses
    (4 bytes apart in the context's 256-byte block of Dbufs 1 and up), STW stores each token,
    and a FACC of each BSCAN's store acknowledgements gives the context its END.
    """
    if contexts * 256 > params.memory_bytes - params.dbuf_bytes:
        raise ValueError(f"{contexts} contexts of 256 bytes do not fit Dbufs 1 and up")
    g = Graph(f"bscan-{seed}")
    masks, bases = bscan_tables(seed)
    tab_m, tab_b = 0, 64                                   # Dbuf 0
    out = params.dbuf_bytes                                # Dbuf 1 and up
    segments = {tab_m: b"".join(v.to_bytes(4, "little") for v in masks),
                tab_b: b"".join(v.to_bytes(4, "little") for v in bases)}
    c = g.add(Op.CTX, pe=pe, group=pe)
    ldm = _chain(g, c, [(Op.AND, 15), (Op.SHL, 2), (Op.LDW, tab_m)], pe)
    ldb = _chain(g, c, [(Op.ADD, 1), (Op.AND, 15), (Op.SHL, 2), (Op.LDW, tab_b)], pe)
    block = _ctx_address(g, c, out, 8, pe)
    scans, iters = [], []
    for count, offset in BSCAN_COUNTS:
        bs = g.add(Op.BSCAN, imm=count, pe=pe, group=pe)
        scans.append(bs)
        it = g.add(Op.ITER, imm=loop_imm(count, 4), pe=pe, group=pe)
        iters.append(it)
        _store_stream(g, it, bs, Op.STW, offset, count, pe)
    g.fanout(ldm, [(bs, 0) for bs in scans])
    g.fanout(ldb, [(bs, 1) for bs in scans])
    g.fanout(block, [(it, 0) for it in iters])
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


#: Masks of :func:`ldhbz_image` (context ``c`` takes entry ``c % 16``): every weight zero,
#: none, the ends, alternating, then random ones.
LDHBZ_MASKS = [0, 0xFFFF, 0x8001, 0x55AA]
#: The value table of :func:`ldhbz_image`: binary16 values, and its byte address in Dbuf 0.
LDHBZ_VALUES = 20
#: Immediate of :func:`ldhbz_image`'s second LDHBZ: ``0 + imm`` is outside every Dbuf, so a
#: skipped load that checked its address would raise BAD_ADDRESS.
LDHBZ_FAR = -(1 << 31)
_LDHBZ_TAB_M, _LDHBZ_TAB_A, _LDHBZ_TAB_V = 0, 64, 256          # Dbuf 0


def ldhbz_tables(seed):
    """Return ``(masks, words, values)``: the tables :func:`ldhbz_image` loads.

    ``masks``: 16 16-bit BSCAN masks; ``words``: 16 64-bit address tokens for the far LDHBZ
    (0, high bits only, or a value's address minus :data:`LDHBZ_FAR` under random high bits);
    ``values``: :data:`LDHBZ_VALUES` binary16 bit patterns (non-zero).
    """
    rng = random.Random(seed)
    masks = LDHBZ_MASKS + [rng.getrandbits(16) for _ in range(16 - len(LDHBZ_MASKS))]
    values = [rng.randrange(1, 1 << 16) for _ in range(LDHBZ_VALUES)]
    words = []
    for i in range(16):
        hi = rng.getrandbits(32) << 32
        kind = i % 4 if i < 4 else rng.randrange(4)
        if kind == 0:
            words.append(0)
        elif kind == 1:
            words.append(hi or 1 << 40)                      # low 32 bits 0: skipped
        else:
            addr = _LDHBZ_TAB_V + 2 * rng.randrange(LDHBZ_VALUES)
            words.append(hi | ((addr - LDHBZ_FAR) & 0xFFFF_FFFF))
    return masks, words, values


def ldhbz_reference(seed, c):
    """Return ``(tokens, requests)`` of context ``c`` of :func:`ldhbz_image` by the ISA.

    ``tokens``: the 20 64-bit LDHBZ results the context stores (16 of the BSCAN chain, then 4
    of the far chain); ``requests``: the LOAD/STORE requests it sends (the LDW, the LDDs, the
    20 stores and one LDHBZ per non-zero address token).
    """
    masks, words, values = ldhbz_tables(seed)
    bcast = 0x0001_0001_0001_0001
    mask, base = masks[c % 16], 2 * (c % 4)
    tokens, requests = [], 1 + 4 + 20
    for j, t in enumerate(bscan_reference(mask, base, 16)):
        # BSCAN's token: base + 2 x (rank of the weight), the LDHBZ's immediate points 2 bytes
        # before the table: value (base / 2 + rank - 1).
        tokens.append(values[t // 2 - 1] * bcast if t else 0)
        requests += t != 0
    for i in range(4):
        t = words[(4 * c + i) % 16]
        low = t & 0xFFFF_FFFF
        if low:
            tokens.append(values[(((low + LDHBZ_FAR) & 0xFFFF_FFFF) - _LDHBZ_TAB_V) // 2]
                          * bcast)
        else:
            tokens.append(0)
        requests += low != 0
    return tokens, requests


def ldhbz_image(params, contexts, seed, pe=(0, 0)):
    """Return a graph of two LDHBZ slots fed zero and non-zero address tokens.

    Per context ``c``: BSCAN of mask ``c % 16`` (LDW) from base ``2 (c % 4)`` emits 16
    tokens (0 for a zero bit) into LDHBZ ``table - 2``, and an ITER of 4 indices reads 64-bit
    address tokens (LDD; some 0, some with only high bits set) into LDHBZ
    :data:`LDHBZ_FAR`; STD stores each of the 20 results at the context's 256-byte block of
    Dbufs 1 and up (:func:`ldhbz_reference` gives them), and a FACC of each chain's store
    acknowledgements gives the context its END.
    """
    if contexts * 256 > params.memory_bytes - params.dbuf_bytes:
        raise ValueError(f"{contexts} contexts of 256 bytes do not fit Dbufs 1 and up")
    g = Graph(f"ldhbz-{seed}")
    masks, words, values = ldhbz_tables(seed)
    out = params.dbuf_bytes
    segments = {_LDHBZ_TAB_M: b"".join(v.to_bytes(4, "little") for v in masks),
                _LDHBZ_TAB_A: b"".join(v.to_bytes(8, "little") for v in words),
                _LDHBZ_TAB_V: b"".join(v.to_bytes(2, "little") for v in values)}
    c = g.add(Op.CTX, pe=pe, group=pe)
    ldm = _chain(g, c, [(Op.AND, 15), (Op.SHL, 2), (Op.LDW, _LDHBZ_TAB_M)], pe)
    base2 = _chain(g, c, [(Op.AND, 3), (Op.SHL, 1)], pe)
    bs = g.add(Op.BSCAN, imm=16, pe=pe, group=pe)
    g.connect(ldm, bs, 0)
    g.connect(base2, bs, 1)
    ldv = g.add(Op.LDHBZ, imm=_LDHBZ_TAB_V - 2, pe=pe, group=pe)
    g.connect(bs, ldv, 0)
    first = _chain(g, c, [(Op.SHL, 2)], pe)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), pe=pe, group=pe)
    g.connect(first, it, 0)
    lda = _chain(g, it, [(Op.AND, 15), (Op.SHL, 3), (Op.LDD, _LDHBZ_TAB_A)], pe)
    far = g.add(Op.LDHBZ, imm=LDHBZ_FAR, pe=pe, group=pe)
    g.connect(lda, far, 0)
    block = _ctx_address(g, c, out, 8, pe)
    for src, count, offset in ((ldv, 16, 0), (far, 4, 128)):
        at = g.add(Op.ITER, imm=loop_imm(count, 8), pe=pe, group=pe)
        g.connect(block, at, 0)
        _store_stream(g, at, src, Op.STD, offset, count, pe)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


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
#: :func:`counted_facc_image`'s tables in Dbuf 0: the FACCs' count tokens, their BPOS masks
#: (8 bytes per context each), the binary16 values and the SIMD-4 weights.
_CF_V, _CF_N, _CF_VAL, _CF_ONE = 0, 128, 256, 320
_CF_VALUES, _CF_WEIGHTS = 32, 16
_CF_AT_EARLY, _CF_AT_LATE = 240, 248


def _counted_block(params, c):
    return params.dbuf_bytes + 256 * c


def _check_counted(params, contexts):
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
    16, random bits above), ``values`` (binary16 bit patterns), ``weights`` (SIMD-4 words).
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
        block = _counted_block(params, c)
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
    _check_counted(params, contexts)
    t = counted_tables(seed, contexts)
    g = Graph(f"emitters-{seed}")
    words = {
        _EM_W: [count_token(_counted_block(params, c) + _EM_AT_ITER, _popcount(m & 0xF_FFFF))
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
    c8 = _chain(g, c, [(Op.SHL, 3)], pe)
    block = _ctx_address(g, c, params.dbuf_bytes, 8, pe)
    ld = {at: node(Op.LDD, imm=at) for at in words}
    g.fanout(c8, [(n, 0) for n in ld.values()])
    down = node(Op.BPOS, imm=loop_imm(32, -4))
    up = node(Op.BPOS, imm=loop_imm(20, 2))
    it = node(Op.ITER, imm=loop_imm(0, 2))
    g.connect(ld[_EM_DOWN_AT], down, 0)
    g.connect(ld[_EM_UP_AT], up, 0)
    g.connect(_chain(g, block, [(Op.ADD, _EM_AT_DOWN)], pe), down, 1)
    g.connect(_chain(g, block, [(Op.ADD, _EM_AT_UP)], pe), up, 1)
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
    per context the sum of ``facc_counts[c]`` products from -0.0 (values ``offsets[c] ..``
    times the weights at the set bits of ``facc_masks[c]``, in order), twice."""
    t = counted_tables(seed, contexts)
    out = {}
    for c in range(contexts):
        o = t["offsets"][c]
        bits = [j for j in range(16) if t["facc_masks"][c] >> j & 1]
        acc = 0x8000_8000_8000_8000
        for i, j in enumerate(bits):
            acc = int(fp16.simd4_fma(t["values"][o + i] * 0x0001_0001_0001_0001,
                                     t["weights"][j], acc))
        for at in (_CF_AT_EARLY, _CF_AT_LATE):
            out[_counted_block(params, c) + at] = acc.to_bytes(8, "little")
    return out


def counted_facc_image(params, contexts, seed, late_hops=3, pe=(0, 0)):
    """Return a graph of two FACCs with a count operand over data-dependent streams
    (:func:`counted_tables` gives the data, :func:`counted_facc_reference` the sums).

    Per context ``c``: an ITER of count 0, step 2, over the count token ``(values + 2
    offsets[c], facc_counts[c])`` gives value addresses (LDHB), a BPOS count 16, step 8, over
    ``facc_masks[c]`` weight addresses (LDD); two FACCs sum the products, one whose count
    operand is that count token (it arrives before its first step's operands) and one whose
    count operand comes ``late_hops`` MOVs later; STD of each sum at ``B + 240``, ``B + 248``
    (both END).  With the MicC's window 4 contexts are in flight: a FACC's next count operand
    often waits in its FIFO while the steps of the accumulation before it go on.
    """
    _check_counted(params, contexts)
    t = counted_tables(seed, contexts)
    g = Graph(f"counted-facc-{seed}")
    segments = {
        _CF_V: b"".join(count_token(_CF_VAL + 2 * o, k).to_bytes(8, "little")
                        for o, k in zip(t["offsets"], t["facc_counts"])),
        _CF_N: b"".join(v.to_bytes(8, "little") for v in t["facc_masks"]),
        _CF_VAL: b"".join(v.to_bytes(2, "little") for v in t["values"]),
        _CF_ONE: b"".join(v.to_bytes(8, "little") for v in t["weights"]),
    }

    def node(op, imm=0, end=False):
        return g.add(op, imm=imm, end=end, pe=pe, group=pe)

    c = node(Op.CTX)
    c8 = _chain(g, c, [(Op.SHL, 3)], pe)
    block = _ctx_address(g, c, params.dbuf_bytes, 8, pe)
    counts, masks = node(Op.LDD, imm=_CF_V), node(Op.LDD, imm=_CF_N)
    g.fanout(c8, [(counts, 0), (masks, 0)])
    rows = node(Op.ITER, imm=loop_imm(0, 2))
    vals = node(Op.LDHB)
    g.connect(rows, vals, 0)
    cols = node(Op.BPOS, imm=loop_imm(16, 8))
    g.connect(masks, cols, 0)
    g.connect(_imm(g, c, _CF_ONE, pe), cols, 1)
    weights = node(Op.LDD)
    g.connect(cols, weights, 0)
    early, late = node(Op.FACC), node(Op.FACC)
    g.fanout(counts, [(rows, 0), (early, 2)] + ([] if late_hops else [(late, 2)]))
    if late_hops:
        g.connect(_chain(g, counts, [(Op.MOV, 0)] * late_hops, pe), late, 2)
    g.fanout(vals, [(early, 0), (late, 0)])
    g.fanout(weights, [(early, 1), (late, 1)])
    for acc, at in ((early, _CF_AT_EARLY), (late, _CF_AT_LATE)):
        st = node(Op.STD, imm=at, end=True)
        g.connect(block, st, 0)
        g.connect(acc, st, 1)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


_INT = [Op.ADD, Op.SUB, Op.MUL, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.SRA, Op.EQ, Op.LT,
        Op.LTU]
_FP = [Op.FADD, Op.FSUB, Op.FMUL, Op.FMADD]


def random_image(params, contexts, seed, nodes=14, pes=None):
    """Return a random graph: integer and FP operations, BSCANs, LDHBZs, SWITCHes with feedback.

    Each context loads one 8-byte value (indexed by the context ID) and computes ``nodes``
    random operations over it, the context ID and immediates; some values are turned into an
    even address in the 128-byte table, 0 one time in 4 to 16, and loaded by ``LDHBZ`` (ISA
    v1.4: address 0 is +0.0 without a request); some values branch through a
    SWITCH (long or short branch, rejoined with the feedback edge); up to three results per
    context are stored (each store ENDs).  ``pes`` lists the PEs the nodes may go to
    (default: PE (0, 0) only).
    """
    rng = random.Random(seed)
    pes = pes or [(0, 0)]
    g = Graph(f"random-{seed}")
    uses = {}

    def pe():
        return rng.choice(pes)

    def add(op, nsrc=None, imm=0, **kw):
        at = kw.pop("at", None) or pe()
        n = g.add(op, nsrc, imm=imm, pe=at, group=at, **kw)
        uses[n] = 0
        return n

    consumed = set()

    def link(src, dst, operand, **kw):
        g.connect(src, dst, operand, **kw)
        uses[src] += 1
        if not kw.get("init"):
            consumed.add(src)

    pool = []

    def pick():
        live = [n for n in pool if uses[n] < 3]
        return rng.choice(live)

    c = add(Op.CTX, at=pes[0])
    uses[c] = 1                       # the store address, added at the end
    pool.append(c)
    idx = add(Op.AND, 1, imm=15)
    link(c, idx, 0)
    a8 = add(Op.SHL, 1, imm=3)
    link(idx, a8, 0)
    ld = add(Op.LDD, imm=0)
    link(a8, ld, 0)
    pool += [ld, idx]
    capacity = params.slots * len(pes)
    for _ in range(nodes):
        # Room for a SWITCH with its branches, the XOR folding and the stores.
        if len(g.nodes) + len([n for n in pool if n not in consumed]) + 16 > capacity:
            break
        kind = rng.random()
        if kind < 0.4:
            op = rng.choice(_INT)
            with_imm = rng.random() < 0.4
            n = add(op, 1 if with_imm else 2, imm=rng.randint(-40, 40))
            link(pick(), n, 0)
            if not with_imm:
                link(pick(), n, 1)
        elif kind < 0.75:
            op = rng.choice(_FP)
            nsrc = op.arity - (1 if rng.random() < 0.3 else 0)
            n = add(op, nsrc, imm=rng.choice([0x3C00, 0xB800, 0x0001, 0x7BFF]))
            for i in range(nsrc):
                link(pick(), n, i)
        elif kind < 0.82:
            n = add(Op.FIMM, imm=rng.getrandbits(16))
            link(pick(), n, 0)
        elif kind < 0.87:
            # BSCAN emits `count` tokens per context; a FACC of as many steps folds them
            # back to one (the tokens' bits as binary16 lanes: any pattern is exact), and a
            # MOV forwards it (a node firing more than once per context keeps its edges on
            # its PE: sw.compiler.dfg's rate rule).
            count = rng.choice([1, 3, 16, 32])
            bs = add(Op.BSCAN, imm=count)
            link(pick(), bs, 0)
            link(pick(), bs, 1)
            at = g.nodes[bs].pe
            acc = add(Op.FACC, imm=count, at=at)
            link(bs, acc, 0)
            link(bs, acc, 1)
            n = add(Op.MOV, at=at)
            link(acc, n, 0)
        elif kind < 0.91:
            # LDHBZ of (value & mask): an even table address, 0 (no request) one time in
            # 4, 8 or 16.
            a = add(Op.AND, 1, imm=rng.choice([6, 14, 30]))
            link(pick(), a, 0)
            n = add(Op.LDHBZ, imm=0, at=g.nodes[a].pe)
            link(a, n, 0)
        else:
            cond = add(Op.AND, 1, imm=rng.choice([1, 2, 3]))
            link(pick(), cond, 0)
            sw = add(Op.SWITCH, 3)
            link(pick(), sw, 0)
            link(cond, sw, 1)
            ends = []
            for branch, length in ((True, rng.randint(0, 3)), (False, rng.randint(1, 4))):
                prev, first = sw, True
                for _ in range(length):
                    m = add(Op.ADD, 1, imm=rng.randint(1, 99))
                    link(prev, m, 0, branch=branch if first else None)
                    prev, first = m, False
                ends.append((prev, branch if first else None))
            join = add(Op.MOV)
            for prev, branch in ends:
                link(prev, join, 0, branch=branch)
            link(join, sw, 2, init=1)
            n = join
        pool.append(n)
    out = params.dbuf_bytes
    # Every value must reach a store (an END), or contexts could retire with work pending:
    # fold the unconsumed ones pairwise with XOR until at most three remain.
    loose = [n for n in pool if n not in consumed]
    while len(loose) > 3:
        x = add(Op.XOR)
        link(loose.pop(), x, 0)
        link(loose.pop(), x, 1)
        loose.insert(0, x)
    sinks = loose
    base = _ctx_address(g, c, out, 5, pes[0])
    uses[base] = 0
    for i, s in enumerate(sinks):
        st = add(Op.STD, imm=8 * i, end=True)
        link(base, st, 0)
        link(s, st, 1)
    g.validate(params)
    table = bytes(random.Random(seed + 1).getrandbits(8) for _ in range(128))
    return assemble(g, place(g, params), {0: table}, contexts)


def swap_image(folder, image, hazard=True):
    """Replace the image of a case by ``image``, keeping the expected results of the old one.

    With ``hazard``, the bench expects the run to *differ* from those results by a
    permutation of the stored 8-byte words (Fig. 7 without its feedback edge).
    """
    folder = Path(folder)
    image.save(folder / "image.npz")
    expected = json.loads((folder / "expected.json").read_text())
    expected["hazard"] = bool(hazard)
    (folder / "expected.json").write_text(json.dumps(expected))
