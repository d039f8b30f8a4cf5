"""Clock and reset for every cocotb bench: the one place where the clock implementation is
chosen.

A cocotb ``Clock`` defaults to a Python coroutine on Icarus (``COCOTB_TRUST_INERTIAL_WRITES``
is unset there), which costs a Python wake-up per edge. :func:`start_clock` asks for the
GPI (C++) implementation on every simulator, so benches get the fast path without thinking.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

__all__ = ["CLOCK_PERIOD_NS", "CLOCK_IMPL", "start_clock", "reset"]

#: Default clock period (1 GHz nominal is 1 ns; 10 ns keeps waveforms readable).
CLOCK_PERIOD_NS = 10

#: ``"gpi"``: the clock toggles in the simulator interface, no Python per edge.
CLOCK_IMPL = "gpi"


def start_clock(clk, period_ns=CLOCK_PERIOD_NS, *, impl=CLOCK_IMPL):
    """Start a 50 % duty-cycle clock on ``clk`` and return the :class:`cocotb.clock.Clock`.

    Parameters
    ----------
    clk : cocotb handle
        The clock input, usually ``dut.clk``.
    period_ns : int
        Period in nanoseconds.
    impl : {"gpi", "py"}
        Clock implementation; keep the default unless debugging cocotb itself.
    """
    clock = Clock(clk, period_ns, unit="ns", impl=impl)
    clock.start()
    return clock


async def reset(clk, rst, cycles=2):
    """Hold ``rst`` high for ``cycles`` rising edges of ``clk``, then release it."""
    rst.value = 1
    for _ in range(cycles):
        await RisingEdge(clk)
    rst.value = 0
    await RisingEdge(clk)
    cocotb.log.debug("reset released")
