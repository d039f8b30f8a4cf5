"""Tests of the mapper (:mod:`sw.compiler.place`): pinned groups, spreading, locality, slot budgets,
determinism and the per-PE report."""

import pytest

from sw.compiler.dfg import Graph
from sw.compiler.graphs import build_graph
from sw.compiler.place import place
from sw.compiler.planner import plan_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op

P2 = ArrayParams(rows=2, cols=2, slots=8, operand_depth=4, int_issue=1)


def groups_graph(n_groups, size, pin=None):
    g = Graph()
    for k in range(n_groups):
        c = g.add(Op.CTX, group=k, pe=pin)
        prev = c
        for _ in range(size - 1):
            m = g.add(Op.MOV, group=k)
            g.connect(prev, m, 0)
            prev = m
    return g


def test_groups_stay_together_and_spread():
    p = place(groups_graph(4, 5), P2)
    pes = {}
    for node in range(20):
        pes.setdefault(node // 5, set()).add(p.pe_of(node))
    assert all(len(v) == 1 for v in pes.values())
    assert len({next(iter(v)) for v in pes.values()}) == 4     # one group per PE
    assert sorted(p.counts().values()) == [5, 5, 5, 5]
    slots = [p.where[n][2] for n in range(5)]
    assert slots == [0, 1, 2, 3, 4]


def test_neighbours_pull_ungrouped_nodes_close():
    g = Graph()
    a = g.add(Op.CTX, pe=(1, 1), group="a")
    b = g.add(Op.MOV)
    g.connect(a, b, 0)
    p = place(g, ArrayParams(rows=4, cols=4, slots=4, operand_depth=4, int_issue=1))
    assert p.pe_of(b) == (1, 1)


def test_pins_and_errors():
    p = place(groups_graph(1, 3, pin=(1, 0)), P2)
    assert p.pe_of(0) == (1, 0)
    with pytest.raises(FdpuError, match="not a PE of the 2x2 array"):
        place(groups_graph(1, 3, pin=(5, 0)), P2)
    with pytest.raises(FdpuError, match="needs 9 slots but PE"):
        place(groups_graph(1, 9, pin=(0, 0)), P2)
    with pytest.raises(FdpuError, match="needs 9 slots; no PE"):
        place(groups_graph(1, 9), P2)
    with pytest.raises(FdpuError, match="has 40 instructions; the 2x2 array has 32 slots"):
        place(groups_graph(8, 5), P2)


def test_fc_placement_is_deterministic_and_reported():
    params = ArrayParams(rows=2, cols=3, slots=64, operand_depth=4, int_issue=1)
    plan = plan_fc(12, 64, 8, "sparse", params)
    a = place(build_graph(plan), params)
    b = place(build_graph(plan), params)
    assert a.where == b.where
    counts = a.counts()
    assert max(counts.values()) <= params.slots
    assert sum(counts.values()) == len(build_graph(plan).nodes)
    text = a.report()
    assert text.startswith("instructions per PE (2 x 3") and len(text.splitlines()) == 3
    for pe, d in plan.homes:
        assert counts[pe] > 0
