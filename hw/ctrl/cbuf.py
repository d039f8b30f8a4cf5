"""The Cbufs: the command buffers that hold the configuration image.

Contract
--------
``params.cbufs`` banks of ``params.cbuf_bytes`` each, seen as one array of 64-bit words
(:func:`word_bits`; word ``a`` is word ``a % depth`` of bank ``a // depth``).  They hold the
image in the compact Cbuf encoding of :meth:`sw.compiler.image.Image.cbuf_words` (configuration
records, then one CTX template per CTX slot), which the MicC expands into flits: about one
word per CONFIG flit, where one flit per word took 2 to 4 words (a 129-bit flit in a 256-bit
word).

* Read ports (the MicC's configuration ports): ``ports = P`` (dividing ``cbufs``) cut the
  banks into ``P`` regions of ``cbufs / P`` whole banks; read port ``p`` (``rd_en``,
  ``rd_addr``, ``rd_data`` for port 0, ``..._<p>`` for the others) addresses the words of
  region ``p`` only (``rd_addr`` is the offset in the region, global word
  ``p * words / P + rd_addr``), so the ports never compete for a bank and each reads one word
  per cycle: ``rd_en`` with ``rd_addr`` on edge *t* gives ``rd_data`` from edge *t + 1*, held
  until the next read.
* Write port (host/DMA): ``wr_en`` with ``wr_addr``/``wr_data`` writes one word on the edge.
  The banks are single-port: a write cycle suppresses the reads of every bank (write only
  while the MicC is idle; the MicC flags a write while it runs, ``CBUF_BUSY``).

``behavioural=True`` makes every bank an instance of the behavioural SRAM (:mod:`hw.lib.sram`),
zero at time 0, which a testbench loads by backdoor (``bank<i>.bank.storage``) without a
cycle of Python; ``False`` gives Amaranth memories (small configurations, ``amaranth.sim``
tests), loaded through the write port.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals
from hw.lib.spec import check_params
from hw.lib.sram import Sram
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import cbuf_words, word_bits

__all__ = ["Cbuf", "build_cbuf"]


class Cbuf(wiring.Component):
    """Build the ``params.cbufs`` command buffers (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        ``cbufs`` and ``cbuf_bytes`` size the banks; the flit width sizes a word.
    behavioural : bool
        Banks as behavioural SRAMs (backdoor loading) instead of Amaranth memories.
    ports : int
        Read ports (1 .. 4), each over its own region of ``cbufs / ports`` banks.
    """

    def __init__(self, params=ArrayParams(), *, behavioural=False, ports=1):
        check_params(params)
        if not isinstance(ports, int) or isinstance(ports, bool) or not 1 <= ports <= 4 \
                or params.cbufs % ports:
            raise TypeError(f"ports must be an integer in 1..4 dividing cbufs "
                            f"({params.cbufs}), not {ports!r}")
        self.params, self.behavioural, self.ports = params, bool(behavioural), ports
        self.width = word_bits(params)
        self.depth = cbuf_words(params)
        if self.depth < 2:
            raise TypeError(f"cbuf_bytes must hold at least 2 words of {self.width} bits, "
                            f"not {params.cbuf_bytes!r} bytes")
        self.words = self.depth * params.cbufs
        self.region = self.words // ports
        abits = max(1, (self.words - 1).bit_length())
        rbits = max(1, (self.region - 1).bit_length())
        members = {}
        for q in range(ports):
            s = f"_{q}" if q else ""
            members.update({f"rd_en{s}": In(1), f"rd_addr{s}": In(rbits),
                            f"rd_data{s}": Out(self.width)})
        super().__init__({
            **members,
            "wr_en": In(1), "wr_addr": In(abits), "wr_data": In(self.width),
        })

    def elaborate(self, platform):
        m = Module()
        wb = (self.depth - 1).bit_length()
        per = self.params.cbufs // self.ports        # banks per read port
        banks = []
        for i in range(self.params.cbufs):
            sram = Sram(self.width, self.depth, inline_bits=0 if self.behavioural else 1 << 62)
            m.submodules[f"bank{i}"] = sram
            banks.append(sram)
        nb = len(banks)
        for q in range(self.ports):
            s = f"_{q}" if q else ""
            rd_en, rd_addr, rd_data = (getattr(self, f"{n}{s}")
                                       for n in ("rd_en", "rd_addr", "rd_data"))
            mine = banks[q * per:(q + 1) * per]
            rsel = Signal(range(max(2, per)), name=f"rsel{s}")
            for j, sram in enumerate(mine):
                i = q * per + j
                rhit = equals(rd_addr[wb:], j) if per > 1 else 1
                whit = equals(self.wr_addr[wb:], i) if nb > 1 else 1
                addr = Mux(self.wr_en, self.wr_addr[:wb], rd_addr[:wb])
                m.d.comb += [
                    sram.addr.eq(addr),
                    sram.rd_en.eq(rd_en & rhit & ~self.wr_en),
                    sram.wr_en.eq(Mux(self.wr_en & whit, (1 << sram.lanes) - 1, 0)),
                    sram.wr_data.eq(self.wr_data),
                ]
            if per > 1:
                with m.If(rd_en):
                    m.d.sync += rsel.eq(rd_addr[wb:])
                out = mine[0].rd_data
                for j in range(1, per):
                    out = Mux(equals(rsel, j), mine[j].rd_data, out)
                m.d.comb += rd_data.eq(out)
            else:
                m.d.comb += rd_data.eq(mine[0].rd_data)
        return m


def build_cbuf(rows=2, cols=2, cbufs=2, cbuf_bytes=1024, behavioural=False, ports=1):
    """Return a :class:`Cbuf` for ``fdpu verilog --top cbuf``."""
    return Cbuf(ArrayParams(rows=rows, cols=cols, cbufs=cbufs, cbuf_bytes=cbuf_bytes),
                behavioural=behavioural, ports=ports)
