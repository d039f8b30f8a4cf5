"""The golden model's data-dependent instructions: ``BPOS``, ``ITER`` with a token count and
``FACC`` with a count operand (``docs/isa.md``), against their definitions written out here,
and the graph rules for the streams they make (``sw.compiler.dfg``: ``VARYING``).

Random parts print their seed; ``FDPU_SEED`` replays one.
"""

import os
import random

import numpy as np
import pytest

from sw.compiler.asm import assemble
from sw.compiler.dfg import VARYING, DfgError, Graph
from sw.compiler.place import place
from sw.models.golden import GoldenError, bpos, run_image
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op, count_token, loop_imm

SEED = int(os.environ.get("FDPU_SEED", "20261202"))
P1 = ArrayParams(rows=1, cols=1, dbuf_bytes=4096, slots=64, operand_depth=4, int_issue=1)
M32 = 0xFFFF_FFFF
OUT = 2048          # where the graphs store their results
WORDS = 1024        # where the per-context count tokens are (8 bytes each)


def bpos_reference(mask, base, count, step):
    """BPOS's tokens written straight from the ISA text."""
    return [(base + j * step) % (1 << 32) for j in range(count) if (mask & M32) >> j & 1]


@pytest.mark.parametrize("mask, count, step", [
    (0, 32, 8), (1, 32, 8), (1 << 31, 32, 8), (M32, 32, 8), (0xF0F0, 16, 8),
    (0xF0F0_0000, 16, 8), (0x8000_0001, 31, -4), ((0xBEEF << 32) | 0x11, 8, 2)])
def test_bpos_tokens_are_the_set_bits(mask, count, step):
    assert bpos(mask, 100, count, step) == bpos_reference(mask, 100, count, step)


def test_bpos_random_masks():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rng = random.Random(SEED)
    for _ in range(500):
        mask, base = rng.getrandbits(64), rng.getrandbits(32)
        count, step = rng.randint(1, 32), rng.randint(-32768, 32767)
        assert bpos(mask, base, count, step) == bpos_reference(mask, base, count, step)


def counted_graph(count_words, masks, step=8):
    """One context per entry: a row word (count token) from memory, the masks from memory.

    Per context ``c``: ``LDD`` the count token at ``WORDS + 8c`` (start = value address, count
    = number of steps); ``ITER`` (count from the token, step 2) gives the value addresses,
    ``LDHB`` the values; ``BPOS`` over the context's mask (``LDW`` at ``WORDS + 512 + 4c``)
    with base 0 gives addresses ``8 j`` of ones (``LDD`` at ``OUT + 1024 + 8j``, all 1.0);
    ``FACC`` with the count token as operand 2 sums ``value x 1.0``; ``STD`` at ``OUT + 8c``.
    """
    g = Graph()
    c = g.add(Op.CTX, group=0)
    a8 = g.add(Op.SHL, 1, 3, group=0)
    a4 = g.add(Op.SHL, 1, 2, group=0)
    g.connect(c, a8, 0)
    g.connect(c, a4, 0)
    word = g.add(Op.LDD, imm=WORDS, group=0)
    g.connect(a8, word, 0)
    it = g.add(Op.ITER, imm=loop_imm(0, 2), group=0)          # count 0: from the token
    val = g.add(Op.LDHB, group=0)
    g.connect(it, val, 0)
    mask = g.add(Op.LDW, imm=WORDS + 512, group=0)
    g.connect(a4, mask, 0)
    zero = g.add(Op.IMM, imm=0, group=0)
    g.connect(a4, zero, 0)
    bp = g.add(Op.BPOS, imm=loop_imm(32, step), group=0)
    g.connect(mask, bp, 0)
    g.connect(zero, bp, 1)
    one = g.add(Op.LDD, imm=OUT + 1024, group=0)
    g.connect(bp, one, 0)
    acc = g.add(Op.FACC, imm=0, group=0)                      # nsrc 3: operand 2 the count
    g.connect(val, acc, 0)
    g.connect(one, acc, 1)
    g.fanout(word, [(it, 0), (acc, 2)])
    out = g.add(Op.SHL, 1, 3, group=0)
    g.connect(c, out, 0)
    st = g.add(Op.STD, imm=OUT, end=True, group=0)
    g.connect(out, st, 0)
    g.connect(acc, st, 1)
    segments = {WORDS + 8 * i: w.to_bytes(8, "little") for i, w in enumerate(count_words)}
    segments.update({WORDS + 512 + 4 * i: m.to_bytes(4, "little") for i, m in enumerate(masks)})
    segments[OUT + 1024] = np.ones(4 * 32, dtype=np.float16).tobytes()
    segments[64] = np.arange(1, 17, dtype=np.float16).tobytes()
    return g, segments


def test_counted_facc_sums_a_data_dependent_row_per_context():
    # Values 1, 2, 3, ... at 64; each context sums the n values its row word names.
    rows = [(64, 3), (70, 1), (72, 5), (64, 2)]
    words = [count_token(s, n) for s, n in rows]
    masks = [0b10101, 1 << 31, 0x1F << 9, 0b11]
    g, seg = counted_graph(words, masks)
    g.validate(P1)
    img = assemble(g, place(g, P1), seg, contexts=len(rows))
    for seed in (None, SEED):
        res = run_image(img, seed=seed)
        for ctx, (s, n) in enumerate(rows):
            want = sum(range((s - 64) // 2 + 1, (s - 64) // 2 + 1 + n))
            got = np.frombuffer(res.memory.read(OUT + 8 * ctx, 8), dtype=np.float16)
            assert list(got) == [want] * 4, (ctx, seed)
        assert res.counters.ops["FACC"] == sum(n for _, n in rows)
        assert res.counters.ops["BPOS"] == len(rows)
        assert res.counters.ops["ITER"] == len(rows)


def test_counted_facc_count_zero_is_an_error():
    # A FACC whose operands 0 and 1 arrive but whose count token says 0 (the host pads an
    # empty row with one stored +0.0, so a correct image never does this).
    g = Graph()
    c = g.add(Op.CTX, group=0)
    one = g.add(Op.FIMM, imm=0x3C00, group=0)
    word = g.add(Op.LDD, imm=WORDS, group=0)
    g.connect(c, word, 0)
    acc = g.add(Op.FACC, imm=0, group=0)
    g.fanout(one, [(acc, 0), (acc, 1)])
    g.connect(word, acc, 2)
    bp = g.add(Op.BPOS, imm=loop_imm(1, 0), group=0)
    bit0 = g.add(Op.IMM, imm=1, group=0)
    g.connect(c, bit0, 0)
    g.fanout(bit0, [(bp, 0), (bp, 1)])
    g.connect(bp, one, 0)
    st = g.add(Op.STD, imm=OUT, end=True, group=0)
    g.connect(c, st, 0)
    g.connect(acc, st, 1)
    g.validate(P1)
    res = run_image(assemble(g, place(g, P1), {WORDS: count_token(64, 1).to_bytes(8, "little")}))
    assert res.counters.ops["FACC"] == 1
    img = assemble(g, place(g, P1), {WORDS: count_token(64, 0).to_bytes(8, "little")})
    with pytest.raises(GoldenError, match=r"FACC at \(0,0\)\.\d+: its count operand gives a "
                                          r"count of 0"):
        run_image(img)


def test_iter_token_count_zero_emits_nothing():
    # ITER of count 0 from its token, and a BPOS of an all-zero mask, fire and send nothing:
    # the STD behind a FACC of count 1 over a separate stream still ends the context.
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(0, 1), group=0)
    g.connect(c, it, 0)                       # the context ID: count 0, start = ID
    sink = g.add(Op.STW, imm=OUT, group=0)
    g.fanout(it, [(sink, 0), (sink, 1)])
    done = g.add(Op.IMM, imm=OUT + 64, end=False, group=0)
    g.connect(c, done, 0)
    st = g.add(Op.STW, end=True, group=0)
    g.fanout(done, [(st, 0), (st, 1)])
    g.validate(P1)
    res = run_image(assemble(g, place(g, P1), {}, contexts=3))
    assert res.counters.ops["ITER"] == 3 and res.counters.ops.get("STW") == 3


def test_varying_rates_in_the_graph():
    g, _ = counted_graph([count_token(64, 1)], [1])
    rates = g.rates()
    by_op = {n.op: n.id for n in g.nodes}
    assert rates[by_op[Op.BPOS]] == 1
    assert g.out_rate(by_op[Op.BPOS], 1) is VARYING
    assert rates[by_op[Op.LDHB]] is VARYING and rates[by_op[Op.FACC]] is VARYING
    assert g.out_rate(by_op[Op.FACC], rates[by_op[Op.FACC]]) == 1
    assert rates[by_op[Op.STD]] == 1
    # A varying stream may not leave its PE.
    g.nodes[by_op[Op.LDHB]].group = 1
    with pytest.raises(DfgError, match="rate rule: ITER#.* fires a data-dependent number of "
                                       "times .* to LDHB"):
        g.validate(ArrayParams(rows=1, cols=2, slots=64, operand_depth=4, int_issue=1))


def test_counted_facc_operands_must_vary_and_count_must_not():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), group=0)
    g.connect(c, it, 0)
    acc = g.add(Op.FACC, imm=0, group=0)
    g.fanout(it, [(acc, 0), (acc, 1)])
    g.connect(c, acc, 2)
    with pytest.raises(DfgError, match="data-dependent stream, but its operands 0 and 1 arrive"):
        g.rates()
    g = Graph()
    c = g.add(Op.CTX, group=0)
    bp = g.add(Op.BPOS, imm=loop_imm(32, 1), group=0)
    g.fanout(c, [(bp, 0), (bp, 1)])
    acc = g.add(Op.FACC, imm=0, group=0)
    g.fanout(bp, [(acc, 0), (acc, 1), (acc, 2)])
    with pytest.raises(DfgError, match="count operand .* must arrive a fixed number"):
        g.rates()


def test_an_mcast_sends_a_varying_stream_that_stays_on_its_pe():
    # MCAST fires once per context here, but each destination gets a data-dependent number
    # of its tokens: a FACC it feeds needs a count operand, and its edges stay on the PE.
    g = Graph()
    c = g.add(Op.CTX, group=0)
    mc = g.add(Op.MCAST, group=0)
    g.fanout(c, [(mc, 0), (mc, 1)])
    acc = g.add(Op.FACC, imm=0, group=0)
    g.fanout(mc, [(acc, 0), (acc, 1)])
    g.connect(c, acc, 2)
    rates = g.rates()
    assert rates[mc] == 1 and g.out_rate(mc, 1) is VARYING and rates[acc] is VARYING
    assert g.out_rate(acc, rates[acc]) == 1
    g.nodes[acc].group = 1
    with pytest.raises(DfgError, match="rate rule: MCAST#.* fires a data-dependent number of "
                                       "times .* to FACC"):
        g.validate(ArrayParams(rows=1, cols=2, slots=64, operand_depth=4, int_issue=1))
