"""The FDPU top: PE array, request and reply meshes, Dbufs, Cbufs, MicC, host registers.

::

                  Dbuf 0 .. C-1 (north)
                     |     |
  MicC/Cbufs/DMA=+  [PE]--[PE]-- Dbuf C ..        every edge port k of both meshes is Dbuf k;
    (west, row 0)|   |     |                         MicC and DMA share the west port of row 0:
    Dbuf 2C+R ---+  [PE]--[PE]-- ... C+R-1 (east)     its flits merge (2:1 round robin) with that
    Dbuf 2C+R+1 ---  |     |                         Dbuf's replies into the reply mesh, and
                  Dbuf C+R .. (south)                reply-mesh flits to (-1, 0) go to the MicC.

    config_ports = 4: MicC outputs also at (C, R-1) east, (C-1, -1) north, (0, R) south (each
    merged with its Dbuf's replies; each reading its own Cbuf banks), one quadrant each.

Contract
--------
* Per PE ``n = y * cols + x``: ``o_req`` -> request mesh, ``o_rep`` -> reply mesh (two
  separate injection ports, so a PE's replies never wait behind its requests), reply mesh
  LOCAL -> ``i_flit`` (always ready).  A request reaching a PE (request mesh LOCAL) is a
  program error: sunk and flagged (``STRAY_REQUEST``).
* Every PE is the same Verilog module (:class:`hw.lib.shared.Shared`): its coordinate is the
  constant driven on its ``i_coord`` port, so the Verilog grows with the routers' and PEs'
  wiring, not with copies of the PE.
* Dbuf ``k`` sits at edge port ``k`` of both meshes (``sw.spec.arch.ArrayParams.dbuf_coord``).
  Reply-mesh flits leaving an edge port other than the MicC's are sunk and flagged
  (``STRAY_EDGE``); the request mesh's edge inputs are idle except the MicC's port, where the
  DMA (:mod:`hw.ctrl.dma`) injects its STOREs and LOADs; at that port the reply mesh's REPLY flits
  go to the DMA and all others (CTX_END) to the MicC.
* Configuration ports: ``config_ports = P`` (1 .. 4, dividing ``cbufs``) gives the MicC ``P``
  outputs at the edge ports of :func:`sw.spec.ports.config_ports` (port 0 at ``(-1, 0)``, then one
  per edge: the first DMA channels' ports), each merged (2:1 round robin) with the replies of
  the Dbuf there into the reply mesh, each reading its own Cbuf banks; host registers
  ``i_n_config_<p>`` for ``p >= 1``.  The top counts the CONFIG flits ejected into PEs
  (``Micc.i_delivered``): contexts start only when every CONFIG flit is in its PE.
* Overlap: the MicC and the DMA may run at the same time.  ``i_start`` with ``i_cbuf_words =
  n > 0`` arms the start: the MicC starts once the DMA has written ``n`` Cbuf words since
  ``i_dma_start`` (pulse ``i_dma_start`` first or in the same cycle; channel 0's list begins
  with the Cbuf descriptors), so it configures while the DMA goes on filling the Dbufs.
  While the DMA-in that was running when the MicC started is busy, the MicC holds its
  contexts back (``HOLD`` after configuring): contexts start only after both.  With
  ``i_ctx_gate`` (sampled at the MicC's start) a context starts as soon as its own data are
  in instead: context ``c`` waits until every DMA channel is done or has passed
  ``(c >> i_gate_shift) + 1`` fences (empty descriptors, :mod:`hw.ctrl.dma`), the host
  having put one on every channel after the data of each group of ``2 ** i_gate_shift``
  contexts (``docs/system.md``, "Contexts start when their data are in").  A Cbuf write while the MicC runs is its
  error ``MICC_CBUF_BUSY`` (the Cbufs are single-ported).  ``o_halt``/``o_done`` stay low
  while a start is armed.
* DMA: ``i_dma_start`` with ``i_dma_list``/``i_dma_count``; ``o_dma_busy``, ``o_dma_done``,
  ``o_dma_halt``, ``o_dma_error``, ``o_dma_state``, ``o_dma_desc``, ``o_dma_cycles``,
  ``o_ext_rd_bytes``, ``o_ext_wr_bytes``; the external memory port ``o_ext_rd``,
  ``i_ext_rdata``, ``o_ext_wr`` (64-bit words; :class:`tb.host.extmem.ExtMem` in simulation).
  ``dma_channels = W > 1`` adds DMA engines at the edge ports of :func:`dma_ports` (one per
  edge first, then the other ports), each with its external port (``o_ext_rd_<c>``,
  ``i_ext_rdata_<c>``, ``o_ext_wr_<c>``) and list registers (``i_dma_list_<c>``,
  ``i_dma_count_<c>``); they inject requests at their port and take the REPLY flits leaving
  it; ``i_dma_start`` starts all, ``o_dma_halt``/``o_dma_done`` are all channels',
  ``o_dma_error`` their OR, ``o_dma_cycles`` start to last halt, ``o_ext_*_bytes`` sums.
  Only channel 0 writes the Cbufs.
  ``o_clock`` counts cycles since reset.
* Host registers are ports: ``i_start`` (one-cycle pulse; the MicC starts on the next
  cycle) with ``i_n_config``, ``i_n_ctx``, ``i_contexts``, ``i_window``, ``i_ends``,
  ``i_ctx_base``, ``i_keep``, ``i_end_base`` (see :mod:`hw.ctrl.micc`); ``o_done``; ``o_halt``
  (done or any error: what a host waits for); ``o_state``, ``o_error`` (bits of
  :data:`ERROR_BITS`), ``o_issued``, ``o_retired``, ``o_ends``, ``o_cycles``,
  ``o_config_cycles`` (the part of ``o_cycles`` spent configuring the PEs),
  ``o_hold_cycles`` (the part spent waiting for the DMA before the first context); counters
  cleared
  by ``i_start``: ``o_int_fires[n]``/``o_fp_fires[n]`` (instructions fired per PE on the INT
  pipe(s), both of them with ``ArrayParams.int_issue == 2``, and on the FP pipe),
  ``o_pe_error[n]`` (each PE's sticky flags), ``o_dbuf_reqs`` (PE requests the Dbufs accepted),
  ``o_mesh_flits`` (flits injected by PEs into both meshes).
* ``behavioural=True``: Dbufs and Cbufs are behavioural SRAMs (zero at time 0) whose words a
  testbench writes and reads by backdoor (``dbuf<k>.sram.bank.storage``,
  ``cbuf.bank<i>.bank.storage``), as ``tb.top.bench_run`` does.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.ctrl.cbuf import Cbuf
from hw.ctrl.dma import Dma, DmaState, ext_write_layout
from hw.ctrl.micc import Micc, MiccState
from hw.lib.logic import any_of, equals, increment, popcount, sum_of, zero_extend
from hw.lib.shared import Shared
from hw.lib.spec import check_params
from hw.noc.dbuf import Dbuf
from hw.noc.flit import Bits, FlitKind, body_view
from hw.noc.mesh import Mesh
from hw.pe.pe import Pe
from sw.spec.arch import ArrayParams
from sw.spec.ports import config_ports as _config_ports
from sw.spec.ports import dma_ports
from sw.spec.status import DmaError, MiccError, PeError
from sw.spec.system import System

__all__ = ["FDPU", "ERROR_BITS", "build_fdpu", "dma_ports"]

#: Names of the bits of ``o_error``, LSB first.
ERROR_BITS = tuple(f"MICC_{e.name}" for e in MiccError) + tuple(
    f"PE_{e.name}" for e in PeError) + ("STRAY_REQUEST", "STRAY_EDGE")


def _merge(m, a, b, out, name):
    """Merge streams ``a`` and ``b`` into ``out``: round robin, grant held while stalled."""
    held, locked, last = Signal(name=f"{name}_held"), Signal(name=f"{name}_locked"), \
        Signal(name=f"{name}_last")
    cur = Signal(name=f"{name}_cur")
    m.d.comb += cur.eq(Mux(locked, held, Mux(a.valid & b.valid, ~last, b.valid)))
    m.d.comb += [
        out.valid.eq(Mux(cur, b.valid, a.valid)),
        out.payload.eq(Mux(cur, b.payload, a.payload)),
        a.ready.eq(out.ready & ~cur),
        b.ready.eq(out.ready & cur),
    ]
    with m.If(out.valid & ~out.ready):
        m.d.sync += [locked.eq(1), held.eq(cur)]
    with m.If(out.valid & out.ready):
        m.d.sync += [locked.eq(0), last.eq(cur)]


class FDPU(wiring.Component):
    """Build the whole accelerator for ``params`` (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        The array (paper defaults: 8 x 8, 32 Dbufs of 2 MiB, 8 Cbufs of 64 KiB).
    depth : int
        Router input FIFO depth.
    behavioural : bool
        Memories as behavioural SRAMs loaded by backdoor (simulation runs); ``False`` keeps
        small banks as Amaranth memories.
    """

    def __init__(self, params=ArrayParams(), *, depth=4, behavioural=True,
                 dma_channels=System().dma_channels, config_ports=System().config_ports):
        check_params(params)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise TypeError(f"depth must be an integer >= 2, not {depth!r}")
        ports = dma_ports(params)
        if not isinstance(dma_channels, int) or isinstance(dma_channels, bool) \
                or not 1 <= dma_channels <= len(ports):
            raise TypeError(f"dma_channels must be an integer in 1..{len(ports)} (the edge "
                            f"ports), not {dma_channels!r}")
        if not isinstance(config_ports, int) or isinstance(config_ports, bool) \
                or not 1 <= config_ports <= 4 or params.cbufs % config_ports:
            raise TypeError(f"config_ports must be an integer in 1..4 dividing cbufs "
                            f"({params.cbufs}), not {config_ports!r}")
        self.params, self.depth, self.behavioural = params, depth, bool(behavioural)
        self.config_ports = [params.dbuf_at(*c) for c in _config_ports(params, config_ports)]
        self.dma_channels = dma_channels
        self.dma_ports = ports[:dma_channels]
        self.micc_port = params.dbuf_at(-1, 0)
        n = params.num_pes
        extra = {f"i_n_config_{q}": In(32) for q in range(1, config_ports)}
        for c in range(1, dma_channels):
            extra.update({
                f"i_dma_list_{c}": In(32), f"i_dma_count_{c}": In(16),
                f"o_ext_rd_{c}": Out(stream.Signature(32)),
                f"i_ext_rdata_{c}": In(stream.Signature(64)),
                f"o_ext_wr_{c}": Out(stream.Signature(ext_write_layout())),
            })
        super().__init__({**extra,
            "i_start": In(1), "i_n_config": In(32), "i_n_ctx": In(16), "i_contexts": In(32),
            "i_window": In(8), "i_ends": In(16), "i_ctx_base": In(32),
            "i_keep": In(1), "i_end_base": In(32), "i_ctx_gate": In(1), "i_gate_shift": In(5),
            "o_done": Out(1), "o_halt": Out(1), "o_state": Out(MiccState),
            "o_error": Out(len(ERROR_BITS)),
            "o_issued": Out(32), "o_retired": Out(32), "o_ends": Out(32), "o_cycles": Out(48),
            "o_config_cycles": Out(48), "o_hold_cycles": Out(48), "o_config_hidden": Out(48),
            "i_cbuf_words": In(32),
            "o_int_fires": Out(32).array(n), "o_fp_fires": Out(32).array(n),
            "o_pe_error": Out(len(PeError)).array(n),
            "o_dbuf_reqs": Out(40), "o_mesh_flits": Out(40),
            "o_clock": Out(48),
            # DMA (hw.ctrl.dma): host registers and the external memory port.
            "i_dma_start": In(1), "i_dma_list": In(32), "i_dma_count": In(16),
            "o_dma_state": Out(DmaState), "o_dma_busy": Out(1), "o_dma_done": Out(1),
            "o_dma_halt": Out(1), "o_dma_error": Out(len(DmaError)), "o_dma_desc": Out(16),
            "o_dma_cycles": Out(32), "o_ext_rd_bytes": Out(40), "o_ext_wr_bytes": Out(40),
            "o_ext_rd": Out(stream.Signature(32)),
            "i_ext_rdata": In(stream.Signature(64)),
            "o_ext_wr": Out(stream.Signature(ext_write_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace()           # what the parts below share
        self._control(m, s)
        self._pes(m, s)
        self._dbufs(m, s)
        self._status(m, s)
        return m

    def _control(self, m, s):
        """The meshes, the Cbufs, the MicC and the DMA channels; the start (armed until the
        DMA has written the Cbuf words the host named), the DMA's registers and counters."""
        p = self.params
        m.submodules.req = req = Mesh(p, depth=self.depth)
        m.submodules.rep = rep = Mesh(p, depth=self.depth)
        nports = len(self.config_ports)
        m.submodules.cbuf = cbuf = Cbuf(p, behavioural=self.behavioural, ports=nports)
        m.submodules.micc = micc = Micc(p, ports=nports, delivered=True)
        m.submodules.dma = dma = Dma(p, coord=p.dbuf_coord(self.micc_port))
        dmas = [dma]
        for c in range(1, self.dma_channels):
            ch = Dma(p, coord=p.dbuf_coord(self.dma_ports[c]), cbuf=False)
            m.submodules[f"dma{c}"] = ch
            dmas.append(ch)
        for q in range(nports):
            sfx = f"_{q}" if q else ""
            m.d.comb += [getattr(cbuf, f"rd_en{sfx}").eq(getattr(micc, f"rd_en{sfx}")),
                         getattr(cbuf, f"rd_addr{sfx}").eq(getattr(micc, f"rd_addr{sfx}")),
                         getattr(micc, f"rd_data{sfx}").eq(getattr(cbuf, f"rd_data{sfx}")),
                         getattr(micc, f"i_n_config{sfx}").eq(getattr(self, f"i_n_config{sfx}"))]
        m.d.comb += [cbuf.wr_en.eq(dma.cbuf_wr_en), cbuf.wr_addr.eq(dma.cbuf_wr_addr),
                     cbuf.wr_data.eq(dma.cbuf_wr_data)]
        for name in ("i_n_ctx", "i_contexts", "i_window", "i_ends", "i_ctx_base", "i_keep",
                     "i_end_base"):
            m.d.comb += getattr(micc, name).eq(getattr(self, name))
        # The DMA and the MicC may overlap (the DMA-in of the Dbufs behind the configuration):
        # the MicC holds its first context while any channel is busy, and flags a Cbuf write
        # while it runs (the Cbufs are single-ported; the host loads them first).
        start = Signal()
        dma_busy = Cat(*[d.o_busy for d in dmas]).any()
        # An armed start fires when the DMA has written the Cbuf words the host named.
        armed, need, written = Signal(), Signal(32), Signal(32)
        with m.If(self.i_dma_start):
            m.d.sync += written.eq(0)
        with m.Elif(dma.cbuf_wr_en):
            m.d.sync += written.eq(increment(written))
        with m.If(self.i_start):
            m.d.sync += [armed.eq(1), need.eq(self.i_cbuf_words)]
        with m.Elif(start):
            m.d.sync += armed.eq(0)
        m.d.comb += [start.eq(armed & ~(written < need)), micc.i_start.eq(start),
                     micc.i_hold.eq(~self._ready(m, micc, dmas, start, dma_busy)),
                     micc.i_cbuf_write.eq(dma.cbuf_wr_en)]
        for c, d in enumerate(dmas):
            sfx = f"_{c}" if c else ""
            m.d.comb += [d.i_start.eq(self.i_dma_start),
                         d.i_list.eq(getattr(self, f"i_dma_list{sfx}")),
                         d.i_count.eq(getattr(self, f"i_dma_count{sfx}"))]
            wiring.connect(m, d.o_ext_rd, wiring.flipped(getattr(self, f"o_ext_rd{sfx}")))
            wiring.connect(m, wiring.flipped(getattr(self, f"i_ext_rdata{sfx}")), d.i_ext_rdata)
            wiring.connect(m, d.o_ext_wr, wiring.flipped(getattr(self, f"o_ext_wr{sfx}")))
        # Channels start together; the job is done when every channel is (the cycles: from
        # the start to the last channel's halt).
        dma_cycles = Signal(32)
        with m.If(self.i_dma_start):
            m.d.sync += dma_cycles.eq(0)
        with m.Elif(dma_busy):
            m.d.sync += dma_cycles.eq(increment(dma_cycles))
        m.d.comb += [
            self.o_dma_state.eq(dma.o_state), self.o_dma_busy.eq(dma_busy),
            self.o_dma_done.eq(Cat(*[d.o_done for d in dmas]).all()),
            self.o_dma_halt.eq(Cat(*[d.o_halt for d in dmas]).all()),
            self.o_dma_error.eq(any_of([d.o_error for d in dmas])),
            self.o_dma_desc.eq(dma.o_desc),
            self.o_dma_cycles.eq(dma_cycles if len(dmas) > 1 else dma.o_cycles),
            self.o_ext_rd_bytes.eq(sum_of([d.o_rd_bytes for d in dmas], 40)),
            self.o_ext_wr_bytes.eq(sum_of([d.o_wr_bytes for d in dmas], 40)),
        ]
        m.d.sync += self.o_clock.eq(increment(self.o_clock))

        s.p, s.req, s.rep, s.micc, s.dma, s.dmas = p, req, rep, micc, dma, dmas
        s.start, s.armed = start, armed

    def _ready(self, m, micc, dmas, start, dma_busy):
        """Return whether the MicC's next context (``o_issued``) may start: the DMA job that
        was running when the MicC started (``start``) is over, or, gated (``i_ctx_gate``),
        every channel is done or has passed the fence of that context's group."""
        # ``loaded``: no DMA job of this MicC run is still going (a later job, e.g. the next
        # double-buffered pass's DMA-in, started while the contexts run, is not waited for).
        loaded, gate, shift = Signal(), Signal(), Signal(5, name="gate_shift")
        with m.If(start):
            m.d.sync += [loaded.eq(~dma_busy), gate.eq(self.i_ctx_gate),
                         shift.eq(self.i_gate_shift)]
        with m.Elif(~dma_busy):
            m.d.sync += loaded.eq(1)
        group = Signal(32, name="gate_group")
        m.d.comb += group.eq(micc.o_issued >> shift)
        passed = Cat(*[~d.o_busy | (group < zero_extend(d.o_fences, 32)) for d in dmas]).all()
        return loaded | ~dma_busy | (gate & passed)

    def _pes(self, m, s):
        """The PEs on the meshes (one shared Verilog module), their errors and fire counters,
        the CONFIG flits they take (``s.ejected_config``) and the flits they send."""
        p, req, rep, start = s.p, s.req, s.rep, s.start
        pe_err_any = Signal(len(PeError))
        ejected_config = []
        stray_req, stray_edge = Signal(), Signal()
        fires_int, fires_fp, injected = [], [], []
        for (x, y) in p.pe_coords():
            n = y * p.cols + x
            # The coordinate is an input: every PE is the same Verilog module (hw.lib.shared).
            inner = Pe(p, micc=(-1, 0))
            pe = Shared(inner, key=("fdpu_pe", p), name="fdpu_pe")
            m.submodules[f"pe_{x}_{y}"] = pe
            m.d.comb += [pe.i_coord.x.eq(x), pe.i_coord.y.eq(y)]
            wiring.connect(m, pe.o_req, req.i_local[n])
            wiring.connect(m, pe.o_rep, rep.i_local[n])
            wiring.connect(m, rep.o_local[n], pe.i_flit)
            ejected_config.append(rep.o_local[n].valid & rep.o_local[n].ready
                                  & (Bits(rep.o_local[n].payload.kind.as_value())
                                     == FlitKind.CONFIG.value))
            m.d.comb += req.o_local[n].ready.eq(1)
            with m.If(req.o_local[n].valid):
                m.d.sync += stray_req.eq(1)
            m.d.comb += self.o_pe_error[n].eq(pe.o_error.flags)
            fires_int.append(pe.o_fire.int_valid)
            fires_fp.append(pe.o_fire.fp_valid)
            injected += [pe.o_req.valid & pe.o_req.ready, pe.o_rep.valid & pe.o_rep.ready]
            with m.If(start):
                m.d.sync += [self.o_int_fires[n].eq(0), self.o_fp_fires[n].eq(0)]
            with m.Else():
                count = self.o_int_fires[n]
                if p.int_issue == 2:
                    # Both INT pipes may fire in one cycle (ArrayParams.int_issue == 2).
                    fired = popcount([pe.o_fire.int_valid, pe.o_fire.int2_valid], len(count))
                    m.d.sync += count.eq((count + fired)[:len(count)])
                else:
                    with m.If(pe.o_fire.int_valid):
                        m.d.sync += count.eq(increment(count))
                with m.If(pe.o_fire.fp_valid):
                    m.d.sync += self.o_fp_fires[n].eq(increment(self.o_fp_fires[n]))
        m.d.comb += pe_err_any.eq(Cat(*[
            Cat(*[self.o_pe_error[n][b] for n in range(p.num_pes)]).any()
            for b in range(len(PeError))]))

        s.pe_err_any, s.ejected_config, s.injected = pe_err_any, ejected_config, injected
        s.stray_req, s.stray_edge = stray_req, stray_edge

    def _dbufs(self, m, s):
        """The Dbufs at the edge ports, merged with the MicC's outputs at the configuration
        ports and with the DMA channels at theirs; stray flits at the other edges."""
        p, req, rep, micc, dma, dmas = s.p, s.req, s.rep, s.micc, s.dma, s.dmas
        stray_edge = s.stray_edge
        accepted = []
        for k in range(p.num_dbufs):
            dbuf = Dbuf(p, k, inline_bits=0 if self.behavioural else 1 << 20)
            m.submodules[f"dbuf{k}"] = dbuf
            wiring.connect(m, req.o_edge[k], dbuf.i_req)
            # PE requests only: the DMA's STOREs/LOADs come in through the same port (they
            # overlap the MicC's run when configuration hides behind the DMA-in); a PE's
            # reply-to coordinate is inside the array (biased 1..cols, 1..rows).
            src = body_view(req.o_edge[k].payload, FlitKind.LOAD, p)
            from_pe = (src.src_x.any() & ~equals(src.src_x, p.cols + 1)
                       & src.src_y.any() & ~equals(src.src_y, p.rows + 1))
            accepted.append(dbuf.i_req.valid & dbuf.i_req.ready & from_pe)
            # The reply mesh's input here: the Dbuf's replies, merged with a MicC output at a
            # configuration port.
            if k in self.config_ports:
                q = self.config_ports.index(k)
                _merge(m, getattr(micc, f"o_flit_{q}" if q else "o_flit"), dbuf.o_reply,
                       rep.i_edge[k], f"micc_merge_{q}" if q else "micc_merge")
            else:
                wiring.connect(m, dbuf.o_reply, rep.i_edge[k])
            if k == self.micc_port:
                # The DMA's requests enter the request mesh here; reply-mesh flits leaving
                # here are REPLYs for the DMA or CTX_ENDs (anything else) for the MicC.
                wiring.connect(m, dma.o_req, req.i_edge[k])
                out = rep.o_edge[k]
                to_dma = Bits(out.payload.kind.as_value()) == FlitKind.REPLY.value
                m.d.comb += [
                    dma.i_rep.payload.eq(out.payload), micc.i_flit.payload.eq(out.payload),
                    dma.i_rep.valid.eq(out.valid & to_dma),
                    micc.i_flit.valid.eq(out.valid & ~to_dma),
                    out.ready.eq(1),              # both are always ready
                ]
            elif k in self.dma_ports:
                # An extra DMA channel: its requests enter here, REPLY flits leaving here are
                # its acks and load data, anything else is stray.
                ch = dmas[self.dma_ports.index(k)]
                wiring.connect(m, ch.o_req, req.i_edge[k])
                out = rep.o_edge[k]
                to_dma = Bits(out.payload.kind.as_value()) == FlitKind.REPLY.value
                m.d.comb += [ch.i_rep.payload.eq(out.payload),
                             ch.i_rep.valid.eq(out.valid & to_dma), out.ready.eq(1)]
                with m.If(out.valid & ~to_dma):
                    m.d.sync += stray_edge.eq(1)
            else:
                m.d.comb += req.i_edge[k].valid.eq(0)
                m.d.comb += rep.o_edge[k].ready.eq(1)
                with m.If(rep.o_edge[k].valid):
                    m.d.sync += stray_edge.eq(1)
        s.accepted = accepted

    def _status(self, m, s):
        """The MicC's CONFIG deliveries, the request and flit counters, the errors and the
        host's status registers."""
        micc, start, armed = s.micc, s.start, s.armed
        accepted, injected, ejected_config = s.accepted, s.injected, s.ejected_config
        stray_req, stray_edge, pe_err_any = s.stray_req, s.stray_edge, s.pe_err_any
        # CONFIG flits ejected into PEs since the start (at most one per PE and cycle): the
        # MicC starts contexts only when every CONFIG flit it sent is in its PE.
        delivered = Signal(32)
        m.d.comb += micc.i_delivered.eq(delivered)
        with m.If(start):
            m.d.sync += delivered.eq(0)
        with m.Else():
            m.d.sync += delivered.eq((delivered + popcount(ejected_config, 32))[:32])
        with m.If(start):
            m.d.sync += [stray_req.eq(0), stray_edge.eq(0), self.o_dbuf_reqs.eq(0),
                         self.o_mesh_flits.eq(0)]
        with m.Else():
            m.d.sync += [self.o_dbuf_reqs.eq((self.o_dbuf_reqs + popcount(accepted, 40))[:40]),
                         self.o_mesh_flits.eq((self.o_mesh_flits + popcount(injected, 40))[:40])]

        error = Signal(len(ERROR_BITS))
        m.d.comb += error.eq(Cat(micc.o_error, pe_err_any, stray_req, stray_edge))
        m.d.comb += [
            self.o_error.eq(error),
            self.o_done.eq(micc.o_done & ~error.any() & ~armed),
            self.o_halt.eq((micc.o_done | error.any() | equals(micc.o_state, MiccState.DONE))
                           & ~armed),
            self.o_state.eq(micc.o_state), self.o_issued.eq(micc.o_issued),
            self.o_retired.eq(micc.o_retired), self.o_ends.eq(micc.o_ends),
            self.o_cycles.eq(micc.o_cycles),
            self.o_config_cycles.eq(micc.o_config_cycles),
            self.o_hold_cycles.eq(micc.o_hold_cycles),
            self.o_config_hidden.eq(micc.o_config_hidden),
        ]



_ARRAY, _SYSTEM = ArrayParams(), System()


def build_fdpu(rows=_ARRAY.rows, cols=_ARRAY.cols, slots=_ARRAY.slots,
               operand_depth=_ARRAY.operand_depth, dbuf_bytes=_ARRAY.dbuf_bytes,
               cbufs=_ARRAY.cbufs, cbuf_bytes=_ARRAY.cbuf_bytes, depth=4,
               int_issue=_ARRAY.int_issue, behavioural=True,
               dma_channels=_SYSTEM.dma_channels, config_ports=_SYSTEM.config_ports):
    """Return an :class:`FDPU` for ``fdpu verilog --top fdpu``; the defaults are
    ``ArrayParams()`` in ``System()``, the README's configuration."""
    return FDPU(ArrayParams(rows=rows, cols=cols, slots=slots, operand_depth=operand_depth,
                            dbuf_bytes=dbuf_bytes, cbufs=cbufs, cbuf_bytes=cbuf_bytes,
                            int_issue=int_issue),
                depth=depth, behavioural=behavioural, dma_channels=dma_channels,
                config_ports=config_ports)
