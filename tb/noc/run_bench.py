"""cocotb side of ``fdpu noc-bench``: configure :class:`tb.noc.bench.NocBench`, await
``done`` (no Python per cycle), read the counters back into a JSON file.

Environment: ``FDPU_BENCH`` = JSON ``{"pattern": p, "rate": r, "warmup": w, "measure": n,
"out": path, "nodes": n, "bins": b}``; one build serves every pattern and rate.
"""

import json
import os

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge, Timer

from tb.common.clock import reset, start_clock
from tb.noc.bench import PATTERN_CODES


@cocotb.test()
async def bench(dut):
    cfg = json.loads(os.environ["FDPU_BENCH"])
    start_clock(dut.clk)
    rate = min(65536, round(cfg["rate"] * 65536))
    warmup, measure = cfg["warmup"], cfg["measure"]
    # After `stop` no new flits are generated; flits still ejected during the drain are
    # checked (`bad`) but not counted.
    total = warmup + measure + cfg.get("drain", 500)
    dut.pattern.value = PATTERN_CODES[cfg["pattern"]]
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
    }
    hist = []
    for i in range(bins):
        dut.hist_addr.value = i
        await Timer(1, unit="ns")
        hist.append(int(dut.hist_data.value))
    result["hist"] = hist
    with open(cfg["out"], "w") as handle:
        json.dump(result, handle)
