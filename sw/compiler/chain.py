"""Layers chained on chip: a layer's outputs stay in the Dbufs as the next layer's inputs.

Contract (``docs/net.md``, "Chaining on chip", has the reasoning)
-----------------------------------------------------------------
Two consecutive FC layers of one batch, ``prev`` (``K x C``) and ``nxt`` (``K' x K``), are
*chained* when :func:`link_error` finds nothing against it (both run in one pass on the same
array, ``prev``'s rows in order, and everything fits the Dbufs).  Then, in one simulation of
the top:

1. ``prev`` runs with :func:`producer_plan`'s ``out_stride``: each item's engine stores its
   outputs straight into a *stage* in ``nxt``'s input layout (a row of ``S = kblocks x kb``
   tokens per lane group: row ``g``, column ``c`` at ``8 (g S + c)`` within its chunk), cut
   into chunks at the top of ``prev``'s Dbufs, away from everything else of the pass
   (:func:`stages`; ``dbuf_layout.pass_memory`` with ``stage``).  The stores cross the mesh
   to the chunk's Dbuf; their number is the same;
2. ``prev`` stores nothing to external memory; ``nxt``'s DMA-in phase begins with *MOVE*
   descriptors (``sw.spec.dma``, Dbuf to Dbuf, multicast): per input block of ``nxt`` and
   lane-group row (one per block when the rows are contiguous in ``nxt``'s layout too) the
   columns ``0 .. K-1`` (a split ``nxt``: the block's column slice) into every copy of the
   block in ``nxt``'s slots (:func:`moves`), on
   every channel beside the loads of ``nxt``'s configuration, weights and biases;
3. those loads (:func:`consumer_image`) cover everything of ``nxt``'s image but the input
   values (the padding columns ``K .. Cw-1`` and padding lane groups are still loaded as
   zeros) and never touch a stage: ``meta["on_chip"]`` keeps every DMA-in run off the bytes
   the moves read and write, and :func:`link_error` refuses a link where ``nxt``'s data
   would lie on a stage.

No activation crosses the external port between chained layers: only the 16-byte MOVE
descriptors are read.  The numbers are those of the unchained run bit for bit: the same graphs
on the same input bits (``prev``'s outputs); only the padding lanes of the last lane group,
whose outputs no one reads, may hold other values.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sw.compiler import dbuf_layout
from sw.compiler.asm import assemble
from sw.compiler.program import program
from sw.spec.errors import FdpuError

__all__ = ["Move", "producer_plan", "stages", "stage_ranges", "link_error", "moves",
           "filled_ranges", "consumer_image", "chained_passes"]


@dataclass(frozen=True)
class Move:
    """One on-chip copy: ``nbytes`` from global address ``src`` to every address of ``dsts``
    (the same offset of several Dbufs, ascending)."""
    src: int
    nbytes: int
    dsts: tuple


def _stride(prev):
    """Return the tokens of a stage's lane-group row: every item row of ``prev``."""
    return prev.kblocks * prev.kb


def producer_plan(prev):
    """Return ``prev`` storing its outputs in the stage layout (``out_stride``)."""
    return dataclasses.replace(prev, out_stride=_stride(prev))


def stages(prev, nxt):
    """Return ``(bases, reserved, blocks)`` of the stages of ``prev`` chained to ``nxt``.

    The stage holds one row of :func:`_stride` tokens per lane group, cut into *chunks* of
    ``lcm(prev.gb, nxt.gb)`` consecutive rows (so that every item of ``prev`` and every input
    block of ``nxt`` lies in one chunk), each at the top of one of ``prev``'s Dbufs, dealt
    over them in turn.  ``blocks``: per input block ``b`` of ``nxt``, the global address of
    its first row; ``bases``: per item ``(kbi, gbi)`` of ``prev``, the address of its first
    output; ``reserved``: per Dbuf, the bytes the chunks take at the top of its region.
    """
    dbufs = sorted({d for _, d in prev.homes})
    rows = math.lcm(prev.gb, nxt.gb)
    row_bytes = _stride(prev) * 8
    total = max(prev.gblocks * prev.gb, nxt.gblocks * nxt.gb)
    reserved, chunks = {}, []
    for c in range(-(-total // rows)):
        d = dbufs[c % len(dbufs)]
        reserved[d] = reserved.get(d, 0) + rows * row_bytes
        chunks.append(prev.data_region(d, 0)[1] - reserved[d])

    def row(g):
        return chunks[g // rows] + (g % rows) * row_bytes

    bases = {(kbi, gbi): row(gbi * prev.gb) + kbi * prev.kb * 8
             for kbi in range(prev.kblocks) for gbi in range(prev.gblocks)}
    return bases, reserved, {b: row(b * nxt.gb) for b in range(nxt.gblocks)}


def link_error(prev, nxt, weights=None, next_weights=None):
    """Return why ``prev``'s outputs cannot stay on chip as ``nxt``'s inputs, or ``None``.

    ``weights`` (``prev``'s): check that its pass fits with the stages; ``next_weights``
    (``nxt``'s): check that ``nxt``'s data lie clear of the stages (else both assumed).
    """
    if prev.params != nxt.params:
        return "the two layers are planned for different arrays"
    if nxt.C != prev.K:
        return f"the next layer takes {nxt.C} inputs, this one gives {prev.K}"
    if nxt.N != prev.N:
        return f"the batches differ ({prev.N} and {nxt.N})"
    for name, plan in (("this layer", prev), ("the next layer", nxt)):
        if plan.passes != 1:
            return (f"{name} runs in {plan.passes} passes (its data do not fit the Dbufs at "
                    f"once)")
    if prev.row_order and tuple(prev.row_order) != tuple(range(len(prev.row_order))):
        return "this layer's rows are balanced over the engines, not in order"
    _, reserved, blocks = stages(prev, nxt)
    top = {d: prev.data_region(d, 0)[1] - n for d, n in reserved.items()}
    for addr, nbytes in filled_ranges(nxt):
        d = nxt.params.dbuf_of(addr)[0]
        if d in top and addr + nbytes > top[d]:
            return (f"the next layer's input blocks would reach this layer's stages in Dbuf "
                    f"{d} ({nxt.params.dbuf_bytes} bytes)")
    if weights is not None:
        try:
            _producer_memory(prev, nxt, weights, _zeros(prev.N, prev.C))
        except FdpuError as exc:
            return f"this layer and its stages do not fit the Dbufs ({exc})"
    if next_weights is not None:
        segs, _ = dbuf_layout.pass_memory(nxt, next_weights, _zeros(nxt.N, nxt.C), 0)
        at = _first_shared(_consumer_segments(nxt, segs)[0], stage_ranges(prev, nxt))
        if at is not None:
            return (f"the next layer's data would lie on this layer's stages (Dbuf byte "
                    f"{at:#x})")
    return None


def stage_ranges(prev, nxt):
    """Return ``[(global address, bytes)]`` of the stage chunks (what the moves read)."""
    _, reserved, _ = stages(prev, nxt)
    return sorted((prev.data_region(d, 0)[1] - n, n) for d, n in reserved.items())


def _first_shared(segments, ranges):
    """Return the first byte address both ``segments`` (address -> bytes) and ``ranges``
    (``(address, bytes)``) cover, or ``None``."""
    for a, blob in segments.items():
        for lo, n in ranges:
            if a < lo + n and lo < a + len(blob):
                return max(a, lo)
    return None


def _zeros(n, c):
    return np.zeros((n, c), dtype=np.float16)


def _producer_memory(prev, nxt, weights, inputs):
    return _producer_contents(prev, nxt, weights, inputs)[:2]


def _producer_contents(prev, nxt, weights, inputs):
    """Return ``(segments, outputs, layout)`` of ``prev``'s pass 0, its outputs in ``nxt``'s
    stages (``dbuf_layout.pass_contents``)."""
    bases, reserved, _ = stages(prev, nxt)
    return dbuf_layout.pass_contents(producer_plan(prev), weights, inputs, 0, (bases, reserved))


def moves(prev, nxt):
    """Return the :class:`Move` list that copies ``prev``'s stages into ``nxt``'s input
    blocks of pass 0 (real lane groups, columns ``0 .. K-1``)."""
    _, _, blocks = stages(prev, nxt)
    s = _stride(prev)
    whole = s == nxt.Cw == nxt.C          # a stage's rows are contiguous in nxt's layout too
    out = []
    for key, (slot, ds) in nxt.pass_inputs(0).items():
        b = key[0]
        c0, c1 = nxt.input_columns(key)
        rows = min(nxt.gb, nxt.groups - b * nxt.gb)
        spans = [(0, rows * nxt.C * 8)] if whole else \
            [(j * nxt.Cw * 8, (c1 - c0) * 8) for j in range(rows)]
        for off, nbytes in spans:
            src = blocks[b] + ((off // (nxt.Cw * 8)) * s + c0) * 8
            dst = nxt.input_offset(slot) + off
            out.append(Move(src, nbytes, tuple(nxt.pass_base(d, 0) + dst for d in ds)))
    return out


def filled_ranges(nxt):
    """Return ``[(global address, bytes)]``: the parts of ``nxt``'s pass-0 input blocks a
    chained previous layer writes (the block's real columns, ``0 .. C-1`` without a split, of
    every real lane group, in every Dbuf holding the block)."""
    out = []
    for key, (slot, ds) in nxt.pass_inputs(0).items():
        c0, c1 = nxt.input_columns(key)
        for j in range(nxt.gb):
            if key[0] * nxt.gb + j >= nxt.groups:
                break
            off = nxt.input_offset(slot) + j * nxt.Cw * 8
            out += [(nxt.pass_base(d, 0) + off, 8 * (c1 - c0)) for d in ds]
    return sorted(out)


def consumer_image(nxt, segments, graph, placement, keep=(), first=None):
    """Return ``nxt``'s pass-0 image without the input bytes a chained layer writes.

    ``segments``: :func:`~sw.compiler.dbuf_layout.pass_memory`'s of pass 0.  Each input
    block's copy is cut to what the DMA-in still loads (zeros: the padding columns ``C ..
    Cw-1`` and the padding lane groups); ``meta["shared"]`` lists those cuts that several
    Dbufs hold (multicast), ``meta["on_chip"]`` the ranges the moves write and ``keep`` (the
    ranges they read): no DMA-in run may cover them.  ``first``
    (``dbuf_layout.first_use``): the first context reading each segment, kept for the segments
    the image loads (the cut input blocks count as context 0's).
    """
    segs, shared = _consumer_segments(nxt, segments)
    return assemble(graph, placement, segs, nxt.pass_contexts(0),
                    meta=dict(shared=shared, on_chip=filled_ranges(nxt) + list(keep),
                              first_use=dbuf_layout.first_use_meta(first or {}, segs)),
                    ctx_base=nxt.pass_ctx_base(0))


def _consumer_segments(nxt, segments):
    """Return ``(segments, shared)`` of :func:`consumer_image`."""
    segs = dict(segments)
    shared = []
    for key, (slot, ds) in nxt.pass_inputs(0).items():
        c0, c1 = nxt.input_columns(key)
        addrs = [nxt.pass_base(d, 0) + nxt.input_offset(slot) for d in ds]
        for a in addrs:
            del segs[a]
        for j in range(nxt.gb):
            real = key[0] * nxt.gb + j < nxt.groups
            lo = j * nxt.Cw * 8 + ((c1 - c0) * 8 if real else 0)
            hi = (j + 1) * nxt.Cw * 8
            if hi > lo:
                cut = [a + lo for a in addrs]
                for a in cut:
                    segs[a] = bytes(hi - lo)
                if len(cut) > 1:
                    shared.append(cut)
    return segs, shared


def chained_passes(plans, weights, inputs):
    """Return the passes of ``plans`` (consecutive layers, every link free of
    :func:`link_error`) chained on chip: per layer ``(image, reads, moves, outputs)``.

    ``weights``: each layer's ``K x C`` float16; ``inputs``: the first layer's ``N x C``.
    ``reads`` (the output ranges stored to external memory) is empty but for the last layer,
    ``moves`` (:func:`moves`, at the start of the pass's DMA-in) empty for the first layer;
    ``outputs`` is the pass's ``[(item, global address)]``.  Raises :class:`FdpuError` for a
    link that cannot chain.
    """
    for li, (a, b) in enumerate(zip(plans, plans[1:])):
        why = link_error(a, b, weights[li], weights[li + 1])
        if why:
            raise FdpuError(f"layers {li} and {li + 1} cannot be chained on chip: {why}")
    out = []
    x = np.asarray(inputs, dtype=np.float16)
    for li, plan in enumerate(plans):
        last = li + 1 == len(plans)
        x_li = x if li == 0 else _zeros(plan.N, plan.C)
        if last:
            run = plan
            segments, outputs, layout = dbuf_layout.pass_contents(plan, weights[li], x_li, 0)
        else:
            run = producer_plan(plan)
            segments, outputs, layout = _producer_contents(plan, plans[li + 1], weights[li],
                                                           x_li)
        first = dbuf_layout.first_use(layout)
        graph, placement = program(run)
        if li == 0:
            image = assemble(graph, placement, segments, plan.pass_contexts(0),
                             meta=dict(shared=dbuf_layout.shared_inputs(plan, 0),
                                       first_use=dbuf_layout.first_use_meta(first,
                                                                            segments)),
                             ctx_base=plan.pass_ctx_base(0))
        else:
            image = consumer_image(plan, segments, graph, placement,
                                   stage_ranges(plans[li - 1], plan), first)
        reads = [(addr, plan.output_bytes) for _, addr in outputs] if last else []
        out.append((image, reads, moves(plans[li - 1], plan) if li else [], outputs))
    return out
