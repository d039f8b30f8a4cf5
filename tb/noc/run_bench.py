"""cocotb side of ``fdpu noc-bench``: configure :class:`tb.noc.bench.NocBench`, await
``done`` (no Python per cycle), read the counters back into a JSON file.

Environment: ``FDPU_BENCH`` = JSON ``{"rate": r, "warmup": w, "measure": n, "out": path}``.
"""

import json
import os

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from tb.clock import reset, start_clock


@cocotb.test()
async def bench(dut):
    cfg = json.loads(os.environ["FDPU_BENCH"])
    start_clock(dut.clk)
    rate = min(65536, round(cfg["rate"] * 65536))
    warmup, measure = cfg["warmup"], cfg["measure"]
    # After `stop` no new flits are generated; the drain time lets the network empty.
    total = warmup + measure + cfg.get("drain", 4 * measure + 2000)
    dut.rate.value = rate
    dut.warmup.value = warmup
    dut.stop.value = warmup + measure
    dut.total.value = total
    await reset(dut.clk, dut.rst)
    chunk = 10_000
    for _ in range(total // chunk + 2):
        await ClockCycles(dut.clk, chunk)
        if int(dut.done.value):
            break
    else:
        raise AssertionError(f"timeout: done never rose after {total} cycles")
    await RisingEdge(dut.clk)
    nodes = cfg["nodes"]
    bins = cfg["bins"]
    result = {
        "bad": int(dut.bad.value),
        "generated": [int(getattr(dut, f"generated__{n}").value) for n in range(nodes)],
        "ejected": [int(getattr(dut, f"ejected__{n}").value) for n in range(nodes)],
        "latency": [int(getattr(dut, f"latency__{n}").value) for n in range(nodes)],
        "max_latency": [int(getattr(dut, f"max_latency__{n}").value) for n in range(nodes)],
        "hist": [int(getattr(dut, f"hist__{i}").value) for i in range(bins)],
    }
    with open(cfg["out"], "w") as handle:
        json.dump(result, handle)
