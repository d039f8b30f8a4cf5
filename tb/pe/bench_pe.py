"""cocotb tests of one processing element (``pe`` top) on the generated Verilog.

Environment (set by ``tests/test_pe.py`` through ``run_cocotb(extra_env=...)``):

* ``FDPU_PE_CASES``: JSON list of case folders (:func:`tb.pe.cases.save_case`): each image is
  configured into the PE, its contexts run with the MicC, Dbuf and mesh loopback of
  :class:`tb.pe.harness.TB` under random delays and backpressure, and the memory after the
  run, the firings per opcode, the context ends and the number of LOAD/STORE requests are
  compared with the golden model's.
* ``FDPU_PE_STRESS``: ``idle,backpressure`` probabilities (default ``0.2,0.3``);
  ``FDPU_PE_MEM_DELAY``: ``lo,hi`` Dbuf latency range in cycles (default ``2,30``).
* ``FDPU_PE_RESULTS``: a JSON file to write each case's cycles and firings to (benchmarks).
* ``FDPU_PE_PROBE=1``: also count stall reasons per cycle (:class:`tb.pe.probe.StallProbe`)
  into the results (diagnosis; slow).
* ``FDPU_PE_EXPECT_OVF=1``: count the loads sent without room (overflow entries of the
  reorder pool, ``pool_ovf_issue``) and fail if there was none (the path was not exercised).
* ``FDPU_PE_EXPECT_INT0=1`` (``int_issue == 2``): fail unless INT pipe 0 fired every ITER and
  no other INT/CTRL instruction (BSCAN and BPOS included) but loads and stores (the pipe split
  of ``hw.pe.pe``); in a case with pipe-0 hints, unless it fired the hinted opcodes (and ITER)
  only.

Besides the cases, two hand-built tests: ``errors_are_sticky`` and
``facc_count_zero_is_an_error`` (a FACC count operand of 0: the golden model refuses it).
"""

import json
import os

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from sw.spec.isa import Dest, Instruction, Op, Unit, count_token
from sw.spec.status import PeError
from tb.common.clock import start_clock
from tb.pe.cases import read_case
from tb.pe.harness import TB, make_rng, params_from_env, reset_pe
from tb.pe.probe import StallProbe

FULL = json.loads(os.environ.get("FDPU_PARAMS", "{}"))


def _tb(dut, **kw):
    p, x, y, micc = params_from_env(FULL)
    stress = os.environ.get("FDPU_PE_STRESS", "0.2,0.3").split(",")
    kw.setdefault("idle", float(stress[0]))
    kw.setdefault("backpressure", float(stress[1]))
    if os.environ.get("FDPU_PE_MEM_DELAY"):
        lo, hi = (int(v) for v in os.environ["FDPU_PE_MEM_DELAY"].split(","))
        kw.setdefault("mem_delay", (lo, hi))
    return TB(dut, p, x, y, micc, make_rng(), **kw)


def _compare(tb, expected, name):
    p = tb.p
    errors = []
    flags, slot = tb.error()
    if flags:
        errors.append(f"error flags {flags:#x} (slot {slot})")
    ops = {k: v for k, v in sorted(tb.fired.items()) if v}
    if ops != expected["ops"]:
        errors.append(f"firings per opcode differ: RTL {ops}, golden {expected['ops']}")
    if len(tb.end_log) != expected["ctx_ends"]:
        errors.append(f"{len(tb.end_log)} CTX_END messages, golden {expected['ctx_ends']}")
    # LOAD/STORE requests: a LDHBZ of address 0 sends none.
    if "requests" in expected and tb.requests != expected["requests"]:
        errors.append(f"{tb.requests} LOAD/STORE requests, golden {expected['requests']}")
    if expected.get("hazard"):
        _compare_hazard(tb, expected, errors)
        assert not errors, f"case {name}: " + "; ".join(errors)
        return
    for d in range(p.num_dbufs):
        want = bytes.fromhex(expected["memory"].get(str(d), "")) or bytes(p.dbuf_bytes)
        got = tb.dbuf_bytes(d)
        if got != want:
            bad = next(i for i in range(p.dbuf_bytes) if got[i] != want[i])
            errors.append(f"Dbuf {d} differs from byte {bad:#x}: RTL "
                          f"{got[bad & ~7:(bad & ~7) + 8].hex()} golden "
                          f"{want[bad & ~7:(bad & ~7) + 8].hex()}")
    assert not errors, f"case {name}: " + "; ".join(errors)


def _words(buf):
    return [bytes(buf[i:i + 8]) for i in range(0, len(buf), 8)]


def _compare_hazard(tb, expected, errors):
    """Fig. 7 without feedback: the same words stored, some at the wrong addresses."""
    p = tb.p
    got, want = [], []
    for d in range(p.num_dbufs):
        want += _words(bytes.fromhex(expected["memory"].get(str(d), "")) or bytes(p.dbuf_bytes))
        got += _words(tb.dbuf_bytes(d))
    moved = sum(g != w for g, w in zip(got, want))
    tb.dut._log.info(f"without the feedback edge {moved} of {len(got)} words landed at "
                        f"the wrong address")
    if not moved:
        errors.append("the graph without its feedback edge gave the right result: the "
                      "hazard did not show")
    if sorted(got) != sorted(want):
        errors.append("the misordered run stored other values, not a permutation")


async def _count_overflow(dut, counter):
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        v = dut.pool_ovf_issue.value
        if v.is_resolvable and int(v):
            counter[0] += 1


@cocotb.test()
async def golden_images(dut):
    """Run every case image; results and per-opcode firings equal the golden model's."""
    start_clock(dut.clk)
    results = []
    overflow = [0]
    if os.environ.get("FDPU_PE_EXPECT_OVF") == "1":
        cocotb.start_soon(_count_overflow(dut, overflow))
    for folder in json.loads(os.environ.get("FDPU_PE_CASES", "[]")):
        image, expected = read_case(folder)
        await reset_pe(dut)
        tb = _tb(dut)
        tb.load_image(image)
        probe = None
        if os.environ.get("FDPU_PE_PROBE") == "1":
            mine = {s: i for (x, y, s), i in image.instructions().items()
                    if (x, y) == (tb.x, tb.y)}
            probe = StallProbe(dut, sorted(s for s, i in mine.items() if i.op.unit is Unit.FP),
                               sorted(s for s, i in mine.items() if i.op.unit is Unit.MEM))
        bound = 400 * (image.contexts + 4) * max(1, sum(expected["ops"].values())
                                                 // max(image.contexts, 1) // 4 + 1)
        await tb.wait_retired(bound)
        _compare(tb, expected, expected["name"])
        dut._log.info(f"case {expected['name']}: {image.contexts} contexts, "
                      f"{sum(tb.fired.values())} firings, {tb.cycle} cycles: match")
        int0 = {op: n for op, n in tb.fired_int0.items()
                if Op[op].unit is not Unit.MEM}
        dut._log.info(f"case {expected['name']}: INT pipe 0 fired {dict(tb.fired_int0)}")
        hinted = {i.op.name for (x, y, s), i in image.instructions().items()
                  if (x, y) == (tb.x, tb.y) and i.pipe0}
        if os.environ.get("FDPU_PE_EXPECT_INT0") == "1" and not hinted:
            want = {"ITER": tb.fired["ITER"]} if tb.fired["ITER"] else {}
            assert int0 == want, (f"case {expected['name']}: INT pipe 0 fired {int0} besides "
                                  f"its loads and stores, expected {want} (every ITER)")
        elif os.environ.get("FDPU_PE_EXPECT_INT0") == "1":
            # Instructions with the pipe-0 hint: pipe 0 fires those opcodes (and ITER) only.
            assert hinted <= set(int0) <= hinted | {"ITER"}, (
                f"case {expected['name']}: INT pipe 0 fired {int0}, expected the hinted "
                f"opcodes {sorted(hinted)} (and ITER)")
        results.append(dict(name=expected["name"], contexts=image.contexts,
                            cycles=tb.cycle, ops=dict(tb.fired), int0=int0,
                            requests=tb.requests))
        if probe is not None:
            probe.stop()
            results[-1]["stalls"] = probe.report()
        tb.stop()
    if os.environ.get("FDPU_PE_RESULTS"):
        with open(os.environ["FDPU_PE_RESULTS"], "w") as out:
            json.dump(results, out)
    if os.environ.get("FDPU_PE_EXPECT_OVF") == "1":
        dut._log.info(f"{overflow[0]} loads sent as overflow entries (no room at issue)")
        assert overflow[0] > 0, "no load was sent without room: the overflow path was not run"


@cocotb.test()
async def errors_are_sticky(dut):
    """A token to an empty slot, an overflowing operand FIFO and a bad address set their
    sticky flags and the slot of the first error; the PE keeps accepting flits."""
    start_clock(dut.clk)
    p, x, y, _ = params_from_env(FULL)
    # 1. A token to an unconfigured slot: UNKNOWN_OPCODE, slot 5.
    await reset_pe(dut)
    tb = _tb(dut, idle=0, backpressure=0)
    tb.send(tb.operand(5, 0, 42))
    await tb.wait_quiet(20)
    assert tb.error() == (1 << 0, 5), f"unknown opcode: error status {tb.error()}"
    tb.stop()
    # 2. Overflow: ADD waiting on operand 1 gets operand_depth + 1 tokens on operand 0.
    await reset_pe(dut)
    tb = _tb(dut, idle=0, backpressure=0)
    add = Instruction(Op.ADD, nsrc=2, dests=(Dest(x, y, 3, 0),))
    tb.insn(2, add)
    tb.insn(3, Instruction(Op.MOV, nsrc=1))
    tb.send(*[tb.operand(2, 0, i) for i in range(p.operand_depth + 1)])
    await tb.wait_quiet(30)
    assert tb.error() == (1 << 1, 2), f"overflow: error status {tb.error()}"
    tb.stop()
    # 3. A load past the last Dbuf: BAD_ADDRESS, no request leaves.
    await reset_pe(dut)
    tb = _tb(dut, idle=0, backpressure=0)
    tb.insn(7, Instruction(Op.LDW, nsrc=1, imm=p.memory_bytes))
    tb.send(tb.operand(7, 0, 0))
    await tb.wait_quiet(30)
    assert tb.error() == (1 << 2, 7), f"bad address: error status {tb.error()}"
    assert tb.requests == 0, "a request with a bad address left the PE"
    tb.stop()


#: SIMD-4 binary16 words: 1.0, 2.0 and 3.0 in every lane.
_ONE4, _TWO4, _THREE4 = (v * 0x0001_0001_0001_0001 for v in (0x3C00, 0x4000, 0x4200))


@cocotb.test()
async def facc_count_zero_is_an_error(dut):
    """A FACC whose count operand says 0 sets the sticky BAD_COUNT flag (and the slot), steps
    once as if the count were 1 and goes on: the next accumulations, whose count operands
    already wait in the FIFO, take them at their first steps only."""
    start_clock(dut.clk)
    _, x, y, _ = params_from_env(FULL)
    await reset_pe(dut)
    tb = _tb(dut, idle=0, backpressure=0)
    tb.insn(2, Instruction(Op.STD, nsrc=2))                  # address, sum
    tb.insn(1, Instruction(Op.FACC, nsrc=3, dests=(Dest(x, y, 2, 1),)))
    # Counts 0 (taken as 1), 2 and 1: all three count tokens first.
    tb.send(*[tb.operand(1, 2, count_token(0, n)) for n in (0, 2, 1)])
    tb.send(*[tb.operand(2, 0, 8 * i) for i in range(3)])
    for a, b in ((_THREE4, _TWO4), (_ONE4, _TWO4), (_THREE4, _TWO4), (_ONE4, _TWO4)):
        tb.send(tb.operand(1, 0, a), tb.operand(1, 1, b))
    for _ in range(400):
        await tb.wait_quiet(1)
        if tb.fired["STD"] == 3 and not tb.busy:
            break
    else:
        raise AssertionError(f"timeout: deadlock: the three FACC sums were not stored: "
                             f"{tb.pending()}")
    await tb.wait_quiet(40)
    assert tb.error() == (1 << PeError.BAD_COUNT, 1), f"count 0: error status {tb.error()}"
    assert tb.fired["FACC"] == 4, f"{tb.fired['FACC']} FACC steps, expected 1 + 2 + 1"
    got = [int.from_bytes(tb.dbuf_bytes(0)[8 * i:8 * i + 8], "little") for i in range(3)]
    want = [v * 0x0001_0001_0001_0001 for v in (0x4600, 0x4800, 0x4000)]   # 6.0, 8.0, 2.0
    assert got == want, f"FACC sums {[hex(v) for v in got]}, expected {[hex(v) for v in want]}"
    tb.stop()
