"""PE microbenchmarks on the generated Verilog (run by ``scripts/bench_pe.py``).

Measured, not asserted (the figures go to ``docs/pe.md``):

* issue rate with independent ready instructions, per pipe and both together (dual issue);
* SIMD-4 FMADD throughput with ``k`` independent accumulation chains (each FMADD feeds its own
  operand 0 on the same PE), and FACC throughput with ``k`` accumulating slots;
* latency of a dependent pair on the same PE (INT and FP), and the pieces of a pair one hop
  apart: fire -> flit leaves the PE, flit enters the PE -> fire (plus the mesh's
  ``hops + 1`` cycles, :mod:`hw.noc.mesh`).

Results are written as JSON to ``FDPU_PE_BENCH_OUT``.
"""

import json
import os

import cocotb
from cocotb.triggers import RisingEdge

from sw.spec.isa import Dest, Instruction, Op
from tb.common.clock import start_clock
from tb.pe.harness import TB, make_rng, params_from_env, reset_pe

FULL = json.loads(os.environ.get("FDPU_PARAMS", "{}"))
ONE, TWO = 0x3C00, 0x4000


async def _fresh(dut):
    """Return a new :class:`tb.pe.harness.TB` (time stamps on) after a reset."""
    await reset_pe(dut)
    p, x, y, micc = params_from_env(FULL)
    return TB(dut, p, x, y, micc, make_rng(), stamps=True)


async def _cycles(dut, n):
    for _ in range(n):
        await RisingEdge(dut.clk)


def _rate(fires, pipe, window):
    lo, hi = window
    return sum(1 for c, p, _ in fires if lo <= c < hi and (pipe is None or p == pipe)) / (hi - lo)


async def _steady(b, warm=60, span=400):
    """Let configuration finish and the pipes fill; return a ``span``-cycle window."""
    while b.busy:
        await _cycles(b.dut, 1)
    await _cycles(b.dut, warm)
    start = b.cycle
    await _cycles(b.dut, span)
    return start, start + span


@cocotb.test()
async def microbenchmarks(dut):
    """Measure issue rates, FMADD/FACC throughput and dependent-pair latencies."""
    start_clock(dut.clk)
    p, x, y, _ = params_from_env(FULL)
    out = {}
    reg2 = (1 << 64) - 1 & (ONE * 0x0001_0001_0001_0001)

    # Issue rate: slots whose operands are all registers are always ready.
    for name, kinds in (("issue_int", ["int"]), ("issue_fp", ["fp"]),
                        ("issue_dual", ["int", "fp"])):
        b = await _fresh(dut)
        b.reg(0, 3)
        b.reg(1, reg2)
        slot = 0
        for kind in kinds:
            for _ in range(8):
                op = Op.ADD if kind == "int" else Op.FMUL
                regs = (0, 0, 0) if kind == "int" else (1, 1, 0)
                b.insn(slot, Instruction(op, nsrc=2, regmask=0b11, regs=regs))
                slot += 1
        win = await _steady(b)
        out[name] = {k: _rate(b.fires, k, win) for k in kinds}
        b.stop()

    # FMADD chains: slot i computes acc_i = a * b + acc_i, its result back to its operand 2.
    for k in (1, 2, 4, 6, 8, 12):
        b = await _fresh(dut)
        b.reg(1, reg2)
        # Configuration precedes the run (hw.pe.pe): every slot first, then the tokens that
        # start the chains (a slot configured while another runs may lose or add tokens).
        for i in range(k):
            b.insn(i, Instruction(Op.FMADD, nsrc=3, regmask=0b011, regs=(1, 1, 0),
                                  dests=(Dest(x, y, i, 2),)))
        for i in range(k):
            b.preload(i, 2, 0)
        win = await _steady(b)
        r = _rate(b.fires, "fp", win)
        out[f"fmadd_chains_{k}"] = {"fmadd_per_cycle": r, "flops_per_cycle": 8 * r}
        b.stop()
    # FACC slots: the accumulator lives in the PE; each slot waits for its previous step.
    for k in (1, 4, 6, 8):
        b = await _fresh(dut)
        b.reg(1, reg2)
        for i in range(k):
            b.insn(i, Instruction(Op.FACC, nsrc=2, regmask=0b11, regs=(1, 1, 0), imm=65535))
        win = await _steady(b)
        r = _rate(b.fires, "fp", win)
        out[f"facc_slots_{k}"] = {"facc_per_cycle": r, "flops_per_cycle": 8 * r}
        b.stop()

    # Dependent pairs on one PE: A -> B (B ENDs: its CTX_END leaves like a remote operand).
    for name, op, imm in (("pair_int", Op.ADD, 1), ("pair_fp", Op.FADD, ONE)):
        b = await _fresh(dut)
        b.insn(1, Instruction(op, nsrc=1, imm=imm, end=True))
        b.insn(0, Instruction(op, nsrc=1, imm=imm, dests=(Dest(x, y, 1, 0),)))
        while b.busy:
            await _cycles(dut, 1)
        await _cycles(dut, 5)
        n_in = len(b.ins)
        b.send(b.operand(0, 0, 1))
        await _cycles(dut, 60)
        t_in = b.ins[n_in]
        t_a, t_b = [c for c, _, _ in b.fires[-2:]]
        t_out = b.outs[-1]
        out[name] = {"flit_in_to_fire": t_a - t_in, "fire_to_dependent_fire": t_b - t_a,
                     "fire_to_flit_out": t_out - t_b,
                     "one_hop_pair": (t_out - t_b) + 2 + (t_a - t_in)}
        b.stop()
    dut._log.info(json.dumps(out, indent=1))
    path = os.environ.get("FDPU_PE_BENCH_OUT")
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
