"""What an FC engine graph is: the contract every graph kind keeps, and one engine as a value.

Contract (``docs/dataflow.md`` has the graphs, ``docs/architecture.md`` the plan of the tree)
---------------------------------------------------------------------------------------------
A *graph kind* is one way an engine turns a work item's weights into FACC operands: ``dense``
reads the weight block column by column, ``switch`` and ``gather`` decode FD-CSR and feed
``+0.0`` for every weight it does not store, ``skip`` steps over the stored weights only.  Each
kind is one class derived from :class:`GraphKind` (one file in this package) and one
instance in the registry (:data:`sw.compiler.graph_kinds.GRAPHS`); the planner, the image
builder, the golden model, the blocking chooser and the performance model ask the kind, never
its name.  What a kind says:

* **format**: ``mode`` (the weight format the user names: ``dense`` or ``sparse``, FD-CSR or
  its bitmask), ``column_unit`` (an item's width is a multiple of it), ``fanouts`` (the
  ``wfan`` values its value loads may take), ``title`` (a figure's legend), whether its work
  scales with the stored weights (``skips_zeros``: :meth:`stored`, :meth:`stored_count`,
  :meth:`steps`) and whether it has feedback edges (``has_feedback``: ``feedback=False`` is
  its option), whether the planner may pick it unnamed (``auto``) and the most rows an item
  may hold (``max_kb``);
* **item data**: :meth:`item_bytes` for ``nnz`` stored weights (the largest,
  ``kb x Cw`` stored, sizes the Dbuf plan), :meth:`encode` and :meth:`item_data` (the bytes a
  Dbuf holds; ``docs/dataflow.md``, "Item data");
* **engine**: :meth:`add_streams` adds the weight and input streams that feed the engine's
  FACCs (the descriptor loads, FACCs, epilogue and stores are every kind's:
  :func:`sw.compiler.graphs.build_engine`), :meth:`facc_count` the FACCs' count;
* **golden model**: :meth:`golden_events` (the data-dependent counters a run reports);
* **costs**: :meth:`chooser_terms` (the blocking chooser's terms beside the pipes and the
  Dbuf, :mod:`sw.compiler.blocking`), :meth:`model_terms`, :meth:`held` and
  :meth:`shared_by` (the performance model's, :mod:`sw.models.perf`), :meth:`min_weight_bytes`
  and :meth:`useful_weights` (the figures).

:class:`EngineSpec` is one engine: its kind, blocking (``kb x gb`` over ``Cw`` columns),
fan-out (``wfan``, ``fan_pipe0``), ``feedback`` and epilogue (``bias``, ``relu``), and where
its outputs go (``out_stride``), frozen: what :func:`sw.compiler.graphs.build_engine` builds
and :func:`sw.compiler.blocking.engine_issues` counts.
"""

from dataclasses import dataclass

import numpy as np

from sw.spec.arch import ArrayParams

__all__ = ["GraphKind", "EngineSpec", "WFANS", "align", "chunks"]

#: Lane groups one sparse value load feeds: ``4`` (one load per 4 lane groups, naming its
#: FACCs directly) or ``16`` (one load per weight row and a MOV tree on the INT pipe: fewer
#: Dbuf accesses, more INT issues).  The blocking chooser picks one per plan
#: (``FcPlan.wfan``, docs/mapping.md).
WFANS = (4, 16)


def align(n, a):
    """Return ``n`` rounded up to a multiple of ``a``."""
    return -(-n // a) * a


def chunks(gb, k=ArrayParams.MAX_DESTS):
    """Return the lane groups ``0 .. gb-1`` in runs of at most ``k``."""
    return [range(q, min(gb, q + k)) for q in range(0, gb, k)]


@dataclass(frozen=True)
class EngineSpec:
    """One engine: ``kb`` weight rows times ``gb`` lane groups over ``Cw`` columns on graph
    ``graph`` (a :class:`GraphKind`), ``wfan`` lane groups per value load (sparse),
    ``fan_pipe0`` (the pipe-0 hint on a value load's MOV tree), ``feedback`` (the SWITCH
    graph's feedback edges), the epilogue (``bias``: a bias per output; ``relu``) and
    ``out_stride`` (tokens between a lane group's outputs and the next one's; 0: ``kb``) and
    ``chunks`` (contexts per item, a streamed engine: each context steps over ``Cw / chunks``
    columns and stores its partial sums, the last context's being the outputs)."""
    graph: "GraphKind"
    kb: int
    gb: int
    Cw: int
    wfan: int = WFANS[0]
    feedback: bool = True
    fan_pipe0: bool = False
    bias: bool = False
    relu: bool = False
    out_stride: int = 0
    chunks: int = 1

    @property
    def columns(self):
        """Return the columns one context steps over: ``Cw``, or a streamed engine's
        ``Cw / chunks`` (a power of two: the FACCs' span, :func:`sw.spec.isa.facc_imm`)."""
        return self.Cw // self.chunks

    @property
    def span(self):
        """Return the FACCs' span: 0, or with ``chunks > 1`` ``log2`` of :attr:`columns`
        (each context's partial sum leaves, the sum goes on over the item's contexts)."""
        return 0 if self.chunks == 1 else self.columns.bit_length() - 1

    @property
    def output_stride(self):
        """Return the tokens from one lane group's outputs to the next one's."""
        return self.out_stride or self.kb

    @property
    def epilogue(self):
        """Return whether a bias add or a ReLU follows each output's FACC."""
        return self.bias or self.relu


class GraphKind:
    """The contract of a graph kind (module doc); the defaults are the dense graph's."""
    #: The kind's name (the ``sparse_graph`` option of a sparse kind; ``dense``).
    name = ""
    #: How a figure's legend names it.
    title = ""
    #: The weight format the user names: ``dense`` or ``sparse``.
    mode = "dense"
    #: The columns an item's width is a multiple of.
    column_unit = 1
    #: Whether the FACCs step over the stored weights only (the work depends on the data).
    skips_zeros = False
    #: Whether the graph has feedback edges (``feedback=False`` drops them).
    has_feedback = False
    #: Whether an item's work and its counted events (instructions, Dbuf accesses) do not
    #: depend on its weights' values, so that a dummy item may read any item's data (its
    #: output is discarded) instead of a zero block of its own.
    dummy_reads_any = True
    #: Whether the planner may pick the kind for a plan that names no graph (and ``fdpu
    #: paper`` evaluates it); a kind without it runs only when named.
    auto = True
    #: The most weight rows an item may hold (``None``: any).
    max_kb = None
    #: Whether an item may stream over several contexts (``EngineSpec.chunks``): its
    #: streams step over a context's ``columns`` in column order, so one accumulation runs on
    #: over the item's contexts (a FACC span, :func:`sw.spec.isa.facc_imm`, or a count
    #: token's continue bit, :data:`sw.spec.isa.TOKEN_CONTINUE_AT`).
    streams = False

    @property
    def sparse(self):
        """Return whether the weights are stored compressed (FD-CSR or its bitmask)."""
        return self.mode == "sparse"

    @property
    def label(self):
        """Return the kind as reports name it: ``dense``, or ``sparse/NAME``."""
        return self.name if self.name == self.mode else f"{self.mode}/{self.name}"

    def __repr__(self):
        return f"<graph {self.name}>"

    def fanouts(self, gb):
        """Return the ``wfan`` values a ``gb``-group engine's value loads may take."""
        return WFANS[:1]

    # -- work --------------------------------------------------------------------------

    def stored(self, Cw, blk, chunks=1):
        """Return the ``kb x Cw`` map of the weights the FACCs step over in the float16 block
        ``blk`` of an item streamed over ``chunks`` contexts (``None``: all ``Cw`` of every
        row)."""
        return None

    def stored_count(self, nnz, chunks=1):
        """Return the weights an item row of ``nnz`` non-zero weights stores (array-wise; an
        estimate where the exact count depends on where they lie: :meth:`row_steps`)."""
        return nnz

    def steps(self, Cw, nnz, chunks=1):
        """Return the FACC steps of a row of ``nnz`` non-zero weights (array-wise; an
        estimate where the exact count depends on where they lie: :meth:`row_steps`)."""
        return np.full(np.shape(nnz), Cw, dtype=np.int64)

    def row_steps(self, Cw, rows, chunks=1):
        """Return the exact FACC steps of each row of the float16 ``rows`` (``n x C``, ``C
        <= Cw``) in an item streamed over ``chunks`` contexts."""
        nz = np.count_nonzero(np.asarray(rows, dtype=np.float16).view(np.uint16), axis=1)
        return self.steps(Cw, nz, chunks)

    def stream_columns(self, Cw):
        """Return the columns one context of a streamed item may step over, for items of
        ``Cw`` columns (two contexts or more): powers of two, the FACC span's mask."""
        return [1 << s for s in range(1, (Cw - 1).bit_length()) if Cw % (1 << s) == 0]

    # -- item data ---------------------------------------------------------------------

    def item_bytes(self, spec, nnz):
        """Return the bytes of an item's data with ``nnz`` stored weights."""
        return spec.kb * spec.Cw * 2

    def chunk_bytes(self, spec):
        """Return the bytes from one context's share of a streamed item's data to the next
        one's (0 for an item of one context): ``kb x columns`` binary16."""
        return 0 if spec.chunks == 1 else 2 * spec.kb * spec.columns

    def piece_bytes(self, spec, nnz, enc=None):
        """Return the bytes the DMA loads of each context's share of a streamed item of
        ``nnz`` stored weights (``enc``: its :meth:`encode`, for the exact figure), or
        ``None``: each share whole (:func:`sw.compiler.dbuf_layout.data_pieces`)."""
        return None

    def encode(self, spec, blk):
        """Return ``(encoding, data bytes)`` of the item whose weight block is ``blk``."""
        return None, blk.size * 2

    def item_data(self, spec, blk, enc, nbytes, base):
        """Return the item's data as stored at global address ``base`` (``nbytes`` long)."""
        return np.ascontiguousarray(blk.T).view(np.uint8).tobytes()

    # -- engine ------------------------------------------------------------------------

    def facc_count(self, spec):
        """Return the FACCs' immediate count (0: the count comes as operand 2)."""
        return spec.Cw

    def add_streams(self, g, spec, add, ld_b, ld_x, facc):
        """Add the streams that feed ``facc[k][j]`` operands 0 (weight) and 1 (input) from
        the item base ``ld_b`` and the input base ``ld_x`` (``add`` names a node of the
        engine: ``add(role, op, nsrc, imm, end, row, lane)``)."""
        raise NotImplementedError

    def golden_events(self, plan, graph, placement, w16):
        """Return the golden model's data-dependent counts ``(switch_true, accesses,
        emitted)``, each ``{(pe, slot): firings}`` (:func:`sw.models.golden_counters
        .program_counters`)."""
        return {}, {}, {}

    # -- costs -------------------------------------------------------------------------

    def chooser_terms(self, pipes, scale, Cw, per_dbuf, mem, links):
        """Return the blocking chooser's terms beside the pipes and the Dbuf (cycles per
        context over ``Cw`` columns): ``pipes`` the INT pipes' issues over the chooser's
        columns (``scale`` times fewer), ``mem`` the loads, ``links()`` the busiest link's
        engines."""
        return {}

    def model_terms(self, spec, k, depth):
        """Return the performance model's extra per-context terms (cycles) with constants
        ``k`` at operand depth ``depth``."""
        return {}

    def held(self, k, spec, depth, sharers):
        """Return the factor on the loads' share of the pipes, Dbufs and links (a full operand
        queue holding a load back): per engine of ``spec`` (``sharers``: the engines sharing
        each one's home Dbuf), with the model's constants ``k`` at ``operand_depth`` tokens."""
        return 1.0

    def shared_by(self, spec):
        """Return the FACCs that share one token of the slowest operand stream."""
        return spec.kb

    def row_round_trip(self, k):
        """Return the cycles of a weight row's load round trip in the performance model with
        constants ``k`` where each row of an engine streams its own loads (the row then takes
        at least its steps past ``k.ramp`` x this / the operand depth), else ``None``."""
        return None

    def min_weight_bytes(self, dense_weights, nnz):
        """Return the bytes of the weights at the least: 2 B each (dense)."""
        return 2 * dense_weights

    def useful_weights(self, dense_weights, nnz):
        """Return the weights whose FMAs count as useful work."""
        return dense_weights
