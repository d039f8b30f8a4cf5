"""Running a network's layers: planned, split where it pays, chained on chip where they can
be, each checked; convolutions as matrix multiplications, the host steps between layers on
the host.

Contract (``docs/net.md`` has the reasoning and the figures)
-------------------------------------------------------------
:func:`run_network` takes a :class:`~sw.compiler.net.Net` (its weights as run), its first
layer's binary16 inputs (``N x C``, or ``N x C x H x W`` for a convolution), the
:class:`~sw.spec.arch.ArrayParams`, the
:class:`~sw.compiler.fc_layer.PlanOptions` every layer is planned with (each layer brings its
own bias and ReLU), the :class:`~sw.spec.system.System` and the :class:`NetOptions` (the
simulator, the golden engines, chaining, splitting, the RTL options) and returns ``(outputs,
record)``: the last layer's binary16 outputs and a JSON-friendly record (per layer: its plan
and figures, :func:`sw.runtime.layer.run_layer`; per link whether it stayed on chip and why
not; the totals and utilizations over the layers).

* **Planning**: each layer by :func:`sw.models.choose.best_plan`; a layer whose work items fill
  at most half of the PEs runs as the two stages of a split reduction
  (:func:`sw.compiler.split.split_layer`) with ``split=True``, or by default where the
  performance model predicts the two stages faster (:class:`Stage`).
* **Chaining**: a link keeps the activations on chip (:mod:`sw.compiler.chain`) unless the
  golden model runs (layer by layer), ``chain=False``, the layers do not fit, or the host
  works between them (a convolution's unrolling and folding, pooling, flattening;
  :func:`host_gaps`) (:func:`link_notes`; ``chain=True`` refuses a link that cannot chain).
  Chained layers run in one RTL simulation (:func:`run_chain`) or, on the model, with their
  moves counted.
* **Convolutions** (:mod:`sw.compiler.conv`): a convolution layer is planned and run as the
  FC layer of its ``K x (C R S)`` weights on the ``N P Q`` rows of its unrolled inputs,
  unrolled on the host before its first stage and folded back to ``N x K x P x Q`` after its
  last; its record (:func:`sw.runtime.layer.conv_figures`) gives the layer's own minimal
  external bytes (the input once, not its unrolled rows) and the bound against them, beside
  the bytes the run moved.
"""

import dataclasses
import time
import warnings

import numpy as np

from sw.compiler import chain, conv, fc_plan, split
from sw.compiler.fc_layer import FcLayer
from sw.compiler.host_steps import describe
from sw.compiler.layers import check_sizes
from sw.compiler.net import Conv, layer_shapes, run_between
from sw.models import choose, figures, golden_fc, perf
from sw.runtime import layer as run
from sw.runtime.layer import FIGURES, Reporter, RtlOptions
from sw.spec.errors import FdpuError, FdpuWarning
from sw.spec.system import SIMULATORS, System
from tb.host import runtime

__all__ = ["NetOptions", "Stage", "plan_layers", "plan_stages", "host_gaps", "link_notes",
           "run_chain", "run_network", "TOTALS"]

#: The figures a network's record sums over its layers.
TOTALS = ("cycles", "compute_cycles", "dma_cycles", "useful_flops", "ext_read_bytes",
          "ext_write_bytes", "external_bytes", "min_external_bytes", "bound_cycles")


@dataclasses.dataclass(frozen=True)
class NetOptions:
    """How a network runs: ``sim`` (``golden``, ``model`` or an RTL simulator); ``engine``
    (the golden model's, ``golden``/``model``) and ``gold`` (beside an RTL run): ``exact``,
    ``fast`` or ``auto``; ``chain`` and ``split``: ``True`` (every link / every layer that can,
    refused where one cannot), ``False`` (none) or ``None`` (where it fits / pays); ``rtl``:
    the :class:`~sw.runtime.layer.RtlOptions`; ``name``: the network's name in errors."""
    sim: str = "golden"
    engine: str = "auto"
    gold: str = "auto"
    chain: bool = None
    split: bool = None
    rtl: RtlOptions = RtlOptions()
    name: str = "the network"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One run of the array in a network: a layer, or one of a split layer's two stages."""
    layer: int          # the network's layer
    name: str
    weights: np.ndarray
    plan: fc_plan.FcPlan
    bias: object = None
    activation: str = None
    role: str = None    # None, "partial sums" or "sum" (sw.compiler.split)


def _short(name):
    """Return a layer's name without its file (``"PATH: node Gemm 'fc0'"`` -> the node)."""
    return name.split(": ", 1)[1] if ": " in name else name


def plan_layers(layers_, ws, ns, params, options, system=System()):
    """Return every layer's plan (:func:`sw.models.choose.best_plan` with ``options``, the
    layer's own bias and ReLU) for its batch of ``ns[i]`` rows (a convolution: the rows of its
    unrolled inputs)."""
    return [choose.best_plan(FcLayer.of(w, n, bias=layer.bias,
                                        relu=layer.activation == "relu"),
                             params, options, system)[0]
            for layer, w, n in zip(layers_, ws, ns)]


def _split_wins(plan, w, parts, system):
    """Return whether ``parts`` (:class:`~sw.compiler.split.Split`) is predicted faster than
    ``plan`` (the performance model, the two stages chained when they can be)."""
    whole = perf.predict(plan, w, system).cycles
    on_chip = chain.link_error(parts.partial, parts.total, parts.partial_weights,
                               parts.total_weights) is None
    first = perf.predict(parts.partial, parts.partial_weights, system,
                         chained_to=parts.total if on_chip else None).cycles
    second = perf.predict(parts.total, parts.total_weights, system,
                          chained_from=parts.partial if on_chip else None).cycles
    return first + second < whole


def plan_stages(layers_, ws, plans, system=System(), split_=None, name="the network"):
    """Return the network's :class:`Stage` list: each layer as planned, or (``split_=True``,
    or by default where the performance model predicts it faster) a layer with few work items
    as its two split-reduction stages (:func:`sw.compiler.split.split_layer`)."""
    out = []
    for i, (layer, w, plan) in enumerate(zip(layers_, ws, plans)):
        short = _short(layer.name)
        parts = None
        if split_ is not False and split.ways(plan) > 1:
            try:
                parts = split.split_layer(plan, w)
            except FdpuError as exc:
                if split_:
                    raise FdpuError(f"--split: layer {i} ({short}): {exc}") from None
                parts = None         # the partial sums do not fit one pass: the layer stays
            if parts is not None and not split_ and not _split_wins(plan, w, parts, system):
                parts = None
        if parts is None:
            out.append(Stage(i, short, w, plan, layer.bias, layer.activation))
            continue
        out.append(Stage(i, f"{short}: partial sums ({parts.ways} slices)",
                         parts.partial_weights, parts.partial, role="partial sums"))
        out.append(Stage(i, f"{short}: sum of {parts.ways}", parts.total_weights, parts.total,
                         layer.bias, layer.activation, role="sum"))
    if split_ and len(out) == len(plans):
        raise FdpuError(f"--split: no layer of {name} can split its reduction on "
                        f"{plans[0].params.num_pes} PEs (a layer splits when it runs in one "
                        f"pass and its work items fill at most half of the PEs, and its "
                        f"inputs hold two column units or more); leave --split out")
    return out


def host_gaps(model, stages):
    """Return per link (stage ``i`` to ``i + 1``) what the host does between the two stages,
    or ``None``: a convolution's outputs folded, its inputs unrolled, the host steps between
    two layers (:attr:`sw.compiler.net.Net.between`)."""
    out = []
    for a, b in zip(stages, stages[1:]):
        if a.layer == b.layer:
            out.append(None)
            continue
        work = []
        if isinstance(model.layers[a.layer], Conv):
            work.append(f"layer {a.layer}'s outputs are folded to N x K x P x Q")
        if model.between[a.layer]:
            work.append(describe(model.between[a.layer]))
        if isinstance(model.layers[b.layer], Conv):
            work.append(f"layer {b.layer}'s inputs are unrolled (a convolution)")
        out.append(f"the host works between them: {'; '.join(work)}" if work else None)
    return out


def link_notes(plans, ws, sim, chain_=None, gaps=None):
    """Return per link (layer ``i`` to ``i + 1``) ``None`` when its activations stay on chip,
    else why the host streams them (``gaps``: :func:`host_gaps`); ``chain_=True`` with a link
    that cannot chain is an error.

    A layer whose outputs stay on chip keeps its rows in order (``plans`` is updated): the
    skip graph's row balancing would scatter an item's outputs over the next layer's inputs,
    which the stage needs in runs (the numbers do not depend on the order; the cycles do, and
    the report's plan says which ran)."""
    notes = []
    for i in range(len(plans) - 1):
        if sim == "golden":
            why = "the golden model runs layer by layer"
        elif gaps and gaps[i]:
            why = gaps[i]
        elif chain_ is False:
            why = "--no-chain"
        else:
            ordered = dataclasses.replace(plans[i], row_order=())
            why = chain.link_error(ordered, plans[i + 1], ws[i], ws[i + 1])
            if why is None and i and notes[-1] is None and plans[i].row_order:
                # the previous link was checked against this layer's balanced layout
                why = chain.link_error(plans[i - 1], ordered, ws[i - 1], ws[i]) and \
                    "this layer's rows in order do not fit behind the previous layer's stages"
            if why is None:
                plans[i] = ordered
        if why and chain_:
            raise FdpuError(f"--chain: layers {i} and {i + 1} cannot be chained on chip: {why}")
        notes.append(why)
    return notes


def _record(i, stage, w, plan):
    return run.layer_record(i, stage.name, w, plan, stage.layer, stage.role,
                            stage.bias is not None, stage.activation == "relu")


def run_chain(first, stages, ws, x, plans, sim, system=System(), rtl=RtlOptions(), gold="auto",
              reporter=Reporter()):
    """Run layers ``first ..`` (``plans``, every link chainable) chained on chip in one RTL
    simulation on ``sim``; return ``(last layer's outputs, records)``.

    Only the last layer's outputs leave the chip: it is compared bit for bit with the golden
    model's run of the chain (each layer on the previous one's golden outputs); the layers
    before it are checked through it (``checked_at``), their figures are their passes' of the
    job.
    """
    t0 = time.perf_counter()
    refs, xs = [], [x]
    for n, (plan, w) in enumerate(zip(plans, ws)):
        ref, _ = run.golden(plan, w, xs[-1], gold, f"golden model: layer {first + n}", reporter)
        refs.append(ref)
        xs.append(ref.result)
    last = first + len(plans) - 1
    y, job = run.simulate_chain(plans, ws, x, sim, system, rtl, f"layers {first}-{last}",
                                reporter)
    recs = []
    for n, (plan, w) in enumerate(zip(plans, ws)):
        end = n + 1 == len(plans)
        fig = run.rtl_figures(plan, w, xs[n], refs[n], y if end else refs[n].result,
                              runtime.layer_job(job, n), system)
        rec = _record(first + n, stages[n], w, plan)
        rec.update({k: fig[k] for k in FIGURES},
                   golden="exact" if golden_fc.exact_for(gold, plan) else "fast",
                   rtl_instructions=fig["rtl_instructions"],
                   golden_instructions=fig["golden_instructions"], chained_in=n > 0,
                   chained_out=not end, checked_at=last)
        recs.append(rec)
    differ = y.view(np.uint16) != refs[-1].result.view(np.uint16)
    for rec in recs:
        rec.update(match=not differ.any(),
                   mismatches=int(differ.sum()) if rec["index"] == last else None,
                   seconds=time.perf_counter() - t0)
    return y, recs


def _non_finite(rec, y, layers_):
    """Count (and warn of) the layer's outputs beyond the binary16 range."""
    rec["non_finite"] = int((~np.isfinite(y)).sum())
    if rec["non_finite"]:
        warnings.warn(FdpuWarning(
            f"layer {rec['index']} ({rec['name']}): {rec['non_finite']:,} output(s) beyond "
            f"the binary16 range (infinite or NaN)"
            + (", given to the next layer as they are" if rec["index"] + 1 < layers_ else "")))


def _rows(model, x0):
    """Return each layer's input shape (without the batch) and its rows on the array (a
    convolution: ``N P Q``), checked against the size limits."""
    n = x0.shape[0]
    shapes = layer_shapes(model, x0.shape[1:])
    rows = []
    for i, (layer, shape) in enumerate(zip(model.layers, shapes)):
        if isinstance(layer, Conv):
            p, q = conv.out_size(layer, shape[1], shape[2])
            rows.append(n * p * q)
        else:
            rows.append(n)
        check_sizes(K=layer.K, C=layer.C, N=rows[-1], where=f"layer {i} ({_short(layer.name)})")
    return shapes[:-1], rows


def run_network(model, x0, params, options, system=System(), net=NetOptions(),
                reporter=Reporter()):
    """Run the network ``model`` (:class:`~sw.compiler.net.Net`, weights as run) on its first
    layer's inputs ``x0``; return ``(outputs, record)`` (see the module doc)."""
    layers_ = model.layers
    shapes, rows = _rows(model, x0)
    ws = [layer.matrix for layer in layers_]
    stages = plan_stages(layers_, ws, plan_layers(layers_, ws, rows, params, options, system),
                         system, net.split, net.name)
    plans = [st.plan for st in stages]
    ws = [st.weights for st in stages]
    notes = link_notes(plans, ws, net.sim, net.chain, host_gaps(model, stages))
    first = [k == 0 or stages[k - 1].layer != st.layer for k, st in enumerate(stages)]
    last = [k + 1 == len(stages) or stages[k + 1].layer != st.layer
            for k, st in enumerate(stages)]
    start = time.perf_counter()
    value, recs, i = x0, [], 0
    while i < len(plans):
        j = i          # layers i .. j are chained
        while j + 1 < len(plans) and notes[j] is None:
            j += 1
        here = stages[i].layer
        x = conv.unroll(layers_[here], value) if first[i] and \
            isinstance(layers_[here], Conv) else value
        if net.sim in SIMULATORS and j > i:
            x, got = run_chain(i, stages[i:j + 1], ws[i:j + 1], x, plans[i:j + 1], net.sim,
                               system, net.rtl, net.gold, reporter)
            recs += got
            _non_finite(got[-1], x, len(ws))
        else:
            for k in range(i, j + 1):
                x, rec = run.run_layer(plans[k], ws[k], x, net.sim, system,
                                       rec=_record(k, stages[k], ws[k], plans[k]),
                                       engine=net.engine, gold=net.gold, rtl=net.rtl,
                                       chained_from=plans[k - 1] if k > i else None,
                                       chained_to=plans[k + 1] if k < j else None,
                                       what=f"layer {k}", reporter=reporter)
                recs.append(rec)
                _non_finite(rec, x, len(ws))
        for k in range(i, j + 1):
            layer = layers_[stages[k].layer]
            if first[k] and isinstance(layer, Conv):
                run.conv_figures(recs[k], layer, x0.shape[0], shapes[stages[k].layer], system)
        value = x
        done = stages[j].layer
        if last[j] and isinstance(layers_[done], Conv):
            _, h, w = shapes[done]
            value = conv.fold(layers_[done], value, x0.shape[0], h, w)
        if last[j] and done + 1 < len(layers_) and model.between[done]:
            with np.errstate(all="ignore"):
                value = run_between(model, done, value).astype(np.float16)
        i = j + 1
    record = dict(sim=net.sim, N=int(x0.shape[0]), rows=params.rows, cols=params.cols,
                  slots=params.slots, int_issue=params.int_issue,
                  operand_depth=params.operand_depth, dbuf_bytes=params.dbuf_bytes,
                  match=all(r["match"] for r in recs), layers=recs,
                  seconds=time.perf_counter() - start,
                  links=[dict(layers=[i, i + 1], on_chip=why is None, streamed_because=why)
                         for i, why in enumerate(notes)])
    if net.sim != "golden":
        tot = {k: sum(r[k] for r in recs) for k in TOTALS}
        tot.update(figures.utilizations(params, useful=tot["useful_flops"],
                                        compute_cycles=tot["compute_cycles"],
                                        cycles=tot["cycles"]))
        # Each layer's bound (sw.models.figures.bound), summed: the network's end to end
        # against the sum.
        tot["bound_reached"] = tot["bound_cycles"] / max(1, tot["cycles"])
        record["total"] = tot
        record.update(dma_channels=system.dma_channels, mem_latency=system.mem_latency,
                      mem_bandwidth=system.mem_bandwidth, config_ports=system.config_ports,
                      overlap=system.overlap, early_start=system.early_start,
                      edge_multicast=system.edge_multicast,
                      config_spans=system.config_spans)
    return value, record
