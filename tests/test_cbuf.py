"""The Cbufs (:mod:`hw.ctrl.cbuf`) on the generated Verilog, Icarus and Verilator: random
words written and read back on every read port (:mod:`tb.cbuf.bench_cbuf`), with Amaranth
memories and with the behavioural SRAM banks the system top uses.  The MicC's reads of real
images are in tests/test_micc.py (amaranth.sim) and every system run."""

import pytest

from sw.spec.system import SIMULATORS
from tb.host.runner import run_cocotb


@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("cbufs, ports, behavioural", [(8, 4, False), (4, 1, True),
                                                      (8, 2, True)])
def test_random_words_read_back_on_every_port(sim, cbufs, ports, behavioural):
    params = dict(rows=2, cols=2, cbufs=cbufs, cbuf_bytes=256, behavioural=behavioural,
                  ports=ports)
    assert run_cocotb("cbuf", params, "tb.cbuf.bench_cbuf", sim).tests == 1
