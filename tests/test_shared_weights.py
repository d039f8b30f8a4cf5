"""A row block's weights loaded once: the items of its lane-group blocks read one copy
(``sw.compiler.fc_plan.FcPlan.item``, ``sw.compiler.dbuf_layout.pass_layout``; docs/mapping.md,
"Which item runs where").

The item order (a bijection onto the row and lane-group blocks, unchanged with one lane-group
block), the layout (one copy of a row block's data and bias per Dbuf and pass, one zero block
for a Dbuf's dummy items), the planner (passes sized by the copies), the skip graph's balance
over the new order, the performance model's bytes, and on the RTL the layers bit-exact with the
DMA reading each row block once.
"""

import dataclasses

import numpy as np
import pytest

from sw.compiler import dbuf_layout, layers, planner
from sw.compiler.balance import load_balance
from sw.compiler.program import pass_images
from sw.models import golden_fc, perf, reference
from sw.spec.arch import ArrayParams
from sw.spec.system import System
from tb.host import runtime
from tb.host.job_plan import plan_job

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)
P44 = ArrayParams(rows=4, cols=4, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)

# (K, C, N, mode, graph, params, plan options): one to several lane-group blocks, partial last
# contexts, several passes, double buffering, a split.
CASES = [
    (40, 96, 24, "dense", None, P22, dict(kb=4, gb=2)),                 # G 3
    (64, 256, 32, "dense", None, P44, dict(kb=4, gb=2)),                # G 4, 16 engines
    (52, 64, 9, "sparse", "gather", P22, dict(kb=4, gb=1)),             # G 3, partial context
    (72, 128, 16, "sparse", "skip", P22, dict(gb=1)),                   # G 4, balanced rows
    (64, 512, 16, "dense", None, P22, dict(kb=8, gb=1, contexts=4)),    # G 4, several passes
    (64, 512, 16, "dense", None, P22, dict(kb=8, gb=1, double_buffer=True)),
    (32, 64, 8, "dense", None, P22, dict(kb=4, gb=1, split=2)),         # G 2, split
    (40, 96, 16, "dense", None, P22, dict(kb=4, gb=4)),                 # G 1
]


def _plan(K, C, N, mode, graph, params, kw, seed=5):
    w = layers.make_weights((K, C), 1.0 if mode == "dense" else 0.3, seed)
    kw = dict(kw)
    if graph == "skip":
        kw["row_nnz"] = np.count_nonzero(w.view(np.uint16), axis=1)
    return planner.plan_fc(K, C, N, mode, params, sparse_graph=graph, **kw), w


@pytest.mark.parametrize("case", CASES)
def test_every_row_and_lane_group_block_is_one_item(case):
    plan, _ = _plan(*case)
    kbi, gbi = plan.item_blocks
    pairs = set(zip(kbi.tolist(), gbi.tolist()))
    assert len(pairs) == plan.items == len(kbi)
    assert pairs == {(k, g) for k in range(plan.kblocks) for g in range(plan.gblocks)}
    assert all(plan.item(i) == (kbi[i], gbi[i]) for i in range(plan.items))
    # Of the two orders, the one with fewer bytes in the Dbufs; rows fastest on a tie (and
    # with one lane-group block, where the two are one).
    i = np.arange(plan.items)
    plain = (i % plan.kblocks, i // plan.kblocks)
    if plan.dbuf_bytes() >= plan.dbuf_bytes(plain):
        assert kbi.tolist() == plain[0].tolist() and gbi.tolist() == plain[1].tolist()
    # Either way an engine's contexts go through the lane-group blocks in order (its first
    # contexts read one input block: early start loads it first).
    for p in range(plan.passes):
        items = np.asarray(plan.pass_items(p))
        for e in range(plan.engines):
            seq = gbi[items[e::plan.engines]]
            assert np.all(np.diff(seq) >= 0), (p, e, seq)


@pytest.mark.parametrize("case", CASES)
def test_a_row_block_has_one_copy_per_dbuf_and_pass(case):
    plan, w = _plan(*case)
    x = layers.make_inputs(plan.C, plan.N, 5)
    for p in range(plan.passes):
        _, _, layout = dbuf_layout.pass_contents(plan, w, x, p)
        where, dummies = {}, []
        for at in layout.places:
            d = plan.params.dbuf_of(at.data)[0]
            if at.item is None and plan.graph.dummy_reads_any:
                dummies.append((d, at.data))          # reads a row block of its Dbuf
                continue
            key = (d, None if at.item is None else plan.item(at.item)[0])
            assert where.setdefault(key, at.data) == at.data
        # Different row blocks (or the zero block of dummies) never share bytes.
        assert len(set(where.values())) == len(where)
        assert all((d, a) in {(dd, aa) for (dd, _), aa in where.items()} for d, a in dummies)
        assert {d: sum(1 for dd, _ in where if dd == d) for d, _ in where} == \
            plan.pass_weight_blocks(p)
    if plan.gblocks > 1 and plan.passes == 1:
        # The lane-group blocks of a row block run on engines of one Dbuf (but where a
        # Dbuf's slots end inside a row block).
        homes = {}
        for i in range(plan.items):
            e = i % plan.per_pass % plan.engines
            homes.setdefault(plan.item(i)[0], set()).add(plan.homes[e][1])
        split = sum(len(h) > 1 for h in homes.values())
        assert split <= len({d for _, d in plan.homes})


@pytest.mark.parametrize("case", [c for c in CASES if "split" not in c[-1]])
def test_the_golden_model_computes_the_layer(case):
    # (A split plan's weights are partial sums: tests/test_split.py runs them.)
    plan, w = _plan(*case)
    x = layers.make_inputs(plan.C, plan.N, 5)
    res = golden_fc.run_fc(plan, w, x, exact=False)
    chk = reference.check(res.result, w, x, steps=plan.C)
    assert chk.holds, chk.as_dict()


def test_the_image_holds_each_row_block_once():
    # 40 x 96 dense, batch 24: 3 lane-group blocks of 2 groups; the weights cross the port
    # once (about 40 x 96 x 2 bytes), not three times.
    plan, w = _plan(*CASES[0])
    x = layers.make_inputs(plan.C, plan.N, 5)
    weight_bytes = sum(len(seg) for img, _ in pass_images(plan, w, x)
                       for a, seg in img.segments.items()
                       if len(seg) == plan.item_bound)
    blocks = sum(len(set(b)) for b in [
        [(plan.params.dbuf_of(at.data)[0], at.data)
         for at in dbuf_layout.pass_contents(plan, w, x, p)[2].places]
        for p in range(plan.passes)])
    assert weight_bytes == blocks * plan.item_bound
    assert blocks < plan.items


def test_sharing_lets_a_layer_take_fewer_passes():
    # 64 x 512 dense, batch 16 in lane groups of one: 8 row blocks of 8 KiB, 4 lane-group
    # blocks, one engine per 64 KiB Dbuf.  With a copy per item the 8 contexts would need
    # 64 KiB of weights per Dbuf beside 16 KiB of inputs; with one per row block, 16 KiB.
    plan = planner.plan_fc(64, 512, 16, "dense", P22, kb=8, gb=1)
    assert (plan.gblocks, plan.engines, plan.item_bound) == (4, 4, 8192)
    assert plan.passes == 1 and plan.contexts == 8
    assert max(plan.pass_weight_blocks(0).values()) == 2
    assert plan.contexts * plan.item_bound + 4 * plan.input_bytes > P22.dbuf_bytes


def test_skip_balance_holds_with_several_lane_group_blocks():
    # Rows keeping 1-60 % of their weights, three lane-group blocks: the balance still deals
    # the row blocks to the engines that run them.
    rng = np.random.default_rng(11)
    K, C = 96, 256
    keep = rng.uniform(0.01, 0.6, K)
    w = np.where(rng.random((K, C)) < keep[:, None], rng.standard_normal((K, C)), 0)
    w = w.astype(np.float16)
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, 24, "sparse", P22, sparse_graph="skip", row_nnz=nnz, gb=2,
                           kb=4)
    assert plan.gblocks == 3
    flat = dataclasses.replace(plan, row_order=())
    print(f"load balance: {load_balance(flat, w):.3f} -> {load_balance(plan, w):.3f}")
    assert load_balance(plan, w) >= 0.95 > load_balance(flat, w)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[4]])
@pytest.mark.parametrize("edge", [False, True])
def test_the_model_loads_what_the_runtime_loads(case, edge):
    # The model reads the one layout: the same external bytes as the runtime's job plan, each
    # row block once.
    plan, w = _plan(*case)
    x = layers.make_inputs(plan.C, plan.N, 5)
    passes = [(img, [(a, plan.output_bytes) for _, a in outs])
              for img, outs in pass_images(plan, w, x)]
    job = plan_job(plan.params, passes, dma_channels=2, config_ports=1,
                   double_buffer=plan.double_buffer, edge_multicast=edge)
    pred = perf.predict(plan, w, System(dma_channels=2, config_ports=1, early_start=False,
                                        edge_multicast=edge))
    assert [p.ext_in for p in pred.passes] == job.ext_in
    # Side-by-side output blocks (items that share their weights) go out in one descriptor.
    assert [p.ext_out for p in pred.passes] == job.ext_out
    assert sum(pl["nouts"] for pl in job.passes) < plan.items


@pytest.mark.parametrize("case", CASES)
def test_a_dbufs_results_leave_in_one_descriptor(case):
    # A Dbuf's output blocks lie side by side after its item data: one DMA-out descriptor
    # per Dbuf that holds results, whatever the graph, passes, split or double buffering.
    plan, w = _plan(*case)
    x = layers.make_inputs(plan.C, plan.N, 5)
    passes = [(img, [(a, plan.output_bytes) for _, a in outs])
              for img, outs in pass_images(plan, w, x)]
    job = plan_job(plan.params, passes, dma_channels=2, double_buffer=plan.double_buffer)
    for p, (pl, (_, reads)) in enumerate(zip(job.passes, passes)):
        holders = {plan.params.dbuf_of(a)[0] for a, _ in reads}
        assert pl["nouts"] == len(holders), f"pass {p}"
        layout = dbuf_layout.pass_layout(plan, p, lambda i: 8)
        for at in layout.places:      # after every byte of the Dbuf's item data
            assert all(at.output >= o.data + o.nbytes for o in layout.places
                       if plan.homes[o.engine][1] == plan.homes[at.engine][1])


def _unshared(plan):
    """Return ``plan`` with its items in the row-blocks-fastest order, each row block's
    lane-group blocks on different engines (so on different Dbufs, no copy shared)."""
    i = np.arange(plan.items)
    other = dataclasses.replace(plan)
    other.__dict__["item_blocks"] = (i % plan.kblocks, i // plan.kblocks)
    return other


def _job(plan, w, x, flags):
    """Return the runtime's job plan of ``plan`` run with ``flags`` (as ``run_fc_rtl``)."""
    passes = [(img, [(a, plan.output_bytes) for _, a in outs])
              for img, outs in pass_images(plan, w, x)]
    return plan_job(plan.params, passes, **flags)


# Four DMA channels: the 2 x 2 top the reuse graph's and the edge multicast's RTL tests run on
# (one Verilator build for the three modules).
CH4 = dict(dma_channels=4)
FLAGS = dict(CH4, overlap=True, early_start=True, edge_multicast=True)
# Small layers whose items still share row blocks across engines, for Icarus (a system top on
# Icarus runs 10-50x slower than on Verilator).
SMALL = [(12, 32, 12, "dense", None, P22, dict(kb=4, gb=1)),            # G 3, 3 contexts
         (20, 32, 12, "sparse", "skip", P22, dict(gb=1))]              # G 3, balanced rows


# CI: both layers on Verilator, the small skip layer with the flags on Icarus; the rest on
# Icarus (each a twin of a CI case) in the slow tier.
@pytest.mark.parametrize("sim, case, flags", [
    pytest.param("verilator", CASES[0], CH4, id="verilator-dense"),
    pytest.param("verilator", CASES[3], FLAGS, id="verilator-skip-flags"),
    pytest.param("icarus", SMALL[1], FLAGS, id="icarus-small-skip-flags"),
    pytest.param("icarus", SMALL[0], CH4, id="icarus-small-dense", marks=pytest.mark.slow),
    pytest.param("icarus", CASES[0], CH4, id="icarus-dense", marks=pytest.mark.slow),
    pytest.param("icarus", CASES[3], FLAGS, id="icarus-skip-flags", marks=pytest.mark.slow),
])
def test_rtl_runs_shared_row_blocks_bit_exact(sim, case, flags):
    plan, w = _plan(*case)
    x = layers.make_inputs(plan.C, plan.N, 5)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    y, job = runtime.run_fc_rtl(plan, w, x, sim, max_cycles=200_000, **flags)
    assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16))
    # The hardware's count of external bytes is the job plan's, and below what the same
    # items in the order without sharing read (a copy of a row block per lane-group block).
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in)
    assert sum(job.ext_in) < sum(_job(_unshared(plan), w, x, flags).ext_in)
