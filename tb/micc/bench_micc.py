"""cocotb bench of ``hw.ctrl.micc.Micc`` on the generated Verilog: random jobs and every error.

The bench stands in for the Cbufs (each read port answers ``rd_en`` / ``rd_addr`` with its
region's word on the next cycle, :class:`hw.ctrl.cbuf.Cbuf`'s timing) and for the array (it
takes the flits of every configuration port under random backpressure and, once a context's
start flits are all out, sends that context's CTX_END flits after random delays, their
counts split at random).  A job is random: records of random words on every port
(:func:`sw.compiler.image.expand_cbuf` is what each port must send), templates, contexts,
window, ends per context, context and END bases anywhere in 32 bits, ``i_keep``, and ``i_hold``
raised and lowered at random.  The checks: each port's CONFIG flits, then port 0's context
starts in order with ``data = ctx_base + c``, never more than ``window`` contexts in flight,
``o_done`` with no error, the counters (issued, retired, ENDs, flits).  Then each error of
:class:`sw.spec.status.MiccError` from its own bad input, ending in DONE without ``o_done``.

``FDPU_PARAMS``: the ``micc`` top's parameters; ``FDPU_MICC_JOBS``: random jobs (default 6).
The seed is cocotb's (``run_cocotb`` prints it; ``FDPU_SEED`` sets it).
"""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from sw.compiler.image import expand_cbuf
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_header_layout, cbuf_template_layout, cbuf_words
from sw.spec.packet import ConfigWhat, Kind, body_layout, pack_flit, unpack_flit
from sw.spec.status import MiccError, MiccState
from tb.common.clock import reset, start_clock
from tb.common.stream import StreamSink, StreamSource

WRAP = 1 << 32


def _sfx(q):
    return f"_{q}" if q else ""


class TB:
    """The MicC's environment: Cbuf read ports, the flit sinks, the CTX_END source."""

    def __init__(self, dut):
        q = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.p = ArrayParams(rows=q["rows"], cols=q["cols"], cbufs=q["cbufs"],
                             cbuf_bytes=q["cbuf_bytes"], operand_depth=q["operand_depth"])
        self.ports = q["ports"]
        self.region = cbuf_words(self.p) * self.p.cbufs // self.ports
        self.words = [[0] * self.region for _ in range(self.ports)]
        self.rng = random.Random(cocotb.RANDOM_SEED)
        self.cycle = 0
        start_clock(dut.clk)
        self.got = [[] for _ in range(self.ports)]
        self.sinks = [StreamSink(dut, f"o_flit{_sfx(q)}", dut.clk, pause=0.3, rng=self.rng,
                                 callback=lambda w, q=q: self.got[q].append(int(w)))
                      for q in range(self.ports)]
        self.ends = StreamSource(dut, "i_flit", dut.clk, rst=dut.rst)
        for name in ("i_start", "i_keep", "i_hold", "i_cbuf_write", "i_delivered",
                     "i_n_ctx", "i_contexts", "i_window", "i_ends", "i_ctx_base",
                     "i_end_base") + tuple(f"i_n_config{_sfx(q)}" for q in range(self.ports)):
            getattr(dut, name).value = 0
        for q in range(self.ports):
            cocotb.start_soon(self._cbuf_port(q))

    async def _cbuf_port(self, q):
        """Answer read port ``q``: ``rd_en`` on an edge gives the word from the next cycle."""
        en, addr = getattr(self.dut, f"rd_en{_sfx(q)}"), getattr(self.dut, f"rd_addr{_sfx(q)}")
        data = getattr(self.dut, f"rd_data{_sfx(q)}")
        word = None
        while True:
            await RisingEdge(self.dut.clk)
            if word is not None:              # the read sampled on this edge
                data.value, word = word, None
            await ReadOnly()
            if int(en.value):
                word = self.words[q][int(addr.value)]

    async def start(self):
        await reset(self.dut.clk, self.dut.rst)

    def records(self, flits):
        """Return random Cbuf records (empty ones too, half of them to a span of PEs) of
        ``flits`` data words."""
        p, rng = self.p, self.rng
        hdr = cbuf_header_layout(p)
        words, left = [], flits
        while left:
            n = min(left, rng.randint(0, 5))
            what = rng.choice(list(ConfigWhat))
            x, y = rng.randrange(p.cols), rng.randrange(p.rows)
            span = (rng.randrange(p.cols - x), rng.randrange(p.rows - y)) \
                if rng.random() < 0.5 else (0, 0)
            words.append(hdr.pack(what=what, dst_x=x + 1, dst_y=y + 1,
                                  slot=rng.randrange(p.slots - 4),
                                  index=0 if what is ConfigWhat.INSN else rng.randrange(3),
                                  count=n, span_x=span[0], span_y=span[1]))
            words += [rng.getrandbits(64) for _ in range(n)]
            left -= n
        return words

    async def run(self, job, max_cycles=50_000):
        """Run one job (a dict, see :func:`random_job`); return its status registers, the
        flits of each port and the most contexts in flight."""
        dut, rng = self.dut, self.rng
        tpl = cbuf_template_layout(self.p)
        templates = [tpl.pack(dst_x=x + 1, dst_y=y + 1, slot=s, operand=0)
                     for x, y, s in job["templates"]]
        for q in range(self.ports):
            image = job["records"][q] + (templates if q == 0 else [])
            self.words[q][:len(image)] = image[:self.region]
        for got in self.got:
            got.clear()
        regs = dict(i_n_ctx=len(templates), i_contexts=job["contexts"],
                    i_window=job["window"], i_ends=job["ends"], i_ctx_base=job["ctx_base"],
                    i_keep=int(job["keep"]), i_end_base=job["end_base"])
        regs.update({f"i_n_config{_sfx(q)}": len(job["records"][q])
                     for q in range(self.ports)})
        regs.update(job.get("override", {}))
        await FallingEdge(dut.clk)
        for k, v in regs.items():
            getattr(dut, k).value = v
        dut.i_start.value = 1
        await FallingEdge(dut.clk)
        dut.i_start.value = 0
        n_tpl = len(templates)
        started, seen, pending, inflight = 0, 0, [], 0
        done_ctx = 0
        for cycle in range(max_cycles):
            await FallingEdge(dut.clk)
            # i_hold: raised and lowered at random (runs of a few cycles).
            if job["hold"] and rng.random() < 0.1:
                dut.i_hold.value = 1 - int(dut.i_hold.value)
            elif not job["hold"]:
                dut.i_hold.value = 0
            dut.i_cbuf_write.value = int(job.get("cbuf_write_at") == cycle)
            # Context starts seen on port 0 (after its CONFIG flits): schedule their ENDs.
            starts = self.got[0][job["config_flits"][0]:] if not job["keep"] else self.got[0]
            while seen < len(starts):
                seen += 1
                if seen % n_tpl == 0 and n_tpl:
                    c = seen // n_tpl - 1
                    started += 1
                    for n in job["split"](c):
                        pending.append((cycle + rng.randrange(1, 30), c, n))
                    for c_bad, n in job.get("stray", {}).get(c, []):
                        pending.append((cycle + 1, c_bad, n))
            due = [e for e in pending if e[0] <= cycle]
            for e in due:
                pending.remove(e)
                self.ends.send(pack_flit(self.p, Kind.CTX_END, (-1, 0),
                                         data=(e[1] + job["end_base"]) % WRAP, count=e[2]))
            if job.get("bad_flit_at") == cycle:
                self.ends.send(pack_flit(self.p, Kind.OPERAND, (-1, 0), slot=0, operand=0,
                                         data=1))
            done_ctx = int(dut.o_retired.value)
            inflight = max(inflight, started - done_ctx)
            state = MiccState(int(dut.o_state.value))
            if state is MiccState.DONE and not pending and not self.ends.pending:
                break
        else:
            raise AssertionError(f"timeout after {max_cycles} cycles: deadlock: MicC state "
                                 f"{MiccState(int(dut.o_state.value)).name}, issued "
                                 f"{int(dut.o_issued.value)}, retired "
                                 f"{int(dut.o_retired.value)} of {job['contexts']}")
        await ClockCycles(dut.clk, 4)
        await ReadOnly()
        status = {name: int(getattr(dut, name).value) for name in (
            "o_done", "o_error", "o_issued", "o_retired", "o_ends", "o_flits", "o_cycles",
            "o_config_cycles", "o_hold_cycles", "o_config_hidden")}
        return status, [list(g) for g in self.got], inflight


def random_job(tb, contexts=None):
    """Return a random good job for ``tb``'s MicC."""
    rng, p = tb.rng, tb.p
    templates = [(rng.randrange(p.cols), rng.randrange(p.rows), rng.randrange(p.slots))
                 for _ in range(rng.randint(1, 4))]
    room = [tb.region - (len(templates) if q == 0 else 0) for q in range(tb.ports)]
    records = [tb.records(rng.randint(0, max(0, min(24, room[q] // 2 - 2))))
               for q in range(tb.ports)]
    ends = rng.choice([1, 1, 2, 3, 5])
    counted = rng.random() < 0.5

    def split(c):
        if not counted:
            return [0] * ends                     # one END each (count 0 stands for 1)
        left, out = ends, []
        while left:
            n = rng.randint(1, left)
            out.append(0 if n == 1 and rng.random() < 0.5 else n)
            left -= n
        return out
    keep = rng.random() < 0.2
    return dict(templates=templates, records=records,
                config_flits=[len(expand_cbuf(p, r, [])) for r in records],
                contexts=rng.randint(0, 40) if contexts is None else contexts,
                window=rng.randint(1, p.operand_depth), ends=ends, split=split,
                ctx_base=rng.choice([0, rng.getrandbits(32), WRAP - 3]),
                end_base=rng.choice([0, rng.getrandbits(32), WRAP - 2]) if keep else 0,
                keep=keep, hold=rng.random() < 0.5)


@cocotb.test()
async def random_jobs(dut):
    """Random jobs: configuration on every port, contexts in order within the window."""
    tb = TB(dut)
    await tb.start()
    for j in range(int(os.environ.get("FDPU_MICC_JOBS", "6"))):
        job = random_job(tb)
        status, got, inflight = await tb.run(job)
        label = (f"job {j} (contexts {job['contexts']}, window {job['window']}, ends "
                 f"{job['ends']}, keep {job['keep']}, hold {job['hold']})")
        kinds = [unpack_flit(tb.p, w)[0].name for w in got[0]]
        assert status["o_done"] == 1 and status["o_error"] == 0, \
            f"{label}: {status}, port 0 {kinds}, config {job['config_flits']}"
        assert status["o_issued"] == status["o_retired"] == job["contexts"], f"{label}: {status}"
        assert status["o_ends"] == job["contexts"] * job["ends"], f"{label}: {status}"
        assert inflight <= job["window"], f"{label}: {inflight} contexts in flight"
        for q in range(tb.ports):
            want = [] if job["keep"] else expand_cbuf(tb.p, job["records"][q], [])
            assert got[q][:len(want)] == want, f"{label}: port {q}'s CONFIG flits"
            if q:
                assert len(got[q]) == len(want), f"{label}: port {q} sent more than its records"
        starts = got[0][len(want := ([] if job["keep"] else
                                     expand_cbuf(tb.p, job["records"][0], []))):]
        n = len(job["templates"])
        assert len(starts) == job["contexts"] * n, f"{label}: {len(starts)} context flits"
        for i, word in enumerate(starts):
            kind, dst, body = unpack_flit(tb.p, word)
            f = body_layout(Kind.OPERAND, tb.p).unpack(body)
            x, y, s = job["templates"][i % n]
            assert (kind, dst, f["slot"], f["data"]) == (
                Kind.OPERAND, (x, y), s, (job["ctx_base"] + i // n) % WRAP), \
                f"{label}: context flit {i}"
        assert status["o_flits"] == sum(len(g) for g in got), f"{label}: {status}"
        dut._log.info(f"{label}: match, {status['o_cycles']} cycles ({status['o_config_cycles']} "
                      f"configuring, {status['o_hold_cycles']} held)")


@cocotb.test()
async def errors(dut):
    """Each MicC error from its own bad input: DONE, ``o_done`` low, its bit set."""
    tb = TB(dut)
    await tb.start()
    cases = {
        MiccError.CONFIG_TOO_BIG: dict(override={"i_n_config": tb.region}),
        MiccError.BAD_REGS: dict(override={"i_window": tb.p.operand_depth + 1}),
        MiccError.BAD_FLIT: dict(bad_flit_at=3),
        MiccError.BAD_END: dict(stray={0: [(2, 0)]}),
        MiccError.CBUF_BUSY: dict(cbuf_write_at=2),
    }
    for bit, bad in cases.items():
        job = random_job(tb, contexts=3)
        job.update(keep=False, window=1, **bad)
        status, _, _ = await tb.run(job)
        assert not status["o_done"] and status["o_error"] >> bit & 1, \
            f"{bit.name}: {status}"
        dut._log.info(f"{bit.name}: reported (o_error {status['o_error']:#x})")
