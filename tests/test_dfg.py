"""Tests of the dataflow-graph IR (:mod:`sw.compiler.dfg`): every validation error, rates, the rate
rule, MOV fan-out trees and DOT export."""

import pytest

from sw.compiler.dfg import DfgError, Graph
from sw.compiler.fc_plan import FcPlan
from sw.compiler.graph_kinds import graph_kind
from sw.compiler.graphs import build_engine
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op, loop_imm


def chain():
    g = Graph("t")
    c = g.add(Op.CTX, group=0)
    a = g.add(Op.ADD, 1, imm=3, group=0)
    s = g.add(Op.STW, imm=0, end=True, group=0)
    g.connect(c, a, 0)
    g.connect(a, s, 0)
    g.connect(c, s, 1)
    return g, c, a, s


def switch_graph(feedback=True):
    """CTX -> SWITCH(ctx, ctx) -> (MOV | IMM) -> join MOV -> STW [end]."""
    g = Graph("sw")
    c = g.add(Op.CTX, group=0)
    sw = g.add(Op.SWITCH, 3 if feedback else 2, group=0)
    t = g.add(Op.MOV, group=0)
    f = g.add(Op.IMM, imm=7, group=0)
    j = g.add(Op.MOV, group=0, name="join")
    s = g.add(Op.STW, end=True, group=0)
    g.fanout(c, [(sw, 0), (sw, 1), (s, 0)])
    g.connect(sw, t, 0, branch=True)
    g.connect(sw, f, 0, branch=False)
    g.connect(t, j, 0)
    g.connect(f, j, 0)
    g.connect(j, s, 1)
    if feedback:
        g.connect(j, sw, 2, init=1)
    return g


def test_valid_graphs_pass():
    chain()[0].validate()
    switch_graph().validate()


def test_wrong_arity():
    g, c, a, s = chain()
    g.nodes[a].nsrc = 3
    with pytest.raises(DfgError, match="ADD takes 1..2 operands, not 3"):
        g.validate()


def test_dangling_edge_and_operand():
    g, c, a, s = chain()
    g.connect(a, 99, 0)
    with pytest.raises(DfgError, match="dangling edge"):
        g.validate()
    g, c, a, s = chain()
    g.add(Op.MOV, group=0, name="lonely")
    with pytest.raises(DfgError, match="lonely: token operand 0 has no producer"):
        g.validate()
    g, c, a, s = chain()
    g.connect(c, a, 1)
    with pytest.raises(DfgError, match="operand 1 is not a token operand"):
        g.validate()


def test_edge_into_ctx():
    g, c, a, s = chain()
    g.connect(a, c, 0)
    with pytest.raises(DfgError, match="MicC delivers"):
        g.validate()


def test_too_many_destinations_and_fanout_tree():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    sinks = [g.add(Op.MOV, end=True, group=0) for _ in range(6)]
    for s in sinks:
        g.connect(c, s, 0)
    with pytest.raises(DfgError, match="6 destinations, at most 4"):
        g.validate()
    g = Graph()
    c = g.add(Op.CTX, group=0)
    sinks = [g.add(Op.MOV, group=0) for _ in range(11)]
    movs = g.fanout(c, [(s, 0) for s in sinks])
    assert len(movs) == 3
    out = g.out_edges()
    assert all(len(v) <= 4 for v in out.values())
    reached = {e.dst for e in g.edges}
    assert set(sinks) <= reached


def test_cycle_without_initial_token():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    a = g.add(Op.ADD, group=0, name="a")
    b = g.add(Op.MOV, group=0, name="b")
    g.connect(c, a, 0)
    g.connect(a, b, 0)
    g.connect(b, a, 1)
    with pytest.raises(DfgError, match="cycle with no initial token: a -> b -> a"):
        g.validate()


def test_join_without_feedback():
    with pytest.raises(DfgError, match="rejoin at join operand 0 without a feedback edge"):
        switch_graph(feedback=False).validate()


def test_two_producers_that_are_not_a_switch():
    g, c, a, s = chain()
    g.connect(c, a, 0)
    with pytest.raises(DfgError, match="only the two branches of one SWITCH"):
        g.validate()


def test_switch_edges_need_branch():
    g = switch_graph()
    g.edges = [e if e.branch is None else type(e)(e.src, e.dst, e.operand) for e in g.edges]
    with pytest.raises(DfgError, match="branch"):
        g.validate()


def test_too_many_initial_tokens():
    g = switch_graph()
    g.edges[-1] = type(g.edges[-1])(g.edges[-1].src, g.edges[-1].dst, 2, init=5)
    with pytest.raises(DfgError, match="exceed operand_depth"):
        g.validate(ArrayParams(operand_depth=4, slots=64, int_issue=1))


def test_rates_and_rate_rule():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(10, 1), group=0)
    acc = g.add(Op.FACC, imm=10, group=0)
    st = g.add(Op.STD, end=True, group=0)
    g.connect(c, it, 0)
    g.fanout(it, [(acc, 0), (acc, 1)])
    g.connect(acc, st, 1)
    g.connect(c, st, 0)
    g.validate()
    r = g.rates()
    assert (r[c], r[it], r[acc], r[st]) == (1, 1, 10, 1)
    g.nodes[acc].group = 1
    with pytest.raises(DfgError, match="rate rule"):
        g.validate()


def test_rate_mismatch_and_end_rate():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), group=0)
    a = g.add(Op.ADD, group=0, name="a")
    g.connect(c, it, 0)
    g.connect(it, a, 0)
    g.connect(c, a, 1)
    with pytest.raises(DfgError, match="a: its operands arrive at different rates"):
        g.validate()
    g = Graph()
    c = g.add(Op.CTX, group=0)
    it = g.add(Op.ITER, imm=loop_imm(4, 1), group=0)
    s = g.add(Op.MOV, end=True, group=0, name="s")
    g.connect(c, it, 0)
    g.connect(it, s, 0)
    with pytest.raises(DfgError, match="END node s fires 4 times"):
        g.validate()


@pytest.mark.parametrize("mode, graph", [("dense", None), ("sparse", "switch"),
                                         ("sparse", "gather")])
@pytest.mark.parametrize("kb, gb", [(1, 1), (2, 3), (3, 2)])
def test_fc_engines_validate(mode, graph, kb, gb):
    plan = FcPlan(graph_kind(mode, graph), kb, 40, gb * 4,
                  ArrayParams(slots=64, operand_depth=4, int_issue=1), kb, gb)
    g = Graph()
    ids = build_engine(g, plan.engine, 0)
    g.validate()
    assert len(ids["facc"]) == kb * gb and len(ids["st"]) == kb * gb
    switches = kb if graph == "switch" else 0          # one SWITCH loop per weight row
    assert g.count(Op.SWITCH) == switches
    assert sum(1 for e in g.edges if e.init) == switches


def test_dot_export():
    dot = switch_graph().to_dot()
    assert dot.startswith('digraph "sw" {') and dot.rstrip().endswith("}")
    assert "style=dashed" in dot and 'label="T"' in dot and 'label="F"' in dot
    assert "shape=diamond" in dot


def test_fanout_counts_the_destinations_a_node_already_has():
    g = Graph("fan")
    src = g.add(Op.MOV, name="src")
    fb = g.add(Op.MOV, name="fb")
    g.connect(src, fb, 0)
    sinks = [g.add(Op.MOV, name=f"s{i}") for i in range(4)]
    movs = g.fanout(src, [(s, 0) for s in sinks])
    assert len(movs) == 1
    assert sum(1 for e in g.edges if e.src == src) == ArrayParams.MAX_DESTS


def test_bscan_rates_like_iter():
    g = Graph()
    c = g.add(Op.CTX, group=0)
    ld = g.add(Op.LDH, imm=0, group=0)
    g.connect(c, ld, 0)
    bs = g.add(Op.BSCAN, imm=16, group=0)
    g.fanout(ld, [(bs, 0), (bs, 1)])
    sw = g.add(Op.SWITCH, 2, group=0)
    g.fanout(bs, [(sw, 0), (sw, 1)])
    acc = g.add(Op.FACC, imm=16, group=0)
    g.connect(sw, acc, 0, branch=True)
    g.connect(sw, acc, 1, branch=False)
    g.validate()
    r = g.rates()
    assert (r[bs], r[sw], r[acc]) == (1, 16, 16)
    g.nodes[sw].group = 1
    with pytest.raises(DfgError, match="rate rule: BSCAN#2 fires 16 times"):
        g.validate()
    g.nodes[sw].group = 0
    g.nodes[bs].end = True
    with pytest.raises(DfgError, match="BSCAN#2: BSCAN sends no context-end message"):
        g.validate()


def test_pipe0_hint_on_nodes_and_fanout_movs():
    # a node's pipe0 hint; Graph.fanout gives it to the MOVs it adds; an FP node
    # with it is rejected; the DOT export shows it.
    g = Graph("hint")
    c = g.add(Op.CTX, group=0)
    sinks = [g.add(Op.MOV, group=0) for _ in range(8)]
    movs = g.fanout(c, [(s, 0) for s in sinks], pipe0=True)
    assert movs and all(g.nodes[m].pipe0 for m in movs)
    assert not any(g.nodes[s].pipe0 for s in sinks) and not g.nodes[c].pipe0
    g.validate()
    assert g.to_dot().count("[pipe0]") == len(movs)
    acc = g.add(Op.FACC, imm=1, group=0, pipe0=True)
    g.connect(sinks[0], acc, 0)
    g.connect(sinks[1], acc, 1)
    with pytest.raises(DfgError, match=r"node FACC#\d+: pipe0 .* FP instruction FACC"):
        g.validate()
    g.nodes[acc].pipe0 = False
    g.validate()
