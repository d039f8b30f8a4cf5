"""Flits of the PE bench as integers, packed with the layouts of :mod:`sw.spec.packet`.

Everything here is plain Python (no cocotb), so the pytest layer can use it too.
"""

from sw.spec.packet import ConfigWhat, Kind, bias, flit_layout, unbias

__all__ = ["pack", "unpack", "kind_of", "operand", "config_flits", "reply"]

BCAST = 0x0001_0001_0001_0001


def pack(kind, params, **fields):
    """Return the flit of ``kind`` holding ``fields`` (coordinates already biased)."""
    return flit_layout(kind, params).pack(kind=int(kind), **fields)


def kind_of(word):
    """Return the :class:`~sw.spec.packet.Kind` of a flit."""
    return Kind(word & 0b111)


def unpack(word, params):
    """Return ``(kind, {field: value})`` of a flit."""
    kind = kind_of(word)
    return kind, flit_layout(kind, params).unpack(word)


def operand(params, x, y, slot, operand_, data):
    """Return an OPERAND flit for ``(x, y).slot.operand_``."""
    return pack(Kind.OPERAND, params, dst_x=bias(x), dst_y=bias(y), slot=slot,
                operand=operand_, data=data & ((1 << 64) - 1))


def config_flits(image, x, y):
    """Return the CONFIG flits that load PE ``(x, y)`` of ``image`` (MicC order).

    Instruction parts of every configured slot, then every non-zero register, then the
    preloads (initial tokens of feedback edges) in image order.
    """
    p = image.params
    out = []

    def cfg(what, index, slot, data):
        out.append(pack(Kind.CONFIG, p, dst_x=bias(x), dst_y=bias(y), what=int(what),
                        index=index, slot=slot, data=int(data)))

    for s in range(p.slots):
        parts = [int(v) for v in image.program[y, x, s]]
        if any(parts):
            # Part 0 last: it carries the opcode, which makes the slot live.
            for i in reversed(range(len(parts))):
                cfg(ConfigWhat.INSN, i, s, parts[i])
    for r in range(p.regs):
        if int(image.regs[y, x, r]):
            cfg(ConfigWhat.REG, r, 0, image.regs[y, x, r])
    for px, py, s, o, v in image.preloads:
        if (px, py) == (x, y):
            cfg(ConfigWhat.PRELOAD, o, s, v)
    return out


def reply(params, req, data, err=0):
    """Return the REPLY flit answering the LOAD/STORE fields ``req``."""
    return pack(Kind.REPLY, params, dst_x=req["src_x"], dst_y=req["src_y"], slot=req["slot"],
                tag=req["tag"], err=err, data=data & ((1 << 64) - 1))


def coord(field_x, field_y):
    """Return the unbiased ``(x, y)`` of two biased wire fields."""
    return unbias(field_x), unbias(field_y)
