"""The performance model: cycles, utilization and external traffic of an FC plan, in a second.

Contract (``docs/perf.md`` has the reasoning and the error against the RTL)
---------------------------------------------------------------------------
:func:`predict` takes an :class:`~sw.compiler.fc_plan.FcPlan`, its binary16 weights (the
stored weights set the sparse item sizes and the ``skip`` graph's work) and the system around
the array (:class:`System`: DMA channels, external memory latency and bandwidth,
configuration ports, configuration behind the DMA-in) and returns a :class:`Prediction`: per
pass the configuration, DMA-in, context, compute, end-to-end and DMA-out cycles and the
external bytes in and out, and in total the cycles, utilization, external bytes and peak
bandwidth, named as ``fdpu run --sim verilator`` names them.  It interprets no token:

* **Work.** Every engine's issues per context come from its graph's rates
  (:func:`sw.compiler.blocking.engine_issues`, split by the PE's pipes); for the ``skip`` graph
  they are linear in the item's stored weights (:func:`sw.compiler.balance.row_steps`).
* **A context on an engine** takes its busiest resource's cycles plus a fixed overhead: its
  slowest operand stream (one token a step, delivered to every FACC that shares it through a
  MOV tree, the loads keeping at most ``operand_depth`` tokens in flight; for the gather
  graph also its weight streams), the FP pipe, the INT pipes (two with ``int_issue = 2``),
  its home Dbuf (one access a cycle, shared by the engines homed there), the busiest mesh
  link its loads cross (:func:`sw.compiler.home_dbufs.link_engines`), for the SWITCH
  graph the loop of each weight row and for the skip graph the load round trips of each
  row (its rows stream their loads side by side); each divided by the rate the RTL reaches
  (:class:`Constants`).
* **Contexts** start on each engine as soon as its previous one is done and at most
  ``window`` (the operand depth) are in flight: context ``c`` waits for context
  ``c - window`` to retire on every engine (the MicC's window); the pass ends a latency after
  the last context retires.
* **Configuration** sends one CONFIG flit (or reads one record header) per cycle and port:
  the image's records on the busiest port, a record of a span of PEs once per PE
  (:func:`sw.compiler.image.config_word_counts`), plus a drain; the Cbufs load each record
  word once.
* **DMA** moves each pass's Dbuf data (descriptor tables, input blocks, item data, laid out
  as :mod:`sw.compiler.dbuf_layout` lays them out, runs of one Dbuf merged as the runtime merges
  them), the Cbuf image on the first pass and the descriptors; each Dbuf's data go over one
  channel (the channels balanced by bytes), at the memory's bandwidth plus a cost per
  descriptor and the memory latency; the DMA-out moves the pass's output blocks.
* **A pass** with ``overlap`` configures behind its DMA-in (its contexts wait for both; a
  layer's passes after its first keep the configuration, no cycle);
  without, DMA-in, configuration and contexts follow each other; the DMA-out follows.  With
  ``early_start`` the DMA-in is cut into the runtime's groups of contexts
  (:mod:`sw.compiler.dma_plan`, a fence costing a descriptor after each), and each context
  starts no earlier than the cycle its group's data are in (on every channel).

The rates and overheads are fitted to RTL runs by ``scripts/calibrate.py`` and stored with
those runs in ``sw/models/calibration.json`` (:data:`CALIBRATION`, read by :func:`calibrated`;
``sw.models.perf_fit`` fits and checks them).
"""

import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from sw.compiler import balance, blocking, chain, dbuf_layout, dma_plan, home_dbufs
from sw.compiler.asm import config_word_counts
from sw.compiler.fc_plan import LANES
from sw.compiler.image import config_word_counts as image_config_word_counts
from sw.compiler.program import program
from sw.models import figures
from sw.spec.arch import ArrayParams
from sw.spec.dma import DESC_BYTES as DMA_DESC_BYTES
from sw.spec.errors import FdpuError
from sw.spec.isa import Op
from sw.spec.system import System

__all__ = ["System", "Constants", "PassFigures", "Prediction", "Workload", "predict",
           "min_external_bytes", "calibrated", "constants_of", "CALIBRATION"]

#: The calibration file: the fitted constants and the RTL points they came from
#: (``sw.models.perf_fit`` writes it).
CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")



@dataclass(frozen=True)
class Constants:
    """The model's fitted rates and overheads (``sw/models/calibration.json``).

    ``fp``, ``pipe2``, ``pipe0``, ``int1``: issues per cycle the FP pipe, INT pipe 2, pipe 0
    (``int_issue = 2``) and the single INT pipe (``int_issue = 1``) sustain; ``dbuf``: accesses
    per cycle a Dbuf serves; ``mesh``: flits per cycle a link carries for the engines routed
    over it; ``loop``: cycles per column of a SWITCH loop; ``acc``, ``fan``, ``credit``: cycles
    per step of one operand stream, ``acc + fan x f + credit / operand_depth`` for a token that
    ``f`` FACCs share (one input token feeds ``kb`` FACCs, one skip-graph value ``gb``) and
    whose loads keep at most ``operand_depth`` tokens in flight; ``wstream``: cycles per
    column the gather graph's weight streams take (``wstream + fan x kb + credit /
    operand_depth``: the rows' BSCAN tokens, value loads and FACCs in turn);
    ``shallow``: the gather (and reuse) graph's loads take ``1 + shallow / operand_depth``
    times their share of the pipes, the Dbufs and the mesh links (a full operand queue holds
    a load back);
    ``switch_held``: the SWITCH graph's, ``1 + switch_held / operand_depth`` (its loads issue
    at the rate of its feedback loops, not of the operand queues);
    ``queue``, ``inflight``: the skip graph's, ``1 + queue + inflight / n`` with ``n`` the
    loads its engines can keep in flight to one Dbuf (engines sharing it x (``gb`` + 1) x
    ``operand_depth``: the input loads and the value load);
    ``context``: cycles a context adds beside its busiest resource; ``tail``: cycles from the
    last context's work to the pass's end; ``config0``, ``config1``: configuration cycles,
    fixed and per Cbuf word of the busiest port; ``dma0``, ``dma_desc``, ``dma_bw``: DMA cycles
    fixed, per descriptor, and the share of the memory bandwidth a channel reaches;
    ``steal``: cycles a running pass's contexts lose per DMA access at a Dbuf they keep fully
    busy (the Dbufs serve the DMA first, ``docs/system.md``): double buffering's STOREs of the
    next pass and LOADs of the previous one, early start's STOREs of the pass's own DMA-in;
    ``give``: the reverse, cycles a DMA-in loses per word it stores beside running contexts
    (early start's own, or a double-buffered pass's beside the pass before) into a Dbuf they
    keep fully busy (their loads and its STOREs share the request
    mesh's links into the Dbufs), spread over the channels;
    ``ramp``: the steps of an accumulation before its loads are held as the graph's factor
    says: of a row of ``L`` FACC steps, ``max(0, L - ramp) / L`` of the factor's excess
    counts (a short row's stream ends before its operand queues fill);
    ``row_trip``: cycles of a load's round trip for a graph whose weight rows each stream
    their own loads (``GraphKind.row_round_trip``: the skip graph): a row of ``L`` steps
    takes at least ``max(0, L - ramp) x row_trip / operand_depth``.
    """
    fp: float = 1.0
    pipe2: float = 1.0
    pipe0: float = 0.8
    int1: float = 0.5
    dbuf: float = 1.0
    mesh: float = 1.0
    loop: float = 19.0
    acc: float = 1.5
    fan: float = 1.4
    credit: float = 4.0
    wstream: float = 12.0
    shallow: float = 0.5
    switch_held: float = 0.5
    queue: float = 0.05
    inflight: float = 1.0
    context: float = 5.0
    tail: float = 30.0
    config0: float = 11.0
    config1: float = 1.0
    dma0: float = 6.0
    dma_desc: float = 4.0
    dma_bw: float = 0.8
    steal: float = 1.0
    give: float = 0.5
    ramp: float = 8.0
    row_trip: float = 30.0


def constants_of(values, path=CALIBRATION):
    """Return the :class:`Constants` of ``values`` (a dict naming exactly its fields)."""
    names = {f.name for f in fields(Constants)}
    if set(values) != names:
        raise FdpuError(f"the calibration {path} does not fit the model: constants "
                        f"{sorted(set(values) - names) or 'none'} unknown, "
                        f"{sorted(names - set(values)) or 'none'} missing; re-fit it "
                        f"(python scripts/calibrate.py fit)")
    return Constants(**values)


@functools.lru_cache(maxsize=None)
def calibrated(path=CALIBRATION):
    """Return the fitted :class:`Constants` stored in the calibration file ``path``."""
    try:
        with open(path) as f:
            values = json.load(f)["constants"]
    except (OSError, ValueError, KeyError) as exc:
        raise FdpuError(f"cannot read the performance model's calibration {path}: {exc}") \
            from exc
    return constants_of(values, path)


@dataclass
class PassFigures:
    """One pass's predicted cycles and external bytes (named as the RTL run's ``pass_cycles``)."""
    dma_in: int
    config: int
    contexts: int
    hold: int
    span: int
    dma_out: int
    ext_in: int
    ext_out: int
    bound: str = ""
    in_hidden: int = 0         # double-buffered: DMA-in cycles behind the previous pass
    out_hidden: int = 0        # double-buffered: DMA-out cycles behind the next pass
    out_exposed: int = None    # DMA-out cycles on the critical path (None: all of them)
    cbuf_in: int = 0           # cycles until the pass's Cbuf words are in: the MicC starts

    @property
    def compute(self):
        """Return configuration + contexts (the MicC's cycles without waiting for the DMA)."""
        return self.config + self.contexts


@dataclass
class Prediction:
    """What :func:`predict` returns: per pass :class:`PassFigures` and the layer's totals."""
    passes: list
    flops: int
    useful_flops: int
    dense_flops: int
    params: ArrayParams
    min_external_bytes: int
    seconds: float = 0.0
    notes: dict = field(default_factory=dict)
    port_bandwidth: float = 32.0   # bytes per cycle of every DMA channel together

    @property
    def compute_cycles(self):
        return sum(p.compute for p in self.passes)

    @property
    def cycles(self):
        """Return the end-to-end cycles (every pass's span and exposed DMA-out)."""
        return sum(p.span + (p.dma_out if p.out_exposed is None else p.out_exposed)
                   for p in self.passes)

    @property
    def dma_cycles(self):
        return sum(p.dma_in + p.dma_out for p in self.passes)

    @property
    def ext_in(self):
        return sum(p.ext_in for p in self.passes)

    @property
    def ext_out(self):
        return sum(p.ext_out for p in self.passes)

    @property
    def peak_bandwidth(self):
        """Return the largest bytes per compute cycle of a pass (the RTL run's definition)."""
        return max((p.ext_in + p.ext_out) / max(1, p.compute) for p in self.passes)

    def as_dict(self):
        """Return the figures as ``fdpu run --sim verilator --json`` names them."""
        return dict(
            cycles=self.cycles, compute_cycles=self.compute_cycles, dma_cycles=self.dma_cycles,
            config_cycles=sum(p.config for p in self.passes),
            context_cycles=sum(p.contexts for p in self.passes),
            hold_cycles=sum(p.hold for p in self.passes),
            pass_cycles=[{**{k: v for k, v in asdict(p).items()
                             if k not in ("out_exposed", "cbuf_in")},
                          "compute": p.compute} for p in self.passes],
            flops=self.flops, useful_flops=self.useful_flops,
            **figures.utilizations(self.params, useful=self.useful_flops, flops=self.flops,
                                   dense=self.dense_flops, compute_cycles=self.compute_cycles,
                                   context_cycles=sum(p.contexts for p in self.passes),
                                   cycles=self.cycles),
            ext_read_bytes=self.ext_in, ext_write_bytes=self.ext_out,
            external_bytes=self.ext_in + self.ext_out,
            min_external_bytes=self.min_external_bytes,
            **figures.bound(compute_cycles=self.compute_cycles,
                            min_bytes=self.min_external_bytes, dma_channels=1,
                            mem_bandwidth=self.port_bandwidth, cycles=self.cycles),
            peak_bandwidth=self.peak_bandwidth, model_seconds=self.seconds, **self.notes)


def predict(plan, weights, system=System(), constants=None, image=None, chained_from=None,
            chained_to=None):
    """Return the :class:`Prediction` of running ``plan`` on ``weights`` (``K x C``).

    ``constants`` default to the calibrated ones (:func:`calibrated`);
    ``image`` is the plan's assembled image if the caller has it (its Cbuf words set the
    configuration cycles and bytes), else they are counted from the plan's placed graph
    (:func:`sw.compiler.asm.config_word_counts`, the same words).  Layers chained on
    chip (:mod:`sw.compiler.chain`): ``chained_from``, the previous layer's plan, whose stages
    this layer's DMA-in copies into its input blocks by MOVE descriptors (each word one LOAD
    and a STORE per copy, no external byte but the descriptors) instead of loading them;
    ``chained_to``, the next layer's plan: the outputs stay on chip (no DMA-out), stored into
    the stage chunks, where the last context's STOREs queue (:func:`_stage_queue`).
    """
    t0 = time.perf_counter()
    pred = Workload(plan, weights, system, image, chained_from, chained_to).evaluate(constants)
    pred.seconds = time.perf_counter() - t0
    return pred


class Workload:
    """What a plan asks of the hardware, before any rate: per pass and context every engine's
    stored-weight density, per DMA phase and channel the bytes and descriptors, the
    configuration's Cbuf words.  :meth:`evaluate` turns it into cycles with the constants
    (the fitting script evaluates one workload with many constants)."""

    def __init__(self, plan, weights, system=System(), image=None, chained_from=None,
                 chained_to=None):
        self.plan, self.system = plan, system
        p = plan.params
        w16 = np.asarray(weights, dtype=np.float16)
        rows = balance.row_steps(plan, w16).reshape(plan.kblocks, plan.kb)
        steps, longest = rows.sum(axis=1), rows.max(axis=1)
        nnz_rows = _row_nnz(plan, w16)
        self.work = _Work(plan)
        self.cfg_words, cbuf_words = _config_words(plan, image, system.config_ports,
                                                   system.config_spans)
        self.passes = []
        # Per pass ``({Dbuf: words its DMA-in stores}, {Dbuf: words its DMA-out loads})``.
        self.dbuf_words = []
        # Per pass, per context the output STOREs that queue at the stage Dbuf (chained on:
        # :func:`_stage_queue`); ``None`` where the outputs go home.
        self.stage_queue = []
        laid, stage = plan, None
        if chained_to is not None:
            # The outputs go into the next layer's input layout, as chain lays them.
            laid = chain.producer_plan(plan)
            stage = chain.stages(plan, chained_to)[:2]
        for q in range(plan.passes):
            dens = self.work.densities(q, steps, longest)
            self.stage_queue.append(None if stage is None else _stage_queue(plan, q, stage[0]))
            segs, groups, first, layout = _pass_segments(laid, q, nnz_rows,
                                                         chained_from is not None, stage)
            cbuf = cbuf_words if q == 0 else []
            moves = None if chained_from is None else \
                _move_load(chained_from, plan, system.dma_channels, sum(cbuf),
                           system.edge_multicast)
            early = None
            if system.early_start and system.overlap:
                shift = dma_plan.gate_shift(plan.pass_micc_contexts(q))
                early = (dma_plan.group_of(first, shift), shift)
            din = _dma_load(segs, p, system.dma_channels, cbuf, groups=groups, pre=moves,
                            early=early, edge=system.edge_multicast)
            outs = [] if chained_to is not None else \
                _output_segments(plan, layout, system.dma_channels)
            dout = [] if chained_to is not None else \
                _dma_load(outs, p, system.dma_channels, [], out=True)
            self.passes.append((dens, din, dout, cbuf))
            blocks, nbytes = groups
            self.dbuf_words.append((
                _dbuf_words(segs + [(a, nbytes) for g in blocks for a in g], p),
                _dbuf_words([(p.dbuf_base(d), n) for d, n in outs], p)))
        nnz = int(np.count_nonzero(w16.view(np.uint16)))
        self.useful_flops = figures.useful_flops(plan, nnz)
        self.dense_flops = figures.dense_flops(plan)
        self.min_bytes = min_external_bytes(plan, nnz)

    def evaluate(self, constants=None, rounded=True):
        """Return the :class:`Prediction` with ``constants`` (default: the calibrated ones);
        ``rounded=False`` keeps the cycles as floats (a fit needs them smooth)."""
        k, system, p = constants or calibrated(), self.system, self.plan.params
        cyc = _rounder(rounded)
        configured = cyc(k.config0 + k.config1 * self.cfg_words)
        passes, fsteps, busy = [], 0.0, []
        for q, (dens, din, dout, cbuf) in enumerate(self.passes):
            # The passes after a layer's first keep its configuration (one program).
            config = 0 if q else configured
            # The MicC starts when channel 0 has written the Cbufs (its list begins with
            # their descriptors: the armed start, docs/system.md), so a configuration ends
            # no earlier than those words' load and its own cycles.
            cbuf_in = cyc(_dma_cycles([(8 * sum(cbuf), len(cbuf), sum(cbuf))], system,
                                      k)[0]) if config and cbuf else 0
            configured_at = cbuf_in + config
            queued = self.stage_queue[q]
            queued = None if queued is None else queued / k.dbuf
            ctx_cycles, bound, fp = self.work.pass_cycles(dens, k, extra=queued)
            busy.append(self.work.dbuf_busy(dens, k))
            fsteps += fp
            dout_c, ext_out, nout = _dma_cycles(dout, system, k)
            dma_out = cyc(dout_c)
            if isinstance(din, _Groups):
                # Early start: context c no earlier than its group's data are in.
                arrive = din.arrivals(system, k)
                dma_in, moved, ndesc = arrive[-1], din.bytes, din.descriptors
                # The rest of the DMA-in runs beside the contexts (the same loss per access
                # as beside another pass's, _stolen): the words of the groups that arrive
                # after the first context starts (_beside); a later
                # double-buffered pass's DMA-in ran beside the pass before (_stolen's).
                first = max(configured_at, arrive[0])
                beside = {} if q and self.plan.double_buffer else \
                    _beside(din.words, arrive, first)
                lost = _lost(busy[-1], ctx_cycles, beside, k)
                # Only the words stored while the contexts run contend with them: where the
                # DMA-in beside them lasts longer than they run (contexts that wait for their
                # data, e.g. a streamed plan's), that share of its words (_covered).
                cover = _covered(lost, ctx_cycles, arrive[-1] - first)
                lost, beside = cover * lost, {d: cover * w for d, w in beside.items()}
                # ... and the contexts slow it in turn (give): the arrivals after the first
                # context's start stretch by what its words beside them lose.
                arrive = _slowed(arrive, first, _given(busy[-1], ctx_cycles, beside,
                                                       system.dma_channels, k))
                dma_in = arrive[-1]
                # Groups past the last one with data (their contexts read only data an
                # earlier group loaded: shared row blocks) are ready with the whole DMA-in.
                last = len(arrive) - 1
                ready = np.array([arrive[min(c >> din.shift, last)] - configured_at
                                  for c in range(dens[0].shape[0])])
                # The loss falls on the contexts that run beside the DMA-in (their data in
                # before its end), evenly: a context waiting for its data absorbs it.
                during = ready < arrive[-1] - configured_at
                extra = np.where(during, lost / max(1, int(during.sum())), 0.0)
                if queued is not None:
                    extra = extra + queued
                waited, _, _ = self.work.pass_cycles(dens, k, ready, extra)
                ctx_cycles = ctx_cycles + lost
                dma_in, ctx_cycles = cyc(dma_in), cyc(ctx_cycles)
                span = cyc(configured_at + max(waited, ctx_cycles))
                hold = max(0, span - configured_at - ctx_cycles)
            else:
                dma_in, moved, ndesc = _dma_cycles(din, system, k)
                dma_in, ctx_cycles = cyc(dma_in), cyc(ctx_cycles)
                if system.overlap:
                    start = max(dma_in, configured_at)
                    hold = max(0, dma_in - configured_at)
                else:
                    start, hold = dma_in + config, 0
                span = start + ctx_cycles
            # The DMA reads its descriptor lists, in and out, from external memory.
            ext_in = moved + DMA_DESC_BYTES * (ndesc + nout)
            passes.append(PassFigures(dma_in, config, ctx_cycles, hold, span,
                                      dma_out, ext_in, ext_out, bound, cbuf_in=cbuf_in))
        if self.plan.double_buffer and system.overlap:
            _stolen(passes, busy, self.dbuf_words, k, cyc, system.dma_channels)
            _double_buffered(passes)
        return Prediction(passes, flops=int(round(fsteps)) * 2 * LANES,
                          useful_flops=self.useful_flops, dense_flops=self.dense_flops,
                          params=p,
                          min_external_bytes=self.min_bytes,
                          port_bandwidth=system.dma_channels * system.mem_bandwidth)


def _stolen(passes, busy, words, k, cyc, channels):
    """Add to each pass of a double-buffered plan the context cycles the DMA takes from it
    (in place): while pass ``j``'s contexts run, the DMA loads pass ``j - 1``'s outputs out of
    the Dbufs and then stores pass ``j + 1``'s data into them, and a Dbuf serves the DMA
    first.  At Dbuf ``d`` the contexts lose ``steal x u_d`` cycles per DMA access that falls
    within them, ``u_d`` their own use of its port (``busy``: its cycles over the contexts');
    the pass loses what its most delayed Dbuf loses (:func:`_lost`).  The contexts slow the
    words of pass ``j + 1``'s DMA-in beside them in turn, as an early start's own
    (:func:`_given` over the ``channels``): that DMA-in lasts longer by as much.  The share
    of a DMA phase within the contexts is timed as :func:`_double_buffered` places it
    (before this term)."""
    for j, f in enumerate(passes):
        ctx = float(f.contexts)
        if ctx <= 0:
            continue
        out_prev = passes[j - 1].dma_out if j else 0
        share = {}
        if j:
            part = min(1.0, ctx / out_prev) if out_prev else 0.0
            for d, w in words[j - 1][1].items():
                share[d] = share.get(d, 0.0) + part * w
        if j + 1 < len(passes) and passes[j + 1].dma_in:
            part = min(1.0, max(0.0, ctx - out_prev) / passes[j + 1].dma_in)
            nxt = {d: part * w for d, w in words[j + 1][0].items()}
            for d, w in nxt.items():
                share[d] = share.get(d, 0.0) + w
            passes[j + 1].dma_in = cyc(passes[j + 1].dma_in +
                                       _given(busy[j], ctx, nxt, channels, k))
        f.contexts = cyc(f.contexts + _lost(busy[j], ctx, share, k))


def _lost(busy, ctx, share, k):
    """Return the context cycles ``share`` ``{Dbuf: DMA accesses within the contexts}`` takes
    from contexts of ``ctx`` cycles that ask ``busy`` ``{Dbuf: port cycles}``: ``steal x u_d``
    per access at Dbuf ``d``, ``u_d = busy_d / ctx`` (at most 1), the most delayed Dbuf's."""
    if ctx <= 0:
        return 0.0
    return k.steal * max((min(1.0, busy.get(d, 0.0) / ctx) * w for d, w in share.items()),
                         default=0.0)


def _covered(lost, ctx, span):
    """Return the share of an early-start DMA-in's words beside the contexts that fall while
    they run: the DMA-in lasts ``span`` cycles from the first context's start, the contexts
    run ``ctx`` cycles plus what they lose, ``lost`` if every word fell while they run.  With
    the words at an even rate, the share is their running time over the span, which itself
    holds the loss: ``c = (ctx + c x lost) / span``; 1 where they run at least as long."""
    if lost <= 0 or span <= lost:
        return 1.0
    return min(1.0, ctx / (span - lost))


def _beside(words, arrive, first):
    """Return ``{Dbuf: words}`` an early-start DMA-in stores after cycle ``first`` (when the
    contexts start): of each group's ``words`` the part that arrives after it, the group's
    words at an even rate between the arrival of the group before and its own."""
    out, start = {}, 0.0
    for w, end in zip(words, arrive):
        if end > start:
            part = min(1.0, max(0.0, end - max(start, first)) / (end - start))
        else:
            part = 1.0 if end > first else 0.0
        for d, n in w.items():
            out[d] = out.get(d, 0.0) + part * n
        start = end
    return out


def _given(busy, ctx, share, channels, k):
    """Return the DMA-in cycles the contexts of ``ctx`` cycles that ask ``busy`` ``{Dbuf: port
    cycles}`` take from the ``share`` ``{Dbuf: words}`` it stores beside them: ``give x u_d``
    per word at Dbuf ``d`` (``u_d`` as in :func:`_lost`), over the channels."""
    if ctx <= 0:
        return 0.0
    return k.give * sum(min(1.0, busy.get(d, 0.0) / ctx) * w
                        for d, w in share.items()) / channels


def _slowed(arrive, first, extra):
    """Return the arrival cycles ``arrive`` with what follows ``first`` stretched so that the
    last comes ``extra`` cycles later."""
    span = arrive[-1] - first
    if extra <= 0 or span <= 0:
        return arrive
    return [t if t <= first else first + (t - first) * (1 + extra / span) for t in arrive]


def _double_buffered(passes):
    """Re-time ``passes`` as the runtime overlaps a double-buffered plan's passes (in place).

    While pass ``j``'s contexts run (from ``s[j]``) the DMA stores pass ``j - 1`` and then
    loads pass ``j + 1``; pass ``j + 1``'s MicC starts when pass ``j`` ends and that DMA-out is
    done, configures, and starts its contexts when its DMA-in is done too.  The DMA-out of the
    last pass follows it.  Spans run from the previous pass's end; only the last DMA-out is
    exposed.
    """
    f0 = passes[0]
    start = max(f0.dma_in, f0.cbuf_in + f0.config)   # pass 0 as without double buffering
    s_prev = end_prev = 0
    for j, f in enumerate(passes):
        if j:
            prev = passes[j - 1]
            out_prev = passes[j - 2].dma_out if j >= 2 else 0
            micc = max(end_prev, s_prev + out_prev + f.cbuf_in)
            loaded = s_prev + out_prev + f.dma_in
            start = max(micc + f.config, loaded)
            f.hold = max(0, loaded - (micc + f.config))
            f.in_hidden = max(0, min(loaded, end_prev) - (s_prev + out_prev))
            prev.out_hidden = max(0, min(start + prev.dma_out, start + f.contexts) - start)
            prev.out_exposed = 0
        end = start + f.contexts
        f.span = end - end_prev
        s_prev, end_prev = start, end
    last = passes[-1]
    # The last pass's DMA-out follows it; the one before it ran behind its contexts.
    last.out_exposed = last.dma_out


def _rounder(rounded):
    """Return the function that turns a modelled cycle count into a reported one."""
    return (lambda v: int(round(v))) if rounded else float


def min_external_bytes(plan, nnz):
    """Return the layer's minimal external traffic: its weights once (dense: 2 B each; sparse:
    2 B per stored weight and a 1-bit mask per weight, the skip graph's format without its
    8-byte row words), its inputs once and its outputs once (2 B each)."""
    weights = plan.graph.min_weight_bytes(plan.dense_weights, nnz)
    return weights + 2 * plan.N * (plan.C + plan.K)


def _row_nnz(plan, w16):
    """Return the stored weights of each item row (``kblocks x kb``; the ``skip`` graph's
    empty rows store one)."""
    rows = np.asarray(plan.rows)
    nz = np.zeros(len(rows), dtype=np.int64)
    live = rows < plan.K
    nz[live] = np.count_nonzero(w16.view(np.uint16)[rows[live]], axis=1)
    nz = plan.graph.stored_count(nz, plan.chunks)
    return nz.reshape(plan.kblocks, plan.kb).sum(axis=1)


class _Work:
    """Per-context cycles of the engines of a plan (the module doc's "work" and "context")."""

    def __init__(self, plan):
        self.plan = plan
        p = plan.params
        # Issues at no and at every weight stored (equal unless the graph skips zeros).
        self.lo = blocking.engine_issues(plan.engine, density=0.0)
        self.hi = blocking.engine_issues(plan.engine, density=1.0)
        self.homes = np.array([d for _, d in plan.homes], dtype=np.int64)
        self.links = home_dbufs.link_engines(p, plan.homes) if plan.homes else 1
        self.window = p.operand_depth
        # The engines that share each engine's home Dbuf (their loads are in flight together).
        self.sharers = np.bincount(self.homes)[self.homes] if plan.homes else np.ones(1)

    def densities(self, q, steps, chain):
        """Return pass ``q``'s ``(densities, chains)``, each ``contexts x engines``: the
        stored-weight density of each context's item (FACC steps over ``kb x Cw``) and its
        longest accumulation (FACC steps of its fullest row); ``steps`` and ``chain`` are
        those of each row block, per lane group."""
        plan = self.plan
        E, ctxs = plan.engines, plan.pass_contexts(q)
        items = np.asarray(plan.pass_items(q))
        dummy = int(plan.graph.steps(plan.Cw, 0, plan.chunks))
        st = np.full(ctxs * E, plan.kb * dummy, dtype=np.float64)
        ch = np.full(ctxs * E, dummy, dtype=np.float64)
        kbi = plan.item_blocks[0][items]
        st[:len(items)] = steps[kbi]
        ch[:len(items)] = chain[kbi]
        st, ch = st.reshape(ctxs, E) / (plan.kb * plan.Cw), ch.reshape(ctxs, E)
        # A streamed plan's item runs as `chunks` contexts, each 1/chunks of its steps.
        G = plan.chunks
        return np.repeat(st, G, axis=0), np.repeat(ch, G, axis=0) / G

    def _issues(self, density):
        """Return ``(fp, pipe 2, pipe 0 or None, loads)`` at row density ``density`` (arrays)."""
        lo, hi, p = self.lo, self.hi, self.plan.params

        def lin(name):
            a, b = getattr(lo, name), getattr(hi, name)
            return a + (b - a) * density
        fp, mem = lin("fp"), lin("mem")
        other, p0 = lin("other"), lin("iter") + lin("hinted") + mem
        if p.int_issue == 2:
            return fp, other, p0, mem
        return fp, other + p0, None, mem

    def _held(self, chain, k):
        """Return the factor on the loads' share of the pipes, Dbufs and links per context
        and engine: the graph's (:meth:`GraphKind.held`), its excess counted ``max(0, L -
        ramp) / L`` for accumulations of ``L`` steps (``chain``)."""
        held = self.plan.graph.held(k, self.plan.engine, self.plan.params.operand_depth,
                                    self.sharers)
        return 1 + (held - 1) * np.maximum(0.0, chain - k.ramp) / np.maximum(chain, 1.0)

    def dbuf_busy(self, work, k):
        """Return ``{Dbuf: cycles}``: the port cycles the contexts of a pass with ``work``
        (:meth:`densities`) ask of each home Dbuf, summed over the contexts."""
        dens, chain = work
        _, _, _, mem = self._issues(dens)
        per = (np.asarray(mem) * self._held(chain, k)).sum(axis=0) / k.dbuf
        out = {}
        for e, d in enumerate(self.homes.tolist()):
            out[d] = out.get(d, 0.0) + float(per[e])
        return out

    def pass_cycles(self, work, k, ready=None, extra=None):
        """Return ``(context cycles (float), busiest bound, FACC steps)`` of a pass whose
        contexts and engines have the stored-weight densities and accumulations ``work``
        (:meth:`densities`); ``ready``: per context the cycle (from the contexts' start) before
        which it cannot start (early start: its data are not in); ``extra``: per context the
        cycles it loses besides (the DMA-in beside it)."""
        plan = self.plan
        dens, chain = work
        fp, p2, p0, mem = self._issues(dens)
        depth = self.plan.params.operand_depth
        kind, spec = plan.graph, plan.engine
        step = k.acc + k.fan * kind.shared_by(spec) + k.credit / depth
        terms = {"fp": fp / k.fp, "stream": chain * step}
        trip = kind.row_round_trip(k)
        if trip is not None:
            terms["row loads"] = np.maximum(0.0, chain - k.ramp) * trip / depth
        terms.update({n: np.full(dens.shape, v)
                      for n, v in kind.model_terms(spec, k, depth).items()})
        held = self._held(chain, k)
        if p0 is None:
            terms["int pipe"] = (p2 + (held - 1) * mem) / k.int1
        else:
            terms["pipe 2"], terms["pipe 0"] = p2 / k.pipe2, (p0 + (held - 1) * mem) / k.pipe0
        home = np.zeros((dens.shape[0], int(self.homes.max()) + 1))
        for e, d in enumerate(self.homes):
            home[:, d] += mem[:, e]
        terms["dbuf"] = home[:, self.homes] * held / k.dbuf
        terms["mesh link"] = mem * self.links * held / k.mesh
        names = list(terms)
        stack = np.stack([np.broadcast_to(terms[n], dens.shape) for n in names])
        cyc = stack.max(axis=0) + k.context
        if extra is not None:
            cyc = cyc + np.asarray(extra)[:, None]
        bound = names[int(np.bincount(stack.argmax(axis=0).ravel(),
                                      minlength=len(names)).argmax())]
        finish = np.zeros(dens.shape[1])
        retired = []
        for c in range(dens.shape[0]):
            start = finish if c < self.window else np.maximum(finish, retired[c - self.window])
            if ready is not None:
                start = np.maximum(start, ready[c])
            finish = start + cyc[c]
            retired.append(finish.max())
        total = (retired[-1] if retired else 0.0) + k.tail
        return total, bound, float(np.sum(fp))


def _config_words(plan, image, ports, spans):
    """Return ``(CONFIG flits and record headers of the busiest configuration port, the Cbuf
    words each port loads)`` of the image (port 0's CTX templates included; ports without
    words left out); with ``spans`` a record of several PEs is loaded once and sent to each
    (:meth:`~sw.compiler.image.Image.cbuf_port_words`)."""
    if image is None:
        cfgs, sent, templates = config_word_counts(*program(plan), ports, spans)
    else:
        cfgs, sent, templates = image_config_word_counts(
            image.params, image.program, image.preloads,
            int(((image.opcodes() == Op.CTX.value) & image.program.any(axis=3)).sum()), ports,
            spans, image.regs)
    loads = [n + (templates if q == 0 else 0) for q, n in enumerate(cfgs)]
    return max(sent), [n for n in loads if n]


def _stage_queue(plan, q, bases):
    """Return, per context of pass ``q`` (as :meth:`_Work.densities` counts them), the STOREs
    of its outputs that wait behind other engines' at the busiest stage Dbuf of a layer
    chained on (``bases``: per item ``(kbi, gbi)`` its first output's address,
    :func:`sw.compiler.chain.stages`).

    A chained layer's outputs go to the stage chunks, each at the top of one Dbuf, so every
    engine of a context stores its ``kb x gb`` output words into the same Dbuf or few, where
    they go one a cycle; the engines end their accumulations together, so the pass's last
    context lasts the longest queue at one Dbuf beyond its engine's own STOREs (which its
    issues count).  An earlier context's queue drains while the next one computes: zero.
    Outputs kept home (through the host) spread over the engines' own Dbufs instead."""
    p, E, ctxs = plan.params, plan.engines, plan.pass_contexts(q)
    out = np.zeros(ctxs * plan.chunks)
    items = np.asarray(plan.pass_items(q))[(ctxs - 1) * E:]         # the last context's
    if not len(items):
        return out
    kbi, gbi = (a[items] for a in plan.item_blocks)
    words = np.minimum(plan.kb, plan.K - kbi * plan.kb) * \
        np.minimum(plan.gb, plan.groups - gbi * plan.gb)
    dbufs = [p.dbuf_of(int(bases[(int(a), int(b))]))[0] for a, b in zip(kbi, gbi)]
    out[-1] = max(0.0, np.bincount(dbufs, weights=words).max() - words.max())
    return out


def _pass_segments(plan, q, nnz_rows, chained_in=False, stage=None):
    """Return ``(segments, groups, first, layout)`` of pass ``q``'s Dbuf data, from its layout
    (:func:`sw.compiler.dbuf_layout.pass_layout`, items sized by their stored weights
    ``nnz_rows`` per row block): ``segments`` ``[(global address, bytes)]`` loaded one Dbuf at
    a time, ``groups`` ``([[address]], bytes)``: the input blocks several Dbufs hold
    (multicast, ``dbuf_layout.shared_inputs``).  ``chained_in``: no input block (a chained
    previous layer writes them; their few padding words are left out); ``stage``: the outputs
    go to a chained next layer's input layout (``pass_layout``'s); ``first``: the first context
    that reads each segment (``dbuf_layout.first_use``); ``layout``: the
    :class:`~sw.compiler.dbuf_layout.PassLayout` (its outputs are the DMA-out's).  A row
    block's data and bias count once per Dbuf (its items share them)."""
    kind, spec = plan.graph, plan.engine
    # A dummy item has zero weights (the skip graph stores one a row).
    dummy = int(kind.stored_count(np.zeros(plan.kb, dtype=np.int64), plan.chunks).sum())

    def nnz(i):
        return dummy if i is None else int(nnz_rows[plan.item(i)[0]])

    def item_bytes(i):
        return kind.item_bytes(spec, nnz(i))

    layout = dbuf_layout.pass_layout(plan, q, item_bytes, stage)
    segs, groups = list(layout.tables), []
    for _, copies in ([] if chained_in else layout.inputs.values()):
        if len(copies) > 1:
            groups.append([a for _, a in copies])
        else:
            segs.append((copies[0][1], plan.input_bytes))
    seen = set()                     # a row block's data and bias, once per Dbuf
    for at in layout.places:
        if at.data not in seen:
            seen.add(at.data)
            segs.extend(dbuf_layout.data_pieces(at.data, at.nbytes, plan.chunk_bytes,
                                                kind.piece_bytes(spec, nnz(at.item))))
            if plan.bias_bytes:
                segs.append((at.bias, plan.bias_bytes))
    return segs, (groups, plan.input_bytes), dbuf_layout.first_use(layout), layout


def _output_segments(plan, layout, channels):
    """Return ``[(dbuf, bytes)]`` of the DMA-out descriptors of a pass of ``layout`` (a
    :class:`~sw.compiler.dbuf_layout.PassLayout`): its items' output blocks, side by side
    ones in one descriptor (:func:`sw.compiler.dma_plan.out_runs`, the runtime's rule)."""
    reads = [(at.output, plan.output_bytes) for at in layout.places if at.item is not None]
    return [(plan.params.dbuf_of(lo)[0], hi - lo)
            for _, lo, hi, _ in dma_plan.out_runs(plan.params, reads, channels)]


def _move_load(plan, nxt, channels, cbuf_words=0, edge=False):
    """Return ``(per DMA channel (external bytes, descriptors, words sent), load)`` of the
    MOVE descriptors that put ``plan``'s outputs into ``nxt``'s input blocks
    (:func:`sw.compiler.dma_plan.move_windows`, the runtime's rule; a word sent per LOAD and
    per STORE, or per MSTORE and an MLOAD with ``edge`` multicast); ``load``: the words on
    each channel afterwards, channel 0 starting with the pass's ``cbuf_words``, as the
    runtime counts them before assigning the pass's data."""
    load = [cbuf_words if c == 0 else 0 for c in range(channels)]
    desc, sent = [0] * channels, [0] * channels
    for c, m, w in dma_plan.move_windows(chain.moves(plan, nxt), plan.params, channels, load,
                                        edge):
        desc[c] += 1
        sent[c] += m.nbytes // 8 + dma_plan.sent_words(w, m.nbytes)
    return [(0, r, w) for r, w in zip(desc, sent)], load


class _Groups:
    """An early-start DMA-in: per group of contexts, per channel ``(external bytes,
    descriptors, words sent)`` (group 0 with the Cbuf words and moves; the fences counted as
    descriptors), per group ``{Dbuf: words}`` the accesses its data take at each Dbuf
    (``words``), and the group size ``2 ** shift``."""

    def __init__(self, loads, shift, words):
        self.loads, self.shift, self.words = loads, shift, words
        self.bytes = sum(b for g in loads for b, _, _ in g)
        self.descriptors = sum(r for g in loads for _, r, _ in g)

    def arrivals(self, system, k):
        """Return per group the cycle its data are in on every channel (the last: the
        DMA-in's end)."""
        out, acc = [], [(0, 0, 0)] * len(self.loads[0])
        for g in self.loads:
            acc = [(a + b, r + s, w + v) for (a, r, w), (b, s, v) in zip(acc, g)]
            out.append(_dma_cycles(acc, system, k)[0])
        return out


def _dma_load(segs, p, channels, cbuf_words, out=False, groups=((), 0), pre=None, early=None,
              edge=False):
    """Return per DMA channel ``(external bytes, descriptors, words sent)`` of one DMA phase.

    DMA-in: ``segs`` are ``(global address, bytes)`` and ``groups`` the multicast blocks
    (``([[address of each copy]], bytes)``), cut into runs, channels and multicast windows by
    the runtime's rules (:mod:`sw.compiler.dma_plan`); the Cbuf words (``cbuf_words``: per
    configuration port, a descriptor each) go over channel 0, then ``pre`` (a chained layer's
    moves, :func:`_move_load`: per channel ``(bytes, descriptors, words)`` already placed, and
    the channels' load after them).  DMA-out:
    ``(dbuf, bytes)``, a descriptor each, the Dbufs spread by the same rules (``local``, as
    :func:`sw.compiler.dma_plan.out_runs`).  ``early``
    (``({address: group}, shift)``): the DMA-in of an early start, as a :class:`_Groups`;
    ``edge``: blocks go by edge multicast where they can.
    """
    bytes_, desc, sent = [0] * channels, [0] * channels, [0] * channels
    if out:
        per = {}
        for d, n in segs:
            b, r = per.get(d, (0, 0))
            per[d] = (b + n, r + 1)
        chan = dma_plan.assign_channels({d: b // 8 for d, (b, _) in per.items()}, channels, p,
                                        local=True)
        for d, (b, r) in per.items():
            c = chan[d]
            bytes_[c], desc[c], sent[c] = bytes_[c] + b, desc[c] + r, sent[c] + b // 8
        return list(zip(bytes_, desc, sent))
    blocks, nbytes = groups
    group, shift = early or ({}, 0)
    runs = dma_plan.group_runs(segs, [group.get(a, 0) for a, _ in segs], p,
                               [(a, nbytes) for g in blocks for a in g])
    words = _dbuf_words([(lo, hi - lo) for _, lo, hi, _ in runs] +
                        [(a, nbytes) for g in blocks for a in g], p)
    load = [sum(cbuf_words) if c == 0 else 0 for c in range(channels)]
    bytes_[0], desc[0], sent[0] = 8 * sum(cbuf_words), len(cbuf_words), sum(cbuf_words)
    if pre is not None:
        placed, load = pre[0], list(pre[1])
        for c, (b, r, w) in enumerate(placed):
            bytes_[c], desc[c], sent[c] = bytes_[c] + b, desc[c] + r, sent[c] + w
    chan = dma_plan.assign_channels(words, channels, p, load, edge)
    ngroups = 1 + max([g for g, _, _, _ in runs] + [group.get(a, 0) for b in blocks for a in b],
                      default=0)
    per = [[[0, 0, 0] for _ in range(channels)] for _ in range(ngroups)]
    per[0] = [list(t) for t in zip(bytes_, desc, sent)]
    for g, lo, hi, _ in runs:
        t = per[g][chan[p.dbuf_of(lo)[0]]]
        t[0], t[1], t[2] = t[0] + hi - lo, t[1] + 1, t[2] + (hi - lo) // 8
    for w in dma_plan.delivery_windows(blocks, p, chan, edge, [nbytes] * len(blocks)):
        part = dma_plan.part_range(nbytes, w.part)[1]
        t = per[dma_plan.block_group(group, blocks[w.group])][w.channel]
        t[0], t[1] = t[0] + part, t[1] + 1
        t[2] += dma_plan.sent_words(w, nbytes)
    if early is None:
        return [tuple(t) for t in per[0]]
    for c in range(channels):
        # A fence a descriptor (the runtime's rule, tb.host.job_plan).
        for g in dma_plan.fence_groups([g for g in range(ngroups) if per[g][c][2]]):
            per[g][c][1] += 1
    pieces = [[] for _ in range(ngroups)]
    for g, lo, hi, _ in runs:
        pieces[g].append((lo, hi - lo))
    for b in blocks:
        pieces[dma_plan.block_group(group, b)].extend((a, nbytes) for a in b)
    return _Groups([[tuple(t) for t in g] for g in per], shift,
                   [_dbuf_words(g, p) for g in pieces])


def _dbuf_words(pieces, p):
    """Return ``{Dbuf: words}`` of ``pieces`` ``[(global address, bytes)]``, each inside one
    Dbuf: the DMA accesses each Dbuf serves for them (a STORE or LOAD a word, one per Dbuf
    of a multicast block)."""
    words = {}
    for a, n in pieces:
        d = p.dbuf_of(a)[0]
        words[d] = words.get(d, 0) + n // 8
    return words


def _dma_cycles(load, system, k):
    """Return ``(cycles, bytes, descriptors)`` of a DMA phase with per-channel ``load``
    (external bytes at the memory's bandwidth, or one word sent a cycle if more: a
    multicast sends each word it reads to several Dbufs)."""
    bw = system.mem_bandwidth * k.dma_bw
    ndesc = sum(r for _, r, _ in load)
    if not ndesc:
        return 0, 0, 0
    cyc = max(max(b, 8 * w) / bw + r * (k.dma_desc + system.mem_latency) for b, r, w in load)
    return cyc + k.dma0, sum(b for b, _, _ in load), ndesc
