"""Run one configuration image on the FDPU top: backdoor-load, start, await halt, read back.

Driven by ``sw.runtime.run_rtl`` through the environment: ``FDPU_RUN_SPEC`` names a JSON file
with the host registers, the cycle bound, the memory image (``.npz``: Cbuf words, Dbuf words
per bank) and where to write the results.  Python stays off the per-cycle path: the clock is a
GPI clock, memories are written by backdoor before the start, and the bench awaits only the
top's ``o_halt`` (in chunks, printing progress) or the cycle bound, whose expiry is reported as
"timeout ... deadlock" with the MicC state, contexts issued/retired/ended and PE error flags.
"""

import json
import os
import time

import cocotb
import numpy as np
from cocotb.triggers import First, RisingEdge, Timer

from tb.clock import CLOCK_PERIOD_NS, reset, start_clock


def _int(handle):
    value = handle.value
    if not value.is_resolvable:
        raise AssertionError(f"{handle._path} holds unknown bits: {value}")
    return int(value)


def _snapshot(dut, npes):
    status = {name: _int(getattr(dut, name)) for name in (
        "o_done", "o_halt", "o_state", "o_error", "o_issued", "o_retired", "o_ends",
        "o_cycles", "o_dbuf_reqs", "o_mesh_flits")}
    status["int_fires"] = [_int(getattr(dut, f"o_int_fires__{n}")) for n in range(npes)]
    status["fp_fires"] = [_int(getattr(dut, f"o_fp_fires__{n}")) for n in range(npes)]
    status["pe_error"] = [_int(getattr(dut, f"o_pe_error__{n}")) for n in range(npes)]
    return status


def _report_x(handle, depth=0):
    """Print every signal below ``handle`` that holds unknown bits (debugging aid)."""
    for child in handle:
        try:
            value = child.value
        except Exception:               # noqa: BLE001 (scopes, arrays)
            value = None
        if value is not None and hasattr(value, "is_resolvable"):
            if not value.is_resolvable:
                print(f"X: {child._path} = {value}", flush=True)
        elif depth < 6:
            try:
                _report_x(child, depth + 1)
            except TypeError:
                pass


@cocotb.test()
async def run_image(dut):
    """Load, start, wait for halt (bounded), read the outputs and the counters."""
    with open(os.environ["FDPU_RUN_SPEC"]) as f:
        spec = json.load(f)
    npes, period = spec["rows"] * spec["cols"], CLOCK_PERIOD_NS
    start_clock(dut.clk)
    await reset(dut.clk, dut.rst)
    t0 = time.monotonic()
    with np.load(spec["memories"]) as mem:
        storage = dut.cbuf.bank0.bank.storage if spec["cbufs"] == 1 else None
        depth = spec["cbuf_depth"]
        words = mem["cbuf"]
        for i, w in enumerate(words.tolist()):
            bank = getattr(dut.cbuf, f"bank{i // depth}").bank.storage if storage is None \
                else storage
            bank[i % depth].value = w[0] | w[1] << 64
        for k in range(spec["dbufs"]):
            idx, val = mem[f"dbuf{k}_idx"], mem[f"dbuf{k}_val"]
            if len(idx):
                st = getattr(dut, f"dbuf{k}").sram.bank.storage
                for i, v in zip(idx.tolist(), val.tolist()):
                    st[i].value = v
    load_s = time.monotonic() - t0
    regs = spec["regs"]
    for name, value in regs.items():
        getattr(dut, name).value = value
    await RisingEdge(dut.clk)
    dut.i_start.value = 1
    await RisingEdge(dut.clk)
    dut.i_start.value = 0
    t1 = time.monotonic()
    bound, chunk, waited = spec["max_cycles"], spec["chunk"], 0
    halted = False
    while waited < bound and not halted:
        step = min(chunk, bound - waited)
        res = await First(RisingEdge(dut.o_halt), Timer(step * period, unit="ns"))
        halted = isinstance(res, RisingEdge) or bool(_int(dut.o_halt))
        waited += step if not halted else 0
        if not halted and spec.get("progress"):
            print(f"fdpu-progress cycles={waited} issued={_int(dut.o_issued)} "
                  f"retired={_int(dut.o_retired)} contexts={regs['i_contexts']}", flush=True)
    await RisingEdge(dut.clk)
    run_s = time.monotonic() - t1
    status = _snapshot(dut, npes)
    status.update(halted=halted,
                  waited=waited if not halted else status["o_cycles"], load_s=load_s, run_s=run_s)
    if os.environ.get("FDPU_X_REPORT"):
        _report_x(dut)
    reads = {}
    if halted:
        for j, (k, first, count) in enumerate(spec["reads"]):
            st = getattr(dut, f"dbuf{k}").sram.bank.storage
            reads[f"r{j}"] = np.array([_int(st[first + i]) for i in range(count)],
                                      dtype=np.uint64)
    np.savez(spec["out"], status=np.array(json.dumps(status)), **reads)
