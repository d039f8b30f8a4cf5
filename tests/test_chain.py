"""Layers chained on chip (sw.compiler.chain): the stage layout, the MOVE list, the consumer's
image, the refusals, and chained RTL runs bit for bit against the golden model."""

import dataclasses

import numpy as np
import pytest

from chainutil import run_chain_checked
from sw.compiler import chain, dbuf_layout, layers, planner, split
from sw.compiler.fc_plan import LANES
from sw.models import golden_fc
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError


def _pair(rows, mode, graph, n, k0=24, c0=20, k1=7, kb=None, gb=None, gb1=None,
          dbuf_bytes=8192, ways=1):
    p = ArrayParams(rows=rows, cols=rows, slots=32, dbuf_bytes=dbuf_bytes, operand_depth=4,
                    int_issue=1)
    density = 1.0 if mode == "dense" else 0.3
    w0 = layers.make_weights((k0, c0), density, 1)
    w1 = layers.make_weights((k1, k0), density, 2)
    x = layers.make_inputs(c0, n, 3)
    kw = dict(sparse_graph=graph) if graph else {}
    p0 = planner.plan_fc(k0, c0, n, mode, p, kb=kb, gb=gb, **kw)
    p1 = planner.plan_fc(k1, k0, n, mode, p, gb=gb1, **kw)
    if ways > 1:                   # the next layer's partial sums (sw.compiler.split)
        parts = split.split_layer(p1, w1, ways)
        p1, w1 = parts.partial, parts.partial_weights
    return p0, p1, w0, w1, x


@pytest.mark.parametrize("rows, mode, graph, n, kw", [
    (2, "dense", None, 8, {}),
    (2, "sparse", "skip", 13, {}),
    (1, "sparse", "gather", 5, {}),
    (2, "dense", None, 40, dict(gb=2, gb1=4)),
    (2, "dense", None, 20, {}),                                # gb 2 and 3: chunks of 6
    (1, "dense", None, 9, dict(k0=10, kb=3, gb=1, gb1=2)),     # padding rows in the stage
    (2, "sparse", "switch", 6, dict(k0=21)),                   # padding columns (Cw > C)
    (2, "dense", None, 8, dict(k1=2, ways=3)),                 # slices of the next layer
    (2, "sparse", "gather", 6, dict(k0=40, k1=2, ways=2)),     # slices with padding
])
def test_moves_put_the_outputs_where_the_next_layer_reads_its_inputs(rows, mode, graph, n, kw):
    # The engines' stores (item base + 8 (j out_stride + k)) followed by the MOVE list give
    # exactly the bytes the next layer's input blocks hold when loaded from external memory,
    # in every copy; and the consumer's image loads all the rest of them.
    p0, p1, w0, w1, x = _pair(rows, mode, graph, n, **kw)
    assert chain.link_error(p0, p1, w0) is None
    y0 = golden_fc.run_fc(p0, w0, x, exact=True).result
    run = chain.producer_plan(p0)
    _, outputs = chain._producer_memory(p0, p1, w0, x)
    ypad = np.zeros((p0.gblocks * p0.gb * LANES, p0.kblocks * p0.kb), dtype=np.uint16)
    ypad[:n, :p0.K] = y0.view(np.uint16)
    mem = {}
    for i, base in outputs:
        kbi, gbi = p0.item(i)
        for j in range(p0.gb):
            g = gbi * p0.gb + j
            for k in range(p0.kb):
                mem[base + (j * run.output_stride + k) * 8] = \
                    ypad[g * LANES:(g + 1) * LANES, kbi * p0.kb + k].tobytes()
    want, _ = dbuf_layout.pass_memory(p1, w1, y0, 0)
    got = {}
    for m in chain.moves(p0, p1):
        for d in m.dsts:
            for q in range(0, m.nbytes, 8):
                got[d + q] = mem[m.src + q]
    filled = chain.filled_ranges(p1)
    assert len(got) * 8 == sum(n for _, n in filled)

    def byte(segs, a):
        base = max(s for s in segs if s <= a)
        return segs[base][a - base:a - base + 8]
    for a, nbytes in filled:
        for q in range(0, nbytes, 8):
            assert got[a + q] == byte(want, a + q), hex(a + q)
    # The consumer's image: the input blocks minus the filled ranges, as zeros.
    image = chain.consumer_image(p1, want, *_program(p1))
    cut = {a: b for a, b in image.segments.items() if a not in want}
    inside = set()
    for a, b in cut.items():
        assert not any(b)
        inside |= set(range(a, a + len(b), 8))
    inside |= {a + q for a, nb in filled for q in range(0, nb, 8)}
    blocks = {a for a in want if a not in image.segments}
    assert inside == {a + q for a in blocks for q in range(0, len(want[a]), 8)}


def _program(plan):
    from sw.compiler.program import program
    return program(plan)


def test_links_that_cannot_chain_are_named():
    # (10 lane-group blocks share each row block's weights: 4 KiB Dbufs take several passes.)
    p0, p1, w0, _, _ = _pair(2, "sparse", "switch", 40, k0=30, kb=2, gb=1, gb1=3,
                             dbuf_bytes=4096)
    assert p0.passes > 1 and "passes" in chain.link_error(p0, p1, w0)
    p0, p1, w0, _, _ = _pair(2, "dense", None, 8)
    other = planner.plan_fc(7, 23, 8, "dense", p0.params)
    assert "takes 23 inputs" in chain.link_error(p0, other)
    other = planner.plan_fc(7, 24, 9, "dense", p0.params)
    assert "batches differ" in chain.link_error(p0, other)
    p0, p1, w0, _, _ = _pair(2, "sparse", "skip", 8)
    p0 = dataclasses.replace(p0, row_order=tuple(reversed(range(p0.kblocks * p0.kb))))
    assert "balanced" in chain.link_error(p0, p1)
    with pytest.raises(FdpuError, match="layers 0 and 1 cannot be chained"):
        chain.chained_passes([p0, p1], [w0, None], np.zeros((8, 20), np.float16))


def _mlp(rows, mode, graph, n, sizes=(20, 24, 16, 7), dbuf_bytes=8192, slots=32):
    """Return plans, weights (with biases and ReLU but on the last) and inputs of an MLP."""
    p = ArrayParams(rows=rows, cols=rows, slots=slots, dbuf_bytes=dbuf_bytes, operand_depth=4,
                    int_issue=1)
    density = 1.0 if mode == "dense" else 0.3
    plans, ws = [], []
    for i, (c, k) in enumerate(zip(sizes, sizes[1:])):
        w = layers.make_weights((k, c), density, 10 + i)
        b = np.random.default_rng(i).normal(0, 1, k).astype(np.float16)
        kw = dict(sparse_graph=graph) if graph else {}
        plans.append(planner.plan_fc(k, c, n, mode, p, bias=b, relu=i + 2 < len(sizes), **kw))
        ws.append(w)
    return plans, ws, layers.make_inputs(sizes[0], n, 5)


@pytest.mark.parametrize("sim, rows, mode, graph, n, early", [
    # Each array on one simulator in CI, both under -m slow; early start on one of each.
    ("icarus", 1, "dense", None, 5, True),
    pytest.param("verilator", 1, "dense", None, 5, False, marks=pytest.mark.slow),
    pytest.param("icarus", 2, "sparse", "skip", 9, True, marks=pytest.mark.slow),
    ("verilator", 2, "sparse", "skip", 9, False),
])
def test_chained_layers_on_the_rtl_equal_the_golden_model(sim, rows, mode, graph, n, early):
    # Three layers (bias, ReLU) in one simulation, activations kept in the Dbufs: the last
    # layer's outputs equal the golden model's layer-by-layer run bit for bit, every PE
    # instruction the golden model counts fired, and no activation crossed the external port.
    # With early start each layer's contexts start when their data are in (the moved
    # activations count as the first context's).
    from tb.host.job_plan import plan_job
    plans, ws, x = _mlp(rows, mode, graph, n)
    refs, job = run_chain_checked(plans, ws, x, sim, early_start=early)
    assert job.final["o_ext_rd_bytes"] == sum(job.ext_in)
    assert job.final["o_ext_wr_bytes"] == sum(job.ext_out) == plans[-1].output_bytes * len(
        list(plans[-1].pass_items(0)))
    # The same layers streamed through the host move more external bytes: each layer's
    # outputs out and the next one's inputs in.
    streamed = 0
    for plan, w, xin in zip(plans, ws, [x] + [r.result for r in refs]):
        from sw.compiler.program import pass_images
        passes = [(img, [(a, plan.output_bytes) for _, a in outs])
                  for img, outs in pass_images(plan, w, xin)]
        jp = plan_job(plan.params, passes, dma_channels=2)
        streamed += sum(jp.ext_in) + sum(jp.ext_out)
    chained = sum(job.ext_in) + sum(job.ext_out)
    print(f"external bytes: chained {chained:,}, streamed {streamed:,}")
    assert chained < streamed
