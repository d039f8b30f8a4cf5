"""Tests of the PE's operand store (:mod:`hw.pe.operand_store`) in amaranth.sim against a
Python model of its FIFOs: random mesh tokens, reservations and their local writes, reads and
pops, idle cycles and slot clears.  The store inside the PE runs on both simulators in
``tests/test_pe.py``; the seed is printed and ``FDPU_SEED`` replays one."""

import os
import random

from amaranth.sim import Simulator
import pytest

from hw.pe.operand_store import OperandStore
from hw.tooling.verilog import lint, to_verilog
from sw.spec.arch import ArrayParams
from sw.spec.status import PeError

SEED = int(os.environ.get("FDPU_SEED", "20261202"))
PARAMS = ArrayParams(rows=2, cols=2, slots=8, operand_depth=2, regs=4, dbuf_bytes=256, int_issue=1)
UNKNOWN = 7                                    # the one slot without an opcode


def test_parameters_are_checked():
    with pytest.raises(TypeError, match="banks must be 2 or 4 and at most slots, not 3"):
        OperandStore(PARAMS, 3, 1, 1, 1, 2)
    with pytest.raises(TypeError, match="groups must be a positive integer, not 0"):
        OperandStore(PARAMS, 2, 1, 1, 0, 1)
    with pytest.raises(TypeError, match="groups \\* dests must be at least 2 .* not 1"):
        OperandStore(PARAMS, 2, 1, 1, 1, 1)
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams"):
        OperandStore({"slots": 8}, 2, 1, 1, 1, 2)


@pytest.mark.parametrize("banks", [2, 4])
def test_verilog_lints_clean(banks):
    store = OperandStore(PARAMS, banks, 2, 2, 3, 2)
    assert lint(to_verilog(store, "operand_store"), "operand_store") == []
    assert store.RAISES[:2] == (PeError.UNKNOWN_OPCODE, PeError.OVERFLOW)


@pytest.mark.parametrize("banks", [2, 4])
def test_random_traffic_matches_the_fifo_model(banks):
    seed = SEED + banks
    print(f"seed {seed} (FDPU_SEED={SEED})")
    rng = random.Random(seed)
    S, D, K = PARAMS.slots, PARAMS.operand_depth, PARAMS.MAX_OPERANDS
    groups, dests = 2, 2
    dut = OperandStore(PARAMS, banks, 1, 1, groups, dests)
    fifo = {(s, k): [] for s in range(S) for k in range(K)}
    pending = []                               # reserved, not yet written: (slot, k, data)
    counts = {"net": 0, "local": 0, "pop": 0, "full": 0, "clash": 0, "clear": 0}

    def occupancy(key):
        return len(fifo[key]) + sum((s, k) == key for s, k, _ in pending)

    async def bench(ctx):
        ctx.set(dut.i_known, ((1 << S) - 1) & ~(1 << UNKNOWN))
        s1, s1_ops = None, []                  # the slot picked last cycle, its tokens
        for cycle in range(2000):
            where = f"cycle {cycle} (seed {seed})"
            for k in range(K):
                got = ctx.get(dut.o_nonempty[k])
                want = sum(1 << s for s in range(S) if fifo[(s, k)])
                assert got == want, f"{where}: non-empty of operand {k} {got:#x}, not {want:#x}"
            # S1: the heads of the slot picked last cycle, and some pops.
            ops = 0
            ctx.set(dut.i_read[0].s1, s1 or 0)
            for k in s1_ops:
                token = ctx.get(dut.o_token[0][k])
                assert token == fifo[(s1, k)][0], f"{where}: head of ({s1}, {k})"
                if rng.random() < 0.6:
                    ops |= 1 << k
            ctx.set(dut.i_consume[0].slot, s1 or 0)
            ctx.set(dut.i_consume[0].ops, ops)
            # A clear precedes a run: nothing else happens in its cycle, and no reservation
            # of the slot is outstanding.
            free = [s for s in range(S) if all(e[0] != s for e in pending)]
            clear = s1 is None and free and rng.random() < 0.05
            idle = clear or rng.random() < 0.1
            net = None
            if not idle and rng.random() < 0.4:
                net = (rng.randrange(S), rng.choice([0, 1, 2, 2, 3]), rng.getrandbits(64))
            ctx.set(dut.i_net.valid, net is not None)
            if net:
                ctx.set(dut.i_net.tok.slot, net[0])
                ctx.set(dut.i_net.tok.operand, net[1])
                ctx.set(dut.i_net.tok.data, net[2])
            local = pending[0] if pending and not idle and rng.random() < 0.7 else None
            ctx.set(dut.i_local[0].valid, local is not None)
            if local:
                ctx.set(dut.i_local[0].payload.slot, local[0])
                ctx.set(dut.i_local[0].payload.operand, local[1])
                ctx.set(dut.i_local[0].payload.data, local[2])
            ctx.set(dut.i_clear.valid, clear)
            cleared = rng.choice(free) if free else 0
            ctx.set(dut.i_clear.slot, cleared)
            ctx.set(dut.i_clear.hot, 1 << cleared)
            # Reservations, group by group: room, then maybe take it.
            taken = []
            for g in range(groups):
                keys = rng.sample([(s, k) for s in range(S - 1) for k in range(K)], dests)
                wants = [not idle and rng.random() < 0.5 for _ in keys]
                for entry, (s, k), want in zip(dut.i_resv[g], keys, wants):
                    ctx.set(entry.slot, s)
                    ctx.set(entry.operand, k)
                    ctx.set(entry.local, want)
                    ctx.set(entry.take, 0)
                clash = [net is not None and net[:2] == key or key in taken for key in keys]
                room = all(not w or (occupancy(key) < D and not c)
                           for key, w, c in zip(keys, wants, clash))
                assert ctx.get(dut.o_room[g]) == room, f"{where}: room of group {g}"
                counts["full"] += any(w and occupancy(key) >= D for key, w in zip(keys, wants))
                counts["clash"] += any(w and c for w, c in zip(wants, clash))
                if room and any(wants) and rng.random() < 0.7:
                    for entry, key, want in zip(dut.i_resv[g], keys, wants):
                        if want:
                            ctx.set(entry.take, 1)
                            taken.append(key)
            # S0: pick a slot with a token (not the one in S1); its heads are read.
            ready = [s for s in range(S) if s != s1 and any(fifo[(s, k)] for k in range(K))]
            pick = rng.choice(ready) if ready and rng.random() < 0.8 else None
            pick_ops = [k for k in range(K) if pick is not None and fifo[(pick, k)]]
            ctx.set(dut.i_read[0].pick, pick or 0)
            # The expected writes of this cycle.
            net_known = net is not None and net[0] != UNKNOWN
            net_ok = net_known and net[1] < K and occupancy(net[:2]) < D
            assert ctx.get(dut.o_raise[0].valid) == (net is not None and not net_known), where
            assert ctx.get(dut.o_raise[1].valid) == (net_known and not net_ok), where
            assert not any(ctx.get(r.valid) for r in dut.o_raise[2:]), where
            blocked = (local is not None and net is not None and net[1] == local[1]
                       and net[0] % banks == local[0] % banks)
            if local:
                assert ctx.get(dut.i_local[0].ready) == (not blocked), f"{where}: local ready"
            await ctx.tick()
            # The model after the clock edge.
            if net_ok:
                fifo[net[:2]].append(net[2])
                counts["net"] += 1
            if local and not blocked:
                pending.pop(0)
                fifo[local[:2]].append(local[2])
                counts["local"] += 1
            for k in range(K):
                if ops >> k & 1:
                    fifo[(s1, k)].pop(0)
                    counts["pop"] += 1
            pending.extend((s, k, rng.getrandbits(64)) for s, k in taken)
            if clear:
                for k in range(K):
                    fifo[(cleared, k)].clear()
                counts["clear"] += 1
            s1, s1_ops = pick, [k for k in pick_ops if fifo[(pick, k)]]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    print(counts)
    assert all(counts.values()), f"a path was never exercised: {counts}"
