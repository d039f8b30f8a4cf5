"""The work and utilization figures of a layer run, defined once.

Contract
--------
The performance model's :class:`~sw.models.perf.Prediction`, the RTL run's figures
(:func:`sw.runtime.layer.rtl_figures`) and a network's totals (:mod:`sw.runtime.network`) all
report the same utilizations; they are computed here and nowhere else.

* :data:`FLOPS`: the floating-point operations one issue of an FP instruction performs
  (SIMD-4: a multiply-add is 2 a lane), what an issue count turns into.
* :func:`useful_flops`: 2 per multiply-add of a weight (every weight of a dense layer, each
  stored one of a sparse layer) with a real batch element: no lane, row or column padding, no
  dummy item.
* :func:`dense_flops`: 2 per multiply-add of the dense layer (what a dense run would do).
* :func:`utilizations`: the floating-point operations over the array's peak
  (:attr:`sw.spec.arch.ArrayParams.peak_flops_per_cycle`) in a number of cycles: of the
  compute phases (``utilization``, ``issue_utilization`` counting every issued FP operation,
  ``dense_utilization`` counting the dense layer's), of the contexts alone
  (``utilization_contexts``) and end to end (``utilization_end_to_end``).  A cycle count of 0
  counts as 1.
* :func:`bound`: the end-to-end bound a run is measured against, ``max(compute cycles, the
  layer's minimal external bytes / the port bandwidth)`` (the port: every DMA channel's
  bytes per cycle), which of the two it is, and the fraction of it the run reached
  (``docs/system.md``, "End to end against the bound").
"""

__all__ = ["FLOPS", "useful_flops", "dense_flops", "utilizations", "bound"]

#: Floating-point operations per issue of each FP instruction (4 lanes).
FLOPS = {"FACC": 8, "FMADD": 8, "FMUL": 4, "FADD": 4, "FSUB": 4, "FMAX": 4}


def useful_flops(plan, nnz):
    """Return the useful floating-point operations of ``plan`` with ``nnz`` stored weights."""
    return 2 * plan.graph.useful_weights(plan.dense_weights, nnz) * plan.N


def dense_flops(plan):
    """Return the floating-point operations of ``plan``'s layer run dense."""
    return 2 * plan.dense_weights * plan.N


def utilizations(params, *, useful, compute_cycles, cycles, flops=None, dense=None,
                 context_cycles=None):
    """Return the utilization figures (see the module doc) of ``useful`` floating-point
    operations on ``params``'s array; ``flops`` (issued), ``dense`` and ``context_cycles`` add
    the figures that need them."""
    peak = params.peak_flops_per_cycle
    comp = peak * max(1, compute_cycles)
    out = dict(utilization=useful / comp,
               utilization_end_to_end=useful / (peak * max(1, cycles)))
    if flops is not None:
        out["issue_utilization"] = flops / comp
    if context_cycles is not None:
        out["utilization_contexts"] = useful / (peak * max(1, context_cycles))
    if dense is not None:
        out["dense_utilization"] = dense / comp
    return out


def bound(*, compute_cycles, min_bytes, dma_channels, mem_bandwidth, cycles):
    """Return ``{"bound_cycles", "bound_by", "bound_reached"}``: ``max(compute_cycles,
    min_bytes / (dma_channels x mem_bandwidth))``, ``"compute"`` or ``"traffic"``, and the
    bound over the end-to-end ``cycles`` (1.0: the run is at its bound; 0 cycles count as 1)."""
    floor = min_bytes / (dma_channels * mem_bandwidth)
    top = max(compute_cycles, floor)
    return dict(bound_cycles=round(top), bound_by="compute" if compute_cycles >= floor
                else "traffic", bound_reached=top / max(1, cycles))
