"""The DMA descriptor: one definition for the hardware that reads it and the host that writes it.

A descriptor is :data:`DESC_BYTES` bytes of external memory, two little-endian 64-bit words,
read by :mod:`hw.ctrl.dma` (one ``data.View`` of :func:`descriptor_layout`) and written by
:mod:`tb.host.job_plan` (:func:`pack_descriptor`):

========  =======  ==========================================================================
field     bits     meaning
========  =======  ==========================================================================
ext       0..31    external byte address; with ``move`` the global Dbuf address of the source
                   (word 0)
local     32..63   global Dbuf address (:mod:`sw.spec.arch`) or, with ``cbuf``, byte offset
                   into the Cbufs (word 0)
length    64..94   bytes to move (word 1; 31 bits: no range of the chip is 2 GiB)
out       95       direction: chip to external memory (else external memory to chip)
cbuf      96       ``local`` is in the Cbufs (IN only)
move      97       Dbuf to Dbuf on chip: the words at Dbuf address ``ext`` go to ``local`` (and
                   its ``copies``) with no external-memory traffic; not with ``out`` or ``cbuf``
mcast     98       edge multicast (IN or MOVE into the Dbufs): each word is one MSTORE flit
                   to the Dbuf ``k`` of ``local`` and one to each Dbuf of ``copies``, which the
                   mesh also writes into every Dbuf of
                   :meth:`sw.spec.arch.ArrayParams.multicast_dbufs` from the channel's port
                   to that target (:func:`edge_targets`); one MLOAD per target after the last
                   word collects one acknowledgement per Dbuf.  One read, one flit a word and
                   target
copies    99..127  multicast (IN or MOVE into the Dbufs): bit ``i`` set writes every word also
                   to Dbuf ``k + 1 + i`` at the same offset, ``k`` being the Dbuf of ``local``;
                   0 writes Dbuf ``k`` only.  One read, ``1 + popcount`` STOREs
========  =======  ==========================================================================

:class:`DescFlag` names the four flag bits as they sit above ``length`` in word 1 (``OUT`` = 1,
``CBUF`` = 2, ``MOVE`` = 4, ``MCAST`` = 8), the form the simulation host's job files carry.
:data:`COPIES_BITS` is the width of ``copies``: one descriptor reaches ``1 + COPIES_BITS``
consecutive Dbufs at most.  A MOVE whose source range overlaps one of its destination ranges
is undefined (the hardware does not check it): the host must not write one.
"""

import enum

from sw.spec.bitfields import Field, Layout

__all__ = ["DESC_BYTES", "WORD_BITS", "COPIES_BITS", "DescFlag", "descriptor_layout",
           "pack_descriptor", "unpack_descriptor", "copy_targets", "edge_targets",
           "written_dbufs"]

#: Bits of one external-memory word (one DMA beat); a descriptor is two of them.
WORD_BITS = 64

#: Bytes of one descriptor in external memory (descriptor lists are this aligned).
DESC_BYTES = 16

#: Bits of the ``copies`` field (the multicast mask).
COPIES_BITS = 29

#: Bits of ``length``.
_LENGTH_BITS = 31

_LAYOUT = Layout("DMA descriptor", [Field("ext", 32), Field("local", 32), Field("length", _LENGTH_BITS),
                                    Field("out", 1), Field("cbuf", 1),
                                    Field("move", 1), Field("mcast", 1),
                                    Field("copies", COPIES_BITS)],
                 width=DESC_BYTES * 8)


def descriptor_layout():
    """Return the :class:`~sw.spec.bitfields.Layout` of a descriptor (both words, word 0 low)."""
    return _LAYOUT


class DescFlag(enum.IntFlag):
    """The flag bits of a descriptor, counted from the first bit above ``length``."""
    OUT = 1 << (_LAYOUT.offsets["out"] - _LAYOUT.offsets["length"] - _LENGTH_BITS)
    CBUF = 1 << (_LAYOUT.offsets["cbuf"] - _LAYOUT.offsets["length"] - _LENGTH_BITS)
    MOVE = 1 << (_LAYOUT.offsets["move"] - _LAYOUT.offsets["length"] - _LENGTH_BITS)
    MCAST = 1 << (_LAYOUT.offsets["mcast"] - _LAYOUT.offsets["length"] - _LENGTH_BITS)


def pack_descriptor(ext, local, length, flags=DescFlag(0), copies=0):
    """Return the two 64-bit words of a descriptor (word 0 first).

    Raises :class:`~sw.spec.errors.FdpuError` for a field that does not fit.
    """
    flags = DescFlag(flags)
    word = _LAYOUT.pack(ext=ext, local=local, length=length, out=DescFlag.OUT in flags,
                        cbuf=DescFlag.CBUF in flags, move=DescFlag.MOVE in flags,
                        mcast=DescFlag.MCAST in flags, copies=copies)
    mask = (1 << WORD_BITS) - 1
    return [word & mask, word >> WORD_BITS]


def unpack_descriptor(words):
    """Return ``(ext, local, length, flags, copies)`` of the two words of a descriptor."""
    w0, w1 = (int(w) for w in words)
    f = _LAYOUT.unpack(w0 | w1 << WORD_BITS)
    flags = DescFlag(0)
    for name, flag in (("out", DescFlag.OUT), ("cbuf", DescFlag.CBUF), ("move", DescFlag.MOVE),
                       ("mcast", DescFlag.MCAST)):
        if f[name]:
            flags |= flag
    return f["ext"], f["local"], f["length"], flags, f["copies"]


def copy_targets(first, copies):
    """Return the target Dbufs of an IN or MOVE descriptor whose ``local`` is in Dbuf
    ``first``, in the order the DMA sends each word to them (without ``mcast``: the Dbufs it
    writes)."""
    return [first] + [first + 1 + i for i in range(COPIES_BITS) if copies >> i & 1]


def written_dbufs(params, port, first, copies=0, mcast=False):
    """Return the Dbufs a good IN or MOVE descriptor (``local`` in Dbuf ``first``) run by the
    DMA channel at edge port ``port`` writes, each once, in the order its flits reach them:
    its :func:`copy_targets`, and with ``mcast`` every Dbuf of :func:`edge_targets` of each
    of them."""
    out = []
    for t in copy_targets(first, copies):
        for d in edge_targets(params, port, t) if mcast else [t]:
            if d not in out:
                out.append(d)
    return out


def edge_targets(params, port, first):
    """Return the Dbufs an ``mcast`` descriptor whose ``local`` is in Dbuf ``first`` writes
    when run by the DMA channel at edge port ``port`` (a Dbuf number), in the order the mesh
    passes them: :meth:`sw.spec.arch.ArrayParams.multicast_dbufs` from the router next to
    the port to Dbuf ``first``."""
    return params.multicast_dbufs(params.edge_router(port), params.dbuf_coord(first))
