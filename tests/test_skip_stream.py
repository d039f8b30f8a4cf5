"""The skip graph streamed: one work item over several contexts (docs/dataflow.md, "Streamed
contexts").

A streamed skip plan (``chunks = G``) runs each item as ``G`` contexts, each over ``Cw / G``
of its columns (whole mask words); context ``k`` reads its own block of the item's data (mask
words, row words, stored values), and every context's row words but the first's carry the
count token's continue bit (ISA 1.7), so each row's FACC carries one sum over the item's
contexts.  Checked here: the refusals, the bits (exact and fast golden model alike, and the
same as one context per item where no row misses a context's columns; a row that does gets a
``+0.0`` step there), bias and ReLU, several passes, double buffering, the layout (a
descriptor a context, the DMA loads only the stored values, each block read first by its
context), the performance model and the chooser, the CLI and, on the RTL, a pass whose
contexts start before its DMA-in ends, bit for bit.
"""

import json

import numpy as np
import pytest
from cliutil import assert_user_error, run

from sw.compiler import dbuf_layout, layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.graph_kinds.skip import skip_stored
from sw.compiler.program import pass_images
from sw.models import choose, perf
from sw.models.golden_fc import run_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, token_continues, token_count
from sw.spec.system import System
from tb.host.job_plan import MemModel
from test_top import _fc

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

SEED = 11
P11 = ArrayParams(rows=1, cols=1, dbuf_bytes=1 << 16)
P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)


def _data(K, C, N, density=0.2, seed=SEED):
    """Pruned weights with an empty row and a row empty in its first half, inputs, a bias."""
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, C)).astype(np.float16)
    w[rng.random((K, C)) >= density] = 0
    w[1] = 0
    w[min(2, K - 1), :C // 2] = 0
    x = rng.standard_normal((N, C)).astype(np.float16)
    return w, x, rng.standard_normal(K)


def _plan(K, C, N, params, w, **kw):
    return planner.plan_fc(K, C, N, "sparse", params, sparse_graph="skip",
                           row_nnz=np.count_nonzero(w.view(np.uint16), axis=1), **kw)


@pytest.mark.parametrize("chunks, C, match", [
    (3, 128, "multiple of 32"),       # 128 / 3
    (8, 128, "multiple of 32"),       # 16 columns a context
    (2, 32, "multiple of 32"),        # one mask word: nothing to split
])
def test_skip_plans_that_cannot_stream_are_refused(chunks, C, match):
    w, _, _ = _data(8, C, 4)
    with pytest.raises(FdpuError, match=match):
        _plan(8, C, 4, P11, w, chunks=chunks)
    with pytest.raises(FdpuError, match="does not stream"):
        planner.plan_fc(8, 128, 4, "sparse", P11, sparse_graph="gather", chunks=2)


@pytest.mark.parametrize("params, K, C, N, kw", [
    (P11, 8, 128, 8, dict(chunks=4)),                            # one item, 32 columns each
    (P11, 8, 96, 8, dict(chunks=3)),
    (P22, 24, 256, 12, dict(chunks=2, kb=2, gb=1, contexts=3)),  # 3 items a pass, passes
    (ArrayParams(rows=1, cols=1, dbuf_bytes=4096), 16, 128, 4,
     dict(chunks=2, double_buffer=True)),                        # passes in alternate halves
])
def test_streamed_skip_plan_computes_the_graphs_bits(params, K, C, N, kw):
    w, x, b = _data(K, C, N)
    same = {k: v for k, v in kw.items() if k != "chunks"}
    base = _plan(K, C, N, params, w, bias=b, relu=True, **same)
    st = _plan(K, C, N, params, w, bias=b, relu=True, **kw)
    assert st.chunks == kw["chunks"] and st.engine.columns * st.chunks == st.Cw
    exact = run_fc(st, w, x, exact=True, seed=5)
    fast = run_fc(st, w, x)
    one = run_fc(base, w, x, exact=True)
    assert np.array_equal(fast.result.view(np.uint16), exact.result.view(np.uint16))
    assert exact.counters == fast.counters
    # One sum over the contexts: with finite inputs a +0.0 step added to a non-zero sum
    # changes nothing, so the outputs are those of one context per item but for the sign of
    # a zero.
    a, o = exact.result.astype(np.float32), one.result.astype(np.float32)
    assert np.array_equal(a, o)
    # The FACC steps: the stored weights, and one per context's columns where a row has none.
    rows = np.zeros((st.kblocks * st.kb, st.Cw), dtype=np.float16)
    rows[:K, :C] = w
    steps = skip_stored(st.Cw, rows, st.chunks).sum() - skip_stored(st.Cw, rows).sum()
    per_item = st.gblocks * st.gb
    assert exact.counters.ops["FACC"] - one.counters.ops["FACC"] >= steps * per_item
    assert exact.counters.ops["STD"] == st.chunks * one.counters.ops["STD"]


def test_each_context_reads_its_own_block_of_the_item():
    K, C, N = 16, 256, 8
    w, x, _ = _data(K, C, N)
    plan = _plan(K, C, N, P22, w, chunks=4, kb=2, gb=1, contexts=2)
    image = list(pass_images(plan, w, x))[0][0]
    assert image.contexts == plan.pass_contexts(0) * 4
    segments, _, layout = dbuf_layout.pass_contents(plan, w, x, 0)
    first = dict(map(tuple, image.meta["first_use"]))
    share = plan.chunk_bytes
    mask_words = plan.kb * plan.engine.columns // 32
    assert share == 4 * mask_words + 8 * plan.kb + 2 * plan.kb * plan.engine.columns
    loaded = 0
    for at in layout.places:
        if at.item is None:
            continue
        for k in range(plan.chunks):
            addr = at.data + k * share
            blob = segments[addr]
            # Only the stored values are loaded, not the block's room for all of them.
            assert len(blob) < share and len(blob) % 8 == 0
            loaded += len(blob)
            assert first[addr] <= at.context * plan.chunks + k
            tokens = np.frombuffer(blob[4 * mask_words:4 * mask_words + 8 * plan.kb], "<u8")
            for r, tok in enumerate(int(t) for t in tokens):
                # The row's values of this block follow its row words, the sum goes on
                # from the previous context's.
                assert token_continues(tok) == (k > 0)
                assert addr <= tok & 0xFFFF_FFFF < addr + len(blob)
                assert 1 <= token_count(tok) <= plan.engine.columns
        desc = image.segments[layout.tables[at.engine][0]]
        for k in range(plan.chunks):
            m = at.context * plan.chunks + k
            words = np.frombuffer(desc[16 * m:16 * m + 16], dtype="<u4")
            assert words[0] == at.data + k * share
            assert words[1] == at.input + k * 8 * plan.engine.columns
    assert loaded < 0.6 * plan.chunks * share * plan.kblocks
    faccs = [i for i in image.instructions().values() if i.op is Op.FACC]
    assert faccs and all(i.nsrc == 3 and i.count == 0 and i.step == 0 for i in faccs)


def test_model_and_chooser_stream_a_skip_layer_that_waits_for_its_data():
    # A traffic-bound single-item sparse layer (one DMA channel at 2 B a cycle): streamed,
    # its contexts run beside the DMA-in; the default takes the streamed plan where the model
    # predicts it faster, and a count given is honoured.
    sysm = System(dma_channels=1, mem_bandwidth=2.0, early_start=True)
    w = layers.make_weights((32, 4096), 0.25, 2)
    one = perf.predict(_plan(32, 4096, 4, P22, w), w, sysm)
    st = perf.predict(_plan(32, 4096, 4, P22, w, chunks=16), w, sysm)
    print(f"one context: {one.cycles}, streamed: {st.cycles} (DMA-in {st.passes[0].dma_in})")
    assert st.passes[0].hold < one.passes[0].hold and st.cycles < one.cycles
    layer = FcLayer.of(w, 4)
    opts = PlanOptions(mode="sparse", sparse_graph="skip")
    plan, chosen = choose.best_run(layer, P22, opts, System(dma_channels=1, mem_bandwidth=2.0))
    assert plan.chunks in choose.stream_counts(plan) and chosen.early_start
    given, _ = choose.best_run(layer, P22, PlanOptions(mode="sparse", sparse_graph="skip",
                                                       chunks=2), sysm)
    assert given.chunks == 2
    assert choose.stream_counts(_plan(32, 4096, 4, P22, w)) == [16, 8, 4, 2]


def test_cli_runs_a_streamed_skip_layer_and_refuses_a_bad_count(tmp_path, capsys):
    layer = ["--rows", "2", "--cols", "2", "--in-features", "256", "--out-features", "16",
             "--batch", "4", "--mode", "sparse", "--sparse-graph", "skip", "--density", "0.3"]
    status, out, err = run(capsys, "run", "--sim", "golden", *layer, "--chunks", "4",
                           "--engine", "exact", "--json", tmp_path / "r.json")
    assert status == 0, err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["plan"]["chunks"] == 4
    assert_user_error(capsys, "run", "--sim", "model", *layer, "--chunks", "16",
                      match="multiple of 32")


@pytest.mark.parametrize("sim, rows, top", [
    # The 2 x 2 top of tests/test_chain.py (its Verilator build); a 1 x 1 on Icarus: slow.
    ("verilator", 2, dict(slots=32, dbuf_bytes=8192)),
    pytest.param("icarus", 1, dict(slots=32, dbuf_bytes=8192), marks=pytest.mark.slow)])
def test_streamed_skip_item_starts_before_its_dma_in_ends_on_the_rtl(sim, rows, top):
    # One item per engine, 4 contexts each, with a bias and ReLU, a row empty in some of
    # its contexts' columns: with early start each context starts when its block is in (a
    # slow memory), bit for bit with the golden model, its instructions and Dbuf requests
    # counted alike (``_fc`` checks them).
    K, C = 2 * rows * rows, 256
    w, _, bias = _data(K, C, 4, density=0.3)
    kw = dict(mem=MemModel(latency=20, bandwidth=1.0), dma_channels=2, overlap=True,
              early_start=True)
    job = _fc(rows, rows, K, C, 4, "sparse", 0.3, sim, kwargs=kw, w=w,
              plan_kw=dict(sparse_graph="skip", chunks=4, kb=2, gb=1, bias=bias, relu=True),
              **top)
    run0 = job.passes[0]
    print(f"{job.cycles} cycles, DMA-in {run0.in_cycles}, contexts started during it "
          f"{run0.started_in} of 4")
    assert run0.status["o_retired"] == 4
    assert run0.started_in >= 2
