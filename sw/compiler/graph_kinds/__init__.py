"""The registry of FC engine graph kinds: one instance of each, by name.

Contract (:mod:`sw.compiler.graph_kinds.base` has what a kind says)
-------------------------------------------------------------------
:data:`GRAPHS` maps every kind's name to its instance, in the order the paper's evaluation
lists them; :func:`graph_kind` is the kind a ``mode`` (``dense`` or ``sparse``) and, sparse,
a ``sparse_graph`` name (default :data:`DEFAULT_SPARSE_GRAPH`) name.  A new graph is one file
in this package (a class derived from :class:`~sw.compiler.graph_kinds.base.GraphKind` or one
of its sparse bases) and one line below.
"""

from sw.compiler.graph_kinds.base import WFANS, EngineSpec, GraphKind, align
from sw.compiler.graph_kinds.dense import Dense
from sw.compiler.graph_kinds.gather import Gather
from sw.compiler.graph_kinds.reuse import Reuse
from sw.compiler.graph_kinds.skip import Skip
from sw.compiler.graph_kinds.switch import Switch
from sw.spec.errors import FdpuError

__all__ = ["GRAPHS", "MODES", "SPARSE_GRAPHS", "DEFAULT_SPARSE_GRAPH", "WFANS", "EngineSpec",
           "GraphKind", "graph_kind", "may_skip_zeros", "align"]

#: Every graph kind by name.
GRAPHS = {kind.name: kind for kind in (
    Dense(),
    Switch(),
    Gather(),
    Skip(),
    Reuse(),
)}

#: The weight formats a user names (``--mode``).
MODES = tuple(dict.fromkeys(kind.mode for kind in GRAPHS.values()))
#: The sparse graphs by name (``--sparse-graph``).
SPARSE_GRAPHS = tuple(name for name, kind in GRAPHS.items() if kind.sparse)
#: The sparse graph of a plan when none is named: ``gather``, the faster of the FD-CSR graphs
#: on the RTL with the same bits (alexnet-fc8 batch 64 on the 8 x 8: 97.7 % of peak against
#: the SWITCH graph's 88.3 %, dense 98.1 %; docs/dataflow.md, "Which sparse graph is the
#: default").  ``switch`` reproduces the paper's graph and its order hazard
#: (``feedback=False``); ``skip`` is chosen when a layer's stored weights make it faster
#: (:func:`sw.compiler.planner.plan_fc`); ``reuse`` runs only when named.
DEFAULT_SPARSE_GRAPH = "gather"


def graph_kind(mode, sparse_graph=None):
    """Return the :class:`GraphKind` of ``mode`` and, sparse, ``sparse_graph`` (``None``:
    :data:`DEFAULT_SPARSE_GRAPH`; a dense mode ignores it)."""
    if mode not in MODES:
        raise FdpuError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    kinds = [kind for kind in GRAPHS.values() if kind.mode == mode]
    if len(kinds) == 1:
        return kinds[0]
    name = DEFAULT_SPARSE_GRAPH if sparse_graph is None else sparse_graph
    if name not in SPARSE_GRAPHS:
        raise FdpuError(f"sparse_graph must be one of {', '.join(SPARSE_GRAPHS)}, "
                        f"got {name!r}")
    return GRAPHS[name]


def may_skip_zeros(mode, sparse_graph=None):
    """Return whether a plan of ``mode`` and ``sparse_graph`` (``None``: the planner's choice)
    may run a graph that skips zero weights (whose rows the planner then balances)."""
    return any(kind.skips_zeros for kind in GRAPHS.values()
               if kind.mode == mode and sparse_graph in (None, kind.name))
