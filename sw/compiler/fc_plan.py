"""The plan of an FC layer: its work items, engines, contexts and passes, and its graph options.

Contract (``docs/dataflow.md`` and ``docs/mapping.md`` have the reasoning)
--------------------------------------------------------------------------
A layer ``O[n][k] = sum_c W[k][c] * I[n][c]`` (``W`` is ``K x C``, ``I`` is ``N x C``,
binary16) is cut into *work items*: a block of ``kb`` output rows times ``gb`` *lane groups*
(4 batch elements per SIMD-4 token, the batch padded to a multiple of 4).  An item covers all
``Cw`` columns (``C`` rounded up to the graph's column unit: 1 dense, 16 FD-CSR, 32 skip).  A *split* plan
(``split = S``, :mod:`sw.compiler.split`) computes partial sums instead: its ``K`` rows are
``S`` copies of the layer's ``K / S`` (padded) rows, row block ``kbi`` reducing over column
slice ``kbi // slice_blocks`` only (``Cw = ceil(C / S)`` rounded up; an input block holds one
slice of its lane groups' inputs), so that a layer with few outputs gives ``S`` times as many
engines work.
One *engine* per PE (a
self-contained subgraph, all edges PE-local) computes one item per context; item ``i`` of a pass
runs on engine ``i % E`` in context ``i // E``.  Engines without an item in the last context
compute a *dummy* item (zero weights, discarded output).  Which row block and lane-group block
item ``i`` is (:meth:`FcPlan.item`): with one lane-group block, row block ``i``; with ``G >
1``, of two orders the one that puts fewer bytes into the Dbufs.  Row blocks fastest (``kbi =
i mod kblocks``): a pass's items read few input blocks, each row block's weights once per
lane-group block.  A row block's lane-group blocks together: the items of a pass are
numbered lane-group block fastest (``u = G kbi + gbi``) and dealt to the pass's slots in the
order (home Dbuf, engine, context), so that the ``G`` items of a row block run on one engine,
or on two engines of one Dbuf, and read one copy of its weights (``sw.compiler.dbuf_layout``
stores each row block once per Dbuf and pass); each engine then runs its items lane-group
block slowest (its row blocks for lane-group block 0, then again for 1, ...), so that its
first contexts read one input block, as in the other order.  It wins where a Dbuf has
several slots a pass and the weights outweigh the inputs.  A layer whose data do not fit the
Dbufs runs in several passes (one memory image each, the same program).  A
*double-buffered* plan (``double_buffer``) gives its passes alternate halves of each Dbuf,
each half laid out as a whole Dbuf is (descriptor tables, then data); the odd passes number their contexts from
:meth:`FcPlan.pass_ctx_base` (half a Dbuf in descriptors), so their engines read the second
half's tables with the same program.  The DMA can then load pass ``p + 1`` and store pass
``p - 1`` while pass ``p`` computes (``docs/system.md``, "Double buffering").

:class:`FcPlan` records one such cut: the shapes, the blocking (``kb``, ``gb``, sparse
``wfan``), the graph options (the graph kind, :mod:`sw.compiler.graph_kinds`; the optional epilogue of each output, ``y =
relu(acc + bias)``: a per-output ``bias`` and ``relu``; ``out_stride``, the distance of the
lane groups' outputs when a chained layer writes them in the next layer's input layout), each
engine's PE and home Dbuf and descriptor table, the contexts per pass, and what follows from
them (items, passes, the byte sizes of an item's blocks).
:func:`sw.compiler.planner.plan_fc` chooses a plan; :mod:`sw.compiler.graphs` builds its
engines, :mod:`sw.compiler.dbuf_layout` the memory image of each pass.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sw.compiler.graph_kinds import (DEFAULT_SPARSE_GRAPH, MODES, SPARSE_GRAPHS, WFANS,
                                     EngineSpec, GraphKind, align)
from sw.spec.arch import ArrayParams

__all__ = ["MODES", "WFANS", "SPARSE_GRAPHS", "DEFAULT_SPARSE_GRAPH", "LANES", "ENTRY_BYTES",
           "FcPlan", "align"]

LANES = ArrayParams.LANES
#: Bytes of one entry of an engine's descriptor table (one a context): item base, input base,
#: output base, bias block or pad.  (A DMA descriptor is ``sw.spec.dma.DESC_BYTES``.)
ENTRY_BYTES = 16


@dataclass(frozen=True)
class FcPlan:
    """How one FC layer runs: shapes, blocking, engines, passes and their memory layouts.

    Frozen: :func:`sw.compiler.planner.plan_fc` builds it whole (homes, contexts, descriptor
    tables, row order, double buffering) and nothing changes it afterwards; a variation is a
    new plan (``dataclasses.replace``).
    """
    graph: GraphKind                               # sw.compiler.graph_kinds.GRAPHS
    K: int
    C: int
    N: int
    params: ArrayParams
    kb: int
    gb: int
    feedback: bool = True
    wfan: int = 4                                  # sparse: lane groups per value load
    homes: tuple = ()                              # engine -> (pe (x, y), dbuf index)
    contexts: int = 0                              # contexts per pass (the last may be fewer)
    desc_base: tuple = ()                          # engine -> global address of its table
    fan_pipe0: bool = False                        # sparse wfan 16: MOV trees hinted to pipe 0
    row_order: tuple = ()                          # skip: item rows (balance.balanced_rows)
    double_buffer: bool = False                    # passes in alternate halves of the Dbufs
    bias: tuple = None                             # K binary16 bit patterns: y = acc + b
    relu: bool = False                             # y = max(y, +0.0) before the store
    out_stride: int = 0                            # tokens between an output's group rows
    split: int = 1                                 # column slices of the reduction
    chunks: int = 1                                # contexts per item (a streamed plan)

    @property
    def epilogue(self):
        """Return whether the engines add a bias or apply ReLU after each output's FACC."""
        return self.bias is not None or self.relu

    @property
    def bias_bytes(self):
        """Return the bytes of one item's bias block: ``kb`` binary16, 8-aligned (0 without a
        bias)."""
        return 0 if self.bias is None else align(2 * self.kb, 8)

    @property
    def groups(self):
        """Return the lane groups ``ceil(N / 4)``."""
        return -(-self.N // LANES)

    @property
    def mode(self):
        """Return the weight format: ``dense`` or ``sparse``."""
        return self.graph.mode

    @property
    def sparse_graph(self):
        """Return the sparse graph's name (``None`` for a dense plan)."""
        return self.graph.name if self.graph.sparse else None

    @property
    def engine(self):
        """Return the :class:`~sw.compiler.graph_kinds.base.EngineSpec` every engine of the
        plan builds."""
        return EngineSpec(self.graph, self.kb, self.gb, self.Cw, self.wfan, self.feedback,
                          self.fan_pipe0, self.bias is not None, self.relu, self.out_stride,
                          self.chunks)

    @property
    def entries(self):
        """Return the descriptor-table entries of an engine a pass: one per MicC context
        (``contexts x chunks``)."""
        return self.contexts * self.chunks

    @property
    def chunk_bytes(self):
        """Return the bytes from one context's share of a streamed item's data to the next
        one's (the graph's :meth:`~sw.compiler.graph_kinds.base.GraphKind.chunk_bytes`; 0 for
        a plan of one context per item)."""
        return self.graph.chunk_bytes(self.engine)

    @property
    def dense_weights(self):
        """Return the weights of the dense layer: ``K x C``, or a split plan's ``K / split x
        C`` (its rows are the slices of those)."""
        return self.K // self.split * self.C

    @property
    def column_unit(self):
        """Return the columns an item's width is a multiple of (the graph's: 1 dense, 16 for
        the FD-CSR graphs, 32 for ``skip``, whose mask words cover 32 columns)."""
        return self.graph.column_unit

    @property
    def Cw(self):
        """Return the columns one item reduces over: ``C`` rounded up to
        :attr:`column_unit`, or with a ``split`` plan one slice, ``ceil(C / split)`` rounded
        up to it."""
        return align(-(-self.C // self.split), self.column_unit)

    @property
    def slice_blocks(self):
        """Return the row blocks of one column slice (all of them without a split)."""
        return self.kblocks // self.split

    def item_columns(self, kbi):
        """Return the first input column row block ``kbi`` reduces over (its slice's)."""
        return kbi // self.slice_blocks * self.Cw

    def item_input(self, i):
        """Return the key of the input block item ``i`` reads: ``(gbi, slice)``."""
        kbi, gbi = self.item(i)
        return gbi, kbi // self.slice_blocks

    def input_columns(self, key):
        """Return ``(c0, c1)``: the layer's input columns input block ``key`` holds (its
        slice's, the rest of its ``Cw`` being zero padding)."""
        c0 = key[1] * self.Cw
        return c0, min(self.C, c0 + self.Cw)

    @property
    def kblocks(self):
        """Return the row blocks ``ceil(K / kb)``."""
        return -(-self.K // self.kb)

    @property
    def gblocks(self):
        """Return the lane-group blocks ``ceil(groups / gb)``."""
        return -(-self.groups // self.gb)

    @property
    def items(self):
        """Return the number of work items."""
        return self.kblocks * self.gblocks

    @property
    def engines(self):
        """Return the number of engines (PEs used)."""
        return len(self.homes)

    @property
    def per_pass(self):
        """Return the items of a full pass."""
        return self.engines * self.contexts

    @property
    def passes(self):
        """Return the number of passes."""
        return -(-self.items // self.per_pass)

    @property
    def rows(self):
        """Return the weight row of each of the ``kblocks x kb`` item rows, in item order
        (``row_order``, default ``0, 1, ...``; an index of ``K`` or more is a padding row)."""
        return self.row_order or tuple(range(self.kblocks * self.kb))

    def item_rows(self, kbi):
        """Return the weight rows of row block ``kbi`` (those past ``K``: padding)."""
        return self.rows[kbi * self.kb:(kbi + 1) * self.kb]

    def item(self, i):
        """Return ``(kbi, gbi)`` of item ``i``: its row block and lane-group block (the
        order of the module doc, :attr:`item_blocks`)."""
        return int(self.item_blocks[0][i]), int(self.item_blocks[1][i])

    @cached_property
    def item_blocks(self):
        """Return ``(kbi, gbi)``: two arrays giving every item's row block and lane-group
        block (:meth:`item`): of the two orders of the module doc, row blocks fastest and
        a row block's lane-group blocks together, the one whose passes put fewer bytes into
        the Dbufs (each Dbuf's distinct row blocks and input blocks)."""
        G, n = self.gblocks, self.items
        i = np.arange(n, dtype=np.int64)
        plain = (i % self.kblocks, i // self.kblocks)
        if G == 1 or not self.per_pass:
            return plain
        E = self.engines
        dbuf = np.array([d for _, d in self.homes], dtype=np.int64)
        u = i.copy()
        for p in range(self.passes):
            lo = p * self.per_pass
            j = np.arange(min(n, lo + self.per_pass) - lo)
            order = np.lexsort((j // E, j % E, dbuf[j % E]))       # (Dbuf, engine, context)
            u[lo + order] = lo + j
            # Each engine takes its items lane-group block slowest (its row blocks once per
            # lane-group block), so that early contexts read few input blocks.
            for e in range(min(E, len(j))):
                mine = lo + j[e::E]
                u[mine] = np.sort(u[mine] % G * n + u[mine]) % n
        together = (u // G, u % G)
        return together if self.dbuf_bytes(together) < self.dbuf_bytes(plain) else plain

    def dbuf_bytes(self, blocks=None):
        """Return the bytes the passes put into the Dbufs with the items' ``(kbi, gbi)``
        ``blocks`` (default :attr:`item_blocks`): per pass and Dbuf, each row block (at its
        largest, :attr:`item_bound`) and input block its items read, once."""
        kbi, gbi = self.item_blocks if blocks is None else blocks
        i = np.arange(self.items)
        p, slot = i // self.per_pass, i % self.per_pass
        d = np.array([dd for _, dd in self.homes], dtype=np.int64)[slot % self.engines]

        def distinct(*keys):
            return np.unique(np.stack(keys), axis=1).shape[1]
        rows = distinct(p, d, kbi)
        inputs = distinct(p, d, gbi, kbi // self.slice_blocks)
        return rows * self.item_bound + inputs * self.input_bytes

    def row_block_engines(self):
        """Return, per row block, the engine that runs its first lane-group block's item:
        what the ``skip`` graph's balance deals row blocks by."""
        engine = np.empty(self.kblocks, dtype=np.int64)
        kbi, gbi = self.item_blocks
        first = np.flatnonzero(gbi == 0)
        engine[kbi[first]] = first % self.per_pass % self.engines
        return engine

    def pass_weight_blocks(self, p):
        """Return ``{dbuf: distinct weight blocks}`` of pass ``p``: the row blocks its items
        on engines homed there read, plus one for dummy items (they share one zero block)
        unless the graph lets them read a row block (``GraphKind.dummy_reads_any``)."""
        E, kbi = self.engines, self.item_blocks[0]
        items = self.pass_items(p)
        keys = {}
        for slot in range(self.pass_contexts(p) * E):
            held = keys.setdefault(self.homes[slot % E][1], set())
            i = items.start + slot
            if i < items.stop:
                held.add(int(kbi[i]))
            elif not self.graph.dummy_reads_any or not held:
                held.add(None)
        return {d: len(k) for d, k in keys.items()}

    def pass_items(self, p):
        """Return the item indices of pass ``p``."""
        return range(p * self.per_pass, min(self.items, (p + 1) * self.per_pass))

    def pass_contexts(self, p):
        """Return the context slots of pass ``p`` (one item per engine each)."""
        return -(-len(self.pass_items(p)) // self.engines)

    def pass_micc_contexts(self, p):
        """Return the contexts the MicC runs in pass ``p``: ``chunks`` per context slot
        (slot ``t``'s item in contexts ``t chunks .. (t + 1) chunks - 1``)."""
        return self.pass_contexts(p) * self.chunks

    @property
    def region_bytes(self):
        """Return the bytes of a Dbuf one pass may use: all of it, or half (8-byte aligned)
        double-buffered."""
        n = self.params.dbuf_bytes
        return n // 2 // 8 * 8 if self.double_buffer else n

    def pass_ctx_base(self, p):
        """Return the first context ID of pass ``p``: 0, or for the odd passes of a
        double-buffered plan the region size in descriptors, so that their engines read the
        copy of their descriptor table at the start of the second half of the Dbuf."""
        return (p % 2) * (self.region_bytes // ENTRY_BYTES) if self.double_buffer else 0

    def pass_inputs(self, p):
        """Return ``{(gbi, slice): (slot, [dbufs])}``: the input blocks pass ``p``'s items read
        (:meth:`item_input`: lane-group block and column slice), in
        order of first use, each with the Dbufs that hold it (those homing an engine with such
        an item) and its *slot*.  Slot ``s`` is at the same offset of every Dbuf
        (:meth:`input_offset`), so a block several Dbufs hold is one multicast DMA descriptor;
        two blocks one Dbuf holds never share a slot (greedy colouring in order of use)."""
        need = {}
        for slot, i in enumerate(self.pass_items(p)):
            d = self.homes[slot % self.engines][1]
            ds = need.setdefault(self.item_input(i), [])
            if d not in ds:
                ds.append(d)
        held, blocks = {}, {}
        for gbi, ds in need.items():
            used = set().union(*(held.get(d, set()) for d in ds))
            s = next(k for k in range(len(used) + 1) if k not in used)
            for d in ds:
                held.setdefault(d, set()).add(s)
            blocks[gbi] = (s, sorted(ds))
        return blocks

    def input_offset(self, slot):
        """Return the offset of input slot ``slot`` in a pass's half (or whole) of a Dbuf:
        after the largest descriptor table of any Dbuf, ``input_bytes`` (8-aligned) apart."""
        most = max(map(len, self._engines_by_dbuf.values()), default=0)
        return align(most * self.entries * ENTRY_BYTES, 8) + slot * align(self.input_bytes, 8)

    def engines_at(self, d):
        """Return the engines homed at Dbuf ``d``."""
        return list(self._engines_by_dbuf.get(d, ()))

    @cached_property
    def _engines_by_dbuf(self):
        """Return ``{Dbuf index: (engines homed there, in engine order)}``."""
        out = {}
        for e, (_, d) in enumerate(self.homes):
            out.setdefault(d, []).append(e)
        return {d: tuple(es) for d, es in out.items()}

    def pass_base(self, d, p):
        """Return the global address of pass ``p``'s half (or whole) of Dbuf ``d``."""
        return self.params.dbuf_base(d) + self.pass_ctx_base(p) * ENTRY_BYTES

    def data_region(self, d, p):
        """Return ``(lo, hi)``: the global byte addresses of pass ``p``'s data in Dbuf ``d``,
        after the descriptor tables of the engines homed there (double-buffered: in the
        half of the Dbuf of pass ``p``'s parity, which begins with its own copy of the
        tables)."""
        base = self.pass_base(d, p)
        return (base + len(self.engines_at(d)) * self.entries * ENTRY_BYTES,
                base + self.region_bytes)

    @property
    def item_bound(self):
        """Return the largest number of bytes one item's weights can take (all ``kb x Cw``
        stored), 8-aligned."""
        return align(self.graph.item_bytes(self.engine, self.kb * self.Cw), 8)

    @property
    def input_bytes(self):
        """Return the bytes of one input block (``gb`` groups of ``Cw`` tokens)."""
        return self.gb * self.Cw * 8

    @property
    def output_bytes(self):
        """Return the bytes of one item's output block."""
        return self.kb * self.gb * 8

    @property
    def output_stride(self):
        """Return the tokens from one lane group's outputs to the next one's in an output
        block: ``kb`` (the block's own, group-major), or ``out_stride`` when the outputs go
        straight into a layout of the next layer's inputs (:mod:`sw.compiler.chain`)."""
        return self.engine.output_stride

    @property
    def output_span(self):
        """Return the bytes from an output block's first token to past its last one."""
        return ((self.gb - 1) * self.output_stride + self.kb) * 8

    def describe(self):
        """Return a JSON-friendly summary."""
        return dict(mode=self.mode, K=self.K, C=self.C, N=self.N, kb=self.kb, gb=self.gb,
                    groups=self.groups, Cw=self.Cw, items=self.items, engines=self.engines,
                    contexts=self.contexts, passes=self.passes, feedback=self.feedback,
                    wfan=self.wfan, fan_pipe0=self.fan_pipe0, double_buffer=self.double_buffer,
                    sparse_graph=self.sparse_graph,
                    rows_balanced=bool(self.row_order), bias=self.bias is not None,
                    relu=self.relu, split=self.split, chunks=self.chunks)
