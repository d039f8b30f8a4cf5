"""The Cbufs: the command buffers that hold the configuration image.

Contract
--------
``params.cbufs`` banks of ``params.cbuf_bytes`` each, seen as one array of 64-bit words
(:func:`word_bits`; word ``a`` is word ``a % depth`` of bank ``a // depth``).  They hold the
image in the compact Cbuf encoding of :meth:`sw.image.Image.cbuf_words` (configuration
records, then one CTX template per CTX slot), which the MicC expands into flits: about one
word per CONFIG flit, where one flit per word took 2 to 4 words (a 129-bit flit in a 256-bit
word).

* Read port (the MicC): ``rd_en`` with ``rd_addr`` on edge *t* gives ``rd_data`` from edge
  *t + 1*, held until the next read.  One read per cycle.
* Write port (host/DMA): ``wr_en`` with ``wr_addr``/``wr_data`` writes one word on the edge.
  The banks are single-port: a write cycle suppresses the read (write only while the MicC is
  idle).

``behavioural=True`` makes every bank an instance of the behavioural SRAM (:mod:`hw.sram`),
zero at time 0, which a testbench loads by backdoor (``bank<i>.bank.storage``) without a
cycle of Python; ``False`` gives Amaranth memories (small configurations, ``amaranth.sim``
tests), loaded through the write port.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sw.arch import ArrayParams

from .pe_types import _eq, _inc
from .sram import Sram

__all__ = ["Cbuf", "word_bits", "cbuf_words", "build_cbuf"]


# Lint-clean expression helpers (shared with the PE; hw.pe_types says why they exist).

def _zx(x, width):
    """Return ``x`` zero-extended (or truncated) to ``width`` bits."""
    return Cat(x, Const(0, width - len(x))) if width > len(x) else x[:width]


def word_bits(params):
    """Return the bits of one Cbuf word: 64 for every ``params`` (one DMA beat, one record
    word of :meth:`sw.image.Image.cbuf_words`)."""
    if not isinstance(params, ArrayParams):
        raise TypeError(f"params must be an sw.arch.ArrayParams, not {params!r}")
    return 64


def cbuf_words(params):
    """Return the words of one Cbuf bank."""
    return params.cbuf_bytes * 8 // word_bits(params)


class Cbuf(wiring.Component):
    """Build the ``params.cbufs`` command buffers (see the module doc).

    Parameters
    ----------
    params : sw.arch.ArrayParams
        ``cbufs`` and ``cbuf_bytes`` size the banks; the flit width sizes a word.
    behavioural : bool
        Banks as behavioural SRAMs (backdoor loading) instead of Amaranth memories.
    """

    def __init__(self, params=ArrayParams(), *, behavioural=False):
        if not isinstance(params, ArrayParams):
            raise TypeError(f"params must be an sw.arch.ArrayParams, not {params!r}")
        self.params, self.behavioural = params, bool(behavioural)
        self.width = word_bits(params)
        self.depth = cbuf_words(params)
        if self.depth < 2:
            raise TypeError(f"cbuf_bytes must hold at least 2 words of {self.width} bits, "
                            f"not {params.cbuf_bytes!r} bytes")
        self.words = self.depth * params.cbufs
        abits = max(1, (self.words - 1).bit_length())
        super().__init__({
            "rd_en": In(1), "rd_addr": In(abits), "rd_data": Out(self.width),
            "wr_en": In(1), "wr_addr": In(abits), "wr_data": In(self.width),
        })

    def elaborate(self, platform):
        m = Module()
        wb = (self.depth - 1).bit_length()
        banks = []
        for i in range(self.params.cbufs):
            sram = Sram(self.width, self.depth, inline_bits=0 if self.behavioural else 1 << 62)
            m.submodules[f"bank{i}"] = sram
            banks.append(sram)
        nb = len(banks)
        rsel = Signal(range(max(2, nb)))
        for i, sram in enumerate(banks):
            if nb > 1:
                rhit = _eq(self.rd_addr[wb:], i)
                whit = _eq(self.wr_addr[wb:], i)
            else:
                rhit = whit = 1
            addr = Mux(self.wr_en, self.wr_addr[:wb], self.rd_addr[:wb])
            m.d.comb += [
                sram.addr.eq(addr),
                sram.rd_en.eq(self.rd_en & rhit & ~self.wr_en),
                sram.wr_en.eq(Mux(self.wr_en & whit, (1 << sram.lanes) - 1, 0)),
                sram.wr_data.eq(self.wr_data),
            ]
        if nb > 1:
            with m.If(self.rd_en):
                m.d.sync += rsel.eq(self.rd_addr[wb:])
            out = banks[0].rd_data
            for i in range(1, nb):
                out = Mux(_eq(rsel, i), banks[i].rd_data, out)
            m.d.comb += self.rd_data.eq(out)
        else:
            m.d.comb += self.rd_data.eq(banks[0].rd_data)
        return m


def build_cbuf(rows=2, cols=2, cbufs=2, cbuf_bytes=1024, behavioural=False):
    """Return a :class:`Cbuf` for ``fdpu verilog --top cbuf``."""
    return Cbuf(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes),
                behavioural=behavioural)
