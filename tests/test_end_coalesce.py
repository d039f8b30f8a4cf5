"""Tests of CTX_END coalescing: :class:`hw.pe.dispatch.ReplyPort` in amaranth.sim
(random CTX_END and OPERAND flits from several dispatchers, random backpressure on ``o_rep``)
and the whole PE under backpressure on Icarus and Verilator (``tb.pe.bench_end_coalesce``:
fewer CTX_END flits, counts summing to the golden model's END messages).  Random parts print
their seed; ``FDPU_SEED`` replays one.
"""

import json
import os
import random
from collections import Counter

import pytest
from amaranth.sim import Simulator

from hw.pe.dispatch import ReplyPort
from sw.spec.arch import ArrayParams
from sw.spec.packet import Kind, body_layout, flit_layout, pack_flit
from tb.host.runner import run_cocotb
from tb.pe import cases
from sw.spec.system import SIMULATORS

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

SEED = int(os.environ.get("FDPU_SEED", "20261130"))
SIMS = SIMULATORS
P = ArrayParams(rows=2, cols=2, slots=8, operand_depth=2, regs=4, dbuf_bytes=256, int_issue=1)
MICC = (-1, 0)


def test_reply_port_parameters_are_checked():
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams"):
        ReplyPort({"rows": 2}, MICC, 2)
    with pytest.raises(ValueError, match="ports must be a positive integer, not 0"):
        ReplyPort(P, MICC, 0)
    with pytest.raises(ValueError, match="depth must be a positive integer, not True"):
        ReplyPort(P, MICC, 2, depth=True)
    with pytest.raises(ValueError, match="hold must be an integer from 0 to 255, not 256"):
        ReplyPort(P, MICC, 2, hold=256)


def test_ctx_end_count_field_fits_every_flit():
    # The count rides in bits no CTX_END used (the flit is as wide as a STORE).
    for p in (P, ArrayParams(rows=1, cols=1, slots=4, regs=4, operand_depth=4,
                             int_issue=1), ArrayParams(slots=64, operand_depth=4, int_issue=1)):
        fields = [f.name for f in flit_layout(Kind.CTX_END, p).fields]
        assert fields[-2:] == ["data", "count"]
        assert body_layout(Kind.CTX_END, p).width <= body_layout(Kind.STORE, p).width


def _operand_word(rng, tag):
    dst = (rng.randrange(2), rng.randrange(2))
    return pack_flit(P, Kind.OPERAND, dst, slot=rng.randrange(P.slots),
                     operand=rng.randrange(3), data=tag)


def _end_word(ctx):
    return pack_flit(P, Kind.CTX_END, (-1, 0), data=ctx, count=1)


@pytest.mark.parametrize("ports, backpressure, hold", [(1, 0.0, 0), (3, 0.5, 0), (5, 0.8, 0),
                                                       (1, 0.0, 16), (5, 0.3, 16)])
def test_reply_port_merges_ends_never_loses_or_reorders(ports, backpressure, hold):
    """Every END message arrives (counts summed per context), each dispatcher's flits keep
    their order (an END never overtakes an earlier OPERAND of its dispatcher), offered flits
    stay stable, and blocking ``o_rep`` merges ENDs."""
    seed = SEED + 17 * ports
    print(f"seed {seed} (set FDPU_SEED to change)")
    rng = random.Random(seed)
    dut = ReplyPort(P, MICC, ports, hold=hold)
    # Per dispatcher: a script of flits, ENDs of contexts in increasing order (as a PE's
    # slots send them), OPERANDs tagged (port, index).
    scripts = []
    for j in range(ports):
        words, ctx = [], 0
        for i in range(60):
            if rng.random() < 0.5:
                words.append(("end", ctx, _end_word(ctx)))
                if rng.random() < 0.3:
                    ctx += 1
            else:
                words.append(("op", (j << 16) | i, _operand_word(rng, (j << 16) | i)))
        scripts.append(words)
    want = Counter(c for s in scripts for k, c, _ in s if k == "end")
    n_ops = sum(1 for s in scripts for k, _, _ in s if k == "op")
    got, log = Counter(), {"flits": 0, "ops": []}
    end_lay, op_lay = flit_layout(Kind.CTX_END, P), flit_layout(Kind.OPERAND, P)

    async def bench(ctx):
        pos = [0] * ports
        held = None                         # (word) offered and not taken last cycle
        for cycle in range(20_000):
            for j in range(ports):
                live = pos[j] < len(scripts[j]) and (rng.random() < 0.8)
                ctx.set(dut.i_flit[j].valid, live)
                if pos[j] < len(scripts[j]):
                    ctx.set(dut.i_flit[j].payload.as_value(), scripts[j][pos[j]][2])
            ready = rng.random() >= backpressure
            ctx.set(dut.o_rep.ready, ready)
            taken = [ctx.get(dut.i_flit[j].valid) and ctx.get(dut.i_flit[j].ready)
                     for j in range(ports)]
            valid = ctx.get(dut.o_rep.valid)
            word = ctx.get(dut.o_rep.payload.as_value())
            if held is not None:
                assert valid and word == held, f"cycle {cycle}: an offered flit changed"
            if valid and ready:
                held = None
                kind = Kind(word & 7)
                log["flits"] += 1
                if kind is Kind.CTX_END:
                    f = end_lay.unpack(word)
                    assert (f["dst_x"], f["dst_y"]) == (0, 1) and f["count"] >= 1
                    got[f["data"]] += f["count"]
                    # No END may overtake an OPERAND of any dispatcher that came before it.
                    log.setdefault("ends_at", []).append((len(log["ops"]), f["data"]))
                else:
                    log["ops"].append(op_lay.unpack(word)["data"])
            elif valid:
                held = word
            for j in range(ports):
                if taken[j]:
                    pos[j] += 1
            await ctx.tick()
            if all(pos[j] == len(scripts[j]) for j in range(ports)) and \
                    sum(got.values()) == sum(want.values()) and len(log["ops"]) == n_ops:
                break
        else:
            raise AssertionError(f"timeout: deadlock: dispatchers at {pos} of "
                                 f"{[len(s) for s in scripts]}, ENDs {dict(got)} of "
                                 f"{dict(want)}, {len(log['ops'])} of {n_ops} OPERANDs")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
    for j in range(ports):                  # OPERANDs of one dispatcher in order
        mine = [t for t in log["ops"] if t >> 16 == j]
        assert mine == sorted(mine)
    # An END leaves after every OPERAND its dispatcher sent before it.
    for j in range(ports):
        seen_ops = 0
        for kind, value, _ in scripts[j]:
            if kind == "op":
                seen_ops += 1
            else:
                before = [t for t in log["ops"] if t >> 16 == j][:seen_ops]
                last = log["ops"].index(before[-1]) + 1 if before else 0
                # the context's last END flit left after that OPERAND
                assert any(pos_ >= last and c == value for pos_, c in log["ends_at"]), \
                    f"port {j}: an END of context {value} overtook an earlier OPERAND"
    n_ends = sum(want.values())
    print(f"{n_ends} END messages in {log['flits'] - n_ops} CTX_END flits")
    if backpressure >= 0.5 or hold:
        assert log["flits"] - n_ops < n_ends, "nothing coalesced"


@pytest.fixture(scope="module")
def end_cases(tmp_path_factory):
    """Single-PE cases with several END stores per context: a dense FC pass and random graphs."""
    print(f"seed {SEED} (set FDPU_SEED to change)")
    root, p = tmp_path_factory.mktemp("end-cases"), cases.PARAMS_1X1
    built = [("fc-dense", cases.fc_image("dense", 3, 32, 8, p, SEED + 1)),
             (f"random-{SEED}", cases.random_image(p, 24, SEED))]
    return [str(cases.save_case(root / name, img, name)) for name, img in built]


@pytest.mark.parametrize("sim", SIMS)
def test_pe_coalesces_ends_under_backpressure(sim, end_cases):
    run_cocotb("pe", cases.top_params(cases.PARAMS_1X1), "tb.pe.bench_end_coalesce", sim,
               extra_env={"FDPU_PE_CASES": json.dumps(end_cases)}, seed=SEED)
