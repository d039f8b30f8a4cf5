"""The rising-edge wrapper of Verilator's hierarchical blocks (``tb.runner.edge_wrap_hier_blocks``).

Verilator's own wrapper evaluates a hierarchical block 6 times per clock cycle; the harness
replaces it by one evaluation per rising edge where the block's outputs depend on its state
only (docs/harness.md "Simulation speed").  Checked here: the check that decides it, on tiny
hand-written blocks (accepted, combinational output, falling-edge logic), and a whole FC job
on a small system top (slow) and the NoC bench with every shared module forced hierarchical,
run with and without the wrapper: same results (bit for bit with the golden model), same
cycles, same counters.
"""

import json
import os
import subprocess

import numpy as np
import pytest

import tb.runner as runner
from hw.verilog import verilator_env
from sw import golden, graphs, layers, runtime
from sw.arch import ArrayParams

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

#: Three blocks, two instances each: registered outputs (the wrapper applies), an output
#: computed from an input, and logic on the falling edge (both keep Verilator's wrapper).
BLOCKS_V = """
module regout(input clk, input rst, input [7:0] i, output reg [7:0] o);
  always @(posedge clk) o <= rst ? 8'h0 : o + i;
endmodule
module combout(input clk, input [7:0] i, output [7:0] o);
  reg [7:0] q = 8'h0;
  always @(posedge clk) q <= q + 8'h1;
  assign o = q ^ i;
endmodule
module negout(input clk, input [7:0] i, output reg [7:0] o);
  always @(negedge clk) o <= i;
endmodule
module blocks(input clk, input rst, input [7:0] i, output [7:0] o);
  wire [7:0] a, b, c, d, e;
  regout r0(.clk(clk), .rst(rst), .i(i), .o(a));
  regout r1(.clk(clk), .rst(rst), .i(a), .o(b));
  combout c0(.clk(clk), .i(b), .o(c));
  combout c1(.clk(clk), .i(c), .o(d));
  negout n0(.clk(clk), .i(d), .o(e));
  negout n1(.clk(clk), .i(e), .o(o));
endmodule
"""


def test_edge_check_accepts_registered_outputs_only(tmp_path, monkeypatch):
    """Registered outputs: wrapped; a combinational output or a falling edge: left alone."""
    for name, value in verilator_env().items():
        monkeypatch.setenv(name, value)
    (tmp_path / "blocks.v").write_text(BLOCKS_V)
    (tmp_path / "blocks.vlt").write_text(
        "`verilator_config\n"
        + "".join(f'hier_block -module "{m}"\n' for m in ("regout", "combout", "negout")))
    subprocess.run(["verilator", "--cc", "--hierarchical", "-Wno-fatal", "-Wno-lint",
                    "-Wno-style", "-Mdir", str(tmp_path / "obj"), "--prefix", "Vblocks",
                    "--top-module", "blocks", str(tmp_path / "blocks.vlt"),
                    str(tmp_path / "blocks.v")],
                   cwd=tmp_path, check=True, capture_output=True)
    done = runner.edge_wrap_hier_blocks(tmp_path / "obj", "Vblocks")
    assert done["regout"] == "edge"
    assert "output o" in done["combout"] and "ico" in done["combout"]
    assert "posedge clk" in done["negout"]
    assert json.loads((tmp_path / "obj" / "hier_edge.json").read_text()) == done
    wrapper = (tmp_path / "obj" / "Vregout" / "regout.sv").read_text()
    assert "always @(posedge clk)" in wrapper and "always @(clk)" not in wrapper
    assert "regout_fdpu_tick" in (tmp_path / "obj" / "Vregout" / "regout.cpp").read_text()
    assert "always @(clk)" in (tmp_path / "obj" / "Vcombout" / "combout.sv").read_text()


def test_edge_check_reports_unexpected_generated_code(tmp_path):
    """A block folder whose C++ is not what Verilator 5.048 writes is refused, not patched."""
    block = tmp_path / "Vthing"
    block.mkdir()
    (block / "thing.sv").write_text(
        'import "DPI-C" function longint thing_protectlib_seq_update(\n'
        "    chandle handle__V\n    , input logic clk\n    , input logic clk2\n"
        "    , output logic o\n);\n")
    assert "clock inputs" in runner.edge_block_check(block, "thing")


def test_edge_switch(monkeypatch):
    """``FDPU_HIER_EDGE=0`` turns the wrapper off; anything else (or unset) keeps it on."""
    monkeypatch.delenv(runner.HIER_EDGE_ENV, raising=False)
    assert runner.hier_edge_enabled()
    for value, on in (("0", False), ("off", False), ("no", False), ("1", True)):
        monkeypatch.setenv(runner.HIER_EDGE_ENV, value)
        assert runner.hier_edge_enabled() is on


def _job(monkeypatch, edge):
    """Run a small dense FC job on a 1 x 2 top with every shared module hierarchical."""
    monkeypatch.setattr(runner, "HIER_MIN_INSTANCES", 1)
    monkeypatch.setenv(runner.HIER_EDGE_ENV, "1" if edge else "0")
    runs = []
    plain = runner.run_cocotb

    def recording(*args, **kwargs):
        runs.append(plain(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(runner, "run_cocotb", recording)
    p = ArrayParams(rows=1, cols=2, slots=16, dbuf_bytes=4096)     # a small PE: fast builds
    w = layers.make_weights((6, 40), 0.5, 5)
    x = layers.make_inputs(40, 3, 5)
    plan = graphs.plan_fc(6, 40, 3, "dense", p)
    ref = golden.run_fc(plan, w, x, exact=True)
    y, job = runtime.run_fc_rtl(plan, w, x, "verilator", max_cycles=50_000)
    assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16)), \
        f"RTL result (edge wrapper {edge}) differs from the golden model:\n{y}\n{ref.result}"
    (run,) = runs
    edges = run.build_dir / "hier_edge.json"
    return job, (json.loads(edges.read_text()) if edges.is_file() else None)


@pytest.mark.slow          # two system builds, ~2 min; the mesh bench below runs in CI
def test_edge_wrapper_gives_the_same_cycles(monkeypatch):
    """With and without the wrapper: same result, cycles, firings and mesh flits."""
    base, none = _job(monkeypatch, edge=False)
    edge, done = _job(monkeypatch, edge=True)
    assert none is None
    assert done and set(done.values()) == {"edge"}, done
    assert edge.cycles == base.cycles
    assert [r.status for r in edge.passes] == [r.status for r in base.passes]
    assert edge.final == base.final
    assert os.environ.get(runner.HIER_EDGE_ENV) == "1"


def test_edge_wrapper_mesh_bench_same_counters(monkeypatch):
    """The NoC bench (2 x 2 routers forced hierarchical, uniform traffic past saturation):
    with and without the wrapper, the same flits generated, ejected, the same latencies."""
    from sw.commands.noc_bench import measure

    monkeypatch.setattr(runner, "HIER_MIN_INSTANCES", 1)
    results = {}
    for edge in (False, True):
        monkeypatch.setenv(runner.HIER_EDGE_ENV, "1" if edge else "0")
        results[edge] = measure(2, 2, "uniform", 0.6, 400, 50)
    assert results[False]["bad_flits"] == 0 and results[False]["accepted"] > 0.2, results
    assert results[True] == results[False]
