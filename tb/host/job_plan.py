"""The plan of an RTL job: the external memory image and the DMA descriptor lists of its passes.

Contract
--------
* :func:`plan_job` lays out the external memory for a list of passes (per pass: the Cbuf
  image, unless it equals the previous pass's; the Dbuf segments as whole-word runs; room for
  the results; the DMA descriptor lists, ``hw.ctrl.dma``), one external memory per DMA
  channel, and returns a :class:`JobPlan`: the memory images, the per-pass descriptor lists
  and registers of the run spec of ``tb.top.bench_run``, where each pass's results land, the
  external bytes each pass moves, the memory size and the default cycle bounds.
* The Dbufs of a pass are spread over the channels by words, each Dbuf's runs on one channel,
  most to the channel on the Dbuf's own edge (``sw.spec.ports.dma_ports``); the Cbuf image
  stays on channel 0; the DMA-out is spread the same way.  Segments of one Dbuf closer than
  :data:`MERGE_GAP` bytes share a descriptor.  The segments an image lists in
  ``meta["shared"]`` (the same bytes at the same offset of several Dbufs: the input blocks of
  ``sw.compiler.dbuf_layout``) are loaded by *multicast*: one descriptor per channel and window
  of ``1 + COPIES_BITS`` Dbufs (``sw.spec.dma``), its bytes read from external memory once.
  With ``edge_multicast`` the Dbufs of an edge go to that edge's channel and a block's Dbufs
  that one flit from the channel's port reaches are loaded by one ``mcast`` descriptor (one
  MSTORE a word, which the mesh writes into each of them), the rest as above
  (:func:`sw.compiler.dma_plan.delivery_windows`).
* A pass may name *moves* (``sw.compiler.chain.Move``: layers chained on chip): its DMA-in
  phase then begins with MOVE descriptors that copy those Dbuf ranges to other Dbufs (right
  after the Cbuf descriptors on channel 0, first on the others; one per channel and window of
  ``1 + COPIES_BITS`` destination Dbufs, each destination Dbuf's moves on one channel), and no
  external byte moves for them but the descriptors.  The ranges an image lists in
  ``meta["on_chip"]`` (what the moves read and write) are left out of every DMA-in run, so the
  channels' runs and moves never touch the same byte.
* Early start (``early_start``): each pass's Dbuf data are loaded group of contexts by group
  (:mod:`sw.compiler.dma_plan`: the segments an image's ``meta["first_use"]`` gives the first
  reading context of, the others with context 0), each channel's list with a fence (an empty
  descriptor) after each group up to its last one with data, and the pass's registers set
  ``i_ctx_gate`` and ``i_gate_shift``: the top starts each context when every channel has
  passed its group's fence.
* Double buffering (``double_buffer``): consecutive passes must touch disjoint Dbuf bytes
  (their runs in and their results out); a pass whose Cbuf image equals the previous pass's
  is marked ``prefetch`` in the run spec (its DMA-in may run while the previous pass
  computes).
* A kept configuration (``keep_config``, the default): a pass whose Cbuf words equal the
  previous pass's runs with ``i_keep`` (the MicC sends no CONFIG flit: the PEs hold that
  configuration, and a pass leaves them as configuring does, every context's state back at
  its start and a SWITCH's feedback token back in place) and ``i_end_base``, the contexts
  run since the PEs were configured (the END slots count on from there).
* A job may start from Cbufs that already hold a configuration (``cbuf_loaded``: a job resumed
  after the pass that loaded it, ``tb.host.runtime.run_job(checkpoint=...)``): its first pass
  loads its Cbuf words only when they differ, as a pass after that one would, and
  :attr:`JobPlan.cbuf_preload` lists the words the bench writes into the Cbufs before the job
  starts (the state the job resumes from); when that pass keeps the configuration,
  :attr:`JobPlan.configure` has the bench configure the PEs first (a MicC run with no
  context, before the job's clock starts), as the pass before the job had.
* :func:`cbuf_port_words` is a pass's Cbuf words per configuration port: what the Cbufs hold
  after it.
* :class:`MemModel` holds the external memory model's registers (latency, bandwidth, stalls).

Errors: :class:`FdpuError` for a DMA channel or configuration port count the top cannot
have, double-buffered passes that share Dbuf bytes, a configuration that does not fit the
Cbufs, a job that needs more than the 32-bit address space, or memory model values out of
range.
"""

from dataclasses import dataclass

import numpy as np

from sw.spec.arch import ArrayParams
from sw.compiler.dma_plan import (MERGE_GAP, assign_channels, block_group, delivery_windows,
                                  fence_groups, gate_shift, group_of, group_runs, move_windows,
                                  out_runs, part_range)
from sw.spec.dma import DescFlag, pack_descriptor, unpack_descriptor
from sw.spec.errors import FdpuError
from sw.spec.ports import config_ports as config_port_coords, dma_ports
from tb.host.memories import cbuf_capacity, check_fits, port_configs

__all__ = ["MemModel", "JobPlan", "plan_job", "cbuf_port_words", "EXT_MIN_BYTES", "DESC_OUT",
           "DESC_CBUF", "MERGE_GAP"]

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


def _channel_ports(params, channels):
    """Return the edge ports (Dbuf numbers) of the DMA channels (``sw.spec.ports.dma_ports``)."""
    return dma_ports(params)[:channels]


def _words_per_dbuf(params, spans):
    """Return ``{dbuf: words}`` of ``(global address, bytes)`` spans."""
    per = {}
    for a, n in spans:
        d = params.dbuf_of(a)[0]
        per[d] = per.get(d, 0) + n // 8
    return per


def _runs(image, barriers=(), group=None):
    """Return ``[(group, global address, uint64 words)]``: the image's segments as whole-word
    runs (:func:`sw.compiler.dma_plan.group_runs`; the ``barriers`` spans are left out and no
    run reaches over one; ``group``: address -> group, default all in group 0); every word a
    run covers is written (zeros included), so a pass never sees the data of the pass before
    it where its own is zero."""
    skip = {a for a, _ in barriers}
    segs = [(a, bytes(b)) for a, b in image.segments.items() if len(b) and a not in skip]
    groups = [(group or {}).get(a, 0) for a, _ in segs]
    out = []
    for g, lo, hi, parts in group_runs([(a, len(b)) for a, b in segs], groups, image.params,
                                       barriers):
        buf = bytearray(hi - lo)
        for i in parts:
            addr, blob = segs[i]
            buf[addr - lo:addr - lo + len(blob)] = blob
        out.append((g, lo, np.frombuffer(bytes(buf), dtype="<u8")))
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


def _desc(ext, local, length, flags=DescFlag(0), copies=0):
    return pack_descriptor(ext, local, length, flags, copies)


@dataclass
class JobPlan:
    """The external memory and descriptor lists of a job (:func:`plan_job`).

    ``exts``: per DMA channel, its external memory image; ``passes``: per pass, a dict of its
    descriptor lists (``descs``, ``outs``: per channel, packed descriptors in and out; ``ndesc``,
    ``nouts``: their counts), Cbuf words loaded (``cbuf_words``), records per configuration
    port (``cfg``), CTX templates (``templates``), ``image``, bytes moved in (``moved``) and out
    (``out_bytes``); ``results``: per pass, ``[(address, nbytes, channel, external address)]``
    of the ranges stored out; ``reads``: per channel with results, ``[channel, word, words]``:
    the range of its external memory read back at the end, ``result_base``: channel ->
    ``(index in reads, byte address)``; ``spec_passes``: the passes of the run spec
    (``dma_in``, ``dma_out``: per channel ``[list address, count]``; ``in_descs``; ``regs``);
    ``ext_in``/``ext_out``: external bytes each pass moves in (descriptors included) and out.
    """
    params: ArrayParams
    exts: list
    passes: list
    results: list
    reads: list
    result_base: dict
    spec_passes: list
    ext_in: list
    ext_out: list
    #: ``[(Cbuf word address, uint64 words)]`` the Cbufs hold before the first pass
    #: (``plan_job(cbuf_loaded=...)``); empty for a job that starts from reset.
    cbuf_preload: list = ()
    #: The MicC registers of a run with no context that configures the PEs before the first
    #: pass (a resumed job whose first pass keeps the configuration the job before it made),
    #: or ``None``.
    configure: dict = None

    @property
    def descriptors(self):
        """Return per pass ``(descriptors in, descriptors out)``."""
        return [(pl["ndesc"], pl["nouts"]) for pl in self.passes]

    def ext_size(self, sim):
        """Return the bytes of each external memory on ``sim``: a power of two, at least
        :data:`EXT_MIN_BYTES`; raise :class:`FdpuError` past the 32-bit address space."""
        # Sizes come in a few steps only: each size is a build of its own.
        most_bytes = max(e.cursor for e in self.exts)
        size = max(EXT_MIN_BYTES[sim], 1 << (most_bytes - 1).bit_length())
        if size > 1 << 32:
            raise FdpuError(f"the job needs {most_bytes} bytes of external memory, more than "
                            f"the 32-bit address space")
        return size

    def default_max_cycles(self):
        """Return the default cycle bound of a compute phase: ``200_000 + 2_000 * contexts``."""
        return 200_000 + 2_000 * max(pl["image"].contexts for pl in self.passes)

    def default_dma_max_cycles(self, regs_mem):
        """Return the default cycle bound of a DMA phase, from the words moved, the bandwidth
        and the latency of ``regs_mem`` (:meth:`MemModel.registers`)."""
        most = max(pl["moved"] + pl["out_bytes"] + 2 * pl["on_chip"]
                   for pl in self.passes) // 8
        ndesc = max(pl["ndesc"] + pl["nouts"] for pl in self.passes)
        return 20_000 + 16 * most * -(-64 // regs_mem["bw"]) \
            + 4 * (regs_mem["latency"] + 64) * (ndesc + 1)

    def memory_arrays(self, size):
        """Return ``{"idx<c>", "val<c>"}``: the non-zero words of channel ``c``'s memory of
        ``size`` bytes, by word index."""
        arrays = {}
        for c, e in enumerate(self.exts):
            words = e.words(size)
            nz = np.nonzero(words)[0]
            arrays[f"idx{c}"], arrays[f"val{c}"] = nz.astype(np.int64), words[nz]
        return arrays


def _port_configs(p, image, config_ports, config, spans=False):
    """Return a pass's ``(records per configuration port, CTX templates)``, checked against
    the Cbufs; ``config``: records and templates instead of the image's; ``spans``: records
    of spans of PEs (:meth:`~sw.compiler.image.Image.cbuf_port_words`)."""
    if config is None:
        cfgs, templates = image.cbuf_port_words(config_ports, spans)
        for q, c in enumerate(cfgs):
            check_fits(p, len(c), len(templates) if q == 0 else 0, q, config_ports)
        return cfgs, templates
    return port_configs(p, config[0], config_ports), config[1]


def cbuf_port_words(p, image, config_ports, config=None, spans=False):
    """Return a pass's Cbuf words per configuration port (uint64 arrays; port ``q``'s go to
    Cbuf words ``q * region`` on, the CTX templates after port 0's records): what the Cbufs
    hold after the pass; ``config``: records and templates instead of the image's;
    ``spans``: records of spans of PEs."""
    return _cbuf_words(p, *_port_configs(p, image, config_ports, config, spans), config_ports)


def _cbuf_words(p, cfgs, templates, config_ports):
    """Return the Cbuf words per port of records ``cfgs`` and CTX ``templates``."""
    region = cbuf_capacity(p) // config_ports
    mask = (1 << 64) - 1
    return [np.array([int(w) & mask for w in list(c) + (list(templates) if q == 0
                                                          else [])][:region],
                     dtype=np.uint64) for q, c in enumerate(cfgs)]


def _plan_pass(p, image, reads, config, exts, prev_cbuf, config_ports, moves=(), early=False,
               edge=False, spans=False):
    """Place one pass in ``exts``; return ``(plan dict, results, Cbuf words per port)``.

    The Cbuf words are loaded (on channel 0) unless they equal ``prev_cbuf``; ``early``: the
    Dbuf data group by group of contexts, a fence after each (module doc); ``edge``: blocks
    several Dbufs hold go by edge multicast where they can (``sw.compiler.dma_plan``);
    ``spans``: the Cbuf records of spans of PEs.
    """
    nch = len(exts)
    region = cbuf_capacity(p) // config_ports
    cfgs, templates = _port_configs(p, image, config_ports, config, spans)
    cwords = _cbuf_words(p, cfgs, templates, config_ports)
    descs, moved = [[] for _ in range(nch)], 0
    load = [0] * nch
    cbuf_words = 0
    if prev_cbuf is None or not _same_words(prev_cbuf, cwords):
        for q, words in enumerate(cwords):
            if len(words):
                descs[0].append(_desc(exts[0].put(words), 8 * q * region, 8 * len(words),
                                      DESC_CBUF))
                moved += 8 * len(words)
                load[0] += len(words)
                cbuf_words += len(words)
        prev_cbuf = cwords
    touched = []
    on_chip = _plan_moves(p, moves, descs, touched, load, edge)
    # Each channel loads the Dbuf at its own edge port last: that Dbuf's store acks enter
    # the reply mesh through the merge a configuration port's CONFIG flits take there,
    # which would halve the configuration's rate while the two overlap.
    own = _channel_ports(p, nch)
    groups = [list(g) for g in image.meta.get("shared", ())]
    shared = {a for g in groups for a in g}
    keep = [tuple(f) for f in image.meta.get("on_chip", ())]
    shift = gate_shift(image.contexts) if early else 0
    group = group_of(dict(map(tuple, image.meta.get("first_use", ()))), shift) if early else {}
    runs = _runs(image, [(a, len(image.segments[a])) for a in sorted(shared)] + keep, group)
    # Each Dbuf on one channel, its multicast copies counted in its load as if unicast (the
    # channel sends one STORE per copy; with edge multicast the edges' channels are kept).
    chan = assign_channels(_words_per_dbuf(p, [(lo, 8 * len(w)) for _, lo, w in runs]
                                           + [(a, len(image.segments[a])) for a in shared]),
                           nch, p, load, edge)
    # Per group: its multicast blocks (a block in the group of its first reading copy), then
    # its runs, each channel's own-edge Dbuf last; then a fence on every channel that has
    # data in a later group or this one.
    data = [[] for _ in range(nch)]               # per channel: (group, descriptor)
    sizes = [len(image.segments[g[0]]) for g in groups]
    for w in delivery_windows(groups, p, chan, edge, sizes):
        c, lo, g = w.channel, w.lo, w.group
        blob = bytes(image.segments[groups[g][0]])
        if lo % 8 or len(blob) % 8:
            raise FdpuError(f"multicast segment at {lo:#x} ({len(blob)} bytes) is not whole "
                            f"words")
        start, n = part_range(len(blob), w.part)          # the part of the block it loads
        blob, lo = blob[start:start + n], lo + start
        data[c].append((block_group(group, groups[g]),
                        _desc(exts[c].put(np.frombuffer(blob, dtype="<u8")), lo, len(blob),
                              w.flags, w.copies)))
        moved += len(blob)
        first = p.dbuf_of(lo)[0]
        for d in w.targets:
            at = lo + (d - first) * p.dbuf_bytes
            touched.append((at, at + len(blob)))
    for c, g, lo, words in sorted([(chan[p.dbuf_of(lo)[0]], g, lo, w) for g, lo, w in runs],
                                  key=lambda t: p.dbuf_of(t[2])[0] == own[t[0]]):
        data[c].append((g, _desc(exts[c].put(words), lo, 8 * len(words))))
        moved += 8 * len(words)
        touched.append((lo, lo + 8 * len(words)))
    for c, entries in enumerate(data):
        entries.sort(key=lambda e: e[0])          # stable: the order above within a group
        by = {}
        for g, d in entries:
            by.setdefault(g, []).append(d)
        fences = set(fence_groups(by)) if early else set()
        for g in sorted(set(by) | fences):
            descs[c] += by.get(g, [])
            if g in fences:
                descs[c].append(_desc(0, 0, 0))   # the fence of group g
    outs, out_bytes, where = [[] for _ in range(nch)], 0, []
    for c, lo, hi, group in out_runs(p, reads, nch):
        at = exts[c].reserve(hi - lo)
        outs[c].append(_desc(at, lo, hi - lo, DESC_OUT))
        touched.append((lo, hi))
        where += [(addr, n, c, at + addr - lo) for addr, n in group]
        out_bytes += hi - lo
    plan = dict(on_chip=on_chip, descs=descs, cbuf_words=cbuf_words, cwords=cwords, early=early,
                gate_shift=shift,
                ndesc=sum(len(d) for d in descs), outs=outs,
                nouts=sum(len(o) for o in outs), cfg=[len(c) for c in cfgs],
                templates=len(templates), image=image, moved=moved, out_bytes=out_bytes,
                touched=sorted(touched))
    return plan, where, prev_cbuf


def _same_words(a, b):
    """Return whether two per-port lists of Cbuf words are equal."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def _plan_moves(p, moves, lists, touched, load, edge=False):
    """Append the MOVE descriptors of ``moves`` to the descriptor lists ``lists`` (per
    channel; ``load``, the words each channel sends, updated), and their source and destination
    ranges to ``touched``; return the bytes they store."""
    if not moves:
        return 0
    for c, m, w in move_windows(moves, p, len(lists), load, edge):
        lists[c].append(_desc(m.src, w.lo, m.nbytes, DescFlag.MOVE | w.flags, w.copies))
    for m in moves:
        touched.append((m.src, m.src + m.nbytes))
        touched += [(a, a + m.nbytes) for a in m.dsts]
    return sum(m.nbytes * len(m.dsts) for m in moves)


def _union(ranges):
    """Return sorted ``(lo, hi)`` ranges merged where they overlap or touch."""
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _shared_byte(a, b):
    """Return the first address two lists of ``(lo, hi)`` ranges share, or ``None``."""
    a, b = _union(a), _union(b)
    i = k = 0
    while i < len(a) and k < len(b):
        lo, hi = max(a[i][0], b[k][0]), min(a[i][1], b[k][1])
        if lo < hi:
            return lo
        if a[i][1] <= b[k][1]:
            i += 1
        else:
            k += 1
    return None


def _spec_pass(pl, exts, backdoor_in, overlap, prefetch):
    """Place a pass's descriptor lists in ``exts``; return its pass of the run spec."""
    lin = [[exts[c].put(np.array(d, dtype=np.uint64).reshape(-1)) if d else 0, len(d)]
           for c, d in enumerate(pl["descs"])]
    lout = [[exts[c].put(np.array(o, dtype=np.uint64).reshape(-1)) if o else 0, len(o)]
            for c, o in enumerate(pl["outs"])]
    image = pl["image"]
    all_in = [(c, d) for c, ds in enumerate(pl["descs"]) for d in ds]
    return dict(
        dma_in=lin, dma_out=lout, prefetch=prefetch,
        in_descs=[[c, *(int(f) for f in unpack_descriptor(d))]
                  for c, d in all_in] if backdoor_in else [],
        regs=dict(i_n_config=pl["cfg"][0], i_n_ctx=pl["templates"],
                  **{f"i_n_config_{q}": n for q, n in enumerate(pl["cfg"]) if q},
                  i_cbuf_words=pl["cbuf_words"] if overlap and not backdoor_in else 0,
                  i_contexts=image.contexts, i_window=image.window,
                  i_ends=image.ends_per_context, i_ctx_base=image.ctx_base,
                  i_keep=int(pl["keep"]), i_end_base=pl["end_base"],
                  i_ctx_gate=int(pl["early"] and not backdoor_in),
                  i_gate_shift=pl["gate_shift"]))


def plan_job(params, passes, *, configs=None, dma_channels=1, config_ports=1, backdoor_in=False,
             overlap=False, double_buffer=False, cbuf_loaded=None, early_start=False,
             edge_multicast=False, keep_config=True, config_spans=False):
    """Return the :class:`JobPlan` of ``passes`` (``run_job``'s arguments of the same names).

    ``passes``: each pass's image and the Dbuf ranges ``(global address, nbytes)`` to store
    out, and optionally third its moves (``sw.compiler.chain.Move``: Dbuf to Dbuf copies at
    the start of its DMA-in phase); ``configs``: per pass, Cbuf words (records, CTX templates)
    instead of the image's; ``cbuf_loaded``: the Cbuf words per configuration port
    (:func:`cbuf_port_words`) the Cbufs hold when the job starts, or ``None`` (reset);
    ``early_start``: each context starts when its own data are in (module doc; needs
    ``overlap``); ``edge_multicast``: blocks several Dbufs of an edge hold go as one
    edge-multicast flit a word (``sw.compiler.dma_plan.delivery_windows``); ``keep_config``:
    a pass whose Cbuf words equal the previous pass's keeps the PEs' configuration (module
    doc); ``config_spans``: the Cbuf records hold the slots PEs share once, each record sent
    to a span of PEs (:meth:`~sw.compiler.image.Image.cbuf_port_words`).
    """
    p = params
    if not isinstance(dma_channels, int) or isinstance(dma_channels, bool) \
            or not 1 <= dma_channels <= p.num_dbufs:
        raise FdpuError(f"dma_channels must be an integer in 1..{p.num_dbufs} (the edge "
                        f"ports), got {dma_channels!r}")
    nch = dma_channels
    config_port_coords(p, config_ports)    # raises FdpuError for a bad count
    exts = [_ExtImage() for _ in range(nch)]
    plan, prev_cbuf, results = [], cbuf_loaded, []
    region = cbuf_capacity(p) // config_ports
    preload = [] if cbuf_loaded is None else [(q * region, np.asarray(words, dtype=np.uint64))
                                              for q, words in enumerate(cbuf_loaded) if len(words)]
    # The configuration the PEs hold at a pass's start (a resumed job's: the bench restores
    # the one its first pass keeps) and the ENDs each END slot has sent since it was made.
    configured, ends = cbuf_loaded, 0
    for j, (image, reads, *moves) in enumerate(passes):
        pl, where, prev_cbuf = _plan_pass(p, image, reads, None if configs is None else configs[j],
                                          exts, prev_cbuf, config_ports,
                                          moves[0] if moves else (), early_start,
                                          edge_multicast, config_spans)
        pl["keep"] = bool(keep_config and configured is not None
                          and _same_words(pl["cwords"], configured))
        pl["end_base"] = ends if pl["keep"] and j else 0
        ends, configured = (pl["end_base"] + image.contexts) % 2 ** 32, pl["cwords"]
        plan.append(pl)
        results.append(where)
    # The results: per channel one range of its external memory, read back at the end.
    reads_spec, res_base = [], {}
    for c in range(nch):
        spans = [(at, n) for w in results for _, n, cc, at in w if cc == c]
        if spans:
            lo = min(a for a, _ in spans) & ~7
            hi = max(a + n for a, n in spans)
            res_base[c] = (len(reads_spec), lo)
            reads_spec.append([c, lo // 8, (hi - lo + 7) // 8])
    if double_buffer:
        for j in range(1, len(plan)):
            at = _shared_byte(plan[j - 1]["touched"], plan[j]["touched"])
            if at is not None:
                raise FdpuError(f"passes {j - 1} and {j} both use Dbuf byte {at:#x}: double "
                                f"buffering needs consecutive passes in disjoint Dbuf bytes "
                                f"(plan the layer with double_buffer=True)")
    spec_passes = [_spec_pass(pl, exts, backdoor_in, overlap,
                              bool(double_buffer and j and pl["cbuf_words"] == 0))
                   for j, pl in enumerate(plan)]
    ext_in = [pl["moved"] + 16 * (pl["ndesc"] + pl["nouts"]) for pl in plan]
    ext_out = [pl["out_bytes"] for pl in plan]
    # A resumed job whose first pass keeps its configuration: the bench makes it first.
    configure = dict(spec_passes[0]["regs"], i_contexts=0, i_keep=0, i_ctx_gate=0,
                     i_cbuf_words=0) if plan and plan[0]["keep"] else None
    return JobPlan(p, exts, plan, results, reads_spec, res_base, spec_passes, ext_in, ext_out,
                   preload, configure)
