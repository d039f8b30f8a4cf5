"""The Cbuf word and the compact configuration records it holds.

A Cbuf word is 64 bits (one DMA beat) whatever the flit width.  The Cbufs hold an image's
configuration as *records*: a header word (:func:`cbuf_header_layout`: ``what``, destination
PE (biased), first ``slot`` and ``index``, ``count``) followed by ``count`` data words, each of
which the MicC sends as one CONFIG flit; then one *CTX template* word per ``CTX`` slot
(:func:`cbuf_template_layout`).  :meth:`sw.compiler.image.Image.cbuf_words` writes them,
``hw.ctrl.micc`` reads them (docs/system.md).
"""

from sw.spec.arch import ArrayParams
from sw.spec.bitfields import Field, Layout
from sw.spec.isa import insn_layout
from sw.spec.packet import Kind, body_layout

__all__ = ["word_bits", "cbuf_words", "MAX_RECORD", "word_parts", "cbuf_header_layout",
           "cbuf_template_layout"]


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
        Field("count", 16)], width=64)


def cbuf_template_layout(params):
    """Return the layout of a Cbuf CTX template (one 64-bit Cbuf word, module doc)."""
    return Layout("Cbuf CTX template", [
        Field("dst_x", params.x_bits), Field("dst_y", params.y_bits),
        Field("slot", params.slot_bits), Field("operand", 2)], width=64)
