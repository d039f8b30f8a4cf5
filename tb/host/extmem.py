"""A behavioural external memory for simulations, and the FDPU top with it attached.

::

    i_rd (byte address) --> [bandwidth bucket, random stall] --> SRAM --> [delay FIFO] --> o_rdata
    i_wr (addr, data)  ---^  (one access per cycle, writes first)        (offered when due)

Contract of :class:`ExtMem`
---------------------------
* One access (read or write of a 64-bit word) per cycle at most, and only while the bandwidth
  bucket holds a word's worth: every cycle it gains ``i_bw`` eighths of a byte (``i_bw = 64``
  is 8 bytes per cycle, the port's peak; 8 is 1 byte per cycle; 0 counts as 64), up to two
  words; an access spends 64.  Reads and writes share the bucket.
* ``i_stall`` (0..255): in each cycle with an LFSR byte below it, no access is accepted
  (random backpressure without Python in the loop; 0: none).
* A read accepted on edge *t* is offered on ``o_rdata`` from edge ``t + max(i_latency, 2)``
  on (``i_latency`` below 2 ** 15), in request order; at most ``depth`` reads wait in the
  delay FIFO (``i_rd`` is not ready while it is full).  A write is done on the edge it is accepted.
  Addresses wrap at the memory size (the low three bits are ignored).
* The words live in the behavioural SRAM of :mod:`hw.lib.sram` (``sram.bank.storage``): a
  testbench loads and reads them by backdoor, without a cycle of simulation.

:class:`FdpuSystem` is :class:`hw.top.FDPU` with an :class:`ExtMem` on its external port: the
DUT of ``tb.top.bench_run``.  Its ports are the top's host registers plus ``i_mem_latency``,
``i_mem_bw`` and ``i_mem_stall``; the top is submodule ``fdpu``, the memory ``extmem``.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.ctrl.dma import ext_write_layout
from hw.lib.logic import increment
from hw.lib.sram import Sram
from hw.noc.flit import Bits
from hw.top import FDPU
from sw.spec.arch import ArrayParams
from sw.spec.dma import WORD_BITS
from sw.spec.system import System

__all__ = ["ExtMem", "FdpuSystem", "build_system"]

#: An entry of the read delay FIFO: the word read and the cycle (modulo 2 ** 16) it is due.
_DELAYED = data.StructLayout({"data": WORD_BITS, "due": 16})


class ExtMem(wiring.Component):
    """A ``nbytes`` external memory with latency, bandwidth and stall registers (module doc).

    Parameters
    ----------
    nbytes : int
        Size in bytes, a power of two >= 16.
    depth : int
        Reads that can wait in the delay FIFO (a power of two >= 2).
    """

    def __init__(self, nbytes=1 << 20, *, depth=64):
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 16 \
                or nbytes & (nbytes - 1):
            raise TypeError(f"nbytes must be a power of two >= 16, not {nbytes!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2 \
                or depth & (depth - 1):
            raise TypeError(f"depth must be a power of two >= 2, not {depth!r}")
        self.nbytes, self.depth = nbytes, depth
        self.sram = Sram(WORD_BITS, nbytes // 8, inline_bits=0)
        super().__init__({
            "i_rd": In(stream.Signature(32)),
            "o_rdata": Out(stream.Signature(WORD_BITS)),
            "i_wr": In(stream.Signature(ext_write_layout())),
            "i_latency": In(16), "i_bw": In(8), "i_stall": In(8),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sram = sram = self.sram
        m.submodules.delay = dq = fifo.SyncFIFO(width=_DELAYED.size, depth=self.depth)
        abits = sram.abits

        now = Signal(16)                                   # modular: latency < 2 ** 15
        m.d.sync += now.eq(increment(now))

        # Random stalls: a 16-bit Fibonacci LFSR (taps 16, 14, 13, 11).
        lfsr = Signal(16, init=0xACE1)
        m.d.sync += lfsr.eq(Cat(lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10], lfsr[:15]))
        stall = Signal()
        m.d.comb += stall.eq(lfsr[:8] < self.i_stall)

        # Bandwidth bucket, in eighths of a byte: +i_bw per cycle, capped at two words.
        bucket = Signal(8, init=64)
        gain = Signal(8)
        m.d.comb += gain.eq(Mux(self.i_bw.any(), self.i_bw, Const(64, 8)))
        ok = Signal()
        m.d.comb += ok.eq(bucket[6] | bucket[7])           # bucket >= 64
        op = Signal()

        pend = Signal()
        due_in = Signal(16)
        room = Bits(dq.w_level) < self.depth - 1           # counting the read in flight
        wr, rd = self.i_wr, self.i_rd
        m.d.comb += [
            wr.ready.eq(ok & ~stall),
            rd.ready.eq(ok & ~stall & ~wr.valid & room),
            op.eq((wr.valid & wr.ready) | (rd.valid & rd.ready)),
        ]
        filled = Signal(9)
        m.d.comb += filled.eq(bucket + gain)
        capped = Mux(filled[7] | filled[8], Const(128, 8), filled[:8])
        kept = Signal(8)
        m.d.comb += kept.eq(capped)
        # An access needs kept in 64 .. 128 and spends 64: 128 -> 64, else clear bit 6.
        spent = Mux(kept[7], Const(64, 8), Cat(kept[:6], Const(0, 2)))
        m.d.sync += bucket.eq(Mux(op, spent, kept))

        waddr = wr.payload.addr[3:3 + abits]
        m.d.comb += [
            sram.addr.eq(Mux(wr.valid, waddr, rd.payload[3:3 + abits])),
            sram.rd_en.eq(rd.valid & rd.ready),
            sram.wr_en.eq(Mux(wr.valid & wr.ready, Const(0xFF, 8), Const(0, 8))),
            sram.wr_data.eq(wr.payload.data),
        ]
        lat = Signal(16)
        m.d.comb += lat.eq(Mux(Bits(self.i_latency) < 2, Const(2, 16),
                               Cat(self.i_latency[:15], Const(0, 1))))
        m.d.sync += [pend.eq(rd.valid & rd.ready),
                     due_in.eq((now + lat)[:16])]
        entry, head = Signal(_DELAYED), data.View(_DELAYED, dq.r_data)
        m.d.comb += [entry.data.eq(sram.rd_data), entry.due.eq(due_in),
                     dq.w_en.eq(pend), dq.w_data.eq(entry)]
        due = head.due
        late = Signal(16)
        m.d.comb += late.eq((now - due)[:16])
        m.d.comb += [
            self.o_rdata.valid.eq(dq.r_rdy & ~late[15]),
            self.o_rdata.payload.eq(head.data),
            dq.r_en.eq(self.o_rdata.ready & ~late[15]),
        ]
        return m


_EXT = ("o_ext_rd", "i_ext_rdata", "o_ext_wr")


def _is_ext(name):
    """Return whether a top port is an external memory port (of any DMA channel)."""
    return any(name == e or (name.startswith(e + "_") and name[len(e) + 1:].isdigit())
               for e in _EXT)


class FdpuSystem(wiring.Component):
    """:class:`hw.top.FDPU` of ``params`` with an :class:`ExtMem` of ``ext_bytes`` attached.

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
    ext_bytes : int
        External memory size (a power of two).
    depth : int
        Router input FIFO depth.
    dma_channels : int
        DMA channels of the top (:class:`hw.top.FDPU`), each with an external memory of its
        own (``extmem``, ``extmem1``, ...; like the channels of a multi-channel DRAM), all
        with the same latency, bandwidth and stall registers.
    config_ports : int
        Configuration ports of the top's MicC (:class:`hw.top.FDPU`).
    """

    def __init__(self, params=ArrayParams(), *, ext_bytes=1 << 20, depth=4,
                 dma_channels=System().dma_channels, config_ports=System().config_ports):
        self.top = FDPU(params, depth=depth, behavioural=True, dma_channels=dma_channels,
                        config_ports=config_ports)
        self.mems = [ExtMem(ext_bytes) for _ in range(dma_channels)]
        self.mem = self.mems[0]
        self.params = params
        members = {name: member for name, member in self.top.signature.members.items()
                   if not _is_ext(name)}
        members.update(i_mem_latency=In(16), i_mem_bw=In(8), i_mem_stall=In(8))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fdpu = top = self.top
        for c, mem in enumerate(self.mems):
            sfx = f"_{c}" if c else ""
            m.submodules[f"extmem{c if c else ''}"] = mem
            wiring.connect(m, getattr(top, f"o_ext_rd{sfx}"), mem.i_rd)
            wiring.connect(m, mem.o_rdata, getattr(top, f"i_ext_rdata{sfx}"))
            wiring.connect(m, getattr(top, f"o_ext_wr{sfx}"), mem.i_wr)
            m.d.comb += [mem.i_latency.eq(self.i_mem_latency), mem.i_bw.eq(self.i_mem_bw),
                         mem.i_stall.eq(self.i_mem_stall)]
        outer = {path: (member, value) for path, member, value in self.signature.flatten(self)}
        for path, member, value in top.signature.flatten(top):
            if _is_ext(path[0]):
                continue
            mine = outer[path][1]
            if member.flow == In:
                m.d.comb += value.eq(mine)
            else:
                m.d.comb += mine.eq(value)
        return m


_PE = ArrayParams()


def build_system(rows=1, cols=1, slots=_PE.slots, operand_depth=_PE.operand_depth,
                 dbuf_bytes=4096, cbufs=1, cbuf_bytes=4096, ext_bytes=1 << 16, depth=4,
                 int_issue=_PE.int_issue, dma_channels=1, config_ports=1):
    """Return an :class:`FdpuSystem` for ``fdpu verilog --top fdpu_system``: by default the
    default PE (``ArrayParams()``'s slots, operand depth and INT issues) in a 1 x 1 array with
    small memories, one Cbuf and one DMA channel (a bench top, quick to build)."""
    return FdpuSystem(ArrayParams(rows=rows, cols=cols, slots=slots, operand_depth=operand_depth,
                                  dbuf_bytes=dbuf_bytes, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                                  int_issue=int_issue),
                      ext_bytes=ext_bytes, depth=depth, dma_channels=dma_channels,
                      config_ports=config_ports)
