"""Streamed plans: one work item over several contexts (docs/dataflow.md, "Streamed contexts").

A streamed plan (``chunks = G``) runs each item as ``G`` contexts, each stepping over ``Cw /
G`` of its columns; the FACCs' span (ISA 1.6, ``sw.spec.isa.facc_imm``) carries the sum from
one context to the next, and each context stores its partial sums, the last one's being the
outputs.  Checked here: the refusals, the bits (the same as the plan of one context per item,
exact and fast golden model, bias and ReLU, several passes, double buffering), the layout (a
descriptor a context, the ``k``-th share of an item's weights read first by its ``k``-th
context), the performance model, the CLI and, on the RTL, a single-item pass whose contexts
start before its DMA-in ends, bit for bit.
"""

import json
from dataclasses import replace

import numpy as np
import pytest
from cliutil import assert_user_error, run

from sw.compiler import dbuf_layout, layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.program import pass_images
from sw.models import choose, perf
from sw.models.golden_fc import run_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op
from sw.spec.system import System
from tb.host.job_plan import MemModel
from test_top import _fc

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

P11 = ArrayParams(rows=1, cols=1, dbuf_bytes=1 << 16)
P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)


def _data(K, C, N, seed=3):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, C)).astype(np.float16)
    x = rng.standard_normal((N, C)).astype(np.float16)
    return w, x, rng.standard_normal(K)


@pytest.mark.parametrize("kw, match", [
    (dict(mode="sparse", sparse_graph="gather"), "does not stream"),
    (dict(mode="sparse", sparse_graph="switch"), "does not stream"),
    (dict(mode="dense", chunks=3), "power of two"),
    (dict(mode="dense", chunks=64), "power of two"),          # 1 column a context
    (dict(mode="dense", kb=4, gb=1, split=2), "split"),
])
def test_plans_that_cannot_stream_are_refused(kw, match):
    kw = dict(dict(chunks=4), **kw)
    mode = kw.pop("mode")
    with pytest.raises(FdpuError, match=match):
        planner.plan_fc(8, 64, 4, mode, P11, **kw)


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "4"])
def test_chunks_must_be_a_positive_integer(bad):
    with pytest.raises(FdpuError, match="chunks must be a positive integer"):
        PlanOptions(mode="dense", chunks=bad)


@pytest.mark.parametrize("params, K, C, N, kw", [
    (P11, 8, 64, 8, dict(chunks=4)),                           # one item, bias and ReLU
    (P11, 8, 96, 8, dict(chunks=3)),                           # 32 columns a context
    (P22, 24, 128, 12, dict(chunks=8, kb=2, gb=1, contexts=3)),  # 3 items a pass, 3 passes
    (ArrayParams(rows=1, cols=1, dbuf_bytes=4096), 16, 64, 4,
     dict(chunks=2, double_buffer=True)),                      # passes in alternate halves
])
def test_streamed_plan_computes_the_same_bits(params, K, C, N, kw):
    w, x, b = _data(K, C, N)
    same = {k: v for k, v in kw.items() if k != "chunks"}
    base = planner.plan_fc(K, C, N, "dense", params, bias=b, relu=True, **same)
    st = planner.plan_fc(K, C, N, "dense", params, bias=b, relu=True, **kw)
    assert st.chunks == kw["chunks"] and st.engine.columns * st.chunks == st.Cw
    exact = run_fc(st, w, x, exact=True, seed=5)
    fast = run_fc(st, w, x)
    one = run_fc(base, w, x, exact=True)
    # The FACC's span carries the sum over the contexts: the accumulation order, and so the
    # bits, are the plan's of one context per item.
    assert np.array_equal(exact.result.view(np.uint16), one.result.view(np.uint16))
    assert np.array_equal(fast.result.view(np.uint16), exact.result.view(np.uint16))
    assert exact.counters == fast.counters
    assert exact.counters.ops["FACC"] == one.counters.ops["FACC"]
    # Every context stores its partial sums: chunks x as many stores.
    assert exact.counters.ops["STD"] == st.chunks * one.counters.ops["STD"]


def test_each_context_reads_its_own_share_of_the_weights():
    w, x, _ = _data(16, 128, 8)
    plan = planner.plan_fc(16, 128, 8, "dense", P22, chunks=4, kb=2, gb=1, contexts=2)
    images = list(pass_images(plan, w, x))
    image = images[0][0]
    assert image.contexts == plan.pass_micc_contexts(0) == plan.pass_contexts(0) * 4
    _, _, layout = dbuf_layout.pass_contents(plan, w, x, 0)
    first = dict(map(tuple, image.meta["first_use"]))
    share = plan.chunk_bytes
    assert share == 2 * plan.kb * 32
    for at in layout.places:
        if at.item is None:
            continue
        for k in range(plan.chunks):
            assert image.segments[at.data + k * share] is not None
            assert first[at.data + k * share] <= at.context * plan.chunks + k
        assert first[at.input] <= at.context * plan.chunks
        # The descriptor of context t G + k: the k-th share of weights and inputs.
        blob = image.segments[layout.tables[at.engine][0]]
        for k in range(plan.chunks):
            m = at.context * plan.chunks + k
            words = np.frombuffer(blob[16 * m:16 * m + 16], dtype="<u4")
            assert words[0] == at.data + k * share
            assert words[1] == at.input + k * 8 * plan.engine.columns
            assert words[2] == at.output
    assert all(n == plan.entries * 16 for _, n in layout.tables)
    # Contexts 1 .. G-1 of an item are first to read something (their share of weights).
    assert sorted(set(first.values())) == list(range(image.contexts))
    # The FACCs carry a span: log2 of the columns a context steps over.
    faccs = [i for i in image.instructions().values() if i.op is Op.FACC]
    assert len(faccs) == plan.kb * plan.gb * plan.engines
    for insn in faccs:
        assert insn.count == plan.Cw and 1 << insn.step == plan.engine.columns


def test_model_starts_each_context_when_its_share_is_in():
    # A traffic-bound single-item layer: streamed, its contexts run beside the DMA-in, so
    # the model's end to end falls towards the DMA-in alone.
    w = layers.make_weights((32, 4096), 1.0, 1)
    sysm = System(early_start=True)
    one = perf.predict(planner.plan_fc(32, 4096, 4, "dense", P22), w, sysm)
    st = perf.predict(planner.plan_fc(32, 4096, 4, "dense", P22, chunks=16), w, sysm)
    print(f"one context: {one.cycles}, streamed: {st.cycles} (DMA-in {st.passes[0].dma_in})")
    assert st.passes[0].hold < one.passes[0].hold


def test_cli_runs_and_refuses_chunks(tmp_path, capsys):
    layer = ["--rows", "2", "--cols", "2", "--in-features", "256", "--out-features", "16",
             "--batch", "4"]
    status, out, err = run(capsys, "run", "--sim", "model", *layer, "--mode", "dense",
                           "--chunks", "4", "--json", tmp_path / "r.json")
    assert status == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["plan"]["chunks"] == 4
    assert_user_error(capsys, "run", "--sim", "model", *layer, "--mode", "sparse",
                      "--sparse-graph", "gather", "--chunks", "4", match="does not stream")
    assert_user_error(capsys, "run", "--sim", "model", *layer, "--mode", "dense",
                      "--chunks", "3", match="power of two")


@pytest.mark.parametrize("sim, rows, top", [
    # The 2 x 2 top of tests/test_chain.py (its Verilator build); a 1 x 1 on Icarus: slow.
    ("verilator", 2, dict(slots=32, dbuf_bytes=8192)),
    pytest.param("icarus", 1, dict(slots=32, dbuf_bytes=8192), marks=pytest.mark.slow)])
def test_streamed_item_starts_before_its_dma_in_ends_on_the_rtl(sim, rows, top):
    # One item per engine, 8 contexts each, with a bias: with early start each
    # context starts when its share of the weights is in (a slow memory), bit for bit with the
    # golden model, its instructions and Dbuf requests counted alike (``_fc`` checks them).
    K, C = 4 * rows * rows, 256
    bias = np.linspace(-1, 1, K)
    kw = dict(mem=MemModel(latency=20, bandwidth=1.0), dma_channels=2, overlap=True,
              early_start=True)
    job = _fc(rows, rows, K, C, 4, "dense", 1.0, sim, kwargs=kw,
              plan_kw=dict(chunks=8, kb=4, gb=1, bias=bias), **top)
    run0 = job.passes[0]
    print(f"{job.cycles} cycles, DMA-in {run0.in_cycles}, contexts started during it "
          f"{run0.started_in} of 8")
    assert run0.status["o_retired"] == 8
    assert run0.started_in >= 4


def test_model_streams_a_layer_that_waits_for_its_dma_in_only():
    # The default (no chunks given): a traffic-bound single-item layer (one DMA channel at
    # 2 B a cycle) streams (the model's fastest count), a compute-bound one and one on a
    # graph that does not stream keep one context per item; a count given is honoured.
    sysm = System(dma_channels=1, mem_bandwidth=2.0)
    w = layers.make_weights((32, 2048), 1.0, 2)
    layer = FcLayer.of(w, 4)
    plan, chosen = choose.best_run(layer, P22, PlanOptions(mode="dense"), sysm)
    assert plan.chunks in choose.stream_counts(plan) and chosen.early_start
    once = perf.predict(replace(plan, chunks=1), w, chosen)
    assert once.passes[0].dma_in > once.passes[0].contexts
    assert perf.predict(plan, w, chosen).cycles < once.cycles
    given, _ = choose.best_run(layer, P22, PlanOptions(mode="dense", chunks=2), sysm)
    assert given.chunks == 2
    plan, _ = choose.best_run(layer, P22, PlanOptions(mode="dense"), System())
    assert plan.chunks == 1                           # 4 channels at 8 B: compute-bound
    sparse = layers.make_weights((32, 2048), 0.25, 2)
    plan, _ = choose.best_run(FcLayer.of(sparse, 4), P22,
                              PlanOptions(mode="sparse", sparse_graph="gather"), sysm)
    assert plan.chunks == 1 and not plan.graph.streams


def test_stream_counts_keep_a_context_at_least_its_columns():
    plan = planner.plan_fc(16, 4096, 4, "dense", P22)
    assert choose.stream_counts(plan) == [16, 8, 4, 2]
    assert choose.stream_counts(planner.plan_fc(16, 256, 4, "dense", P22)) == []
    assert choose.stream_counts(planner.plan_fc(16, 4096, 4, "sparse", P22,
                                                sparse_graph="gather")) == []
