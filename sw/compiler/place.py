"""The mapper: place every node of a graph on a PE and an instruction slot.

Contract
--------
:func:`place` returns a :class:`Placement` (``node id -> (x, y, slot)``) or raises
:class:`~sw.spec.errors.FdpuError` when the graph does not fit.  It is deterministic (no random
choice, no dict-order dependence beyond insertion order).

* Nodes of one placement group (``Node.group``) go to one PE: the rate rule of
  :mod:`sw.compiler.dfg` needs every edge above one token per context to be PE-local, and keeping an
  accumulation chain on one PE keeps its tokens off the mesh.  Nodes without a group are
  groups of their own.
* A group whose nodes name a PE (``Node.pe``) is pinned there (the FC builder pins each engine
  next to its home Dbuf).  The others are placed in order of their first node, each on the PE
  of least cost that has enough free slots: cost = ``2 * hops`` to the PEs of already-placed
  neighbours + the PE's slot load (spreading load), ties broken by row then column.
* Within a PE, slots are given in node-id order from slot 0.
"""

from dataclasses import dataclass

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError

__all__ = ["Placement", "place"]


@dataclass
class Placement:
    """Where each node went: ``where[node id] = (x, y, slot)``."""
    params: ArrayParams
    where: dict

    def pe_of(self, nid):
        """Return the PE ``(x, y)`` of node ``nid``."""
        x, y, _ = self.where[nid]
        return (x, y)

    def counts(self):
        """Return ``{(x, y): instructions placed there}`` for every PE (0 for empty ones)."""
        c = {pe: 0 for pe in self.params.pe_coords()}
        for x, y, _ in self.where.values():
            c[(x, y)] += 1
        return c

    def report(self):
        """Return a text grid of per-PE instruction counts (north row first)."""
        c = self.counts()
        lines = [f"instructions per PE ({self.params.rows} x {self.params.cols}, "
                 f"{self.params.slots} slots each):"]
        for y in range(self.params.rows):
            lines.append(" ".join(f"{c[(x, y)]:3d}" for x in range(self.params.cols)))
        return "\n".join(lines)


def _hops(a, b):
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def place(graph, params):
    """Return the :class:`Placement` of ``graph`` on ``params``' array (see the module doc)."""
    groups = {}
    for node in graph.nodes:
        key = ("g", node.group) if node.group is not None else ("n", node.id)
        groups.setdefault(key, []).append(node.id)
    free = {pe: params.slots for pe in params.pe_coords()}
    pe_of = {}
    total = len(graph.nodes)
    capacity = params.slots * params.num_pes
    if total > capacity:
        raise FdpuError(f"graph {graph.name!r} has {total} instructions; the "
                        f"{params.rows}x{params.cols} array has {capacity} slots "
                        f"({params.slots} per PE)")
    neighbours = {n.id: set() for n in graph.nodes}
    for e in graph.edges:
        neighbours[e.src].add(e.dst)
        neighbours[e.dst].add(e.src)
    pinned = [(k, m) for k, m in groups.items() if any(graph.nodes[i].pe for i in m)]
    others = [(k, m) for k, m in groups.items() if not any(graph.nodes[i].pe for i in m)]
    for key, members in pinned:
        pins = {graph.nodes[i].pe for i in members if graph.nodes[i].pe}
        if len(pins) != 1:
            raise FdpuError(f"placement group {key[1]!r} is pinned to several PEs: {pins}")
        pe = tuple(pins.pop())
        if pe not in free:
            raise FdpuError(f"placement group {key[1]!r} is pinned to {pe}, which is not a PE "
                            f"of the {params.rows}x{params.cols} array")
        _take(free, pe, members, key, params)
        for i in members:
            pe_of[i] = pe
    for key, members in others:
        need = len(members)
        near = {pe_of[j] for i in members for j in neighbours[i] if j in pe_of}
        best = None
        for pe in params.pe_coords():
            if free[pe] < need:
                continue
            cost = (2 * sum(_hops(pe, q) for q in near) + params.slots - free[pe],
                    pe[1], pe[0])
            if best is None or cost < best[0]:
                best = (cost, pe)
        if best is None:
            raise FdpuError(f"placement group {key[1]!r} needs {need} slots; no PE of the "
                            f"{params.rows}x{params.cols} array has that many free "
                            f"({params.slots} per PE)")
        _take(free, best[1], members, key, params)
        for i in members:
            pe_of[i] = best[1]
    where, next_slot = {}, {}
    for node in graph.nodes:
        pe = pe_of[node.id]
        s = next_slot.get(pe, 0)
        next_slot[pe] = s + 1
        where[node.id] = (pe[0], pe[1], s)
    return Placement(params, where)


def _take(free, pe, members, key, params):
    if free[pe] < len(members):
        raise FdpuError(f"placement group {key[1]!r} needs {len(members)} slots but PE {pe} "
                        f"has {free[pe]} free of {params.slots}")
    free[pe] -= len(members)
