"""The runtime: turn an image into memory files for the RTL top, run it, read the results back.

Contract
--------
* :func:`image_flits` lists what the MicC sends: the CONFIG flits (instruction parts of every
  configured slot, non-zero registers, preloads, in that order) and one OPERAND template per
  ``CTX`` slot (the MicC writes the context ID into ``data``).  The Cbufs hold them in the
  compact encoding of :meth:`sw.compiler.image.Image.cbuf_words` (records of 64-bit words, about one
  word per flit), which the MicC expands (``docs/system.md``).
* :func:`write_memories` writes the ``$readmemh`` files of the Cbuf words and the Dbufs:
  ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` (``@word`` records, 64-bit little-endian words, only
  the image's segments).
* :func:`run_job` lays out the external memory for a list of passes (per pass: the Cbuf
  image, unless it equals the previous pass's; the Dbuf segments as whole-word runs; room for
  the results; the DMA descriptor lists, ``hw.ctrl.dma``), builds the system
  (:class:`tb.host.extmem.FdpuSystem`: top + external memory model) and runs ``tb.top.test_run``
  on Icarus or Verilator: per pass DMA in, compute, DMA out, Python awaiting only each phase's
  halt (with a cycle bound).  It returns a :class:`JobRun`: per-pass :class:`RtlRun` (counters,
  DMA cycles, results), external bytes and the peak bandwidth requirement.
* :func:`run_rtl` is a one-pass job; :func:`run_fc_rtl` runs every pass of an FC plan in one
  simulation and gathers the result like :func:`sw.models.golden_fc.run_fc` (exact) does, so the two
  can be compared bit for bit.

Errors: an image whose configuration does not fit the Cbufs raises :class:`FdpuError` before
any simulation (the MicC also flags it in hardware); a run that does not finish within its
cycle bound, or ends with error bits, raises :class:`RtlError` whose message names the pass
and phase, and the MicC state, contexts issued/retired/ended and every PE's error flags (or
the DMA's state, descriptor and error bits).
"""

import json
import os
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from sw.compiler.blocking import engine_costs
from sw.compiler.program import empty_result, gather_pass, pass_images
from sw.spec import isa
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import word_bits
from sw.spec.dma import DescFlag, pack_descriptor, unpack_descriptor
from sw.spec.errors import FdpuError
from sw.spec.packet import ConfigWhat, Kind, pack_flit
from sw.spec.ports import config_ports as config_port_coords, dma_ports
from sw.spec.status import DmaError, DmaState, MiccError, MiccState, PeError
from tb.host.extmem import FdpuSystem
from tb.host import runner

__all__ = ["RtlError", "RtlRun", "JobRun", "MemModel", "image_flits", "write_memories",
           "cbuf_capacity", "run_job", "run_rtl", "run_fc_rtl", "MICC_STATES", "PE_ERRORS",
           "MICC_ERRORS", "DMA_STATES", "DMA_ERRORS"]

#: Names of the MicC states, by value (``sw.spec.status.MiccState``).
MICC_STATES = tuple(s.name for s in sorted(MiccState, key=lambda s: s.value))
#: Names of the MicC error bits, bit 0 first (``sw.spec.status.MiccError``).
MICC_ERRORS = tuple(e.name for e in MiccError)
#: Names of the PE error bits, bit 0 first (``sw.spec.status.PeError``).
PE_ERRORS = tuple(e.name for e in PeError)


class RtlError(FdpuError):
    """The RTL run ended in an error or did not finish (deadlock/timeout)."""


def cbuf_capacity(params):
    """Return how many words the Cbufs hold."""
    return params.cbufs * (params.cbuf_bytes * 8 // word_bits(params))


def image_flits(image):
    """Return ``(config, templates)``: the CONFIG flits and the CTX OPERAND templates (ints).

    The flits :func:`sw.compiler.image.expand_cbuf` makes of :meth:`Image.cbuf_words
    <sw.compiler.image.Image.cbuf_words>` (the MicC's order): the instruction parts of every
    configured slot, part 0 first, PEs in row-major order; every non-zero register; the
    preloads in image order.  A bench configuring one PE keeps the flits addressed to it.
    """
    p = image.params
    config, templates = [], []

    def cfg(x, y, what, index, slot, data):
        config.append(pack_flit(p, Kind.CONFIG, (x, y), what=what, index=index, slot=slot,
                                data=int(data)))

    configured = image.program.any(axis=3)
    for y, x, s in zip(*(a.tolist() for a in np.nonzero(configured))):
        for j, part in enumerate(image.program[y, x, s].tolist()):
            cfg(x, y, ConfigWhat.INSN, j, s, part)
    for y, x, r in zip(*(a.tolist() for a in np.nonzero(image.regs))):
        cfg(x, y, ConfigWhat.REG, r, 0, image.regs[y, x, r])
    for x, y, s, o, v in image.preloads:
        cfg(x, y, ConfigWhat.PRELOAD, o, s, v)
    for (x, y, s), insn in sorted(image.instructions().items(),
                                  key=lambda t: (t[0][1], t[0][0], t[0][2])):
        if insn.op is isa.Op.CTX:
            templates.append(pack_flit(p, Kind.OPERAND, (x, y), slot=s, operand=0, data=0))
    return config, templates


def _check_fits(p, n_config, n_ctx, port=0, ports=1):
    cap = cbuf_capacity(p)
    if ports == 1:
        if n_config + n_ctx > cap:
            raise FdpuError(f"the configuration needs {n_config + n_ctx} Cbuf words ({n_config} "
                            f"of configuration records + {n_ctx} CTX templates), more than the "
                            f"{p.cbufs} Cbufs of {p.cbuf_bytes} bytes hold ({cap})")
        return
    region = cap // ports
    if n_config + n_ctx > region:
        what = f" + {n_ctx} CTX templates" if port == 0 else ""
        raise FdpuError(f"configuration port {port} needs {n_config + n_ctx} Cbuf words "
                        f"({n_config} of configuration records{what}), more than its region "
                        f"of the Cbufs holds ({region} words: {p.cbufs} Cbufs of "
                        f"{p.cbuf_bytes} bytes over {ports} ports)")


def port_configs(params, config, ports):
    """Return ``config`` as a list of per-port Cbuf record lists, checked against ``ports``.

    ``config`` is either one list of words (port 0's records) or a list of per-port lists.
    Raises :class:`FdpuError` when it names a configuration port the top does not have.
    """
    seqs = (list, tuple, np.ndarray)
    per_port = len(config) > 0 and all(isinstance(c, seqs) for c in config)
    out = [list(c) for c in config] if per_port else [list(config)]
    if len(out) > ports:
        raise FdpuError(f"the configuration has Cbuf records for configuration port "
                        f"{len(out) - 1}; the top has {ports} configuration port"
                        f"{'s' if ports > 1 else ''} (0..{ports - 1})")
    return out + [[] for _ in range(ports - len(out))]


def _hex_lines(words, width):
    digits = width // 4
    return [f"{w:0{digits}x}" for w in words]


def write_memories(image, folder, config=None, templates=None):
    """Write ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` for ``image`` into ``folder``.

    ``config``/``templates``: Cbuf words instead of :meth:`~sw.compiler.image.Image.cbuf_words`.
    Returns ``(n_config, n_ctx)``.  Raises :class:`FdpuError` when the configuration does not
    fit the Cbufs.
    """
    p = image.params
    if config is None:
        config, templates = image.cbuf_words()
    words = [int(w) for w in config] + [int(w) for w in templates]
    _check_fits(p, len(config), len(templates))
    os.makedirs(folder, exist_ok=True)
    wb = word_bits(p)
    depth = cbuf_capacity(p) // p.cbufs
    for i in range(p.cbufs):
        chunk = words[i * depth:(i + 1) * depth]
        with open(os.path.join(folder, f"cbuf_{i}.hex"), "w") as f:
            f.write("\n".join(_hex_lines(chunk, wb) or ["0"]) + "\n")
    per = {k: [] for k in range(p.num_dbufs)}
    for addr, blob in sorted(image.segments.items()):
        k, off = p.dbuf_of(addr)
        per[k].append((off, blob))
    for k, segs in per.items():
        lines = []
        for off, blob in segs:
            lo = off & ~7
            pad = bytes(off - lo) + bytes(blob)
            pad += bytes(-len(pad) % 8)
            w = np.frombuffer(pad, dtype="<u8")
            lines.append(f"@{lo // 8:x}")
            lines.extend(np.char.mod("%016x", w).tolist())
        with open(os.path.join(folder, f"dbuf_{k}.hex"), "w") as f:
            f.write("\n".join(lines or ["0"]) + "\n")
    return len(config), len(templates)


@dataclass
class RtlRun:
    """What one pass of an RTL job did.

    ``status``: the top's registers after the pass's compute phase (``o_cycles``,
    ``o_issued``, ``o_retired``, per-PE ``int_fires``/``fp_fires``/``pe_error``,
    ``o_dbuf_reqs``, ``o_mesh_flits``...); ``in_cycles``/``out_cycles``: its DMA phases
    (DMA-in: the Cbufs and the Dbufs); ``span_cycles``: with ``overlap``, the cycles of the
    phase in which the DMA-in and the MicC run together (else ``in_cycles + cycles``);
    :meth:`read` returns what the DMA stored out of the Dbufs.
    """
    params: ArrayParams
    status: dict
    in_cycles: int = 0
    out_cycles: int = 0
    reader: object = None
    job: object = None
    overlap: bool = False
    span: int = 0

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


def describe_status(status, params):
    """Return a one-line account of the MicC, contexts and error bits of a status dict."""
    from_bits = lambda value, names: ",".join(n for i, n in enumerate(names)  # noqa: E731
                                              if value >> i & 1) or "none"
    state = status["o_state"]
    text = (f"MicC state {MICC_STATES[state] if state < len(MICC_STATES) else state}, contexts "
            f"issued {status['o_issued']}, retired {status['o_retired']}, "
            f"CTX_END messages {status['o_ends']}, error bits "
            f"{from_bits(status['o_error'], _ERROR_NAMES)}")
    bad = [f"PE ({n % params.cols},{n // params.cols}): {from_bits(e, PE_ERRORS)}"
           for n, e in enumerate(status["pe_error"]) if e]
    return text + ("; " + "; ".join(bad) if bad else "; no PE error flags")


#: Names of the top's ``o_error`` bits (``hw.top.ERROR_BITS``).
_ERROR_NAMES = tuple(f"MICC_{e}" for e in MICC_ERRORS) + tuple(f"PE_{e}" for e in PE_ERRORS) \
    + ("STRAY_REQUEST", "STRAY_EDGE")


#: Smallest external memory per simulator (bigger jobs take the next power of two).
EXT_MIN_BYTES = {"icarus": 1 << 20, "verilator": 1 << 25}

#: Descriptor flags (``sw.spec.dma``).
DESC_OUT, DESC_CBUF = DescFlag.OUT, DescFlag.CBUF


@dataclass(frozen=True)
class MemModel:
    """The external memory model's registers (``tb.host.extmem.ExtMem``).

    ``latency``: cycles from a read request to its data (at least 2); ``bandwidth``: bytes per
    cycle, 1/8 .. 8 in steps of 1/8; ``stall``: probability (0 .. 255/256) of a cycle in which
    the memory takes nothing (random backpressure).
    """
    latency: int = 20
    bandwidth: float = 8.0
    stall: float = 0.0

    def registers(self):
        """Return ``{"latency", "bw", "stall"}`` as the hardware takes them."""
        bw = round(self.bandwidth * 8)
        if not 1 <= bw <= 64 or abs(bw - self.bandwidth * 8) > 1e-9:
            raise FdpuError(f"memory bandwidth must be a multiple of 1/8 in 1/8 .. 8 bytes per "
                            f"cycle, got {self.bandwidth}")
        if not isinstance(self.latency, int) or not 0 <= self.latency < 1 << 16:
            raise FdpuError(f"memory latency must be an integer in 0 .. 65535 cycles, got "
                            f"{self.latency!r}")
        stall = round(self.stall * 256)
        if not 0 <= stall <= 255:
            raise FdpuError(f"memory stall probability must be in [0, 255/256], got "
                            f"{self.stall}")
        return dict(latency=self.latency, bw=bw, stall=stall)


def _edge(params, k):
    """Return the edge (0 north, 1 east, 2 south, 3 west) of Dbuf ``k``."""
    x, y = params.dbuf_coord(k)
    return 0 if y < 0 else 1 if x >= params.cols else 2 if y >= params.rows else 3


def _channel_ports(params, channels):
    """Return the edge ports (Dbuf numbers) of the DMA channels (``sw.spec.ports.dma_ports``)."""
    return dma_ports(params)[:channels]


def _assign(runs, channels, load, params):
    """Return ``[(channel, global address, words)]``: ``runs`` spread over the DMA channels.

    A Dbuf takes one request per cycle, so one Dbuf's runs stay on one channel (splitting them
    over channels would only make the channels wait for each other).  The Dbufs go, most
    words first, to the channel on their own edge (``sw.spec.ports.dma_ports``: its stream then
    shares no link with the other edges' channels) unless that channel is ahead of the least
    loaded one by more than this Dbuf's words, else to the least loaded channel (``load``:
    words already given to each, updated).
    """
    ports = dma_ports(params)[:channels]
    home = {}
    for c, k in enumerate(ports):
        home.setdefault(_edge(params, k), c)
    per = {}
    for lo, w in runs:
        per.setdefault(params.dbuf_of(lo)[0], []).append((lo, w))
    out = []
    for k in sorted(per, key=lambda k: -sum(len(w) for _, w in per[k])):
        words = sum(len(w) for _, w in per[k])
        least = min(range(channels), key=lambda i: load[i])
        c = home.get(_edge(params, k), least)
        if load[c] > load[least] + words:
            c = least
        load[c] += words
        out += [(c, lo, w) for lo, w in per[k]]
    return out


#: Segments of one Dbuf closer than this (bytes) share one DMA descriptor (:func:`_runs`).
MERGE_GAP = 256


def _out_runs(params, reads, channels):
    """Return ``[(channel, lo, hi, [(address, nbytes)])]``: the DMA-out descriptors of ``reads``.

    Ranges of one Dbuf that overlap or touch (whole words) share one descriptor (no byte
    more is written out); the Dbufs are spread over the channels as :func:`_assign` spreads
    the DMA-in (each on its edge's channel), so the DMA-out runs on every channel at once.
    """
    spans = sorted((addr & ~7, -(-(addr + n) // 8) * 8, addr, n) for addr, n in reads)
    runs = []
    for lo, hi, addr, n in spans:
        if runs and lo <= runs[-1][1] and params.dbuf_of(lo)[0] == \
                params.dbuf_of(runs[-1][0])[0]:
            runs[-1][1] = max(runs[-1][1], hi)
            runs[-1][2].append((addr, n))
        else:
            runs.append([lo, hi, [(addr, n)]])
    chan = {lo: c for c, lo, _ in _assign([(lo, np.zeros((hi - lo) // 8)) for lo, hi, _ in runs],
                                          channels, [0] * channels, params)}
    return [(chan[lo], lo, hi, group) for lo, hi, group in runs]


def _runs(image):
    """Return ``[(global address, uint64 words)]``: the image's segments as whole-word runs.

    Overlapping or touching segments merge, and so do segments of one Dbuf less than
    :data:`MERGE_GAP` bytes apart (the zeros between them cost fewer DMA cycles than a
    descriptor more: about the memory latency); every word a run covers is written (zeros
    included), so a pass never sees the data of the pass before it where its own is zero.
    """
    spans = []
    for addr, blob in image.segments.items():
        if len(blob):
            spans.append((addr & ~7, -(-(addr + len(blob)) // 8) * 8, addr, bytes(blob)))
    spans.sort()
    runs = []
    for lo, hi, addr, blob in spans:
        if runs and lo <= runs[-1][1] + MERGE_GAP and image.params.dbuf_of(lo)[0] == \
                image.params.dbuf_of(runs[-1][0])[0]:
            runs[-1][1] = max(runs[-1][1], hi)
            runs[-1][2].append((addr, blob))
        else:
            runs.append([lo, hi, [(addr, blob)]])
    out = []
    for lo, hi, parts in runs:
        buf = bytearray(hi - lo)
        for addr, blob in parts:
            buf[addr - lo:addr - lo + len(blob)] = blob
        out.append((lo, np.frombuffer(bytes(buf), dtype="<u8")))
    return out


class _ExtImage:
    """The external memory image under construction: blobs at 16-aligned addresses."""

    def __init__(self):
        self.parts, self.cursor = [], 0

    def put(self, words):
        """Place ``words`` (uint64 array); return their byte address."""
        addr = self.cursor
        self.parts.append((addr, np.asarray(words, dtype=np.uint64)))
        self.cursor = -(-(addr + 8 * len(words)) // 16) * 16
        return addr

    def reserve(self, nbytes):
        """Reserve ``nbytes`` of zeros; return the address."""
        addr = self.cursor
        self.cursor = -(-(addr + nbytes) // 16) * 16
        return addr

    def words(self, size):
        """Return the whole image as a uint64 array of ``size`` bytes."""
        out = np.zeros(size // 8, dtype=np.uint64)
        for addr, w in self.parts:
            out[addr // 8:addr // 8 + len(w)] = w
        return out


def _desc(ext, local, length, flags=DescFlag(0)):
    return pack_descriptor(ext, local, length, flags)


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

    @property
    def cycles(self):
        """Return the cycles of the whole job, end to end: every phase as it ran (with
        ``overlap`` the DMA-in of the Dbufs and the MicC count once, as their common span)."""
        return sum(r.span_cycles + r.out_cycles for r in self.passes)

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


def run_job(params, passes, sim, *, mem=MemModel(), max_cycles=None, dma_max_cycles=None,
            waves=False, progress=None, depth=4, timeout_s=7200, configs=None,
            backdoor_in=False, dma_channels=1, config_ports=1, overlap=False):
    """Run ``passes`` on the RTL system (top + external memory) in one simulation.

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
        move into the Dbufs and Cbufs by backdoor (``tb.top.test_run``); their ``in_cycles``
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

    Returns
    -------
    JobRun

    Raises
    ------
    RtlError
        "timeout ... deadlock" when a phase passes its bound, or the error bits a block raised.
    """


    if sim not in ("icarus", "verilator"):
        raise FdpuError(f"sim must be icarus or verilator, not {sim!r}")
    regs_mem = mem.registers()
    p = params
    if not isinstance(dma_channels, int) or isinstance(dma_channels, bool) \
            or not 1 <= dma_channels <= p.num_dbufs:
        raise FdpuError(f"dma_channels must be an integer in 1..{p.num_dbufs} (the edge "
                        f"ports), got {dma_channels!r}")
    nch = dma_channels
    config_port_coords(p, config_ports)    # raises FdpuError for a bad count
    cap = cbuf_capacity(p)
    region = cap // config_ports
    exts = [_ExtImage() for _ in range(nch)]
    ext = exts[0]
    mask = (1 << 64) - 1
    plan, prev_cbuf, results = [], None, []
    for j, (image, reads) in enumerate(passes):
        if configs is None:
            cfgs, templates = image.cbuf_port_words(config_ports)
            for q, c in enumerate(cfgs):
                _check_fits(p, len(c), len(templates) if q == 0 else 0, q, config_ports)
        else:
            cfgs, templates = port_configs(p, configs[j][0], config_ports), configs[j][1]
        cwords = [np.array([int(w) & mask for w in list(c) + (list(templates) if q == 0
                                                                else [])][:region],
                           dtype=np.uint64) for q, c in enumerate(cfgs)]
        descs, moved = [[] for _ in range(nch)], 0
        load = [0] * nch
        cbuf_words = 0
        if prev_cbuf is None or not all(np.array_equal(a, b) for a, b in zip(prev_cbuf,
                                                                              cwords)):
            for q, words in enumerate(cwords):
                if len(words):
                    descs[0].append(_desc(ext.put(words), 8 * q * region, 8 * len(words),
                                          DESC_CBUF))
                    moved += 8 * len(words)
                    load[0] += len(words)
                    cbuf_words += len(words)
            prev_cbuf = cwords
        # Each channel loads the Dbuf at its own edge port last: that Dbuf's store acks enter
        # the reply mesh through the merge a configuration port's CONFIG flits take there,
        # which would halve the configuration's rate while the two overlap.
        own = _channel_ports(p, nch)
        for c, lo, words in sorted(_assign(_runs(image), nch, load, p),
                                   key=lambda t: p.dbuf_of(t[1])[0] == own[t[0]]):
            descs[c].append(_desc(exts[c].put(words), lo, 8 * len(words)))
            moved += 8 * len(words)
        outs, out_bytes, where = [[] for _ in range(nch)], 0, []
        for c, lo, hi, group in _out_runs(p, reads, nch):
            at = exts[c].reserve(hi - lo)
            outs[c].append(_desc(at, lo, hi - lo, DESC_OUT))
            where += [(addr, n, c, at + addr - lo) for addr, n in group]
            out_bytes += hi - lo
        results.append(where)
        plan.append(dict(descs=descs, cbuf_words=cbuf_words,
                         ndesc=sum(len(d) for d in descs), outs=outs,
                         nouts=sum(len(o) for o in outs),
                         cfg=[len(c) for c in cfgs], templates=len(templates), image=image,
                         moved=moved, out_bytes=out_bytes))
    # The results: per channel one range of its external memory, read back at the end.
    reads_spec, res_base = [], {}
    for c in range(nch):
        spans = [(at, n) for w in results for _, n, cc, at in w if cc == c]
        if spans:
            lo = min(a for a, _ in spans) & ~7
            hi = max(a + n for a, n in spans)
            res_base[c] = (len(reads_spec), lo)
            reads_spec.append([c, lo // 8, (hi - lo + 7) // 8])
    spec_passes = []
    ext_in, ext_out = [], []
    for j, pl in enumerate(plan):
        lin = [[exts[c].put(np.array(d, dtype=np.uint64).reshape(-1)) if d else 0, len(d)]
               for c, d in enumerate(pl["descs"])]
        lout = [[exts[c].put(np.array(o, dtype=np.uint64).reshape(-1)) if o else 0, len(o)]
                for c, o in enumerate(pl["outs"])]
        image = pl["image"]
        all_in = [(c, d) for c, ds in enumerate(pl["descs"]) for d in ds]
        spec_passes.append(dict(
            dma_in=lin, dma_out=lout,
            in_descs=[[c, *(int(f) for f in unpack_descriptor(d))]
                      for c, d in all_in] if backdoor_in else [],
            regs=dict(i_n_config=pl["cfg"][0], i_n_ctx=pl["templates"],
                      **{f"i_n_config_{q}": n for q, n in enumerate(pl["cfg"]) if q},
                      i_cbuf_words=pl["cbuf_words"] if overlap and not backdoor_in else 0,
                      i_contexts=image.contexts, i_window=image.window,
                      i_ends=image.ends_per_context)))
        ext_in.append(pl["moved"] + 16 * (pl["ndesc"] + pl["nouts"]))
        ext_out.append(pl["out_bytes"])
    # Sizes come in a few steps only: each size is a build of its own.
    most_bytes = max(e.cursor for e in exts)
    size = max(EXT_MIN_BYTES[sim], 1 << (most_bytes - 1).bit_length())
    if size > 1 << 32:
        raise FdpuError(f"the job needs {most_bytes} bytes of external memory, more than the "
                        f"32-bit address space")
    if max_cycles is None:
        max_cycles = 200_000 + 2_000 * max(pl["image"].contexts for pl in plan)
    if dma_max_cycles is None:
        most = max(pl["moved"] + pl["out_bytes"] for pl in plan) // 8
        ndesc = max(pl["ndesc"] + pl["nouts"] for pl in plan)
        dma_max_cycles = 20_000 + 16 * most * -(-64 // regs_mem["bw"]) \
            + 4 * (regs_mem["latency"] + 64) * (ndesc + 1)
    root = os.path.join(os.getcwd(), "build", "runtime")
    os.makedirs(root, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="run-", dir=root)
    mem_path = os.path.join(work_dir, "memories.npz")
    arrays = {}
    for c, e in enumerate(exts):
        words = e.words(size)
        nz = np.nonzero(words)[0]
        arrays[f"idx{c}"], arrays[f"val{c}"] = nz.astype(np.int64), words[nz]
    np.savez(mem_path, **arrays)
    progress_file = os.path.join(work_dir, "progress.json")
    spec = dict(rows=p.rows, cols=p.cols, memories=mem_path, mem=regs_mem, channels=nch,
                overlap=bool(overlap),
                out=os.path.join(work_dir, "result.npz"), passes=spec_passes,
                reads=reads_spec,
                max_cycles=int(max_cycles), dma_max_cycles=int(dma_max_cycles),
                backdoor_in=dict(cbuf_flag=int(DESC_CBUF), cbufs=p.cbufs,
                                 cbuf_depth=p.cbuf_bytes // 8, dbuf_bytes=p.dbuf_bytes)
                if backdoor_in else None,
                chunk=int(min(max_cycles, 100_000)),
                progress_file=progress_file if progress else None)
    spec_path = os.path.join(work_dir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    top = FdpuSystem(p, ext_bytes=size, depth=depth, dma_channels=nch,
                     config_ports=config_ports)
    box = {}

    def simulate():
        try:
            box["res"] = runner.run_cocotb(top, {}, "tb.top.test_run", sim, name="fdpu_system",
                                    waves=waves, extra_env={"FDPU_RUN_SPEC": spec_path},
                                    timeout_s=timeout_s, seed=1)
        except BaseException as exc:        # noqa: BLE001 (re-raised below)
            box["exc"] = exc

    if progress:
        worker = threading.Thread(target=simulate, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            try:
                with open(progress_file) as f:
                    progress(json.load(f))
            except (OSError, ValueError):
                pass
    else:
        simulate()
    if "exc" in box:
        raise box["exc"]
    res = box["res"]
    with np.load(spec["out"]) as z:
        out = json.loads(str(z["result"]))
        blobs = [z[f"r{j}"].astype("<u8").tobytes() if f"r{j}" in z else b""
                 for j in range(len(reads_spec))]
    fail = out["failure"]
    if fail is not None:
        st, j, phase = fail["status"], fail["pass_index"], fail["phase"]
        if phase == "compute":
            if not fail["halted"]:
                raise RtlError(f"timeout after {fail['waited']} cycles on {sim}: deadlock or a "
                               f"graph that never finishes (pass {j}): {describe_status(st, p)}")
            raise RtlError(f"the RTL run on {sim} stopped with an error after "
                           f"{st['o_cycles']} cycles (pass {j}): {describe_status(st, p)}")
        what = f"DMA {phase} of pass {j}"
        dma = (f"DMA state {DMA_STATES[st['o_dma_state']]}, descriptor {st['o_dma_desc']} "
               f"of {_first_count(spec_passes[j], phase)} (channel 0), error bits "
               f"{_bits(st['o_dma_error'], DMA_ERRORS)}")
        if not fail["halted"]:
            raise RtlError(f"timeout after {fail['waited']} cycles on {sim}: deadlock in the "
                           f"{what}: {dma}")
        raise RtlError(f"the {what} on {sim} stopped with an error: {dma}")

    def reader(where):
        table = {a: (c, at) for a, n, c, at in where}

        def read(address, nbytes):
            c, at = table[address]
            j, lo = res_base[c]
            return blobs[j][at - lo:at - lo + nbytes]
        return read

    runs = []
    for j, rec in enumerate(out["passes"]):
        runs.append(RtlRun(p, rec["status"], rec["in_cycles"], rec["out_cycles"],
                           reader(results[j]), overlap=bool(overlap),
                           span=rec.get("span_cycles", 0)))
    return JobRun(p, runs, out["final"], ext_in, ext_out,
                  dict(build_s=res.build_s, load_s=out["load_s"], run_s=out["run_s"],
                       run_cpu_s=out.get("run_cpu_s"), backdoor_s=out.get("backdoor_s", 0.0),
                       max_rss_mb=out.get("max_rss_mb"),
                       timeline=out.get("timeline", [])),
                  str(res.waves) if res.waves else None, bool(backdoor_in),
                  [(pl["ndesc"], pl["nouts"]) for pl in plan])


#: Names of the DMA states and error bits (``sw.spec.status.DmaState``, ``DmaError``).
DMA_STATES = tuple(s.name for s in sorted(DmaState, key=lambda s: s.value))
DMA_ERRORS = tuple(e.name for e in DmaError)


def _first_count(spec_pass, phase):
    """Return channel 0's descriptor count of a pass's DMA ``phase`` ("in" or "out")."""
    return spec_pass["dma_in" if phase == "in" else "dma_out"][0][1]


def _bits(value, names):
    return ",".join(n for i, n in enumerate(names) if value >> i & 1) or "none"


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
    _, integer, fp = engine_costs(plan.mode, plan.kb, plan.gb, cols, plan.feedback,
                                  wfan=plan.wfan, sparse_graph=plan.sparse_graph)
    contexts = max(plan.pass_contexts(p) for p in range(plan.passes))
    issues = (integer + fp) * plan.Cw / cols * contexts
    return int(200_000 + 2_000 * contexts + 8 * issues)


def run_fc_rtl(plan, weights, inputs, sim, **kwargs):
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
        passes.append((image, [(addr, plan.output_bytes) for _, addr in outputs]))
        outs.append(outputs)
    if kwargs.get("max_cycles") is None:
        kwargs["max_cycles"] = fc_cycle_bound(plan)
    job = run_job(plan.params, passes, sim, **kwargs)
    y = empty_result(plan)
    for run, outputs in zip(job.passes, outs):
        gather_pass(plan, y, outputs, run.read)
    return y, job
