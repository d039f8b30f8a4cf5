"""Double buffering across passes: the plan's alternate Dbuf halves and context IDs, the job
plan's check that consecutive passes share no Dbuf byte, the runtime's refusals, and on the
RTL (Icarus, 1 x 1) the overlapped passes bit-exact and faster than the same passes one after
the other (docs/system.md, "Double buffering")."""

import json

import numpy as np
import pytest
from cliutil import assert_user_error, run

from sw.compiler import layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.fc_plan import ENTRY_BYTES
from sw.compiler.program import pass_images
from sw.models import choose, perf
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from tb.host import runtime
from tb.host.job_plan import MemModel, plan_job
from test_top import _fc

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def _params(dbuf_bytes, rows=2):
    return ArrayParams(rows=rows, cols=rows, slots=128, operand_depth=2, int_issue=2,
                       dbuf_bytes=dbuf_bytes)


def _passes(plan, seed=1):
    w = layers.make_weights((plan.K, plan.C), 1.0 if plan.mode == "dense" else 0.25, seed)
    x = layers.make_inputs(plan.C, plan.N, seed)
    return [(img, [(a, plan.output_bytes) for _, a in outs])
            for img, outs in pass_images(plan, w, x)]


def test_automatic_only_when_the_layer_takes_several_passes():
    one = planner.plan_fc(64, 256, 16, "dense", _params(1 << 21))
    many = planner.plan_fc(128, 1024, 16, "dense", _params(32768))
    assert one.passes == 1 and not one.double_buffer
    assert many.passes > 1 and many.double_buffer
    # An explicit choice is honoured.
    off = planner.plan_fc(128, 1024, 16, "dense", _params(32768), double_buffer=False)
    assert not off.double_buffer and off.passes < many.passes
    assert planner.plan_fc(64, 256, 16, "dense", _params(1 << 21),
                           double_buffer=True).double_buffer


def test_consecutive_passes_use_alternate_halves_and_context_ids():
    plan = planner.plan_fc(128, 1024, 16, "dense", _params(32768), double_buffer=True)
    assert plan.passes >= 3
    half = plan.region_bytes
    assert [plan.pass_ctx_base(p) for p in range(3)] == [0, half // ENTRY_BYTES, 0]
    images = _passes(plan)
    for p, (img, reads) in enumerate(images):
        assert img.ctx_base == plan.pass_ctx_base(p)
        for addr, blob in img.segments.items():
            d, off = plan.params.dbuf_of(addr)
            assert (off >= half) == (p % 2 == 1) and off + len(blob) <= (p % 2 + 1) * half
    # The engines read their descriptor at desc_base + 16 x (ctx_base + context).
    for p, (img, _) in enumerate(images[:2]):
        for e in range(plan.engines):
            assert plan.desc_base[e] + ENTRY_BYTES * img.ctx_base in img.segments


def test_job_plan_refuses_passes_that_share_dbuf_bytes():
    plan = planner.plan_fc(128, 1024, 16, "dense", _params(16384), double_buffer=False)
    assert plan.passes > 1
    with pytest.raises(FdpuError, match=r"passes 0 and 1 both use Dbuf byte 0x[0-9a-f]+: "
                                        r"double buffering needs consecutive passes in "
                                        r"disjoint Dbuf bytes"):
        plan_job(plan.params, _passes(plan), double_buffer=True)
    job = plan_job(plan.params, _passes(plan))
    assert not any(sp["prefetch"] for sp in job.spec_passes)
    double = planner.plan_fc(128, 1024, 16, "dense", _params(32768), double_buffer=True)
    job = plan_job(double.params, _passes(double), double_buffer=True)
    # Pass 0 loads the configuration; the later passes reuse it and can be prefetched.
    assert [sp["prefetch"] for sp in job.spec_passes] == [False] + [True] * (double.passes - 1)
    assert [sp["regs"]["i_ctx_base"] for sp in job.spec_passes][:2] == \
        [0, double.pass_ctx_base(1)]


@pytest.mark.parametrize("kwargs", [dict(overlap=False), dict(backdoor_in=True)])
def test_runtime_refuses_double_buffering_without_a_simulated_overlapped_dma(kwargs):
    plan = planner.plan_fc(128, 1024, 16, "dense", _params(32768), double_buffer=True)
    with pytest.raises(FdpuError, match="double buffering overlaps the DMA with the contexts"):
        runtime.run_job(plan.params, _passes(plan), "icarus", double_buffer=True,
                        **{"overlap": True, **kwargs})


def test_planner_refuses_a_bad_value():
    with pytest.raises(FdpuError, match=r"double_buffer must be True, False or None "
                                        r"\(automatic\), got 'yes'"):
        planner.plan_fc(8, 64, 4, "dense", _params(4096), double_buffer="yes")
    with pytest.raises(FdpuError, match=r"needs more than the half of the 1024 bytes of a "
                                        r"Dbuf \(double buffering\).*or no double buffering"):
        planner.plan_fc(8, 64, 4, "dense", ArrayParams(rows=1, cols=1, slots=16,
                                                        dbuf_bytes=1024, operand_depth=4,
                                                        int_issue=1), double_buffer=True)


def test_cli_model_reports_the_overlap(tmp_path, capsys):
    path = tmp_path / "m.json"
    status, out, _ = run(capsys, "run", "--sim", "model", "--rows", 2, "--cols", 2,
                         "--out-features", 128, "--in-features", 1024, "--batch", 16,
                         "--mode", "dense", "--dbuf-bytes", 32768, "--double-buffer",
                         "--json", path)
    assert status == 0 and "(double-buffered)" in out and "in behind prev." in out
    rec = json.loads(path.read_text())
    assert rec["double_buffer"] and rec["plan"]["double_buffer"] and rec["passes"] >= 3
    assert sum(p["in_hidden"] for p in rec["pass_cycles"]) > 0
    status, out, _ = run(capsys, "run", "--sim", "model", "--rows", 2, "--cols", 2,
                         "--out-features", 128, "--in-features", 1024, "--batch", 16,
                         "--mode", "dense", "--dbuf-bytes", 32768, "--no-double-buffer",
                         "--json", path)
    assert status == 0 and not json.loads(path.read_text())["double_buffer"]


@pytest.mark.parametrize("K, N, dbuf, mode, graph, double", [
    (128, 64, 131072, "dense", None, True),      # the overlap gains more than the extra passes
    (128, 16, 32768, "dense", None, False),      # twice the passes: the inputs loaded twice
    (128, 64, 262144, "sparse", "gather", True),
    (256, 64, 65536, "sparse", "skip", False),
])
def test_default_is_the_plan_the_model_predicts_faster(K, N, dbuf, mode, graph, double,
                                                       tmp_path, capsys):
    density = 1.0 if mode == "dense" else 0.25
    w = layers.make_weights((K, 1024), density, 1)
    # In the early-start setting the model prefers (choose.best_run, the CLI's default).
    chosen, system = choose.best_run(FcLayer.of(w, N), _params(dbuf),
                                     PlanOptions(mode, sparse_graph=graph))
    plan, cycles = choose.best_plan(FcLayer.of(w, N), _params(dbuf),
                                    PlanOptions(mode, sparse_graph=graph), system)
    assert set(cycles) == {False, True} and plan.double_buffer is double
    assert cycles[double] < cycles[not double]
    # The CLI's default is that choice; an explicit option is honoured.
    path = tmp_path / "m.json"
    argv = ["run", "--sim", "model", "--rows", 2, "--cols", 2, "--out-features", K,
            "--in-features", 1024, "--batch", N, "--mode", mode, "--density", density,
            "--dbuf-bytes", dbuf, "--seed", 1, "--json", path] + \
        (["--sparse-graph", graph] if graph else [])
    assert run(capsys, *argv)[0] == 0
    rec = json.loads(path.read_text())
    # (best_run may also take a finer row block than best_plan's: its cycles are the run's.)
    assert chosen.double_buffer is double
    assert rec["double_buffer"] is double and \
        rec["cycles"] == perf.predict(chosen, w, system).cycles
    assert rec["early_start"] is system.early_start
    assert run(capsys, *argv, "--double-buffer" if not double else "--no-double-buffer")[0] == 0
    assert json.loads(path.read_text())["double_buffer"] is not double
    # One pass: nothing to overlap, nothing compared.
    _, none = choose.best_plan(FcLayer.of(layers.make_weights((64, 256), 1.0, 1), 16),
                               _params(1 << 21), PlanOptions("dense"))
    assert none == {}


@pytest.mark.parametrize("K, N, dbuf, early, double", [
    (64, 4, 65536, None, False),      # half a Dbuf: two passes, the inputs twice; slower
    # Contexts that wait for their pass's whole DMA-in: the second pass's DMA-in hides
    # behind the first's contexts.  With early start (the default) the one pass's own
    # contexts run beside the rest of its DMA-in, and it is the faster.
    (32, 32, 131072, False, True),
    (32, 32, 131072, None, False),
])
def test_a_layer_of_one_pass_is_compared_with_its_double_buffered_plan(K, N, dbuf, early,
                                                                       double):
    # One pass with whole Dbufs, two with halves: both are predicted (the DMA beside the
    # first pass's contexts slowing them, ``perf._stolen``), the faster is taken.
    w = layers.make_weights((K, 1024), 1.0, 1)
    single = planner.plan_fc(FcLayer.of(w, N), _params(dbuf),
                             PlanOptions("dense", double_buffer=False))
    system = perf.System(early_start=early, edge_multicast=early is not False)
    plan, cycles = choose.best_plan(FcLayer.of(w, N), _params(dbuf), PlanOptions("dense"),
                                    system=system)
    assert single.passes == 1 and set(cycles) == {False, True}
    assert plan.double_buffer is double and cycles[double] < cycles[not double]
    assert plan.passes == (2 if double else 1)


def test_cli_refuses_double_buffering_without_overlap(capsys):
    assert_user_error(capsys, "run", "--sim", "model", "--layer", "alexnet-fc8",
                      "--double-buffer", "--no-overlap",
                      match="--double-buffer overlaps the DMA with the contexts: it cannot "
                            "run with --no-overlap")


def test_overlapped_passes_on_the_rtl_icarus():
    # 4 passes: while one computes, the DMA stores the previous pass's results and loads the
    # next pass into the other half of the Dbuf.  Bit-exact (``_fc`` checks it against the
    # golden model), every external byte moved once, and faster end to end than the same
    # four passes (the same plan on half the Dbuf) one after the other.
    kw = dict(mem=MemModel(latency=20, bandwidth=2.0, stall=0.1), dma_channels=2, overlap=True)
    job = _fc(1, 1, 8, 64, 4, "dense", 1.0, "icarus", dbuf_bytes=2048,
              plan_kw=dict(double_buffer=True), kwargs=dict(kw, double_buffer=True))
    plain = _fc(1, 1, 8, 64, 4, "dense", 1.0, "icarus", dbuf_bytes=1024,
                plan_kw=dict(double_buffer=False), kwargs=kw)
    assert len(job.passes) == len(plain.passes) == 4
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in) == sum(plain.ext_in)
    assert job.final["o_ext_wr_bytes"] == sum(job.ext_out)
    over = job.overlaps()
    print("double-buffered:", over, "end to end", job.cycles, "against", plain.cycles)
    assert all(o["in_hidden"] > 0 for o in over[1:]) and over[0]["in_hidden"] == 0
    assert all(o["out_hidden"] > 0 for o in over[:-1]) and over[-1]["out_hidden"] == 0
    assert all(o["in_hidden"] <= o["in_cycles"] for o in over)
    assert job.cycles < plain.cycles
    assert job.cycles < job.compute_cycles + job.dma_cycles
    np.testing.assert_array_equal([r.compute_cycles > 0 for r in job.passes], True)
