"""A chain of layers on the RTL in one simulation, checked against the golden model."""

import numpy as np

from sw.models import golden_fc


def run_chain_checked(plans, ws, x, sim, **kwargs):
    """Run ``plans`` (weights ``ws``, inputs ``x``) chained on chip on ``sim`` under memory
    stalls; assert that the last layer's outputs equal the golden model's layer-by-layer run
    bit for bit and that every PE instruction the golden model counts fired on each layer.
    ``kwargs`` go to ``run_chain_rtl``.  Return ``(golden runs, job)``."""
    from tb.host import runtime
    from tb.host.job_plan import MemModel
    refs, xi = [], x
    for plan, w in zip(plans, ws):
        refs.append(golden_fc.run_fc(plan, w, xi, exact=True))
        xi = refs[-1].result
    y, job = runtime.run_chain_rtl(plans, ws, x, sim, mem=MemModel(latency=20, stall=0.1),
                                   dma_channels=2, overlap=True, **kwargs)
    assert np.array_equal(y.view(np.uint16), xi.view(np.uint16))
    for run, ref in zip(job.passes, refs):
        assert sum(run.status["int_fires"]) + sum(run.status["fp_fires"]) == \
            ref.counters.instructions
    return refs, job
