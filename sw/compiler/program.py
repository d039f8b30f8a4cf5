"""An FC layer compiled for the array: the program, one image per pass, the result gathered.

Contract
--------
* :func:`program` builds the plan's dataflow graph (:func:`sw.compiler.graphs.build_graph`)
  and places it (:func:`sw.compiler.place.place`): the same graph and placement for every
  pass, since passes differ only in their data and context count.
* :func:`pass_images` yields, pass after pass, the assembled :class:`~sw.compiler.image.Image`
  (its Dbuf segments: descriptors, weights, inputs; ``meta["shared"]``: the addresses of the
  input blocks several Dbufs hold, which the runtime loads by multicast; ``meta["first_use"]``:
  ``[address, context]`` per segment, the first context of the pass that reads it,
  :func:`sw.compiler.dbuf_layout.first_use`) and the pass's outputs
  (``[(item, address)]``, :func:`sw.compiler.dbuf_layout.pass_memory`).
* :func:`gather_pass` writes one pass's outputs, read back from the memory after the run,
  into the ``N x K`` float16 result.

The golden model's exact run (:func:`sw.models.golden_fc.run_fc`) and the RTL runtime
(:func:`tb.host.runtime.run_fc_rtl`) both go through these three, so their results are
comparable bit for bit.
"""

import numpy as np

from sw.compiler import dbuf_layout, graphs
from sw.compiler.asm import assemble
from sw.compiler.place import place

__all__ = ["program", "pass_images", "gather_pass", "empty_result"]


def program(plan, graph=None):
    """Return ``(graph, placement)`` of ``plan`` (``graph``: an already built one to place)."""
    graph = graph or graphs.build_graph(plan)
    return graph, place(graph, plan.params)


def pass_images(plan, weights, inputs, graph=None, placement=None):
    """Yield ``(image, outputs)`` for every pass of ``plan``, in order.

    ``weights`` (``K x C``) and ``inputs`` (``N x C``) are float16 arrays; ``graph`` and
    ``placement`` default to :func:`program`'s.
    """
    if graph is None or placement is None:
        graph, placement = program(plan, graph)
    for p in range(plan.passes):
        segments, outputs, layout = dbuf_layout.pass_contents(plan, weights, inputs, p)
        first = dbuf_layout.first_use_meta(dbuf_layout.first_use(layout), segments)
        yield assemble(graph, placement, segments, plan.pass_micc_contexts(p),
                       meta=dict(shared=dbuf_layout.shared_inputs(plan, p), first_use=first),
                       ctx_base=plan.pass_ctx_base(p)), outputs


def empty_result(plan):
    """Return the ``N x K`` float16 result before any pass (zeros)."""
    return np.zeros((plan.N, plan.K), dtype=np.float16)


def gather_pass(plan, result, outputs, read):
    """Write the outputs of one pass into ``result`` (``N x K`` float16) in place.

    ``outputs`` is the pass's ``[(item, address)]``; ``read(address, nbytes)`` returns bytes
    of the memory after the pass.  Only the pass's own output blocks are written.
    """
    part = dbuf_layout.gather_outputs(plan, outputs, read)
    mask = np.zeros((plan.N, plan.K), dtype=bool)
    for i, _ in outputs:
        kbi, gbi = plan.item(i)
        rows = [r for r in plan.item_rows(kbi) if r < plan.K]
        mask[gbi * plan.gb * 4:(gbi + 1) * plan.gb * 4, rows] = True
    result[mask] = part[mask]
