"""Resumable RTL jobs (:mod:`tb.host.checkpoint`): a job run as segments of passes, each kept
on disk, resumed after a stop, gives the bits and cycles of a run straight through."""

import json
import os

import numpy as np
import pytest

from sw.compiler import layers, planner
from sw.compiler.program import pass_images
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from tb.host import checkpoint, runtime
from tb.host.job_plan import MemModel
from cliutil import assert_user_error, run

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

#: A 1 x 1 top with small Dbufs: the 8 x 32 dense layer takes 4 passes.
P = ArrayParams(rows=1, cols=1, slots=16, dbuf_bytes=512, operand_depth=4, int_issue=1)
#: A slow memory at full bandwidth without stalls (its bandwidth limiter and its stall
#: generator start again at each segment: docs/system.md).
MEM = MemModel(latency=30, bandwidth=8.0)


def _layer():
    w = layers.make_weights((8, 32), 1.0, 1)
    x = layers.make_inputs(32, 4, 1)
    plan = planner.plan_fc(8, 32, 4, "dense", P, double_buffer=False)
    return plan, w, x


def _figures(job):
    """Every figure of a job but the wall times."""
    return dict(cycles=job.cycles, compute=job.compute_cycles, ext_in=job.ext_in,
                ext_out=job.ext_out, final={k: job.final[k] for k in job.SUMMED},
                passes=[(r.in_cycles, r.out_cycles, r.span_cycles, r.status)
                        for r in job.passes])


def _run(plan, w, x, **kwargs):
    return runtime.run_fc_rtl(plan, w, x, "icarus", mem=MEM, dma_channels=2, overlap=True,
                              **kwargs)


def test_segments_resumed_after_a_stop_equal_a_run_straight_through(tmp_path):
    plan, w, x = _layer()
    assert plan.passes == 4 and not plan.double_buffer
    ref = golden_fc.run_fc(plan, w, x, exact=True).result.view(np.uint16)
    y0, whole = _run(plan, w, x)
    assert np.array_equal(y0.view(np.uint16), ref)
    # Cbuf words are loaded by the first pass only: a segment starting later must not load
    # them again (the Cbufs are restored instead).
    assert whole.ext_in[0] > whole.ext_in[1] == whole.ext_in[2]

    store = tmp_path / "ckpt"
    y1, seg = _run(plan, w, x, checkpoint=store)
    assert np.array_equal(y1.view(np.uint16), ref)
    assert seg.wall_s["segments"] == 4 and seg.wall_s["resumed"] == 0
    assert _figures(seg) == _figures(whole)
    kept = sorted(store.glob("*.npz"), key=os.path.getmtime)
    assert len(kept) == 4 and not list(store.glob(".segment-*"))

    # A stop after two segments: the last two never written; a third file cut short.
    for path in kept[2:]:
        path.unlink()
    kept[1].write_bytes(kept[1].read_bytes()[:100])
    y2, resumed = _run(plan, w, x, checkpoint=store)
    assert resumed.wall_s["resumed"] == 1             # segment 0; 1 unreadable, 2-3 missing
    assert np.array_equal(y2.view(np.uint16), ref)
    assert _figures(resumed) == _figures(whole)

    # Everything kept: nothing is simulated.
    y3, again = _run(plan, w, x, checkpoint=store)
    assert again.wall_s["resumed"] == 4 and again.wall_s["build_s"] == 0
    assert np.array_equal(y3.view(np.uint16), ref) and _figures(again) == _figures(whole)

    # Two passes a segment: two simulations, the same figures.
    _, pairs = _run(plan, w, x, checkpoint=tmp_path / "pairs", segment_passes=2)
    assert pairs.wall_s["segments"] == 2 and _figures(pairs) == _figures(whole)


@pytest.mark.slow          # three Icarus runs of a double-buffered layer, ~2 min
def test_double_buffered_segments_keep_the_bits_and_lose_only_the_overlap(tmp_path):
    p2 = ArrayParams(rows=1, cols=1, slots=16, dbuf_bytes=2048, operand_depth=4, int_issue=1)
    plan = planner.plan_fc(8, 64, 4, "dense", p2, double_buffer=True)
    w = layers.make_weights((8, 64), 1.0, 1)
    x = layers.make_inputs(64, 4, 1)
    assert plan.double_buffer and plan.passes > 1
    y0, whole = _run(plan, w, x)
    _, one = _run(plan, w, x, checkpoint=tmp_path / "one")     # default: one segment
    assert one.wall_s["segments"] == 1 and one.cycles == whole.cycles
    y1, seg = _run(plan, w, x, checkpoint=tmp_path / "c", segment_passes=1)
    assert np.array_equal(y0.view(np.uint16), y1.view(np.uint16))
    # The segments run one after the other: each first pass's DMA-in is no longer behind the
    # pass before it, so the job takes longer; every pass's instructions are the same.
    assert seg.cycles >= whole.cycles
    assert [r.status["int_fires"] + r.status["fp_fires"] for r in seg.passes] == \
        [r.status["int_fires"] + r.status["fp_fires"] for r in whole.passes]
    print(f"double-buffered, {plan.passes} passes: straight through {whole.cycles:,} cycles, "
          f"one segment a pass {seg.cycles:,} (+{seg.cycles / whole.cycles - 1:.1%})")


def test_jobs_are_segmented_by_default_only_where_the_cycles_stay_exact():
    assert checkpoint.default_segment_passes(4, MemModel(), False) == 1
    assert checkpoint.default_segment_passes(4, MemModel(), True) == 4
    assert checkpoint.default_segment_passes(4, MemModel(bandwidth=2.0), False) == 4
    assert checkpoint.default_segment_passes(4, MemModel(stall=0.25), False) == 4


def test_segment_key_changes_with_what_determines_the_result():
    spec = dict(rows=1, cols=1, mem=dict(latency=20, bw=64, stall=0), passes=[{"regs": {}}],
                memories="/a/m.npz", out="/a/r.npz", progress_file=None)
    mem = {"idx0": np.arange(3), "val0": np.arange(3, dtype=np.uint64)}
    top = dict(ext_bytes=1 << 20, depth=4, dma_channels=1, config_ports=1, waves=False)
    key = checkpoint.segment_key("icarus", P, top, spec, mem, [])
    # The files' paths are not part of the key.
    assert key == checkpoint.segment_key("icarus", P, top, dict(spec, memories="/b/m.npz",
                                                                out="/b/r.npz"), mem, [])
    others = [
        checkpoint.segment_key("verilator", P, top, spec, mem, []),
        checkpoint.segment_key("icarus", ArrayParams(rows=1, cols=1, slots=32, dbuf_bytes=512,
                                                     operand_depth=4, int_issue=1),
                               top, spec, mem, []),
        checkpoint.segment_key("icarus", P, dict(top, dma_channels=2), spec, mem, []),
        checkpoint.segment_key("icarus", P, top, dict(spec, mem=dict(spec["mem"], bw=8)), mem,
                               []),
        checkpoint.segment_key("icarus", P, top, spec, dict(mem, val0=np.arange(1, 4,
                                                                             dtype=np.uint64)),
                               []),
        checkpoint.segment_key("icarus", P, top, spec, mem, [(0, np.array([1], np.uint64))]),
    ]
    assert len({key, *others}) == len(others) + 1


def test_bad_checkpoints_are_refused(tmp_path):
    plan, w, x = _layer()
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(FdpuError, match="the checkpoint is not a directory"):
        _run(plan, w, x, checkpoint=afile)
    with pytest.raises(FdpuError, match="segment_passes must be a positive integer, got 0"):
        _run(plan, w, x, checkpoint=tmp_path / "c", segment_passes=0)
    image = next(iter(pass_images(plan, np.float16(w), np.float16(x))))[0]
    with pytest.raises(FdpuError, match="a checkpointed job runs the images' own"):
        runtime.run_job(P, [(image, [])], "icarus", configs=[([], [])],
                        checkpoint=tmp_path / "c")
    with pytest.raises(FdpuError, match="the passes of a chained job .* one segment"):
        runtime.run_job(P, [(image, []), (image, [], ["a move"])], "icarus",
                        checkpoint=tmp_path / "c", segment_passes=1)
    assert afile.read_text() == "x"


def test_cli_rtl_checkpoint_resumes(tmp_path, capsys):
    argv = ["rtl", "--sim", "icarus", "--in-features", "32", "--out-features", "8", "--batch",
            "4", "--mode", "dense", "--rows", "1", "--cols", "1", "--slots", "16",
            "--dbuf-bytes", "512", "--dma-channels", "1", "--checkpoint", tmp_path / "c"]
    status, out, err = run(capsys, *argv, "--json", tmp_path / "a.json")
    assert status == 0, err
    first = json.loads((tmp_path / "a.json").read_text())
    assert first["passes"] > 1 and first["segments"] == first["passes"]
    assert first["resumed"] == 0 and "simulated / loaded" in out
    status, out, err = run(capsys, *argv, "--json", tmp_path / "b.json")
    assert status == 0, err
    second = json.loads((tmp_path / "b.json").read_text())
    assert second["resumed"] == second["segments"] == first["segments"]
    assert {k: v for k, v in second.items() if not k.endswith("_s") and k not in (
        "resumed", "cycles_per_s")} == {k: v for k, v in first.items() if not k.endswith(
            "_s") and k not in ("resumed", "cycles_per_s")}


@pytest.mark.parametrize("argv, match", [
    (("rtl", "--segment-passes", "2"), "--segment-passes applies with --checkpoint DIR only"),
    (("rtl", "--checkpoint", "{tmp}/c", "--segment-passes", "0"),
     "--segment-passes must be a positive number of passes, got 0"),
    (("rtl", "--checkpoint", "{tmp}/f"), "exists and is not a directory"),
    (("run", "--sim", "golden", "--checkpoint", "{tmp}/c"),
     "--checkpoint applies to an RTL simulation"),
    (("run", "--sim", "model", "--checkpoint", "{tmp}/c"),
     "--checkpoint applies to a simulation, not to --sim model"),
])
def test_cli_checkpoint_bad_input(tmp_path, capsys, argv, match):
    (tmp_path / "f").write_text("x")
    argv = [a.format(tmp=tmp_path) for a in argv]
    if argv[0] == "rtl":
        argv += ["--sim", "icarus"]
    assert_user_error(capsys, *argv, "--in-features", "32", "--out-features", "8", "--rows",
                      "1", "--cols", "1", match=match)
    assert not (tmp_path / "c").exists() and (tmp_path / "f").read_text() == "x"
