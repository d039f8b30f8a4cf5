"""The reuse graph (sw/compiler/graph_kinds/reuse.py, docs/dataflow.md "The reuse graph"): the
skip graph's bits with each input loaded once for the item's rows and handed out by MCAST.

The golden model (exact and vectorized, bits and counts) against the skip graph, the item data
as the module says, fewer Dbuf requests than the skip graph where rows share columns, the
options it refuses, and on the RTL the layer bit for bit on both simulators.
"""

import numpy as np
import pytest

from sw.compiler import layers, planner
from sw.compiler.graph_kinds import GRAPHS
from sw.compiler.graph_kinds.reuse import offsets, union_columns
from sw.compiler.graph_kinds.skip import skip_stored
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import token_count
from sw.sweep import paper
from tb.host import runtime

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

P11 = ArrayParams(rows=1, cols=1, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 14)
P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)

# (K, C, N, density, params, plan options): several lane groups, partial contexts, a row
# without a stored weight, several passes, one row an item.
CASES = [
    (24, 96, 16, 0.3, P22, dict(kb=4)),
    (20, 64, 12, 0.5, P22, dict(kb=3, gb=2)),
    (9, 40, 5, 0.2, P22, dict(kb=2)),
    (16, 256, 8, 0.25, P22, dict(kb=4, gb=1, contexts=1)),
    (12, 64, 4, 0.1, P11, dict(kb=1)),
]


def _layer(K, C, N, density, params, kw, seed=3):
    w = layers.make_weights((K, C), density, seed)
    w[1] = 0                                           # a row without a stored weight
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, N, "sparse", params, sparse_graph="reuse", row_nnz=nnz, **kw)
    skip = planner.plan_fc(K, C, N, "sparse", params, sparse_graph="skip", row_nnz=nnz,
                           kb=plan.kb, gb=plan.gb, contexts=kw.get("contexts"))
    return plan, skip, w, layers.make_inputs(C, N, seed + 1)


@pytest.mark.parametrize("case", CASES)
def test_the_golden_model_computes_the_skip_graphs_bits(case):
    plan, skip, w, x = _layer(*case)
    exact = golden_fc.run_fc(plan, w, x, exact=True, seed=1)
    fast = golden_fc.run_fc(plan, w, x)
    ref = golden_fc.run_fc(skip, w, x)
    assert np.array_equal(exact.result.view(np.uint16), ref.result.view(np.uint16))
    assert np.array_equal(fast.result.view(np.uint16), ref.result.view(np.uint16))
    # The vectorized counters are the interpreter's, and the FACCs step as the skip graph's.
    assert fast.counters.as_dict() == exact.counters.as_dict()
    assert fast.counters.ops["FACC"] == ref.counters.ops["FACC"]
    # One MCAST per union column (one row-bits load) and lane group.
    assert fast.counters.ops["MCAST"] == fast.counters.ops["LDH"] * plan.gb


def test_rows_that_share_columns_load_each_input_once():
    # 4 rows at 30 %: an input per column any row stores and lane group, not per weight.
    plan, skip, w, x = _layer(*CASES[0])
    mine, theirs = golden_fc.run_fc(plan, w, x).counters, golden_fc.run_fc(skip, w, x).counters
    assert mine.ops["LDD"] < 0.8 * theirs.ops["LDD"]
    assert mine.mem_packets < theirs.mem_packets


def test_the_item_data_hold_the_union_and_the_row_bits():
    plan, _, w, _ = _layer(*CASES[1])
    spec, kind = plan.engine, plan.graph
    blk = np.zeros((plan.kb, plan.C), dtype=np.float16)
    blk[:, :] = w[:plan.kb]
    stored, nbytes = kind.encode(spec, blk)
    assert np.array_equal(stored, skip_stored(plan.Cw, blk))
    cols = union_columns(stored)
    base = 0x1000
    data = kind.item_data(spec, blk, stored, nbytes, base)
    off_m, off_u, off_t, off_r, off_v = offsets(spec, len(cols))
    mask = np.unpackbits(np.frombuffer(data[off_m:off_u], np.uint8), bitorder="little")
    assert np.flatnonzero(mask[:plan.Cw]).tolist() == cols.tolist()
    tok = int.from_bytes(data[off_u:off_u + 8], "little")
    assert (tok & 0xFFFF_FFFF, token_count(tok)) == (base + off_r, len(cols))
    bits = np.frombuffer(data[off_r:off_r + 2 * len(cols)], "<u2")
    assert [[b >> k & 1 for k in range(plan.kb)] for b in bits] == stored[:, cols].T.tolist()
    assert nbytes == off_v + -(-2 * int(stored.sum()) // 8) * 8
    assert kind.item_bytes(spec, int(stored.sum())) >= nbytes


def test_it_runs_only_when_named_and_holds_at_most_four_rows():
    w = layers.make_weights((64, 256), 0.05, 1)
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    auto = planner.plan_fc(64, 256, 64, "sparse", P22, row_nnz=nnz)
    assert auto.graph.name != "reuse"
    assert "reuse" not in paper.GRAPHS and "reuse" in GRAPHS
    named = planner.plan_fc(64, 256, 64, "sparse", P22, sparse_graph="reuse", row_nnz=nnz)
    assert named.graph.name == "reuse" and named.kb <= 4
    with pytest.raises(FdpuError, match="kb must be at most 4 for the reuse graph"):
        planner.plan_fc(64, 256, 64, "sparse", P22, sparse_graph="reuse", kb=8)


@pytest.mark.parametrize("sim, case", [
    # MCAST runs on both simulators on one PE (tests/test_pe.py); the array on Icarus: slow.
    pytest.param("verilator", CASES[0], id="verilator"),
    pytest.param("icarus", (12, 64, 8, 0.3, P22, dict(kb=3)), id="icarus",
                 marks=pytest.mark.slow),
])
def test_rtl_runs_the_reuse_graph_bit_exact(sim, case):
    plan, _, w, x = _layer(*case)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    # Four DMA channels: the top of tests/test_shared_weights.py (one Verilator build).
    y, job = runtime.run_fc_rtl(plan, w, x, sim, max_cycles=200_000, dma_channels=4)
    assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16))
