"""Test programs for the PE benches, built with the golden-model toolchain.

Each case is a graph (:mod:`sw.compiler.dfg`), placed (:func:`sw.compiler.place.place`), assembled
into a binary image (:func:`sw.compiler.asm.assemble`) and run on the golden interpreter
(:func:`sw.models.golden.run_image`). :func:`save_case` writes ``image.npz`` plus ``expected.json``
(memory after the run, firings per opcode, context ends, LOAD/STORE requests) into a folder; the
cocotb bench (``tb.pe.bench_pe``) runs the image on the generated Verilog and compares
everything bit for bit.

Plain Python: the pytest layer builds the cases, the bench only reads them.  The cases of the
data-dependent instructions are in :mod:`tb.pe.counted_cases`.
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
from sw.spec.isa import Op, facc_imm, loop_imm
from tb.pe.graph_parts import chain, ctx_address, store_stream

__all__ = ["PARAMS_1X1", "PARAMS_2X2", "top_params", "array_params", "save_case", "swap_image",
           "read_case", "fc_image", "fig7_image", "random_image", "int_ops_image",
           "registers_image", "kernels_image",
           "bscan_image", "bscan_tables", "bscan_reference", "ldhbz_image", "ldhbz_tables",
           "ldhbz_reference", "fmax_image", "fmax_tables", "fmax_reference"]

#: Array configurations of the tests: small slots, small Dbufs (fast Verilog, fast builds).
PARAMS_1X1 = ArrayParams(rows=1, cols=1, slots=32, dbuf_bytes=1024, operand_depth=4, int_issue=1)
PARAMS_2X2 = ArrayParams(rows=2, cols=2, slots=16, dbuf_bytes=1024, operand_depth=4, int_issue=1)


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
                dbuf_bytes=params.dbuf_bytes, int_issue=params.int_issue, micc_x=micc[0],
                micc_y=micc[1], depth=depth)


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
    g.connect(ctx_address(g, c, out, 3, pe), st, 0)
    g.connect(join, st, 1)
    if feedback:
        g.validate(params)
    return assemble(g, place(g, params), {}, contexts)


def int_ops_image(params, contexts, seed, half, pe=(0, 0)):
    """Return half of the ISA's integer operations on two loaded values, folded into one store.

    Per context ``c``: ``a`` is the 8-byte word ``c mod 16`` of a random table, ``b = a +
    12345``; each operation of the ``half`` (0: ``ADD .. XOR``, 1: ``SHL .. LTU``) takes ``(a,
    b)`` as tokens (shifts by ``b``'s low five bits, compares signed and unsigned), the results
    are folded by ``XOR`` and stored at ``OUT + 8 c``.
    """
    if half not in (0, 1):
        raise ValueError(f"half must be 0 or 1, not {half!r}")
    g = Graph(f"int-ops-{half}")
    out = params.dbuf_bytes          # Dbuf 1
    c = g.add(Op.CTX, pe=pe, group=pe)
    a = g.add(Op.LDD, pe=pe, group=pe)
    g.connect(chain(g, c, ((Op.AND, 15), (Op.SHL, 3)), pe), a, 0)
    b = g.add(Op.ADD, 1, imm=12345, pe=pe, group=pe)
    results = [g.add(op, pe=pe, group=pe) for op in _INT[6 * half:6 * half + 6]]
    g.fanout(a, [(b, 0)] + [(n, 0) for n in results])
    g.fanout(b, [(n, 1) for n in results])
    while len(results) > 1:
        x = g.add(Op.XOR, pe=pe, group=pe)
        g.connect(results.pop(), x, 0)
        g.connect(results.pop(), x, 1)
        results.insert(0, x)
    st = g.add(Op.STD, end=True, pe=pe, group=pe)
    g.connect(ctx_address(g, c, out, 3, pe), st, 0)
    g.connect(results[0], st, 1)
    g.validate(params)
    table = bytes(random.Random(seed).getrandbits(8) for _ in range(128))
    return assemble(g, place(g, params), {0: table}, contexts)


def registers_image(params, contexts, seed, position, fp=False, pe=(0, 0)):
    """Return a chain reading every register of the PE in operand ``position`` (0, 1 or 2).

    Per context ``c`` a value ``v = c << 3`` runs through one node per register ``r``: on the
    INT pipe ``ADD r, v`` (position 0) or ``XOR v, r`` (position 1); with ``fp`` (always for
    position 2) ``FADD r, v``, ``FADD v, r`` or ``FMADD v, r0, r`` (binary16 lanes; register 0
    then holds 1.0 in every lane); the chain's value is the one token operand, the result is
    stored at ``OUT + 8 c``.  The other registers hold random values (binary16 ones finite, of
    magnitude 2^-4 to 2^4, so the sixteen sums stay finite and each register changes the
    result).
    """
    if position not in (0, 1, 2):
        raise ValueError(f"position must be 0, 1 or 2, not {position!r}")
    fp = fp or position == 2
    g = Graph(f"registers-{'fp' if fp else 'int'}-{position}")
    out = params.dbuf_bytes          # Dbuf 1
    c = g.add(Op.CTX, pe=pe, group=pe)
    v = g.add(Op.SHL, 1, imm=3, pe=pe, group=pe)
    g.connect(c, v, 0)
    op = (Op.FADD, Op.FADD, Op.FMADD)[position] if fp else (Op.ADD, Op.XOR)[position]
    for r in range(params.regs):
        n = g.add(op, pe=pe, group=pe)
        g.nodes[n].regs.update({1: 0, 2: r} if position == 2 else {position: r})
        g.connect(v, n, 1 - position if position < 2 else 0)
        v = n
    st = g.add(Op.STD, end=True, pe=pe, group=pe)
    g.connect(ctx_address(g, c, out, 3, pe), st, 0)
    g.connect(v, st, 1)
    g.validate(params)
    image = assemble(g, place(g, params), {}, contexts)
    rng = random.Random(seed)
    image.regs[...] = _register_values(rng, image.regs.shape, (11, 19) if fp else (0, 30))
    if position == 2:
        image.regs[..., 0] = 0x3C00_3C00_3C00_3C00
    return image


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
    ldw = chain(g, idx, [(Op.SHL, 2), (Op.LDW, tab_w)], pe)
    sc = g.add(Op.SCAN, imm=4, pe=pe, group=pe)
    g.connect(ldw, sc, 0)
    g.connect(idx, sc, 1)
    # Store the 4 SCAN outputs at one address (the last one stays: a slot's stores retire in
    # order), then a FACC of the 4 acknowledgements gives one token per context for the END.
    # LDH of a 2-byte value per context.
    ldh = chain(g, c, [(Op.AND, 31), (Op.SHL, 1), (Op.LDH, tab_b)], pe)
    # Stores: 16 bytes per context.
    base = ctx_address(g, c, out, 4, pe)
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


def span_image(params, contexts, seed, span=2, steps=8, pe=(0, 0)):
    """Return a graph whose FACC spans contexts and emits partial sums (``facc_imm`` span).

    Per context ``c`` an ITER emits ``steps`` table indices; LDD and LDHB of two random tables
    feed a FACC of ``2 * steps`` steps per accumulation and span ``span``, so that one
    accumulation runs over two contexts and every ``2**span`` steps a running sum leaves; each
    is stored at its own address (an ITER of the context's ``steps >> span`` addresses), and
    the acknowledgements end the context.
    """
    g = Graph("span")
    rng = random.Random(seed)
    tab_a, tab_b = 0, 512                                 # Dbuf 0
    out = params.dbuf_bytes                               # Dbuf 1
    per = steps >> span
    segments = {
        tab_a: bytes(rng.getrandbits(8) & 0x3F if i % 2 else rng.getrandbits(8)
                     for i in range(8 * 32)),
        tab_b: np.asarray([rng.uniform(-2, 2) for _ in range(32)], dtype=np.float16).tobytes(),
    }
    c = g.add(Op.CTX, pe=pe, group=pe)
    first = g.add(Op.MUL, 1, imm=steps, pe=pe, group=pe)
    g.connect(c, first, 0)
    it = g.add(Op.ITER, imm=loop_imm(steps, 1), pe=pe, group=pe)
    g.connect(first, it, 0)
    idx = g.add(Op.AND, 1, imm=31, pe=pe, group=pe)
    g.connect(it, idx, 0)
    lda = chain(g, idx, [(Op.SHL, 3), (Op.LDD, tab_a)], pe)
    ldb = chain(g, idx, [(Op.SHL, 1), (Op.LDHB, tab_b)], pe)
    acc = g.add(Op.FACC, imm=facc_imm(2 * steps, span), pe=pe, group=pe)
    g.connect(lda, acc, 0)
    g.connect(ldb, acc, 1)
    base = ctx_address(g, c, out, 3 + (per - 1).bit_length(), pe)
    addrs = g.add(Op.ITER, imm=loop_imm(per, 8), pe=pe, group=pe)
    g.connect(base, addrs, 0)
    store_stream(g, addrs, acc, Op.STD, 0, per, pe)
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
    ldm = chain(g, c, [(Op.AND, 15), (Op.SHL, 2), (Op.LDW, tab_m)], pe)
    ldb = chain(g, c, [(Op.ADD, 1), (Op.AND, 15), (Op.SHL, 2), (Op.LDW, tab_b)], pe)
    block = ctx_address(g, c, out, 8, pe)
    scans, iters = [], []
    for count, offset in BSCAN_COUNTS:
        bs = g.add(Op.BSCAN, imm=count, pe=pe, group=pe)
        scans.append(bs)
        it = g.add(Op.ITER, imm=loop_imm(count, 4), pe=pe, group=pe)
        iters.append(it)
        store_stream(g, it, bs, Op.STW, offset, count, pe)
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
    ldm = chain(g, c, [(Op.AND, 15), (Op.SHL, 2), (Op.LDW, _LDHBZ_TAB_M)], pe)
    base2 = chain(g, c, [(Op.AND, 3), (Op.SHL, 1)], pe)
    bs = g.add(Op.BSCAN, imm=16, pe=pe, group=pe)
    g.connect(ldm, bs, 0)
    g.connect(base2, bs, 1)
    ldv = g.add(Op.LDHBZ, imm=_LDHBZ_TAB_V - 2, pe=pe, group=pe)
    g.connect(bs, ldv, 0)
    first = chain(g, c, [(Op.SHL, 2)], pe)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), pe=pe, group=pe)
    g.connect(first, it, 0)
    lda = chain(g, it, [(Op.AND, 15), (Op.SHL, 3), (Op.LDD, _LDHBZ_TAB_A)], pe)
    far = g.add(Op.LDHBZ, imm=LDHBZ_FAR, pe=pe, group=pe)
    g.connect(lda, far, 0)
    block = ctx_address(g, c, out, 8, pe)
    for src, count, offset in ((ldv, 16, 0), (far, 4, 128)):
        at = g.add(Op.ITER, imm=loop_imm(count, 8), pe=pe, group=pe)
        g.connect(block, at, 0)
        store_stream(g, at, src, Op.STD, offset, count, pe)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


#: Lanes every :func:`fmax_tables` draw starts with: signed zeros both ways round, equal
#: values, subnormals, infinities, NaNs (quiet, signalling, negative), -1 against -2.
FMAX_LANES = [(0x8000, 0x0000), (0x0000, 0x8000), (0x8000, 0x8000), (0x3C00, 0x3C00),
              (0x0001, 0x8001), (0x8001, 0x8002), (0x7C00, 0xFC00), (0xFC00, 0x7BFF),
              (0x7E00, 0x3C00), (0xBC00, 0x7C01), (0xFE00, 0xFC00), (0xBC00, 0xC000),
              (0x03FF, 0x0400), (0x83FF, 0x8400), (0x7BFF, 0x7C00), (0xC000, 0x0000)]
#: The FP immediate of :func:`fmax_image`'s ``FMAX b, #imm``: -1.0.
FMAX_IMM = 0xBC00
_FMAX_TAB_A, _FMAX_TAB_B = 0, 128                                # Dbuf 0


def fmax_tables(seed):
    """Return ``(a, b)``: two lists of 16 words of four binary16 lanes (:func:`fmax_image`).

    The first 16 lane pairs are :data:`FMAX_LANES`; the rest mix random patterns with ``b``
    equal to ``a``, its negation or one ulp away.
    """
    rng = random.Random(seed)
    pairs = list(FMAX_LANES)
    while len(pairs) < 64:
        a = rng.getrandbits(16)
        b = rng.choice([rng.getrandbits(16), a, a ^ 0x8000, (a + 1) & 0xFFFF])
        pairs.append((a, b))
    words = [[sum(pairs[4 * i + k][j] << 16 * k for k in range(4)) for i in range(16)]
             for j in (0, 1)]
    return words[0], words[1]


def fmax_reference(params, seed, contexts):
    """Return ``{address: bytes}`` that :func:`fmax_image` stores, by the ISA's definition.

    Context ``c`` writes 32 bytes at Dbuf 1 + 32 c: ``FMAX a, b``, ``FMAX a, #0`` (ReLU),
    ``FMAX (FADD a, b), #0`` and ``FMAX b, #-1.0`` of the words ``a``, ``b`` of entry
    ``c % 16``, each word lane by lane (``sw.spec.fp16.maximum``, ``add``).
    """
    ta, tb = fmax_tables(seed)
    out = {}
    for c in range(contexts):
        a, b = (np.array([w >> 16 * k & 0xFFFF for k in range(4)], dtype=np.uint16)
                for w in (ta[c % 16], tb[c % 16]))
        words = [fp16.maximum(a, b), fp16.maximum(a, 0), fp16.maximum(fp16.add(a, b), 0),
                 fp16.maximum(b, FMAX_IMM)]
        out[params.dbuf_bytes + 32 * c] = b"".join(int(fp16.pack4(w)).to_bytes(8, "little")
                                                   for w in words)
    return out


def fmax_image(params, contexts, seed, pe=(0, 0)):
    """Return a graph of FMAX with two tokens, with the FP immediate (ReLU), after an FADD
    (the bias + ReLU epilogue) and with a negative immediate; :func:`fmax_reference` gives the
    stored words.  Per context ``c`` the two words of entry ``c % 16`` are loaded (LDD) and the
    four results stored (STD, each ENDs) at Dbuf 1 + 32 c.
    """
    if contexts * 32 > params.dbuf_bytes:
        raise ValueError(f"{contexts} contexts of 32 bytes do not fit Dbuf 1")
    g = Graph(f"fmax-{seed}")
    ta, tb = fmax_tables(seed)
    segments = {_FMAX_TAB_A: b"".join(w.to_bytes(8, "little") for w in ta),
                _FMAX_TAB_B: b"".join(w.to_bytes(8, "little") for w in tb)}
    c = g.add(Op.CTX, pe=pe, group=pe)
    a = chain(g, c, [(Op.AND, 15), (Op.SHL, 3), (Op.LDD, _FMAX_TAB_A)], pe)
    b = chain(g, c, [(Op.AND, 15), (Op.SHL, 3), (Op.LDD, _FMAX_TAB_B)], pe)
    both = g.add(Op.FMAX, 2, pe=pe, group=pe)
    g.connect(a, both, 0)
    g.connect(b, both, 1)
    relu = g.add(Op.FMAX, 1, imm=0, pe=pe, group=pe)
    g.connect(a, relu, 0)
    total = g.add(Op.FADD, 2, pe=pe, group=pe)
    g.connect(a, total, 0)
    g.connect(b, total, 1)
    relu_sum = g.add(Op.FMAX, 1, imm=0, pe=pe, group=pe)
    g.connect(total, relu_sum, 0)
    floor = g.add(Op.FMAX, 1, imm=FMAX_IMM, pe=pe, group=pe)
    g.connect(b, floor, 0)
    base = ctx_address(g, c, params.dbuf_bytes, 5, pe)
    for offset, value in enumerate((both, relu, relu_sum, floor)):
        st = g.add(Op.STD, imm=8 * offset, end=True, pe=pe, group=pe)
        g.connect(base, st, 0)
        g.connect(value, st, 1)
    g.validate(params)
    return assemble(g, place(g, params), segments, contexts)


_INT = [Op.ADD, Op.SUB, Op.MUL, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.SRA, Op.EQ, Op.LT,
        Op.LTU]
_FP = [Op.FADD, Op.FSUB, Op.FMUL, Op.FMADD]


def random_image(params, contexts, seed, nodes=14, pes=None):
    """Return a random graph: integer and FP operations, BSCANs, LDHBZs, SWITCHes with feedback.

    Each context loads one 8-byte value (indexed by the context ID) and computes ``nodes``
    random operations over it, the context ID, immediates and the PE's registers (random
    finite binary16 lanes; a node takes at most one register operand, in any position, and
    keeps a token one); some values are turned into an
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
        regs = kw.pop("regs", {})
        n = g.add(op, nsrc, imm=imm, pe=at, group=at, **kw)
        g.nodes[n].regs.update(regs)
        uses[n] = 0
        return n

    consumed = set()

    def link(src, dst, operand, **kw):
        g.connect(src, dst, operand, **kw)
        uses[src] += 1
        if not kw.get("init"):
            consumed.add(src)

    pool = []

    def registers(nsrc):
        # Register operands (any register, any operand position), one token operand kept:
        # a node whose operands are all registers would never fire.
        if nsrc < 2 or rng.random() >= 0.3:
            return {}
        return {rng.randrange(nsrc): rng.randrange(params.regs)}

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
            nsrc = 1 if rng.random() < 0.4 else 2
            regs = registers(nsrc)
            n = add(op, nsrc, imm=rng.randint(-40, 40), regs=regs)
            for i in range(nsrc):
                if i not in regs:
                    link(pick(), n, i)
        elif kind < 0.75:
            op = rng.choice(_FP)
            nsrc = op.arity - (1 if rng.random() < 0.3 else 0)
            regs = registers(nsrc)
            n = add(op, nsrc, imm=rng.choice([0x3C00, 0xB800, 0x0001, 0x7BFF]), regs=regs)
            for i in range(nsrc):
                if i not in regs:
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
    base = ctx_address(g, c, out, 5, pes[0])
    uses[base] = 0
    for i, s in enumerate(sinks):
        st = add(Op.STD, imm=8 * i, end=True)
        link(base, st, 0)
        link(s, st, 1)
    g.validate(params)
    table = bytes(random.Random(seed + 1).getrandbits(8) for _ in range(128))
    image = assemble(g, place(g, params), {0: table}, contexts)
    image.regs[...] = _register_values(random.Random(seed + 2), image.regs.shape)
    return image


def _register_values(rng, shape, exponents=(0, 30)):
    """Return random register words of ``shape``: four finite binary16 lanes each, their
    biased exponents in the closed range ``exponents`` (an INT operand reads the low 32
    bits)."""
    lo, hi = exponents
    lanes = [(rng.getrandbits(1) << 15) | (rng.randint(lo, hi) << 10) | rng.getrandbits(10)
             for _ in range(4 * int(np.prod(shape)))]
    words = [sum(lane << (16 * k) for k, lane in enumerate(lanes[i:i + 4]))
             for i in range(0, len(lanes), 4)]
    return np.array(words, dtype=np.uint64).reshape(shape)


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
