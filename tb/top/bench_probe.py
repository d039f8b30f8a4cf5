"""Run a system job (``tb.top.bench_run``) and sample the per-PE FACC counters over time.

A measurement aid for ``scripts/diag_array.py``: the job is exactly ``tb.top.bench_run``'s (same
spec, same checks); beside it a coroutine reads the top's public counters every
``FDPU_PROBE_PERIOD`` cycles (default 32): ``o_clock``, ``o_fp_fires[n]`` for every PE and
``o_dbuf_reqs``, and the MicC's ``o_ends``, ``o_cycles``, ``o_config_cycles``, ``o_state``.
Only top-level signals are read, so it works on the 8 x 8 Verilator model
(where nothing inside the top is public).  Python wakes once per period, not per cycle.

The samples go to the JSON file ``FDPU_PROBE_OUT``: ``period``, ``clock`` (list of ``o_clock``
values) and ``fp`` (per sample, the list of per-PE FP fire counts), ``dbuf_reqs``, ``ends``,
``cycles``, ``config_cycles``, ``state``.  The counters restart at each compute start, so the
samples show each PE's first and last FP firing to within one period and its rate per window.
"""

import json
import os

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from tb.common.clock import CLOCK_PERIOD_NS
from tb.top import bench_run


def _value(handle):
    value = handle.value
    return int(value) if value.is_resolvable else -1


async def _sample(dut, npes, period, out):
    """Append one sample of the counters to ``out`` every ``period`` cycles, forever."""
    fires = [getattr(dut, f"o_fp_fires__{n}") for n in range(npes)]
    while True:
        await Timer(period * CLOCK_PERIOD_NS, unit="ns")
        await ReadOnly()
        out["clock"].append(_value(dut.o_clock))
        out["fp"].append([_value(h) for h in fires])
        out["dbuf_reqs"].append(_value(dut.o_dbuf_reqs))
        for name in ("o_ends", "o_cycles", "o_config_cycles", "o_state"):
            out.setdefault(name[2:], []).append(_value(getattr(dut, name)))


def _find(dut, path):
    handle = dut
    for part in path.split("."):
        handle = getattr(handle, part)
    return handle


async def _watch(dut, spec, out):
    """Record ``spec["signals"]`` of block ``spec["path"]`` every cycle of a clock window."""
    block = _find(dut, spec["path"])
    handles = {}
    for name in spec["signals"]:
        try:
            handles[name] = getattr(block, name)
        except AttributeError:
            out.setdefault("missing", []).append(name)
    if "missing" in out:
        out["children"] = sorted(h._name for h in block)[:2000]
    start = int(spec["from"])
    while True:
        await Timer(64 * CLOCK_PERIOD_NS, unit="ns")
        await ReadOnly()
        if _value(dut.o_clock) >= start - 80:
            break
    for _ in range(int(spec["cycles"]) + 80):
        await RisingEdge(dut.clk)
        await ReadOnly()
        clk = _value(dut.o_clock)
        if clk >= start:
            out["watch"].append([clk, {n: _value(h) for n, h in handles.items()}])
        if len(out["watch"]) >= int(spec["cycles"]):
            break


@cocotb.test()
async def probe_job(dut):
    """Run the job of ``FDPU_RUN_SPEC`` while sampling the FACC counters."""
    with open(os.environ["FDPU_RUN_SPEC"]) as f:
        spec = json.load(f)
    npes = spec["rows"] * spec["cols"]
    period = int(os.environ.get("FDPU_PROBE_PERIOD", "32"))
    out = {"period": period, "clock": [], "fp": [], "dbuf_reqs": []}
    task = cocotb.start_soon(_sample(dut, npes, period, out))
    watch = json.loads(os.environ.get("FDPU_PROBE_WATCH", "null"))
    if watch:
        out["watch"] = []
        wtask = cocotb.start_soon(_watch(dut, watch, out))
    try:
        await bench_run.run_job.func(dut)
    finally:
        task.cancel()
        if watch:
            wtask.cancel()
        with open(os.environ["FDPU_PROBE_OUT"], "w") as f:
            json.dump(out, f)
