"""Packets on the mesh: one flit each, one source of truth for ``hw`` and ``sw``.

Every packet is a single flit of :func:`flit_width` bits: a header that the routers read
(``kind``, and the destination ``dst_x``, ``dst_y``, biased by one as in :mod:`sw.spec.arch`) and a
body whose fields depend on ``kind``.  Routers look at nothing but the header (and at
:func:`net_of` to keep requests and replies apart); the body is carried untouched.

========  ==================  ===========================================================
kind      from -> to          body
========  ==================  ===========================================================
OPERAND   PE/MicC -> PE       ``slot``, ``operand``, ``data`` (64): a token for an operand
LOAD      PE -> Dbuf          ``addr``, ``size``, ``bcast``, reply-to ``src_x``/``src_y``
                              (biased), ``slot``, ``tag``
STORE     PE -> Dbuf          as LOAD, plus ``data``
REPLY     Dbuf -> PE          ``slot``, ``tag``, ``err``, ``data``: load data or store ack
CONFIG    MicC -> PE          ``what`` (instruction part, register, preload), ``index``
                              (part, register or operand), ``slot``, ``data``
CTX_END   PE -> MicC          ``data`` (the low 32 bits: context ID of the firing, if any),
                              ``count`` (16): the END messages the flit stands for (v1.2)
MSTORE    DMA -> Dbufs        as STORE: an *edge-multicast* STORE, posted (no reply)
MLOAD     DMA -> Dbufs        as LOAD: an edge-multicast LOAD, one REPLY from each Dbuf
========  ==================  ===========================================================

Edge multicast (MSTORE, MLOAD, v1.3): the flit is routed to its destination Dbuf like any
other, and every router of its route that lies on that Dbuf's edge line (row 0 for a north
Dbuf, the last row for a south one, column 0 for a west one, the last column for an east
one) also sends a copy out of its edge port: every Dbuf of
:meth:`sw.spec.arch.ArrayParams.multicast_dbufs` takes it, at the same offset (``addr``'s
offset in its Dbuf; ``addr``'s Dbuf number is the destination's).  An MSTORE is *posted*: no
Dbuf answers it.  An MLOAD is answered by each Dbuf it reaches, after every request that
reached that Dbuf before it; since the copies of one source's multicast flits follow that
source's unicast path to each Dbuf, in order, an MLOAD after MSTOREs of the same route is
their acknowledgement (the DMA's, :mod:`hw.ctrl.dma`).  A Dbuf that cannot write a posted
STORE (bad size or alignment) reports it in the ``err`` of its next MLOAD reply.

``CTX_END.count``: a PE whose reply output is blocked merges END messages of one
context into one flit; ``count`` is how many (1 ..  ``2**16 - 1``).  A ``count`` of 0 counts
as 1, so a v1.1 sender that leaves the field zero stays correct.  The MicC adds ``count`` to
the context's end counter; :func:`end_count` is that rule in Python.

:func:`pack_flit` / :func:`unpack_flit` / :func:`flit_fields` are the one packer of flits as
integers (testbenches, runtime, MicC and Dbuf models): destinations unbiased ``(x, y)``, the
body as named fields or as raw bits.

``size`` is log2 of the access bytes (1, 2 or 3 for 2, 4 or 8 bytes); ``bcast`` asks the Dbuf
to broadcast a 2-byte value to the four binary16 lanes (``LDHB``).  ``tag`` numbers the
outstanding loads/stores of one slot so the PE can put replies back in issue order.

Networks (protocol deadlock freedom, ``docs/noc.md``): LOAD and STORE travel on the *request*
network, everything else on the *reply* network; a Dbuf always sinks requests because its
replies never wait for requests.
"""

import enum

from sw.spec.bitfields import Field, Layout
from sw.spec.errors import FdpuError

__all__ = ["Kind", "MULTICAST", "Net", "ConfigWhat", "TAG_BITS", "header_layout", "body_layout",
           "flit_layout", "flit_width", "net_of", "bias", "unbias", "END_COUNT_BITS",
           "end_count", "pack_flit", "unpack_flit", "flit_fields"]

#: Bits of the per-slot tag of outstanding memory accesses.
TAG_BITS = 4

#: Bits of the ``count`` field of a CTX_END flit.
END_COUNT_BITS = 16


class Kind(enum.IntEnum):
    """What a flit is."""
    OPERAND = 0
    LOAD = 1
    STORE = 2
    REPLY = 3
    CONFIG = 4
    CTX_END = 5
    MSTORE = 6
    MLOAD = 7


#: The edge-multicast kinds (module doc) and the unicast kind each behaves as in a Dbuf.
MULTICAST = {Kind.MSTORE: Kind.STORE, Kind.MLOAD: Kind.LOAD}


class Net(enum.IntEnum):
    """The two networks (physical or virtual) that keep requests and replies apart."""
    REQUEST = 0
    REPLY = 1


class ConfigWhat(enum.IntEnum):
    """What a CONFIG flit writes."""
    INSN = 0      # 64-bit part ``index`` of the instruction word of ``slot``
    REG = 1       # local register ``index``
    PRELOAD = 2   # an initial token for operand ``index`` of ``slot`` (feedback edges, loops)


def bias(coordinate):
    """Return the wire form of a coordinate (``-1`` -> 0)."""
    return coordinate + 1


def unbias(value):
    """Return the coordinate of its wire form (0 -> ``-1``)."""
    return value - 1


def end_count(count):
    """Return the END messages a CTX_END flit with ``count`` in its ``count`` field stands for.

    0 counts as 1 (a v1.1 flit, which leaves the field zero).
    """
    return count or 1


def net_of(kind):
    """Return the :class:`Net` that carries flits of ``kind``."""
    kind = MULTICAST.get(Kind(kind), Kind(kind))
    return Net.REQUEST if kind in (Kind.LOAD, Kind.STORE) else Net.REPLY


def header_layout(params):
    """Return the layout of the flit header (the low bits of every flit)."""
    return Layout("flit header", [Field("kind", 3), Field("dst_x", params.x_bits),
                                  Field("dst_y", params.y_bits)])


def body_layout(kind, params):
    """Return the layout of the body of a flit of ``kind``."""
    kind = MULTICAST.get(Kind(kind), Kind(kind))
    slot = Field("slot", params.slot_bits)
    data = Field("data", params.TOKEN_BITS)
    if kind is Kind.OPERAND:
        fields = [slot, Field("operand", 2), data]
    elif kind in (Kind.LOAD, Kind.STORE):
        fields = [Field("addr", params.ADDR_BITS), Field("size", 2), Field("bcast", 1),
                  Field("src_x", params.x_bits), Field("src_y", params.y_bits), slot,
                  Field("tag", TAG_BITS)]
        if kind is Kind.STORE:
            fields.append(data)
    elif kind is Kind.REPLY:
        fields = [slot, Field("tag", TAG_BITS), Field("err", 1), data]
    elif kind is Kind.CONFIG:
        fields = [Field("what", 2), Field("index", max(params.reg_bits, 2)), slot, data]
    else:
        fields = [data, Field("count", END_COUNT_BITS)]
    return Layout(f"{kind.name} body", fields)


def flit_width(params):
    """Return the bits of one flit: the header plus the widest body."""
    return header_layout(params).width + max(body_layout(k, params).width for k in Kind)


def flit_layout(kind, params):
    """Return the full layout (header then body, padded to :func:`flit_width`) of ``kind``."""
    header, body = header_layout(params), body_layout(kind, params)
    return Layout(f"{Kind(kind).name} flit", header.fields + body.fields,
                  width=flit_width(params))


def pack_flit(params, kind, dst, body=0, *, width=None, **fields):
    """Return the integer of a flit of ``kind`` to ``dst``.

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
    kind : Kind
    dst : (int, int)
        Destination ``(x, y)``, not biased (the MicC's edge port at ``(-1, 0)`` included).
    body : int
        The body as raw bits (traffic whose body nobody reads); or, instead,
    **fields
        the named fields of :func:`body_layout` of ``kind`` (absent fields are 0).
    width : int, optional
        Flit width; default :func:`flit_width` (a mesh bench may carry narrower flits).

    Raises
    ------
    FdpuError
        For a field that ``kind`` does not have or a value that does not fit, both ``body``
        and ``fields``, or a body wider than the flit.
    """
    header = header_layout(params)
    width = flit_width(params) if width is None else width
    if fields:
        if body:
            raise FdpuError(f"a {Kind(kind).name} flit takes its body as raw bits or as "
                            f"fields, not both (body {body:#x}, fields {sorted(fields)})")
        body = body_layout(kind, params).pack(**fields)
    if body >> (width - header.width):
        raise FdpuError(f"flit body {body:#x} does not fit {width - header.width} bits")
    return header.pack(kind=int(kind), dst_x=bias(dst[0]), dst_y=bias(dst[1])) \
        | body << header.width


def unpack_flit(params, word):
    """Return ``(kind, (x, y), body)`` of a flit integer: destination unbiased, body raw bits."""
    header = header_layout(params)
    fields = header.unpack(word & ((1 << header.width) - 1))
    return (Kind(fields["kind"]), (unbias(fields["dst_x"]), unbias(fields["dst_y"])),
            word >> header.width)


def flit_fields(params, word):
    """Return ``(kind, (x, y), {field: value})`` of a flit integer (body fields as stored:
    ``src_x``/``src_y`` of LOAD/STORE stay biased)."""
    kind, dst, body = unpack_flit(params, word)
    layout = body_layout(kind, params)
    return kind, dst, layout.unpack(body & ((1 << layout.width) - 1))
