"""Tests of the assembler and the image (:mod:`sw.compiler.asm`, :mod:`sw.compiler.image`): encoding
into the placed slots, SWITCH branch order, preloads, file round trip, every malformed-image error
and the listing."""

import itertools

import numpy as np
import pytest

from sw.compiler import layers
from sw.compiler.asm import assemble, config_word_counts, listing
from sw.compiler.dbuf_layout import pass_memory
from sw.compiler.graphs import build_graph
from sw.compiler.image import Image, expand_cbuf, load
from sw.compiler.place import place
from sw.compiler.planner import plan_fc
from sw.compiler.program import program
from sw.spec import isa
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_header_layout
from sw.spec.errors import FdpuError

PARAMS = ArrayParams(rows=1, cols=2, slots=64, operand_depth=4, int_issue=1)


def fc_image(mode="sparse"):
    w = layers.make_weights((4, 20), 0.5, 1)
    x = layers.make_inputs(20, 4, 1)
    plan = plan_fc(4, 20, 4, mode, PARAMS)
    g = build_graph(plan)
    g.validate(PARAMS)
    p = place(g, PARAMS)
    segments, outputs = pass_memory(plan, w, x, 0)
    return g, p, assemble(g, p, segments, plan.pass_contexts(0), meta={"outputs": outputs})


def test_every_node_is_encoded_where_it_was_placed():
    g, p, img = fc_image()
    insns = img.instructions()
    assert len(insns) == len(g.nodes)
    out = g.out_edges()
    for node in g.nodes:
        insn = insns[p.where[node.id]]
        assert insn.op is node.op and insn.imm == node.imm and insn.end == node.end
        assert len(insn.dests) == len(out[node.id])
        if node.op is isa.Op.SWITCH:
            taken = [e for e in out[node.id] if e.branch]
            assert insn.ntrue == len(taken)
            t = insn.dests[0]
            assert (t.x, t.y, t.slot) == p.where[taken[0].dst]
    fb = [e for e in g.edges if e.init]
    assert len(img.preloads) == len(fb)
    assert img.ends_per_context == len(g.end_nodes())


def test_save_load_round_trip(tmp_path):
    _, _, img = fc_image()
    img.save(tmp_path / "i.npz")
    back = load(tmp_path / "i.npz")
    assert np.array_equal(back.program, img.program)
    assert back.segments == img.segments and back.preloads == img.preloads
    assert (back.contexts, back.window, back.ends_per_context) == \
        (img.contexts, img.window, img.ends_per_context)
    assert back.params == img.params and listing(back) == listing(img)


def _copy(img, **changes):
    fields = dict(params=img.params, program=img.program.copy(), regs=img.regs,
                  preloads=list(img.preloads), segments=dict(img.segments),
                  contexts=img.contexts, window=img.window,
                  ends_per_context=img.ends_per_context)
    fields.update(changes)
    return Image(**fields)


def test_malformed_images():
    _, p, img = fc_image()
    bad = _copy(img)
    bad.program[0, 0, 0, 0] = 63
    with pytest.raises(FdpuError, match="unknown opcode 63"):
        bad.check()
    with pytest.raises(FdpuError, match="outside the Dbufs"):
        _copy(img, segments={PARAMS.memory_bytes - 2: b"1234"}).check()
    with pytest.raises(FdpuError, match="crosses a Dbuf boundary"):
        _copy(img, segments={PARAMS.dbuf_bytes - 2: b"1234"}).check()
    with pytest.raises(FdpuError, match="window must be an integer in 1..4"):
        _copy(img, window=5).check()
    with pytest.raises(FdpuError, match="ends_per_context is 1"):
        _copy(img, ends_per_context=1).check()
    with pytest.raises(FdpuError, match=r"preload 0, \(0,0\).63.0, names no token operand"):
        _copy(img, preloads=[(0, 0, 63, 0, 0)]).check()
    with pytest.raises(FdpuError, match="program has shape"):
        _copy(img, params=ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                      int_issue=1)).check()
    bad = _copy(img)
    bad.program[0, 0, 1] = 0       # a slot others send to becomes empty
    with pytest.raises(FdpuError, match="unconfigured slot"):
        bad.check()


def test_graph_that_does_not_fit_the_array():
    plan = plan_fc(4, 20, 4, "sparse", PARAMS)
    g = build_graph(plan)
    tiny = ArrayParams(rows=1, cols=2, slots=16, operand_depth=4, int_issue=1)
    with pytest.raises(FdpuError, match="slots"):
        place(g, tiny)


def test_load_rejects_bad_files(tmp_path):
    (tmp_path / "t.npz").write_text("hello")
    with pytest.raises(FdpuError, match="not an FDPU image"):
        load(tmp_path / "t.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(FdpuError, match="not an FDPU image: missing member"):
        load(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.npz")


def test_listing_reads_well():
    _, _, img = fc_image("dense")
    text = listing(img)
    first = text.splitlines()
    assert first[0].startswith("; FDPU image: 1x2 PEs, 64 slots, 128-bit instruction words")
    assert any("CTX t0 ->" in line for line in first)
    assert any("STD t0, t1, #0 [end]" in line for line in first)


def test_pipe0_hint_is_assembled():
    # Node.pipe0 goes into the instruction word: the sparse engine with one value
    # load per row (wfan 16) and fan_pipe0 hints the MOVs of the loads' fan-out trees.
    params = ArrayParams(rows=1, cols=1, slots=128, int_issue=2, operand_depth=4)
    plan = plan_fc(3, 32, 32, "sparse", params, kb=3, gb=8, wfan=16, fan_pipe0=True)
    g = build_graph(plan)
    g.validate(params)
    p = place(g, params)
    img = assemble(g, p, {}, 1)
    insns = img.instructions()
    hinted = [n for n in g.nodes if n.pipe0]
    assert len(hinted) == 3 * 2
    for node in g.nodes:
        assert insns[p.where[node.id]].pipe0 == node.pipe0
    assert listing(img).count("[pipe0]") == len(hinted)


@pytest.mark.parametrize("rows, cols, mode, graph", [
    (1, 2, "dense", None), (2, 3, "sparse", "switch"), (2, 2, "sparse", "skip"),
    (3, 2, "sparse", "gather")])
def test_config_word_counts_are_the_images_cbuf_words(rows, cols, mode, graph):
    # The performance model counts the configuration's Cbuf words from the placed graph; the
    # assembled image's records have exactly those lengths, on 1, 2 and 4 ports (the SWITCH
    # graph's feedback edges are preloads; a bias and ReLU add slots), and its ports send
    # and read the counted CONFIG flits and record headers.
    p = ArrayParams(rows=rows, cols=cols, slots=64, operand_depth=4, int_issue=1)
    w = layers.make_weights((24, 40), 0.4, 3)
    kw = dict(row_nnz=np.count_nonzero(w.view(np.uint16), axis=1)) if graph == "skip" else {}
    plan = plan_fc(24, 40, 8, mode, p, sparse_graph=graph, bias=np.ones(24, np.float16),
                   relu=True, **kw)
    g, placement = program(plan)
    img = assemble(g, placement, {}, plan.pass_contexts(0))
    assert graph != "switch" or img.preloads
    for ports, spans in itertools.product((1, 2, 4), (False, True)):
        words, templates = img.cbuf_port_words(ports, spans)
        headers = [sum(1 for _ in _record_headers(p, c)) for c in words]
        sent = [len(expand_cbuf(p, c, [])) + n for c, n in zip(words, headers)]
        assert config_word_counts(g, placement, ports, spans) == (
            [len(c) for c in words], sent, len(templates))
        assert spans or sent == [len(c) for c in words]


def _record_headers(p, words):
    """Yield the header words of Cbuf records ``words``."""
    hdr, i = cbuf_header_layout(p), 0
    while i < len(words):
        yield words[i]
        i += 1 + hdr.unpack(int(words[i]))["count"]
