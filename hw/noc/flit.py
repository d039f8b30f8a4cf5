"""Amaranth layouts of the mesh flits, derived from :mod:`sw.spec.packet` and :mod:`sw.spec.arch`.

Nothing here defines a bit position: every layout is built from the ``sw`` layouts with
:meth:`sw.spec.bitfields.Layout.struct_fields`, so the hardware and the software cannot disagree.

* :func:`flit_layout` is what the routers carry: the header (``kind``, ``dst_x``, ``dst_y``,
  biased coordinates) and an opaque ``body``.  Its width is :func:`sw.spec.packet.flit_width` by
  default; a narrower ``width`` (at least the header plus one bit) gives small meshes for tests
  and benchmarks that carry a private body.
* :func:`body_layout` is the ``body`` of one :class:`sw.spec.packet.Kind`, and
  :func:`body_view` views a flit's ``body`` through it (``body_view(flit, Kind.LOAD, p).addr``).
  The body stays plain bits in :func:`flit_layout`: every signal of a layout shape gets a
  named wire per field in the Verilog, and a union of every kind's fields on each of the
  mesh's hundreds of flit signals doubled the system's Verilog and its build time.
* :data:`FlitKind` is :class:`sw.spec.packet.Kind` as an Amaranth enum with its 3-bit shape.
* :func:`is_request` is :func:`sw.spec.packet.net_of` in hardware.
"""

from amaranth.hdl import C, Shape
from amaranth.lib import data

from hw.lib.spec import check_params, shaped_enum
from sw.spec.arch import ArrayParams
from sw.spec.packet import Kind, Net
from sw.spec.packet import body_layout as _sw_body_layout
from sw.spec.packet import flit_width
from sw.spec.packet import header_layout as _sw_header_layout
from sw.spec.packet import net_of

__all__ = ["Bits", "FlitKind", "header_layout", "flit_layout", "body_layout", "body_view",
           "default_width", "is_request"]

_KIND_BITS = _sw_header_layout(ArrayParams(rows=1, cols=1)).field("kind").width


#: :class:`sw.spec.packet.Kind` as an Amaranth enum with its 3-bit shape (same names, values).
FlitKind = shaped_enum(Kind, _KIND_BITS, name="FlitKind", module=__name__)


def header_layout(params):
    """Return the ``StructLayout`` of the flit header (``kind`` as :data:`FlitKind`)."""
    check_params(params)
    fields = _sw_header_layout(params).struct_fields()
    fields["kind"] = FlitKind
    return data.StructLayout(fields)


def default_width(params):
    """Return the flit width of ``params`` (:func:`sw.spec.packet.flit_width`)."""
    check_params(params)
    return flit_width(params)


def _body_bits(params, width):
    header = header_layout(params)
    width = default_width(params) if width is None else width
    if not isinstance(width, int) or isinstance(width, bool) or width <= header.size:
        raise TypeError(f"width must be an integer larger than the {header.size}-bit header, "
                        f"not {width!r}")
    return width - header.size


def flit_layout(params, width=None):
    """Return the ``StructLayout`` of a whole flit: the header fields, then ``body`` (plain
    bits; :func:`body_view` reads it as one kind's fields).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Sizes the coordinates.
    width : int, optional
        Flit width in bits; default :func:`default_width`.  Must exceed the header width; a
        narrower flit than the default gives small meshes for tests and benchmarks that carry
        a private body.

    Raises
    ------
    TypeError
        If ``width`` is not an integer larger than the header.
    """
    header = header_layout(params)
    return data.StructLayout({**{name: field.shape for name, field in header},
                              "body": _body_bits(params, width)})


def body_layout(kind, params, width=None):
    """Return the ``StructLayout`` of the body of a flit of ``kind``, padded to the ``body``
    of :func:`flit_layout` ``(params, width)`` (:func:`body_view` reads a flit through it)."""
    body = _body_bits(params, width)
    fields = _sw_body_layout(Kind(getattr(kind, "value", kind)), params).struct_fields()
    used = sum(fields.values())
    if used > body:
        raise TypeError(f"a {Kind(getattr(kind, 'value', kind)).name} body needs {used} bits, "
                        f"more than the {body}-bit body of this flit width")
    if used < body:
        fields["_pad"] = fields.pop("_pad", 0) + body - used
    return data.StructLayout(fields)


def body_view(flit, kind, params):
    """Return the ``body`` of ``flit`` (a :func:`flit_layout` view of ``params``) as a
    ``data.View`` of the fields of ``kind`` (:func:`body_layout`)."""
    width = header_layout(params).size + len(flit.body)
    return data.View(body_layout(kind, params, width), flit.body)


class Bits:
    """Comparisons of an unsigned value with constants, written bit by bit.

    Amaranth trims the constant of ``value > 2`` to its own width, which Verilator reports as
    WIDTHEXPAND; single-bit logic has no widths to disagree on.
    """

    def __init__(self, value):
        self.value = value
        self._cache = {}

    def _compare(self, other):
        if not isinstance(other, int):
            raise TypeError("only integer constants are compared bit by bit")
        if other not in self._cache:
            self._cache[other] = self._chain(other)
        return self._cache[other]

    def _chain(self, other):
        bits = len(self.value)
        if other >= 1 << bits:
            return C(0, 1), C(1, 1), C(0, 1)        # value is below other
        less, greater, equal = C(0, 1), C(0, 1), C(1, 1)
        for i in reversed(range(bits)):
            bit = self.value[i]
            if other >> i & 1:
                less = less | (equal & ~bit)
                equal = equal & bit
            else:
                greater = greater | (equal & bit)
                equal = equal & ~bit
        return equal, less, greater

    def __eq__(self, other):
        return self._compare(other)[0]

    def __lt__(self, other):
        return self._compare(other)[1]

    def __gt__(self, other):
        return self._compare(other)[2]

    __hash__ = None


def is_request(kind):
    """Return a 1-bit value: whether a :data:`FlitKind` value travels on the request network."""
    requests = [FlitKind[k.name] for k in Kind if net_of(k) is Net.REQUEST]
    value = Bits(kind.as_value() if hasattr(kind, "as_value") else kind)
    result = C(0, 1)
    for member in requests:
        result = result | (value == member.value)
    return result


def header_bits(params):
    """Return the width of the header in bits."""
    return Shape.cast(header_layout(params)).width
