"""The VPI backdoor of the system bench (``tb/host/backdoor.py``) and the runs that use it.

* the cocotb bench ``tb.top.bench_backdoor`` on an external memory model, both simulators:
  ranges written and read in both modes, and (Verilator) no memory kept per word written;
* ``--backdoor-in`` (``run_job(backdoor_in=True)``) on a 1 x 1 top over 4 passes: the result
  is bit-exact and every pass computes in exactly the cycles of the run whose DMA loaded it;
* a bad ``FDPU_BACKDOOR`` mode is refused with a message naming the variable.
"""

import numpy as np
import pytest

from sw.compiler import layers, planner
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from tb.host import runtime
from tb.host.backdoor import BACKDOOR_ENV, Backdoor
from tb.host.extmem import ExtMem
from tb.host.runner import run_cocotb
from sw.spec.system import SIMULATORS

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.mark.parametrize("sim", SIMULATORS)
def test_backdoor_bench(sim):
    # 64K words: enough for the memory check, a 20-s Verilator build.
    run_cocotb(ExtMem(1 << 19), {}, "tb.top.bench_backdoor", sim, name="extmem_backdoor")


def test_backdoor_in_matches_the_dma_cycle_for_cycle():
    p = ArrayParams(rows=1, cols=1, slots=16, dbuf_bytes=512, operand_depth=4, int_issue=1)
    w = layers.make_weights((8, 32), 1.0, 5)
    x = layers.make_inputs(32, 4, 5)
    plan = planner.plan_fc(8, 32, 4, "dense", p)
    ref = golden_fc.run_fc(plan, w, x, exact=True)
    runs = {}
    for backdoor in (False, True):
        y, job = runtime.run_fc_rtl(plan, w, x, "icarus", max_cycles=100_000,
                                    backdoor_in=backdoor)
        assert np.array_equal(y.view(np.uint16), ref.result.view(np.uint16)), \
            f"backdoor_in={backdoor}: RTL result differs from the golden model"
        runs[backdoor] = job
    dma, bd = runs[False], runs[True]
    assert len(bd.passes) == len(dma.passes) == 4     # later passes overwrite every word
    assert bd.backdoor_in and all(r.in_cycles == 0 for r in bd.passes)
    assert [r.compute_cycles for r in bd.passes] == [r.compute_cycles for r in dma.passes]
    assert [r.status["o_mesh_flits"] for r in bd.passes] == \
        [r.status["o_mesh_flits"] for r in dma.passes]
    assert bd.wall_s["max_rss_mb"] > 0 and bd.wall_s["backdoor_s"] >= 0


def test_bad_backdoor_mode(monkeypatch):
    monkeypatch.setenv(BACKDOOR_ENV, "handles")
    with pytest.raises(ValueError, match=f"{BACKDOOR_ENV} must be one of vpi, cocotb, not "
                                         f"'handles'"):
        Backdoor()
