"""Packed bit-field layouts shared by the software and the hardware.

A :class:`Layout` is an ordered list of named fields, the first at bit 0.  The software packs
and unpacks Python integers with it; the hardware turns the same object into an Amaranth
``data.StructLayout`` (:meth:`Layout.struct_fields` keeps the order, and ``StructLayout``
places fields in that order from bit 0), so an encoder in ``sw`` and a decoder in ``hw`` cannot
disagree on a position.
"""

from dataclasses import dataclass

from sw.spec.errors import FdpuError

__all__ = ["Field", "Layout"]


@dataclass(frozen=True)
class Field:
    """One field: its name, width in bits and whether it holds a two's-complement value."""
    name: str
    width: int
    signed: bool = False


class Layout:
    """An ordered set of fields packed from bit 0 upwards, padded to ``width`` bits.

    Parameters
    ----------
    name : str
        What the layout describes, for error messages.
    fields : iterable of Field
        The fields, least-significant first.
    width : int, optional
        The total width; at least the sum of the field widths (default: exactly that).
    """

    def __init__(self, name, fields, width=None):
        self.name = name
        self.fields = tuple(fields)
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: duplicate field names in {names}")
        self.offsets = {}
        offset = 0
        for f in self.fields:
            if f.width < 1:
                raise ValueError(f"{name}: field {f.name} has width {f.width}")
            self.offsets[f.name] = offset
            offset += f.width
        self.used = offset
        self.width = offset if width is None else width
        if self.width < offset:
            raise ValueError(f"{name}: fields need {offset} bits, more than width {width}")
        self._by_name = {f.name: f for f in self.fields}

    def __repr__(self):
        inner = ", ".join(f"{f.name}:{f.width}" for f in self.fields)
        return f"Layout({self.name!r}, [{inner}], width={self.width})"

    def field(self, name):
        """Return the :class:`Field` called ``name``."""
        return self._by_name[name]

    def struct_fields(self):
        """Return ``{name: width}`` in bit order, plus padding, for ``data.StructLayout``."""
        fields = {f.name: f.width for f in self.fields}
        if self.width > self.used:
            fields["_pad"] = self.width - self.used
        return fields

    def pack(self, **values):
        """Return the integer holding ``values``; omitted fields are 0.

        Raises :class:`~sw.spec.errors.FdpuError` for an unknown field or a value that does not fit.
        """
        word = 0
        for name, value in values.items():
            f = self._by_name.get(name)
            if f is None:
                raise FdpuError(f"{self.name} has no field {name!r} "
                                f"(fields: {', '.join(self._by_name)})")
            value = int(value)
            lo, hi = (-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed \
                else (0, (1 << f.width) - 1)
            if not lo <= value <= hi:
                raise FdpuError(f"{self.name}.{name} = {value} does not fit its {f.width}-bit "
                                f"{'signed ' if f.signed else ''}field ({lo}..{hi})")
            word |= (value & ((1 << f.width) - 1)) << self.offsets[name]
        return word

    def unpack(self, word):
        """Return ``{name: value}`` of every field of the integer ``word``."""
        word = int(word)
        if not 0 <= word < 1 << self.width:
            raise FdpuError(f"{self.name} word {word:#x} is wider than {self.width} bits")
        out = {}
        for f in self.fields:
            value = (word >> self.offsets[f.name]) & ((1 << f.width) - 1)
            if f.signed and value >> (f.width - 1):
                value -= 1 << f.width
            out[f.name] = value
        return out
