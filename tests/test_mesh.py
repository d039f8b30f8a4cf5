"""Tests of hw.noc.mesh: wiring, routes against sw.spec.arch.route, and the generated Verilog on
Icarus and Verilator with every traffic pattern, edge traffic and random backpressure."""

import collections
import json
import os
import random

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from hw.noc.mesh import Mesh, Noc
from hw.noc.router import Router, VoqBuffer
from scriptutil import load_script
from sw.cli import main
from sw.cli.noc_bench import measure
from sw.spec.arch import ArrayParams, Dir
from sw.spec.packet import Kind, pack_flit
from tb.host.runner import run_cocotb
from tb.noc.cycle_model import simulate
from tb.noc.memory import NocMemory

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def test_mesh_ports():
    mesh = Mesh(ArrayParams(rows=2, cols=3, slots=64, operand_depth=4, int_issue=1), depth=2)
    assert len(mesh.i_local) == 6 and len(mesh.o_edge) == 10


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (3, 2)])
def test_sim_every_route(rows, cols):
    """One flit from every PE to every PE and edge port, alone in the mesh: it must come out
    at the right port after exactly len(route) cycles (one cycle per router)."""
    p = ArrayParams(rows=rows, cols=cols, slots=64, operand_depth=4, int_issue=1)
    dut = Mesh(p, depth=2)
    targets = p.pe_coords() + [p.dbuf_coord(k) for k in range(p.num_dbufs)]
    results = []

    async def bench(ctx):
        for k in range(p.num_dbufs):
            ctx.set(dut.o_edge[k].ready, 1)
        for n in range(p.num_pes):
            ctx.set(dut.o_local[n].ready, 1)
        for src in p.pe_coords():
            n = src[1] * cols + src[0]
            for dst in targets:
                word = pack_flit(p, Kind.OPERAND, dst, 0x5A5)
                ctx.set(dut.i_local[n].payload.as_value(), word)
                ctx.set(dut.i_local[n].valid, 1)
                await ctx.tick()
                ctx.set(dut.i_local[n].valid, 0)
                for cycle in range(1, 4 * (rows + cols) + 8):
                    outs = [("local", m, dut.o_local[m]) for m in range(p.num_pes)] + \
                        [("edge", k, dut.o_edge[k]) for k in range(p.num_dbufs)]
                    hit = [(kind, m) for kind, m, port in outs if ctx.get(port.valid)]
                    if hit:
                        (kind, m), = hit
                        port = dut.o_local[m] if kind == "local" else dut.o_edge[m]
                        assert ctx.get(port.payload.as_value()) == word
                        results.append((src, dst, kind, m, cycle))
                        await ctx.tick()
                        break
                    await ctx.tick()
                else:
                    raise AssertionError(f"timeout: flit {src} -> {dst} never left the mesh")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for src, dst, kind, m, cycle in results:
        want = ("local", dst[1] * cols + dst[0]) if p.dbuf_at(*dst) is None \
            else ("edge", p.dbuf_at(*dst))
        assert (kind, m) == want, f"{src} -> {dst} left at {kind} {m}"
        assert cycle == len(p.route(src, dst)), f"{src} -> {dst}: {cycle} cycles"


def test_noc_steers_requests():
    p = ArrayParams(rows=1, cols=2, slots=64, operand_depth=4, int_issue=1)
    dut = Noc(p, depth=2)
    seen = {}

    async def bench(ctx):
        for k in range(p.num_dbufs):
            ctx.set(dut.o_req[k].ready, 1)
            ctx.set(dut.o_reply[k].ready, 1)
        for n in range(p.num_pes):
            ctx.set(dut.o_local[n].ready, 1)
            ctx.set(dut.o_stray[n].ready, 1)
        east = p.dbuf_coord(p.cols)          # the east Dbuf of row 0
        for kind in (Kind.LOAD, Kind.REPLY):
            ctx.set(dut.i_local[0].payload.as_value(), pack_flit(p, kind, east, 1))
            ctx.set(dut.i_local[0].valid, 1)
            await ctx.tick()
            ctx.set(dut.i_local[0].valid, 0)
            for _ in range(10):
                if ctx.get(dut.o_req[p.cols].valid):
                    seen[kind] = "request"
                if ctx.get(dut.o_reply[p.cols].valid):
                    seen[kind] = "reply"
                await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {Kind.LOAD: "request", Kind.REPLY: "reply"}


# One thorough configuration per simulator keeps CI short: Icarus the smallest mesh with the
# shallowest buffers (most backpressure), Verilator a non-square mesh with the default depth.
# The other pairings and a 4x4 mesh run under ``-m slow``.
CI_MESHES = [
    ("icarus", {"rows": 2, "cols": 2, "width": 0, "depth": 2}),
    ("verilator", {"rows": 2, "cols": 3, "width": 0, "depth": 4}),
]
SLOW_MESHES = [
    ("icarus", {"rows": 2, "cols": 3, "width": 0, "depth": 4}),
    ("verilator", {"rows": 2, "cols": 2, "width": 0, "depth": 2}),
    ("verilator", {"rows": 3, "cols": 2, "width": 0, "depth": 3}),
]


def _mesh_id(case):
    sim, p = case
    return f"{sim}-{p['rows']}x{p['cols']}d{p['depth']}"


@pytest.mark.parametrize("case", CI_MESHES, ids=_mesh_id)
def test_cocotb_mesh(case):
    sim, params = case
    result = run_cocotb("mesh", params, "tb.noc.bench_mesh", sim)
    assert result.tests == 6


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_MESHES, ids=_mesh_id)
def test_cocotb_mesh_more(case):
    sim, params = case
    assert run_cocotb("mesh", params, "tb.noc.bench_mesh", sim).tests == 6


@pytest.mark.slow
@pytest.mark.parametrize("sim", ["verilator"])
def test_cocotb_mesh_4x4(sim):
    run_cocotb("mesh", {"rows": 4, "cols": 4, "width": 64, "depth": 4}, "tb.noc.bench_mesh", sim)


@pytest.mark.parametrize("sim, rows, cols, dbuf_bytes", [
    ("icarus", 2, 2, 128), ("verilator", 2, 3, 256),
], ids=["icarus-2x2", "verilator-2x3"])
def test_cocotb_noc_memory(sim, rows, cols, dbuf_bytes):
    """Loads, stores and operands through the whole Noc and its Dbufs (tb.noc.bench_memory)."""
    top = NocMemory(ArrayParams(rows=rows, cols=cols, dbuf_bytes=dbuf_bytes, slots=64,
                                operand_depth=4, int_issue=1))
    cfg = json.dumps({"rows": rows, "cols": cols, "dbuf_bytes": dbuf_bytes})
    result = run_cocotb(top, {}, "tb.noc.bench_memory", sim,
                        name=f"noc_memory_{rows}x{cols}", extra_env={"FDPU_MEM": cfg})
    assert result.tests == 2


def test_noc_bench_rejects_bad_input(capsys):
    assert main(["noc-bench", "--rows", "2", "--cols", "3", "--pattern", "transpose"]) == 2
    assert "transpose needs a square array" in capsys.readouterr().err
    assert main(["noc-bench", "--rate", "1.5"]) == 2
    assert "--rate must be in (0, 1]" in capsys.readouterr().err


def test_noc_bench_patterns_share_one_build():
    """The HDL bench on Icarus 2x2: pattern and rate are inputs, so two patterns reuse one
    build; below saturation everything offered is accepted, and neighbor traffic (one link,
    two routers) has latency exactly 3 (routers + 1)."""
    uniform = measure(2, 2, "uniform", 0.3, 600, 100, sim="icarus")
    neighbor = measure(2, 2, "neighbor", 0.3, 600, 100, sim="icarus")
    for r in (uniform, neighbor):
        assert r["bad_flits"] == 0 and abs(r["accepted"] - r["offered"]) < 0.03, r
    assert neighbor["avg_latency"] == 3.0 and neighbor["max_latency"] == 3
    assert uniform["max_latency"] > 3


@pytest.mark.slow
def test_noc_bench_2x2(tmp_path):
    r = measure(2, 2, "uniform", 0.2, 2000, 200)
    assert r["bad_flits"] == 0 and abs(r["accepted"] - r["offered"]) < 0.02


def test_cycle_model_voq_beats_fifo():
    """The design model (tb.noc.cycle_model): below saturation everything offered is
    accepted; at saturation the virtual output queues carry more than one FIFO per input."""
    offered, accepted, latency = simulate(4, 4, 0.1, cycles=1500, warmup=300)
    assert abs(offered - accepted) < 0.02 and 3 < latency < 6
    fifo = simulate(4, 4, 0.9, depth=4, cycles=1500, warmup=300)[1]
    voq = simulate(4, 4, 0.9, depth=4, window=4, multi=True, cycles=1500, warmup=300)[1]
    assert voq > fifo + 0.02, (fifo, voq)


def test_voq_buffer_order_per_output():
    """hw.noc.router.VoqBuffer alone (amaranth.sim): random flits to random outputs, random
    readies: every flit leaves once, unchanged, through its output, in arrival order per
    output; a flit for a stalled output does not hold back the others (head-of-line)."""
    seed = int(os.environ.get("FDPU_SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    layout = data.StructLayout({"seq": 8, "out": 3})
    dut = VoqBuffer(layout, 4)
    # The first flit goes to the stalled output 0 and the next three elsewhere, so that some
    # flits queued behind a stalled one are always there to overtake it (with random outputs
    # alone, four early flits to output 0 could fill the buffer: seed 126540540).
    outs = [0] + [rng.randrange(1, 5) for _ in range(3)] + [rng.randrange(5) for _ in range(146)]
    flits = list(enumerate(outs))
    received = {o: [] for o in range(5)}
    passed = []

    async def source(ctx):
        for seq, out in flits:
            ctx.set(dut.i_flit.payload, {"seq": seq, "out": out})
            ctx.set(dut.i_route, 1 << out)
            ctx.set(dut.i_flit.valid, 1)
            await ctx.tick().until(dut.i_flit.ready)
            ctx.set(dut.i_flit.valid, 0)
            for _ in range(rng.choice([0, 0, 1])):
                await ctx.tick()

    async def sinks(ctx):
        for cycle in range(3000):
            # Output 0 stalls for a long stretch: the others must keep flowing.
            for o in range(5):
                ctx.set(dut.o_voq[o].ready, (o != 0 or cycle > 600) and rng.random() < 0.7)
            sampled = await ctx.tick().sample(*(s for o in range(5) for s in
                                                (dut.o_voq[o].valid, dut.o_voq[o].ready,
                                                 dut.o_voq[o].payload)))
            for o in range(5):
                valid, ready, payload = sampled[2 + 3 * o: 5 + 3 * o]
                if valid and ready:
                    received[o].append((payload.seq, payload.out))
                    if o != 0 and cycle < 600:
                        passed.append(payload.seq)
            if sum(map(len, received.values())) == len(flits):
                return
        raise AssertionError(f"timeout: {sum(map(len, received.values()))} of {len(flits)} "
                             f"flits out (seed {seed})")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(source)
    sim.add_testbench(sinks)
    sim.run()
    for o in range(5):
        assert received[o] == [f for f in flits if f[1] == o], f"output {o} (seed {seed})"
    first_to_0 = next(seq for seq, out in flits if out == 0)
    assert any(seq > first_to_0 for seq in passed), "flits queued behind a stalled one"


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 4), (3, 5), (4, 4), (8, 8)])
def test_straight_homes_keep_each_link_to_one_dbuf(rows, cols):
    """With the plan's home Dbufs (straight routes; their shape is tests/test_graphs.py's) no
    mesh link carries more than one Dbuf's engines: scripts/diag_array.py's link loads stay at
    the Dbuf's own load (0.83 flits/cycle on the 8 x 8); ``cap`` is honoured."""
    diag = load_script("diag_array")
    p = ArrayParams(rows=rows, cols=cols, slots=64, operand_depth=4, int_issue=1)
    homes = diag.homes_straight(p, p.num_pes)
    cap = -(-p.num_pes // p.num_dbufs)
    rate = 10 / 24
    load = diag.link_loads(p, homes, rate)
    assert max(load.values()) <= cap * rate + 1e-9
    two = diag.homes_straight(p, p.num_pes, cap=2)
    assert max(collections.Counter(d for _, d in two).values()) <= 2


def test_link_loads_count_requests_and_replies():
    """One engine two routers from its Dbuf: its request crosses both routers' links, its
    reply enters next to the Dbuf and crosses back; the Dbuf's reply port carries it once."""
    diag = load_script("diag_array")
    p = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1)
    load = diag.link_loads(p, [((0, 1), p.dbuf_at(0, -1))], 0.5)
    assert load[("req", (0, 1), "NORTH")] == 0.5 and load[("req", (0, 0), "NORTH")] == 0.5
    assert load[("rep", "dbuf0", "inject")] == 0.5
    assert load[("rep", (0, 0), "SOUTH")] == 0.5 and load[("rep", (0, 1), "LOCAL")] == 0.5
    assert len(load) == 5


@pytest.mark.parametrize("edge", [True, False])
def test_router_sends_stores_first_into_a_dbuf(edge):
    """hw.noc.router.Router alone (amaranth.sim), 2 x 2, router (0, 0): loads from its PE and
    from the south and stores from the east compete for one output, which takes a flit every
    other cycle.  At an edge exit (the north Dbuf of column 0) the stores go first, loads only
    when no store is offered; at an inner output (south, to router (0, 1)) round-robin
    alternates.  Every flit leaves once, in order per input."""
    p = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1)
    dut = Router(p, depth=4)
    dst = (0, -1) if edge else (0, 1)
    out = Dir.NORTH if edge else Dir.SOUTH
    # (input, kind) streams; the south input cannot send south: use west there.
    loaders = (Dir.LOCAL, Dir.SOUTH if edge else Dir.WEST)
    sources = [(d, Kind.LOAD) for d in loaders] + [(Dir.EAST, Kind.STORE)]
    flits = {d: [pack_flit(p, k, dst, (int(d) << 8) | n) for n in range(12)]
             for d, k in sources}
    got = []

    def feeder(d):
        async def feed(ctx):
            for word in flits[d]:
                ctx.set(dut.i_flit[d].payload.as_value(), word)
                ctx.set(dut.i_flit[d].valid, 1)
                await ctx.tick().until(dut.i_flit[d].ready)
            ctx.set(dut.i_flit[d].valid, 0)
        return feed

    async def sink(ctx):
        ctx.set(dut.i_x, 0)
        ctx.set(dut.i_y, 0)
        for cycle in range(400):
            ctx.set(dut.o_flit[out].ready, cycle % 2)
            _, _, valid, ready, word = await ctx.tick().sample(
                dut.o_flit[out].valid, dut.o_flit[out].ready, dut.o_flit[out].payload.as_value())
            if valid and ready:
                got.append(word)
            if len(got) == 36:
                return
        raise AssertionError(f"timeout: {len(got)} of 36 flits out")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for d, _ in sources:
        sim.add_testbench(feeder(d), background=True)
    sim.add_testbench(sink)
    sim.run()
    source = [next(d for d, _ in sources if w in flits[d]) for w in got]
    for d, _ in sources:
        assert [w for w in got if w in flits[d]] == flits[d]          # once each, in order
    stores = [i for i, d in enumerate(source) if d == Dir.EAST]
    if edge:
        # The stores leave first (the buffers hold 4 each and refill as they drain).
        assert stores == list(range(12)), source
    else:
        assert max(stores) > 24 and min(stores) < 3, source           # interleaved
