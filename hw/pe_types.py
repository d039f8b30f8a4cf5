"""Amaranth payload layouts of the processing element, derived from :mod:`sw.isa`/:mod:`sw.packet`.

Every layout here is built from the one source of truth (:func:`sw.isa.insn_layout`,
:func:`sw.packet.flit_layout`) through :meth:`sw.bitfields.Layout.struct_fields`, so the
bit positions the PE decodes are the ones the assembler encodes.

* :func:`flit_union` -- a flit as a ``data.UnionLayout`` with one ``StructLayout`` view per
  :class:`sw.packet.Kind` (``payload.operand.slot``, ``payload.load.addr``, ...); every view
  starts with the same header (``kind``, ``dst_x``, ``dst_y``).
* :func:`insn_struct` -- the instruction word.
* :func:`coord_layout` -- a PE coordinate (the ``i_coord`` port).
* :func:`local_layout` -- a token written into this PE's operand buffer.
* :func:`dispatch_layout` -- a result with the destinations it still has to reach.
* :class:`PeError` -- the sticky error bits.
"""

from amaranth import Cat, Const, Mux
from amaranth.lib import data, enum

from sw.arch import bits_for
from sw.isa import insn_layout
from sw.packet import Kind, flit_layout

__all__ = ["flit_union", "insn_struct", "coord_layout", "dest_layout", "local_layout",
           "dispatch_layout", "PeError", "error_layout"]


def flit_union(params):
    """Return the flit of ``params`` as a union of one struct view per packet kind."""
    return data.UnionLayout({
        kind.name.lower(): data.StructLayout(flit_layout(kind, params).struct_fields())
        for kind in Kind})


def insn_struct(params):
    """Return the instruction word of ``params`` as a ``data.StructLayout``."""
    return data.StructLayout(insn_layout(params).struct_fields())


def coord_layout(params):
    """Return a PE coordinate as the PE's ``i_coord`` port takes it: ``x``, ``y``, not biased."""
    return data.StructLayout({"x": bits_for(params.cols), "y": bits_for(params.rows)})


def dest_layout(params):
    """Return one destination: PE ``x``, ``y`` (not biased), ``slot``, ``operand``."""
    return data.StructLayout({"x": bits_for(params.cols), "y": bits_for(params.rows),
                              "slot": params.slot_bits, "operand": 2})


def local_layout(params):
    """Return a token for operand ``operand`` of ``slot`` of this PE."""
    return data.StructLayout({"slot": params.slot_bits, "operand": 2,
                              "data": params.TOKEN_BITS})


def dispatch_layout(params):
    """Return a result to dispatch: ``data``, ``dests``, ``dmask`` (to serve), ``end`` and
    ``ectx`` (the context ID its CTX_END message carries)."""
    return data.StructLayout({
        "data": params.TOKEN_BITS,
        "dests": data.ArrayLayout(dest_layout(params), params.MAX_DESTS),
        "dmask": params.MAX_DESTS,
        "end": 1,
        "ectx": 32,
    })


class PeError(enum.IntEnum):
    """Bit positions of the PE's sticky error flags."""
    #: A token reached a slot whose opcode is INVALID or unknown (it is dropped).
    UNKNOWN_OPCODE = 0
    #: A token from the mesh found its operand FIFO full (it is dropped).
    OVERFLOW = 1
    #: A load or store address is outside every Dbuf (no request is sent).
    BAD_ADDRESS = 2
    #: A Dbuf answered with its error bit (misaligned or out-of-range access).
    DBUF_ERROR = 3


def error_layout(params):
    """Return the error status: ``flags`` (one bit per :class:`PeError`) and ``slot``."""
    return data.StructLayout({"flags": len(PeError), "slot": params.slot_bits})


# Lint-clean expression helpers (Yosys trims constants to their minimal width, so a plain
# ``x == 1`` becomes ``x == 1'h1`` in Verilog, a Verilator WIDTH warning).

def _eq(x, value):
    """Return ``x == value`` as an AND of (inverted) bits.

    Yosys trims constants to their minimal width, so ``x == 1`` would be written as
    ``x == 1'h1`` and draw a Verilator WIDTH warning; the bitwise form has no widths to match.
    """
    x = x.as_value() if hasattr(x, "as_value") else x
    if value >> len(x):
        return Const(0, 1)
    return Cat(*[x[i] if value >> i & 1 else ~x[i] for i in range(len(x))]).all()


def _inc(x):
    """Return ``x + 1`` modulo ``2 ** len(x)``."""
    return (x + Const(1, len(x)))[:len(x)]


def _popcount(bits, width):
    """Return the number of set bits as a ``width``-bit balanced adder tree.

    Every add has operands of the full width (a one-bit value zero-extended would be a WIDTH
    warning in the generated Verilog).
    """
    level = [Mux(b, Const(1, width), Const(0, width)) for b in bits]
    while len(level) > 1:
        nxt = [(level[i] + level[i + 1])[:width] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0] if level else Const(0, width)
