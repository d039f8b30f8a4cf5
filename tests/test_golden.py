"""Tests of the golden model (:mod:`sw.models.golden`, :mod:`sw.models.golden_counters`,
:mod:`sw.models.golden_fc`) and the reference (:mod:`sw.models.reference`): instruction
semantics on hand-built graphs, the exact interpreter against the vectorized path (bits and
counters), delivery-order randomization, PAPER.md Fig. 7, detected faults (context order,
operand overflow, deadlock, memory, timeout) and results against numpy.

Random tests print their seed; set ``FDPU_SEED`` to replay another one."""

import os
import random

import numpy as np
import pytest

from sw.compiler import dbuf_layout, graphs, layers
from sw.compiler.asm import assemble
from sw.compiler.dfg import DfgError, Graph
from sw.compiler.place import place
from sw.compiler.planner import plan_fc
from sw.models import reference
from sw.models.golden import (ContextOrderError, DeadlockError, GoldenTimeout,
                              MemoryFault, OperandOverflowError, bscan, run_image)
from sw.models.golden_counters import program_counters
from sw.models.golden_fc import run_fc
from sw.spec import fp16
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, loop_imm

SEED = int(os.environ.get("FDPU_SEED", "20261130"))
P1 = ArrayParams(rows=1, cols=1, dbuf_bytes=1024, slots=64, operand_depth=4, int_issue=1)
P2 = ArrayParams(rows=1, cols=2, dbuf_bytes=1024, slots=64, operand_depth=4, int_issue=1)
OUT = 512          # where the hand-built graphs store their result (Dbuf 0)
M32 = 0xFFFF_FFFF


def run_graph(g, params=P1, contexts=1, segments=None, **kw):
    g.validate(params)
    img = assemble(g, place(g, params), segments or {}, contexts)
    return run_image(img, **kw)


def imm(g, trigger, value, group=0):
    n = g.add(Op.IMM, imm=value, group=group)
    g.connect(trigger, n, 0)
    return n


def store(g, trigger, value_node, op=Op.STD, addr=OUT, group=0):
    a = imm(g, trigger, addr, group)
    s = g.add(op, end=True, group=group)
    g.connect(a, s, 0)
    g.connect(value_node, s, 1)
    return s


def result(res, n=8, addr=OUT):
    return int.from_bytes(res.memory.read(addr, n), "little")


INT_CASES = {
    Op.ADD: lambda a, b: (a + b) & M32, Op.SUB: lambda a, b: (a - b) & M32,
    Op.MUL: lambda a, b: (a * b) & M32, Op.AND: lambda a, b: a & b,
    Op.OR: lambda a, b: a | b, Op.XOR: lambda a, b: a ^ b,
    Op.SHL: lambda a, b: (a << (b & 31)) & M32, Op.SHR: lambda a, b: a >> (b & 31),
    Op.SRA: lambda a, b: ((a - (a >> 31 << 32)) >> (b & 31)) & M32,
    Op.EQ: lambda a, b: int(a == b),
    Op.LT: lambda a, b: int((a - (a >> 31 << 32)) < (b - (b >> 31 << 32))),
    Op.LTU: lambda a, b: int(a < b),
}


@pytest.mark.parametrize("op", list(INT_CASES))
@pytest.mark.parametrize("use_imm", [False, True])
def test_integer_operations(op, use_imm):
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rng = random.Random(f"{SEED}-{op.name}-{use_imm}")
    for _ in range(4):
        a = rng.choice([0, 1, 5, M32, 0x8000_0000, rng.getrandbits(32)])
        b = rng.choice([0, 3, 31, 33, M32, a, rng.getrandbits(32)])
        bs = b - (1 << 32) if b >> 31 else b
        g = Graph()
        c = g.add(Op.CTX, group=0)
        na = imm(g, c, a - (1 << 32) if a >> 31 else a)
        if use_imm:
            n = g.add(op, 1, imm=bs, group=0)
        else:
            n = g.add(op, group=0)
            g.connect(imm(g, c, bs), n, 1)
        g.connect(na, n, 0)
        store(g, c, n)
        assert result(run_graph(g)) == INT_CASES[op](a, b), (op, a, b)


def test_fp_operations_and_immediates():
    vals = [0x3C00, 0xC000, 0x0001, 0x7BFF]         # 1, -2, min subnormal, max
    word = fp16.pack4(np.array(vals, dtype=np.uint16))
    seg = {0: int(word).to_bytes(8, "little")}
    for op, nsrc, expect in [
        (Op.FADD, 1, fp16.add(vals, 0x3800)), (Op.FSUB, 2, fp16.sub(vals, vals)),
        (Op.FMUL, 2, fp16.mul(vals, vals)), (Op.FMADD, 2, fp16.fma(vals, vals, 0x3800)),
        (Op.FMADD, 3, fp16.fma(vals, vals, vals))]:
        g = Graph()
        c = g.add(Op.CTX, group=0)
        ld = g.add(Op.LDD, imm=0, group=0)
        g.connect(imm(g, c, 0), ld, 0)
        n = g.add(op, nsrc, imm=0x3800, group=0)            # 0.5 as the FP immediate
        g.fanout(ld, [(n, i) for i in range(nsrc)])
        store(g, c, n)
        got = fp16.unpack4(np.uint64(result(run_graph(g, segments=seg))))
        assert got.tolist() == np.asarray(expect, dtype=np.uint16).tolist(), op
    g = Graph()
    c = g.add(Op.CTX, group=0)
    f = g.add(Op.FIMM, imm=0xBC00, group=0)
    g.connect(c, f, 0)
    store(g, c, f)
    assert result(run_graph(g)) == 0xBC00BC00BC00BC00


def test_fmax_relu_and_two_operands():
    # FMAX t0, #0.0 is ReLU; FMAX t0, t1 the lane-wise IEEE 754-2019 maximum (the NaN lane
    # gives the canonical NaN, -0 < +0, +inf stays).
    a = [0xBC00, 0x8000, 0x7D00, 0x7C00]            # -1, -0, NaN, +inf
    b = [0xC000, 0x0000, 0x3C00, 0x0001]            # -2, +0, 1, min subnormal
    seg = {0: int(fp16.pack4(np.array(a, dtype=np.uint16))).to_bytes(8, "little"),
           8: int(fp16.pack4(np.array(b, dtype=np.uint16))).to_bytes(8, "little")}
    for nsrc, want in [(1, [0x0000, 0x0000, fp16.QNAN, 0x7C00]),
                       (2, [0xBC00, 0x0000, fp16.QNAN, 0x7C00])]:
        g = Graph()
        c = g.add(Op.CTX, group=0)
        n = g.add(Op.FMAX, nsrc, imm=0x0000, group=0)            # +0.0 as the FP immediate
        for i in range(nsrc):
            ld = g.add(Op.LDD, imm=8 * i, group=0)
            g.connect(imm(g, c, 0), ld, 0)
            g.connect(ld, n, i)
        store(g, c, n)
        got = fp16.unpack4(np.uint64(result(run_graph(g, segments=seg))))
        assert got.tolist() == want, nsrc
        assert got.tolist() == np.asarray(fp16.maximum(a, b if nsrc == 2 else 0)).tolist()


def test_loads_stores_and_broadcast():
    seg = {0: bytes(range(16))}
    for op, addr, want in [(Op.LDH, 2, 0x0302), (Op.LDHB, 2, 0x0302030203020302),
                           (Op.LDW, 4, 0x07060504), (Op.LDD, 8, 0x0F0E0D0C0B0A0908)]:
        g = Graph()
        c = g.add(Op.CTX, group=0)
        ld = g.add(op, imm=addr, group=0)
        g.connect(imm(g, c, 0), ld, 0)
        store(g, c, ld)
        assert result(run_graph(g, segments=seg)) == want, op
    for op, n in [(Op.STH, 2), (Op.STW, 4)]:
        g = Graph()
        c = g.add(Op.CTX, group=0)
        store(g, c, imm(g, c, -1), op=op)
        res = run_graph(g, segments={OUT: bytes(8)})
        assert result(res) == (1 << 8 * n) - 1
        assert res.counters.bytes_written == n


def test_ldhbz_skips_memory_for_address_zero():
    # LDHBZ is LDHB, except that address operand 0 gives the token 0 (+0.0 in four
    # lanes) without a memory access; a non-zero address loads and broadcasts, with the imm.
    seg = {0: bytes(range(16))}
    for addr, want, packets in [(0, 0, 2), (2, 0x0706070607060706, 4)]:
        g = Graph()
        c = g.add(Op.CTX, group=0)
        ld = g.add(Op.LDHBZ, imm=4, group=0)
        g.connect(imm(g, c, addr), ld, 0)
        store(g, c, ld)
        res = run_graph(g, segments=seg)
        assert result(res) == want, addr
        assert res.counters.mem_packets == packets        # the store's 2, + the load's 2
        assert res.counters.ops["LDHBZ"] == 1


def test_iter_scan_facc():
    # ITER 5 tokens 10, 13, ..., SCAN base 100 over them -> emits 100 + prefix sums; FACC 5
    # of (1.0 * 2.0) -> 10.0 in every lane; store the last SCAN value and the FACC.
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(5, 3), group=0)
    g.connect(imm(g, c, 10), it, 0)
    base = g.add(Op.ITER, imm=5, group=0)               # step 0: repeat 100 five times
    g.connect(imm(g, c, 100), base, 0)
    sc = g.add(Op.SCAN, imm=5, group=0)
    g.connect(base, sc, 0)
    one = g.add(Op.FIMM, imm=0x3C00, group=0)
    two = g.add(Op.FIMM, imm=0x4000, group=0)
    acc = g.add(Op.FACC, imm=5, group=0)
    g.fanout(it, [(sc, 1), (one, 0), (two, 0)])
    g.connect(one, acc, 0)
    g.connect(two, acc, 1)
    # Keep only the last SCAN output: a FACC-like reduction is FP, so sum SCAN via store
    # to the same address five times (the last one wins: stores retire in order).
    sa = g.add(Op.ITER, imm=5, group=0)
    g.connect(imm(g, c, OUT), sa, 0)
    st = g.add(Op.STW, group=0)
    g.connect(sa, st, 0)
    g.connect(sc, st, 1)
    fin = g.add(Op.FACC, imm=5, group=0)           # turns the 5 acks into one token
    g.fanout(st, [(fin, 0), (fin, 1)])
    done = g.add(Op.MOV, end=True, group=0)
    g.connect(fin, done, 0)
    store(g, c, acc, addr=OUT + 8)
    res = run_graph(g, params=P1)
    assert result(res, 4) == 100 + sum(10 + 3 * i for i in range(5))
    assert result(res, 8, OUT + 8) == 0x4900490049004900       # 10.0
    assert res.counters.ops["ITER"] == 3 and res.counters.ops["SCAN"] == 5


def bscan_reference(mask, base, count):
    """BSCAN's tokens written straight from the ISA text (docs/isa.md)."""
    mask &= M32
    return [(base + 2 * bin(mask & ((2 << j) - 1)).count("1")) & M32 if mask >> j & 1 else 0
            for j in range(count)]


def bscan_graph(mask, base, count, contexts=1):
    """CTX -> IMM mask, IMM base -> BSCAN -> STW at OUT + 4 j (token j); END after the stores."""
    g = Graph()
    c = g.add(Op.CTX, group=0)
    bs = g.add(Op.BSCAN, imm=count, group=0)
    g.connect(imm(g, c, mask - (1 << 32) if mask >> 31 else mask), bs, 0)
    g.connect(imm(g, c, base - (1 << 32) if base >> 31 else base), bs, 1)
    addr = g.add(Op.ITER, imm=loop_imm(count, 4), group=0)
    g.connect(imm(g, c, OUT), addr, 0)
    st = g.add(Op.STW, group=0)
    g.connect(addr, st, 0)
    g.connect(bs, st, 1)
    fin = g.add(Op.FACC, imm=count, group=0)        # one token per context from the acks
    g.fanout(st, [(fin, 0), (fin, 1)])
    done = g.add(Op.MOV, end=True, group=0)
    g.connect(fin, done, 0)
    return g


@pytest.mark.parametrize("mask, base, count, want", [
    (0, 100, 16, [0] * 16),                                       # all zeros
    (0xFFFF, 100, 16, [100 + 2 * (j + 1) for j in range(16)]),    # all ones
    (0b1010_0110, 1000, 8, [0, 1002, 1004, 0, 0, 1006, 0, 1008]),
    (0xFFFF_0005, 40, 4, [42, 0, 44, 0]),                         # bits above count ignored
    (0b10, 7, 1, [0]),                                            # count 1, bit 0 only
    (0b11, 7, 1, [9]),
    (0xFFFF_FFFF, 0, 32, [2 * (j + 1) for j in range(32)]),       # count 32
    (0x8000_0001, 0, 32, [2] + [0] * 30 + [4]),
    (0x0000_0105, 0xFFFF_FFFA, 9, [0xFFFF_FFFC, 0, 0xFFFF_FFFE, 0, 0, 0, 0, 0, 0]),  # wrap
    (0x0000_0107, 0xFFFF_FFFA, 9, [0xFFFF_FFFC, 0xFFFF_FFFE, 0, 0, 0, 0, 0, 0, 2]),
])
def test_bscan_on_hand_computed_masks(mask, base, count, want):
    assert bscan_reference(mask, base, count) == want
    assert bscan(mask, base, count) == want
    g = bscan_graph(mask, base, count)
    g.validate(P1)
    img = assemble(g, place(g, P1), {}, 1)
    res = run_image(img)
    got = [result(res, 4, OUT + 4 * j) for j in range(count)]
    assert got == want
    assert res.counters.ops["BSCAN"] == 1
    # The counting path (the fast engine) propagates count tokens per firing, like ITER.
    hops = len(P1.route((0, 0), P1.dbuf_coord(0)))
    assert program_counters(img, 1, {}, lambda x, y, s: hops) == res.counters


def test_bscan_random_masks_contexts_and_orders():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rng = random.Random(SEED)
    for _ in range(4):
        count = rng.choice([1, 2, 16, 31, 32, rng.randint(1, 32)])
        mask = rng.choice([0, M32, rng.getrandbits(32), rng.getrandbits(16)])
        base = rng.choice([0, M32 - 2 * rng.randint(0, 40), rng.getrandbits(32)])
        g = bscan_graph(mask, base, count)
        img = assemble(g, place(g, P1), {}, 3)
        res = run_image(img, seed=rng.getrandbits(16), jitter=6)
        got = [result(res, 4, OUT + 4 * j) for j in range(count)]
        assert got == bscan_reference(mask, base, count), (mask, base, count)
        assert res.counters.ops["BSCAN"] == 3 and res.counters.ctx_ends == 3
        # Only the low 32 bits of the mask count: a 64-bit mask token with a high half.
        assert bscan(mask | (0xDEAD << 32), base, count) == bscan_reference(mask, base, count)


def test_bscan_is_an_emitter_in_the_graph():
    g = bscan_graph(0xF0F0, 8, 16)
    bs = next(n.id for n in g.nodes if n.op is Op.BSCAN)
    rates = g.rates()
    assert rates[bs] == 1 and g.out_rate(bs, rates[bs]) == 16
    g.nodes[bs].group = 1                    # 16 tokens per context may not leave the PE
    with pytest.raises(DfgError, match="rate rule: BSCAN#.* fires 16 times"):
        g.validate(P1)
    g = bscan_graph(0xF0F0, 8, 16)
    g.nodes[bs].end = True
    with pytest.raises(DfgError, match="BSCAN sends no context-end message"):
        g.validate(P1)


def test_bscan_tokens_issue_on_the_int_pipe():
    # With int_issue = 2 the estimate issues BSCAN tokens on the INT/CTRL pipe (the RTL's pipe
    # 2) and ITER tokens on the load/store pipe (pipe 0): a FACC fed by a BSCAN and an ITER of
    # 32 tokens each gets both streams at once; fed by two BSCANs, it waits ~32 cycles more.
    params = ArrayParams(rows=1, cols=1, dbuf_bytes=1024, int_issue=2, slots=64, operand_depth=4)

    def graph(second):
        g = Graph()
        c = g.add(Op.CTX, group=0)
        ones, zero = imm(g, c, -1), imm(g, c, 0)
        acc = g.add(Op.FACC, imm=32, group=0)
        for operand, op in enumerate((Op.BSCAN, second)):
            e = g.add(op, 2 if op is Op.BSCAN else 1, imm=32, group=0)
            g.connect(ones, e, 0)
            if op is Op.BSCAN:
                g.connect(zero, e, 1)
            g.connect(e, acc, operand)
        store(g, c, acc)
        return g

    t = {op: run_graph(graph(op), params=params).time for op in (Op.ITER, Op.BSCAN)}
    assert t[Op.BSCAN] >= t[Op.ITER] + 28, t


@pytest.mark.parametrize("cond, want", [(0, 7), (5, 5)])
def test_switch_branches(cond, want):
    g = Graph()
    c = g.add(Op.CTX, group=0)
    sw = g.add(Op.SWITCH, 3, group=0)
    g.connect(imm(g, c, cond), sw, 0)
    g.connect(imm(g, c, cond), sw, 1)
    t = g.add(Op.MOV, group=0)
    f = g.add(Op.IMM, imm=7, group=0)
    j = g.add(Op.MOV, group=0)
    g.connect(sw, t, 0, branch=True)
    g.connect(sw, f, 0, branch=False)
    g.connect(t, j, 0)
    g.connect(f, j, 0)
    g.connect(j, sw, 2, init=1)
    store(g, c, j)
    res = run_graph(g, contexts=3)
    assert result(res) == want
    assert res.counters.ops["SWITCH"] == 3 and res.counters.ctx_ends == 3


def test_counters_of_a_two_pe_graph():
    g = Graph()
    c = g.add(Op.CTX, group=0, pe=(0, 0))
    m = g.add(Op.MOV, group=1, pe=(1, 0))
    g.connect(c, m, 0)
    store(g, m, m, group=1)
    res = run_graph(g, params=P2, contexts=2)
    cnt = res.counters
    assert cnt.ops == {"CTX": 2, "MOV": 2, "IMM": 2, "STD": 2}
    assert (cnt.tokens_mesh, cnt.token_hops) == (2, 4)        # (0,0) -> (1,0): E + LOCAL
    assert cnt.tokens_local == 6 and cnt.ctx_starts == 2 and cnt.ctx_ends == 2
    # Dbuf 0 is north of (0, 0): from (1, 0) that is W + N = 2 hops, each way.
    assert cnt.mem_packets == 4 and cnt.mem_hops == 8 and cnt.bytes_written == 16


# Faults ---------------------------------------------------------------------------------------

def test_operand_overflow_is_detected():
    g = Graph()
    c = g.add(Op.CTX, group=0, pe=(0, 0))
    it = g.add(Op.ITER, imm=loop_imm(8, 1), group=0, pe=(0, 0))
    g.connect(c, it, 0)
    add = g.add(Op.ADD, group=1, pe=(1, 0), end=True)
    g.connect(it, add, 0)                       # operand 1 never comes: tokens pile up
    img = assemble(g, place(g, P2), {}, 1)
    with pytest.raises(OperandOverflowError, match=r"overflow at \(1,0\).0 ADD operand 0"):
        run_image(img)


def test_deadlock_is_reported():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    add = g.add(Op.ADD, group=0, end=True)
    g.connect(c, add, 0)
    img = assemble(g, place(g, P1), {}, 1)
    with pytest.raises(DeadlockError, match=r"deadlock.*\(0,0\).1 ADD holds \[1, 0, 0\] tokens, "
                                            r"waits for operand \[1\]"):
        run_image(img)


def test_memory_fault_and_timeout():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    ld = g.add(Op.LDW, imm=P1.memory_bytes, group=0)
    g.connect(c, ld, 0)
    store(g, c, ld)
    with pytest.raises(MemoryFault, match="outside every Dbuf"):
        run_graph(g)
    g = Graph()
    c = g.add(Op.CTX, group=0)
    ld = g.add(Op.LDW, imm=2, group=0)
    g.connect(c, ld, 0)
    store(g, c, ld)
    with pytest.raises(MemoryFault, match="not aligned to 4 bytes"):
        run_graph(g)
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(1000, 1), group=0)
    g.connect(c, it, 0)
    acc = g.add(Op.FACC, imm=1000, group=0)
    g.fanout(it, [(acc, 0), (acc, 1)])
    store(g, c, acc)
    with pytest.raises(GoldenTimeout, match="timeout: 100 events"):
        run_graph(g, max_events=100)


# FC: exact vs fast, order randomization, Fig. 7, numpy ----------------------------------------

FC_CASES = [
    ("dense", 6, 40, 5, ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), None),
    ("sparse", 6, 40, 5, ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                     int_issue=1), "switch"),
    ("sparse", 6, 40, 5, ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                     int_issue=1), "gather"),
    ("sparse", 9, 33, 1, ArrayParams(rows=1, cols=3, slots=64, operand_depth=4,
                                     int_issue=1), "switch"),
    ("dense", 5, 19, 9, ArrayParams(rows=1, cols=1, slots=64, operand_depth=4, int_issue=1), None),
    ("sparse", 4, 48, 12, ArrayParams(rows=1, cols=1, dbuf_bytes=2048, slots=64, operand_depth=4,
                                      int_issue=1), "switch"),  # passes
    ("sparse", 4, 48, 12, ArrayParams(rows=1, cols=1, dbuf_bytes=2048, slots=64, operand_depth=4,
                                      int_issue=1), "gather"),
]


@pytest.mark.parametrize("mode, k, c, n, params, graph", FC_CASES)
def test_exact_and_fast_agree(mode, k, c, n, params, graph):
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = layers.make_weights((k, c), 0.35, SEED)
    x = layers.make_inputs(c, n, SEED + 1)
    plan = plan_fc(k, c, n, mode, params, **({"sparse_graph": graph} if graph else {}))
    fast = run_fc(plan, w, x)
    exact = run_fc(plan, w, x, exact=True, seed=SEED)
    assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16))
    assert exact.counters == fast.counters
    chk = reference.check(exact.result, w, x)
    assert chk.holds, chk
    if mode == "sparse":
        # Every weight goes through a value load (a stored one loads from values, a zero one,
        # address 0, BSCAN's token or the SWITCH's IMM, is LDHBZ's +0.0 without a Dbuf
        # access): one LDHBZ per weight, row and 4 lane groups of every item run (dummy items
        # included); the SWITCH graph's zero branch IMM fires for the weights FD-CSR does
        # not store (the sparse engine's only IMM; the gather graph has none); one BSCAN per
        # FD-CSR row decodes 16 of them.
        nnz = int(np.count_nonzero(w.view(np.uint16)))
        run_items = sum(plan.pass_contexts(p) for p in range(plan.passes)) * plan.engines
        weights = run_items * plan.kb * plan.Cw
        assert fast.counters.ops["LDHBZ"] == weights * -(-plan.gb // plan.wfan)
        imms = weights - nnz * plan.gblocks if graph == "switch" else 0
        assert fast.counters.ops.get("IMM", 0) == imms
        assert fast.counters.ops["BSCAN"] == weights // 16


@pytest.mark.parametrize("mode, graph", [("dense", None), ("sparse", "gather"),
                                         ("sparse", "switch"), ("sparse", "skip")])
@pytest.mark.parametrize("bias, relu", [(True, True), (True, False), (False, True)])
def test_epilogue_exact_and_fast_agree(mode, graph, bias, relu):
    # The bias + ReLU epilogue in every FC graph, over two passes on 1 x 1 (7 rows in blocks
    # of 2: a padding row, whose bias is 0): exact and fast give the same bits and counts,
    # those of the plain graph's result + b (one rounding) then maximum with +0.0; the
    # float64 check holds (and the plain reference does not).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    k, c, n = 7, 40, 5
    params = ArrayParams(rows=1, cols=1, slots=64, operand_depth=4, int_issue=1)
    w = layers.make_weights((k, c), 0.35 if mode == "sparse" else 1.0, SEED)
    x = layers.make_inputs(c, n, SEED + 1)
    b = np.random.default_rng([SEED, 5]).normal(0, 1, k).astype(np.float16)
    opts = dict(sparse_graph=graph, kb=2, contexts=3, double_buffer=False)
    plan = plan_fc(k, c, n, mode, params, bias=b if bias else None, relu=relu, **opts)
    assert plan.passes > 1 and plan.epilogue
    fast = run_fc(plan, w, x)
    exact = run_fc(plan, w, x, exact=True, seed=SEED)
    assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16))
    assert exact.counters == fast.counters
    acc = run_fc(plan_fc(k, c, n, mode, params, **opts), w, x).result.view(np.uint16)
    want = fp16.add(acc, b.view(np.uint16)[None, :]) if bias else acc
    want = fp16.maximum(want, fp16.POS_ZERO) if relu else want
    assert np.array_equal(fast.result.view(np.uint16), want)
    run_items = sum(plan.pass_contexts(p) for p in range(plan.passes)) * plan.engines
    outputs = run_items * plan.kb * plan.gb
    assert fast.counters.ops.get("FADD", 0) == (outputs if bias else 0)
    assert fast.counters.ops.get("FMAX", 0) == (outputs if relu else 0)
    chk = reference.check(exact.result, w, x, bias=b if bias else None, relu=relu)
    assert chk.holds, chk
    assert not reference.check(exact.result, w, x).holds


def test_random_shapes_exact_and_fast_agree():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rng = random.Random(SEED)
    for _ in range(3):
        mode = rng.choice(["dense", "sparse"])
        k, c, n = rng.randint(1, 9), rng.randint(1, 40), rng.randint(1, 9)
        params = ArrayParams(rows=rng.randint(1, 2), cols=rng.randint(1, 3), slots=64,
                             operand_depth=4, int_issue=1)
        density = rng.choice([0.0, 0.2, 1.0])
        w = layers.make_weights((k, c), density, rng.getrandbits(16))
        x = layers.make_inputs(c, n, rng.getrandbits(16))
        plan = plan_fc(k, c, n, mode, params)
        fast = run_fc(plan, w, x)
        exact = run_fc(plan, w, x, exact=True, seed=rng.getrandbits(16))
        case = (mode, k, c, n, params.rows, params.cols, density)
        assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16)), case
        assert exact.counters == fast.counters, case
        assert exact.cycles > 0


def test_every_order_gives_the_same_bits():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = layers.make_weights((6, 48), 0.4, SEED)
    x = layers.make_inputs(48, 8, SEED)
    plan = plan_fc(6, 48, 8, "sparse", ArrayParams(rows=1, cols=2, slots=64, operand_depth=4,
                                                   int_issue=1), kb=2, gb=1)
    base = run_fc(plan, w, x, exact=True)
    for s in range(SEED, SEED + 6):
        res = run_fc(plan, w, x, exact=True, seed=s, jitter=8)
        assert np.array_equal(res.result.view(np.uint16), base.result.view(np.uint16)), s
        assert res.counters == base.counters


def test_fig7_without_feedback_some_order_breaks_context_order():
    w = layers.make_weights((2, 32), 0.5, SEED)
    x = layers.make_inputs(32, 4, SEED)
    plan = plan_fc(2, 32, 4, "sparse", ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                                                   int_issue=1), feedback=False,
                   sparse_graph="switch")
    errors = []
    for s in range(SEED, SEED + 5):
        try:
            run_fc(plan, w, x, exact=True, seed=s, validate=False)
        except ContextOrderError as exc:
            errors.append((s, str(exc)))
    assert errors, "no seed misordered the graph without feedback edges"
    print(f"seed {errors[0][0]}: {errors[0][1]}")
    assert "context-order error" in errors[0][1] and "feedback edge" in errors[0][1]
    good = plan_fc(2, 32, 4, "sparse", ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                                                   int_issue=1), sparse_graph="switch")
    bits = {run_fc(good, w, x, exact=True, seed=s).result.tobytes()
            for s in range(SEED, SEED + 5)}
    assert len(bits) == 1


@pytest.mark.parametrize("window", [1, 2, 4])
def test_context_window(window):
    w = layers.make_weights((8, 16), 1.0, SEED)
    x = layers.make_inputs(16, 4, SEED)
    plan = plan_fc(8, 16, 4, "dense", ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                                                  int_issue=1), kb=1, gb=1)
    g = graphs.build_graph(plan)
    segments, outputs = dbuf_layout.pass_memory(plan, w, x, 0)
    img = assemble(g, place(g, plan.params), segments, plan.pass_contexts(0), window=window)
    res = run_image(img, seed=SEED)
    y = dbuf_layout.gather_outputs(plan, outputs, res.memory.read)
    assert np.array_equal(y.view(np.uint16), graphs.fc_result(plan, w, x).view(np.uint16))


def test_results_against_numpy_reference():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rng = np.random.default_rng(SEED)
    for mode in ("dense", "sparse"):
        k, c, n = 7, 300, 6
        w = (rng.standard_normal((k, c)) * 0.1).astype(np.float16)
        x = np.maximum(rng.standard_normal((n, c)), 0).astype(np.float16)
        plan = plan_fc(k, c, n, mode)
        res = run_fc(plan, w, x)
        y = res.result
        chk = reference.check(y, w, x)
        assert chk.holds and chk.max_error > 0 and chk.worst_ratio < 1
        tight = reference.check(y, w, x, mu=res.running, steps=plan.Cw)
        assert tight.holds and tight.max_bound <= chk.max_bound
        # A wrong result (one output off by a lot) is caught.
        bad = y.copy()
        bad[0, 0] = np.float16(bad[0, 0]) + np.float16(4 * chk.max_bound)
        assert not reference.check(bad, w, x).holds


def test_error_bound_holds_where_rounding_is_worst():
    # Summing 1.0 4096 times in binary16 sticks at 2048 (2048 + 1 rounds to even): the
    # error is 2048, and the bound must cover it while staying finite.
    w = np.ones((1, 4096), dtype=np.float16)
    x = np.ones((1, 4096), dtype=np.float16)
    plan = plan_fc(1, 4096, 1, "dense", ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                                                    int_issue=1))
    res = run_fc(plan, w, x)
    y = res.result
    assert float(y[0, 0]) == 2048.0
    b = reference.error_bound(w, x)
    assert b.shape == (1, 1) and 2048 <= b[0, 0] < 1e5
    assert reference.check(y, w, x).holds
    with_mu = reference.check(y, w, x, mu=res.running)
    assert with_mu.holds and 2048 <= with_mu.max_bound <= b[0, 0]
    # Exact sums have a tiny bound and zero error.
    chk = reference.check(np.ones((1, 1), dtype=np.float16), w[:, :1], x[:, :1])
    assert chk.holds and chk.max_error == 0 and chk.max_bound < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_paper_array_exact_and_fast_agree(mode):
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = layers.make_weights((96, 80), 0.25, SEED)
    x = layers.make_inputs(80, 20, SEED)
    plan = plan_fc(96, 80, 20, mode)
    fast = run_fc(plan, w, x)
    exact = run_fc(plan, w, x, exact=True, seed=SEED)
    assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16))
    assert exact.counters == fast.counters
    print(f"{mode}: {exact.cycles} cycles (estimate), {exact.events} events")


def test_second_integer_issue_speeds_the_sparse_graph_and_keeps_the_bits():
    # The cycle estimate models the RTL's pipes: with int_issue = 2 loads, stores and ITERs
    # issue on a pipe of their own beside the INT/CTRL pipe.  A 1 x 8 sparse engine issues 8
    # input loads and a value load per column besides its decode, so the second pipe takes
    # ~25 % off (docs/mapping.md) in the SWITCH graph, whose loop holds pipe 2; the results
    # do not depend on it.
    w = layers.make_weights((4, 64), 0.25, 3)
    x = layers.make_inputs(64, 32, 4)
    runs = {}
    for width in (1, 2):
        params = ArrayParams(rows=1, cols=1, int_issue=width, slots=128, operand_depth=4)
        plan = plan_fc(4, 64, 32, "sparse", params, kb=1, gb=8, sparse_graph="switch")
        runs[width] = run_fc(plan, w, x, exact=True)
    assert np.array_equal(runs[1].result.view(np.uint16), runs[2].result.view(np.uint16))
    assert runs[2].cycles < 0.8 * runs[1].cycles, (runs[1].cycles, runs[2].cycles)


@pytest.mark.parametrize("width", [0, 3, 1.5, True])
def test_int_issue_is_checked(width):
    with pytest.raises(FdpuError, match="int_issue must be 1 or 2"):
        ArrayParams(int_issue=width, slots=64, operand_depth=4)


def test_one_value_load_per_row_gives_the_same_bits():
    # wfan = 16: one value load per weight row and a MOV tree to its 8 FACCs (what the chooser
    # picks when mesh links are the limit); same accumulation order, same bits.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = layers.make_weights((3, 40), 0.3, SEED)
    x = layers.make_inputs(40, 32, SEED + 1)
    params = ArrayParams(rows=1, cols=1, slots=128, int_issue=2, operand_depth=4)
    runs = [run_fc(plan_fc(3, 40, 32, "sparse", params, kb=3, gb=8, wfan=wfan), w, x,
                   exact=True, seed=SEED) for wfan in (4, 16)]
    fast = run_fc(runs[1].plan, w, x)
    for r in runs + [fast]:
        assert np.array_equal(r.result.view(np.uint16), runs[0].result.view(np.uint16))
    assert fast.counters == runs[1].counters
    assert runs[1].counters.ops["LDHBZ"] * 2 == runs[0].counters.ops["LDHBZ"]
    assert reference.check(runs[1].result, w, x).holds


def test_bscan_engine_is_fp_bound_in_the_estimate():
    # per column the 3 x 8 sparse engine issues ~12.5 INT/CTRL (pipe 2) and ~17
    # load/store/ITER (pipe 0) against 24 FACC, so on one PE the estimate runs the FP pipe
    # above 90 % (before BSCAN: 0.90 FACC/cycle in the estimate, 0.61 on the RTL).
    params = ArrayParams(rows=1, cols=1, slots=128, int_issue=2, dbuf_bytes=1 << 16,
                         operand_depth=4)
    w = layers.make_weights((6, 64), 0.25, SEED)
    x = layers.make_inputs(64, 32, SEED + 1)
    plan = plan_fc(6, 64, 32, "sparse", params)
    assert (plan.kb, plan.gb, plan.wfan) == (3, 8, 4)
    res = run_fc(plan, w, x, exact=True)
    facc = res.counters.ops["FACC"]
    assert facc == 2 * 3 * 8 * 64 and facc / res.cycles > 0.92, res.cycles
    assert res.counters.ops["BSCAN"] == 2 * 3 * 4


@pytest.mark.parametrize("int_issue", [1, 2])
def test_pipe0_hint_moves_issues_to_pipe_0_in_the_estimate(int_issue):
    # The pipe0 hint: a FACC fed by two BSCANs of 32 tokens each waits for pipe 2 to emit
    # both streams; with the second BSCAN hinted it comes from pipe 0 at the same time (about
    # 32 cycles less) when int_issue = 2; with one INT pipe the hint changes nothing.  The
    # result is the same either way.
    params = ArrayParams(rows=1, cols=1, dbuf_bytes=1024, int_issue=int_issue, slots=64,
                         operand_depth=4)

    def graph(hint):
        g = Graph()
        c = g.add(Op.CTX, group=0)
        ones, base = imm(g, c, -1), imm(g, c, 0x3C00 - 2)
        acc = g.add(Op.FACC, imm=32, group=0)
        for operand in range(2):
            e = g.add(Op.BSCAN, imm=32, group=0, pipe0=hint and operand == 1)
            g.connect(ones, e, 0)
            g.connect(base, e, 1)
            g.connect(e, acc, operand)
        store(g, c, acc)
        return g

    runs = {hint: run_graph(graph(hint), params=params) for hint in (False, True)}
    assert result(runs[True]) == result(runs[False])
    t = {hint: r.time for hint, r in runs.items()}
    if int_issue == 2:
        assert t[True] + 28 <= t[False], t
    else:
        assert t[True] == t[False], t
