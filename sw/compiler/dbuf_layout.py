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
blocks hold their column slice's), with a bias
the item's bias block (``kb`` binary16, the biases of its rows, 0 for padding rows and dummy
items), and the output blocks (``kb x gb`` tokens, group-major: the
token of row ``k`` and lane group ``g`` at ``8 (g kb + k)``, so that each group's outputs are
one run, the form a chained next layer's input block takes them in).  A layer whose data
do not fit the Dbufs runs in several passes (one memory image each, the same program).  Pass
``p`` fills ``FcPlan.data_region(d, p)`` of each Dbuf and the table entries from
``FcPlan.pass_ctx_base(p)``: a double-buffered plan's consecutive passes touch disjoint bytes.

:func:`pass_memory` returns the image of pass ``p`` of an :class:`~sw.compiler.fc_plan.FcPlan`
and where each item's output goes; :func:`gather_outputs` assembles the ``N x K`` result from
the outputs after the run.
"""

import numpy as np

from sw.compiler.fc_plan import DESC_BYTES, LANES, align
from sw.spec.errors import FdpuError

__all__ = ["pass_memory", "shared_inputs", "gather_outputs"]


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


def pass_memory(plan, weights, inputs, p, stage=None):
    """Return ``(segments, outputs)`` of pass ``p``.

    ``segments`` maps a global address to the bytes stored there; ``outputs`` lists
    ``(item index, global output address)``.  ``stage`` (a layer chained on chip,
    :mod:`sw.compiler.chain`): ``(bases, reserved)``, where ``bases`` maps each item's
    ``(kbi, gbi)`` to the address its outputs go to (in the next layer's input layout, at the
    top of some Dbuf) and ``reserved`` each Dbuf to the bytes at the top of its region those
    stages take; the dummy items' outputs then go below the reserved bytes, downwards, so
    that nothing of the pass is where the next layer's input blocks go.
    """
    params = plan.params
    spec, kind = plan.engine, plan.graph
    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    items = list(plan.pass_items(p))
    ctxs = plan.pass_contexts(p)
    regions = {d: plan.data_region(d, p) for _, d in plan.homes}
    segments, outputs = {}, []
    blocks = plan.pass_inputs(p)
    holds = {}                       # Dbuf -> {(gbi, slice): global address of its copy}
    for key, (slot, ds) in blocks.items():
        blob = _input_block(plan, x16, key)
        for d in ds:
            addr = plan.pass_base(d, p) + plan.input_offset(slot)
            holds.setdefault(d, {})[key] = addr
            segments[addr] = blob
    cursor = {}
    for d in regions:
        top = max((blocks[g][0] for g in holds.get(d, {})), default=0)
        cursor[d] = plan.pass_base(d, p) + plan.input_offset(top + 1)
        if cursor[d] > regions[d][1]:
            raise FdpuError(f"pass {p} overflows Dbuf {d} ({params.dbuf_bytes} bytes"
                            + (", half for each pass" if plan.double_buffer else "") + ")")
    desc = {e: bytearray(ctxs * DESC_BYTES) for e in range(plan.engines)}

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
            raise FdpuError(f"pass {p} overflows Dbuf {d} ({params.dbuf_bytes} bytes"
                            + (", half for each pass" if plan.double_buffer else "") + ")")
        return addr

    for slot in range(ctxs * plan.engines):
        e, t = slot % plan.engines, slot // plan.engines
        d = plan.homes[e][1]
        if slot < len(items):
            i = items[slot]
            kbi, gbi = plan.item(i)
            xaddr = holds[d][plan.item_input(i)]
            blk = _item_weights(plan, w16, kbi)
        else:
            # A dummy item reads any input block of its Dbuf (its weights are zero).
            i = None
            xaddr = min(holds[d].values()) if d in holds else \
                plan.pass_base(d, p) + plan.input_offset(0)
            blk = np.zeros((plan.kb, _item_width(plan)), dtype=np.float16)
        enc, nbytes = kind.encode(spec, blk)
        baddr = alloc(d, nbytes)
        if nbytes:
            segments[baddr] = kind.item_data(spec, blk, enc, nbytes, baddr)
        caddr = 0
        if plan.bias is not None:
            caddr = alloc(d, plan.bias_bytes)
            segments[caddr] = _bias_bytes(plan, None if i is None else plan.item(i)[0])
        if stage is None:
            oaddr = alloc(d, plan.output_bytes)
        elif i is None:
            oaddr = alloc(d, plan.output_span, high=True)
        else:
            oaddr = bases[plan.item(i)]
        if i is not None:
            outputs.append((i, oaddr))
        entry = np.array([baddr, xaddr, oaddr, caddr], dtype="<u4").tobytes()
        desc[e][t * DESC_BYTES:(t + 1) * DESC_BYTES] = entry
    for e in range(plan.engines):
        segments[plan.desc_base[e] + plan.pass_ctx_base(p) * DESC_BYTES] = bytes(desc[e])
    return segments, outputs


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
