"""The runtime's entry points: run images, jobs of passes and FC plans on the RTL system.

Contract
--------
* :func:`run_job` runs a list of passes on Icarus or Verilator in one simulation: it plans
  the external memory and the DMA descriptor lists (:func:`tb.host.job_plan.plan_job`),
  builds the system (:class:`tb.host.extmem.FdpuSystem`: top + external memory model) and
  runs ``tb.top.bench_run``: per pass DMA in, compute, DMA out, Python awaiting only each
  phase's halt (with a cycle bound).  It returns a :class:`tb.host.run_results.JobRun`:
  per-pass :class:`~tb.host.run_results.RtlRun` (counters, DMA cycles, results), external
  bytes and the peak bandwidth requirement.  With ``checkpoint=DIR`` it runs the job as
  segments of passes, one simulation each, keeps each finished segment in ``DIR`` and, run
  again, simulates only the segments not kept there (:mod:`tb.host.checkpoint`).
* :func:`run_rtl` is a one-pass job; :func:`run_fc_rtl` runs every pass of an FC plan in one
  simulation and gathers the result like :func:`sw.models.golden_fc.run_fc` (exact) does, so the
  two can be compared bit for bit; :func:`fc_cycle_bound` is its default compute cycle bound.
* :func:`run_chain_rtl` runs consecutive layers chained on chip (``sw.compiler.chain``), one
  pass each, in one simulation; :func:`layer_job` is one layer's part of that job.

Errors: an image whose configuration does not fit the Cbufs raises :class:`FdpuError` before
any simulation (the MicC also flags it in hardware); a run that does not finish within its
cycle bound, or ends with error bits, raises :class:`~tb.host.run_results.RtlError` whose
message names the pass and phase, and the MicC state, contexts issued/retired/ended and every
PE's error flags (or the DMA's state, descriptor and error bits).
"""

import dataclasses
import functools
import json
import os
import shutil
import tempfile
import threading

import numpy as np

from sw.compiler import chain
from sw.compiler.blocking import engine_costs
from sw.compiler.program import empty_result, gather_pass, pass_images
from sw.spec.errors import FdpuError
from sw.spec.system import SIMULATORS
from tb.host import runner
from tb.host.checkpoint import Checkpoint, default_segment_passes, segment_key
from tb.host.extmem import FdpuSystem
from tb.host.job_plan import DESC_CBUF, MemModel, cbuf_port_words, plan_job
from tb.host.run_results import JobRun, RtlError, RtlRun, describe_dma, describe_status

#: Where RTL runs keep their run folders (default ``build/runtime`` in the checkout).
WORK_DIR_ENV = "FDPU_WORK_DIR"
#: Set (to anything) to keep a run's folder (its memories, spec and result) after it ends.
KEEP_RUNS_ENV = "FDPU_KEEP_RUNS"

__all__ = ["run_job", "run_rtl", "run_fc_rtl", "run_chain_rtl", "layer_job",
           "fc_cycle_bound"]


def run_job(params, passes, sim, *, mem=MemModel(), max_cycles=None, dma_max_cycles=None,
            waves=False, progress=None, depth=4, timeout_s=7200, configs=None,
            backdoor_in=False, dma_channels=1, config_ports=1, overlap=False,
            double_buffer=False, checkpoint=None, segment_passes=None, system=None,
            early_start=False, edge_multicast=False, keep_config=True, config_spans=False):
    """Run ``passes`` on the RTL system (top + external memory) in one simulation, or with
    ``checkpoint`` in resumable segments.

    Parameters
    ----------
    params : ArrayParams
    passes : sequence of (Image, reads)
        Each pass's image and the Dbuf ranges ``(global address, nbytes)`` to store out.
    sim : {"icarus", "verilator"}
    mem : MemModel
        External memory latency, bandwidth and stalls.
    max_cycles : int, optional
        Cycle bound of each compute phase; default ``200_000 + 2_000 * contexts`` (``run_fc_rtl``:
        :func:`fc_cycle_bound`).
    dma_max_cycles : int, optional
        Cycle bound of each DMA phase; default from the words moved, the bandwidth and the
        latency.
    progress : callable, optional
        Called (from this thread) with a dict ``pass_index, passes, phase, cycles`` about
        twice a second while the simulation runs.
    configs : list of (list, list), optional
        Cbuf words (configuration records, CTX templates) per pass instead of
        :meth:`~sw.compiler.image.Image.cbuf_port_words` (tests of bad configurations; the records
        are one list (port 0) or one list per configuration port; words past a port's Cbuf
        region are not loaded, the MicC is told the full count).
    backdoor_in : bool
        Do not simulate the DMA-in of the passes: the bench writes what its descriptors would
        move into the Dbufs and Cbufs by backdoor (``tb.top.bench_run``); their ``in_cycles``
        are 0 and :attr:`JobRun.backdoor_in` says so.  A measurement aid for the compute of
        layers whose DMA-in is too long to simulate; the DMA figures must come from elsewhere.
    dma_channels : int
        DMA channels of the top, each with its own external memory (``tb.host.extmem``): the
        Dbufs of a pass are spread over the channels by bytes, each Dbuf's runs on one
        channel (the Cbuf image stays on channel 0); the DMA-out is spread the same way.
    config_ports : int
        Configuration ports of the MicC (1 .. 4, dividing ``params.cbufs``): the records are
        split by PE over the ports (:meth:`~sw.compiler.image.Image.cbuf_port_words`), port ``q``'s
        words loaded into Cbuf region ``q``.
    overlap : bool
        Per pass, start the DMA-in and (armed, ``i_cbuf_words``) the MicC together: the MicC
        starts as soon as channel 0 has written the pass's Cbuf words (its first
        descriptors) and configures while the DMA goes on filling the Dbufs; the first
        context waits until the DMA is done (the MicC's HOLD).
    double_buffer : bool
        Overlap the passes (needs ``overlap``; consecutive passes in disjoint Dbuf bytes, as a
        double-buffered plan lays them out, else :class:`FdpuError`): while pass ``p``'s
        contexts run the DMA stores pass ``p - 1``'s results and loads pass ``p + 1``; the
        MicC of pass ``p + 1`` starts when pass ``p`` is done and holds its contexts until
        that DMA is done (``tb.top.bench_run``).  :attr:`JobRun.cycles` is then the measured
        clock from the first DMA start to the last DMA end.
    checkpoint : str or Path, optional
        A directory: run the job as segments of ``segment_passes`` passes, one simulation
        each, keep each finished segment there and load, instead of simulating, the segments
        a previous run with the same directory kept (:mod:`tb.host.checkpoint`: what a
        segment restores, and the two differences from a run straight through).  The result
        is :meth:`JobRun.concat` of the segments; ``wall_s["resumed"]`` counts those loaded.
    segment_passes : int, optional
        Passes per segment with ``checkpoint``.  Default: 1 where segments give the cycles of
        a run straight through (no double buffering, the memory at full bandwidth without
        stalls), else the whole job as one segment (kept when it ends); a number splits
        anyway, and the cycles then differ (:mod:`tb.host.checkpoint`).  A chained job (passes
        with moves) is one segment: its Dbufs carry the activations.

    system : sw.spec.system.System, optional
        The system around the array as one value, the one the performance model takes: its
        DMA channels, memory latency and bandwidth, configuration ports, overlap and early
        start replace ``dma_channels``, ``mem`` (latency and bandwidth; ``mem.stall`` is
        kept), ``config_ports``, ``overlap``, ``early_start``, ``edge_multicast`` and
        ``config_spans``.
    early_start : bool
        Each context starts as soon as its own data are in the Dbufs instead of after the
        whole DMA-in (needs ``overlap`` and a simulated DMA-in): the DMA-in is ordered group
        of contexts by group with a fence after each, and the top holds each context until
        every channel has passed its group's fence (``tb.host.job_plan``,
        ``docs/system.md``).
    edge_multicast : bool
        Blocks several Dbufs of an edge hold are sent as one edge-multicast flit a word
        (``sw.compiler.dma_plan.delivery_windows``, ``docs/system.md``).
    config_spans : bool
        The Cbuf records hold the slots PEs share once, each record sent to a span of PEs
        (:meth:`~sw.compiler.image.Image.cbuf_port_words` with ``spans``); else one PE's each.
    keep_config : bool
        A pass whose configuration equals the previous pass's keeps the PEs' configuration
        instead of sending it again (the MicC's ``i_keep``, ``tb.host.job_plan``); ``False``
        configures every pass (a measurement aid).

    Returns
    -------
    JobRun

    Raises
    ------
    RtlError
        "timeout ... deadlock" when a phase passes its bound, or the error bits a block raised.
    """
    if sim not in SIMULATORS:
        raise FdpuError(f"sim must be icarus or verilator, not {sim!r}")
    if system is not None:
        mem = MemModel(latency=system.mem_latency, bandwidth=system.mem_bandwidth,
                       stall=mem.stall)
        dma_channels, config_ports = system.dma_channels, system.config_ports
        overlap, early_start = system.overlap, system.early_start
        edge_multicast = system.edge_multicast
        config_spans = system.config_spans
    mem.registers()
    if double_buffer and (not overlap or backdoor_in):
        raise FdpuError("double buffering overlaps the DMA with the contexts: it needs overlap "
                        "(not --no-overlap) and a simulated DMA-in (not --backdoor-in)")
    if early_start and (not overlap or backdoor_in):
        raise FdpuError("early start runs contexts beside their pass's DMA-in: it needs overlap "
                        "(not --no-overlap) and a simulated DMA-in (not --backdoor-in)")
    kwargs = dict(mem=mem, max_cycles=max_cycles, dma_max_cycles=dma_max_cycles, waves=waves,
                  depth=depth, timeout_s=timeout_s, backdoor_in=backdoor_in,
                  dma_channels=dma_channels, config_ports=config_ports, overlap=overlap,
                  double_buffer=double_buffer, early_start=bool(early_start),
                  edge_multicast=bool(edge_multicast), keep_config=bool(keep_config),
                  config_spans=bool(config_spans))
    if checkpoint is None:
        return _run_segment(params, passes, sim, configs=configs, progress=progress, **kwargs)
    if configs is not None:
        raise FdpuError("a checkpointed job runs the images' own configurations (configs "
                        "is for tests of bad configurations)")
    chained = any(len(ps) > 2 and ps[2] for ps in passes)
    if segment_passes is None:
        segment_passes = len(passes) if chained else \
            default_segment_passes(len(passes), mem, double_buffer)
    if not isinstance(segment_passes, int) or isinstance(segment_passes, bool) \
            or segment_passes < 1:
        raise FdpuError(f"segment_passes must be a positive integer, got {segment_passes!r}")
    if chained and segment_passes < len(passes):
        raise FdpuError("the passes of a chained job keep their outputs in the Dbufs for the "
                        "next one: they run as one segment (give no segment_passes)")
    store = Checkpoint(checkpoint)
    jobs, resumed = [], 0
    for a in range(0, len(passes), segment_passes):
        loaded = cbuf_port_words(params, passes[a - 1][0], config_ports,
                                 spans=config_spans) if a else None
        shown = None if progress is None else _offset_progress(progress, a, len(passes))
        job = _run_segment(params, passes[a:a + segment_passes], sim, cbuf_loaded=loaded,
                           store=store, progress=shown, **kwargs)
        resumed += job.wall_s.get("resumed", 0)
        jobs.append(job)
    job = JobRun.concat(jobs)
    job.wall_s = dict(job.wall_s, segments=len(jobs), resumed=resumed)
    return job


@functools.lru_cache(maxsize=2)
def _system(params, ext_bytes, depth, dma_channels, config_ports):
    """Return the system top (:class:`FdpuSystem`) of a job; the segments of one job share
    it, and with it its Verilog (``tb.host.runner``)."""
    return FdpuSystem(params, ext_bytes=ext_bytes, depth=depth, dma_channels=dma_channels,
                      config_ports=config_ports)


def _offset_progress(progress, first, passes):
    """Return a progress callback of a segment from pass ``first`` of ``passes``, calling
    ``progress`` with the job's pass index."""
    def shown(info):
        progress(dict(info, pass_index=first + info.get("pass_index", 0), passes=passes))
    return shown


def _run_segment(params, passes, sim, *, mem, max_cycles, dma_max_cycles, waves, progress,
                 depth, timeout_s, configs=None, backdoor_in, dma_channels, config_ports,
                 overlap, double_buffer, cbuf_loaded=None, store=None, early_start=False,
                 edge_multicast=False, keep_config=True, config_spans=False):
    """Run ``passes`` in one simulation (:func:`run_job`'s arguments), starting from Cbufs
    that hold ``cbuf_loaded``; with a :class:`~tb.host.checkpoint.Checkpoint` ``store``, load
    the result it keeps for this segment instead, or keep the new one there."""
    regs_mem = mem.registers()
    p = params
    plan = plan_job(p, passes, configs=configs, dma_channels=dma_channels,
                    config_ports=config_ports, backdoor_in=backdoor_in, overlap=overlap,
                    double_buffer=double_buffer, cbuf_loaded=cbuf_loaded,
                    early_start=early_start, edge_multicast=edge_multicast,
                    config_spans=config_spans,
                    keep_config=keep_config)
    size = plan.ext_size(sim)
    if max_cycles is None:
        max_cycles = plan.default_max_cycles()
    if dma_max_cycles is None:
        dma_max_cycles = plan.default_dma_max_cycles(regs_mem)
    work_dir = tempfile.mkdtemp(prefix="run-", dir=work_root())
    try:
        return _run_in(work_dir, p, plan, size, regs_mem, passes, sim, max_cycles,
                       dma_max_cycles, waves, progress, timeout_s, depth, dma_channels,
                       config_ports, backdoor_in, overlap, double_buffer, store)
    finally:
        if not waves and not os.environ.get(KEEP_RUNS_ENV):
            shutil.rmtree(work_dir, ignore_errors=True)


def work_root():
    """Return the folder RTL runs keep their run folders in while they run
    (``$FDPU_WORK_DIR``, else ``build/runtime`` in the checkout), created if needed."""
    root = os.environ.get(WORK_DIR_ENV) or os.path.join(runner.BUILD_ROOT.parent, "runtime")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise FdpuError(f"{root}: cannot create the RTL runs' folder ({exc.strerror or exc}); "
                        f"set {WORK_DIR_ENV} to a writable folder") from None
    return root


def _run_in(work_dir, p, plan, size, regs_mem, passes, sim, max_cycles, dma_max_cycles, waves,
            progress, timeout_s, depth, dma_channels, config_ports, backdoor_in, overlap,
            double_buffer, store):
    """Run the planned job with its files in ``work_dir`` (see :func:`_run_segment`)."""
    mem_path = os.path.join(work_dir, "memories.npz")
    arrays = plan.memory_arrays(size)
    np.savez(mem_path, **arrays)
    progress_file = os.path.join(work_dir, "progress.json")
    spec = dict(rows=p.rows, cols=p.cols, memories=mem_path, mem=regs_mem, channels=dma_channels,
                overlap=bool(overlap), double_buffer=bool(double_buffer),
                out=os.path.join(work_dir, "result.npz"), passes=plan.spec_passes,
                reads=plan.reads,
                max_cycles=int(max_cycles), dma_max_cycles=int(dma_max_cycles),
                backdoor_in=dict(cbuf_flag=int(DESC_CBUF), cbufs=p.cbufs,
                                 cbuf_depth=p.cbuf_bytes // 8, dbuf_bytes=p.dbuf_bytes)
                if backdoor_in else None,
                chunk=int(min(max_cycles, 100_000)),
                cbuf_depth=p.cbuf_bytes // 8,
                cbuf_preload=[[int(a), [int(w) for w in words]] for a, words in plan.cbuf_preload],
                configure=plan.configure,
                progress_file=progress_file if progress else None)
    key = kept = None
    if store is not None:
        key = segment_key(sim, p, dict(ext_bytes=size, depth=depth, dma_channels=dma_channels,
                                       config_ports=config_ports, waves=bool(waves)),
                          spec, arrays, plan.cbuf_preload)
        kept = store.get(key, len(passes))
    if kept is not None:
        spec["out"] = str(kept)
        res = None
    else:
        spec_path = os.path.join(work_dir, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        top = _system(p, size, depth, dma_channels, config_ports)
        res = _simulate(top, sim, spec_path, waves, timeout_s, progress, progress_file)
    with np.load(spec["out"]) as z:
        out = json.loads(str(z["result"]))
        blobs = [z[f"r{j}"].astype("<u8").tobytes() if f"r{j}" in z else b""
                 for j in range(len(plan.reads))]
    if out["failure"] is not None:
        raise _failure(out["failure"], plan.spec_passes, sim, p)
    if store is not None and kept is None:
        store.put(key, spec["out"])
    runs = []
    for j, rec in enumerate(out["passes"]):
        runs.append(RtlRun(p, rec["status"], rec["in_cycles"], rec["out_cycles"],
                           _reader(plan.results[j], plan.result_base, blobs),
                           overlap=bool(overlap), span=rec.get("span_cycles", 0),
                           clocks={k: v for k, v in rec.items() if k.endswith(("_start", "_end"))}
                           if double_buffer else None, started_in=rec.get("started_in")))
    return JobRun(p, runs, out["final"], plan.ext_in, plan.ext_out,
                  dict(build_s=res.build_s if res else 0.0, load_s=out["load_s"],
                       run_s=out["run_s"], run_cpu_s=out.get("run_cpu_s"),
                       backdoor_s=out.get("backdoor_s", 0.0),
                       max_rss_mb=out.get("max_rss_mb"),
                       timeline=out.get("timeline", []), resumed=int(kept is not None)),
                  str(res.waves) if res and res.waves else None, bool(backdoor_in),
                  plan.descriptors, bool(double_buffer))


def _simulate(top, sim, spec_path, waves, timeout_s, progress, progress_file):
    """Run ``tb.top.bench_run`` on ``top`` with the run spec at ``spec_path``; return the run.

    With ``progress``, the simulation runs in a thread and this one calls ``progress`` with
    the contents of ``progress_file`` about twice a second.
    """
    box = {}

    def simulate():
        try:
            box["res"] = runner.run_cocotb(top, {}, "tb.top.bench_run", sim, name="fdpu_system",
                                           waves=waves, extra_env={"FDPU_RUN_SPEC": spec_path},
                                           timeout_s=timeout_s, seed=1)
        except BaseException as exc:        # noqa: BLE001 (re-raised below)
            box["exc"] = exc

    if progress:
        worker = threading.Thread(target=simulate, daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.5)
                try:
                    with open(progress_file) as f:
                        progress(json.load(f))
                except (OSError, ValueError):
                    pass
        except BaseException:               # Ctrl-C, SIGTERM: the simulator goes too
            runner.end_groups()
            raise
    else:
        simulate()
    if "exc" in box:
        raise box["exc"]
    return box["res"]


def _failure(fail, spec_passes, sim, params):
    """Return the :class:`RtlError` of the bench's ``failure`` record (pass, phase, status)."""
    st, j, phase = fail["status"], fail["pass_index"], fail["phase"]
    if phase == "compute":
        if not fail["halted"]:
            return RtlError(f"timeout after {fail['waited']} cycles on {sim}: deadlock or a "
                            f"graph that never finishes (pass {j}): "
                            f"{describe_status(st, params)}")
        return RtlError(f"the RTL run on {sim} stopped with an error after "
                        f"{st['o_cycles']} cycles (pass {j}): {describe_status(st, params)}")
    what = f"DMA {phase} of pass {j}"
    # Channel 0's descriptor count of the pass's DMA phase.
    count = spec_passes[j]["dma_in" if phase == "in" else "dma_out"][0][1]
    dma = describe_dma(st, count)
    if not fail["halted"]:
        return RtlError(f"timeout after {fail['waited']} cycles on {sim}: deadlock in the "
                        f"{what}: {dma}")
    return RtlError(f"the {what} on {sim} stopped with an error: {dma}")


def _reader(where, result_base, blobs):
    """Return ``read(address, nbytes)`` of a pass's results ``where`` in the read-back
    ``blobs`` (``tb.host.job_plan.JobPlan.results``, ``result_base``)."""
    table = {a: (c, at) for a, n, c, at in where}

    def read(address, nbytes):
        c, at = table[address]
        j, lo = result_base[c]
        return blobs[j][at - lo:at - lo + nbytes]
    return read


def run_rtl(image, sim, *, reads=(), config=None, **kwargs):
    """Run one ``image`` on the RTL system (a one-pass :func:`run_job`); return its RtlRun.

    ``reads``: Dbuf ranges ``(address, nbytes)`` to read back (``RtlRun.read``); ``config``:
    CONFIG flits and CTX templates instead of the image's (tests of bad configurations).
    ``kwargs`` go to :func:`run_job`.
    """
    job = run_job(image.params, [(image, list(reads))], sim,
                  configs=None if config is None else [config], **kwargs)
    run = job.passes[0]
    run.job = job
    return run


def fc_cycle_bound(plan):
    """Return a deadlock bound on the MicC cycles of one pass of ``plan``.

    200k cycles plus 8 cycles per instruction an engine issues in the pass (a PE issues 1-3
    a cycle when it runs; 8 leaves room for a slow mesh): alexnet-fc8 needs over a million
    cycles, a small layer keeps the fixed 200k.
    """
    cols = min(plan.Cw, 64)
    _, integer, fp = engine_costs(dataclasses.replace(plan.engine, Cw=cols, chunks=1))
    contexts = max(plan.pass_contexts(p) for p in range(plan.passes))
    issues = (integer + fp) * plan.Cw / cols * contexts
    return int(200_000 + 2_000 * contexts * plan.chunks + 8 * issues)


def run_fc_rtl(plan, weights, inputs, sim, first_passes=None, **kwargs):
    """Run every pass of ``plan`` on the RTL in one simulation; return ``(result, job)``.

    The external memory holds every pass's configuration, data and results; per pass the DMA
    loads it, the MicC runs it, the DMA stores its outputs.  Mirrors
    :func:`sw.models.golden_fc.run_fc` with ``exact=True`` (same images, same gathering), so
    the N x K float16 result is comparable bit for bit.  ``kwargs`` go to :func:`run_job`;
    ``max_cycles`` defaults to :func:`fc_cycle_bound`.
    """
    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    passes, outs = [], []
    for image, outputs in pass_images(plan, w16, x16):
        if first_passes is not None and len(passes) == first_passes:
            break
        passes.append((image, [(addr, plan.output_bytes) for _, addr in outputs]))
        outs.append(outputs)
    if kwargs.get("max_cycles") is None:
        kwargs["max_cycles"] = fc_cycle_bound(plan)
    system = kwargs.get("system")
    overlap = system.overlap if system is not None else kwargs.get("overlap")
    kwargs.setdefault("double_buffer", bool(plan.double_buffer and overlap
                                            and not kwargs.get("backdoor_in")))
    job = run_job(plan.params, passes, sim, **kwargs)
    y = empty_result(plan)
    for run, outputs in zip(job.passes, outs):
        gather_pass(plan, y, outputs, run.read)
    return y, job


def run_chain_rtl(plans, weights, inputs, sim, **kwargs):
    """Run consecutive layers chained on chip in one simulation; return ``(result, job)``.

    ``plans``: the layers' plans (one pass each, every link chainable:
    :func:`sw.compiler.chain.link_error`); ``weights``: their ``K x C`` float16 arrays;
    ``inputs``: the first layer's ``N x C``.  Pass ``i`` of the job is layer ``i``: its
    outputs stay in the Dbufs, copied by MOVE descriptors into the next layer's input blocks
    (:func:`sw.compiler.chain.chained_passes`); only the last layer's are stored to external
    memory and returned (``N x K`` float16, comparable bit for bit with the golden model's
    run of the last plan on the previous layers' outputs).  :func:`layer_job` gives one
    layer's part of the job.  ``kwargs`` as :func:`run_job` (no double buffering: each layer
    is one pass); ``max_cycles`` defaults to the largest :func:`fc_cycle_bound`.
    """
    passes = chain.chained_passes(plans, weights, inputs)
    if kwargs.get("max_cycles") is None:
        kwargs["max_cycles"] = max(fc_cycle_bound(plan) for plan in plans)
    job = run_job(plans[0].params, [(image, reads, moves) for image, reads, moves, _ in passes],
                  sim, **kwargs)
    y = empty_result(plans[-1])
    gather_pass(plans[-1], y, passes[-1][3], job.passes[-1].read)
    return y, job


def layer_job(job, i):
    """Return pass ``i`` of a chained job (:func:`run_chain_rtl`) as a job of its own: its
    run, its external bytes in and out (the job's counters are for all passes together)."""
    final = dict(job.final, o_ext_rd_bytes=job.ext_in[i], o_ext_wr_bytes=job.ext_out[i])
    return dataclasses.replace(job, passes=[job.passes[i]], final=final,
                               ext_in=[job.ext_in[i]], ext_out=[job.ext_out[i]],
                               descriptors=[job.descriptors[i]] if job.descriptors else None)
