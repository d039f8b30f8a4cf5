"""Directed PE cases for the operand store's write ports and the SWITCH's branch masks.

The random graphs of :mod:`tb.pe.cases` give most results one or two destinations and a
SWITCH branch one; these cases reach, by construction, what they leave out:

* :func:`write_port_images`: every local write port of every dispatcher (the INT and second
  INT pipes' four, the FP pipe's one, the two memory lanes' four) delivering into every
  operand memory ``(operand k, bank b)`` of the PE (:mod:`hw.pe.write_arbiter`).  A
  *producer* (an ``ADD``, an ``FADD`` or an ``LDD`` of a per-context value) sends its
  destination ``i`` through its dispatcher's port ``i`` (one port: all through port 0), so
  producer ``p``'s destination ``i`` goes to memory ``(p + i) mod M`` of the image's ``M``
  memories: over the producers every port meets every memory.  The *consumers* are FMADD,
  XOR or MOV nodes placed (:class:`~sw.compiler.place.Placement` by hand) on slots of the
  wanted bank, their results folded by XOR into one store per context.  A load's replies come
  back on memory lane 1 when one of its destinations is an operand 1 or 2, else on lane 0
  (:mod:`hw.pe.pe`), so lane 0 meets only the operand-0 memories (its other pairs are
  unreachable by design).
* :func:`switch_images`: SWITCHes whose taken branch has 0 to 4 destinations (``ntrue`` 0 to
  4; the not-taken branch the rest), rejoined with the feedback edge; and a chain of
  SWITCHes whose condition and third operand are registers (the third operand reads every
  register in turn: no compiled graph puts a register there).

Each image runs on a 1 x 1 array of ``params`` (32 slots: the single-PE bench) with
``pipe0`` variants, so that with a second INT pipe both INT dispatchers are met.  The golden
model runs them (:func:`tb.pe.cases.save_case`) and the bench compares bit for bit.
"""

import random

from hw.pe.pe import BANKS
from sw.compiler.asm import assemble
from sw.compiler.dfg import Graph
from sw.compiler.place import Placement
from sw.spec.isa import Op
from tb.pe.graph_parts import ctx_address

__all__ = ["write_port_images", "switch_images"]

PE = (0, 0)
_K = 3                                   # operand indices (ArrayParams.MAX_OPERANDS)


def _front(g):
    """Return ``(c, a8)``: the context ID and ``8 (c mod 16)``, the address of its value."""
    c = g.add(Op.CTX, pe=PE, group=PE)
    idx = g.add(Op.AND, 1, imm=15, pe=PE, group=PE)
    g.connect(c, idx, 0)
    a8 = g.add(Op.SHL, 1, imm=3, pe=PE, group=PE)
    g.connect(idx, a8, 0)
    return c, a8


def _store_folded(g, c, values, out):
    """XOR-fold ``values`` to one and store it at ``out + 8 c`` (the context's END)."""
    values = list(values)
    while len(values) > 1:
        x = g.add(Op.XOR, pe=PE, group=PE)
        g.connect(values.pop(), x, 0)
        g.connect(values.pop(), x, 1)
        values.insert(0, x)
    st = g.add(Op.STD, end=True, pe=PE, group=PE)
    g.connect(ctx_address(g, c, out, 3, PE), st, 0)
    _link(g, values[0], st, 1)


def _link(g, src, dst, operand):
    """Connect ``src`` to ``dst``; a SWITCH's edge on its taken branch."""
    g.connect(src, dst, operand, branch=True if g.nodes[src].op is Op.SWITCH else None)


def _place(g, params, fixed):
    """Return a placement on PE (0, 0): ``fixed`` ``{node: slot}``, the others in id order in
    the free slots."""
    free = [s for s in range(params.slots) if s not in fixed.values()]
    rest = [n.id for n in g.nodes if n.id not in fixed]
    if len(rest) > len(free):
        raise ValueError(f"{g.name}: {len(g.nodes)} nodes for {params.slots} slots")
    where = {n: (*PE, s) for n, s in fixed.items()}
    where.update({n: (*PE, s) for n, s in zip(rest, free)})
    return Placement(params, where)


def _ports_image(params, name, kind, memories, producers, contexts, seed, pipe0=False,
                 stride=1):
    """Return the image of ``producers`` producers of ``kind`` (``int``, ``fp``, ``load``)
    whose destination ``i`` goes into memory ``memories[(stride p + i) mod len(memories)]``
    (``(operand, bank)``), four destinations each."""
    g = Graph(name)
    c, a8 = _front(g)
    dests = [[memories[(stride * p + i) % len(memories)] for i in range(4)]
             for p in range(producers)]
    if kind == "load":
        nodes = [g.add(Op.LDD, imm=0, pe=PE, group=PE) for _ in range(producers)]
        g.fanout(a8, [(n, 0) for n in nodes])
    else:
        v = g.add(Op.LDD, imm=0, pe=PE, group=PE)
        g.connect(a8, v, 0)
        op, imm = (Op.ADD, 0x1234) if kind == "int" else (Op.FADD, 0x3C00)
        nodes = [g.add(op, 1, imm=imm + p, pe=PE, group=PE, pipe0=pipe0)
                 for p in range(producers)]
        g.fanout(v, [(n, 0) for n in nodes], pipe0=pipe0)
    # Consumers per bank: an operand-k input for each edge into (k, b); an FMADD takes
    # operands 0..2, an XOR 0..1, a MOV 0 (so a bank needs as many operand-0 edges as 1, and
    # as many operand-1 as 2).
    wanted = {}
    for p, ds in enumerate(dests):
        for i, (k, b) in enumerate(ds):
            wanted.setdefault(b, [[] for _ in range(_K)])[k].append((p, i))
    edges = {p: [None] * len(ds) for p, ds in enumerate(dests)}
    consumers, fixed = [], {}
    for b, per_k in sorted(wanted.items()):
        if not len(per_k[0]) >= len(per_k[1]) >= len(per_k[2]):
            raise ValueError(f"{name}: bank {b} has operand inputs {[len(e) for e in per_k]}")
        for j in range(len(per_k[0])):
            nsrc = sum(1 for k in range(_K) if j < len(per_k[k]))
            op = {1: Op.MOV, 2: Op.XOR, 3: Op.FMADD}[nsrc]
            n = g.add(op, nsrc, pe=PE, group=PE)
            consumers.append(n)
            for k in range(nsrc):
                p, i = per_k[k][j]
                edges[p][i] = (n, k)
            fixed[n] = b
    for p, es in edges.items():
        for n, k in es:                       # in port order: destination i is port i
            g.connect(nodes[p], n, k)
    _store_folded(g, c, consumers, params.dbuf_bytes)
    g.validate(params)
    # Consumer slots: the lowest free slots of their banks, in order.
    banks = BANKS
    taken, slots = set(), {}
    for n, b in fixed.items():
        s = next(s for s in range(b, params.slots, banks) if s not in taken)
        taken.add(s)
        slots[n] = s
    table = bytes(random.Random(seed).getrandbits(8) for _ in range(128))
    return assemble(g, _place(g, params, slots), {0: table}, contexts)


def write_port_images(params, contexts, seed):
    """Return ``[(name, image)]`` meeting every (dispatcher port, operand memory) pair of a PE
    with the default banks (see the module docstring)."""
    nb = BANKS
    images = []
    halves = [tuple(range(nb))[:nb // 2], tuple(range(nb))[nb // 2:]]
    for h, banks in enumerate(halves):
        mems = [(k, b) for b in banks for k in range(_K)]
        for pipe0 in (False, True):
            images.append((f"ports-int-{h}{'-p0' if pipe0 else ''}",
                           _ports_image(params, f"ports-int-{h}", "int", mems, len(mems),
                                        contexts, seed + h, pipe0)))
        images.append((f"ports-load1-{h}",
                       _ports_image(params, f"ports-load1-{h}", "load", mems, len(mems),
                                    contexts, seed + h)))
        # Lane 0: operand-0 memories only; each producer's four destinations in four banks.
        lane0 = [(0, b) for b in range(nb)]
        images.append((f"ports-load0-{h}",
                       _ports_image(params, f"ports-load0-{h}", "load", lane0, len(lane0) // 2,
                                    contexts, seed + h) if h == 0 else
                       _ports_image(params, f"ports-load0-{h}", "load",
                                    lane0[2:] + lane0[:2], len(lane0) // 2, contexts, seed + h)))
    mems = [(k, b) for b in range(nb) for k in range(_K)]
    images.append(("ports-fp", _ports_image(params, "ports-fp", "fp", mems, len(mems) // 4,
                                            contexts, seed, stride=4)))
    return images



def switch_images(params, contexts, seed):
    """Return ``[(name, image)]``: a chain of SWITCHes, one per register ``r``, whose
    condition is register 0 (non-zero: always taken) and third operand register ``r``; the
    first three send their taken branch to 4, 3 and 2 destinations and their other branch to
    0, 1 and 2 nodes that never fire (see the module docstring).  Without and with the
    pipe-0 hint."""
    if params.regs < 3:
        raise ValueError(f"switch_images needs 3 registers or more, not {params.regs}")
    images = []
    for pipe0 in (False, True):
        g = Graph(f"switch-regs{'-p0' if pipe0 else ''}")
        c, a8 = _front(g)
        v = g.add(Op.LDD, imm=0, pe=PE, group=PE)
        g.connect(a8, v, 0)
        for r in range(params.regs):
            sw = g.add(Op.SWITCH, 3, pe=PE, group=PE, pipe0=pipe0)
            g.nodes[sw].regs.update({1: 0, 2: r})
            _link(g, v, sw, 0)
            taken = {0: [(Op.FMADD, 3), (Op.XOR, 1)], 1: [(Op.FMADD, 3)],
                     2: [(Op.XOR, 2)]}.get(r, [])
            other = {1: [(Op.MOV, 1)], 2: [(Op.XOR, 2)]}.get(r, [])
            if not taken:
                v = sw
                continue
            for branch, nodes in ((True, taken), (False, other)):
                for op, n in nodes:
                    node = g.add(op, pe=PE, group=PE)
                    for k in range(n):
                        g.connect(sw, node, k, branch=branch)
                    if branch:
                        if op is Op.XOR and n == 1:      # the FMADD's result is operand 1
                            _link(g, v, node, 1)
                        v = node
        _store_folded(g, c, [v], params.dbuf_bytes)
        g.validate(params)
        table = bytes(random.Random(seed).getrandbits(8) for _ in range(128))
        image = assemble(g, _place(g, params, {}), {0: table}, contexts)
        rng = random.Random(seed + 1)
        image.regs[...] = [[[rng.getrandbits(64) for _ in range(params.regs)]]]
        image.regs[..., 0] |= 1
        images.append((g.name, image))
    return images
