"""What the FC planner plans: a layer (:class:`FcLayer`) and the options it is planned with
(:class:`PlanOptions`), each checked on construction.

Contract (``docs/mapping.md`` has how a plan is chosen)
-------------------------------------------------------
:class:`FcLayer` is a ``K x C`` layer at batch ``N``: its binary16 weights when they are
known (they give each row's stored weights, ``row_nnz``, which sets the ``skip`` graph's
work and balances its rows), or its shape and, optionally, its density or ``row_nnz``; a
per-output ``bias`` (rounded to binary16, kept as bit patterns) and ``relu``.
:class:`PlanOptions` are the choices a user may fix (the weight format ``mode``, the sparse
graph, the blocking, the contexts per pass, the SWITCH graph's feedback, the ``pipe0`` hint,
double buffering, the split of the reduction); every ``None`` is the planner's to choose.
Both refuse a bad value with one :class:`~sw.spec.errors.FdpuError` naming it, before any
planning; :func:`sw.compiler.planner.plan_fc` checks what depends on both and on the array.
"""

from dataclasses import dataclass

import numpy as np

from sw.compiler.graph_kinds import GRAPHS, MODES, SPARSE_GRAPHS, WFANS, graph_kind
from sw.spec.errors import FdpuError

__all__ = ["FcLayer", "PlanOptions"]


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise FdpuError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _bias_bits(bias, K):
    """Return ``bias`` (``K`` finite real values, or ``None``) as a tuple of binary16 bit
    patterns, rounded to nearest even, or ``None``."""
    if bias is None:
        return None
    arr = np.asarray(bias)
    if arr.shape != (K,) or arr.dtype.kind not in "iuf":
        raise FdpuError(f"bias must be {K} real values (one per output), got shape {arr.shape} "
                        f"of {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        half = arr.astype(np.float16)
    if not np.isfinite(half).all():
        raise FdpuError("bias values must be finite and within the binary16 range "
                        "(|b| <= 65504)")
    return tuple(int(v) for v in half.view(np.uint16))


@dataclass(frozen=True, eq=False)
class FcLayer:
    """A ``K x C`` FC layer at batch ``N`` (module doc).

    ``row_nnz``: the stored (non-zero) weights of each row, ``K`` integers in ``0..C``
    (derived from ``weights`` by :meth:`of`); ``density``: the fraction of weights stored
    when only the shape is known (the blocking chooser's estimate of the ``skip`` graph's
    work); ``bias``: ``K`` real values (kept as binary16 bit patterns); ``relu``.
    """
    K: int
    C: int
    N: int
    row_nnz: tuple = None
    density: float = None
    bias: tuple = None
    relu: bool = False
    weights: np.ndarray = None

    def __post_init__(self):
        for name, attr in (("out_features K", "K"), ("in_features C", "C"), ("batch", "N")):
            object.__setattr__(self, attr, _positive(getattr(self, attr), name))
        K, C = self.K, self.C
        if self.row_nnz is not None:
            nnz = np.asarray(self.row_nnz)
            if nnz.shape != (K,) or nnz.dtype.kind not in "iu" or (nnz < 0).any() \
                    or (nnz > C).any():
                raise FdpuError(f"row_nnz must be {K} integers in 0..{C} (one per weight "
                                f"row), got shape {nnz.shape} of {nnz.dtype}")
            object.__setattr__(self, "row_nnz", tuple(int(v) for v in nnz))
        if self.density is not None and (isinstance(self.density, bool) or not isinstance(
                self.density, (int, float, np.floating)) or not 0 <= self.density <= 1):
            raise FdpuError(f"density must be a fraction in 0..1, got {self.density!r}")
        if not isinstance(self.relu, bool):
            raise FdpuError(f"relu must be True or False, got {self.relu!r}")
        object.__setattr__(self, "bias", _bias_bits(self.bias, K))

    @classmethod
    def of(cls, weights, batch, bias=None, relu=False):
        """Return the layer of the ``K x C`` ``weights`` (as binary16) at ``batch``."""
        w = np.asarray(weights, dtype=np.float16)
        if w.ndim != 2:
            raise FdpuError(f"weights must be a K x C matrix, got shape {w.shape}")
        nnz = np.count_nonzero(w.view(np.uint16), axis=1)
        return cls(w.shape[0], w.shape[1], batch, row_nnz=nnz, bias=bias, relu=relu,
                   weights=w)

    @property
    def bias_values(self):
        """Return the bias as binary16 values (``None`` without one)."""
        return None if self.bias is None else \
            np.array(self.bias, dtype=np.uint16).view(np.float16)

    @property
    def stored_density(self):
        """Return the fraction of weights stored (at least one a row, as the ``skip`` graph
        stores them) from ``row_nnz``, else ``density`` (``None`` when neither is known)."""
        if self.row_nnz is not None:
            return float(np.maximum(1, self.row_nnz).sum()) / (self.K * self.C)
        return None if self.density is None else float(self.density)


@dataclass(frozen=True)
class PlanOptions:
    """How to plan a layer (module doc); ``None`` leaves a choice to the planner.

    ``mode``: ``dense`` or ``sparse``; ``sparse_graph``: a sparse graph's name
    (:data:`~sw.compiler.graph_kinds.SPARSE_GRAPHS`; ``None``: the default, or the ``skip``
    graph where the layer's stored weights make it faster); ``kb``, ``gb``, ``wfan``: the
    blocking; ``contexts``: per pass; ``feedback``: the SWITCH graph's feedback edges
    (``False``: the order-hazard demonstration); ``fan_pipe0``: the ``pipe0`` hint on wfan-16
    MOV trees; ``double_buffer``: ``None`` turns it on when the layer takes several passes and
    an item fits half a Dbuf; ``split``: column slices of a split reduction
    (:mod:`sw.compiler.split`); ``chunks``: contexts per work item (a *streamed* plan, each
    context ``Cw / chunks`` columns of it, so that it starts when its share of the weights is
    in: docs/dataflow.md; ``None``: 1 to the planner, the performance model's choice to
    :func:`sw.models.choose.best_run`).  ``kb``, ``gb`` and ``contexts`` are checked against the
    layer by the planner (their ranges depend on it).
    """
    mode: str = "sparse"
    sparse_graph: str = None
    kb: int = None
    gb: int = None
    wfan: int = None
    contexts: int = None
    feedback: bool = True
    fan_pipe0: bool = False
    double_buffer: bool = None
    split: int = 1
    chunks: int = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise FdpuError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.sparse_graph is not None and self.sparse_graph not in SPARSE_GRAPHS:
            raise FdpuError(f"sparse_graph must be one of {', '.join(SPARSE_GRAPHS)}, "
                            f"got {self.sparse_graph!r}")
        # wfan is a choice of the modes whose graphs' value loads fan out to more than 4.
        fanning = sorted({k.mode for k in GRAPHS.values() if len(k.fanouts(WFANS[-1])) > 1})
        if self.wfan is not None and (self.wfan not in WFANS or self.mode not in fanning):
            raise FdpuError(f"wfan (lane groups per value load) is one of "
                            f"{', '.join(map(str, WFANS))} in mode "
                            f"{' or '.join(map(repr, fanning))}, got {self.wfan!r} in mode "
                            f"{self.mode!r}")
        for name in ("feedback", "fan_pipe0"):
            if not isinstance(getattr(self, name), bool):
                raise FdpuError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.double_buffer is not None and not isinstance(self.double_buffer, bool):
            raise FdpuError(f"double_buffer must be True, False or None (automatic), got "
                            f"{self.double_buffer!r}")
        if isinstance(self.split, bool) or not isinstance(self.split, (int, np.integer)) \
                or self.split < 1:
            raise FdpuError(f"split must be a positive integer (column slices), got "
                            f"{self.split!r}")
        object.__setattr__(self, "split", int(self.split))
        if self.chunks is not None:
            if isinstance(self.chunks, bool) or not isinstance(self.chunks, (int, np.integer)) \
                    or self.chunks < 1:
                raise FdpuError(f"chunks must be a positive integer (contexts per work item), "
                                f"got {self.chunks!r}")
            object.__setattr__(self, "chunks", int(self.chunks))

    @property
    def named_graph(self):
        """Return the graph kind named (``mode`` and ``sparse_graph``; the default sparse graph
        when none is named)."""
        return graph_kind(self.mode, self.sparse_graph)
