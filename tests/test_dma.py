"""The DMA (hw.ctrl.dma) and the external memory model (tb.host.extmem): parameters, lint, and the
cocotb bench of tb.dma on both simulators (random descriptor lists, latencies, bandwidths,
memory stalls and mesh backpressure against a Python model; bad descriptors end in BAD_DESC).
"""

import json
import os
import random

import pytest
from amaranth.sim import Simulator

from hw.ctrl.dma import Dma, build_dma
from hw.tooling.verilog import lint, to_verilog
from sw.spec.arch import ArrayParams
from sw.spec.status import DmaError
from tb.dma.rig import make_dma_rig
from tb.host.extmem import ExtMem
from tb.host.runner import run_cocotb

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

RIG = dict(rows=1, cols=1, dbuf_bytes=1024, cbufs=2, cbuf_bytes=512, ext_bytes=1 << 14)


@pytest.mark.parametrize("build, error, message", [
    (lambda: Dma(ArrayParams(rows=1, cols=1), coord=(0, 0)), ValueError,
     r"coord must be an edge port coordinate of the array, not \(0, 0\)"),
    (lambda: Dma(ArrayParams(rows=1, cols=1), outstanding=3), TypeError,
     "outstanding must be a power of two >= 2, not 3"),
    (lambda: Dma("p"), TypeError, "params must be an sw.spec.arch.ArrayParams, not 'p'"),
    (lambda: ExtMem(1000), TypeError, "nbytes must be a power of two >= 16, not 1000"),
    (lambda: ExtMem(1 << 12, depth=1), TypeError, "depth must be a power of two >= 2, not 1"),
])
def test_bad_parameters(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_dma_lints_clean():
    assert lint(to_verilog(build_dma(rows=2, cols=3, cbufs=2), "dma"), "dma") == []


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_dma_random_jobs_and_bad_descriptors(sim):
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    run_cocotb(make_dma_rig(**RIG), {}, "tb.dma.test_dma", sim, name="dma_rig", seed=seed,
               extra_env={"FDPU_DMA_RIG": json.dumps(RIG),
                          "FDPU_DMA_JOBS": "6" if sim == "icarus" else "12"})


def _sim_one_descriptor(dma, words, cycles=60):
    """Run ``dma`` (amaranth.sim) on a one-descriptor list; return (halt, done, error, reqs)."""
    out = {}

    async def bench(ctx):
        ctx.set(dma.i_list, 0x100)
        ctx.set(dma.i_count, 1)
        ctx.set(dma.i_start, 1)
        ctx.set(dma.o_ext_rd.ready, 1)
        ctx.set(dma.o_req.ready, 1)
        ctx.set(dma.o_ext_wr.ready, 1)
        await ctx.tick()
        ctx.set(dma.i_start, 0)
        pending, reqs = [], 0
        for _ in range(cycles):
            if ctx.get(dma.o_ext_rd.valid):
                pending.append(words.get(ctx.get(dma.o_ext_rd.payload), 0))
            ctx.set(dma.i_ext_rdata.valid, bool(pending))
            ctx.set(dma.i_ext_rdata.payload, pending[0] if pending else 0)
            if pending and ctx.get(dma.i_ext_rdata.ready):
                pending.pop(0)
            reqs += ctx.get(dma.o_req.valid)
            await ctx.tick()
        out.update(halt=ctx.get(dma.o_halt), done=ctx.get(dma.o_done),
                   error=ctx.get(dma.o_error), reqs=reqs)

    sim = Simulator(dma)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_cbuf_descriptor_on_a_channel_without_cbufs_is_bad():
    # The extra DMA channels of a multi-channel top have no Cbuf port: BAD_DESC, no hang.
    p = ArrayParams(rows=1, cols=1, dbuf_bytes=1024)
    cbuf = {0x100: 0, 0x108: 16 | 1 << 33}                  # 16 bytes into Cbuf offset 0
    got = _sim_one_descriptor(Dma(p, coord=(1, 0), cbuf=False), cbuf)
    assert got["halt"] and not got["done"] and got["error"] == 1 << DmaError.BAD_DESC, got
    assert _sim_one_descriptor(Dma(p, coord=(1, 0)), cbuf)["done"]
    # A Dbuf descriptor of all-zero words (external 0 -> Dbuf 0) runs on any channel.
    dbuf = {0x100: 0, 0x108: 16}
    got = _sim_one_descriptor(Dma(p, coord=(1, 0), cbuf=False), dbuf)
    assert got["reqs"] == 2, got           # (then it waits for the acks no Dbuf sends here)
