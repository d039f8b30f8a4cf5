"""Bench of :class:`tb.host.backdoor.Backdoor` on an external memory model
(``tb.host.extmem.ExtMem``).

Writes and reads ranges of its SRAM storage in both modes and checks that the modes see each
other's words; on Verilator, that writing 40,000 words through the VPI leaves the simulator's
resident memory where it was (cocotb handles kept ~2.3 kB per word: the 14 GB of alexnet-fc8,
docs/system.md "Memory of a run").  Random values from cocotb's seed (printed by the harness).
"""

import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from tb.common.clock import start_clock
from tb.host.backdoor import Backdoor
from tb.top.bench_run import peak_rss_mb


def _random_words(n):
    return np.array([random.getrandbits(64) for _ in range(n)], dtype=np.uint64)


@cocotb.test()
async def ranges_in_both_modes(dut):
    """Write and read ranges; a mode reads what the other wrote; zeros skipped on request."""
    start_clock(dut.clk)
    await RisingEdge(dut.clk)
    st = dut.sram.bank.storage
    vpi, old = Backdoor("vpi"), Backdoor("cocotb")
    words = _random_words(300)
    words[::7] = 0
    vpi.write(st, 100, words)
    assert np.array_equal(vpi.read(st, 100, 300), words)
    assert vpi.read(st, 99, 1)[0] == 0 and vpi.read(st, 400, 1)[0] == 0
    # skip_zero: the zeros of the new words leave the old words in place.
    new = np.zeros(300, dtype=np.uint64)
    new[5], new[250] = 0xFFFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0001
    vpi.write(st, 100, new, skip_zero=True)
    expect = words.copy()
    expect[[5, 250]] = new[[5, 250]]
    assert np.array_equal(vpi.read(st, 100, 300), expect)
    await RisingEdge(dut.clk)
    assert np.array_equal(old.read(st, 100, 300), expect)
    # cocotb writes land at the time step's ReadWrite phase: read them after an edge.
    more = _random_words(40)
    old.write(st, 1000, more)
    await RisingEdge(dut.clk)
    assert np.array_equal(vpi.read(st, 1000, 40), more)
    last = len(st) - 1
    vpi.write(st, last, np.array([0x0123_4567_89AB_CDEF], dtype=np.uint64))
    assert vpi.read(st, last, 1)[0] == 0x0123_4567_89AB_CDEF
    try:
        vpi.read(st, last, 2)
    except IndexError as exc:
        assert "has no word" in str(exc), exc
    else:
        raise AssertionError("reading past the end of the storage did not raise")


@cocotb.test()
async def vpi_writes_keep_no_memory(dut):
    """40,000 words through the VPI: the simulator grows by their data only (Verilator)."""
    if "verilator" not in cocotb.SIM_NAME.lower():
        return                      # Icarus keeps its word handles whatever the caller does
    start_clock(dut.clk)
    await RisingEdge(dut.clk)
    st = dut.sram.bank.storage
    bd = Backdoor("vpi")
    words = _random_words(40_000)
    before = peak_rss_mb()
    for _ in range(3):
        bd.write(st, 0, words)
        assert np.array_equal(bd.read(st, 0, len(words)), words)
    grown = peak_rss_mb() - before
    # cocotb handles: ~90 MB for these words; the data itself is 0.3 MB.
    assert grown < 20, f"the simulator grew {grown} MiB writing 40,000 words 3 times"
