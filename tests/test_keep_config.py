"""The configuration kept across passes (docs/system.md, "Keeping the configuration across
passes"): the job plan's ``i_keep``/``i_end_base`` per pass, a resumed job that configures
first, the model's configuration cycles, and on the RTL each graph's layer in several passes
bit-exact with the configuration sent once, against the same passes configured each time."""

import numpy as np
import pytest

from sw.compiler import layers, planner
from sw.compiler.program import pass_images
from sw.models import golden_fc, perf
from sw.spec.arch import ArrayParams
from sw.spec.system import System
from tb.host import runtime
from tb.host.job_plan import cbuf_port_words, plan_job

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

# The 2 x 2 top tests/test_shared_weights.py's CI cases build (64 KiB Dbufs, 4 DMA channels):
# no build of its own; one context a pass makes the passes.
P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)
P11 = ArrayParams(rows=1, cols=1, slots=64, operand_depth=4, int_issue=1, dbuf_bytes=1024)
ONE = dict(gb=1, contexts=1, double_buffer=False)

# (K, C, N, mode, graph, params, plan options): each graph in several passes, and double
# buffering (its odd passes read the second half's tables with the same configuration).
CASES = {
    "dense": (16, 256, 16, "dense", None, P22, dict(ONE, kb=4)),
    "dense-db": (16, 256, 16, "dense", None, P22, dict(ONE, kb=4, double_buffer=True)),
    "switch": (24, 256, 16, "sparse", "switch", P22, ONE),
    "gather": (24, 256, 16, "sparse", "gather", P22, dict(ONE, kb=4)),
    "skip": (24, 256, 16, "sparse", "skip", P22, dict(ONE, kb=4)),
    "switch-1x1": (6, 64, 8, "sparse", "switch", P11, dict(double_buffer=False)),
}


def _layer(K, C, N, mode, graph, params, kw, seed=3):
    w = layers.make_weights((K, C), 1.0 if mode == "dense" else 0.3, seed)
    x = layers.make_inputs(C, N, seed)
    kw = dict(kw)
    if graph == "skip":
        kw["row_nnz"] = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, N, mode, params, sparse_graph=graph, **kw)
    return plan, w, x


def _passes(plan, w, x):
    return [(img, [(a, plan.output_bytes) for _, a in outs])
            for img, outs in pass_images(plan, w, x)]


@pytest.mark.parametrize("name", ["dense", "dense-db", "switch", "skip"])
def test_passes_after_the_first_keep_the_configuration(name):
    plan, w, x = _layer(*CASES[name])
    assert plan.passes >= 3
    passes = _passes(plan, w, x)
    job = plan_job(plan.params, passes, dma_channels=2, overlap=True,
                   double_buffer=plan.double_buffer)
    regs = [sp["regs"] for sp in job.spec_passes]
    assert [r["i_keep"] for r in regs] == [0] + [1] * (plan.passes - 1)
    # The END slots count on from their configuration: each pass from the contexts before.
    ctxs = [img.contexts for img, _ in passes]
    assert [r["i_end_base"] for r in regs] == [sum(ctxs[:j]) for j in range(plan.passes)]
    assert job.configure is None
    off = plan_job(plan.params, passes, dma_channels=2, overlap=True,
                   double_buffer=plan.double_buffer, keep_config=False)
    assert {(r["regs"]["i_keep"], r["regs"]["i_end_base"]) for r in off.spec_passes} == {(0, 0)}


def test_a_new_configuration_is_sent_and_counts_ends_from_zero():
    a, wa, xa = _layer(*CASES["dense"])
    b, wb, xb = _layer(*CASES["switch"])
    pa, pb = _passes(a, wa, xa), _passes(b, wb, xb)
    job = plan_job(P22, pa[:2] + pb[:2] + pa[2:3], dma_channels=2, overlap=True)
    assert [sp["regs"]["i_keep"] for sp in job.spec_passes] == [0, 1, 0, 1, 0]
    assert [sp["regs"]["i_end_base"] for sp in job.spec_passes] == \
        [0, pa[0][0].contexts, 0, pb[0][0].contexts, 0]


def test_a_resumed_job_configures_before_its_first_pass():
    # A job resumed after pass 1 (tb.host.checkpoint): the Cbufs hold pass 1's words and the
    # pass before it had configured the PEs, so its first pass keeps a configuration the
    # bench makes first (no context), with the first pass's registers.
    plan, w, x = _layer(*CASES["dense"])
    passes = _passes(plan, w, x)
    loaded = cbuf_port_words(plan.params, passes[1][0], 1)
    job = plan_job(plan.params, passes[2:], dma_channels=2, overlap=True, cbuf_loaded=loaded)
    first = job.spec_passes[0]["regs"]
    assert first["i_keep"] == 1 and first["i_end_base"] == 0 and first["i_cbuf_words"] == 0
    assert job.configure == dict(first, i_contexts=0, i_keep=0, i_ctx_gate=0, i_cbuf_words=0)
    # Without a configuration held (a job from reset) nothing is kept.
    assert plan_job(plan.params, passes[2:], dma_channels=2).configure is None


def test_the_model_configures_a_layer_once():
    plan, w, _ = _layer(*CASES["dense"])
    pred = perf.predict(plan, w, System(dma_channels=2, config_ports=1))
    assert pred.passes[0].config > 0
    assert all(p.config == 0 for p in pred.passes[1:])


# CI: the switch graph (its feedback token carried from pass to pass) and double-buffered dense
# on Verilator (Icarus runs kept passes in CI in tests/test_checkpoint.py's 1 x 1 layer); the
# rest in the slow tier.
@pytest.mark.parametrize("sim, name", [
    pytest.param("verilator", "switch", id="verilator-switch"),
    pytest.param("verilator", "dense-db", id="verilator-dense-db"),
    pytest.param("icarus", "switch-1x1", id="icarus-switch-1x1", marks=pytest.mark.slow),
    pytest.param("verilator", "gather", id="verilator-gather", marks=pytest.mark.slow),
    pytest.param("verilator", "skip", id="verilator-skip", marks=pytest.mark.slow),
    pytest.param("verilator", "dense", id="verilator-dense", marks=pytest.mark.slow),
])
def test_rtl_kept_configuration_is_bit_exact(sim, name):
    plan, w, x = _layer(*CASES[name])
    assert plan.passes >= 2
    ref = golden_fc.run_fc(plan, w, x, exact=True).result.view(np.uint16)
    kw = dict(dma_channels=4 if plan.params.rows > 1 else 1, overlap=True,
              early_start=True, double_buffer=plan.double_buffer)
    y, kept = runtime.run_fc_rtl(plan, w, x, sim, **kw)
    assert np.array_equal(y.view(np.uint16), ref)
    y0, sent = runtime.run_fc_rtl(plan, w, x, sim, keep_config=False, **kw)
    assert np.array_equal(y0.view(np.uint16), ref)
    cfg = [r.status["o_config_cycles"] for r in kept.passes]
    assert cfg[0] > 0 and cfg[1:] == [0] * (plan.passes - 1)
    assert all(r.status["o_config_cycles"] > 0 for r in sent.passes)
    # Every pass ran every context's ENDs (counted from i_end_base).
    assert [r.status["o_retired"] for r in kept.passes] == \
        [img.contexts for img, _ in _passes(plan, w, x)]
    print(f"{name} on {sim}: {kept.cycles} cycles end to end kept, {sent.cycles} sent each "
          f"pass; configuration {sum(cfg)} / "
          f"{sum(r.status['o_config_cycles'] for r in sent.passes)} cycles")
