"""The DMA (hw.dma) and the external memory model (hw.extmem): parameters, lint, and the
cocotb bench of tb.dma on both simulators (random descriptor lists, latencies, bandwidths,
memory stalls and mesh backpressure against a Python model; bad descriptors end in BAD_DESC).
"""

import json
import os
import random

import pytest

from hw.dma import Dma, build_dma
from hw.extmem import ExtMem
from hw.verilog import lint, to_verilog
from sw.arch import ArrayParams
from tb.dma.rig import make_dma_rig
from tb.runner import run_cocotb

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

RIG = dict(rows=1, cols=1, dbuf_bytes=1024, cbufs=2, cbuf_bytes=512, ext_bytes=1 << 14)


@pytest.mark.parametrize("build, error, message", [
    (lambda: Dma(ArrayParams(rows=1, cols=1), coord=(0, 0)), ValueError,
     r"coord must be an edge port coordinate of the array, not \(0, 0\)"),
    (lambda: Dma(ArrayParams(rows=1, cols=1), outstanding=3), TypeError,
     "outstanding must be a power of two >= 2, not 3"),
    (lambda: Dma("p"), TypeError, "params must be an sw.arch.ArrayParams, not 'p'"),
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
