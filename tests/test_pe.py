"""Tests of the processing element (:mod:`hw.pe.pe`): parameters, lint, and the cocotb bench
(:mod:`tb.pe`) on the generated Verilog with Icarus and Verilator.

The cocotb cases are images built by the golden-model toolchain (graph, placement, assembler)
and run on the golden interpreter; the bench compares the Dbufs after the run, the firings per
opcode and the context ends bit for bit.  Random parts print their seed; ``FDPU_SEED``
replays one.
"""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from hw.array import make_pe_array
from hw.pe.operands import OperandSelect
from hw.pe.pe import Pe, make_pe
from hw.pe.slot_state import SlotState
from hw.tooling.verilog import lint, to_verilog
from scriptutil import load_script
from sw.compiler import graphs, home_dbufs
from sw.models.golden import ContextOrderError, run_image
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import word_parts
from sw.spec.errors import FdpuError
from sw.spec import fp16
from sw.spec.isa import (Dest, Instruction, Op, Unit, decode, disassemble, encode, facc_imm,
                        loop_imm, mcast_selects)
from tb.host.runner import run_cocotb
from tb.pe import cases, counted_cases, mcast_cases, port_cases
from sw.spec.system import SIMULATORS

SEED = int(os.environ.get("FDPU_SEED", "20261130"))
SIMS = SIMULATORS


def test_parameters_are_checked():
    with pytest.raises(ValueError, match=r"PE coordinate \(2, 0\) is outside the 2x2 array"):
        Pe(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), x=2, y=0)
    with pytest.raises(ValueError, match="micc must be an"):
        Pe(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), micc=(5, 5))
    with pytest.raises(ValueError, match=r"pool must be a power of two from 2 to 1024"):
        Pe(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), pool=24)
    with pytest.raises(ValueError, match=r"banks must be 2 or 4 .* not 3"):
        Pe(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), banks=3)
    with pytest.raises(ValueError, match=r"at most slots \(2\), not 4"):
        Pe(ArrayParams(rows=2, cols=2, slots=2, operand_depth=4, int_issue=1), banks=4)
    with pytest.raises(ValueError, match="give both x and y"):
        Pe(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1), x=1)
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams"):
        Pe({"rows": 2})
    with pytest.raises(FdpuError, match="slots must be a power of two"):
        make_pe(slots=24, operand_depth=4, int_issue=1)
    with pytest.raises(TypeError, match=r"int_pipes must be \(0,\) or \(0, 2\), not \(1,\)"):
        SlotState(ArrayParams(slots=64, operand_depth=4, int_issue=1), (1,))
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams"):
        OperandSelect(None, 0)


@pytest.mark.parametrize("xy, int_issue", [((-1, -1), 1), ((1, 1), 1), ((-1, -1), 2)],
                         ids=["coord-port", "coord-const", "int-issue-2"])
def test_small_pe_lints_clean(xy, int_issue):
    # The registered default (8 x 8, 64 slots) is linted by tests/test_verilog_lint.py.
    pe = make_pe(rows=2, cols=3, slots=8, operand_depth=2, regs=4, dbuf_bytes=256,
                 x=xy[0], y=xy[1], micc_x=-1, micc_y=1, pool=4, int_issue=int_issue)
    assert ("i_coord" in pe.signature.members) == (xy[0] < 0)
    verilog = to_verilog(pe, "pe")
    assert lint(verilog, "pe") == []


@pytest.mark.parametrize("span, steps", [(2, 8), (1, 4), (3, 8)])
def test_span_case_stores_every_partial_sum(span, steps):
    # The golden model's partial sums of a FACC spanning two contexts against the definition:
    # acc from -0.0 at every even context, fma per step, stored every 2**span steps.
    p = cases.PARAMS_1X1
    image = cases.span_image(p, 8, SEED, span=span, steps=steps)
    mem = run_image(image).memory
    a = np.frombuffer(bytes(mem.read(0, 256)), dtype="<u8")
    b = np.frombuffer(bytes(mem.read(512, 64)), dtype="<u2")
    per = steps >> span
    acc, got, want = 0, [], []
    for c in range(8):
        acc = fp16.NEG_ZERO * 0x0001_0001_0001_0001 if c % 2 == 0 else acc
        for t in range(steps):
            i = (c * steps + t) & 31
            acc = int(fp16.simd4_fma(int(a[i]), int(b[i]) * 0x0001_0001_0001_0001, acc))
            if (t + 1) % (1 << span) == 0:
                at = p.dbuf_bytes + (c << (3 + (per - 1).bit_length())) + 8 * (t >> span)
                got.append(int.from_bytes(bytes(mem.read(at, 8)), "little"))
                want.append(acc)
    assert got == want and len(got) == 8 * per


def test_facc_span_is_checked():
    # A span only on a FACC counting its steps (no count operand), 0..15.
    Instruction(Op.FACC, nsrc=2, imm=facc_imm(64, 15)).check(ArrayParams())
    with pytest.raises(FdpuError, match="span"):
        Instruction(Op.FACC, nsrc=2, imm=loop_imm(64, 16)).check(ArrayParams())
    with pytest.raises(FdpuError, match="span"):
        Instruction(Op.FACC, nsrc=3, imm=loop_imm(0, 2)).check(ArrayParams())
    with pytest.raises(FdpuError, match="span"):
        facc_imm(64, 16)
    assert "every=4" in disassemble(Instruction(Op.FACC, nsrc=2, imm=facc_imm(64, 2)))


@pytest.mark.parametrize("position, fp", [(0, False), (1, False), (0, True), (1, True),
                                          (2, True)])
def test_registers_case_reads_every_register_where_it_shows(position, fp):
    # The case the benches run (golden_images): every register in one operand position, and
    # a wrong value in any register changes what the golden model stores.
    p = cases.PARAMS_1X1
    image = cases.registers_image(p, 4, SEED, position, fp)
    stored = run_image(image).memory
    for r in range(1 if position == 2 else 0, p.regs):
        other = cases.registers_image(p, 4, SEED, position, fp)
        other.regs[0, 0, r] ^= 0x0400_0400_0400_0400
        assert not np.array_equal(run_image(other).memory, stored), f"register {r}"
    with pytest.raises(ValueError, match="position"):
        cases.registers_image(p, 4, SEED, 3)


def test_bscan_case_stores_the_tokens_of_the_definition():
    # The BSCAN case's expected memory (the golden model's) against the ISA's formula, so the
    # RTL is compared with something that could be wrong independently of it.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    contexts = 8
    res = run_image(cases.bscan_image(p, contexts, SEED), seed=SEED, jitter=4)
    masks, bases = cases.bscan_tables(SEED)
    assert res.counters.ops["BSCAN"] == 3 * contexts
    for c in range(contexts):
        for count, offset in cases.BSCAN_COUNTS:
            d, o = p.dbuf_of(p.dbuf_bytes + 256 * c + offset)
            buf = bytes(res.memory.bufs[d])
            got = [int.from_bytes(buf[o + 4 * j:o + 4 * j + 4], "little") for j in range(count)]
            assert got == cases.bscan_reference(masks[c], bases[(c + 1) % 16], count), (c, count)
    # The reference itself on hand-checked values: mask 0b1011 from base 100.
    assert cases.bscan_reference(0b1011, 100, 5) == [102, 104, 0, 106, 0]
    assert cases.bscan_reference(0xFFFF_FFFF, 0xFFFF_FFFE, 2) == [0, 2]


def test_ldhbz_case_loads_the_values_of_the_definition():
    # The LDHBZ case on the golden model against the ISA's formula: the stored
    # tokens, and one request per non-zero address token (the RTL bench compares its request
    # count with the golden model's, so with this formula too).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    contexts = 8
    res = run_image(cases.ldhbz_image(p, contexts, SEED), seed=SEED, jitter=4)
    assert res.counters.ops["LDHBZ"] == 20 * contexts
    requests = skipped = 0
    for c in range(contexts):
        want, n = cases.ldhbz_reference(SEED, c)
        requests += n
        skipped += want.count(0)
        d, o = p.dbuf_of(p.dbuf_bytes + 256 * c)
        buf = bytes(res.memory.bufs[d])
        got = [int.from_bytes(buf[o + a:o + a + 8], "little")
               for a in [8 * j for j in range(16)] + [128 + 8 * j for j in range(4)]]
        assert got == want, c
    assert res.counters.mem_packets == 2 * requests
    # Both kinds of address token occur (the tables force 0, high bits only and a value).
    assert 0 < skipped < 20 * contexts
    # The far chain's first tokens: 0, then high bits only (both skipped).
    _, words, _ = cases.ldhbz_tables(SEED)
    assert words[0] == 0 and words[1] and not words[1] & 0xFFFF_FFFF


def test_fmax_case_stores_the_values_of_the_definition():
    # The FMAX case on the golden model against sw.spec.fp16.maximum: every stored byte.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p, contexts = cases.PARAMS_1X1, 16
    res = run_image(cases.fmax_image(p, contexts, SEED), seed=SEED, jitter=4)
    assert res.counters.ops["FMAX"] == 4 * contexts
    want = b"".join(data for _, data in sorted(cases.fmax_reference(p, SEED, contexts).items()))
    assert sorted(res.memory.bufs) == [0, 1]                      # tables, results
    assert bytes(res.memory.bufs[1]) == want.ljust(p.dbuf_bytes, b"\0")


@pytest.mark.parametrize("sim", SIMS)
def test_fmax_on_one_pe(sim, tmp_path):
    # FMAX (two tokens, ReLU with #0.0, after an FADD, a negative immediate) on the generated
    # Verilog of one PE: the Dbufs, firings per opcode and context ends equal the golden run.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    folder = cases.save_case(tmp_path / "fmax", cases.fmax_image(p, 16, SEED), "fmax",
                             seed=SEED)
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", sim, seed=SEED,
               testcase=["golden_images"], extra_env={"FDPU_PE_CASES": json.dumps([str(folder)]),
                                                      "FDPU_PE_STRESS": "0.3,0.5"})


def test_port_cases_meet_every_dispatcher_port_and_operand_memory():
    # tb.pe.port_cases by their instructions: each (dispatcher, port, operand k, bank b) the
    # write arbiters can see is met: INT (with and without the pipe-0 hint: both INT
    # dispatchers of a PE with two INT pipes) and memory lane 1 on all four ports into all
    # 12 memories, lane 0 on all four ports into the operand-0 memories, the FP dispatcher
    # (one port) into all 12; and SWITCHes whose taken branch has 2, 3 and 4 destinations,
    # whose third operand reads every register.
    p = cases.PARAMS_1X1
    met = set()
    ntrue, third = set(), set()
    for name, image in (port_cases.write_port_images(p, 2, SEED)
                        + port_cases.switch_images(p, 2, SEED)):
        for (_, _, s), insn in image.instructions().items():
            if insn.op is Op.SWITCH:
                ntrue.add((insn.ntrue, insn.pipe0))
                third.add((insn.regs[2], insn.pipe0))
            if insn.op.unit is Unit.MEM:
                kind = "lane1" if any(d.operand for d in insn.dests) else "lane0"
            elif insn.op.unit is Unit.FP:
                kind = "fp"
            else:
                kind = "int-p0" if insn.pipe0 else "int"
            for i, d in enumerate(insn.dests):
                met.add((kind, 0 if kind == "fp" else i, d.operand, d.slot % 4))
    mems = [(k, b) for k in range(3) for b in range(4)]
    want = {(kind, i, k, b) for kind in ("int", "int-p0", "lane1") for i in range(4)
            for k, b in mems}
    want |= {("lane0", i, 0, b) for i in range(4) for b in range(4)}
    want |= {("fp", 0, k, b) for k, b in mems}
    assert want <= met, sorted(want - met)
    assert {(n, h) for n in (2, 3, 4) for h in (False, True)} <= ntrue
    assert {(r, h) for r in range(p.regs) for h in (False, True)} <= third


def test_random_graphs_have_skipped_and_real_ldhbz():
    # The random graphs' LDHBZs meet both address 0 (no request) and table
    # addresses: over a few seeds, some fire and some fewer requests leave than memory ops.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    fired = skipped = 0
    for i in range(8):
        res = run_image(cases.random_image(p, 24, SEED + i), seed=SEED)
        ops = res.counters.ops
        fired += ops["LDHBZ"]
        skipped += sum(ops[op.name] for op in Op if op.is_load or op.is_store) \
            - res.counters.mem_packets // 2
    assert fired > skipped > 0, (fired, skipped)


def _stored(p, res):
    """Return Dbufs 1 and up after a golden run, as one byte string."""
    return b"".join(bytes(res.memory.bufs[d]) for d in range(1, p.num_dbufs))


def _expected(p, reference):
    want = bytearray(p.memory_bytes - p.dbuf_bytes)
    for addr, data in reference.items():
        want[addr - p.dbuf_bytes:addr - p.dbuf_bytes + len(data)] = data
    return bytes(want)


def test_emitters_case_stores_the_tokens_of_the_definition():
    # The token-count ITER and BPOS case on the golden model against the ISA's text
    # (counted_cases.emitters_reference): every stored byte, nothing else written, and the firings
    # the data imply (the sinks' emitters fire and emit nothing).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p, contexts = cases.PARAMS_1X1, 12
    t = counted_cases.counted_tables(SEED, contexts)
    res = run_image(counted_cases.emitters_image(p, contexts, SEED), seed=SEED, jitter=4)
    assert _stored(p, res) == _expected(p, counted_cases.emitters_reference(p, SEED, contexts))
    down = [bin(m & 0xFFFF_FFFF).count("1") for m in t["down"]]
    up = [bin(m & 0xF_FFFF).count("1") for m in t["up"]]
    ops = res.counters.ops
    assert ops["BPOS"] == 3 * contexts and ops["ITER"] == 2 * contexts
    assert ops["STW"] == sum(down) and ops["STH"] == 2 * sum(up)
    assert ops["FACC"] == sum(down) + sum(up)
    # The corners: one bit (bit 0, bit 31, bit 19), all bits, bits above the count ignored,
    # 20 tokens of the ITER, and sinks with no bit and count 0.
    low = [m & 0xFFFF_FFFF for m in t["down"]]
    assert {1, 1 << 31, 0xFFFF_FFFF} <= set(low) and 1 in down and 32 in down
    assert {1, 20} <= set(up) and any(m >> 20 & 0xFFF for m in t["up"])
    assert all(m & 0xFF == 0 and not m >> 32 & 0xFFFF for m in t["none"])


def test_counted_facc_case_sums_the_rows_of_the_definition():
    # The FACCs with a count operand on the golden model against the ISA's text
    # (counted_cases.counted_facc_reference), the count operand early and late, sums that
    # start from -0.0 and sums that go on from the previous context's (the continue bit).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p, contexts = cases.PARAMS_1X1, 12
    t = counted_cases.counted_tables(SEED, contexts)
    want = _expected(p, counted_cases.counted_facc_reference(p, SEED, contexts))
    for late_hops in (0, 3):
        res = run_image(counted_cases.counted_facc_image(p, contexts, SEED, late_hops), seed=SEED,
                        jitter=4)
        assert _stored(p, res) == want, late_hops
        assert res.counters.ops["FACC"] == 2 * sum(t["facc_counts"])
    assert {1, 6} <= set(t["facc_counts"]) and len(set(t["facc_counts"])) > 3
    assert any(t["continues"]) and not all(t["continues"][1:])


@pytest.mark.parametrize("nibble", [0, 5, 7])
def test_mcast_case_sums_the_rows_of_the_definition(nibble):
    # MCAST on the golden model against the ISA's text (mcast_cases.mcast_reference): each
    # input reaches the rows whose bits of the mask's nibble are set, in column order; a
    # column no row stores fires the MCAST and sends nothing.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p, contexts = cases.PARAMS_1X1, 12
    t = mcast_cases.mcast_tables(SEED, contexts, nibble)
    res = run_image(mcast_cases.mcast_image(p, contexts, SEED, nibble), seed=SEED, jitter=4)
    assert _stored(p, res) == _expected(p, mcast_cases.mcast_reference(p, SEED, contexts, nibble))
    ops = res.counters.ops
    assert ops["MCAST"] == sum(len(w) for w in t["row_bits"])
    assert ops["FACC"] == sum(bin(r).count("1") for rows in t["rows"] for r in rows)
    # Columns with no row (MCAST sends nothing) and the ignored fourth bit occur.
    sels = [w >> 4 * nibble & 0xF for ws in t["row_bits"] for w in ws]
    assert 0 in [s & 7 for s in sels] and 8 in sels


def test_mcast_is_checked_and_disassembled():
    p = cases.PARAMS_1X1
    dests = (Dest(0, 0, 1, 1), Dest(0, 0, 2, 1))
    insn = Instruction(Op.MCAST, 2, imm=7, dests=dests)
    insn.check(p)
    assert decode(encode(insn, p), p) == insn
    assert disassemble(insn) == "MCAST t0, t1, nibble=7 -> (0,0).1.1, (0,0).2.1"
    assert mcast_selects(insn, 0x3 << 28) == [0, 1] and mcast_selects(insn, 0x2 << 24) == []
    for bad, message in ((dict(imm=8), "nibble imm must be in 0..7"),
                         (dict(imm=-1), "nibble imm must be in 0..7"),
                         (dict(nsrc=1), "takes 2..2 operands")):
        kw = dict(op=Op.MCAST, nsrc=2, imm=0, dests=dests) | bad
        with pytest.raises(FdpuError, match=message):
            Instruction(**kw).check(p)


def _golden_cases(root, p):
    """Build the single-PE cases of ``p``: FC layers, Fig. 7, kernels, BSCAN, LDHBZ, the
    data-dependent instructions (emitters, counted FACC), every integer operation, every
    register in every operand position, random graphs, every dispatcher port into every
    operand memory and SWITCH branches of 2 to 4 destinations (:mod:`tb.pe.port_cases`)."""
    print(f"seed {SEED} (set FDPU_SEED to change)")
    built = [
        ("fc-sparse", cases.fc_image("sparse", 2, 32, 4, p, SEED, sparse_graph="switch")),
        ("fc-gather", cases.fc_image("sparse", 2, 32, 4, p, SEED + 2, sparse_graph="gather")),
        ("fc-dense", cases.fc_image("dense", 3, 32, 8, p, SEED + 1)),
        ("fig7", cases.fig7_image(p, 16)),
        ("kernels", cases.kernels_image(p, 8)),
        ("bscan", cases.bscan_image(p, 8, SEED)),
        ("ldhbz", cases.ldhbz_image(p, 8, SEED)),
        ("emitters", counted_cases.emitters_image(p, 12, SEED)),
        ("counted-facc", counted_cases.counted_facc_image(p, 12, SEED)),
        ("span", cases.span_image(p, 8, SEED)),
    ] + [(f"int-ops-{h}", cases.int_ops_image(p, 8, SEED, h)) for h in (0, 1)] + [
        (f"registers-{'fp' if fp else 'int'}-{k}", cases.registers_image(p, 8, SEED + k, k, fp))
        for k, fp in ((0, False), (1, False), (0, True), (1, True), (2, True))] + [
        (f"random-{SEED + i}", cases.random_image(p, 24, SEED + i)) for i in range(3)] + \
        port_cases.write_port_images(p, 8, SEED) + port_cases.switch_images(p, 8, SEED)
    return [str(cases.save_case(root / name, img, name)) for name, img in built]


@pytest.fixture(scope="module")
def golden_cases(tmp_path_factory):
    """The single-PE cases, built once."""
    return _golden_cases(tmp_path_factory.mktemp("pe-cases"), cases.PARAMS_1X1)


@pytest.mark.parametrize("sim", SIMS)
def test_golden_images_on_one_pe(sim, golden_cases):
    run_cocotb("pe", cases.top_params(cases.PARAMS_1X1), "tb.pe.bench_pe", sim,
               extra_env={"FDPU_PE_CASES": json.dumps(golden_cases)}, seed=SEED)


@pytest.mark.parametrize("sim", SIMS)
def test_counted_instructions_under_stress(sim, tmp_path):
    # ITER with a token count, BPOS, FACC with a count operand and MCAST over three data sets
    # each (the late FACC's count operand after 0, 3 or 7 MOVs; MCAST's mask in nibble 0, 5
    # or 7), 30 % input idle, 50 % output
    # backpressure, Dbuf latencies 2..60: bit-exact with the golden model; and the cocotb test
    # of a count operand of 0 (BAD_COUNT, no hang).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    built = []
    for i, (hops, nibble) in enumerate(((0, 0), (3, 5), (7, 7))):
        built += [(f"emitters-{SEED + i}", counted_cases.emitters_image(p, 12, SEED + i)),
                  (f"counted-facc-{SEED + i}-late{hops}",
                   counted_cases.counted_facc_image(p, 12, SEED + i, late_hops=hops)),
                  (f"mcast-{SEED + i}-nibble{nibble}",
                   mcast_cases.mcast_image(p, 12, SEED + i, nibble))]
    folders = [str(cases.save_case(tmp_path / name, img, name, seed=SEED))
               for name, img in built]
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", sim, seed=SEED,
               testcase=["golden_images", "facc_count_zero_is_an_error"],
               extra_env={"FDPU_PE_CASES": json.dumps(folders), "FDPU_PE_STRESS": "0.3,0.5",
                          "FDPU_PE_MEM_DELAY": "2,60"})


def _two_int_issues(sim, root):
    p = dataclasses.replace(cases.PARAMS_1X1, int_issue=2)
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", sim, seed=SEED,
               extra_env={"FDPU_PE_CASES": json.dumps(_golden_cases(root, p)),
                          "FDPU_PE_EXPECT_INT0": "1"})


def test_golden_images_on_one_pe_with_two_int_issues_icarus(tmp_path):
    # params.int_issue == 2: LD/ST and ITER slots on INT pipe 0, the other INT/CTRL slots on
    # pipe 2; the bench checks that pipe 0 fired every ITER and no other INT/CTRL op.
    _two_int_issues("icarus", tmp_path)


@pytest.mark.parametrize("banks", [4, 2])
def test_int_heavy_two_pipes_tiny_pool_under_backpressure_icarus(tmp_path, banks):
    # INT-heavy random graphs and the sparse FC engine (its address ITERs on pipe 0 beside
    # the loads, BSCAN/SWITCH on pipe 2) with a 4-entry pool, 30 % input idle and 50 % output
    # backpressure: bit-exact, no deadlock, loads sent as overflow entries, and pipe 0
    # carrying every ITER; with the default 4 operand banks and with 2.
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = dataclasses.replace(cases.PARAMS_1X1, int_issue=2)
    built = [("fc-sparse", cases.fc_image("sparse", 2, 32, 4, p, SEED + 7,
                                          sparse_graph="switch"))] + [
        (f"random-{SEED + 10 + i}", cases.random_image(p, 24, SEED + 10 + i)) for i in range(2)]
    folders = [str(cases.save_case(tmp_path / name, img, name)) for name, img in built]
    run_cocotb("pe", dict(cases.top_params(p), pool=4, banks=banks), "tb.pe.bench_pe", "icarus",
               seed=SEED,
               testcase="golden_images",
               extra_env={"FDPU_PE_CASES": json.dumps(folders), "FDPU_PE_STRESS": "0.3,0.5",
                          "FDPU_PE_EXPECT_OVF": "1", "FDPU_PE_EXPECT_INT0": "1"})


@pytest.mark.slow
def test_golden_images_on_one_pe_with_two_int_issues_verilator(tmp_path):
    _two_int_issues("verilator", tmp_path)


#: The single-PE cases with the most loads in flight, which fill a tiny pool.
LOAD_HEAVY = ("fc-gather", "fc-dense", "ldhbz", f"random-{SEED}")


@pytest.mark.parametrize("which", [
    "load-heavy", pytest.param("all", marks=pytest.mark.slow)])      # all: 85 s
def test_tiny_pool_overflow_under_backpressure_icarus(golden_cases, which):
    # A 4-entry reorder pool: at most 2 loads without room (overflow entries, reserving
    # their destinations when they retire), the other 2 kept for loads with room.  Under
    # 20 % input idle and 30 % output backpressure every case must finish bit-exact (no
    # deadlock), and some loads must have taken the overflow path.
    chosen = [c for c in golden_cases if which == "all" or Path(c).name in LOAD_HEAVY]
    assert which == "all" or len(chosen) == len(LOAD_HEAVY)
    run_cocotb("pe", dict(cases.top_params(cases.PARAMS_1X1), pool=4), "tb.pe.bench_pe",
               "icarus",
               extra_env={"FDPU_PE_CASES": json.dumps(chosen), "FDPU_PE_EXPECT_OVF": "1"},
               seed=SEED, testcase="golden_images")


def test_fig7_hazard_is_real_without_the_feedback_edge(tmp_path):
    # The golden model's delivery-order randomizer predicts the hazard: without the feedback
    # edge some order lets a short-branch context overtake a long-branch one at the join.
    p = cases.PARAMS_1X1
    bad = cases.fig7_image(p, 16, feedback=False)
    seeds = []
    for s in range(SEED, SEED + 8):
        try:
            run_image(bad, seed=s)
        except ContextOrderError as exc:
            seeds.append((s, str(exc)))
    assert seeds, "the randomizer found no misordering order for Fig. 7 without feedback"
    print(f"golden seed {seeds[0][0]}: {seeds[0][1]}")
    # The RTL, where the short branch really is faster, stores the values at the wrong
    # addresses (a permutation of the right ones); the same graph with the edge is exact.
    good = cases.fig7_image(p, 16, feedback=True)
    folder = cases.save_case(tmp_path / "fig7-hazard", good, "fig7-hazard")
    cases.swap_image(folder, bad, hazard=True)
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", "icarus",
               extra_env={"FDPU_PE_CASES": json.dumps([str(folder)])}, seed=SEED,
               testcase="golden_images")


@pytest.mark.slow
@pytest.mark.parametrize("sim", SIMS)
def test_random_graphs_many_contexts(sim, tmp_path):
    print(f"seed {SEED} (set FDPU_SEED to change)")
    p = cases.PARAMS_1X1
    folders = [str(cases.save_case(tmp_path / f"r{i}", cases.random_image(p, 90, SEED + i),
                                   f"random-{SEED + i}")) for i in range(20)]
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", sim,
               extra_env={"FDPU_PE_CASES": json.dumps(folders)}, seed=SEED,
               testcase="golden_images", timeout_s=3600)


@pytest.mark.slow
def test_microbenchmarks_run(tmp_path):
    # The figures are printed by scripts/bench_pe.py and quoted in docs/pe.md; here only
    # that the bench runs and measures something sane.
    out = tmp_path / "bench.json"
    run_cocotb("pe", cases.top_params(cases.PARAMS_1X1), "tb.pe.bench_micro", "icarus",
               extra_env={"FDPU_PE_BENCH_OUT": str(out)})
    res = json.loads(out.read_text())
    print(json.dumps(res, indent=1))
    assert 0 < res["issue_dual"]["fp"] <= 1 and 0 < res["issue_dual"]["int"] <= 1


def _array_cases(root):
    p = cases.PARAMS_2X2
    built = [(f"array-random-{SEED}", cases.random_image(p, 12, SEED, pes=p.pe_coords())),
             ("array-fc-dense", cases.fc_image("dense", 4, 32, 4, p, SEED))]
    return [str(cases.save_case(root / name, img, name)) for name, img in built]


def _run_array(sim, root):
    cfg = cases.array_params(cases.PARAMS_2X2)
    run_cocotb(make_pe_array(**cfg), {}, "tb.array.bench_array", sim, name="pe_array", seed=SEED,
               extra_env={"FDPU_PE_CASES": json.dumps(_array_cases(root)),
                          "FDPU_PE_ARRAY": json.dumps(cfg)}, timeout_s=1800)


def test_golden_images_on_a_2x2_array_icarus(tmp_path):
    # Four PEs on the request/reply mesh: a random graph spread over all of them (operand
    # flits between PEs) and a dense FC layer (one engine per PE, loads to every Dbuf).
    print(f"seed {SEED} (set FDPU_SEED to change)")
    _run_array("icarus", tmp_path)


@pytest.mark.slow
def test_golden_images_on_a_2x2_array_verilator(tmp_path):
    # The Verilator build of four PEs and the mesh takes minutes: slow-marked.
    _run_array("verilator", tmp_path)


@pytest.mark.slow
def test_diag_array_probe_with_end_join_icarus(tmp_path):
    """scripts/diag_array.py end to end on a 2 x 2 (Icarus): the straight homes and the END
    join keep the layer bit-exact, the FACC-counter probe sees every PE's FACCs, and the
    module's monkeypatches are undone afterwards."""
    diag = load_script("diag_array")
    before = (home_dbufs.engine_homes, graphs.build_engine)
    out = tmp_path / "diag.json"
    status = diag.main(["--rows", "2", "--cols", "2", "--in-features", "32", "--out-features",
                        "12", "--batch", "8", "--slots", "128", "--homes", "straight",
                        "--end-join", "--run", "icarus", "--probe", "8", "--json", str(out)])
    assert status == 0
    assert (home_dbufs.engine_homes, graphs.build_engine) == before
    fig = json.loads(out.read_text())
    assert fig["run"]["match"]
    b = fig["breakdown"]
    assert len(b["facc"]) == 4 and min(b["facc"]) > 0
    assert all(0 < r <= 1.0 + 8 / f for r, f in zip(b["rate"], b["facc"]))
    assert max(b["last"]) <= fig["run"]["context_cycles"]


def _with_pipe0(image, ops):
    """Return a copy of ``image`` whose slots of opcodes ``ops`` carry the pipe0 hint."""
    img = dataclasses.replace(image, program=image.program.copy())
    parts = word_parts(img.params)
    for (x, y, s), insn in image.instructions().items():
        if insn.op in ops:
            word = encode(dataclasses.replace(insn, pipe0=True), img.params)
            for i in range(parts):
                img.program[y, x, s, i] = (word >> (64 * i)) & ((1 << 64) - 1)
    return img


@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_pipe0_hint_moves_int_slots_to_pipe_0(sim, tmp_path):
    # The pipe0 hint with int_issue == 2: the kernels image as is (pipe 0 fires only its
    # loads, stores and ITERs) and with MOV, SHL and SCAN hinted (pipe 0 fires every one of
    # them too, SCAN's per-slot state included); both bit-exact with the golden model, whose
    # firings per opcode the bench compares.  Verilator is slow-marked: its build of the
    # int_issue 2 PE takes ~4 min here (shared with the two-int-issue Verilator test).
    # A random graph and the register chains with every INT/CTRL slot hinted: pipe 0 fires
    # each of their operations (its ALU's every opcode, SWITCH and BSCAN included).
    p = dataclasses.replace(cases.PARAMS_1X1, int_issue=2)
    plain = cases.kernels_image(p, 6)
    hinted_ops = (Op.MOV, Op.SHL, Op.SCAN)
    hinted = _with_pipe0(plain, hinted_ops)
    assert sum(i.pipe0 for i in hinted.instructions().values()) >= 5
    int_ops = [op for op in Op if op.unit in (Unit.INT, Unit.CTRL)]
    every = [(f"random-{SEED + 20 + i}-pipe0", cases.random_image(p, 24, SEED + 20 + i))
             for i in range(2)]
    every += [(f"registers-{k}-pipe0", cases.registers_image(p, 6, SEED + k, k)) for k in (0, 1)]
    every += [(f"int-ops-{h}-pipe0", cases.int_ops_image(p, 6, SEED, h)) for h in (0, 1)]
    every = [(name, _with_pipe0(image, int_ops)) for name, image in every]
    folders = [str(cases.save_case(tmp_path / name, img, name))
               for name, img in [("kernels", plain), ("kernels-pipe0", hinted), *every]]
    out = tmp_path / "results.json"
    run_cocotb("pe", cases.top_params(p), "tb.pe.bench_pe", sim, seed=SEED,
               testcase="golden_images",
               extra_env={"FDPU_PE_CASES": json.dumps(folders), "FDPU_PE_RESULTS": str(out)})
    res = {r["name"]: r for r in json.loads(out.read_text())}
    ops = res["kernels"]["ops"]
    assert res["kernels"]["int0"] == {"ITER": ops["ITER"]}
    assert res["kernels-pipe0"]["ops"] == ops
    want = {"ITER": ops["ITER"], **{op.name: ops[op.name] for op in hinted_ops}}
    assert res["kernels-pipe0"]["int0"] == want
    for name, _ in every:
        fired = res[name]["ops"]
        assert res[name]["int0"] == {op: n for op, n in fired.items()
                                     if Op[op].unit in (Unit.INT, Unit.CTRL)}, name
