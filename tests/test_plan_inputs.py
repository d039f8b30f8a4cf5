"""Tests of what the planner plans from (:mod:`sw.compiler.fc_layer`), the graph-kind registry
(:mod:`sw.compiler.graph_kinds`) and the one pass layout (:func:`sw.compiler.dbuf_layout
.pass_layout`) that the image builder and the performance model share."""

import dataclasses

import numpy as np
import pytest

from sw.compiler import chain, dbuf_layout, graphs, layers, planner
from sw.compiler.dfg import Graph
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.graph_kinds import (DEFAULT_SPARSE_GRAPH, GRAPHS, MODES, SPARSE_GRAPHS,
                                     EngineSpec, GraphKind, graph_kind)
from sw.models import perf
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError

SMALL = ArrayParams(rows=2, cols=2, slots=64, operand_depth=4, int_issue=1, dbuf_bytes=1 << 14)
# (the small PE of tests/conftest.py's small_pe, 2 x 2 with 16 KiB Dbufs)


def _weights(k, c, density, seed=3):
    return layers.make_weights((k, c), density, seed)


@pytest.mark.parametrize("mode, graph", [("dense", None), ("sparse", None),
                                         ("sparse", "switch"), ("sparse", "gather"),
                                         ("sparse", "skip")])
def test_layer_and_options_plan_as_the_loose_arguments_do(mode, graph):
    w = _weights(40, 100, 0.2)
    bias = np.linspace(-1, 1, 40)
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    loose = planner.plan_fc(40, 100, 9, mode, SMALL, sparse_graph=graph, bias=bias, relu=True,
                            row_nnz=nnz if mode == "sparse" and graph in (None, "skip")
                            else None)
    plan = planner.plan_fc(FcLayer.of(w, 9, bias=bias, relu=True), SMALL,
                           PlanOptions(mode, graph))
    assert plan == loose
    assert plan.graph is graph_kind(mode, plan.sparse_graph)


def test_layer_weights_give_the_rows_and_balance_only_a_skipping_graph():
    w = _weights(24, 64, 0.1)
    layer = FcLayer.of(w, 4)
    assert layer.row_nnz == tuple(np.count_nonzero(w.view(np.uint16), axis=1))
    skip = planner.plan_fc(layer, SMALL, PlanOptions("sparse", "skip"))
    gather = planner.plan_fc(layer, SMALL, PlanOptions("sparse", "gather"))
    assert skip.row_order and not gather.row_order          # balanced / in order


def test_a_density_sets_the_chooser_estimate_without_weights(monkeypatch):
    # Shape and density only: the skip graph's work per context is estimated at the density
    # (the stored weights' when the weights are known, SKIP_DENSITY when neither is).
    seen = []
    choose = planner.choose_blocking

    def spy(engine, K, groups, params, kb=None, gb=None, wfan=None, density=None):
        seen.append(density)
        return choose(engine, K, groups, params, kb, gb, wfan, density)
    monkeypatch.setattr(planner, "choose_blocking", spy)
    opts = PlanOptions("sparse", "skip", double_buffer=False)
    planner.plan_fc(FcLayer(256, 1024, 64, density=0.02), None, opts)
    planner.plan_fc(FcLayer(256, 1024, 64), None, opts)
    w = np.zeros((256, 1024), dtype=np.float16)
    w[:, :512] = 1
    planner.plan_fc(FcLayer.of(w, 64), None, opts)
    assert seen == [0.02, planner.SKIP_DENSITY, 0.5]


@pytest.mark.parametrize("make, words", [
    (lambda: FcLayer(0, 4, 4), "out_features K must be a positive integer, got 0"),
    (lambda: FcLayer(4, 4.0, 4), "in_features C must be a positive integer, got 4.0"),
    (lambda: FcLayer(4, 4, True), "batch must be a positive integer, got True"),
    (lambda: FcLayer(2, 4, 4, row_nnz=[1, 5]), r"row_nnz must be 2 integers in 0..4"),
    (lambda: FcLayer(2, 4, 4, density=1.5), "density must be a fraction in 0..1, got 1.5"),
    (lambda: FcLayer(2, 4, 4, bias=[1.0]), "bias must be 2 real values"),
    (lambda: FcLayer(2, 4, 4, bias=[1.0, 1e6]), "bias values must be finite"),
    (lambda: FcLayer(2, 4, 4, relu="yes"), "relu must be True or False, got 'yes'"),
    (lambda: FcLayer.of(np.zeros(4), 1), r"weights must be a K x C matrix, got shape \(4,\)"),
    (lambda: PlanOptions("half"), "mode must be one of dense, sparse, got 'half'"),
    (lambda: PlanOptions("sparse", "select"), "sparse_graph must be one of switch, gather, "
                                              "skip, reuse, got 'select'"),
    (lambda: PlanOptions("dense", wfan=4), "wfan .* in mode 'sparse', got 4 in mode 'dense'"),
    (lambda: PlanOptions("sparse", wfan=8), "wfan .* is one of 4, 16"),
    (lambda: PlanOptions(feedback=0), "feedback must be True or False, got 0"),
    (lambda: PlanOptions(double_buffer="yes"), "double_buffer must be True, False or None"),
    (lambda: PlanOptions(split=0), "split must be a positive integer"),
])
def test_bad_layers_and_options_are_refused_on_construction(make, words):
    with pytest.raises(FdpuError, match=words):
        make()


def test_options_that_depend_on_the_layer_are_refused_by_the_planner():
    layer = FcLayer(4, 64, 4)
    with pytest.raises(FdpuError, match=r"kb must be an integer in 1..4 \(out_features 4\)"):
        planner.plan_fc(layer, SMALL, PlanOptions(kb=5))
    with pytest.raises(FdpuError, match="feedback=False drops the SWITCH graph's feedback"):
        planner.plan_fc(layer, SMALL, PlanOptions("sparse", "gather", feedback=False))
    with pytest.raises(FdpuError, match="needs the layer's weights"):
        from sw.models import choose
        choose.best_plan(layer, SMALL)


def test_plans_and_inputs_are_frozen():
    plan = planner.plan_fc(FcLayer(8, 32, 4), SMALL, PlanOptions("dense"))
    for obj, field in ((plan, "kb"), (FcLayer(8, 32, 4), "K"), (PlanOptions(), "mode"),
                       (plan.engine, "kb")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, 1)


def test_the_registry_holds_every_graph_once_with_its_contract():
    assert tuple(GRAPHS) == ("dense", "switch", "gather", "skip", "reuse")
    assert MODES == ("dense", "sparse") and SPARSE_GRAPHS == ("switch", "gather", "skip", "reuse")
    assert graph_kind("sparse") is GRAPHS[DEFAULT_SPARSE_GRAPH]
    assert graph_kind("dense", "skip") is GRAPHS["dense"]        # a dense mode has one graph
    for name, kind in GRAPHS.items():
        assert isinstance(kind, GraphKind) and kind.name == name and kind.title
        assert kind.label == ("dense" if name == "dense" else f"sparse/{name}")
        spec = EngineSpec(kind, 2, 3, 4 * kind.column_unit, feedback=True, bias=True,
                          relu=True)
        g = Graph(name)
        graphs.build_engine(g, spec, 0)
        g.validate()
        # The largest item is every weight stored; fewer stored weights never need more.
        assert kind.item_bytes(spec, 0) <= kind.item_bytes(spec, spec.kb * spec.Cw)
    assert [k.name for k in GRAPHS.values() if k.has_feedback] == ["switch"]
    assert [k.name for k in GRAPHS.values() if k.skips_zeros] == ["skip", "reuse"]
    # The planner picks any kind but reuse for a plan that names none (reuse: <= 4 rows).
    assert [k.name for k in GRAPHS.values() if not k.auto] == ["reuse"]
    assert [(k.name, k.max_kb) for k in GRAPHS.values() if k.max_kb] == [("reuse", 4)]


@pytest.mark.parametrize("mode, graph, bias", [("dense", None, False), ("sparse", "gather", True),
                                               ("sparse", "switch", False),
                                               ("sparse", "skip", True)])
def test_the_model_sizes_the_dma_from_the_image_layout(mode, graph, bias, seed, small_pe):
    # Every segment the image builder writes is one the performance model counts, at the
    # same address and of the same size (input blocks several Dbufs hold: its groups).
    w = _weights(48, 200, 0.3, seed)
    x = layers.make_inputs(200, 12, seed)
    plan = planner.plan_fc(FcLayer.of(w, 12, bias=np.ones(48) if bias else None),
                           small_pe(2, 2, dbuf_bytes=1 << 12),
                           PlanOptions(mode, graph, double_buffer=False))
    assert plan.passes > 1
    nnz = perf._row_nnz(plan, np.asarray(w, dtype=np.float16))
    for q in range(plan.passes):
        segs, _, layout = dbuf_layout.pass_contents(plan, w, x, q)
        modelled, (groups, nbytes), first, _ = perf._pass_segments(plan, q, nnz)
        shared = {a for g in groups for a in g}
        assert sorted(modelled + [(a, nbytes) for a in shared]) == \
            sorted((a, len(b)) for a, b in segs.items())
        # The same first reading context of each segment (early start's groups).
        assert first == dbuf_layout.first_use(layout)


def test_a_chained_layer_is_modelled_with_its_outputs_in_the_next_layers_layout():
    prev = planner.plan_fc(FcLayer(32, 64, 8), SMALL, PlanOptions("dense"))
    nxt = planner.plan_fc(FcLayer(16, 32, 8), SMALL, PlanOptions("dense"))
    w = _weights(32, 64, 1.0)
    x = layers.make_inputs(64, 8, 3)
    segs, _ = chain._producer_memory(prev, nxt, w, x)
    stage = chain.stages(prev, nxt)[:2]
    modelled, (groups, nbytes), _, _ = perf._pass_segments(chain.producer_plan(prev), 0,
                                                        perf._row_nnz(prev, w), stage=stage)
    shared = {a for g in groups for a in g}
    assert sorted(modelled + [(a, nbytes) for a in shared]) == \
        sorted((a, len(b)) for a, b in segs.items())
