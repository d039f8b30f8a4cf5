"""FC layers on the golden model, run exactly or vectorized.

Contract (``docs/golden.md``)
-----------------------------
:func:`run_fc` runs an FC plan either exactly (``exact=True``: every pass's image through
:func:`sw.models.golden.run_image`) or vectorized (:func:`sw.compiler.graphs.fc_result` for the
numbers, and the same counters derived from the decoded program by
:func:`sw.models.golden_counters.program_counters`); the two agree bit for bit and count for
count (``tests/test_golden.py``).  It returns an :class:`FcRun`.
"""

from dataclasses import dataclass

import numpy as np

from sw.compiler import graphs
from sw.compiler.asm import assemble
from sw.compiler.program import empty_result, gather_pass, pass_images, program
from sw.models.golden import run_image
from sw.models.golden_counters import Counters, program_counters
from sw.spec.errors import FdpuError

__all__ = ["FcRun", "run_fc", "EXACT_LIMIT", "ENGINES", "exact_for"]

#: The golden engines a command offers: ``exact`` (the token-by-token interpreter on the
#: images), ``fast`` (the vectorized path: the same bits and counts) and ``auto``.
ENGINES = ("auto", "exact", "fast")

#: ``auto`` runs a plan exactly up to this many weight x lane-group products
#: (``K x Cw x groups``, the FACC firings of a dense layer; about 20 seconds), else fast.
EXACT_LIMIT = 50_000


def exact_for(engine, plan):
    """Return whether the golden ``engine`` (one of :data:`ENGINES`) runs ``plan`` exactly:
    the one rule of ``fdpu run``, ``fdpu rtl``'s reference and ``fdpu net``."""
    if engine not in ENGINES:
        raise FdpuError(f"golden engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "auto":
        return plan.K * plan.Cw * plan.groups <= EXACT_LIMIT
    return engine == "exact"


@dataclass
class FcRun:
    """The result (``N x K`` float16), counters, plan and how it was computed.

    ``running`` is the sum of the magnitudes of the rounded partial sums (``N x K``), the
    input of the running error bound (:func:`sw.models.reference.check`).
    """
    result: np.ndarray
    counters: Counters
    plan: object
    exact: bool
    events: int = 0
    cycles: int = 0
    running: np.ndarray = None


def run_fc(plan, weights, inputs, exact=False, seed=None, jitter=4, max_events=50_000_000,
           validate=True, progress=None):
    """Run an FC layer on the golden model and return an :class:`FcRun`.

    ``exact`` runs every pass's image through :func:`run_image`; otherwise the vectorized
    path computes the same bits and counts (see the module doc).  ``validate=False`` skips
    the graph validation (to run a deliberately broken graph, e.g. without feedback edges).
    ``progress``, if given, is called as ``progress(done, total)``: passes run (exact) or input
    columns accumulated (vectorized).
    """
    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    if w16.shape != (plan.K, plan.C) or x16.shape != (plan.N, plan.C):
        raise FdpuError(f"weights {w16.shape} and inputs {x16.shape} do not match the plan "
                        f"(K x C = {plan.K} x {plan.C}, N x C = {plan.N} x {plan.C})")
    graph, placement = program(plan)
    if validate:
        graph.validate(plan.params)
    if exact:
        total = Counters()
        y = empty_result(plan)
        events = cycles = 0
        for p, (image, outputs) in enumerate(pass_images(plan, w16, x16, graph, placement)):
            res = run_image(image, seed=None if seed is None else seed + p, jitter=jitter,
                            max_events=max_events)
            total += res.counters
            events += res.events
            cycles += res.time
            gather_pass(plan, y, outputs, res.memory.read)
            if progress:
                progress(p + 1, plan.passes)
        _, mu = graphs.fc_result(plan, w16, x16, running=True)
        return FcRun(y, total, plan, True, events, cycles, mu)
    y, mu = graphs.fc_result(plan, w16, x16, running=True, progress=progress)
    contexts = sum(plan.pass_micc_contexts(p) for p in range(plan.passes))
    image = assemble(graph, placement, {}, contexts)
    return FcRun(y, _fc_counters(plan, graph, placement, image, w16, contexts), plan, False,
                 running=mu)


def _fc_counters(plan, graph, placement, image, w16, contexts):
    params = plan.params
    home = {pe: d for pe, d in plan.homes}

    def hops(x, y, slot):
        return len(params.route((x, y), params.dbuf_coord(home[(x, y)])))

    switch_true, accesses, emitted = plan.graph.golden_events(plan, graph, placement, w16)
    return program_counters(image, contexts, switch_true, hops, accesses, emitted)

