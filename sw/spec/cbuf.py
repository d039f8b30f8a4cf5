"""The Cbuf word and the compact configuration records it holds.

A Cbuf word is 64 bits (one DMA beat) whatever the flit width.  The Cbufs hold an image's
configuration as *records*: a header word (:func:`cbuf_header_layout`: ``what``, destination
PE (biased), first ``slot`` and ``index``, ``count``, and a *span*, ``span_x`` and ``span_y``)
followed by ``count`` data words; then one *CTX template* word per ``CTX`` slot
(:func:`cbuf_template_layout`).  :meth:`sw.compiler.image.Image.cbuf_words` writes them,
``hw.ctrl.micc`` reads them (docs/system.md).

A record configures the rectangle of PEs from its destination ``(x0, y0)`` to ``(x0 + span_x,
y0 + span_y)``: the MicC sends each data word as one CONFIG flit to each of those PEs, ``x``
fastest, so a program that several PEs share is held once.  The PEs' instructions differ where
they name themselves: the flit to PE ``(x0 + a, y0 + b)`` carries an INSN word *moved* by ``(a,
b)`` (:func:`move_insn_part`): every valid destination's ``x`` field that lies in the word grows
by ``a``, its ``y`` field by ``b``, modulo the field's width.  A destination's valid bit may lie
in an earlier part of the instruction word than its coordinates (``d0`` on the 128-bit words);
the MicC then takes it from the last INSN word of that part it sent (:func:`valid_parts`).  A
record of span ``(0, 0)`` is one PE's, its words unchanged.
"""

import functools
from dataclasses import dataclass

from sw.spec.arch import ArrayParams
from sw.spec.bitfields import Field, Layout
from sw.spec.isa import insn_layout
from sw.spec.packet import Kind, body_layout

__all__ = ["word_bits", "cbuf_words", "MAX_RECORD", "word_parts", "cbuf_header_layout",
           "cbuf_template_layout", "DestField", "dest_fields", "valid_parts", "move_insn_part"]


def word_bits(params):
    """Return the bits of one Cbuf word: 64 for every ``params`` (one DMA beat, one record
    word of :meth:`sw.compiler.image.Image.cbuf_words`)."""
    if not isinstance(params, ArrayParams):
        raise TypeError(f"params must be an sw.spec.arch.ArrayParams, not {params!r}")
    return 64


def cbuf_words(params):
    """Return the words of one Cbuf bank."""
    return params.cbuf_bytes * 8 // word_bits(params)


#: The most data words of one Cbuf record (its ``count`` field).
MAX_RECORD = (1 << 16) - 1


def word_parts(params):
    """Return the 64-bit parts of one instruction word for ``params``."""
    return insn_layout(params).width // 64


def cbuf_header_layout(params):
    """Return the layout of a Cbuf record header (one 64-bit Cbuf word, module doc)."""
    cfg = body_layout(Kind.CONFIG, params)
    return Layout("Cbuf record header", [
        Field("what", 2), Field("dst_x", params.x_bits), Field("dst_y", params.y_bits),
        Field("slot", params.slot_bits), Field("index", cfg.field("index").width),
        Field("count", 16), Field("span_x", params.x_bits), Field("span_y", params.y_bits)],
        width=64)


def cbuf_template_layout(params):
    """Return the layout of a Cbuf CTX template (one 64-bit Cbuf word, module doc)."""
    return Layout("Cbuf CTX template", [
        Field("dst_x", params.x_bits), Field("dst_y", params.y_bits),
        Field("slot", params.slot_bits), Field("operand", 2)], width=64)


@dataclass(frozen=True)
class DestField:
    """Where one destination coordinate of an instruction word lies: destination ``dest``'s
    ``axis`` (``"x"`` or ``"y"``) field, ``width`` bits at bit ``lo`` of part ``part``; its valid
    bit at bit ``valid_lo`` of part ``valid_part``."""
    dest: int
    axis: str
    part: int
    lo: int
    width: int
    valid_part: int
    valid_lo: int


@functools.lru_cache(maxsize=None)
def dest_fields(params):
    """Return the :class:`DestField` of every destination coordinate that lies inside one
    64-bit part of the instruction word (a field across two parts is never moved)."""
    lay = insn_layout(params)
    out = []
    for i in range(params.MAX_DESTS):
        valid = lay.offsets[f"d{i}_valid"]
        for axis in ("x", "y"):
            name = f"d{i}_{axis}"
            lo, width = lay.offsets[name], lay.field(name).width
            if lo // 64 == (lo + width - 1) // 64:
                out.append(DestField(i, axis, lo // 64, lo % 64, width, valid // 64, valid % 64))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def valid_parts(params):
    """Return ``{part: [(dest, bit)]}``: the destinations' valid bits each part holds that a
    coordinate in a later part needs (what the MicC keeps of the last INSN word of that
    part it sent)."""
    out = {}
    for f in dest_fields(params):
        if f.valid_part < f.part and (f.dest, f.valid_lo) not in out.get(f.valid_part, []):
            out.setdefault(f.valid_part, []).append((f.dest, f.valid_lo))
    return out


def move_insn_part(params, word, part, a, b, kept=0):
    """Return INSN word ``word`` (part ``part`` of an instruction word) moved by ``(a, b)``
    (module doc): each valid destination's coordinate field in this part plus ``a`` (``x``) or
    ``b`` (``y``) modulo its width.  ``kept``: the valid bits (bit ``i`` for destination
    ``i``) of destinations whose valid bit an earlier part holds."""
    for f in dest_fields(params):
        if f.part != part:
            continue
        if f.valid_part == part:
            valid = word >> f.valid_lo & 1
        else:
            valid = kept >> f.dest & 1
        if not valid:
            continue
        mask = (1 << f.width) - 1
        value = (word >> f.lo & mask) + (a if f.axis == "x" else b)
        word = word & ~(mask << f.lo) | (value & mask) << f.lo
    return word
