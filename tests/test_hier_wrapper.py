"""The rising-edge wrapper of Verilator's hierarchical blocks
(``tb.host.hier_wrapper.edge_wrap_hier_blocks``).

Verilator's own wrapper evaluates a hierarchical block 6 times per clock cycle; the harness
replaces it by one evaluation per rising edge where the block's outputs depend on its state
only, and skips that evaluation while the block sits at a fixed point with unchanged inputs
(docs/harness.md "Simulation speed").  Checked here: the checks that decide both, on tiny
hand-written blocks (accepted, combinational output, falling-edge logic; for the skip, random
numbers and a public signal refused), and a whole FC job on a small system top (slow) and the
NoC bench with every shared module forced hierarchical, run with Verilator's wrapper, with the
edge wrapper and with the skip: same results (bit for bit with the golden model), same cycles,
same counters, and the skip did skip.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hw.lib.shared import shared_modules
from hw.tooling.verilog import verilator_env
from sw.cli.noc_bench import measure
from sw.compiler import layers, planner
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from tb.host import hier_wrapper, runner, runtime, verilator

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

#: Five blocks, two instances each: registered outputs (the wrapper and the skip apply), an
#: output computed from an input, logic on the falling edge (both keep Verilator's wrapper),
#: registered outputs with random numbers or a public signal (the wrapper, no skip).
BLOCKS_V = """
module regout(input clk, input rst, input [7:0] i, output reg [7:0] o, output reg [20:0] w);
  always @(posedge clk) o <= rst ? 8'h0 : o + i;
  always @(posedge clk) w <= w + {13'h0, i};      // a 32-bit port: VL_OUT, no width suffix
endmodule
module combout(input clk, input [7:0] i, output [7:0] o);
  reg [7:0] q = 8'h0;
  always @(posedge clk) q <= q + 8'h1;
  assign o = q ^ i;
endmodule
module negout(input clk, input [7:0] i, output reg [7:0] o);
  always @(negedge clk) o <= i;
endmodule
module randout(input clk, input [7:0] i, output reg [7:0] o);
  always @(posedge clk) o <= i ^ $urandom;
endmodule
module pubout(input clk, input [7:0] i, output reg [7:0] o);
  reg [7:0] q /*verilator public_flat_rw*/ = 8'h0;
  always @(posedge clk) begin q <= i; o <= q; end
endmodule
module blocks(input clk, input rst, input [7:0] i, output [7:0] o);
  wire [7:0] a, b, c, d, e, f, g, h, k;
  regout r0(.clk(clk), .rst(rst), .i(i), .o(a), .w());
  regout r1(.clk(clk), .rst(rst), .i(a), .o(b), .w());
  combout c0(.clk(clk), .i(b), .o(c));
  combout c1(.clk(clk), .i(c), .o(d));
  negout n0(.clk(clk), .i(d), .o(e));
  negout n1(.clk(clk), .i(e), .o(f));
  randout q0(.clk(clk), .i(f), .o(g));
  randout q1(.clk(clk), .i(g), .o(h));
  pubout p0(.clk(clk), .i(h), .o(k));
  pubout p1(.clk(clk), .i(k), .o(o));
endmodule
"""


def test_edge_check_accepts_registered_outputs_only(tmp_path, monkeypatch):
    """Registered outputs: wrapped; a combinational output or a falling edge: left alone.
    The skip: on the plain registered block, not with random numbers or a public signal."""
    for name, value in verilator_env().items():
        monkeypatch.setenv(name, value)
    (tmp_path / "blocks.v").write_text(BLOCKS_V)
    (tmp_path / "blocks.vlt").write_text(
        "`verilator_config\n"
        + "".join(f'hier_block -module "{m}"\n'
                  for m in ("regout", "combout", "negout", "randout", "pubout")))
    subprocess.run(["verilator", "--cc", "--hierarchical", "-Wno-fatal", "-Wno-lint",
                    "-Wno-style", "-Mdir", str(tmp_path / "obj"), "--prefix", "Vblocks",
                    "--top-module", "blocks", str(tmp_path / "blocks.vlt"),
                    str(tmp_path / "blocks.v")],
                   cwd=tmp_path, check=True, capture_output=True)
    done = hier_wrapper.edge_wrap_hier_blocks(tmp_path / "obj", "Vblocks", skip=True)
    assert done["regout"] == "edge+skip"
    assert "output o" in done["combout"] and "ico" in done["combout"]
    assert "posedge clk" in done["negout"]
    assert re.fullmatch(r"edge \(no skip: evaluation uses VL_RAND\w* .*\)", done["randout"])
    assert done["pubout"] == "edge (no skip: public signals (VPI could write the model))"
    assert json.loads((tmp_path / "obj" / "hier_edge.json").read_text()) == done
    wrapper = (tmp_path / "obj" / "Vregout" / "regout.sv").read_text()
    assert "always @(posedge clk)" in wrapper and "always @(clk)" not in wrapper
    assert "regout_fdpu_skip_new(handle__V)" in wrapper
    glue = (tmp_path / "obj" / "Vregout" / "regout.cpp").read_text()
    assert re.search(r"regout_fdpu_tick\(\s*void\* vhandlep__V, void\* vskip__V", glue)
    assert "FDPU_SKIP_INPUT(i)" in glue and "FDPU_SKIP_INPUT(rst)" in glue
    include = Path(os.environ["VERILATOR_ROOT"]) / "include"
    compiled = subprocess.run(["c++", "-std=c++17", "-fsyntax-only", f"-I{include}",
                               f"-I{include / 'vltstd'}", "regout.cpp"],
                              cwd=tmp_path / "obj" / "Vregout", capture_output=True, text=True)
    assert compiled.returncode == 0, f"the skipping tick's C++ does not compile:\n" \
                                     f"{compiled.stderr[-3000:]}"
    assert "fdpu_skip" not in (tmp_path / "obj" / "Vrandout" / "randout.sv").read_text()
    assert "always @(clk)" in (tmp_path / "obj" / "Vcombout" / "combout.sv").read_text()


def test_skip_refused_for_a_traced_block(tmp_path, monkeypatch):
    """A waves build (``--trace``) keeps the plain tick: a trace dump reads the model too."""
    for name, value in verilator_env().items():
        monkeypatch.setenv(name, value)
    (tmp_path / "blocks.v").write_text(BLOCKS_V)
    (tmp_path / "blocks.vlt").write_text('`verilator_config\nhier_block -module "regout"\n')
    subprocess.run(["verilator", "--cc", "--trace", "--hierarchical", "-Wno-fatal", "-Wno-lint",
                    "-Wno-style", "-Mdir", str(tmp_path / "obj"), "--prefix", "Vblocks",
                    "--top-module", "blocks", str(tmp_path / "blocks.vlt"),
                    str(tmp_path / "blocks.v")], cwd=tmp_path, check=True, capture_output=True)
    done = hier_wrapper.edge_wrap_hier_blocks(tmp_path / "obj", "Vblocks", skip=True)
    assert done == {"regout": "edge (no skip: traced model (waves))"}


def test_edge_check_reports_unexpected_generated_code(tmp_path):
    """A block folder whose C++ is not what Verilator 5.048 writes is refused, not patched."""
    block = tmp_path / "Vthing"
    block.mkdir()
    (block / "thing.sv").write_text(
        'import "DPI-C" function longint thing_protectlib_seq_update(\n'
        "    chandle handle__V\n    , input logic clk\n    , input logic clk2\n"
        "    , output logic o\n);\n")
    assert "clock inputs" in hier_wrapper.edge_block_check(block, "thing")


def test_edge_switch(monkeypatch):
    """``FDPU_HIER_EDGE=0`` turns the wrapper off, ``FDPU_HIER_SKIP=0`` the skip; anything
    else (or unset) keeps them on."""
    for name, enabled in ((hier_wrapper.HIER_EDGE_ENV, hier_wrapper.hier_edge_enabled),
                          (hier_wrapper.HIER_SKIP_ENV, hier_wrapper.hier_skip_enabled)):
        monkeypatch.delenv(name, raising=False)
        assert enabled()
        for value, on in (("0", False), ("off", False), ("no", False), ("1", True)):
            monkeypatch.setenv(name, value)
            assert enabled() is on


#: The three builds compared: Verilator's wrapper, the rising-edge wrapper, and with the skip.
_EDGE, _SKIP = hier_wrapper.HIER_EDGE_ENV, hier_wrapper.HIER_SKIP_ENV
WRAPPERS = {"verilator": {_EDGE: "0", _SKIP: "0"},
            "edge": {_EDGE: "1", _SKIP: "0"},
            "skip": {_EDGE: "1", _SKIP: "1"}}


def _recording(monkeypatch):
    """Record every :func:`tb.host.runner.run_cocotb` call's result in the returned list."""
    runs = []
    plain = runner.run_cocotb

    def recording(*args, **kwargs):
        runs.append(plain(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(runner, "run_cocotb", recording)
    return runs


def _skip_counts(log):
    """Return ``{block: (ticks, evaluations, fixed points)}`` the skipping ticks printed."""
    found = re.findall(r"fdpu hier skip: (\w+): (\d+) ticks, (\d+) evaluated .*?, \d+ "
                       r"snapshots, (\d+) fixed points", log.read_text())
    return {name: tuple(map(int, counts)) for name, *counts in found}


def _job(monkeypatch, wrapper):
    """Run a small dense FC job on a 1 x 2 top with every shared module hierarchical."""
    monkeypatch.setattr(verilator, "HIER_MIN_INSTANCES", 1)
    for name, value in {**WRAPPERS[wrapper], "FDPU_HIER_SKIP_STATS": "1"}.items():
        monkeypatch.setenv(name, value)
    runs = _recording(monkeypatch)
    p = ArrayParams(rows=1, cols=2, slots=16, dbuf_bytes=4096, operand_depth=4,
                    int_issue=1)     # a small PE: fast builds
    w = layers.make_weights((6, 40), 0.5, 5)
    x = layers.make_inputs(40, 3, 5)
    plan = planner.plan_fc(6, 40, 3, "dense", p)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    y, job = runtime.run_fc_rtl(plan, w, x, "verilator", max_cycles=50_000)
    assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16)), \
        f"RTL result ({wrapper} wrapper) differs from the golden model:\n{y}\n{ref.result}"
    (run,) = runs
    edges = run.build_dir / "hier_edge.json"
    return job, (json.loads(edges.read_text()) if edges.is_file() else None), run


@pytest.mark.slow          # three system builds, ~3 min; the mesh bench below runs in CI
def test_edge_wrapper_gives_the_same_cycles(monkeypatch):
    """Verilator's wrapper, the edge wrapper, the skip: same result, cycles, firings, flits."""
    base, none, _ = _job(monkeypatch, "verilator")
    edge, done, _ = _job(monkeypatch, "edge")
    skip, skipped, run = _job(monkeypatch, "skip")
    assert none is None
    assert done and set(done.values()) == {"edge"}, done
    assert skipped and set(skipped.values()) == {"edge+skip"}, skipped
    for job in (edge, skip):
        assert job.cycles == base.cycles
        assert [r.status for r in job.passes] == [r.status for r in base.passes]
        assert job.final == base.final
    counts = _skip_counts(run.log)
    assert set(counts) == set(skipped), counts
    assert all(evals < ticks and quiet > 0 for ticks, evals, quiet in counts.values()), counts
    assert os.environ.get(hier_wrapper.HIER_SKIP_ENV) == "1"


def test_edge_wrapper_mesh_bench_same_counters(monkeypatch):
    """The NoC bench (2 x 2 routers forced hierarchical; uniform traffic at 0.6 and sparse
    traffic with idle routers): with Verilator's wrapper and with the edge wrapper and the
    skip (the default), the same flits generated, ejected, the same latencies; the skip
    skipped evaluations.  The edge wrapper without the skip (``FDPU_HIER_SKIP=0``, a
    measurement setting) is compared on the system top in the slow tier.

    Only the routers are hierarchical: a hierarchical traffic node leaves reset a cycle late
    (``register_block_inputs``) and misses the seed load of cycle 0 (``tb.noc.bench``), so it
    offers a flit every cycle whatever the rate."""
    monkeypatch.setattr(verilator, "hier_blocks", lambda verilog: [
        name for name in shared_modules(verilog) if name.startswith("router")])
    monkeypatch.setenv("FDPU_HIER_SKIP_STATS", "1")
    runs = _recording(monkeypatch)
    results = {}
    for wrapper in ("verilator", "skip"):
        for name, value in WRAPPERS[wrapper].items():
            monkeypatch.setenv(name, value)
        results[wrapper] = [measure(2, 2, "uniform", rate, 400, 50) for rate in (0.6, 0.05)]
    busy, sparse = results["verilator"]
    assert busy["bad_flits"] == 0 and 0.5 < busy["offered"] < 0.7, results
    assert sparse["bad_flits"] == 0 and 0 < sparse["offered"] < 0.1, results
    assert results["skip"] == results["verilator"]
    # The sparse run with the skip.  The traffic nodes drive a new random payload every cycle,
    # valid or not, and a changed input ends a skip: few ticks are skipped, but some are.
    counts = _skip_counts(runs[-1].log)
    (ticks, evals, quiet), = counts.values()
    assert evals < ticks and quiet > 0, counts


@pytest.mark.slow          # two 4 x 4 system builds, ~3-4 min
def test_skip_with_backdoor_writes_between_passes(monkeypatch):
    """``--backdoor-in`` on a 4 x 4 top (16 PEs: hierarchical by default) over several passes:
    the Dbufs are written by VPI while the blocks sit quiet between passes.  With and
    without the skip: bit for bit with the golden model, the same cycles per pass."""
    monkeypatch.setenv("FDPU_HIER_SKIP_STATS", "1")
    p = ArrayParams(rows=4, cols=4, slots=16, dbuf_bytes=1024, operand_depth=4, int_issue=1)
    w = layers.make_weights((128, 64), 1.0, 7)      # 4 passes through 1-kB Dbufs
    x = layers.make_inputs(64, 4, 7)
    plan = planner.plan_fc(128, 64, 4, "dense", p)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    jobs = {}
    for skip in ("0", "1"):
        monkeypatch.setenv(hier_wrapper.HIER_SKIP_ENV, skip)
        runs = _recording(monkeypatch)
        y, jobs[skip] = runtime.run_fc_rtl(plan, w, x, "verilator", max_cycles=200_000,
                                           backdoor_in=True)
        assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16)), \
            f"FDPU_HIER_SKIP={skip}: RTL result differs from the golden model"
        (run,) = runs
        edges = json.loads((run.build_dir / "hier_edge.json").read_text())
        assert set(edges.values()) == {"edge+skip" if skip == "1" else "edge"}, edges
    off, on = jobs["0"], jobs["1"]
    assert len(on.passes) == len(off.passes) > 1
    assert [r.compute_cycles for r in on.passes] == [r.compute_cycles for r in off.passes]
    assert [r.status for r in on.passes] == [r.status for r in off.passes]
    assert on.final == off.final
    counts = _skip_counts(run.log)
    assert len(counts) == 2 and all(evals < ticks for ticks, evals, _ in counts.values()), counts


def test_concurrent_runs_of_one_build_take_separate_folders(tmp_path):
    """A run folder another process holds is skipped, not waited for (flock locks are per open
    file, so two claims in one process contend like two processes)."""
    from tb.host.runner import _run_dir
    with _run_dir(tmp_path / "runs", "tb.top.bench_run-main") as first:
        with _run_dir(tmp_path / "runs", "tb.top.bench_run-main") as second:
            assert first.name == "tb.top.bench_run-main" and second.name.endswith("-main-2")
            assert first.is_dir() and second.is_dir()
    with _run_dir(tmp_path / "runs", "tb.top.bench_run-main") as again:
        assert again == first                                   # released: reused
