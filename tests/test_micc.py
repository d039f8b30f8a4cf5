"""Tests of hw.ctrl.micc and hw.ctrl.cbuf in amaranth.sim: the compact Cbuf records expanded into
CONFIG flits exactly as sw.compiler.image.expand_cbuf does, context window, end counting, done, and
the error bits (configuration too big, bad registers, stray ends); the Cbuf encoding of
real images (sw.compiler.image.Image.cbuf_words) against the flits of
tb.host.memories.image_flits; and the MicC on the generated Verilog, both simulators
(tb/micc/bench_micc.py: random jobs and every error)."""

import os
import random
from collections import defaultdict

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.ctrl.cbuf import Cbuf
from hw.ctrl.micc import Micc, MiccState
from hw.top import FDPU
from sw.compiler import dbuf_layout, layers, planner
from sw.compiler.asm import assemble
from sw.compiler.image import expand_cbuf
from sw.compiler.program import program
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import (cbuf_header_layout, cbuf_template_layout, cbuf_words,
                          word_bits)
from sw.spec.errors import FdpuError
from sw.spec.packet import (ConfigWhat, Kind, body_layout, flit_fields, pack_flit,
                            unpack_flit)
from sw.spec.ports import config_port_of, config_ports
from sw.spec.status import MiccError
from sw.spec.system import SIMULATORS
from tb.host.memories import image_flits
from tb.host.runner import run_cocotb

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

SEED = int(os.environ.get("FDPU_SEED", "7007"))
P = ArrayParams(rows=2, cols=2, cbufs=2, cbuf_bytes=256, operand_depth=4, slots=64, int_issue=1)


class Rig(wiring.Component):
    """Cbuf + MicC, the Cbuf's write port and the MicC's host ports exposed."""

    def __init__(self, params):
        self.cbuf, self.micc = Cbuf(params), Micc(params, drain=4)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.cbuf, m.submodules.micc = self.cbuf, self.micc
        m.d.comb += [self.cbuf.rd_en.eq(self.micc.rd_en), self.cbuf.rd_addr.eq(self.micc.rd_addr),
                     self.micc.rd_data.eq(self.cbuf.rd_data)]
        return m


def _operand(x, y, slot, data):
    return pack_flit(P, Kind.OPERAND, (x, y), slot=slot, operand=0, data=data)


def _end(ctx, count=0):
    """Return a CTX_END flit for ``ctx`` standing for ``count`` END messages (0 counts as 1)."""
    return pack_flit(P, Kind.CTX_END, (-1, 0), data=ctx, count=count)


def _split(ends, rng):
    """Return random CTX_END counts summing to ``ends`` END messages (0 stands for 1)."""
    counts = []
    while ends:
        n = rng.randint(1, ends)
        counts.append(0 if n == 1 and rng.random() < 0.5 else n)
        ends -= n
    return counts


def _records(n_flits, rng):
    """Return Cbuf configuration words: random records (empty ones too, half of them to a
    span of PEs) of ``n_flits`` data words."""
    hdr = cbuf_header_layout(P)
    words, left = [], n_flits
    while left:
        n = min(left, rng.randint(0, 5))
        what = rng.choice(list(ConfigWhat))
        x, y = rng.randrange(2), rng.randrange(2)
        span = (rng.randrange(2 - x), rng.randrange(2 - y)) if rng.random() < 0.5 else (0, 0)
        words.append(hdr.pack(what=what, dst_x=x + 1, dst_y=y + 1,
                              slot=rng.randrange(P.slots - 4),
                              index=0 if what is ConfigWhat.INSN else rng.randrange(3),
                              count=n, span_x=span[0], span_y=span[1]))
        words += [rng.getrandbits(64) for _ in range(n)]
        left -= n
    return words


def _run(n_config, templates, contexts, window, ends, *, stall=0.3, bad_end=None,
         regs_override=None, max_cycles=20_000, counted=False, first_counts=None, ctx_base=0,
         keep=False, end_base=0, ends_from=None):
    """Run the rig; return (flits out, state, error, issued, retired, max in flight).

    ``ctx_base``: the first context ID (``i_ctx_base``); the ENDs still count from 0, as the
    PEs' END slots do.  ``keep``, ``end_base``: the registers ``i_keep`` (no configuration)
    and ``i_end_base``; the ENDs carry IDs from ``ends_from`` (default ``end_base``), as END
    slots configured ``end_base`` contexts ago do.

    ``counted``: each context's ENDs arrive as CTX_END flits with random counts;
    ``first_counts``: the counts of context 0's flits instead (an overshoot, say).
    """
    rng = random.Random(SEED)
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rig = Rig(P)
    m, c = rig.micc, rig.cbuf
    records = _records(n_config, rng)
    config = expand_cbuf(P, records, [])
    tpl = cbuf_template_layout(P)
    words = records + [tpl.pack(dst_x=x + 1, dst_y=y + 1, slot=s, operand=0)
                       for x, y, s in templates]
    out, log = [], {}

    async def bench(ctx):
        for a, w in enumerate(words[:c.words]):
            ctx.set(c.wr_en, 1)
            ctx.set(c.wr_addr, a)
            ctx.set(c.wr_data, w)
            await ctx.tick()
        ctx.set(c.wr_en, 0)
        regs = dict(i_n_config=len(records), i_n_ctx=len(templates), i_contexts=contexts,
                    i_window=window, i_ends=ends, i_ctx_base=ctx_base, i_keep=int(keep),
                    i_end_base=end_base)
        regs.update(regs_override or {})
        for k, v in regs.items():
            ctx.set(getattr(m, k), v)
        ctx.set(m.i_start, 1)
        await ctx.tick()
        ctx.set(m.i_start, 0)
        got = {}            # context -> templates received
        pending = []        # (due cycle, context, count) of CTX_END flits to send
        max_inflight = 0
        sent = {}           # context -> END messages delivered
        for cycle in range(max_cycles):
            ready = rng.random() >= stall
            ctx.set(m.o_flit.ready, ready)
            due = [e for e in pending if e[0] <= cycle]
            send = due[0] if due else None
            if send is not None:
                pending.remove(send)
                ctx.set(m.i_flit.valid, 1)
                ctx.set(m.i_flit.payload.as_value(),
                        _end((send[1] + (end_base if ends_from is None else ends_from))
                             % 2 ** 32, send[2]))
            else:
                ctx.set(m.i_flit.valid, 0)
            valid, payload = ctx.get(m.o_flit.valid), ctx.get(m.o_flit.payload)
            state = ctx.get(m.o_state)
            if state in (MiccState.DONE, MiccState.IDLE):
                break
            if valid and ready:
                word = payload.as_value().value
                out.append(word)
                kind, dst, body = unpack_flit(P, word)
                if kind is Kind.OPERAND:
                    data = body_layout(Kind.OPERAND, P).unpack(body)["data"] - ctx_base
                    got[data] = got.get(data, 0) + 1
                    if got[data] == len(templates):
                        counts = [0] * ends
                        if counted:
                            counts = _split(ends, rng)
                        if first_counts is not None and data == 0:
                            counts = first_counts
                        for n in counts:
                            pending.append((cycle + rng.randrange(1, 30), data, n))
                        if bad_end is not None and data == 0:
                            pending.append((cycle + 1, bad_end, 0))
            if send is not None:
                sent[send[1]] = sent.get(send[1], 0) + (send[2] or 1)
                log["end_flits"] = log.get("end_flits", 0) + 1
            await ctx.tick()
            started = sum(1 for k, n in got.items() if n == len(templates))
            finished = sum(1 for k, n in sent.items() if n >= ends and k < contexts)
            max_inflight = max(max_inflight, started - finished)
        else:
            raise AssertionError(f"timeout after {max_cycles} cycles: deadlock: MicC state "
                                 f"{MiccState(ctx.get(m.o_state)).name}, issued "
                                 f"{ctx.get(m.o_issued)}, retired {ctx.get(m.o_retired)}")
        await ctx.tick()
        log.update(state=ctx.get(m.o_state), error=ctx.get(m.o_error),
                   issued=ctx.get(m.o_issued), retired=ctx.get(m.o_retired),
                   done=ctx.get(m.o_done), cycles=ctx.get(m.o_cycles),
                   config_cycles=ctx.get(m.o_config_cycles), max_inflight=max_inflight,
                   ends=ctx.get(m.o_ends), ends_sent=sum(sent.values()))

    sim = Simulator(rig)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out, config, log


@pytest.mark.parametrize("contexts, window, ends", [(0, 1, 1), (1, 1, 2), (9, 1, 1),
                                                    (12, 2, 3), (17, 4, 2)])
def test_config_then_contexts_in_order_within_window(contexts, window, ends):
    templates = [(0, 0, 3), (1, 1, 5), (1, 0, 0)]
    out, config, log = _run(11, templates, contexts, window, ends)
    assert log["done"] == 1 and log["error"] == 0, log
    assert log["issued"] == contexts and log["retired"] == contexts
    assert out[:len(config)] == config                    # configuration first, in order
    ctx_words = out[len(config):]
    assert len(ctx_words) == contexts * len(templates)
    for i, word in enumerate(ctx_words):                  # contexts in order, data = ID
        kind, dst, body = unpack_flit(P, word)
        f = body_layout(Kind.OPERAND, P).unpack(body)
        x, y, s = templates[i % len(templates)]
        assert (kind, dst, f["slot"], f["data"]) == (Kind.OPERAND, (x, y), s,
                                                    i // len(templates))
    assert log["max_inflight"] <= window
    # One CONFIG flit per cycle at best: configuring takes at least one cycle per flit.
    assert len(config) <= log["config_cycles"] < log["cycles"]


def test_context_ids_from_a_base():
    # A double-buffered layer's odd passes number their contexts from i_ctx_base (their CTX
    # tokens read the second half's descriptor tables); the ENDs still count from 0.
    templates = [(0, 0, 3), (1, 1, 5)]
    base = 0x10000
    out, config, log = _run(5, templates, 6, 2, 2, ctx_base=base)
    assert log["done"] == 1 and log["error"] == 0 and log["retired"] == 6, log
    ids = [body_layout(Kind.OPERAND, P).unpack(unpack_flit(P, w)[2])["data"]
           for w in out[len(config):]]
    assert ids == [base + i // len(templates) for i in range(6 * len(templates))]


@pytest.mark.parametrize("end_base", [0, 7, 2 ** 32 - 3])
def test_a_kept_configuration_is_not_sent_again(end_base):
    # i_keep: the PEs hold the configuration (the previous run's), so no CONFIG flit; the
    # contexts' templates are still read after port 0's records, and the ENDs, which the END
    # slots count on from their configuration, are taken from i_end_base (wrapping).
    templates = [(0, 0, 3), (1, 1, 5), (1, 0, 0)]
    out, config, log = _run(11, templates, 9, 3, 2, counted=True, keep=True,
                            end_base=end_base)
    assert log["done"] == 1 and log["error"] == 0 and log["retired"] == 9, log
    assert log["config_cycles"] == 0 and config
    ids = [body_layout(Kind.OPERAND, P).unpack(unpack_flit(P, w)[2])["data"] for w in out]
    assert ids == [i // len(templates) for i in range(9 * len(templates))]


def test_ends_not_counted_from_the_end_base_are_bad_ends():
    _, _, log = _run(11, [(0, 0, 3)], 4, 2, 1, keep=True, end_base=6, ends_from=0)
    assert log["error"] >> MiccError.BAD_END & 1 and not log["done"]


def test_config_too_big_is_an_error_not_a_hang():
    cap = cbuf_words(P) * P.cbufs
    out, _, log = _run(0, [], 1, 1, 1, regs_override=dict(i_n_config=cap, i_n_ctx=1))
    assert log["state"] == MiccState.DONE and not log["done"]
    assert log["error"] >> MiccError.CONFIG_TOO_BIG & 1
    assert out == []


@pytest.mark.parametrize("regs", [dict(i_window=0), dict(i_window=5), dict(i_ends=0)])
def test_bad_registers(regs):
    _, _, log = _run(2, [(0, 0, 1)], 3, 2, 1, regs_override=regs)
    assert log["error"] >> MiccError.BAD_REGS & 1 and not log["done"]


def test_end_of_a_context_not_in_flight():
    _, _, log = _run(2, [(0, 0, 1)], 3, 1, 1, bad_end=2)
    assert log["error"] >> MiccError.BAD_END & 1 and not log["done"]


@pytest.mark.parametrize("contexts, window, ends", [(9, 1, 5), (13, 3, 7), (17, 4, 16)])
def test_counted_ends_retire_contexts(contexts, window, ends):
    """CTX_END flits with counts: a context retires when its counts sum to i_ends;
    ``o_ends`` counts END messages, not flits."""
    _, _, log = _run(3, [(0, 0, 3), (1, 1, 5)], contexts, window, ends, counted=True)
    assert log["done"] == 1 and log["error"] == 0, log
    assert log["retired"] == contexts and log["max_inflight"] <= window
    assert log["ends"] == log["ends_sent"] == contexts * ends
    assert log["end_flits"] < contexts * ends                # some flits carried several


@pytest.mark.parametrize("counts", [[4], [2, 2], [3, 0, 1], [0xFFFF]])
def test_counted_ends_overshooting_is_bad_end(counts):
    """A count taking a context past i_ends (3) is BAD_END, in one flit or over several."""
    _, _, log = _run(2, [(0, 0, 1)], 3, 1, 3, first_counts=counts)
    assert log["error"] >> MiccError.BAD_END & 1 and not log["done"], log


def test_bad_parameters():
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams, not 3"):
        Micc(3)
    with pytest.raises(TypeError, match="drain must be a positive integer, not 0"):
        Micc(P, drain=0)
    with pytest.raises(TypeError, match="params must be an sw.spec.arch.ArrayParams"):
        Cbuf(None)


@pytest.mark.parametrize("params", [
    ArrayParams(rows=2, cols=2, slots=16, operand_depth=4, int_issue=1), ArrayParams(slots=64,
                operand_depth=4, int_issue=1), ArrayParams(slots=128, operand_depth=4,
                                                           int_issue=1)])
def test_cbuf_word_is_64_bits(params):
    # One DMA beat, one record word, whatever the flit width (129 bits at 8 x 8, 128 slots).
    assert word_bits(params) == Cbuf(params).width == 64


@pytest.mark.parametrize("rows, slots, K, C, N, mode, density", [
    (1, 32, 2, 16, 1, "sparse", 0.5), (2, 32, 5, 33, 8, "sparse", 0.25),
    (8, 64, 64, 64, 4, "sparse", 0.25), (8, 128, 96, 256, 4, "dense", 1.0)])
def test_cbuf_words_expand_to_the_image_flits(rows, slots, K, C, N, mode, density):
    p = ArrayParams(rows=rows, cols=rows, slots=slots, operand_depth=4, int_issue=1)
    w = layers.make_weights((K, C), density, 1)
    x = layers.make_inputs(C, N, 1)
    plan = planner.plan_fc(K, C, N, mode, p)
    graph, placement = program(plan)
    segments, _ = dbuf_layout.pass_memory(plan, w, x, 0)
    image = assemble(graph, placement, segments, plan.pass_contexts(0))
    config, templates = image_flits(image)
    assert expand_cbuf(p, *image.cbuf_words(), ctx=0) == config + templates
    cw, tw = image.cbuf_words(spans=True)
    flits = expand_cbuf(p, cw, tw, ctx=0)
    # With spans every PE gets its slots' words (the INSN words of a record of several PEs
    # moved to each), its registers and its preloads, in order; the templates last.
    assert _per_pe(p, flits[:len(config)]) == _per_pe(p, config)
    assert flits[len(config):] == templates
    # At most one word per flit (one header per run of slots or registers), and a program
    # the engines share held once: with an engine on every PE of the 8 x 8, a quarter of
    # the flits or fewer (each engine's descriptor loads, whose addresses differ, go to
    # their PE alone).
    assert len(cw) <= len(config) + 2 * p.num_pes + 2 * len(image.preloads)
    if rows == 8 and plan.engines == p.num_pes:
        assert len(cw) <= len(config) / 4
    assert len(tw) == len(templates)


def _per_pe(p, flits):
    """Return per PE its CONFIG flits: the INSN ones as a sorted list (a PE takes its slots'
    words in any order), the others in order."""
    out = defaultdict(lambda: ([], []))
    for flit in flits:
        _, dst, body = flit_fields(p, flit)
        insn = body["what"] == ConfigWhat.INSN
        out[dst][0 if insn else 1].append(flit)
    return {k: (sorted(a), b) for k, (a, b) in out.items()}


def test_expand_cbuf_refuses_a_record_past_the_end():
    hdr = cbuf_header_layout(P)
    with pytest.raises(FdpuError, match="Cbuf record at word 0 announces 3 data words; only 1"):
        expand_cbuf(P, [hdr.pack(what=0, dst_x=1, dst_y=1, slot=0, index=0, count=3), 5], [])


# Several configuration ports, HOLD, CBUF_BUSY (hw.ctrl.micc.Micc(ports=...),
# hw.ctrl.cbuf.Cbuf(ports=...)).

Q = ArrayParams(rows=2, cols=2, cbufs=4, cbuf_bytes=256, operand_depth=4, slots=64, int_issue=1)


class PortsRig(wiring.Component):
    """Cbuf + MicC with ``ports`` configuration ports (every read port wired)."""

    def __init__(self, params, ports):
        self.cbuf = Cbuf(params, ports=ports)
        self.micc = Micc(params, drain=3, ports=ports)
        self.ports = ports
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.cbuf, m.submodules.micc = self.cbuf, self.micc
        for q in range(self.ports):
            s = f"_{q}" if q else ""
            m.d.comb += [getattr(self.cbuf, f"rd_en{s}").eq(getattr(self.micc, f"rd_en{s}")),
                         getattr(self.cbuf, f"rd_addr{s}").eq(getattr(self.micc, f"rd_addr{s}")),
                         getattr(self.micc, f"rd_data{s}").eq(getattr(self.cbuf, f"rd_data{s}"))]
        return m


def _run_ports(ports, sizes, *, hold=0, cbuf_write_at=None, regs_override=None,
               max_cycles=5_000):
    """Run a PortsRig with ``sizes[q]`` CONFIG flits on port ``q``, 2 contexts of one template.

    ``hold``: cycles ``i_hold`` stays high after the start, or a function of the cycle and
    ``o_issued`` (the context to start next) that says whether it is high; ``cbuf_write_at``:
    a cycle (after the start) in which the Cbufs are written.  Returns (per-port flits,
    records, log).
    """
    rng = random.Random(SEED)
    print(f"seed {SEED} (set FDPU_SEED to change)")
    rig = PortsRig(Q, ports)
    m, c = rig.micc, rig.cbuf
    region = c.words // ports
    records = [_records(n, rng) for n in sizes]
    tpl = cbuf_template_layout(Q).pack(dst_x=2, dst_y=1, slot=7, operand=0)
    out = [[] for _ in range(ports)]
    log = {}

    async def bench(ctx):
        for q, words in enumerate(records):
            for a, w in enumerate(words + ([tpl] if q == 0 else [])):
                ctx.set(c.wr_en, 1)
                ctx.set(c.wr_addr, q * region + a)
                ctx.set(c.wr_data, w)
                await ctx.tick()
        ctx.set(c.wr_en, 0)
        regs = dict(i_n_ctx=1, i_contexts=2, i_window=1, i_ends=1)
        regs.update({f"i_n_config{'_%d' % q if q else ''}": len(r) for q, r in enumerate(records)})
        regs.update(regs_override or {})
        for k, v in regs.items():
            ctx.set(getattr(m, k), v)
        held = hold if callable(hold) else (lambda cycle, issued: cycle < hold)
        ctx.set(m.i_start, 1)
        ctx.set(m.i_hold, held(-1, 0))
        await ctx.tick()
        ctx.set(m.i_start, 0)
        started, first_ctx = [], None
        for cycle in range(max_cycles):
            ctx.set(m.i_hold, held(cycle, ctx.get(m.o_issued)))
            ctx.set(c.wr_en, int(cycle == cbuf_write_at))
            ctx.set(m.i_cbuf_write, int(cycle == cbuf_write_at))
            ends = [n for n in started if n[0] <= cycle]
            if ends:
                started.remove(ends[0])
                ctx.set(m.i_flit.valid, 1)
                ctx.set(m.i_flit.payload.as_value(), _end(ends[0][1]))
            else:
                ctx.set(m.i_flit.valid, 0)
            if ctx.get(m.o_state) in (MiccState.DONE, MiccState.IDLE):
                break
            for q in range(ports):
                o = getattr(m, f"o_flit{'_%d' % q if q else ''}")
                ready = rng.random() >= 0.3
                ctx.set(o.ready, ready)
                if ctx.get(o.valid) and ready:
                    word = ctx.get(o.payload).as_value().value
                    out[q].append(word)
                    kind, _, body = unpack_flit(Q, word)
                    if kind is Kind.OPERAND:
                        first_ctx = cycle if first_ctx is None else first_ctx
                        log.setdefault("ctx_at", []).append(cycle)
                        started.append((cycle + 5,
                                        body_layout(Kind.OPERAND, Q).unpack(body)["data"]))
            await ctx.tick()
        else:
            raise AssertionError(f"timeout after {max_cycles} cycles: deadlock: MicC state "
                                 f"{MiccState(ctx.get(m.o_state)).name}")
        await ctx.tick()
        log.update(error=ctx.get(m.o_error), done=ctx.get(m.o_done),
                   config_cycles=ctx.get(m.o_config_cycles), hold=ctx.get(m.o_hold_cycles),
                   hidden=ctx.get(m.o_config_hidden), first_ctx=first_ctx,
                   retired=ctx.get(m.o_retired))

    sim = Simulator(rig)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out, records, log


@pytest.mark.parametrize("ports, sizes", [(2, [9, 14]), (4, [3, 0, 12, 7])])
def test_config_ports_expand_their_own_regions_in_parallel(ports, sizes):
    out, records, log = _run_ports(ports, sizes)
    assert log["done"] and not log["error"] and log["retired"] == 2, log
    flits = [expand_cbuf(Q, records[q], []) for q in range(ports)]
    for q in range(ports):
        assert out[q][:len(flits[q])] == flits[q]
        assert len(out[q]) == len(flits[q]) + (2 if q == 0 else 0)  # contexts on port 0 only
    # In parallel: configuring takes about the largest port's flits, not their sum.
    sent = [len(f) for f in flits]
    assert max(sent) <= log["config_cycles"] < sum(sent) + 10


def test_hold_keeps_contexts_back_until_the_dma_is_done():
    out, _, log = _run_ports(2, [4, 4], hold=200)
    assert log["done"] and not log["error"], log
    assert log["first_ctx"] >= 200 and log["hold"] + log["config_cycles"] >= 198
    assert log["hidden"] == log["config_cycles"]         # configured while "the DMA" ran


def test_hold_per_context_keeps_each_context_back_until_its_data_are_in():
    # Early start: the top holds context c until its own data are in; the others run.
    until = {0: 0, 1: 300, 2: 500}
    out, _, log = _run_ports(1, [4], hold=lambda cycle, issued: cycle < until.get(issued, 0),
                             regs_override=dict(i_contexts=3, i_window=2))
    assert log["done"] and not log["error"] and log["retired"] == 3, log
    first, second, third = log["ctx_at"]
    assert first < 100 and 300 <= second < 320 and 500 <= third < 520, log["ctx_at"]
    # The waits for data count as hold cycles (not those of a full window).
    assert 450 <= log["hold"] <= 500, log


def test_cbuf_write_while_running_is_an_error():
    _, _, log = _run_ports(2, [30, 30], cbuf_write_at=5)
    assert log["error"] >> MiccError.CBUF_BUSY & 1 and not log["done"]


@pytest.mark.parametrize("regs", [dict(i_n_config_1=1000), dict(i_n_config=63, i_n_ctx=2)])
def test_config_too_big_for_a_port_region(regs):
    # 4 banks of 32 words, 2 ports: 64 words per region (port 0: records + templates).
    _, _, log = _run_ports(2, [2, 2], regs_override=regs)
    assert log["error"] >> MiccError.CONFIG_TOO_BIG & 1 and not log["done"]


def test_bad_port_parameters():
    with pytest.raises(TypeError, match=r"ports must be an integer in 1..4 dividing cbufs "
                                        r"\(4\), not 3"):
        Micc(Q, ports=3)
    with pytest.raises(TypeError, match=r"ports must be an integer in 1..4 dividing cbufs "
                                        r"\(2\), not 4"):
        Cbuf(P, ports=4)
    with pytest.raises(TypeError, match=r"config_ports must be an integer in 1..4 dividing "
                                        r"cbufs \(8\), not 5"):
        FDPU(ArrayParams(rows=1, cols=1, slots=64, operand_depth=4, int_issue=1), config_ports=5)


@pytest.mark.parametrize("rows, cols, ports", [(8, 8, 4), (2, 3, 4), (4, 4, 2), (1, 1, 4)])
def test_port_split_is_a_partition_in_per_pe_order(rows, cols, ports):
    p = ArrayParams(rows=rows, cols=cols, slots=128 if rows == 8 else 32, operand_depth=4,
                    int_issue=1)
    K, C = (96, 256) if rows == 8 else (5, 40)
    plan = planner.plan_fc(K, C, 4, "dense", p)
    graph, placement = program(plan)
    segments, _ = dbuf_layout.pass_memory(plan, layers.make_weights((K, C), 1.0, 1),
                                          layers.make_inputs(C, 4, 1), 0)
    image = assemble(graph, placement, segments, plan.pass_contexts(0))
    for spans in (False, True):
        one, templates = image.cbuf_words(spans)
        configs, templates2 = image.cbuf_port_words(ports, spans)
        assert list(templates) == list(templates2)
        owner = config_port_of(p, ports)
        flits = []
        for q, words in enumerate(configs):
            for flit in expand_cbuf(p, words, []):
                (x, y) = unpack_flit(p, flit)[1]
                assert owner[y, x] == q                    # each PE from its own port
                flits.append(flit)
        ref = expand_cbuf(p, one, [])
        if spans:
            # Every PE gets the same words from its port as from one port (its INSN words
            # in any order, the rest in order).
            assert _per_pe(p, flits) == _per_pe(p, ref)
        else:
            per_pe, ref_pe = defaultdict(list), defaultdict(list)
            for flit in flits:
                per_pe[unpack_flit(p, flit)[1]].append(flit)
            for flit in ref:
                ref_pe[unpack_flit(p, flit)[1]].append(flit)
            assert per_pe == ref_pe                        # same flits, same order per PE
            assert sum(len(w) for w in configs) == len(one)
    if (rows, cols) == (8, 8):
        # One quadrant per port: each port a quarter of the flits (balanced within 10 %).
        sent = [len(expand_cbuf(p, w, [])) for w in configs]
        assert max(sent) <= 1.1 * sum(sent) / 4
        coords = config_ports(p, ports)
        assert coords == [(-1, 0), (8, 7), (7, -1), (0, 8)]


@pytest.mark.parametrize("sim", SIMULATORS)
@pytest.mark.parametrize("cbufs, ports", [(2, 1), (4, 4)])
def test_random_jobs_and_every_error_on_the_rtl(sim, cbufs, ports):
    # The MicC alone on the generated Verilog (tb/micc/bench_micc.py): random jobs (records of
    # random words on every configuration port, context and END bases anywhere in 32 bits,
    # keep, hold, counted ENDs) under backpressure, then each MiccError from its bad input.
    params = dict(rows=2, cols=3, cbufs=cbufs, cbuf_bytes=256, operand_depth=4, ports=ports)
    assert run_cocotb("micc", params, "tb.micc.bench_micc", sim, seed=SEED).tests == 2
