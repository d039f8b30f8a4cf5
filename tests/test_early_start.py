"""Early start: each context starts when its own data are in (docs/system.md, "Contexts start
when their data are in").

The layers (``sw.compiler.dbuf_layout.first_use``: the first context that reads each segment),
the shared DMA rules (``sw.compiler.dma_plan``: groups of contexts, runs within a group), the
job plan (``tb.host.job_plan``: each channel's data group by group, a fence after each), the
performance model (the same bytes, contexts no earlier than their data), the refusals, and on
the RTL the layer bit-exact, with the contexts running beside the DMA-in, alone and with double
buffering.  The fence itself is tested on the DMA's rig (``tests/test_dma.py``: the Dbufs hold
every word of the descriptors before a fence when it is counted) and the MicC's per-context
hold on its own (``tests/test_micc.py``).
"""

import json

import numpy as np
import pytest
from cliutil import assert_user_error, json_runs, run

from sw.compiler import dbuf_layout, dma_plan, layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.program import pass_images
from sw.models import choose, perf
from sw.spec.arch import ArrayParams
from sw.spec.dma import COPIES_BITS, DescFlag, unpack_descriptor
from sw.spec.errors import FdpuError
from tb.host import runtime
from tb.host.job_plan import MemModel, plan_job
from test_top import _fc

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)


def _layer(K, C, N, mode, graph=None, params=P22, seed=1, **kw):
    w = layers.make_weights((K, C), 1.0 if mode == "dense" else 0.25, seed)
    if graph == "skip":
        kw["row_nnz"] = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(K, C, N, mode, params, sparse_graph=graph, **kw)
    x = layers.make_inputs(C, N, seed)
    passes = [(img, [(a, plan.output_bytes) for _, a in outs])
              for img, outs in pass_images(plan, w, x)]
    return plan, w, passes


def test_gate_shift_keeps_the_groups_few():
    assert [dma_plan.gate_shift(n) for n in (0, 1, 64, 65, 128, 129, 1000)] == \
        [0, 0, 0, 1, 1, 2, 4]
    for n in range(1, 3000, 37):
        s = dma_plan.gate_shift(n)
        assert -(-n // (1 << s)) <= dma_plan.MAX_GROUPS
        assert s == 0 or -(-n // (1 << (s - 1))) > dma_plan.MAX_GROUPS


def test_first_use_names_the_first_context_reading_each_segment():
    plan, w, passes = _layer(64, 256, 16, "dense")
    image = passes[0][0]
    first = dict(map(tuple, image.meta["first_use"]))
    assert set(first) == set(image.segments)         # every segment, nothing else
    x = layers.make_inputs(plan.C, plan.N, 1)
    _, _, layout = dbuf_layout.pass_contents(plan, w, x, 0)
    for at in layout.places:
        assert first[at.input] <= at.context and first[at.data] <= at.context
    assert first[min(a for a, _ in layout.inputs[next(iter(layout.inputs))][1])] == 0
    for addr, _ in layout.tables:
        assert first[addr] == 0
    assert max(first.values()) == plan.contexts - 1 > 0


def _decode(job, c):
    """Return channel ``c``'s DMA-in descriptors of pass 0 as ``(local, length, copies)``."""
    out = []
    for d in job.passes[0]["descs"][c]:
        _, local, length, flags, copies = unpack_descriptor(d)
        if not flags & DescFlag.CBUF:
            out.append((local, length, copies))
    return out


@pytest.mark.parametrize("K, C, N, mode, graph, channels", [
    (64, 256, 16, "dense", None, 4),
    (96, 512, 24, "sparse", "skip", 2),
    (48, 256, 8, "sparse", "gather", 1),
])
def test_job_plan_loads_group_by_group_with_a_fence_after_each(K, C, N, mode, graph, channels):
    plan, _, passes = _layer(K, C, N, mode, graph)
    image, reads = passes[0]
    early = plan_job(P22, passes, dma_channels=channels, overlap=True, early_start=True)
    plain = plan_job(P22, passes, dma_channels=channels, overlap=True)
    regs = early.spec_passes[0]["regs"]
    shift = dma_plan.gate_shift(image.contexts)
    assert regs["i_ctx_gate"] == 1 and regs["i_gate_shift"] == shift
    assert plain.spec_passes[0]["regs"]["i_ctx_gate"] == 0
    first = dict(map(tuple, image.meta["first_use"]))
    outputs = [(a, a + n) for a, n in reads]
    covered = set()
    for c in range(channels):
        group, fences, seen = 0, 0, []
        for local, length, copies in _decode(early, c):
            if length == 0:                               # a fence closes a group
                fences += 1
                group += 1
                continue
            # Every segment a descriptor writes belongs to the group the fences say; no
            # descriptor writes over an output block (contexts of earlier groups write them).
            for k in [P22.dbuf_of(local)[0]] + [P22.dbuf_of(local)[0] + 1 + i
                                                 for i in range(COPIES_BITS) if copies >> i & 1]:
                lo = P22.dbuf_base(k) + P22.dbuf_of(local)[1]
                hi = lo + length
                mine = [a for a in image.segments if lo <= a < hi]
                assert mine, (c, hex(lo))
                if not copies:
                    assert {first[a] >> shift for a in mine} == {group}, (c, hex(lo))
                else:
                    assert min(first[a] for a in mine) >> shift <= group
                assert not any(lo < o_hi and o_lo < hi for o_lo, o_hi in outputs)
                covered |= set(mine)
            seen.append(group)
        assert seen == sorted(seen)
        # A fence after each group up to the channel's last one with data.
        assert fences == (seen[-1] if seen else 0)
    assert covered == set(image.segments)
    # The same external bytes move (the runs merge only within a group: a few zeros fewer).
    assert early.ext_in[0] - 16 * early.passes[0]["ndesc"] <= \
        plain.ext_in[0] - 16 * plain.passes[0]["ndesc"]


@pytest.mark.parametrize("size, K, C, N, mode, graph, density, early", [
    # The contexts start 1k cycles earlier than after the whole DMA-in: on.
    (2, 64, 512, 16, "dense", None, 1.0, True),
    # A skip graph on one PE, bound by its Dbuf requests: the rest of the DMA-in beside the
    # contexts costs them more than starting early gains (the model: 1.1 % slower; the RTL:
    # 6,573 cycles against 6,462): off.
    (1, 32, 256, 8, "sparse", "skip", 0.1, False),
])
def test_default_early_start_is_the_models_faster_choice(size, K, C, N, mode, graph, density,
                                                         early, tmp_path, capsys):
    params = ArrayParams(rows=size, cols=size, slots=128, operand_depth=2, int_issue=2)
    w = layers.make_weights((K, C), density, 1)
    layer, opts = FcLayer.of(w, N), PlanOptions(mode, sparse_graph=graph)
    cycles = {}
    for on in (True, False):
        plan, system = choose.best_run(layer, params, opts, perf.System(), early_start=on)
        assert system.early_start is on
        cycles[on] = perf.predict(plan, w, system).cycles
    plan, system = choose.best_run(layer, params, opts, perf.System())
    assert system.early_start is early and cycles[early] < cycles[not early]
    # Without overlap nothing starts early and nothing is compared.
    assert choose.best_run(layer, params, opts, perf.System(overlap=False))[1].early_start \
        is False
    # The CLI's default is that choice; an explicit option is honoured either way.
    argv = ["run", "--sim", "model", "--rows", size, "--cols", size, "--out-features", K,
            "--in-features", C, "--batch", N, "--mode", mode, "--density", density,
            "--seed", 1] + (["--sparse-graph", graph] if graph else [])
    (auto, _), (on, _), (off, _) = json_runs(capsys, tmp_path, ("--overlap", "--early-start",
                                                                "--no-early-start"), *argv)
    assert (auto["early_start"], on["early_start"], off["early_start"]) == (early, True, False)
    assert auto["cycles"] == cycles[early]


@pytest.mark.parametrize("K, C, N, mode, graph, channels", [
    (64, 256, 16, "dense", None, 4),
    (96, 512, 24, "sparse", "skip", 2),
])
def test_model_moves_the_runtimes_bytes_and_starts_contexts_earlier(K, C, N, mode, graph,
                                                                     channels):
    plan, w, passes = _layer(K, C, N, mode, graph)
    job = plan_job(P22, passes, dma_channels=channels, overlap=True, early_start=True)
    system = perf.System(dma_channels=channels, config_ports=1, early_start=True,
                         edge_multicast=False)
    pred = perf.predict(plan, w, system)
    assert [p.ext_in for p in pred.passes] == job.ext_in
    plain = perf.System(dma_channels=channels, config_ports=1, early_start=False,
                        edge_multicast=False)
    late = perf.predict(plan, w, plain)
    # The rest of the DMA-in beside the contexts costs them cycles (``perf._lost``); without
    # that loss the contexts take what they take without early start.
    assert pred.compute_cycles >= late.compute_cycles
    free = perf.Constants(**{**perf.calibrated().__dict__, "steal": 0.0})
    assert perf.predict(plan, w, system, constants=free).compute_cycles == \
        perf.predict(plan, w, plain, constants=free).compute_cycles
    assert pred.cycles < late.cycles and pred.passes[0].hold < late.passes[0].hold
    # Never faster than its compute or its DMA-in.
    f = pred.passes[0]
    assert f.span >= max(f.compute, f.dma_in)


def test_runtime_and_cli_refuse_early_start_without_a_simulated_overlapped_dma(capsys,
                                                                               tmp_path):
    plan, w, passes = _layer(16, 64, 4, "dense")
    for kwargs in (dict(overlap=False), dict(overlap=True, backdoor_in=True)):
        with pytest.raises(FdpuError, match="early start runs contexts beside their pass's "
                                            "DMA-in: it needs overlap"):
            runtime.run_job(P22, passes, "icarus", early_start=True, **kwargs)
    assert_user_error(capsys, "run", "--sim", "model", "--layer", "alexnet-fc8",
                      "--early-start", "--no-overlap",
                      match="--early-start runs contexts beside their pass's DMA-in: it "
                            "cannot run with --no-overlap")
    # The system's own rule: unset, early start is the overlap; asked for without it, refused.
    assert perf.System().early_start is True and perf.System().edge_multicast is True
    assert perf.System(overlap=False).early_start is False
    with pytest.raises(FdpuError, match="early start runs contexts beside their pass's DMA-in: "
                                        "it needs overlap"):
        perf.System(overlap=False, early_start=True)
    # Without --early-start, --no-overlap runs (the contexts wait for the whole DMA-in).
    path = tmp_path / "m.json"
    assert run(capsys, "run", "--sim", "model", "--layer", "alexnet-fc8", "--no-overlap",
               "--json", path)[0] == 0
    assert json.loads(path.read_text())["early_start"] is False


def test_cli_model_reports_the_earlier_start(tmp_path, capsys):
    (late, _), (early, _) = json_runs(capsys, tmp_path, ("--no-early-start", "--early-start"),
                                      "run", "--sim", "model", "--layer", "alexnet-fc8",
                                      "--batch", 64)
    assert early["compute_cycles"] >= late["compute_cycles"]      # the DMA beside them
    assert early["cycles"] < late["cycles"] and early["hold_cycles"] < late["hold_cycles"]


@pytest.mark.parametrize("sim, rows, K, top", [
    # 16 contexts: on the 2 x 2 top of tests/test_chain.py (its Verilator build); on a 1 x 1
    # on either simulator: slow (early start runs on Icarus in CI in test_shared_weights).
    ("verilator", 2, 16, dict(slots=32, dbuf_bytes=8192, plan_kw=dict(kb=1, gb=1))),
    pytest.param("icarus", 1, 8, {}, marks=pytest.mark.slow),
    pytest.param("verilator", 1, 8, {}, marks=pytest.mark.slow)])
def test_contexts_run_beside_the_dma_in_on_the_rtl(sim, rows, K, top):
    # 16 contexts, a slow memory: gated, the contexts start as their data come in
    # (bit-exact, ``_fc`` checks it against the golden model), so the layer ends well before
    # the DMA-in plus the contexts; the array waits less, the same bytes move.
    kw = dict(mem=MemModel(latency=20, bandwidth=1.0), dma_channels=2, overlap=True)
    late = _fc(rows, rows, K, 32, 16, "dense", 1.0, sim, kwargs=kw, **top)
    early = _fc(rows, rows, K, 32, 16, "dense", 1.0, sim, kwargs=dict(kw, early_start=True),
                **top)
    a, b = late.passes[0], early.passes[0]
    print(f"late: {late.cycles} cycles (DMA-in {a.in_cycles}, hold {a.hold_cycles}); early: "
          f"{early.cycles} (DMA-in {b.in_cycles}, hold {b.hold_cycles})")
    assert early.cycles < late.cycles
    assert b.hold_cycles < a.hold_cycles
    assert b.span_cycles < b.in_cycles + b.context_cycles
    # Contexts provably started before the DMA-in ended (the count is taken a cycle after
    # its end, in which at most one more can start); without early start none did.
    assert b.started_in >= 2 and a.started_in == 0, (a.started_in, b.started_in)
    assert early.final["o_ext_wr_bytes"] == late.final["o_ext_wr_bytes"]


@pytest.mark.parametrize("sim, rows, K, C, top", [
    # The 2 x 2 top of tests/test_chain.py (its Verilator build), 4 passes of 10 contexts;
    # the first 1 x 1 case, 4 passes of 9 contexts, on Icarus: slow.
    ("verilator", 2, 128, 64, dict(slots=32, dbuf_bytes=8192, plan_kw=dict(kb=2, gb=2))),
    pytest.param("icarus", 1, 16, 32, dict(dbuf_bytes=4096, plan_kw={}),
                 marks=pytest.mark.slow)])
def test_early_start_with_double_buffering_on_the_rtl(sim, rows, K, C, top):
    # Double-buffered passes: pass 0 starts its contexts beside its own DMA-in, the later
    # passes beside theirs (prefetched behind the previous pass); bit-exact.
    kw = dict(mem=MemModel(latency=20, bandwidth=2.0, stall=0.1), dma_channels=2,
              overlap=True, double_buffer=True)
    top = dict(top, plan_kw=dict(top["plan_kw"], double_buffer=True))
    late = _fc(rows, rows, K, C, 16, "dense", 1.0, sim, kwargs=kw, **top)
    early = _fc(rows, rows, K, C, 16, "dense", 1.0, sim, kwargs=dict(kw, early_start=True),
                **top)
    assert len(early.passes) == len(late.passes) > 1
    print("late", late.cycles, "early", early.cycles)
    assert early.cycles < late.cycles
