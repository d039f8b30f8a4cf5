"""Tests of hw.noc.dbuf and hw.lib.sram: parameters, the behavioural SRAM model's lint, throughput
in amaranth.sim, and the generated Verilog on Icarus and Verilator against sw.models.noc."""

import pytest
from amaranth.sim import Simulator

from hw.lib.sram import SRAM_MODULE, Sram, attach_models
from hw.noc.dbuf import Dbuf
from hw.tooling.verilog import lint, to_verilog
from sw.models.noc import DbufModel
from sw.spec.arch import ArrayParams
from sw.spec.packet import Kind, pack_flit
from tb.host.runner import run_cocotb

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

SMALL = ArrayParams(rows=2, cols=2, dbuf_bytes=4096, slots=64, operand_depth=4, int_issue=1)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"index": 8}, ValueError, r"index must be a Dbuf number 0\.\.7, not 8"),
    ({"index": -1}, ValueError, r"index must be a Dbuf number"),
    ({"reply_depth": 1}, TypeError, r"reply_depth must be an integer >= 2, not 1"),
])
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        Dbuf(SMALL, **{"index": 0, **kwargs})


def test_sram_bad_parameters():
    with pytest.raises(TypeError, match="width must be a positive multiple of 8, not 12"):
        Sram(12, 16)
    with pytest.raises(TypeError, match="depth must be an integer >= 2, not 1"):
        Sram(64, 1)


def test_big_bank_is_an_instance_that_lints():
    p = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                    int_issue=1)                  # the paper's 2 MiB Dbufs
    text = to_verilog(Dbuf(p, 3), "dbuf")
    assert SRAM_MODULE in text and len(text) < 100_000   # no per-word initialisation
    assert lint(attach_models(text), "dbuf") == []
    small = to_verilog(Dbuf(SMALL, 0), "dbuf")
    assert SRAM_MODULE not in small and attach_models(small) == small



def test_model_loads_its_part_of_segments_and_answers():
    """DbufModel: a segment across two Dbufs lands in both; loads, broadcast, stores, errors."""
    p = SMALL
    d0, d1 = DbufModel(p, 0), DbufModel(p, 1)
    seg = {p.dbuf_bytes - 4: bytes(range(1, 9))}              # 4 bytes in each
    for d in (d0, d1):
        d.load(seg)
    assert d0.contents()[-4:] == bytes([1, 2, 3, 4]) and d1.contents()[:4] == bytes([5, 6, 7, 8])
    assert d1.access(Kind.LOAD, p.dbuf_bytes, 2) == (0, 0x08070605)
    assert d1.access(Kind.LOAD, p.dbuf_bytes, 1, bcast=1) == (0, 0x0605 * 0x0001_0001_0001_0001)
    assert d1.access(Kind.STORE, p.dbuf_bytes + 8, 3, data=0xABCD) == (0, 0)
    assert d1.access(Kind.LOAD, p.dbuf_bytes + 8, 3) == (0, 0xABCD)
    assert d1.access(Kind.LOAD, 0, 3) == (1, 0)                    # another Dbuf's address
    assert d1.access(Kind.LOAD, p.dbuf_bytes + 2, 3) == (1, 0)     # misaligned
    assert d1.access(Kind.LOAD, p.dbuf_bytes, 2, bcast=1) == (1, 0)  # broadcast of 4 bytes
    assert DbufModel(p, 3).contents() == bytes(p.dbuf_bytes)

def test_sim_one_per_cycle():
    """Back-to-back requests with a ready sink: one reply per cycle, 2 cycles latency."""
    p, index = SMALL, 5
    dut = Dbuf(p, index)
    model = DbufModel(p, index)
    requests = []
    for i in range(24):
        kind = Kind.STORE if i < 12 else Kind.LOAD
        fields = dict(addr=index * p.dbuf_bytes + 8 * (i % 12), size=3, src_x=1, src_y=2,
                      slot=i % 8, tag=i % 16)
        if kind == Kind.STORE:
            fields["data"] = 0x1111_0000_0000_0000 * (i % 15) + i
        requests.append(pack_flit(p, kind, p.dbuf_coord(index), **fields))
    expected = [model.reply(r) for r in requests]
    got = []

    async def bench(ctx):
        ctx.set(dut.o_reply.ready, 1)
        first = None
        for cycle in range(200):
            if requests:
                ctx.set(dut.i_req.payload.as_value(), requests[0])
                ctx.set(dut.i_req.valid, 1)
            else:
                ctx.set(dut.i_req.valid, 0)
            _, _, ready, valid, payload = await ctx.tick().sample(
                dut.i_req.ready, dut.o_reply.valid, dut.o_reply.payload.as_value())
            if valid:
                got.append(payload)
                first = cycle if first is None else first
            if ready and requests:
                requests.pop(0)
            if len(got) == len(expected):
                assert cycle - first == len(expected) - 1, "not one reply per cycle"
                return
        raise AssertionError(f"timeout: {len(got)} of {len(expected)} replies")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == expected


_DBUF_BIG = {"rows": 2, "cols": 2, "index": 5, "dbuf_bytes": 4096, "reply_depth": 4}
_DBUF_TINY = {"rows": 1, "cols": 3, "index": 7, "dbuf_bytes": 64, "reply_depth": 2}


# One configuration per simulator in CI; the crossed pairs under ``-m slow``.
@pytest.mark.parametrize("sim, params", [("icarus", _DBUF_TINY), ("verilator", _DBUF_BIG)],
                         ids=["icarus-1x3-64B", "verilator-2x2-4k"])
def test_cocotb_dbuf(sim, params):
    assert run_cocotb("dbuf", params, "tb.dbuf.bench_dbuf", sim).tests == 3


@pytest.mark.slow
@pytest.mark.parametrize("sim, params", [("icarus", _DBUF_BIG), ("verilator", _DBUF_TINY)],
                         ids=["icarus-2x2-4k", "verilator-1x3-64B"])
def test_cocotb_dbuf_crossed(sim, params):
    assert run_cocotb("dbuf", params, "tb.dbuf.bench_dbuf", sim).tests == 3
