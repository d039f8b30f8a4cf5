"""The assembler: a placed graph plus memory contents -> a binary :class:`~sw.compiler.image.Image`.

Contract
--------
:func:`assemble` encodes every node with :func:`sw.spec.isa.encode` into the slot the mapper gave
it, its ``pipe0`` hint included.  A node's destinations are its out-edges in graph order,
except that a SWITCH lists its ``True`` branch first (``ntrue`` of them) and then its
``False`` branch.  Every initial token of a feedback edge becomes a preload of the destination
operand.  ``ends_per_context`` is the number of END nodes (each fires once per context: the
DFG rate rule).  The image is checked
(:meth:`~sw.compiler.image.Image.check`) before it is returned.  :func:`listing` prints an image as
text, one slot per line, with :func:`sw.spec.isa.disassemble`.  :func:`config_word_counts`
gives the lengths of the assembled image's Cbuf words (``Image.cbuf_port_words``) from the
graph and its placement alone, without encoding (the performance model's).
"""

import numpy as np

from sw.compiler import image
from sw.compiler.image import Image
from sw.spec import isa
from sw.spec.cbuf import word_parts
from sw.spec.errors import FdpuError

__all__ = ["assemble", "config_word_counts", "listing"]


def assemble(graph, placement, segments=None, contexts=1, window=None, meta=None, ctx_base=0):
    """Return the :class:`Image` of ``graph`` placed by ``placement``.

    Parameters
    ----------
    graph : sw.compiler.dfg.Graph
        A validated graph.
    placement : sw.compiler.place.Placement
        Where every node goes; its ``params`` size the image.
    segments : dict, optional
        ``{global address: bytes}`` of the Dbufs before the run.
    contexts : int
        Contexts to run.
    window : int, optional
        Contexts in flight (default ``operand_depth``).
    meta : dict, optional
        Notes stored with the image.
    ctx_base : int
        The first context ID (:class:`Image`).
    """
    params = placement.params
    program, preloads = _program(graph, placement)
    img = Image(params, program, np.zeros((params.rows, params.cols, params.regs),
                                          dtype=np.uint64),
                preloads, dict(segments or {}), int(contexts),
                params.operand_depth if window is None else int(window),
                len(graph.end_nodes()), dict(meta or {}), int(ctx_base))
    img.check()
    return img


def _program(graph, placement):
    """Return ``(program, preloads)``: every slot's instruction word
    (``uint64[rows, cols, slots, parts]``) and the preloads of ``graph`` placed by
    ``placement`` (module doc)."""
    params = placement.params
    parts = word_parts(params)
    program = np.zeros((params.rows, params.cols, params.slots, parts), dtype=np.uint64)
    out = graph.out_edges()
    preloads = []
    where = placement.where
    for node in graph.nodes:
        edges = out[node.id]
        if node.op is isa.Op.SWITCH:
            edges = [e for e in edges if e.branch] + [e for e in edges if not e.branch]
        dests = tuple(isa.Dest(*where[e.dst][:2], where[e.dst][2], e.operand) for e in edges)
        regmask = sum(1 << i for i in node.regs)
        regs = tuple(node.regs.get(i, 0) for i in range(params.MAX_OPERANDS))
        ntrue = sum(1 for e in edges if e.branch) if node.op is isa.Op.SWITCH else 0
        insn = isa.Instruction(node.op, node.nsrc, regmask, regs, node.end, ntrue, node.imm,
                               dests, node.pipe0)
        try:
            word = isa.encode(insn, params)
        except FdpuError as exc:
            raise FdpuError(f"node {node.label()}: {exc}") from None
        x, y, s = where[node.id]
        for i in range(parts):
            program[y, x, s, i] = (word >> (64 * i)) & ((1 << 64) - 1)
    for e in graph.edges:
        for _ in range(e.init):
            x, y, s = where[e.dst]
            preloads.append((x, y, s, e.operand, e.init_value))
    return program, preloads


def config_word_counts(graph, placement, ports, spans=False):
    """Return ``(per configuration port its Cbuf record words, per port the CONFIG flits and
    record headers it sends and reads, the CTX template words)`` of the image
    :func:`assemble` makes of ``graph`` placed by ``placement``, equal to the lengths of its
    :meth:`~sw.compiler.image.Image.cbuf_port_words` (``spans`` as there), without the
    image's memory and checks (:func:`sw.compiler.image.config_word_counts`; the words
    encoded only with ``spans``)."""
    p = placement.params
    where = placement.where
    ctx = sum(1 for node in graph.nodes if node.op is isa.Op.CTX)
    if spans:
        program, preloads = _program(graph, placement)
        return image.config_word_counts(p, program, preloads, ctx, ports, spans)
    configured = np.zeros((p.rows, p.cols, p.slots), dtype=bool)
    for node in graph.nodes:
        x, y, s = where[node.id]
        configured[y, x, s] = True
    preloads = [(*where[e.dst], e.operand, 0) for e in graph.edges for _ in range(e.init)]
    return image.config_word_counts(p, configured, preloads, ctx, ports)


def listing(image):
    """Return the text listing of ``image``: header, then one line per configured slot."""
    p = image.params
    lines = [f"; FDPU image: {p.rows}x{p.cols} PEs, {p.slots} slots, "
             f"{isa.insn_layout(p).width}-bit instruction words",
             f"; contexts {image.contexts}, window {image.window}, "
             f"ends per context {image.ends_per_context}, "
             f"{len(image.preloads)} preloads, {len(image.segments)} memory segments "
             f"({sum(len(v) for v in image.segments.values())} bytes)"]
    insns = image.instructions()
    for (x, y, s) in sorted(insns, key=lambda k: (k[1], k[0], k[2])):
        lines.append(f"({x},{y}).{s:<3d} {image.word(x, y, s):#0{2 + 2 * 8 * word_parts(p)}x}"
                     f"  {isa.disassemble(insns[(x, y, s)])}")
    for x, y, s, o, v in image.preloads:
        lines.append(f"preload ({x},{y}).{s}.{o} = {v:#x}")
    return "\n".join(lines) + "\n"
