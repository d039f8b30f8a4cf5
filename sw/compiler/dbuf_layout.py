"""The Dbuf layout of one FC pass: what each Dbuf holds, and the result read back after it.

Contract (``docs/dataflow.md`` has the reasoning)
-------------------------------------------------
Memory layout of a pass, per Dbuf: the descriptor tables of the engines homed there (16 bytes
per context: item base, input base, output base, and the item's bias block address with an
epilogue bias, else a zero pad word; sparse engines feed
``+0.0`` for the weights FD-CSR does not store by ``LDHBZ`` of address 0, no access), then
the input blocks (``gb`` groups of ``Cw`` 8-byte tokens, lane ``l`` of group ``g`` = batch
element ``4 * g + l``; each in its slot, ``FcPlan.pass_inputs``, at the same offset of every
Dbuf that holds it, so that one multicast DMA descriptor loads them all:
:func:`shared_inputs`), the item data (in the graph kind's format,
:meth:`~sw.compiler.graph_kinds.base.GraphKind.item_data`: dense, the ``W`` block column-major,
``kb`` binary16 per column; FD-CSR, ``colidx``, ``rowoff`` relocated to ``item base + 2 x
rowoff``, ``values``; skip, mask words, row words, values; a split plan's items and input
blocks hold their column slice's; one copy per Dbuf of a row block's data, however many
of its lane-group blocks' items the Dbuf's engines run; for all its dummy items one zero
block, or where the graph's work does not depend on the weights
(``GraphKind.dummy_reads_any``), a row block the Dbuf holds), with a bias the item's bias
block (``kb`` binary16, the biases of its rows, 0 for padding rows and dummy items); then,
after all of the Dbuf's item data, the output blocks of its items side by side in slot order
(so that a Dbuf's results leave in one DMA-out descriptor; ``kb x gb`` tokens each,
group-major: the token of row ``k`` and lane group ``g`` at ``8 (g kb + k)``, so that each
group's outputs are one run, the form a chained next layer's input block takes them in).  A
layer whose data do not fit the Dbufs runs in several passes (one memory image each, the same
program).  Pass
``p`` fills ``FcPlan.data_region(d, p)`` of each Dbuf and the table entries from
``FcPlan.pass_ctx_base(p)``: a double-buffered plan's consecutive passes touch disjoint bytes.

:func:`pass_layout` computes where everything of pass ``p`` of an
:class:`~sw.compiler.fc_plan.FcPlan` goes (addresses and sizes: the one layout, which the
performance model reads too); :func:`pass_memory` fills it with the bytes and says where each
item's output goes; :func:`first_use` says which context of the pass first reads each
segment (the order a DMA-in that lets each context start when its data are in follows);
:func:`gather_outputs` assembles the ``N x K`` result from the outputs after the run.
"""

from dataclasses import dataclass, replace

import numpy as np

from sw.compiler.fc_plan import ENTRY_BYTES, LANES, align
from sw.spec.errors import FdpuError

__all__ = ["ItemPlace", "PassLayout", "pass_layout", "pass_memory", "pass_contents",
           "data_pieces", "first_use", "first_use_meta", "shared_inputs", "gather_outputs"]


def _item_width(plan):
    """Return the columns of an item's weight block: ``C``, or a split plan's slice ``Cw``."""
    return plan.C if plan.split == 1 else plan.Cw


def _item_weights(plan, w16, kbi):
    """Return the float16 weight block of row block ``kbi``: ``kb`` rows (zero past K) of the
    ``C`` columns, or of a split plan, of its slice's ``Cw`` (zero past C)."""
    blk = np.zeros((plan.kb, _item_width(plan)), dtype=np.float16)
    c0 = plan.item_columns(kbi)
    c1 = min(plan.C, c0 + blk.shape[1])
    for i, r in enumerate(plan.item_rows(kbi)):
        if r < plan.K:
            blk[i, :c1 - c0] = w16[r, c0:c1]
    return blk


def _bias_bytes(plan, kbi):
    """Return the bias block of row block ``kbi`` (``None``: a dummy item, all zero)."""
    out = np.zeros(plan.bias_bytes // 2, dtype="<u2")
    if kbi is not None:
        for i, r in enumerate(plan.item_rows(kbi)):
            if r < plan.K:
                out[i] = plan.bias[r]
    return out.tobytes()


def _input_block(plan, x16, key):
    """Return the bytes of input block ``key`` (``(gbi, slice)``): ``gb`` groups x ``Cw``
    tokens of 4 lanes, the slice's columns (all of them without a split)."""
    gbi = key[0]
    c0, c1 = plan.input_columns(key)
    blk = np.zeros((plan.gb * LANES, plan.Cw), dtype=np.float16)
    rows = x16[gbi * plan.gb * LANES:(gbi + 1) * plan.gb * LANES, c0:c1]
    blk[:rows.shape[0], :c1 - c0] = rows
    # token (g, c) lane l = batch element 4 g + l
    t = blk.reshape(plan.gb, LANES, plan.Cw).transpose(0, 2, 1)
    return np.ascontiguousarray(t).view(np.uint8).tobytes()


@dataclass(frozen=True)
class ItemPlace:
    """Where one context slot of a pass lives: engine ``engine``'s context ``context`` runs
    item ``item`` (``None``: a dummy item), whose ``nbytes`` of data are at ``data``, bias
    block at ``bias`` (0: no bias), outputs at ``output``, and whose input block is at
    ``input`` (all global addresses)."""
    engine: int
    context: int
    item: object
    data: int
    nbytes: int
    bias: int
    output: int
    input: int


@dataclass(frozen=True)
class PassLayout:
    """The addresses and sizes of one pass's Dbuf data (:func:`pass_layout`).

    ``tables``: per engine ``(address, bytes)`` of its descriptor table; ``inputs``: per input
    block key (``(gbi, slice)``, in order of first use) its slot and ``((dbuf, address), ...)``
    of every copy; ``places``: an :class:`ItemPlace` per context slot, in slot order (slot
    ``s`` is engine ``s % E``, context ``s // E``); ``chunks`` and ``chunk_bytes``: a streamed
    plan's contexts per item and the bytes of each one's share of an item's data
    (:attr:`~sw.compiler.fc_plan.FcPlan.chunk_bytes`), which :func:`first_use` needs.
    """
    tables: tuple
    inputs: dict
    places: tuple
    chunks: int = 1
    chunk_bytes: int = 0


def data_pieces(address, nbytes, chunk_bytes, used=None):
    """Return ``[(address, bytes)]``: the segments an item's ``nbytes`` of data at ``address``
    are laid down as, one whole, or a streamed plan's (``chunk_bytes``, its
    :attr:`~sw.compiler.fc_plan.FcPlan.chunk_bytes`) one piece per context of the item, each
    whole or its first ``used[k]`` bytes (the graph's
    :meth:`~sw.compiler.graph_kinds.base.GraphKind.piece_bytes`)."""
    step = chunk_bytes or nbytes
    pieces = [(address + k, min(step, nbytes - k)) for k in range(0, nbytes, step or 1)]
    if used is None:
        return pieces
    return [(a, min(n, u)) for (a, n), u in zip(pieces, used)]


def pass_layout(plan, p, item_bytes, stage=None):
    """Return the :class:`PassLayout` of pass ``p`` of ``plan`` (the module doc's layout).

    ``item_bytes(i)`` is the data bytes of item ``i`` (``None``: a dummy item, zero
    weights).  ``stage`` (a layer chained on chip, :mod:`sw.compiler.chain`): ``(bases,
    reserved)``, where ``bases`` maps each item's ``(kbi, gbi)`` to the address its outputs
    go to (in the next layer's input layout, at the top of some Dbuf) and ``reserved`` each
    Dbuf to the bytes at the top of its region those stages take; the dummy items' outputs
    then go below the reserved bytes, downwards, so that nothing of the pass is where the
    next layer's input blocks go.  The one place the layout is computed: the image builder
    (:func:`pass_memory`) fills it, the performance model sizes its DMA from it.

    Raises
    ------
    FdpuError
        When the pass does not fit a Dbuf's region.
    """
    params = plan.params
    items = list(plan.pass_items(p))
    ctxs = plan.pass_contexts(p)
    regions = {d: plan.data_region(d, p) for _, d in plan.homes}
    blocks = plan.pass_inputs(p)
    holds, inputs = {}, {}           # Dbuf -> {(gbi, slice): global address of its copy}
    for key, (slot, ds) in blocks.items():
        copies = []
        for d in ds:
            addr = plan.pass_base(d, p) + plan.input_offset(slot)
            holds.setdefault(d, {})[key] = addr
            copies.append((d, addr))
        inputs[key] = (slot, tuple(copies))

    def overflow(d):
        return FdpuError(f"pass {p} overflows Dbuf {d} ({params.dbuf_bytes} bytes"
                         + (", half for each pass" if plan.double_buffer else "") + ")")

    cursor = {}
    for d in regions:
        top = max((blocks[g][0] for g in holds.get(d, {})), default=0)
        cursor[d] = plan.pass_base(d, p) + plan.input_offset(top + 1)
        if cursor[d] > regions[d][1]:
            raise overflow(d)
    bases, reserved = stage or ({}, {})
    top = {d: hi - reserved.get(d, 0) for d, (_, hi) in regions.items()}

    def alloc(d, nbytes, high=False):
        if high:
            top[d] = (top[d] - nbytes) // 8 * 8
            addr = top[d]
        else:
            addr = align(cursor[d], 8)
            cursor[d] = addr + nbytes
        if cursor[d] > top[d]:
            raise overflow(d)
        return addr

    places, shared = [], {}
    for slot in range(ctxs * plan.engines):
        e, t = slot % plan.engines, slot // plan.engines
        d = plan.homes[e][1]
        if slot < len(items):
            i = items[slot]
            xaddr = holds[d][plan.item_input(i)]
        else:
            # A dummy item reads any input block of its Dbuf (its weights are zero).
            i = None
            xaddr = min(holds[d].values()) if d in holds else \
                plan.pass_base(d, p) + plan.input_offset(0)
        # One copy of a row block's data and bias per Dbuf: the items of its lane-group
        # blocks on engines homed there read the same bytes.  A dummy item reads a row
        # block of its Dbuf where the graph's work does not depend on the weights, else
        # the Dbuf's one zero block.
        key = (d, None if i is None else plan.item(i)[0])
        if i is None and plan.graph.dummy_reads_any:
            key = next((k for k in shared if k[0] == d), key)
        if key not in shared:
            nbytes = item_bytes(i)
            shared[key] = (alloc(d, nbytes),
                           alloc(d, plan.bias_bytes) if plan.bias is not None else 0, nbytes)
        baddr, caddr, nbytes = shared[key]
        if stage is None:
            oaddr = None                  # below, after every Dbuf's item data
        elif i is None:
            oaddr = alloc(d, plan.output_span, high=True)
        else:
            oaddr = bases[plan.item(i)]
        places.append(ItemPlace(e, t, i, baddr, nbytes, caddr, oaddr, xaddr))
    # A Dbuf's output blocks side by side, in slot order (its real items' before its dummy
    # ones'), so that its results leave in one DMA-out descriptor.
    places = [at if at.output is not None else
              replace(at, output=alloc(plan.homes[at.engine][1], plan.output_bytes))
              for at in places]
    base = plan.pass_ctx_base(p) * ENTRY_BYTES
    tables = tuple((plan.desc_base[e] + base, ctxs * plan.chunks * ENTRY_BYTES)
                   for e in range(plan.engines))
    return PassLayout(tables, inputs, tuple(places), plan.chunks, plan.chunk_bytes)


def pass_memory(plan, weights, inputs, p, stage=None):
    """Return ``(segments, outputs)`` of pass ``p``: its :func:`pass_layout` filled.

    ``segments`` maps a global address to the bytes stored there; ``outputs`` lists
    ``(item index, global output address)``.  ``stage``: as for :func:`pass_layout`.
    """
    segments, outputs, _ = pass_contents(plan, weights, inputs, p, stage)
    return segments, outputs


def pass_contents(plan, weights, inputs, p, stage=None):
    """Return ``(segments, outputs, layout)``: :func:`pass_memory`'s and the
    :class:`PassLayout` they fill."""
    spec, kind = plan.engine, plan.graph
    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    blocks = {i: _item_weights(plan, w16, plan.item(i)[0]) for i in plan.pass_items(p)}
    blocks[None] = np.zeros((plan.kb, _item_width(plan)), dtype=np.float16)
    coded = {i: kind.encode(spec, blk) for i, blk in blocks.items()}
    layout = pass_layout(plan, p, lambda i: coded[i][1], stage)
    segments, outputs = {}, []
    for key, (_, copies) in layout.inputs.items():
        blob = _input_block(plan, x16, key)
        for _, addr in copies:
            segments[addr] = blob
    desc = {e: bytearray(n) for e, (_, n) in enumerate(layout.tables)}
    for at in layout.places:
        enc, nbytes = coded[at.item]
        # Shared data and bias (pass_layout) are written by the first place that has them:
        # a row block's own item, never a dummy that reads it.
        if nbytes and at.data not in segments:
            blob = kind.item_data(spec, blocks[at.item], enc, nbytes, at.data)
            used = kind.piece_bytes(spec, None, enc)
            for addr, n in data_pieces(at.data, nbytes, plan.chunk_bytes, used):
                segments[addr] = blob[addr - at.data:addr - at.data + n]
        if plan.bias is not None and at.bias not in segments:
            segments[at.bias] = _bias_bytes(plan, None if at.item is None
                                            else plan.item(at.item)[0])
        if at.item is not None:
            outputs.append((at.item, at.output))
        # One entry per MicC context: a streamed item's context k reads its k-th share of the
        # weights and of each lane group's inputs (Cw / chunks columns on).
        for k in range(plan.chunks):
            m = at.context * plan.chunks + k
            entry = np.array([at.data + k * plan.chunk_bytes, at.input + k * 8 * spec.columns,
                              at.output, at.bias], dtype="<u4").tobytes()
            desc[at.engine][m * ENTRY_BYTES:(m + 1) * ENTRY_BYTES] = entry
    for e, (addr, _) in enumerate(layout.tables):
        segments[addr] = bytes(desc[e])
    return segments, outputs, layout


def first_use(layout):
    """Return ``{global address: context}``: for each segment of ``layout`` (a
    :class:`PassLayout`) the first context of the pass (``0 ..``) that reads it.

    A context reads its engines' table entries (the tables count as context 0's: they are
    small and every context's entry is in them), its items' data and bias blocks and the
    input blocks those items read; a copy of an input block counts for the first context
    that reads *that copy*.  A streamed plan's item runs in contexts ``t chunks ..`` (slot
    context ``t``): its bias and input block count for the first, the ``k``-th piece of its
    data (``chunk_bytes`` each) for context ``t chunks + k``.
    """
    first = {addr: 0 for addr, _ in layout.tables}

    def use(addr, ctx):
        first[addr] = min(first.get(addr, ctx), ctx)
    for at in layout.places:
        c0 = at.context * layout.chunks
        for addr in (at.bias or None, at.input):
            if addr is not None:
                use(addr, c0)
        for k, (addr, _) in enumerate(data_pieces(at.data, at.nbytes, layout.chunk_bytes)):
            use(addr, c0 + k)
    return first


def first_use_meta(first, segments):
    """Return an image's ``meta["first_use"]``: ``[address, context]`` of the ``segments``
    that ``first`` (:func:`first_use`) names, in address order (the others count as context
    0's)."""
    return sorted([a, c] for a, c in first.items() if a in segments)


def shared_inputs(plan, p):
    """Return, per input block of pass ``p`` that several Dbufs hold (the same bytes at the
    same offset of each: ``FcPlan.pass_inputs``), the global addresses of its copies: the
    groups the runtime loads by multicast DMA."""
    return [[plan.pass_base(d, p) + plan.input_offset(slot) for d in ds]
            for slot, ds in plan.pass_inputs(p).values() if len(ds) > 1]


def gather_outputs(plan, outputs, read):
    """Return the ``N x K`` float16 result from ``outputs`` (see :func:`pass_memory`).

    ``read(address, nbytes)`` returns bytes of the memory after the run.
    """
    y = np.zeros((plan.gblocks * plan.gb * LANES, plan.kblocks * plan.kb), dtype=np.uint16)
    for i, addr in outputs:
        kbi, gbi = plan.item(i)
        blk = np.frombuffer(read(addr, plan.output_bytes), dtype="<u2")
        blk = blk.reshape(plan.gb, plan.kb, LANES)       # [g][k][lane]
        blk = blk.transpose(0, 2, 1).reshape(plan.gb * LANES, plan.kb)
        y[gbi * plan.gb * LANES:(gbi + 1) * plan.gb * LANES, list(plan.item_rows(kbi))] = blk
    return y[:plan.N, :plan.K].view(np.float16)
