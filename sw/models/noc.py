"""Reference models for the mesh and the Dbufs: traffic patterns and the Dbuf.

Plain Python (no ``hw`` import): the cocotb benches and ``fdpu noc-bench`` use it as the
golden side.

* :data:`PATTERNS` and :func:`pattern_dest`: the synthetic traffic patterns (the HDL traffic
  generator of the benchmark implements the same rules).
* :class:`DbufModel`: what a Dbuf answers to a LOAD or STORE (:mod:`hw.noc.dbuf` contract).
"""

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.packet import MULTICAST, Kind, body_layout, pack_flit, unbias, unpack_flit

__all__ = ["PATTERNS", "pattern_dest", "BROADCAST", "DbufModel"]

#: A 16-bit value times this is that value in the four binary16 lanes of a token (``LDHB``).
BROADCAST = 0x0001_0001_0001_0001

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


class DbufModel:
    """What Dbuf ``index`` of ``params`` answers to LOAD and STORE flits (:mod:`hw.noc.dbuf`).

    Its bytes start at 0 (allocated on the first write); addresses are global, as in the
    flits.  A request answers ``err`` 1 and data 0 when it is not a LOAD or STORE, its address
    is outside this Dbuf or misaligned for its size, its ``size`` is 0 (1 byte), or it is a
    broadcast load (``bcast``, ``LDHB``) of another size than 2 bytes; a load returns the
    little-endian value read, broadcast to the four 16-bit lanes with ``bcast``; a store
    returns 0.  The edge-multicast kinds (:data:`sw.spec.packet.MULTICAST`) act as LOAD and
    STORE at their address's offset in this Dbuf; an MSTORE is posted (:meth:`reply` returns
    None) and its error is reported by the next MLOAD.  The one Dbuf model of the project:
    the Dbuf, NoC, PE and array benches use it.
    """

    def __init__(self, params=ArrayParams(), index=0):
        self.params, self.index = params, index
        self.base = index * params.dbuf_bytes
        self.data = None                 # bytearray(dbuf_bytes) from the first write
        self.posted_err = 0              # an MSTORE failed since the last MLOAD

    def reset(self):
        """Apply a reset: the posted-store error flag clears (a register); the bytes stay (an
        SRAM)."""
        self.posted_err = 0

    def _buf(self):
        if self.data is None:
            self.data = bytearray(self.params.dbuf_bytes)
        return self.data

    def load(self, segments):
        """Write the bytes of ``segments`` (``{global address: bytes}``) that fall in this Dbuf."""
        end = self.base + self.params.dbuf_bytes
        for addr, data in dict(segments).items():
            lo, hi = max(addr, self.base), min(addr + len(data), end)
            if lo < hi:
                self._buf()[lo - self.base:hi - self.base] = data[lo - addr:hi - addr]

    def contents(self):
        """Return the Dbuf's bytes (``dbuf_bytes`` of them)."""
        return bytes(self.data) if self.data is not None else bytes(self.params.dbuf_bytes)

    def access(self, kind, addr, size, bcast=0, data=0):
        """Apply one request; return ``(err, data)`` of its REPLY."""
        p = self.params
        nbytes = 1 << size
        multicast = kind in MULTICAST
        if multicast:
            addr = self.base + addr % p.dbuf_bytes
            kind = MULTICAST[kind]
        is_load, is_store = kind == Kind.LOAD, kind == Kind.STORE
        err = (not (is_load or is_store) or addr // p.dbuf_bytes != self.index
               or size == 0 or addr % nbytes or (is_load and bcast and size != 1))
        if multicast and is_load:
            err, self.posted_err = err or self.posted_err, 0
        if err:
            if multicast and is_store:
                self.posted_err = 1
            return 1, 0
        offset = addr - self.base
        if is_store:
            self._buf()[offset:offset + nbytes] = (data & ((1 << (8 * nbytes)) - 1)).to_bytes(
                nbytes, "little")
            return 0, 0
        if self.data is None:
            return 0, 0
        value = int.from_bytes(self.data[offset:offset + nbytes], "little")
        if bcast:
            value = value * BROADCAST
        return 0, value

    def reply(self, request):
        """Return the REPLY flit integer of a LOAD/STORE flit integer ``request`` (None for a
        posted MSTORE)."""
        kind, _, body = unpack_flit(self.params, request)
        layout = body_layout(Kind.STORE, self.params)      # LOAD's fields, then ``data``
        f = layout.unpack(body & ((1 << layout.width) - 1))
        err, value = self.access(kind, f["addr"], f["size"], f["bcast"],
                                 f["data"] if kind in (Kind.STORE, Kind.MSTORE) else 0)
        if kind == Kind.MSTORE:
            return None
        return pack_flit(self.params, Kind.REPLY, (unbias(f["src_x"]), unbias(f["src_y"])),
                         slot=f["slot"], tag=f["tag"], err=err, data=value)
