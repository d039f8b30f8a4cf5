"""Small graph pieces the PE test programs share (:mod:`tb.pe.cases`, :mod:`tb.pe.counted_cases`):
an immediate, a per-context address, a chain of one-operand steps, a stream of stores that ends
its context when all are acknowledged.  Every node is pinned to ``pe`` and placed in its group.
"""

from sw.spec.isa import Op

__all__ = ["imm_node", "ctx_address", "chain", "store_stream"]


def imm_node(g, trigger, value, pe):
    n = g.add(Op.IMM, imm=value, pe=pe, group=pe)
    g.connect(trigger, n, 0)
    return n


def ctx_address(g, c, base, shift, pe):
    """Return a node computing ``base + (c << shift)``."""
    sh = g.add(Op.SHL, 1, imm=shift, pe=pe, group=pe)
    g.connect(c, sh, 0)
    a = g.add(Op.ADD, 1, imm=base, pe=pe, group=pe)
    g.connect(sh, a, 0)
    return a


def chain(g, src, steps, pe):
    """Return the last node of a chain of one-operand ``steps`` ``(op, imm)`` fed by ``src``."""
    for op, imm in steps:
        n = g.add(op, 1, imm=imm, pe=pe, group=pe)
        g.connect(src, n, 0)
        src = n
    return src


def store_stream(g, addr, value, op, offset, count, pe):
    """Store ``count`` tokens of ``value`` at ``addr``'s tokens + ``offset``; END when all are in.

    A FACC counts the stores' acknowledgements (its two operands: the ack token, twice) and
    emits once after ``count`` of them; a MOV with END then ends the context.
    """
    st = g.add(op, imm=offset, pe=pe, group=pe)
    g.connect(addr, st, 0)
    g.connect(value, st, 1)
    acks = g.add(Op.FACC, imm=count, pe=pe, group=pe)
    g.fanout(st, [(acks, 0), (acks, 1)])
    done = g.add(Op.MOV, end=True, pe=pe, group=pe)
    g.connect(acks, done, 0)
