"""The FDPU top end to end: FC layers on the generated RTL checked bit for bit against the golden
model, and bad input (unknown opcode, address outside the Dbufs, a configuration larger than
the Cbufs, a graph that never finishes) ending in a reported error, not a hang.

CI runs a 1 x 1 top with 16 slots on Icarus (a sparse layer, a 4-pass dense layer through the
DMA, the CLI's dense layer, four kinds of bad input); everything else is ``slow`` (4 x 4 and
8 x 8 on Verilator need a build that takes hours today: docs/system.md).
"""

import dataclasses
import json

import numpy as np
import pytest

from hw.top import FDPU
import sw.cli
from sw.compiler import dbuf_layout, fc_plan, layers, planner
from sw.compiler.asm import assemble
from sw.compiler.program import pass_images, program
from sw.models import golden_fc
from sw.spec import fp16, isa
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_template_layout
from sw.spec.errors import FdpuError
from tb.host import memories, runtime
from tb.host.job_plan import MemModel, plan_job
from tb.host.run_results import RtlError
from sw.spec.system import SIMULATORS

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

SMALL = dict(slots=16, operand_depth=4, int_issue=1, dbuf_bytes=4096)  # Cbufs: 8 x 64 KiB


def _fc(rows, cols, K, C, N, mode, density, sim, seed=1, kwargs=None, plan_kw=None, w=None,
        **params):
    kwargs = kwargs or {}
    p = ArrayParams(rows=rows, cols=cols, **{**SMALL, **params})
    if w is None:
        w = layers.make_weights((K, C), density, seed) if density else \
            np.zeros((K, C), dtype=np.float16)
    x = layers.make_inputs(C, N, seed)
    plan_kw = dict(plan_kw or {})
    if plan_kw.get("sparse_graph") == "skip":
        plan_kw["row_nnz"] = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, N, mode, p, **plan_kw)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    y, job = runtime.run_fc_rtl(plan, w, x, sim, max_cycles=100_000, **kwargs)
    assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16)), \
        f"RTL result differs from the golden model:\n{y}\n{ref.result}"
    fired = sum(sum(r.status["int_fires"]) + sum(r.status["fp_fires"]) for r in job.passes)
    assert fired == ref.counters.instructions
    # The Dbufs counted the PEs' loads and stores only, not the DMA's (two packets each).
    assert sum(r.status["o_dbuf_reqs"] for r in job.passes) == ref.counters.mem_packets // 2
    return job


def _image(**params):
    """Return a small dense FC image and its output ranges."""
    p = ArrayParams(rows=1, cols=1, **{**SMALL, **params})
    w = layers.make_weights((2, 16), 1.0, 3)
    x = layers.make_inputs(16, 1, 3)
    plan = planner.plan_fc(2, 16, 1, "dense", p)
    graph, placement = program(plan)
    segments, outputs = dbuf_layout.pass_memory(plan, w, x, 0)
    return assemble(graph, placement, segments, plan.pass_contexts(0))


@pytest.mark.slow          # the CLI test below runs the same layer in CI
def test_dense_1x1_icarus():
    job = _fc(1, 1, 3, 20, 4, "dense", 1.0, "icarus")
    assert job.passes[0].status["o_retired"] == job.passes[0].status["o_issued"] > 0


def test_multipass_layer_through_the_dma_icarus():
    # 4 passes in one simulation; a slow, stalling external memory.
    mem = MemModel(latency=30, bandwidth=2.0, stall=0.25)
    job = _fc(1, 1, 8, 32, 4, "dense", 1.0, "icarus", dbuf_bytes=512, kwargs=dict(mem=mem))
    assert len(job.passes) == 4
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in) > 0
    assert job.final["o_ext_wr_bytes"] == sum(job.ext_out) == 8 * 4 * 2
    assert all(r.in_cycles > 0 and r.out_cycles > 0 for r in job.passes)
    # The DMA moves at most 2 bytes per cycle here.
    assert sum(r.in_cycles + r.out_cycles for r in job.passes) >= job.ext_bytes / 2
    assert 0 < job.peak_bandwidth < 64


def test_sparse_switch_graph_1x1_icarus():
    # The paper's SWITCH graph (SWITCH per weight row, its feedback edge) through the system.
    _fc(1, 1, 2, 16, 1, "sparse", 0.5, "icarus", slots=32, plan_kw=dict(sparse_graph="switch"))


@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_skip_graph_odd_rows_1x1(sim):
    # The zero-skipping graph (BPOS, token-count ITER, counted FACC) on the RTL: an all-zero
    # row, an all-zero 32-column block, a single stored weight, in-features not a multiple of
    # 16, batch 3; bit-exact, and its instruction counts are the golden model's (in _fc).
    w = layers.make_weights((5, 70), 0.25, 4)
    w[1] = 0
    w[:, 32:64] = 0
    w[3] = 0
    w[3, 69] = 1.5
    job = _fc(1, 1, 5, 70, 3, "sparse", None, sim, slots=64, int_issue=2, w=w,
              plan_kw=dict(sparse_graph="skip", kb=5, gb=1))
    status = job.passes[0].status
    assert status["o_retired"] > 0


@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_sparse_gather_graph_1x1(sim):
    # The branch-free sparse graph (BSCAN -> value loads, no SWITCH; the default) on the RTL:
    # bit-exact, stored and zero weights in every FD-CSR row, and its instruction counts are
    # the golden model's (checked in _fc); the two INT pipes as in the 8 x 8 measurements.
    job = _fc(1, 1, 3, 40, 8, "sparse", 0.3, sim, slots=64, int_issue=2)
    assert job.passes[0].status["o_retired"] > 0
    assert fc_plan.DEFAULT_SPARSE_GRAPH == "gather"


# Bad input on both simulators (Verilator: slow; the coverage collection runs it).
BOTH = pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator",
                                                              marks=pytest.mark.slow)])


@BOTH
def test_unknown_opcode_is_reported(sim):
    image = _image()
    cfg, templates = image.cbuf_words()
    # Point the CTX templates at an unconfigured slot: a token for an INVALID slot.
    tpl = cbuf_template_layout(image.params)
    bad = [tpl.pack(**{**tpl.unpack(int(t)), "slot": 15}) for t in templates]
    with pytest.raises(RtlError, match="PE_UNKNOWN_OPCODE.*PE \\(0,0\\): UNKNOWN_OPCODE"):
        runtime.run_rtl(image, sim, config=(cfg, bad), max_cycles=5_000)


@BOTH
def test_address_outside_the_dbufs_is_reported(sim):
    image = _image()
    p = image.params
    insns = image.instructions()
    (x, y, s), ld = next(((k, i) for k, i in insns.items() if i.op.is_load))
    bad = dataclasses.replace(ld, imm=ld.imm + p.memory_bytes)
    word = isa.encode(bad, p)
    for j in range(image.program.shape[3]):
        image.program[y, x, s, j] = (word >> (64 * j)) & ((1 << 64) - 1)
    with pytest.raises(RtlError, match="BAD_ADDRESS"):
        runtime.run_rtl(image, sim, max_cycles=5_000)


@BOTH
def test_configuration_larger_than_the_cbufs(sim):
    image = _image(cbufs=1, cbuf_bytes=4096)      # 512 Cbuf words: a small DMA load
    cfg, templates = image.cbuf_words()
    cap = memories.cbuf_capacity(image.params)
    big = list(cfg) * (cap // len(cfg) + 1)
    with pytest.raises(FdpuError, match="more than the 1 Cbufs of 4096 bytes hold"):
        memories.write_memories(image, "/tmp", big, templates)
    # The hardware check: the MicC refuses a length beyond its Cbufs.
    with pytest.raises(RtlError, match="MICC_CONFIG_TOO_BIG"):
        runtime.run_rtl(image, sim, config=(big, templates), max_cycles=5_000)


@BOTH
def test_graph_that_never_finishes_times_out_with_a_deadlock_report(sim):
    image = _image()
    image.ends_per_context += 1                   # the MicC waits for an END that never comes
    with pytest.raises(RtlError, match=r"timeout after 3000 cycles.*deadlock.*MicC state WAIT, "
                                       r"contexts issued 1, retired 0"):
        runtime.run_rtl(image, sim, max_cycles=3_000)


def test_fc_cycle_bound_grows_with_the_work():
    # A small layer keeps the fixed 200k; alexnet-fc8's sparse pass (4 contexts of 4,096
    # columns per engine) needs millions: the old fixed bound stopped it at 208k cycles.
    p = ArrayParams(slots=128, int_issue=2, operand_depth=4)
    small = runtime.fc_cycle_bound(planner.plan_fc(96, 256, 64, "dense", p))
    assert 200_000 < small < 400_000
    fc8 = runtime.fc_cycle_bound(planner.plan_fc(1000, 4096, 1, "sparse", p))
    assert fc8 > 2_000_000


@pytest.mark.slow
@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("rows, cols, K, C, N, mode, density, graph", [
    (1, 1, 3, 20, 4, "sparse", 0.5, "switch"),
    (1, 1, 1, 16, 3, "dense", 1.0, None),
    (2, 2, 5, 40, 3, "dense", 1.0, None),
    (2, 2, 5, 33, 8, "sparse", 0.25, "gather"),
    (2, 2, 5, 33, 8, "sparse", 0.25, "switch"),
    (2, 3, 1, 17, 1, "sparse", 0.05, "switch"),
    (2, 2, 4, 32, 4, "sparse", 0.0, "gather"),
    (2, 2, 5, 33, 8, "sparse", 0.25, "skip"),
    (2, 3, 1, 17, 1, "sparse", 0.05, "skip"),
    (2, 2, 4, 32, 4, "sparse", 0.0, "skip"),
    (2, 2, 7, 100, 3, "sparse", 0.01, "skip"),
    (2, 2, 6, 48, 64, "sparse", 1.0, "skip"),
])
def test_fc_layers(sim, rows, cols, K, C, N, mode, density, graph):
    _fc(rows, cols, K, C, N, mode, density, sim, slots=32,
        plan_kw=dict(sparse_graph=graph) if graph else None)


EPILOGUE_CASES = [
    (1, 5, 24, 6, "dense", 1.0, None),
    (2, 7, 40, 5, "dense", 1.0, None),
    (2, 6, 33, 8, "sparse", 0.3, "gather"),
    (1, 4, 40, 5, "sparse", 0.3, "switch"),
    (2, 6, 70, 8, "sparse", 0.2, "skip"),
]


@pytest.mark.parametrize("sim, rows, K, C, N, mode, density, graph", [
    # In CI the 1 x 1 cases run on Icarus and the 2 x 2 ones on Verilator (one build); every
    # case on both simulators under -m slow.
    pytest.param(sim, *case, marks=() if (sim == "icarus") == (case[0] == 1) else
                 pytest.mark.slow) for sim in SIMULATORS for case in EPILOGUE_CASES])
def test_bias_and_relu_epilogue(sim, rows, K, C, N, mode, density, graph):
    # y = relu(acc + b) on the array (LDHB of the bias, FADD, FMAX #0 after each FACC): the
    # RTL equals the golden model bit for bit (in _fc), and the golden model equals the
    # accumulation without the epilogue, then + b rounded once, then max with +0.0.
    w = layers.make_weights((K, C), density, 2)
    x = layers.make_inputs(C, N, 2)
    b = np.random.default_rng([K, C]).normal(0, 2, K).astype(np.float16)
    b[0] = -0.0
    plan_kw = dict(bias=b, relu=True, sparse_graph=graph)
    # The 2 x 2 top of tests/test_chain.py (one Verilator build for both).
    _fc(rows, rows, K, C, N, mode, density, sim, seed=2, slots=32, dbuf_bytes=8192, w=w,
        plan_kw=plan_kw, kwargs=dict(dma_channels=2, overlap=True))
    p = ArrayParams(rows=rows, cols=rows, slots=32, dbuf_bytes=8192, operand_depth=4, int_issue=1)
    if graph == "skip":
        plan_kw["row_nnz"] = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, N, mode, p, **plan_kw)
    plain = planner.plan_fc(K, C, N, mode, p, sparse_graph=graph,
                            row_nnz=plan_kw.get("row_nnz"))
    got = golden_fc.run_fc(plan, w, x).result.view(np.uint16)
    acc = golden_fc.run_fc(plain, w, x).result.view(np.uint16)
    want = fp16.maximum(fp16.add(acc, b.view(np.uint16)[None, :]), fp16.POS_ZERO)
    assert np.array_equal(got, want)
    assert (fp16.to_float(fp16.add(acc, b.view(np.uint16)[None, :])) < 0).any()    # ReLU bites


@pytest.mark.slow
@pytest.mark.parametrize("sim", SIMULATORS)
def test_sparse_multipass_1x1(sim):
    job = _fc(1, 1, 6, 32, 1, "sparse", 0.25, sim, slots=32, dbuf_bytes=512,
              kwargs=dict(mem=MemModel(latency=40, bandwidth=1.0, stall=0.1)))
    assert len(job.passes) == 3


@pytest.mark.slow
@pytest.mark.parametrize("sim, rows, cols, slots, K, C, N, mode, density, graph", [
    ("icarus", 4, 4, 16, 16, 20, 4, "dense", 1.0, None),
    ("verilator", 4, 4, 64, 24, 48, 8, "sparse", 0.25, "switch"),
    ("verilator", 4, 4, 64, 16, 64, 4, "dense", 1.0, None),
    ("verilator", 8, 8, 64, 64, 64, 4, "sparse", 0.25, "gather"),
    ("verilator", 8, 8, 128, 64, 96, 64, "sparse", 0.09, "skip"),
    ("verilator", 8, 8, 64, 64, 128, 8, "dense", 1.0, None),
])
def test_fc_layers_big_arrays(sim, rows, cols, slots, K, C, N, mode, density, graph):
    _fc(rows, cols, K, C, N, mode, density, sim, slots=slots,
        plan_kw=dict(sparse_graph=graph) if graph else None)


def test_cli_rtl_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = sw.cli.main(["rtl", "--sim", "icarus", "--in-features", "20", "--out-features", "3",
                          "--batch", "4", "--mode", "dense", "--rows", "1", "--cols", "1",
                          "--slots", "16", "--dbuf-bytes", "4096", "--operand-depth", "4",
                          "--int-issue", "1", "--dma-channels", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0 and "match (bit for bit with the golden model)" in text
    rec = json.loads(out.read_text())
    assert rec["match"] and rec["cycles"] > 0 and 0 < rec["utilization"] <= 1
    assert rec["rtl_instructions"] == rec["golden_instructions"]
    # Overlap (the default): the configuration runs behind the DMA-in.
    assert rec["overlap"] and rec["config_ports"] == 4
    assert rec["cycles"] < rec["compute_cycles"] + rec["dma_cycles"]
    assert rec["config_hidden_cycles"] == rec["config_cycles"] and rec["hold_cycles"] > 0
    assert rec["ext_read_bytes"] > 0 and rec["ext_write_bytes"] >= 4 * 3 * 2     # N x K fp16
    assert rec["peak_bandwidth"] > 0 and rec["utilization_end_to_end"] < rec["utilization"]
    # Configuration is part of the compute phase: the MicC sends at least one flit per slot.
    assert 0 < rec["config_cycles"] < rec["compute_cycles"]
    assert rec["config_cycles"] + rec["context_cycles"] == rec["compute_cycles"]
    assert rec["utilization_contexts"] > rec["utilization"]
    # The bound it ran against: max(compute, minimal bytes / one channel's 8 B a cycle).
    floor = rec["min_external_bytes"] / 8
    assert rec["bound_cycles"] == round(max(rec["compute_cycles"], floor))
    assert rec["bound_by"] == ("compute" if rec["compute_cycles"] >= floor else "traffic")
    assert rec["bound_reached"] == pytest.approx(max(rec["compute_cycles"], floor)
                                                 / rec["cycles"])
    assert "end to end against its bound" in text
    assert rec["golden"] == "exact"                   # --golden auto: a small layer runs exactly
    assert (rec["slots"], rec["operand_depth"], rec["int_issue"], rec["dma_channels"]) == \
        (16, 4, 1, 1)                                 # the whole configuration, as given
    assert len(rec["busy_map"]) == 1 and len(rec["busy_map"][0]) == 1


def test_second_int_pipe_on_the_rtl_is_exact_and_counted(tmp_path, capsys):
    # ArrayParams.int_issue = 2: the PE's second INT pipe (docs/pe.md); the top counts the
    # firings of both INT pipes, so the RTL's instruction count still equals the golden one.
    out = tmp_path / "r.json"
    status = sw.cli.main(["rtl", "--sim", "icarus", "--in-features", "32", "--out-features", "4",
                          "--batch", "4", "--density", "0.25", "--rows", "1", "--cols", "1",
                          "--slots", "32", "--dbuf-bytes", "4096", "--int-issue", "2",
                          "--operand-depth", "4", "--dma-channels", "1", "--json", str(out)])
    capsys.readouterr()
    rec = json.loads(out.read_text())
    assert status == 0 and rec["match"]
    assert rec["rtl_instructions"] == rec["golden_instructions"]


@pytest.mark.parametrize("argv, match", [
    (["--slots", "3"], "slots must be a power of two, got 3"),
    (["--rows", "0"], "rows must be an integer in 1..16, got 0"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--mem-bandwidth", "9"], "memory bandwidth must be a multiple of 1/8 in 1/8 .. 8 bytes"),
    (["--mem-latency", "-1"], "memory latency must be an integer in 0 .. 65535 cycles, got -1"),
])
def test_cli_rtl_bad_input(capsys, argv, match):
    status = sw.cli.main(["rtl", "--sim", "icarus", "--in-features", "20", "--out-features", "3",
                          *argv])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("fdpu: error: ") and match in err, err


@pytest.mark.parametrize("sim, rows", [
    ("icarus", 1),
    pytest.param("icarus", 2, marks=pytest.mark.slow),
    pytest.param("verilator", 2, marks=pytest.mark.slow)])
def test_multichannel_dma(sim, rows):
    # Three DMA channels (three edge ports, three external memories), several passes, a
    # stalling memory: the Dbufs of each pass are spread over the channels (1 x 1: the Cbufs on
    # channel 0, the data on channel 1, at the east port), the result is bit-exact, and every
    # external byte is counted once (the 8 x 8 speed-up is in docs/system.md).
    mem = MemModel(latency=20, bandwidth=8.0, stall=0.1)
    job = _fc(rows, rows, 8, 64, 4, "dense", 1.0, sim, dbuf_bytes=1024,
              kwargs=dict(mem=mem, dma_channels=3))
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in)
    assert job.final["o_ext_wr_bytes"] == sum(job.ext_out)
    assert all(r.in_cycles > 0 for r in job.passes)


def test_inputs_several_dbufs_hold_are_multicast_icarus():
    # 2 x 2, batch 4: the four engines' Dbufs hold the same input block at the same offset;
    # one descriptor per channel writes every copy, so the input crosses the external port
    # once per channel, not once per Dbuf (and the result is bit-exact).
    p = ArrayParams(rows=2, cols=2, **SMALL)
    plan = planner.plan_fc(8, 64, 4, "dense", p)
    shared = dbuf_layout.shared_inputs(plan, 0)
    assert len(shared) == 1 and len(shared[0]) == 4
    job = _fc(2, 2, 8, 64, 4, "dense", 1.0, "icarus", kwargs=dict(dma_channels=1))
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in)
    passes = [(img, [(a, plan.output_bytes) for _, a in outs]) for img, outs in
              pass_images(plan, layers.make_weights((8, 64), 1.0, 1), layers.make_inputs(64, 4, 1))]
    unicast = plan_job(p, [(dataclasses.replace(img, meta={}), r) for img, r in passes])
    assert plan_job(p, passes).ext_in == job.ext_in
    # Four copies, one read: about three input blocks fewer than four unicast loads.
    assert job.ext_in[0] < unicast.ext_in[0] - 2 * plan.input_bytes


@pytest.mark.parametrize("build, error, match", [
    (lambda: runtime.run_job(ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                                         int_issue=1), [], "icarus", dma_channels=5),
     FdpuError, r"dma_channels must be an integer in 1..4 \(the edge ports\), got 5"),
    (lambda: FDPU(ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                              int_issue=1), dma_channels=0),
     TypeError, r"dma_channels must be an integer in 1..4 \(the edge ports\), not 0"),
])
def test_bad_dma_channels(build, error, match):
    with pytest.raises(error, match=match):
        build()


# Several configuration ports and configuration overlapped with the DMA-in (docs/system.md).

def _2x3_image():
    """Return the 2 x 3 dense image of :func:`_ports_fc` (5 x 40, batch 3)."""
    p = ArrayParams(rows=2, cols=3, **{**SMALL, "slots": 32})
    plan = planner.plan_fc(5, 40, 3, "dense", p)
    graph, placement = program(plan)
    segments, _ = dbuf_layout.pass_memory(plan, layers.make_weights((5, 40), 1.0, 1),
                                          layers.make_inputs(40, 3, 1), 0)
    return assemble(graph, placement, segments, plan.pass_contexts(0))


@pytest.mark.parametrize("sim, overlap", [
    ("icarus", True),
    pytest.param("icarus", False, marks=pytest.mark.slow),
    pytest.param("verilator", True, marks=pytest.mark.slow),
    pytest.param("verilator", False, marks=pytest.mark.slow)])
def test_config_ports_on_several_edges_and_overlap(sim, overlap):
    # 2 x 3, 4 configuration ports: the PEs nearest the west, east, north and south ports are
    # configured through them in parallel: faster than one flit per cycle through one port.
    # With overlap and a slow external memory (a DMA-in several times the configuration) the
    # configuration runs entirely behind the DMA-in (the MicC starts once the Cbufs are
    # loaded and holds its first context until the DMA is done).  Bit-exact either way.
    image = _2x3_image()
    configs, _ = image.cbuf_port_words(4)
    assert sum(1 for c in configs if len(c)) >= 3            # ports on several edges
    mem = MemModel(latency=20, bandwidth=2.0)
    job = _fc(2, 3, 5, 40, 3, "dense", 1.0, sim, slots=32,
              kwargs=dict(config_ports=4, dma_channels=2, overlap=overlap, mem=mem))
    run = job.passes[0]
    assert 0 < run.config_cycles < len(memories.image_flits(image)[0])
    if overlap:
        assert run.config_hidden_cycles == run.config_cycles
        assert run.hold_cycles > 0                           # the array waited for the DMA
        assert run.span_cycles <= run.in_cycles + run.context_cycles + 8
        assert job.cycles < job.compute_cycles + job.dma_cycles
    else:
        assert run.config_hidden_cycles == 0 and run.span_cycles == run.in_cycles + run.cycles


@pytest.mark.parametrize("sim, rows, cols, ports, channels, params", [
    # The top of test_shared_weights (Verilator) and of the configuration ports' test (Icarus).
    ("verilator", 2, 2, 1, 4, dict(slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)),
    ("icarus", 2, 3, 4, 2, {**SMALL, "slots": 32})])
def test_records_of_a_span_of_pes_configure_the_same_program(sim, rows, cols, ports, channels,
                                                             params):
    # Cbuf records of several PEs (Image.cbuf_port_words(spans=True)): the slots the engines
    # share are loaded once and sent to each PE (their destinations moved with them), so the
    # Cbufs hold fewer words; the array computes the same outputs and fires the same
    # instructions as with one PE's records each, configured in about as many cycles.
    p = ArrayParams(rows=rows, cols=cols, **params)
    w, x = layers.make_weights((5, 40), 0.5, 2), layers.make_inputs(40, 3, 2)
    plan = planner.plan_fc(5, 40, 3, "sparse", p, sparse_graph="gather")
    graph, placement = program(plan)
    segments, outputs = dbuf_layout.pass_memory(plan, w, x, 0)
    image = assemble(graph, placement, segments, plan.pass_contexts(0))
    reads = [(a, plan.output_bytes) for _, a in outputs]
    runs = {}
    for spans in (False, True):
        configs, templates = image.cbuf_port_words(ports, spans)
        runs[spans] = (sum(len(c) for c in configs), runtime.run_rtl(
            image, sim, reads=reads, config=(configs, templates), config_ports=ports,
            dma_channels=channels))
    (plain, a), (spanned, b) = runs[False], runs[True]
    assert spanned < plain
    assert [b.read(*r) for r in reads] == [a.read(*r) for r in reads]
    assert b.status["int_fires"] == a.status["int_fires"]
    assert b.status["fp_fires"] == a.status["fp_fires"]
    assert b.config_cycles <= a.config_cycles + 8
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    got = dbuf_layout.gather_outputs(plan, outputs, b.read)
    assert np.array_equal(got.view(np.uint16), ref.result.view(np.uint16))


def test_configuration_for_a_port_that_does_not_exist_or_too_big():
    image = _image()
    cfg, templates = image.cbuf_words()
    with pytest.raises(FdpuError, match=r"Cbuf records for configuration port 2; the top has "
                                        r"2 configuration ports \(0..1\)"):
        runtime.run_rtl(image, "icarus", config=([cfg, [], cfg], templates), config_ports=2)
    with pytest.raises(FdpuError, match=r"configuration ports must be an integer in 1..4 \(one "
                                        r"per array edge\), got 5"):
        runtime.run_rtl(image, "icarus", config_ports=5)
    with pytest.raises(FdpuError, match=r"configuration ports \(3\) must divide the Cbufs "
                                        r"\(8\)"):
        runtime.run_rtl(image, "icarus", config_ports=3)
    small = _image(cbufs=2, cbuf_bytes=128)           # 2 regions of 16 words
    n = len(small.cbuf_words()[0]) + len(templates)
    with pytest.raises(FdpuError, match=f"configuration port 0 needs {n} Cbuf words .* more "
                                        f"than its region of the Cbufs holds \\(16 words"):
        runtime.run_rtl(small, "icarus", config_ports=2)
    # The hardware's own check (a record count beyond a port's region) is in test_micc.
