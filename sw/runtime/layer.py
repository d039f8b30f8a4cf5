"""Running one planned FC layer: golden model, performance model or RTL, and its figures.

Contract
--------
* :func:`golden` runs a plan on the golden model (exact or vectorized by the one rule,
  :func:`sw.models.golden_fc.exact_for`) and returns ``(run, exact)``.
* :func:`simulate` runs a plan on an RTL simulator in the :class:`~sw.spec.system.System`
  given (DMA channels, memory latency and bandwidth, configuration ports, overlap) with the
  :class:`RtlOptions` (cycle bound, waves, checkpointing) and returns ``(result, job)``;
  :func:`simulate_chain` runs planned layers chained on chip in one simulation.
* :func:`rtl_figures` is the JSON-friendly record of an RTL job against its golden run: cycles
  per pass, utilizations (:mod:`sw.models.figures`), external bytes and the layer's minimum,
  bandwidth, Dbuf requests and mesh flits, the per-PE busy map, the golden counters.
* :func:`run_layer` runs one layer of a network on ``golden``, ``model`` or an RTL simulator
  and returns ``(outputs, record)``: the figures :data:`FIGURES` names.
* :func:`conv_figures` adds to the record of a convolution run as its matrix multiplication
  (:mod:`sw.compiler.conv`) the figures of the convolution itself: its shapes, the bytes of
  its input and of the unrolled rows, its own minimal external bytes and the bound.

Progress is reported through a :class:`Reporter` (nothing is printed here): the commands
pass one that draws progress bars.
"""

import contextlib
import time
import warnings
from dataclasses import dataclass

import numpy as np

from sw.compiler import balance, conv
from sw.models import figures, golden_fc, perf, reference
from sw.spec.system import System
from tb.host import runtime

__all__ = ["RtlOptions", "Reporter", "FIGURES", "golden", "simulate", "simulate_chain",
           "rtl_figures", "run_layer", "layer_record", "conv_figures"]

#: The figures of a layer's model or RTL run that a network's report keeps.
FIGURES = ("cycles", "compute_cycles", "dma_cycles", "useful_flops", "utilization",
           "utilization_end_to_end", "ext_read_bytes", "ext_write_bytes", "external_bytes",
           "min_external_bytes", "peak_bandwidth", "pass_cycles", "bound_cycles", "bound_by",
           "bound_reached")


@dataclass(frozen=True)
class RtlOptions:
    """How an RTL run goes: ``max_cycles`` (the bound of each compute phase, ``None``: from
    the plan), ``waves`` (write a waveform), ``checkpoint`` (a folder: run in resumable
    segments, :mod:`tb.host.checkpoint`) and ``segment_passes`` (passes per segment)."""
    max_cycles: int = None
    waves: bool = False
    checkpoint: str = None
    segment_passes: int = None


class Reporter:
    """Where progress goes: the default reports nothing.

    :meth:`golden` and :meth:`rtl` return context managers that yield the function a run
    calls with its progress (the golden model: ``(done, total)``; the RTL: the runtime's note,
    ``pass_index``, ``phase``, ``cycles``).
    """

    def golden(self, label, unit):
        """Return the context of a golden run named ``label`` counting ``unit``."""
        return contextlib.nullcontext(None)

    def rtl(self, head, total, unit):
        """Return the context of an RTL run named ``head`` of ``total`` ``unit`` s."""
        return contextlib.nullcontext(None)


def golden(plan, weights, inputs, engine="auto", label="golden model", reporter=Reporter()):
    """Return ``(run, exact)``: ``plan`` on the golden model (``engine``: ``exact``, ``fast``
    or ``auto``, :func:`sw.models.golden_fc.exact_for`)."""
    exact = golden_fc.exact_for(engine, plan)
    with reporter.golden(label, "passes" if exact else "input columns") as show:
        return golden_fc.run_fc(plan, weights, inputs, exact=exact, progress=show), exact


def simulate(plan, weights, inputs, sim, system=System(), rtl=RtlOptions(), what="",
             reporter=Reporter()):
    """Run ``plan`` on the RTL simulator ``sim`` in ``system``; return ``(result, job)``
    (:func:`tb.host.runtime.run_fc_rtl`).  ``what`` names the layer in the progress."""
    head = f"RTL on {sim}{': ' + what if what else ''}"
    with reporter.rtl(head, plan.passes, "pass") as show:
        return runtime.run_fc_rtl(plan, weights, inputs, sim, system=system,
                                  max_cycles=rtl.max_cycles, waves=rtl.waves, progress=show,
                                  double_buffer=plan.double_buffer,
                                  checkpoint=rtl.checkpoint,
                                  segment_passes=rtl.segment_passes)


def simulate_chain(plans, weights, inputs, sim, system=System(), rtl=RtlOptions(), what="",
                   reporter=Reporter()):
    """Run ``plans`` chained on chip in one simulation (:func:`tb.host.runtime.run_chain_rtl`)
    on ``sim`` in ``system``; return ``(last layer's result, job)``."""
    head = f"RTL on {sim}{': ' + what if what else ''}, chained on chip"
    with reporter.rtl(head, len(plans), "layer") as show:
        return runtime.run_chain_rtl(plans, weights, inputs, sim, system=system,
                                     max_cycles=rtl.max_cycles, waves=rtl.waves,
                                     progress=show)


def rtl_figures(plan, w, x, ref, y, job, system=System()):
    """Return the JSON-friendly figures of an RTL job against its golden run ``ref``, run in
    ``system`` (its port bandwidth sets the bound, :func:`sw.models.figures.bound`)."""
    p = plan.params
    runs = job.passes
    compute = job.compute_cycles
    cycles = job.cycles
    diff = y.view(np.uint16) != ref.result.view(np.uint16)
    flops = sum(figures.FLOPS.get(op, 0) * n for op, n in ref.counters.ops.items())
    busy = np.zeros(p.num_pes)
    rtl_insns = 0
    for r in runs:
        fires = np.array(r.status["int_fires"]) + np.array(r.status["fp_fires"])
        busy += fires
        rtl_insns += int(fires.sum())
    dma = job.dma_cycles
    ctx_cycles = job.context_cycles
    rd, wr = job.final["o_ext_rd_bytes"], job.final["o_ext_wr_bytes"]
    over = job.overlaps() if job.double_buffer else [{} for _ in runs]
    nnz = int(np.count_nonzero(np.asarray(w, dtype=np.float16).view(np.uint16)))
    useful = figures.useful_flops(plan, nnz)
    return dict(
        match=not diff.any(), mismatches=int(diff.sum()), K=plan.K, C=plan.C, N=plan.N,
        mode=plan.mode, rows=p.rows, cols=p.cols, slots=p.slots, int_issue=p.int_issue,
        operand_depth=p.operand_depth, dbuf_bytes=p.dbuf_bytes, passes=plan.passes,
        contexts=plan.contexts, cycles=cycles, compute_cycles=compute, dma_cycles=dma,
        double_buffer=job.double_buffer,
        pass_cycles=[dict(dma_in=r.in_cycles, compute=r.compute_cycles, config=r.config_cycles,
                          config_hidden=r.config_hidden_cycles, hold=r.hold_cycles,
                          contexts=r.context_cycles, span=v.get("span_cycles", r.span_cycles),
                          dma_out=r.out_cycles, ext_in=i, ext_out=o,
                          in_hidden=v.get("in_hidden", 0), out_hidden=v.get("out_hidden", 0),
                          started_in=r.started_in)
                     for r, i, o, v in zip(runs, job.ext_in, job.ext_out, over)],
        config_cycles=job.config_cycles, context_cycles=ctx_cycles,
        config_hidden_cycles=job.config_hidden_cycles,
        config_exposed_cycles=job.config_cycles - job.config_hidden_cycles,
        hold_cycles=job.hold_cycles,
        flops=flops, useful_flops=useful,
        **figures.utilizations(p, useful=useful, flops=flops, dense=figures.dense_flops(plan),
                               compute_cycles=compute, context_cycles=ctx_cycles,
                               cycles=cycles),
        nnz=nnz, graph=plan.graph.label, load_balance=balance.load_balance(plan, w),
        plan=plan.describe(),
        rtl_instructions=rtl_insns, golden_instructions=ref.counters.instructions,
        ext_read_bytes=rd, ext_write_bytes=wr, external_bytes=rd + wr,
        min_external_bytes=perf.min_external_bytes(plan, nnz),
        peak_bandwidth=job.peak_bandwidth, dma_bandwidth=(rd + wr) / max(1, dma),
        dbuf_requests=sum(r.status["o_dbuf_reqs"] for r in runs),
        mesh_flits=sum(r.status["o_mesh_flits"] for r in runs),
        busy_map=(busy / max(1, compute)).reshape(p.rows, p.cols).tolist(),
        golden_counters=ref.counters.as_dict(), dma_in_backdoor=job.backdoor_in,
        dma_descriptors=job.descriptors,
        **figures.bound(compute_cycles=compute, min_bytes=perf.min_external_bytes(plan, nnz),
                        dma_channels=system.dma_channels, mem_bandwidth=system.mem_bandwidth,
                        cycles=cycles))


def layer_record(index, name, w, plan, layer=None, role=None, bias=False, relu=False):
    """Return the start of a network layer's record: what it is and how it is planned."""
    nnz = int(np.count_nonzero(np.asarray(w, dtype=np.float16).view(np.uint16)))
    return dict(index=index, name=name, layer=layer, stage=role, K=plan.K, C=plan.C, N=plan.N,
                nnz=nnz, density=nnz / (plan.K * plan.C), graph=plan.graph.label,
                plan=plan.describe(), bias=bias, relu=relu, passes=plan.passes,
                double_buffer=plan.double_buffer, chained_in=False, chained_out=False)


def run_layer(plan, w, x, sim, system=System(), *, rec=None, engine="auto", gold="auto",
              rtl=RtlOptions(), chained_from=None, chained_to=None, what="",
              reporter=Reporter()):
    """Run one planned layer on ``sim`` (``golden``, ``model`` or an RTL simulator); return
    ``(outputs, record)``: ``rec`` (:func:`layer_record`) with the run's figures.

    ``golden``/``model``: the golden model (``engine``), checked against the float64 bound of
    :func:`sw.models.reference.check` on its own inputs; ``model`` adds the performance
    model's figures (:data:`FIGURES`; ``chained_from`` and ``chained_to``, the previous and
    next plans, are its chaining, :func:`sw.models.perf.predict`).  An RTL simulator: the
    golden model (``gold``) and the simulation, compared bit for bit.
    """
    rec = dict(rec or {})
    t0 = time.perf_counter()
    if sim in ("golden", "model"):
        res, exact = golden(plan, w, x, engine, f"golden model: {what}" if what else
                            "golden model", reporter)
        with warnings.catch_warnings():         # infinite inputs from an overflowed layer
            warnings.simplefilter("ignore", RuntimeWarning)
            chk = reference.check(res.result, w, x, mu=res.running, steps=plan.Cw,
                                  bias=plan.bias, relu=plan.relu)
        rec.update(engine="exact" if exact else "fast", match=chk.holds, check=chk.as_dict(),
                   instructions=res.counters.instructions)
        y = res.result
        if sim == "model":
            pred = perf.predict(plan, w, system, chained_from=chained_from,
                                chained_to=chained_to).as_dict()
            rec.update({k: pred[k] for k in FIGURES}, chained_in=chained_from is not None,
                       chained_out=chained_to is not None)
    else:
        ref, exact = golden(plan, w, x, gold, f"golden model: {what}" if what else
                            "golden model", reporter)
        y, job = simulate(plan, w, x, sim, system, rtl, what, reporter)
        fig = rtl_figures(plan, w, x, ref, y, job, system)
        rec.update({k: fig[k] for k in FIGURES}, golden="exact" if exact else "fast",
                   match=fig["match"], mismatches=fig["mismatches"],
                   rtl_instructions=fig["rtl_instructions"],
                   golden_instructions=fig["golden_instructions"])
    rec["seconds"] = time.perf_counter() - t0
    return y, rec


def conv_figures(rec, layer, n, shape, system):
    """Add a convolution's own figures to the record ``rec`` of its first stage (a layer of
    ``n`` images of ``shape`` ``C x H x W``): the shapes, where the unrolling ran, the bytes of
    the input and of its unrolled rows, and (a model or RTL run) the layer's minimal external
    bytes (the input once, :func:`sw.compiler.conv.min_external_bytes`) with the bound against
    them (:func:`sw.models.figures.bound`)."""
    _, h, w = shape
    p, q = conv.out_size(layer, h, w)
    unrolled = 2 * rec["N"] * rec["C"]
    rec.update(conv=layer.describe(), input_shape=[n, *shape], output_shape=[n, layer.K, p, q],
               unrolled_on="host", input_bytes=2 * n * int(np.prod(shape)),
               unrolled_input_bytes=unrolled)
    if "min_external_bytes" in rec:
        rec["min_external_bytes"] += rec["input_bytes"] - unrolled
        rec.update(figures.bound(compute_cycles=rec["compute_cycles"],
                                 min_bytes=rec["min_external_bytes"],
                                 dma_channels=system.dma_channels,
                                 mem_bandwidth=system.mem_bandwidth, cycles=rec["cycles"]))
