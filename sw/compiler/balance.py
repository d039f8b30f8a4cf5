"""Load balance of the ``skip`` graph: which weight rows go into which work item, and how even
the engines' work is.

Contract (``docs/mapping.md``, "Load balance")
----------------------------------------------
The ``skip`` graph's FACCs step once per stored weight, so an item's work is the sum of its
rows' stored weights (at least 1 per row: :func:`sw.compiler.graph_kinds.skip.skip_stored`),
and a pruned network's rows differ.  :func:`balanced_rows` orders the rows so that items hold equal
work and the engines get equal sums: the rows go largest first into the row block with the
least work that has room (LPT), and the blocks, heaviest first, are dealt to the engines that
run them (:meth:`~sw.compiler.fc_plan.FcPlan.row_block_engines`) in a snake (0 .. E-1,
E-1 .. 0, ...).
:func:`engine_row_steps` is every engine's FACC steps over a run, :func:`load_balance` their mean
over their maximum: the load-balance efficiency (1.0: the busiest engine does the average).
"""

import heapq

import numpy as np

__all__ = ["row_steps", "balanced_rows", "engine_row_steps", "load_balance"]


def row_steps(plan, w16):
    """Return the FACC steps of each of the plan's ``kblocks x kb`` item rows (rows past ``K``
    included, as zero rows): the graph's steps for the row's stored weights
    (:meth:`~sw.compiler.graph_kinds.base.GraphKind.row_steps`: ``Cw`` each, or for the
    ``skip`` graph the row's stored weights, at least 1 per context of a streamed item)."""
    steps = np.zeros(plan.kblocks * plan.kb, dtype=np.int64)
    steps[:] = plan.graph.row_steps(plan.Cw, np.zeros((1, 1), dtype=np.float16), plan.chunks)[0]
    steps[:plan.K] = plan.graph.row_steps(plan.Cw, w16, plan.chunks)
    return steps[list(plan.rows)]


def balanced_rows(row_nnz, kb, engines):
    """Return the row order (a tuple of ``ceil(K / kb) x kb`` row indices, those past ``K``
    padding) that balances items and engines for rows of ``row_nnz`` stored weights.

    ``engines``: per row block (in item order) the engine that runs it
    (:meth:`~sw.compiler.fc_plan.FcPlan.row_block_engines`), or a number ``E`` of engines
    taking row blocks ``e, e + E, ...`` (one lane-group block).  Each engine's row blocks are
    dealt in rounds, the heaviest first, forwards in even rounds and backwards in odd ones
    in which every engine takes one (the snake)."""
    nnz = np.maximum(1, np.asarray(row_nnz, dtype=np.int64))
    k = len(nnz)
    blocks = -(-k // kb)
    padded = np.concatenate([nnz, np.ones(blocks * kb - k, dtype=np.int64)])
    heap = [(0, b) for b in range(blocks)]
    members = [[] for _ in range(blocks)]
    for r in np.argsort(-padded, kind="stable"):
        while True:
            load, b = heapq.heappop(heap)
            if len(members[b]) < kb:
                break
        members[b].append(int(r))
        if len(members[b]) < kb:
            heapq.heappush(heap, (load + int(padded[r]), b))
    work = [sum(int(padded[r]) for r in m) for m in members]
    heaviest = iter(sorted(range(blocks), key=lambda b: -work[b]))
    owner = (np.arange(blocks) % engines if np.isscalar(engines)
             else np.asarray(engines, dtype=np.int64))
    queues = [np.flatnonzero(owner == e) for e in np.unique(owner)]
    order = [0] * blocks
    for rnd in range(max(len(q) for q in queues)):
        live = [q for q in queues if len(q) > rnd]
        for q in (live[::-1] if rnd % 2 and len(live) == len(queues) else live):
            order[q[rnd]] = next(heaviest)
    return tuple(r for b in order for r in sorted(members[b]))


def engine_row_steps(plan, w16):
    """Return every engine's FACC steps per item row (``engines x kb``) over the whole run,
    per lane group (dummy items: one step per row for ``skip``, ``Cw`` otherwise)."""
    rows = row_steps(plan, w16).reshape(plan.kblocks, plan.kb)
    dummy = plan.graph.steps(plan.Cw, np.zeros(plan.kb, dtype=np.int64), plan.chunks)
    steps = np.zeros((plan.engines, plan.kb), dtype=np.int64)
    for p in range(plan.passes):
        items = np.asarray(plan.pass_items(p))
        np.add.at(steps, np.arange(len(items)) % plan.engines,
                  rows[plan.item_blocks[0][items]])
        for slot in range(len(items), plan.pass_contexts(p) * plan.engines):
            steps[slot % plan.engines] += dummy
    return steps


def load_balance(plan, w16):
    """Return the load-balance efficiency: the engines' mean FACC steps over their maximum."""
    steps = engine_row_steps(plan, w16).sum(axis=1)
    return float(steps.mean() / steps.max()) if steps.size and steps.max() else 1.0
