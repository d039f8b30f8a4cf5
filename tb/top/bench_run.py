"""Run a job on the FDPU system (top + external memory): every pass DMA in, compute, DMA out.

Driven by ``tb.host.runtime.run_job`` through the environment: ``FDPU_RUN_SPEC`` names a JSON file
with the memory model's registers, the passes (per pass: the DMA descriptor list that loads
it, the MicC registers, the list that stores its results), the cycle bound of each phase, the
external memory image (``.npz``: non-zero word indices and values) and where to write the
results.  Python stays off the per-cycle path: the clock is a GPI clock, the external memory
is written by backdoor once before the first pass, and per phase the bench pulses one start
and awaits one ``halt`` edge (in chunks, writing a progress file for the runtime), or the
bound, whose expiry is reported as "timeout ... deadlock" with the state of the stuck block.
After the last pass the result ranges are read from the external memory by backdoor.  Every
backdoor access goes through :class:`tb.host.backdoor.Backdoor` (the VPI, no cocotb handle per
word: those kept ~2.3 kB each, 14 GB for alexnet-fc8).  The result also holds the run's
simulator CPU seconds, its peak resident memory and, per progress chunk, a timeline of
cycles, seconds and resident memory.

With ``overlap`` in the spec (``tb.host.runtime.run_job(overlap=True)``) a pass runs the DMA-in and
the MicC together: ``i_dma_start`` then ``i_start`` armed with ``i_cbuf_words`` (the MicC
starts once the DMA wrote the pass's Cbuf words, configures behind the rest of the DMA-in and
holds its first context until the DMA is done), awaited as the DMA's halt then the MicC's;
then the DMA-out.

With ``double_buffer`` in the spec (``tb.host.runtime.run_job(double_buffer=True)``; consecutive
passes in disjoint Dbuf bytes and context IDs, ``tb.host.job_plan``) the passes overlap: while
pass ``p``'s contexts run, the DMA stores pass ``p - 1``'s results, then loads pass ``p + 1``
(when its configuration is unchanged: the Cbufs are only written while the MicC is idle).
Per pass: the MicC starts (armed) as soon as the previous one is done, configures while that
DMA goes on and holds its first context until the DMA is done; the bench waits for the
contexts to start (``o_state``), then starts the next DMA job.  The DMA-out after the last pass
ends the job.  Every phase's start and end clock is recorded.

With ``cbuf_preload`` in the spec (a job resumed after its first passes,
``tb.host.runtime.run_job(checkpoint=...)``) the Cbufs are written by backdoor before the
first pass with what the pass before the job left in them; with ``configure`` (that first
pass keeps the PEs' configuration, ``i_keep``) the bench then configures the PEs with those
registers and no context, as the pass before the job did, before the job's clock starts.

With ``backdoor_in`` in the spec (``tb.host.runtime.run_job(backdoor_in=True)``, a measurement aid
for layers whose DMA-in would take too long to simulate, never the default) the DMA-in of each
pass is not simulated: the bench copies what its descriptors would move from the external
memory image straight into the Dbuf and Cbuf storage, and the pass reports 0 DMA-in cycles.
"""

import json
import os
import resource
import time

import cocotb
import numpy as np
from cocotb.triggers import Edge, First, ReadOnly, RisingEdge, Timer

from tb.common.clock import CLOCK_PERIOD_NS, reset, start_clock
from sw.spec.arch import ArrayParams
from sw.spec.dma import DescFlag, copy_targets, written_dbufs
from sw.spec.ports import dma_ports
from sw.spec.status import MiccState
from tb.host.backdoor import Backdoor

_COUNTERS = ("o_done", "o_halt", "o_state", "o_error", "o_issued", "o_retired", "o_ends",
             "o_cycles", "o_config_cycles", "o_hold_cycles", "o_config_hidden", "o_dbuf_reqs",
             "o_mesh_flits", "o_clock",
             "o_dma_state",
             "o_dma_done", "o_dma_halt", "o_dma_error", "o_dma_desc", "o_dma_cycles",
             "o_ext_rd_bytes", "o_ext_wr_bytes")


def _int(handle):
    value = handle.value
    if not value.is_resolvable:
        raise AssertionError(f"{handle._path} holds unknown bits: {value}")
    return int(value)


def _from_clock0(passes, final, failure, clock0):
    """Count ``o_clock`` and the passes' recorded clocks from ``clock0`` (the job's start,
    after a configuring run) in place."""
    for st in [final] + [r.get("status") for r in passes] + [(failure or {}).get("status")]:
        if st:
            st["o_clock"] -= clock0
    for r in passes:
        for k in r:
            if k.endswith(("_start", "_end")) and isinstance(r[k], int):
                r[k] -= clock0


def _snapshot(dut, npes):
    status = {name: _int(getattr(dut, name)) for name in _COUNTERS}
    status["int_fires"] = [_int(getattr(dut, f"o_int_fires__{n}")) for n in range(npes)]
    status["fp_fires"] = [_int(getattr(dut, f"o_fp_fires__{n}")) for n in range(npes)]
    status["pe_error"] = [_int(getattr(dut, f"o_pe_error__{n}")) for n in range(npes)]
    return status


def peak_rss_mb():
    """Return this process's resident memory in MiB (the simulator's: cocotb runs in it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


class TB:
    """The passes of one spec on one DUT, with progress written for the runtime."""

    def __init__(self, dut, spec):
        self.dut, self.spec = dut, spec
        self.period = CLOCK_PERIOD_NS
        self.progress = spec.get("progress_file")
        self.done_cycles = 0
        self.backdoor_s = 0.0       # seconds of --backdoor-in writes within the run
        self.t0, self.c0 = time.monotonic(), time.process_time()
        # Per chunk: phase, cycles, wall and CPU seconds since the start, MiB resident.
        self.timeline = []

    def note(self, **fields):
        """Write the progress file (atomically) when the runtime asked for one."""
        if not self.progress:
            return
        tmp = self.progress + ".tmp"
        with open(tmp, "w") as f:
            json.dump(fields, f)
        os.replace(tmp, self.progress)

    async def pulse(self, name):
        """Drive ``name`` high for one rising edge."""
        getattr(self.dut, name).value = 1
        await RisingEdge(self.dut.clk)
        getattr(self.dut, name).value = 0

    async def wait(self, halt, bound, what, pass_index, level=False):
        """Await a rising edge of ``halt`` within ``bound`` cycles; return (halted, waited).

        ``level``: return at once when ``halt`` is already high (a block started earlier may
        have halted while the bench awaited another).
        """
        chunk, waited, halted = self.spec["chunk"], 0, False
        if level:
            await ReadOnly()
            if _int(halt):
                await RisingEdge(self.dut.clk)
                return True, 0
        step = min(chunk, bound)
        timer = Timer(step * self.period, unit="ns")
        while waited < bound and not halted:
            res = await First(RisingEdge(halt), timer)
            # A halt edge may be a zero-time glitch of the state bits: believe settled values.
            await ReadOnly()
            halted = bool(_int(halt))
            if res is timer and not halted:
                waited += step
                step = min(chunk, bound - waited)
                if step > 0:
                    timer = Timer(step * self.period, unit="ns")
                rss = peak_rss_mb()
                self.timeline.append((what, self.done_cycles + waited,
                                      round(time.monotonic() - self.t0, 2),
                                      round(time.process_time() - self.c0, 2), rss))
                self.note(pass_index=pass_index, passes=len(self.spec["passes"]), phase=what,
                          cycles=self.done_cycles + waited, issued=_int(self.dut.o_issued),
                          retired=_int(self.dut.o_retired), rss_mb=rss)
        await RisingEdge(self.dut.clk)
        return halted, waited

    async def contexts_started(self, bound):
        """Await the MicC's first context (state CTX, WAIT or DONE, or a halt) within
        ``bound`` cycles; return (started, waited)."""
        dut, started = self.dut, (MiccState.CTX, MiccState.WAIT, MiccState.DONE)
        t0 = _int(dut.o_clock)
        while True:
            await ReadOnly()
            if _int(dut.o_state) in started or _int(dut.o_halt):
                await RisingEdge(dut.clk)
                return True, _int(dut.o_clock) - t0
            waited = _int(dut.o_clock) - t0
            if waited >= bound:
                return False, waited
            await First(Edge(dut.o_state), Edge(dut.o_halt),
                        Timer(min(self.spec["chunk"], bound - waited) * self.period, unit="ns"))


def _extmem(dut, channel):
    """Return the external memory of DMA ``channel`` (``extmem``, ``extmem1``, ...)."""
    return getattr(dut, f"extmem{channel if channel else ''}")


def _load(dut, spec, backdoor):
    """Load every channel's external memory; return its image per channel (uint64 words).

    The memories start at zero: only the non-zero words of the ``.npz`` are written.
    """
    images = []
    with np.load(spec["memories"]) as mem:
        for c in range(spec.get("channels", 1)):
            idx, val = mem[f"idx{c}"], mem[f"val{c}"].astype(np.uint64)
            image = np.zeros(int(idx.max()) + 1 if len(idx) else 0, dtype=np.uint64)
            image[idx] = val
            backdoor.write(_extmem(dut, c).sram.bank.storage, 0, image, skip_zero=True)
            images.append(image)
    return images


def _words(image, first, count):
    """Return ``count`` words of ``image`` from word ``first`` (zeros past its end)."""
    out = np.zeros(count, dtype=np.uint64)
    got = image[first:first + count]
    out[:len(got)] = got
    return out


def _backdoor_in(dut, spec, images, descs, first, backdoor):
    """Do what the DMA-in descriptors ``descs`` (IN, CBUF; a MOVE is refused) would do, by
    backdoor (no cycle simulated).

    ``images``: per channel the external memory's words; ``first``: the memories are still
    all zero (only non-zero words need writing), else every word is written.  Return the
    seconds it took.
    """
    t0 = time.monotonic()
    bd = spec["backdoor_in"]
    for c, ext, loc, length, flags, copies in descs:
        if flags & DescFlag.MOVE:
            # Its source is a Dbuf, not the image (and the backdoor is for DMA-in lists only).
            raise AssertionError(f"backdoor DMA-in: a MOVE descriptor ({ext:#x} -> {loc:#x}, "
                                 f"{length} bytes) is not emulated; run without backdoor_in")
        words = _words(images[c], ext // 8, length // 8)
        if flags & bd["cbuf_flag"]:
            _write_cbuf(dut, bd["cbuf_depth"], loc // 8, words, backdoor, first)
        else:
            k, off = loc // bd["dbuf_bytes"], loc % bd["dbuf_bytes"] // 8
            targets = copy_targets(k, copies)            # multicast (sw.spec.dma)
            if flags & DescFlag.MCAST:
                p = ArrayParams(rows=spec["rows"], cols=spec["cols"], dbuf_bytes=bd["dbuf_bytes"])
                targets = written_dbufs(p, dma_ports(p)[c], k, copies, True)
            for d in targets:
                st = getattr(dut.fdpu, f"dbuf{d}").sram.bank.storage
                backdoor.write(st, off, words, skip_zero=first)
    return time.monotonic() - t0


def _write_cbuf(dut, depth, a, words, backdoor, skip_zero):
    """Write ``words`` into the Cbufs from Cbuf word ``a`` on (banks of ``depth`` words), by
    backdoor; ``skip_zero``: the banks still hold zeros (only non-zero words are written)."""
    while len(words):
        n = min(len(words), depth - a % depth)
        bank = getattr(dut.fdpu.cbuf, f"bank{a // depth}").bank.storage
        backdoor.write(bank, a % depth, words[:n], skip_zero=skip_zero)
        a, words = a + n, words[n:]


async def _double_buffered(dut, spec, tb, set_lists, npes):
    """Run the passes of a double-buffered spec (module doc); return (records, failure).

    A record holds the pass's status after its MicC, ``in_cycles``/``out_cycles`` (its DMA
    jobs) and the clocks ``in_start``/``in_end``, ``micc_start``/``ctx_start``/``micc_end``,
    ``out_start``/``out_end``.
    """
    specs = spec["passes"]
    recs = [dict(in_cycles=0, out_cycles=0) for _ in specs]

    def clock():
        return _int(dut.o_clock)

    async def dma_start(lists, j, what):
        """Start a DMA job (``in`` or ``out`` of pass ``j``); return whether it runs."""
        if not set_lists(lists):
            return False
        recs[j][f"{what}_start"] = clock()
        await tb.pulse("i_dma_start")
        recs[j][f"{what}_job"] = True
        return True

    async def dma_wait(j, what):
        """Await the running DMA job (``what`` of pass ``j``); return a failure or None."""
        if not recs[j].pop(f"{what}_job", False):
            return None
        halted, waited = await tb.wait(dut.o_dma_halt, spec["dma_max_cycles"], f"dma_{what}", j,
                                       level=True)
        recs[j][f"{what}_cycles"] = _int(dut.o_dma_cycles)
        recs[j][f"{what}_end"] = recs[j][f"{what}_start"] + recs[j][f"{what}_cycles"]
        if halted and _int(dut.o_dma_done):
            return None
        return dict(pass_index=j, phase=what, halted=halted, waited=waited,
                    status=_snapshot(dut, npes))

    for j, ps in enumerate(specs):
        rec = recs[j]
        for name, value in ps["regs"].items():
            getattr(dut, name).value = value
        if not ps["prefetch"]:
            # The first pass, or a new configuration: the DMA-in now, the MicC armed on it.
            await dma_start(ps["dma_in"], j, "in")
        rec["micc_start"] = clock()
        await tb.pulse("i_start")
        fail = await dma_wait(j, "in")
        if fail:
            return recs[:j + 1], fail
        started, waited = await tb.contexts_started(spec["max_cycles"])
        if not started:
            return recs[:j + 1], dict(pass_index=j, phase="compute", halted=False,
                                      waited=waited, status=_snapshot(dut, npes))
        rec["ctx_start"] = clock()
        # Behind the contexts: the previous pass's results out, then the next pass's data in.
        if j and "out_start" not in recs[j - 1] and \
                await dma_start(specs[j - 1]["dma_out"], j - 1, "out"):
            fail = await dma_wait(j - 1, "out")
            if fail:
                return recs[:j + 1], fail
        if j + 1 < len(specs) and specs[j + 1]["prefetch"]:
            await dma_start(specs[j + 1]["dma_in"], j + 1, "in")
        halted, waited = await tb.wait(dut.o_halt, spec["max_cycles"], "compute", j, level=True)
        rec["micc_end"] = clock()
        rec["status"] = _snapshot(dut, npes)
        if not (halted and not _int(dut.o_error) and _int(dut.o_done)):
            return recs[:j + 1], dict(pass_index=j, phase="compute", halted=halted,
                                      waited=waited, status=rec["status"])
        tb.done_cycles = clock()
        tb.note(pass_index=j + 1, passes=len(specs), phase="done", cycles=tb.done_cycles,
                issued=0, retired=0)
        if j + 1 < len(specs) and not specs[j + 1]["prefetch"]:
            # The next pass loads its configuration: store this pass's results first.
            if await dma_start(ps["dma_out"], j, "out"):
                fail = await dma_wait(j, "out")
                if fail:
                    return recs[:j + 1], fail
    last = len(specs) - 1
    if last >= 0 and "out_start" not in recs[last] and \
            await dma_start(specs[last]["dma_out"], last, "out"):
        fail = await dma_wait(last, "out")
        if fail:
            return recs, fail
    return recs, None


@cocotb.test()
async def run_job(dut):
    """Load the external memory, run every pass (DMA in, compute, DMA out), read results."""
    with open(os.environ["FDPU_RUN_SPEC"]) as f:
        spec = json.load(f)
    npes = spec["rows"] * spec["cols"]
    start_clock(dut.clk)
    for name in ("i_start", "i_dma_start", "i_dma_list", "i_dma_count", "i_n_config",
                 "i_n_ctx", "i_contexts", "i_window", "i_ends", "i_cbuf_words",
                 "i_ctx_base"):
        getattr(dut, name).value = 0
    for name in spec["passes"][0]["regs"] if spec["passes"] else ():
        getattr(dut, name).value = 0              # the other ports' i_n_config_<p>
    for c in range(1, spec.get("channels", 1)):
        getattr(dut, f"i_dma_list_{c}").value = 0
        getattr(dut, f"i_dma_count_{c}").value = 0
    mem = spec["mem"]
    dut.i_mem_latency.value = mem["latency"]
    dut.i_mem_bw.value = mem["bw"]
    dut.i_mem_stall.value = mem["stall"]
    await reset(dut.clk, dut.rst)
    t0 = time.monotonic()
    backdoor = Backdoor()
    image = _load(dut, spec, backdoor)
    for a, words in spec.get("cbuf_preload", ()):
        # A resumed job: the Cbufs hold what the pass before it loaded.
        _write_cbuf(dut, spec["cbuf_depth"], a, np.array(words, dtype=np.uint64), backdoor,
                    True)
    load_s = time.monotonic() - t0
    tb = TB(dut, spec)
    if spec.get("configure"):
        # A resumed job whose first pass keeps the configuration: make it, as the pass before
        # the job did (a MicC run with no context), before the job's clock starts.
        for name, value in spec["configure"].items():
            getattr(dut, name).value = value
        await tb.pulse("i_start")
        halted, _ = await tb.wait(dut.o_halt, spec["max_cycles"], "configure", 0, level=True)
        if not (halted and _int(dut.o_done)):
            raise AssertionError(f"configuring the PEs before the first pass failed: "
                                 f"{_snapshot(dut, npes)}")
    clock0 = _int(dut.o_clock) if spec.get("configure") else 0
    t1 = time.monotonic()
    passes, failure = [], None
    overlap = spec.get("overlap", False)
    nch = spec.get("channels", 1)

    def set_lists(lists):
        """Set every channel's list registers; return whether any descriptor is to run."""
        lists = lists + [[0, 0]] * (nch - len(lists))
        for c, (lst, count) in enumerate(lists):
            sfx = f"_{c}" if c else ""
            getattr(dut, f"i_dma_list{sfx}").value = lst
            getattr(dut, f"i_dma_count{sfx}").value = count
        return any(count for _, count in lists)

    if spec.get("double_buffer"):
        passes, failure = await _double_buffered(dut, spec, tb, set_lists, npes)
    for j, ps in enumerate(spec["passes"] if not spec.get("double_buffer") else ()):
        rec = {}
        phases = ("in+compute", "out") if overlap else ("in", "compute", "out")
        for phase in phases:
            before = _int(dut.o_clock)
            if phase == "in+compute":
                # The DMA-in and the MicC together: the MicC starts once the Cbufs are loaded,
                # configures while the DMA fills the Dbufs, holds its first context until the
                # DMA is done.
                for name, value in ps["regs"].items():
                    getattr(dut, name).value = value
                if spec.get("backdoor_in"):
                    tb.backdoor_s += _backdoor_in(dut, spec, image, ps["in_descs"], j == 0,
                                                   backdoor)
                dma_on = set_lists(ps["dma_in"]) and not spec.get("backdoor_in")
                if dma_on:
                    await tb.pulse("i_dma_start")
                await tb.pulse("i_start")
                halted, waited, ok = True, 0, True
                if dma_on:
                    halted, waited = await tb.wait(dut.o_dma_halt, spec["dma_max_cycles"],
                                                    "dma_in", j, level=True)
                    ok = halted and _int(dut.o_dma_done)
                rec["in_cycles"] = _int(dut.o_dma_cycles) if dma_on else 0
                # Contexts issued by the cycle after the DMA-in's end (early start: > 0).
                rec["started_in"] = _int(dut.o_issued) if dma_on else 0
                if not ok:
                    phase = "in"
                else:
                    halted, waited = await tb.wait(dut.o_halt, spec["max_cycles"], "compute",
                                                    j, level=True)
                    ok = halted and not _int(dut.o_error) and _int(dut.o_done)
                    phase = "compute"
                rec["status"] = _snapshot(dut, npes)
                cycles = _int(dut.o_clock) - before
                rec["span_cycles"] = cycles
            elif phase == "compute":
                for name, value in ps["regs"].items():
                    getattr(dut, name).value = value
                await tb.pulse("i_start")
                halted, waited = await tb.wait(dut.o_halt, spec["max_cycles"], phase, j)
                ok = halted and not _int(dut.o_error) and _int(dut.o_done)
                status = _snapshot(dut, npes)
                rec["status"] = status
                cycles = _int(dut.o_clock) - before
                rec["compute_cycles"] = cycles
            else:
                if phase == "in" and spec.get("backdoor_in"):
                    tb.backdoor_s += _backdoor_in(dut, spec, image, ps["in_descs"], j == 0,
                                                   backdoor)
                    rec["in_cycles"] = 0
                    continue
                # Per channel [list, count].
                lists = ps["dma_in"] if phase == "in" else ps["dma_out"]
                if not set_lists(lists):
                    rec[f"{phase}_cycles"] = 0
                    continue
                await tb.pulse("i_dma_start")
                halted, waited = await tb.wait(dut.o_dma_halt, spec["dma_max_cycles"],
                                                f"dma_{phase}", j)
                ok = halted and _int(dut.o_dma_done)
                cycles = _int(dut.o_clock) - before
                rec[f"{phase}_cycles"] = cycles
            tb.done_cycles += cycles
            if not ok:
                failure = dict(pass_index=j, phase=phase, halted=halted, waited=waited,
                               status=_snapshot(dut, npes))
                break
        passes.append(rec)
        tb.note(pass_index=j + 1, passes=len(spec["passes"]), phase="done",
                 cycles=tb.done_cycles, issued=0, retired=0)
        if failure:
            break
    run_s, run_cpu_s = time.monotonic() - t1, time.process_time() - tb.c0
    final = _snapshot(dut, npes)
    _from_clock0(passes, final, failure, clock0)
    reads = {}
    if failure is None:
        for j, (c, first, count) in enumerate(spec["reads"]):
            reads[f"r{j}"] = backdoor.read(_extmem(dut, c).sram.bank.storage, first, count)
    result = dict(passes=passes, failure=failure, final=final, load_s=load_s, run_s=run_s,
                  run_cpu_s=run_cpu_s, backdoor_s=tb.backdoor_s,
                  max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                  timeline=tb.timeline)
    np.savez(spec["out"], result=np.array(json.dumps(result)), **reads)
