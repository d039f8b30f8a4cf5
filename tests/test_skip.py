"""The zero-skipping ``skip`` graph on the golden model: its results and counts against the
definition (work proportional to the stored weights), the token-by-token interpreter against
the vectorized path, and the odd shapes (``sw.compiler.graphs``, ``dbuf_layout``).

Random parts print their seed; ``FDPU_SEED`` replays one.
"""

import os

from dataclasses import replace

import numpy as np
import pytest

from sw.compiler import balance, graphs, layers
from sw.compiler.graph_kinds.skip import SKIP_WORD, skip_stored
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.planner import plan_fc
from sw.models import choose, perf, reference
from sw.models.golden_fc import run_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.system import System

SEED = int(os.environ.get("FDPU_SEED", "20261202"))
P1 = ArrayParams(rows=1, cols=1, dbuf_bytes=32768, slots=128, int_issue=2, operand_depth=4)
P22 = ArrayParams(rows=2, cols=2, dbuf_bytes=16384, slots=128, int_issue=2, operand_depth=4)


def weights(k, c, density, seed):
    if density == 0:
        return np.zeros((k, c), dtype=np.float16)
    return layers.make_weights((k, c), density, seed)


def steps_wanted(plan, w):
    """FACC firings of the definition: per item row its stored weights (at least one), per
    lane group; dummy items and rows past K one each."""
    nz = np.maximum(1, np.count_nonzero(w.view(np.uint16), axis=1))
    pad_rows = plan.kblocks * plan.kb - plan.K
    dummies = sum(plan.pass_contexts(p) * plan.engines - len(plan.pass_items(p))
                  for p in range(plan.passes))
    return plan.gblocks * plan.gb * (nz.sum() + pad_rows) + dummies * plan.kb * plan.gb


CASES = [  # K, C, N, density, params
    (8, 40, 4, 0.25, P1), (1, 17, 1, 0.5, P1), (5, 100, 3, 0.05, P1), (8, 64, 4, 1.0, P1),
    (6, 33, 4, 0.0, P1), (32, 100, 8, 0.1, P22), (20, 300, 64, 0.01, P22), (13, 50, 4, 0.25, P22),
]


@pytest.mark.parametrize("k, c, n, density, params", CASES)
def test_exact_and_fast_agree_and_work_is_the_stored_weights(k, c, n, density, params):
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = weights(k, c, density, SEED)
    x = layers.make_inputs(c, n, SEED + 1)
    plan = plan_fc(k, c, n, "sparse", params, sparse_graph="skip")
    exact = run_fc(plan, w, x, exact=True, seed=SEED)
    fast = run_fc(plan, w, x)
    assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16))
    assert exact.counters == fast.counters
    assert fast.counters.ops["FACC"] == steps_wanted(plan, w)
    assert reference.check(fast.result, w, x, fast.running).holds
    # The vectorized definition is the graph's accumulation order.
    assert np.array_equal(graphs.fc_result(plan, w, x).view(np.uint16),
                          fast.result.view(np.uint16))


def test_odd_rows_and_blocks():
    # An all-zero row, an all-zero 32-column block, a single stored weight, a row stored only
    # in its last column: bit-exact with the definition, and only the stored weights' work.
    w = np.zeros((6, 70), dtype=np.float16)
    w[0, 5] = 1.5
    w[1, 69] = -2.0
    w[2, :32] = 0.25                     # columns 32..69 all zero
    w[4, 40:] = np.linspace(-1, 1, 30)
    x = layers.make_inputs(70, 4, SEED)
    plan = plan_fc(6, 70, 4, "sparse", P1, sparse_graph="skip")
    exact = run_fc(plan, w, x, exact=True)
    assert np.array_equal(exact.result.view(np.uint16),
                          graphs.fc_result(plan, w, x).view(np.uint16))
    assert exact.counters.ops["FACC"] == steps_wanted(plan, w)
    assert exact.counters.ops["BPOS"] == plan.kb * (plan.Cw // SKIP_WORD) * plan.gblocks


def test_empty_row_sign_is_documented():
    # A row without stored weights steps over one +0.0 at column 0: +0.0 for a non-negative
    # input there, -0.0 for a negative one (the dense graph gives +0.0 unless every input of
    # the row is negative).
    w = np.zeros((2, 16), dtype=np.float16)
    w[1, 3] = 1.0
    x = np.ones((4, 16), dtype=np.float16)
    x[2, 0] = -1.0
    plan = plan_fc(2, 16, 4, "sparse", P1, sparse_graph="skip")
    y = run_fc(plan, w, x, exact=True).result.view(np.uint16)
    assert list(y[:, 0]) == [0x0000, 0x0000, 0x8000, 0x0000]
    stored = skip_stored(plan.Cw, w)
    assert stored[0].sum() == 1 and stored[0, 0] and stored[1].sum() == 1 and stored[1, 3]


def test_skip_does_less_work_than_gather():
    w = layers.make_weights((16, 256), 0.09, SEED)
    x = layers.make_inputs(256, 8, SEED)
    runs = {g: run_fc(plan_fc(16, 256, 8, "sparse", P1, sparse_graph=g), w, x, exact=True)
            for g in ("gather", "skip")}
    ops = {g: sum(r.counters.ops.values()) for g, r in runs.items()}
    assert runs["skip"].counters.ops["FACC"] * 5 < runs["gather"].counters.ops["FACC"]
    assert ops["skip"] * 3 < ops["gather"]
    assert runs["skip"].cycles * 2 < runs["gather"].cycles


def skewed_weights(k, c, seed):
    """A pruned layer whose rows keep very different numbers of weights (1 to ~60 %)."""
    rng = np.random.default_rng(seed)
    keep = rng.uniform(0, 1, (k, c)) < np.geomspace(0.6, 1 / c, k)[rng.permutation(k)][:, None]
    w = rng.standard_normal((k, c)).astype(np.float16) * keep
    return w.astype(np.float16)


def test_balanced_rows_even_out_the_engines_and_keep_the_bits():
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = skewed_weights(48, 96, SEED)
    x = layers.make_inputs(96, 8, SEED)
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    plain = plan_fc(48, 96, 8, "sparse", P22, kb=2, gb=2, sparse_graph="skip")
    even = plan_fc(48, 96, 8, "sparse", P22, kb=2, gb=2, sparse_graph="skip", row_nnz=nnz)
    assert sorted(even.rows) == list(range(48)) and even.describe()["rows_balanced"]
    before, after = balance.load_balance(plain, w), balance.load_balance(even, w)
    print(f"load balance {before:.3f} -> {after:.3f}")
    assert after > before and after >= 0.95
    runs = [run_fc(p, w, x, exact=True) for p in (plain, even)]
    assert np.array_equal(runs[0].result.view(np.uint16), runs[1].result.view(np.uint16))
    assert runs[0].counters.ops["FACC"] == runs[1].counters.ops["FACC"]


@pytest.mark.parametrize("kw, match", [
    (dict(sparse_graph="gather", row_nnz=[1] * 8), "row_nnz balances the skip and reuse graphs'"),
    (dict(sparse_graph="skip", row_nnz=[1] * 7), r"row_nnz must be 8 integers in 0..32"),
    (dict(sparse_graph="skip", row_nnz=[-1] * 8), r"row_nnz must be 8 integers in 0..32"),
])
def test_row_nnz_is_checked(kw, match):
    with pytest.raises(FdpuError, match=match):
        plan_fc(8, 32, 4, "sparse", P1, **kw)


def test_skip_and_gather_differ_only_in_the_sign_of_zeros():
    # Finite inputs: every non-zero output bit-identical, zeros equal up to their sign.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    w = layers.make_weights((24, 200), 0.09, SEED)
    w[5] = 0                                            # an all-zero row
    x = layers.make_inputs(200, 12, SEED + 2)
    x[3, :] = np.abs(x[3, :])
    y = {g: run_fc(plan_fc(24, 200, 12, "sparse", P22, sparse_graph=g), w, x).result
         for g in ("gather", "skip")}
    a, b = y["gather"].view(np.uint16), y["skip"].view(np.uint16)
    zero = (a & 0x7FFF) == 0
    assert np.array_equal(a[~zero], b[~zero])
    assert np.all((b[zero] & 0x7FFF) == 0)


def test_default_refines_the_plan_of_a_layer_that_waits_for_its_data():
    # The default (no kb or chunks given, choose.best_run): a sparse layer whose contexts
    # wait for their data (one DMA channel at 2 B a cycle) runs streamed or with half the
    # planner's row block, whichever the model predicts fastest, where that beats the plan;
    # a given kb is honoured; with early start off nothing changes.
    p = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)
    slow = System(dma_channels=1, mem_bandwidth=2.0)
    w = layers.make_weights((32, 2048), 0.25, 2)
    layer = FcLayer.of(w, 4)
    opts = PlanOptions(mode="sparse", sparse_graph="skip")
    base = plan_fc(layer, p, opts)                    # the planner's row block
    once = perf.predict(base, w, slow)                # (early start: on with overlap)
    plan, chosen = choose.best_run(layer, p, opts, slow)
    early = replace(slow, early_start=True)
    half = perf.predict(plan_fc(layer, p, replace(opts, kb=base.kb // 2)), w, early).cycles
    counts = choose.stream_counts(base)
    streamed = perf.predict(plan_fc(layer, p, replace(opts, chunks=counts[0])), w,
                            early).cycles
    print(f"plan {once.cycles}, half the row block {half}, streamed ({counts[0]}) {streamed}")
    assert plan.graph.name == "skip" and chosen.early_start
    assert (plan.kb, plan.chunks) in ((base.kb // 2, 1), (base.kb, counts[0]))
    assert sum(f.hold for f in once.passes) >= choose.WAIT_SHARE * once.cycles
    assert perf.predict(plan, w, chosen).cycles == min(half, streamed) < once.cycles
    given, _ = choose.best_run(layer, p, PlanOptions(mode="sparse", sparse_graph="skip",
                                                     kb=base.kb, chunks=1), slow)
    assert given.kb == base.kb and given.chunks == 1
    kept = choose.best_run(layer, p, opts, slow, early_start=False)[0]
    assert (kept.kb, kept.chunks) == (base.kb, 1)


def test_default_sparse_graph_is_chosen_by_the_estimate():
    # Without a graph named, a sparse plan given its rows' stored weights runs skip where the
    # blocking estimate says it is faster (low density), gather where not; without them gather.
    p8 = ArrayParams(slots=128, int_issue=2, operand_depth=4)
    for density, want in ((1.0, "gather"), (0.09, "skip")):
        w = layers.make_weights((200, 512), density, SEED)
        nnz = np.count_nonzero(w.view(np.uint16), axis=1)
        assert plan_fc(200, 512, 64, "sparse", p8, row_nnz=nnz).sparse_graph == want
    assert plan_fc(200, 512, 64, "sparse", p8).sparse_graph == "gather"
    with pytest.raises(FdpuError, match="sparse_graph must be one of switch, gather, skip"):
        plan_fc(8, 32, 4, "sparse", P1, sparse_graph="fast")
