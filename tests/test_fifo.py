"""Tests of hw.lib.fifo.StreamFIFO: parameters, amaranth.sim, and the generated Verilog on Icarus
and Verilator through the cocotb harness (tb/host/runner.py), including a test that the harness
fails a pytest test when a cocotb test fails."""

import random

import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.lib.fifo import StreamFIFO
from tb.host import verilator
from tb.host.runner import run_cocotb
from sw.spec.system import SIMULATORS

# Components whose constructor raised are never elaborated; Amaranth warns when they are
# garbage-collected, which may happen during a later test of this module.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


# -- parameters ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [
    ("width", 0), ("width", -3), ("width", 2.0), ("width", True), ("width", "8"),
    ("depth", 0), ("depth", None),
])
def test_bad_parameters(name, value):
    kwargs = {"width": 8, "depth": 4, name: value}
    with pytest.raises(TypeError, match=rf"^{name} must be a positive integer, not "
                                        rf"{repr(value)}$"):
        StreamFIFO(**kwargs)


def test_signature():
    fifo = StreamFIFO(width=33, depth=16)
    assert (fifo.width, fifo.depth) == (33, 16)
    assert len(fifo.i_data.payload) == 33 and len(fifo.o_data.payload) == 33
    assert fifo.level.shape().width == 5                # range(17)
    Fragment.get(fifo, None)                            # elaborates (and marks it used)


# -- amaranth.sim ----------------------------------------------------------------------------

def simulate(width, depth, seed, *, count=60, p_idle=0.3, p_stall=0.3):
    """Push ``count`` random words through the FIFO with random idle cycles and backpressure.

    Returns the words received, the maximum level seen and the cycle count; checks ``level``
    and ``i_data.ready`` against a model every cycle.
    """
    dut = StreamFIFO(width, depth)
    rng = random.Random(seed)
    words = [rng.getrandbits(width) for _ in range(count)]
    received = []
    stats = {"max_level": 0, "cycles": 0}
    bound = 20 * count + 50

    async def source(ctx):
        for word in words:
            while rng.random() < p_idle:
                await ctx.tick()
            ctx.set(dut.i_data.payload, word)
            ctx.set(dut.i_data.valid, 1)
            for _ in range(bound):
                _, _, ready = await ctx.tick().sample(dut.i_data.ready)
                if ready:
                    break
            else:
                raise AssertionError(f"deadlock: i_data.ready low for {bound} cycles with "
                                     f"{len(words) - len(received)} words pending, seed {seed}")
            ctx.set(dut.i_data.valid, 0)

    async def sink(ctx):
        for cycle in range(bound):
            if len(received) == count:
                stats["cycles"] = cycle
                return
            ready = rng.random() >= p_stall
            ctx.set(dut.o_data.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o_data.valid, dut.o_data.payload)
            if valid and ready:
                received.append(payload)
        raise AssertionError(f"timeout: {len(received)} of {count} words after {bound} "
                             f"cycles, seed {seed}")

    async def level_model(ctx):
        model = 0
        async for _, _, level, i_v, i_r, o_v, o_r in ctx.tick().sample(
                dut.level, dut.i_data.valid, dut.i_data.ready,
                dut.o_data.valid, dut.o_data.ready):
            assert level == model, f"level {level}, model {model}, seed {seed}"
            assert i_r == (level != depth), f"i_data.ready {i_r} at level {level}, seed {seed}"
            stats["max_level"] = max(stats["max_level"], level)
            model += (i_v and i_r) - (o_v and o_r)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.add_process(level_model)
    sim.run()
    assert received == words, f"words lost, duplicated or reordered, seed {seed}"
    return stats


@pytest.mark.parametrize("width, depth", [(1, 1), (8, 2), (8, 3), (33, 16)])
@pytest.mark.parametrize("p_idle, p_stall", [(0.3, 0.3), (0.0, 0.7), (0.7, 0.0)])
def test_sim_random_traffic(width, depth, p_idle, p_stall):
    seed = random.getrandbits(32)
    print(f"seed {seed}")
    stats = simulate(width, depth, seed, p_idle=p_idle, p_stall=p_stall)
    if p_stall >= 0.7:
        assert stats["max_level"] == depth, f"a slow sink must fill the FIFO, seed {seed}"


@pytest.mark.parametrize("depth, cycles", [(1, 2 * 48), (2, 3 * 48 // 2), (3, 48), (16, 48)])
def test_sim_full_rate(depth, cycles):
    stats = simulate(8, depth, seed=1, count=48, p_idle=0.0, p_stall=0.0)
    assert cycles <= stats["cycles"] <= cycles + 4


# -- generated Verilog on Icarus and Verilator (cocotb) --------------------------------------

@pytest.mark.parametrize("params", [{"width": 8, "depth": 4}, {"width": 33, "depth": 16}],
                         ids=["w8d4", "w33d16"])
@pytest.mark.parametrize("sim", SIMULATORS)
def test_cocotb_fifo(sim, params):
    result = run_cocotb("fifo", params, "tb.fifo.bench_fifo", sim)
    assert result.tests == 4


def test_harness_fails_on_cocotb_failure():
    with pytest.raises(AssertionError) as info:
        run_cocotb("fifo", {}, "tb.fifo.bench_must_fail", "icarus", seed=4242)
    message = str(info.value)
    assert "1 of 2 cocotb tests failed" in message
    assert "deliberate_failure" in message and "passes:" not in message
    assert "seed 4242" in message


def test_harness_reuses_and_separates_builds():
    # Same key: the second run reuses the build; other parameters or waves: another folder.
    first = run_cocotb("fifo", {"depth": 5}, "tb.fifo.bench_must_fail", "icarus",
                       testcase="passes")
    again = run_cocotb("fifo", {"depth": 5}, "tb.fifo.bench_must_fail", "icarus",
                       testcase="passes")
    other = run_cocotb("fifo", {"depth": 6}, "tb.fifo.bench_must_fail", "icarus",
                       testcase="passes")
    assert again.build_dir == first.build_dir and not again.built
    assert other.build_dir != first.build_dir
    assert (other.build_dir / "fifo.v").read_text().count("depth") == 0  # no stray text
    waves = run_cocotb("fifo", {"depth": 5}, "tb.fifo.bench_must_fail", "icarus",
                       testcase="passes", waves=True)
    assert waves.build_dir != first.build_dir
    assert waves.waves.suffix == ".fst" and waves.waves.stat().st_size > 0


def test_verilator_builds_compile_through_ccache_when_there(tmp_path):
    # Without ccache on PATH, or with FDPU_CCACHE=0: nothing changes.
    assert verilator.compiler_cache_env(tmp_path / "c", {"PATH": str(tmp_path)}) == {}
    fake = tmp_path / "bin" / "ccache"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec \"$@\"\n")
    fake.chmod(0o755)
    base = {"PATH": str(fake.parent), "MAKEFLAGS": "OPT_FAST=-O2 OBJCACHE=distcc"}
    assert verilator.compiler_cache_env(tmp_path / "c", {**base, "FDPU_CCACHE": "0"}) == {}
    env = verilator.compiler_cache_env(tmp_path / "c", base)
    assert env["MAKEFLAGS"].split() == ["OPT_FAST=-O2", "OBJCACHE=ccache"]
    assert env["CCACHE_DIR"] == str(tmp_path / "c") and "pch_defines" in env["CCACHE_SLOPPINESS"]
    # A cache the user named is kept.
    env = verilator.compiler_cache_env(tmp_path / "c", {**base, "CCACHE_DIR": "/mine"})
    assert env["CCACHE_DIR"] == "/mine"


def test_harness_reports_no_tests():
    with pytest.raises(AssertionError, match="no cocotb test ran"):
        run_cocotb("fifo", {}, "tb.fifo.bench_must_fail", "icarus", testcase="no_such_test")
