"""Split reduction (sw.compiler.split): the partial-sum and sum stages, the golden model's two
engines on them, the refusals, and the stages on the RTL bit for bit against the golden
model."""

import numpy as np
import pytest

from chainutil import run_chain_checked
from sw.compiler import layers, planner, split
from sw.models import golden_fc, reference
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError


def _layer(rows, cols, mode, graph, K, C, N, seed=1):
    p = ArrayParams(rows=rows, cols=cols, slots=32, dbuf_bytes=8192, operand_depth=4, int_issue=1)
    w = layers.make_weights((K, C), 1.0 if mode == "dense" else 0.3, seed)
    x = layers.make_inputs(C, N, seed + 1)
    b = np.random.default_rng(seed).normal(0, 1, K).astype(np.float16)
    kw = dict(sparse_graph=graph) if graph else {}
    return planner.plan_fc(K, C, N, mode, p, bias=b, relu=True, **kw), w, x, b


@pytest.mark.parametrize("rows, cols, mode, graph, K, C, N, ways", [
    (2, 4, "dense", None, 3, 40, 4, None),
    (2, 4, "sparse", "gather", 3, 70, 5, 2),
    (2, 4, "sparse", "switch", 2, 70, 4, 3),
    (2, 4, "sparse", "skip", 3, 100, 6, 2),
    (1, 2, "dense", None, 5, 9, 3, 2),                # padding rows and a short last slice
    (8, 8, "sparse", "skip", 10, 128, 8, None),       # the digits MLP's last layer
])
def test_split_stages_compute_the_layer(rows, cols, mode, graph, K, C, N, ways):
    # The partial sums and their sum: the exact interpreter and the vectorized engine give the
    # same bits and instruction counts on both stages, more engines share the reduction, and
    # the result is within the float64 bound of the whole layer (bias and ReLU included).
    plan, w, x, b = _layer(rows, cols, mode, graph, K, C, N)
    parts = split.split_layer(plan, w, ways)
    assert parts is not None and parts.ways >= 2
    assert parts.partial.split == parts.ways and parts.partial.split * parts.partial.Cw >= C
    assert parts.partial.engines > plan.engines or plan.engines == plan.params.num_pes
    xi = x
    for stage, sw in ((parts.partial, parts.partial_weights), (parts.total, parts.total_weights)):
        exact = golden_fc.run_fc(stage, sw, xi, exact=True)
        fast = golden_fc.run_fc(stage, sw, xi)
        assert np.array_equal(exact.result.view(np.uint16), fast.result.view(np.uint16))
        assert exact.counters.instructions == fast.counters.instructions
        xi = exact.result
    assert parts.total.graph.skips_zeros and parts.total.relu and parts.total.bias is not None
    # The bound of the whole layer's C steps covers the split order of roundings too.
    chk = reference.check(xi, w, x, steps=C + parts.ways, bias=parts.total.bias, relu=True)
    assert chk.holds, chk.as_dict()


def test_partial_weights_are_the_slices_of_the_layer():
    w = layers.make_weights((5, 37), 0.5, 4)
    pw = split.partial_weights(w, 3, 6, 13)
    assert pw.shape == (18, 37)
    stacked = pw.astype(np.float64).reshape(3, 6, 37)
    assert np.array_equal(stacked.sum(axis=0)[:5], w.astype(np.float64))
    assert not stacked[:, 5:].any()                       # the padding row
    for s in range(3):                                    # each copy only on its slice
        outside = np.ones(37, bool)
        outside[s * 13:(s + 1) * 13] = False
        assert not stacked[s][:, outside].any()
    ones = split.sum_weights(5, 3, 6)
    assert ones.shape == (5, 18) and (ones == 1).sum() == 15
    assert np.array_equal(ones.astype(np.float64) @ pw.astype(np.float64), w.astype(np.float64))


def test_ways_split_only_layers_that_leave_engines_idle():
    p = ArrayParams(slots=64, operand_depth=4, int_issue=1)
    small = planner.plan_fc(10, 128, 8, "dense", p)
    assert small.items * 2 <= p.num_pes and split.ways(small) >= 2
    assert split.ways(planner.plan_fc(10, 128, 8, "sparse", p, sparse_graph="skip")) == 2
    assert split.ways(planner.plan_fc(256, 64, 8, "dense", p)) == 1      # 64 items or more
    assert split.ways(planner.plan_fc(10, 16, 8, "sparse", p)) == 1      # one 16-column unit
    assert split.split_layer(planner.plan_fc(256, 64, 8, "dense", p),
                             layers.make_weights((256, 64), 1.0, 1)) is None


@pytest.mark.parametrize("kw, words", [
    (dict(split=0), "split must be a positive integer"),
    (dict(split=True), "split must be a positive integer"),
    (dict(split=2), "needs kb and gb"),
    (dict(split=2, kb=4, gb=1), "multiple of kb"),
    (dict(split=3, kb=3, gb=1, K=12), "multiple of kb"),
    (dict(split=4, kb=1, gb=1, K=8, C=9), "at most 3 slices"),
    (dict(split=2, kb=1, gb=1, mode="sparse", sparse_graph="skip", row_nnz=[3] * 6),
     "keeps its rows in order"),
])
def test_bad_splits_are_refused(kw, words):
    args = dict(K=6, C=40, N=4, mode="dense")
    args.update(kw)
    with pytest.raises(FdpuError, match=words):
        planner.plan_fc(args.pop("K"), args.pop("C"), args.pop("N"), args.pop("mode"),
                        ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                    int_issue=1), **args)


@pytest.mark.parametrize("sim, mode, graph", [
    # The dense split runs on Icarus through the CLI, streamed
    # (tests/test_net_cli.py::test_rtl_split_layer_streamed_icarus).
    pytest.param("icarus", "dense", None, marks=pytest.mark.slow),
    pytest.param("verilator", "dense", None, marks=pytest.mark.slow),
    pytest.param("icarus", "sparse", "skip", marks=pytest.mark.slow),
    ("verilator", "sparse", "skip")])
def test_split_layer_on_the_rtl_equals_the_golden_model(sim, mode, graph):
    # A layer, then a split one (partial sums, then their sum with bias and ReLU), chained on
    # chip in one simulation under memory stalls: bit for bit with the golden model, every
    # instruction it counts fired on the RTL.
    # The 2 x 2 top of tests/test_chain.py (one Verilator build for both).
    p = ArrayParams(rows=2, cols=2, slots=32, dbuf_bytes=8192, operand_depth=4, int_issue=1)
    kw = dict(sparse_graph=graph) if graph else {}
    density = 1.0 if mode == "dense" else 0.4
    w0 = layers.make_weights((64, 20), density, 7)
    w1 = layers.make_weights((2, 64), density, 8)
    x = layers.make_inputs(20, 4, 9)
    first = planner.plan_fc(64, 20, 4, mode, p, relu=True, **kw)
    b1 = np.random.default_rng(2).normal(0, 1, 2).astype(np.float16)
    small = planner.plan_fc(2, 64, 4, mode, p, bias=b1, relu=True, **kw)
    assert split.ways(small) == 2               # 2 rows on 4 PEs
    parts = split.split_layer(small, w1)
    plans = [first, parts.partial, parts.total]
    ws = [w0, parts.partial_weights, parts.total_weights]
    run_chain_checked(plans, ws, x, sim)
