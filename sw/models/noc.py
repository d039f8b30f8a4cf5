"""Reference models for the mesh and the Dbufs: traffic patterns, flit packing, a Dbuf.

Plain Python (no ``hw`` import): the cocotb benches and ``fdpu noc-bench`` use it as the
golden side.

* :data:`PATTERNS` and :func:`pattern_dest`: the synthetic traffic patterns (the HDL traffic
  generator of the benchmark implements the same rules).
* :func:`pack_flit` / :func:`unpack_flit`: a whole flit as an integer, with the
  :mod:`sw.spec.packet` layouts (``body`` carried as an integer of the remaining bits).
* :class:`DbufModel`: what a Dbuf answers to a LOAD or STORE (:mod:`hw.noc.dbuf` contract).
"""

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.packet import Kind, body_layout, flit_width, header_layout

__all__ = ["PATTERNS", "pattern_dest", "pack_flit", "unpack_flit", "DbufModel"]

#: Synthetic traffic patterns: name -> one-line description.
PATTERNS = {
    "uniform": "every destination PE equally likely (the source included)",
    "transpose": "(x, y) -> (y, x); square arrays only",
    "bitcomp": "bit-complement: (x, y) -> (cols-1-x, rows-1-y)",
    "hotspot": "1/4 of the flits to the centre PE (cols//2, rows//2), the rest uniform",
    "neighbor": "(x, y) -> ((x+1) mod cols, y)",
}


def pattern_dest(pattern, params, x, y, rng):
    """Return the destination PE ``(x, y)`` of a flit from PE ``(x, y)`` under ``pattern``.

    Raises
    ------
    FdpuError
        For an unknown pattern, or transpose on a non-square array.
    """
    cols, rows = params.cols, params.rows
    if pattern == "uniform":
        return rng.randrange(cols), rng.randrange(rows)
    if pattern == "transpose":
        if cols != rows:
            raise FdpuError(f"pattern transpose needs a square array, not {rows}x{cols}")
        return y, x
    if pattern == "bitcomp":
        return cols - 1 - x, rows - 1 - y
    if pattern == "hotspot":
        if rng.random() < 0.25:
            return cols // 2, rows // 2
        return rng.randrange(cols), rng.randrange(rows)
    if pattern == "neighbor":
        return (x + 1) % cols, y
    raise FdpuError(f"pattern {pattern!r} is unknown; allowed: {', '.join(PATTERNS)}")


def pack_flit(params, kind, dst, body=0, *, width=None):
    """Return the integer of a flit to coordinate ``dst`` (unbiased) with an integer ``body``."""
    header = header_layout(params)
    width = flit_width(params) if width is None else width
    word = header.pack(kind=int(kind), dst_x=dst[0] + 1, dst_y=dst[1] + 1)
    if body >> (width - header.width):
        raise FdpuError(f"flit body {body:#x} does not fit {width - header.width} bits")
    return word | body << header.width


def unpack_flit(params, word):
    """Return ``(kind, (dst_x, dst_y), body)`` of a flit integer (coordinates unbiased)."""
    header = header_layout(params)
    fields = header.unpack(word & ((1 << header.width) - 1))
    return Kind(fields["kind"]), (fields["dst_x"] - 1, fields["dst_y"] - 1), \
        word >> header.width


class DbufModel:
    """The answers of Dbuf ``index`` of ``params`` (a sparse byte memory, zero initially)."""

    def __init__(self, params=ArrayParams(), index=0):
        self.params, self.index = params, index
        self.bytes = {}

    def access(self, kind, addr, size, bcast=0, data=0):
        """Apply one request; return ``(err, data)`` of its REPLY."""
        p = self.params
        nbytes = 1 << size
        is_load, is_store = kind == Kind.LOAD, kind == Kind.STORE
        err = (not (is_load or is_store) or addr // p.dbuf_bytes != self.index
               or size == 0 or addr % nbytes or (is_load and bcast and size != 1))
        if err:
            return 1, 0
        if is_store:
            for i in range(nbytes):
                self.bytes[addr + i] = (data >> (8 * i)) & 0xFF
            return 0, 0
        value = sum(self.bytes.get(addr + i, 0) << (8 * i) for i in range(nbytes))
        if bcast:
            value = value * 0x0001_0001_0001_0001
        return 0, value

    def reply(self, request):
        """Return the REPLY flit integer of a LOAD/STORE flit integer ``request``."""
        p = self.params
        kind, _, body = unpack_flit(p, request)
        layout = body_layout(Kind.STORE, p)
        fields = layout.unpack(body & ((1 << layout.width) - 1))
        err, value = self.access(kind, fields["addr"], fields["size"], fields["bcast"],
                                 fields["data"] if kind == Kind.STORE else 0)
        reply = body_layout(Kind.REPLY, p).pack(slot=fields["slot"], tag=fields["tag"],
                                                err=err, data=value)
        return pack_flit(p, Kind.REPLY, (fields["src_x"] - 1, fields["src_y"] - 1), reply)
