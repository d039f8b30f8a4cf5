"""The DMA (hw.ctrl.dma) and the external memory model (tb.host.extmem): parameters, lint, and the
cocotb bench of tb.dma on both simulators (random descriptor lists, latencies, bandwidths,
memory stalls and mesh backpressure against a Python model; bad descriptors end in BAD_DESC).
"""

import json
import os
import random

import pytest
from amaranth.sim import Simulator

from hw.ctrl.dma import Dma, build_dma
from hw.noc.flit import FlitKind, body_view
from hw.tooling.verilog import lint, to_verilog
from sw.models.noc import DbufModel
from sw.spec.arch import ArrayParams
from sw.spec.dma import DescFlag, copy_targets, edge_targets, pack_descriptor, written_dbufs
from sw.spec.packet import Kind, flit_fields
from sw.spec.status import DmaError
from tb.dma.rig import make_dma_rig
from tb.host.extmem import ExtMem
from tb.host.runner import run_cocotb
from sw.spec.system import SIMULATORS

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

RIG = dict(rows=1, cols=2, dbuf_bytes=1024, cbufs=2, cbuf_bytes=512, ext_bytes=1 << 14)


@pytest.mark.parametrize("build, error, message", [
    (lambda: Dma(ArrayParams(rows=1, cols=1, slots=64, operand_depth=4, int_issue=1), coord=(0,
                             0)), ValueError,
     r"coord must be an edge port coordinate of the array, not \(0, 0\)"),
    (lambda: Dma(ArrayParams(rows=1, cols=1, slots=64, operand_depth=4,
                             int_issue=1), outstanding=3), TypeError,
     "outstanding must be a power of two >= 2, not 3"),
    (lambda: Dma("p"), TypeError, "params must be an sw.spec.arch.ArrayParams, not 'p'"),
    (lambda: ExtMem(1000), TypeError, "nbytes must be a power of two >= 16, not 1000"),
    (lambda: ExtMem(1 << 12, depth=1), TypeError, "depth must be a power of two >= 2, not 1"),
])
def test_bad_parameters(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_dma_lints_clean():
    assert lint(to_verilog(build_dma(rows=2, cols=3, cbufs=2), "dma"), "dma") == []


@pytest.mark.parametrize("sim", SIMULATORS)
def test_dma_random_jobs_and_bad_descriptors(sim):
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    run_cocotb(make_dma_rig(**RIG), {}, "tb.dma.bench_dma", sim, name="dma_rig", seed=seed,
               extra_env={"FDPU_DMA_RIG": json.dumps(RIG),
                          "FDPU_DMA_JOBS": "6" if sim == "icarus" else "12"})


async def _start_one(ctx, dma):
    """Start ``dma`` on a one-descriptor list at external address 0x100, both external ports
    ready; return after the start cycle."""
    ctx.set(dma.i_list, 0x100)
    ctx.set(dma.i_count, 1)
    ctx.set(dma.i_start, 1)
    ctx.set(dma.o_ext_rd.ready, 1)
    ctx.set(dma.o_ext_wr.ready, 1)
    await ctx.tick()
    ctx.set(dma.i_start, 0)


def _sim_one_descriptor(dma, words, cycles=60, ready=lambda cycle: True):
    """Run ``dma`` (amaranth.sim) on a one-descriptor list at external address 0x100 (``words``:
    external address -> word; the mesh takes a request in the cycles where ``ready``); return
    halt, done, error, reqs (cycles with a request), rd (external reads), sent (the requests
    taken, as ``(dst_x, dst_y, addr, data)``) and sent_at (their cycles)."""
    out = {}
    body = body_view(dma.o_req.payload, FlitKind.STORE, dma.params)

    async def bench(ctx):
        await _start_one(ctx, dma)
        pending, reqs, rd, sent, sent_at = [], 0, 0, [], []
        for cycle in range(cycles):
            ctx.set(dma.o_req.ready, ready(cycle))
            if ctx.get(dma.o_ext_rd.valid):
                pending.append(words.get(ctx.get(dma.o_ext_rd.payload), 0))
                rd += 1
            ctx.set(dma.i_ext_rdata.valid, bool(pending))
            ctx.set(dma.i_ext_rdata.payload, pending[0] if pending else 0)
            if pending and ctx.get(dma.i_ext_rdata.ready):
                pending.pop(0)
            reqs += ctx.get(dma.o_req.valid)
            if ctx.get(dma.o_req.valid) and ctx.get(dma.o_req.ready):
                sent.append((ctx.get(dma.o_req.payload.dst_x), ctx.get(dma.o_req.payload.dst_y),
                             ctx.get(body.addr), ctx.get(body.data)))
                sent_at.append(cycle)
            await ctx.tick()
        out.update(halt=ctx.get(dma.o_halt), done=ctx.get(dma.o_done),
                   error=ctx.get(dma.o_error), reqs=reqs, rd=rd, sent=sent, sent_at=sent_at)

    sim = Simulator(dma)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_cbuf_descriptor_on_a_channel_without_cbufs_is_bad():
    # The extra DMA channels of a multi-channel top have no Cbuf port: BAD_DESC, no hang.
    p = ArrayParams(rows=1, cols=1, dbuf_bytes=1024, slots=64, operand_depth=4, int_issue=1)
    cbuf = {0x100: 0, 0x108: pack_descriptor(0, 0, 16, DescFlag.CBUF)[1]}   # into Cbuf 0
    got = _sim_one_descriptor(Dma(p, coord=(1, 0), cbuf=False), cbuf)
    assert got["halt"] and not got["done"] and got["error"] == 1 << DmaError.BAD_DESC, got
    assert _sim_one_descriptor(Dma(p, coord=(1, 0)), cbuf)["done"]
    # A Dbuf descriptor of all-zero words (external 0 -> Dbuf 0) runs on any channel.
    dbuf = {0x100: 0, 0x108: 16}
    got = _sim_one_descriptor(Dma(p, coord=(1, 0), cbuf=False), dbuf)
    assert got["reqs"] == 2, got           # (then it waits for the acks no Dbuf sends here)


@pytest.mark.parametrize("first, copies", [(0, (1 << 9) - 1), (2, 0b101), (9, 0)])
def test_multicast_stores_each_word_to_each_target_in_order(first, copies):
    # Each word is read once and stored to copy_targets(first, copies) in order, at its offset
    # within each; with the mesh always ready, one STORE a cycle and no bubble between words.
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    rng = random.Random(seed)
    p = ArrayParams(rows=2, cols=3, dbuf_bytes=256, slots=64, operand_depth=4, int_issue=1)
    off, n = 8 * rng.randrange(24), 5
    data = [rng.getrandbits(64) for _ in range(n)]
    words = {0x100: 0x1000 | (p.dbuf_base(first) + off) << 32,
             0x108: pack_descriptor(0, 0, 8 * n, copies=copies)[1],
             **{0x1000 + 8 * i: w for i, w in enumerate(data)}}
    targets = copy_targets(first, copies)
    want = [(p.dbuf_coord(k)[0] + 1, p.dbuf_coord(k)[1] + 1, p.dbuf_base(k) + off + 8 * i, w)
            for i, w in enumerate(data) for k in targets]
    for name, ready in [("always ready", lambda c: True),
                        ("backpressure", lambda c: rng.random() < 0.5)]:
        got = _sim_one_descriptor(Dma(p), words, cycles=160, ready=ready)
        assert got["sent"] == want, (name, got["sent"])
        assert got["rd"] == 2 + n and not got["error"], (name, got)
        if name == "always ready":
            at = got["sent_at"]
            assert got["reqs"] == len(want) and at == list(range(at[0], at[0] + len(at))), got


def test_move_loads_its_source_and_stores_each_word_to_each_target():
    # A MOVE (amaranth.sim, Dbuf models answering after a few cycles): LOADs with tag 1 to the
    # source Dbuf in address order, each reply's word stored to copy_targets in order at its
    # offset, a STORE sent before the remaining LOADs, no external byte but the descriptor's,
    # and the external read port not ready in a cycle where a MOVE reply arrives.
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    rng = random.Random(seed)
    p = ArrayParams(rows=1, cols=1, dbuf_bytes=256, slots=64, operand_depth=4, int_issue=1)
    src, first, copies, n = 3, 0, 0b11, 8
    soff, doff = 8 * rng.randrange(24), 8 * rng.randrange(24)
    data = [rng.getrandbits(64) for _ in range(n)]
    models = [DbufModel(p, k) for k in range(p.num_dbufs)]
    models[src].load({p.dbuf_base(src) + soff: b"".join(w.to_bytes(8, "little") for w in data)})
    ext, loc = p.dbuf_base(src) + soff, p.dbuf_base(first) + doff
    words = dict(zip((0x100, 0x108), pack_descriptor(ext, loc, 8 * n, DescFlag.MOVE, copies)))
    dma = Dma(p)
    got = dict(sent=[], collisions=0)

    async def bench(ctx):
        ctx.set(dma.o_req.ready, 1)
        await _start_one(ctx, dma)
        pending, replies = [], []                    # external words; (cycle, REPLY flit)
        for cycle in range(200):
            if ctx.get(dma.o_ext_rd.valid):
                pending.append(words[ctx.get(dma.o_ext_rd.payload)])
            reply = replies.pop(0)[1] if replies and replies[0][0] <= cycle else None
            ctx.set(dma.i_rep.valid, reply is not None)
            ctx.set(dma.i_rep.payload.as_value(), reply or 0)
            move_reply = reply is not None and flit_fields(p, reply)[2]["tag"] == 1
            # External read data in a MOVE reply's cycle: the reply wins (garbage not taken).
            ctx.set(dma.i_ext_rdata.valid, bool(pending) or move_reply)
            ctx.set(dma.i_ext_rdata.payload, pending[0] if pending else 0xBAD)
            if move_reply:
                assert not ctx.get(dma.i_ext_rdata.ready), f"cycle {cycle}: ready with a reply"
                got["collisions"] += 1
            elif pending and ctx.get(dma.i_ext_rdata.ready):
                pending.pop(0)
            if ctx.get(dma.o_req.valid):
                flit = ctx.get(dma.o_req.payload.as_value())
                kind, dst, f = flit_fields(p, flit)
                got["sent"].append((kind, dst, f["addr"], f["tag"], f.get("data")))
                replies.append((cycle + 3, models[p.dbuf_at(*dst)].reply(flit)))
            await ctx.tick()
        got.update(done=ctx.get(dma.o_done), error=ctx.get(dma.o_error),
                   rd=ctx.get(dma.o_rd_bytes), wr=ctx.get(dma.o_wr_bytes))

    sim = Simulator(dma)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got["done"] and not got["error"] and (got["rd"], got["wr"]) == (16, 0), got
    loads = [s for s in got["sent"] if s[0] == Kind.LOAD]
    stores = [s for s in got["sent"] if s[0] == Kind.STORE]
    assert loads == [(Kind.LOAD, p.dbuf_coord(src), ext + 8 * i, 1, None) for i in range(n)]
    targets = copy_targets(first, copies)
    assert stores == [(Kind.STORE, p.dbuf_coord(k), p.dbuf_base(k) + doff + 8 * i, 0, w)
                      for i, w in enumerate(data) for k in targets]
    assert got["sent"].index(stores[0]) < got["sent"].index(loads[-1]), got["sent"]
    assert got["collisions"] == n
    for k in targets:
        assert models[k].contents()[doff:doff + 8 * n] == models[src].contents()[soff:soff + 8 * n]


def test_fence_counts_only_when_every_earlier_store_is_acknowledged():
    # A list IN (two Dbufs by multicast), fence, IN (amaranth.sim, Dbuf models acknowledging
    # each STORE 10-60 cycles later, in arrival order per cycle): o_fences rises only after the
    # last acknowledgement of the first descriptor's STOREs, and no STORE of the descriptor
    # after the fence goes out before it rises.
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    rng = random.Random(seed)
    p = ArrayParams(rows=1, cols=1, dbuf_bytes=256, slots=64, operand_depth=4, int_issue=1)
    models = [DbufModel(p, k) for k in range(p.num_dbufs)]
    descs = [pack_descriptor(0x400, p.dbuf_base(0) + 16, 32, copies=0b1),
             pack_descriptor(0, 0, 0),
             pack_descriptor(0x420, p.dbuf_base(2) + 8, 16)]
    words = {0x100 + 8 * i: w for i, w in enumerate(w for d in descs for w in d)}
    words.update({0x400 + 8 * i: rng.getrandbits(64) for i in range(6)})
    dma = Dma(p)
    got = dict(acks=[], stores=[], fence_at=None)

    async def bench(ctx):
        ctx.set(dma.i_list, 0x100)
        ctx.set(dma.i_count, len(descs))
        ctx.set(dma.i_start, 1)
        ctx.set(dma.o_ext_rd.ready, 1)
        ctx.set(dma.o_ext_wr.ready, 1)
        ctx.set(dma.o_req.ready, 1)
        await ctx.tick()
        ctx.set(dma.i_start, 0)
        pending, replies = [], []                    # external words; (cycle, REPLY flit)
        for cycle in range(400):
            if ctx.get(dma.o_ext_rd.valid):
                pending.append(words[ctx.get(dma.o_ext_rd.payload)])
            ctx.set(dma.i_ext_rdata.valid, bool(pending))
            ctx.set(dma.i_ext_rdata.payload, pending[0] if pending else 0)
            if pending and ctx.get(dma.i_ext_rdata.ready):
                pending.pop(0)
            replies.sort(key=lambda r: r[0])
            reply = replies.pop(0)[1] if replies and replies[0][0] <= cycle else None
            ctx.set(dma.i_rep.valid, reply is not None)
            ctx.set(dma.i_rep.payload.as_value(), reply or 0)
            if reply is not None:
                got["acks"].append(cycle)
            if ctx.get(dma.o_req.valid):
                flit = ctx.get(dma.o_req.payload.as_value())
                kind, dst, f = flit_fields(p, flit)
                got["stores"].append((cycle, f["addr"]))
                replies.append((cycle + rng.randint(10, 60),
                                models[p.dbuf_at(*dst)].reply(flit)))
            if ctx.get(dma.o_fences) and got["fence_at"] is None:
                got["fence_at"] = cycle
            await ctx.tick()
        got.update(done=ctx.get(dma.o_done), fences=ctx.get(dma.o_fences))

    sim = Simulator(dma)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got["done"] and got["fences"] == 1, got
    first = 8                                        # 4 words to 2 Dbufs
    assert len(got["stores"]) == first + 2 and len(got["acks"]) == first + 2, got
    assert got["fence_at"] > max(got["acks"][:first]), got
    assert min(c for c, _ in got["stores"][first:]) >= got["fence_at"], got


@pytest.mark.parametrize("first, copies", [(2, 0b100_0010), (0, 0b100_1010), (1, 0b1000_0000),
                                           (9, 0)])
def test_edge_multicast_with_copies_stores_each_target_then_collects_every_reach(first, copies):
    # mcast with copies (amaranth.sim, a 2 x 3 array, the DMA west of row 0, Dbuf models
    # answering 5-40 cycles later): one MSTORE per word and target in copy_targets order, each
    # at its offset there; after the last word one MLOAD per target at the descriptor's first
    # offset there; every Dbuf of each target's edge line (written_dbufs) holds the words, and
    # the DMA is done only once every Dbuf of every target's reach has answered its MLOAD.
    seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed} (set FDPU_SEED to repeat)")
    rng = random.Random(seed)
    p = ArrayParams(rows=2, cols=3, dbuf_bytes=256, slots=64, operand_depth=4, int_issue=1)
    dma = Dma(p)
    port = p.dbuf_at(*dma.coord)
    off, n = 8 * rng.randrange(24), 4
    data = [rng.getrandbits(64) for _ in range(n)]
    words = {0x100: 0x1000 | (p.dbuf_base(first) + off) << 32,
             0x108: pack_descriptor(0, 0, 8 * n, DescFlag.MCAST, copies)[1],
             **{0x1000 + 8 * i: w for i, w in enumerate(data)}}
    targets = copy_targets(first, copies)
    reach = {t: edge_targets(p, port, t) for t in targets}
    models = [DbufModel(p, k) for k in range(p.num_dbufs)]
    got = dict(sent=[], replies=0, done_at=None, last_reply=None)

    async def bench(ctx):
        ctx.set(dma.o_req.ready, 1)
        await _start_one(ctx, dma)
        pending, replies = [], []
        for cycle in range(400):
            if ctx.get(dma.o_ext_rd.valid):
                pending.append(words.get(ctx.get(dma.o_ext_rd.payload), 0))
            ctx.set(dma.i_ext_rdata.valid, bool(pending))
            ctx.set(dma.i_ext_rdata.payload, pending[0] if pending else 0)
            if pending and ctx.get(dma.i_ext_rdata.ready):
                pending.pop(0)
            replies.sort()
            reply = replies.pop(0)[1] if replies and replies[0][0] <= cycle else None
            ctx.set(dma.i_rep.valid, reply is not None)
            ctx.set(dma.i_rep.payload.as_value(), reply or 0)
            if reply is not None:
                got["replies"] += 1
                got["last_reply"] = cycle
            if ctx.get(dma.o_req.valid):
                flit = ctx.get(dma.o_req.payload.as_value())
                kind, dst, f = flit_fields(p, flit)
                got["sent"].append((kind, dst, f["addr"], f.get("data")))
                for d in reach[p.dbuf_at(*dst)]:      # the mesh's copies along the line
                    answer = models[d].reply(flit)
                    if answer is not None:
                        replies.append((cycle + rng.randint(5, 40), answer))
            if ctx.get(dma.o_done) and got["done_at"] is None:
                got["done_at"] = cycle
            await ctx.tick()
        got.update(error=ctx.get(dma.o_error))

    sim = Simulator(dma)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = [(Kind.MSTORE, p.dbuf_coord(t), p.dbuf_base(t) + off + 8 * i, w)
            for i, w in enumerate(data) for t in targets]
    want += [(Kind.MLOAD, p.dbuf_coord(t), p.dbuf_base(t) + off, None) for t in targets]
    assert [s if s[0] == Kind.MSTORE else s[:3] + (None,) for s in got["sent"]] == want
    assert not got["error"] and got["done_at"] is not None, got
    assert got["replies"] == sum(len(r) for r in reach.values())
    assert got["done_at"] > got["last_reply"], got
    written = written_dbufs(p, port, first, copies, True)
    assert written == list(dict.fromkeys(d for t in targets for d in reach[t]))
    for d in range(p.num_dbufs):
        held = models[d].contents()[off:off + 8 * n]
        want_bytes = b"".join(w.to_bytes(8, "little") for w in data)
        assert (held == want_bytes) == (d in written), (d, written)
