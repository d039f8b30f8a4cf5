"""hw.lib.shared.Shared: one Verilog module for many identical instances, plain elsewhere."""

import random
import re

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

import tb.host.verilator
from hw.lib.fifo import StreamFIFO
from hw.lib.shared import Shared
from hw.tooling.verilog import lint, to_verilog
from tb.host.tops import build
from tb.host.verilator import HIER_MIN_INSTANCES, hier_blocks, register_block_inputs


class Chain(wiring.Component):
    """``n`` FIFOs in a row, each wrapped in Shared (the design under test)."""

    def __init__(self, n=3, width=8, depth=2, share=True):
        self.n, self.width, self.depth, self.share = n, width, depth, share
        super().__init__({"i_data": In(stream.Signature(width)),
                          "o_data": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        prev = wiring.flipped(self.i_data)
        for k in range(self.n):
            fifo = StreamFIFO(width=self.width, depth=self.depth)
            if self.share:
                fifo = Shared(fifo, key=("fifo", self.width, self.depth), name="chain_fifo")
            m.submodules[f"fifo{k}"] = fifo
            wiring.connect(m, prev, fifo.i_data)
            prev = fifo.o_data
        wiring.connect(m, prev, wiring.flipped(self.o_data))
        return m


def test_one_module_for_all_instances_and_lint_clean():
    text = to_verilog(Chain(n=3), "chain")
    definitions = [line for line in text.splitlines() if line.startswith("module chain_fifo_")]
    assert len(definitions) == 1, definitions
    module = definitions[0].split()[1].split("(")[0]
    assert text.count(f"  {module} ") == 3
    assert lint(text, "chain") == []


def test_different_keys_get_different_modules():
    class Two(Chain):
        def elaborate(self, platform):
            m = Module()
            a = Shared(StreamFIFO(width=8, depth=2), key=("fifo", 8, 2), name="f")
            b = Shared(StreamFIFO(width=8, depth=4), key=("fifo", 8, 4), name="f")
            m.submodules.a, m.submodules.b = a, b
            wiring.connect(m, wiring.flipped(self.i_data), a.i_data)
            wiring.connect(m, a.o_data, b.i_data)
            wiring.connect(m, b.o_data, wiring.flipped(self.o_data))
            return m
    text = to_verilog(Two(), "two")
    assert len([ln for ln in text.splitlines() if ln.startswith("module f_")]) == 2
    assert lint(text, "two") == []


def test_plain_outside_verilog_simulates_in_order():
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    dut = Chain(n=3)
    words = [rng.randrange(256) for _ in range(40)]
    received = []

    async def source(ctx):
        for word in words:
            ctx.set(dut.i_data.payload, word)
            ctx.set(dut.i_data.valid, 1)
            await ctx.tick().until(dut.i_data.ready)
            ctx.set(dut.i_data.valid, 0)

    async def sink(ctx):
        for _ in range(400):
            ctx.set(dut.o_data.ready, rng.random() < 0.6)
            _, _, valid, ready, payload = await ctx.tick().sample(
                dut.o_data.valid, dut.o_data.ready, dut.o_data.payload)
            if valid and ready:
                received.append(payload)
            if len(received) == len(words):
                return
        raise AssertionError(f"timeout: {len(received)} of {len(words)} words out (seed {seed})")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run()
    assert received == words


@pytest.mark.parametrize("kwargs, error", [
    (dict(component=object(), key=1, name="x"), TypeError),
    (dict(key=[1], name="x"), TypeError),
    (dict(key=1, name="1x"), ValueError),
])
def test_bad_arguments(kwargs, error):
    fifo = StreamFIFO(width=8, depth=2)
    fifo._MustUse__silence = True   # never elaborated: the constructor is what is tested
    kwargs.setdefault("component", fifo)
    with pytest.raises(error):
        Shared(**kwargs)


def test_verilator_builds_register_reset_and_coordinates_inside_hier_blocks():
    # tb.host.verilator: a shared module with >= HIER_MIN_INSTANCES instances is a Verilator
    # hier_block, and its rst (and constant coordinates) are registered inside it
    # (docs/harness.md, "Simulation speed").
    few = to_verilog(Chain(n=3), "chain")
    assert hier_blocks(few) == []
    assert register_block_inputs(few, []) == few
    text = to_verilog(Chain(n=HIER_MIN_INSTANCES), "chain")
    [block] = hier_blocks(text)
    out = register_block_inputs(text, [block])
    header = out[out.index(f"module {block}("):].split(";", 1)[0]
    assert "rst__in" in header and not re.search(r"\brst\b", header)
    assert "  always @(posedge clk) rst <= rst__in;" in out
    assert out.count(".rst__in(rst)") == HIER_MIN_INSTANCES
    assert lint(out, "chain") == []


def test_router_coordinates_are_registered(monkeypatch):
    monkeypatch.setattr(tb.host.verilator, "HIER_MIN_INSTANCES", 2)    # a 1 x 2 mesh: 2 routers
    mesh, _ = build("mesh", {"rows": 1, "cols": 2, "width": 64, "depth": 2})
    text = to_verilog(mesh, "mesh")
    [router] = tb.host.verilator.hier_blocks(text)
    out = tb.host.verilator.register_block_inputs(text, [router])
    for port in ("rst", "i_x", "i_y"):
        assert f"always @(posedge clk) {port} <= {port}__in;" in out
        assert out.count(f".{port}__in(") == 2
    assert lint(out, "mesh") == []
