"""What an RTL run did: per-pass and per-job figures, the status names and the run's error.

Contract
--------
* :class:`RtlRun`: one pass of an RTL job (the top's registers after its compute phase, the
  cycles of its DMA phases, a reader of what the DMA stored out of the Dbufs) and the cycle
  figures derived from them.
* :class:`JobRun`: every pass of one simulation, the top's final registers, the external bytes
  each pass moved and the peak bandwidth requirement.
* :func:`describe_status` and :func:`describe_dma` put a status dict into words (MicC state,
  contexts, error bits of the top and of every PE; DMA state, descriptor, error bits) with the
  name tables of ``sw.spec.status`` (:data:`MICC_STATES`, :data:`MICC_ERRORS`,
  :data:`PE_ERRORS`, :data:`DMA_STATES`, :data:`DMA_ERRORS`).
* :class:`RtlError` is what a run that ends in an error or does not finish raises.
"""

from dataclasses import dataclass, replace

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.status import DmaError, DmaState, MiccError, MiccState, PeError

__all__ = ["RtlError", "RtlRun", "JobRun", "describe_status", "describe_dma", "MICC_STATES",
           "MICC_ERRORS", "PE_ERRORS", "DMA_STATES", "DMA_ERRORS"]

#: Names of the MicC states, by value (``sw.spec.status.MiccState``).
MICC_STATES = tuple(s.name for s in sorted(MiccState, key=lambda s: s.value))
#: Names of the MicC error bits, bit 0 first (``sw.spec.status.MiccError``).
MICC_ERRORS = tuple(e.name for e in MiccError)
#: Names of the PE error bits, bit 0 first (``sw.spec.status.PeError``).
PE_ERRORS = tuple(e.name for e in PeError)
#: Names of the DMA states and error bits (``sw.spec.status.DmaState``, ``DmaError``).
DMA_STATES = tuple(s.name for s in sorted(DmaState, key=lambda s: s.value))
DMA_ERRORS = tuple(e.name for e in DmaError)

#: Names of the top's ``o_error`` bits (``hw.top.ERROR_BITS``).
_ERROR_NAMES = tuple(f"MICC_{e}" for e in MICC_ERRORS) + tuple(f"PE_{e}" for e in PE_ERRORS) \
    + ("STRAY_REQUEST", "STRAY_EDGE")


class RtlError(FdpuError):
    """The RTL run ended in an error or did not finish (deadlock/timeout)."""


@dataclass
class RtlRun:
    """What one pass of an RTL job did.

    ``status``: the top's registers after the pass's compute phase (``o_cycles``,
    ``o_issued``, ``o_retired``, per-PE ``int_fires``/``fp_fires``/``pe_error``,
    ``o_dbuf_reqs``, ``o_mesh_flits``...); ``in_cycles``/``out_cycles``: its DMA phases
    (DMA-in: the Cbufs and the Dbufs); ``span_cycles``: with ``overlap``, the cycles of the
    phase in which the DMA-in and the MicC run together (else ``in_cycles + cycles``);
    :meth:`read` returns what the DMA stored out of the Dbufs; ``clocks`` (double-buffered
    jobs): the ``o_clock`` at ``in_start``/``in_end``, ``micc_start``/``ctx_start``/
    ``micc_end``, ``out_start``/``out_end`` of the pass; ``started_in`` (with ``overlap``, not
    double-buffered): the contexts the MicC had issued by the cycle after the DMA-in's end
    (early start: those that started beside it, but for at most one).
    """
    params: ArrayParams
    status: dict
    in_cycles: int = 0
    out_cycles: int = 0
    reader: object = None
    job: object = None
    overlap: bool = False
    span: int = 0
    clocks: dict = None
    started_in: int = None

    @property
    def cycles(self):
        """Return the cycles from start to done of the MicC (configuration, hold, contexts)."""
        return self.status["o_cycles"]

    @property
    def config_cycles(self):
        """Return the part of :attr:`cycles` the MicC spent configuring the PEs."""
        return self.status["o_config_cycles"]

    @property
    def hold_cycles(self):
        """Return the part of :attr:`cycles` the MicC waited for the DMA-in after configuring."""
        return self.status.get("o_hold_cycles", 0)

    @property
    def compute_cycles(self):
        """Return the MicC's cycles without the hold: configuration + contexts."""
        return self.cycles - self.hold_cycles

    @property
    def context_cycles(self):
        """Return the cycles from the first context's start to the last context's end."""
        return self.cycles - self.config_cycles - self.hold_cycles

    @property
    def span_cycles(self):
        """Return the cycles of the DMA-in + compute part of the pass, end to end."""
        return self.span if self.overlap else self.in_cycles + self.cycles

    @property
    def config_hidden_cycles(self):
        """Return the configuration cycles that ran while the DMA-in was still running."""
        return self.status.get("o_config_hidden", 0)

    def read(self, address, nbytes):
        """Return ``nbytes`` of Dbuf memory at global ``address`` (a range asked for)."""
        return self.reader(address, nbytes)


@dataclass
class JobRun:
    """What one RTL job (every pass of a layer, one simulation) did.

    ``passes``: one :class:`RtlRun` per pass (its ``status`` after the compute phase and
    ``in_cycles``/``out_cycles`` of its DMA phases); ``final``: the top's registers at the end
    (``o_ext_rd_bytes``, ``o_ext_wr_bytes``, ``o_clock``...); ``ext_in``/``ext_out``: external
    bytes each pass's DMA moved in (descriptors included) and out; ``wall_s``: build, load and
    run seconds, with ``run_cpu_s`` (the simulator's CPU seconds of the run), ``backdoor_s``
    (seconds of the run spent writing the DMA-in by backdoor, ``backdoor_in``), ``max_rss_mb``
    (its peak resident MiB) and ``timeline`` (per progress chunk: phase, cycles, wall and CPU
    seconds into the run, resident MiB).
    """
    params: ArrayParams
    passes: list
    final: dict
    ext_in: list
    ext_out: list
    wall_s: dict
    waves: str = None
    #: The DMA-in phases were not simulated (``run_job(backdoor_in=True)``).
    backdoor_in: bool = False
    #: Per pass, the DMA descriptors in and out.
    descriptors: list = None
    #: The passes overlapped (``run_job(double_buffer=True)``): see :meth:`overlaps`.
    double_buffer: bool = False

    #: Counters of :attr:`final` that count from reset: a job run as several simulations adds
    #: them up (:meth:`concat`).
    SUMMED = ("o_ext_rd_bytes", "o_ext_wr_bytes", "o_clock")

    @classmethod
    def concat(cls, jobs):
        """Return the job that ``jobs`` (the segments of one job, each its own simulation,
        ``tb.host.checkpoint``) make one after the other: their passes in order, the
        :data:`SUMMED` final counters added up (the other final registers are the last
        segment's; in each pass's ``status`` they count on from the segments before), a
        double-buffered segment's clocks moved to start where the segment before it ended, the
        wall and CPU seconds added up (``segments``: how many)."""
        if len(jobs) == 1:
            return jobs[0]
        passes, offset = [], 0
        before = dict.fromkeys(cls.SUMMED, 0)
        for job in jobs:
            shift = 0
            if job.double_buffer:
                clocks = [c for r in job.passes for c in r.clocks.values()]
                shift = offset - min(clocks) if clocks else 0
            passes += [replace(r, status=dict(r.status, **{k: r.status[k] + before[k]
                                                           for k in cls.SUMMED}),
                               clocks={k: v + shift for k, v in r.clocks.items()}
                               if r.clocks is not None else None)
                       for r in job.passes]
            offset += job.cycles
            before = {k: before[k] + job.final[k] for k in cls.SUMMED}
        last = jobs[-1]
        final = dict(last.final, **{k: sum(j.final[k] for j in jobs) for k in cls.SUMMED})
        wall = {k: sum(j.wall_s.get(k) or 0 for j in jobs)
                for k in ("build_s", "load_s", "run_s", "run_cpu_s", "backdoor_s")}
        rss = [j.wall_s.get("max_rss_mb") for j in jobs if j.wall_s.get("max_rss_mb")]
        wall.update(max_rss_mb=max(rss) if rss else None, segments=len(jobs),
                    timeline=[t for j in jobs for t in j.wall_s.get("timeline", [])])
        descriptors = None if any(j.descriptors is None for j in jobs) else \
            [d for j in jobs for d in j.descriptors]
        return cls(last.params, passes, final, [b for j in jobs for b in j.ext_in],
                   [b for j in jobs for b in j.ext_out], wall, last.waves,
                   any(j.backdoor_in for j in jobs), descriptors,
                   any(j.double_buffer for j in jobs))

    @property
    def cycles(self):
        """Return the cycles of the whole job, end to end: every phase as it ran (with
        ``overlap`` the DMA-in of the Dbufs and the MicC count once, as their common span;
        double-buffered, the clock from the first phase's start to the last one's end)."""
        if self.double_buffer:
            clocks = [c for r in self.passes for c in r.clocks.values()]
            return max(clocks) - min(clocks) if clocks else 0
        return sum(r.span_cycles + r.out_cycles for r in self.passes)

    def overlaps(self):
        """Return per pass of a double-buffered job what ran behind another pass's contexts:
        ``in_cycles``, ``in_hidden`` (the DMA-in cycles during the previous pass's contexts),
        ``out_cycles``, ``out_hidden`` (the DMA-out cycles during the next pass's contexts),
        ``hold_cycles`` (the configured array waiting for the DMA) and ``span_cycles`` (from
        the previous pass's end, or the job's start, to this pass's end)."""
        if not self.double_buffer:
            raise FdpuError("overlaps() describes a double-buffered job")
        out, prev_end = [], None
        runs = self.passes

        def during(r, what, other):
            if other is None or f"{what}_start" not in r.clocks or "ctx_start" not in \
                    other.clocks:
                return 0
            lo = max(r.clocks[f"{what}_start"], other.clocks["ctx_start"])
            hi = min(r.clocks[f"{what}_end"], other.clocks["micc_end"])
            return max(0, hi - lo)

        for j, r in enumerate(runs):
            c = r.clocks
            start = prev_end if prev_end is not None else min(c.values())
            out.append(dict(pass_index=j, in_cycles=r.in_cycles,
                            in_hidden=during(r, "in", runs[j - 1] if j else None),
                            out_cycles=r.out_cycles,
                            out_hidden=during(r, "out", runs[j + 1] if j + 1 < len(runs)
                                              else None),
                            hold_cycles=r.hold_cycles,
                            span_cycles=c.get("micc_end", start) - start))
            prev_end = c.get("micc_end", start)
        return out

    @property
    def compute_cycles(self):
        """Return the MicC's cycles without waiting for the DMA: configuration + contexts."""
        return sum(r.compute_cycles for r in self.passes)

    @property
    def config_cycles(self):
        """Return the compute cycles spent configuring the PEs (before each pass's contexts)."""
        return sum(r.config_cycles for r in self.passes)

    @property
    def context_cycles(self):
        """Return the cycles from each pass's first context start to its last end, summed."""
        return sum(r.context_cycles for r in self.passes)

    @property
    def hold_cycles(self):
        """Return the cycles the configured array waited for the DMA-in (``overlap``)."""
        return sum(r.hold_cycles for r in self.passes)

    @property
    def config_hidden_cycles(self):
        """Return the configuration cycles that ran behind the DMA-in (``overlap``)."""
        return sum(r.config_hidden_cycles for r in self.passes)

    @property
    def dma_cycles(self):
        """Return the cycles the DMA phases took (DMA-in, DMA-out), summed."""
        return sum(r.in_cycles + r.out_cycles for r in self.passes)

    @property
    def ext_bytes(self):
        """Return the external bytes the DMA moved (read + written)."""
        return self.final["o_ext_rd_bytes"] + self.final["o_ext_wr_bytes"]

    @property
    def peak_bandwidth(self):
        """Return the peak bandwidth requirement in bytes per cycle.

        The largest, over passes, of the bytes a pass moves (in and out) divided by its
        compute cycles: what the external memory must deliver for the DMA of one pass to hide
        completely behind the computation of another (double buffering).
        """
        return max((i + o) / max(1, r.compute_cycles)
                   for r, i, o in zip(self.passes, self.ext_in, self.ext_out))


def _bits(value, names):
    """Return the names of the set bits of ``value`` (bit 0 first), or "none"."""
    return ",".join(n for i, n in enumerate(names) if value >> i & 1) or "none"


def describe_status(status, params):
    """Return a one-line account of the MicC, contexts and error bits of a status dict."""
    state = status["o_state"]
    text = (f"MicC state {MICC_STATES[state] if state < len(MICC_STATES) else state}, contexts "
            f"issued {status['o_issued']}, retired {status['o_retired']}, "
            f"CTX_END messages {status['o_ends']}, error bits "
            f"{_bits(status['o_error'], _ERROR_NAMES)}")
    bad = [f"PE ({n % params.cols},{n // params.cols}): {_bits(e, PE_ERRORS)}"
           for n, e in enumerate(status["pe_error"]) if e]
    return text + ("; " + "; ".join(bad) if bad else "; no PE error flags")


def describe_dma(status, count):
    """Return a one-line account of channel 0's DMA in a status dict (``count`` descriptors)."""
    return (f"DMA state {DMA_STATES[status['o_dma_state']]}, descriptor {status['o_dma_desc']} "
            f"of {count} (channel 0), error bits {_bits(status['o_dma_error'], DMA_ERRORS)}")
