"""Harness self-test: one cocotb test passes, one fails on purpose.

``tests/test_fifo.py`` runs this module through :func:`tb.host.runner.run_cocotb` and expects an
``AssertionError`` that names ``deliberate_failure`` (and not ``passes``) and the seed.
"""

import cocotb
from cocotb.triggers import ClockCycles

from tb.common.clock import reset, start_clock


@cocotb.test()
async def passes(dut):
    """Reset the FIFO: it must come up empty."""
    start_clock(dut.clk)
    await reset(dut.clk, dut.rst)
    assert dut.level.value.to_unsigned() == 0


@cocotb.test()
async def deliberate_failure(dut):
    """Fail: the harness must turn this into a failed pytest test."""
    start_clock(dut.clk)
    await ClockCycles(dut.clk, 3)
    assert dut.level.value.to_unsigned() == 12345, "deliberate failure of the harness self-test"
