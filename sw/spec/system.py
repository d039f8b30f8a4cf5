"""The system around the array: DMA channels, external memory, configuration ports; and the
simulators that run its Verilog.

:class:`System` is one frozen value that the performance model (:mod:`sw.models.perf`), the
RTL runtime (:mod:`tb.host.runtime`), the hardware top's factory (:func:`hw.top.build_fdpu`)
and every command (:data:`sw.cli.options.DEFAULTS`) take their system defaults from, as
:class:`sw.spec.arch.ArrayParams` is for the array.  ``System()`` is the configuration the
README's figures are measured on.
"""

from dataclasses import dataclass

from sw.spec.errors import FdpuError

__all__ = ["System", "DEFAULT", "SIMULATORS"]

#: The HDL simulators that run the generated Verilog (``tb.host.runner``), every test of a
#: block on each: the one list the commands' ``--sim`` choices and the tests take.
SIMULATORS = ("icarus", "verilator")


@dataclass(frozen=True)
class System:
    """The system around one array (defaults: the README's configuration).

    Parameters
    ----------
    dma_channels : int
        DMA channels, each with its own edge port of the mesh and its own external-memory
        port (one per array edge by default).
    mem_latency : int
        Cycles from an external read request to its data.
    mem_bandwidth : float
        Bytes per cycle of each channel's external-memory port (8: one 64-bit beat a cycle).
    config_ports : int
        MicC configuration ports (1, 2 or 4, each over its own Cbufs and mesh edge).
    overlap : bool
        The DMA of a pass overlaps its configuration (the contexts still wait for the DMA-in).
    early_start : bool or None
        Each context starts as soon as its own data are in the Dbufs, beside the rest of its
        pass's DMA-in (``docs/system.md``, "Contexts start when their data are in"); else a
        pass's contexts wait for its whole DMA-in. It needs ``overlap``: ``None`` (the
        default) is ``overlap``, and ``True`` without it is refused. Always a bool once made.
    edge_multicast : bool
        A block several Dbufs of one edge hold is sent by its channel as one edge-multicast
        flit a word, which the mesh writes into each of them (``docs/system.md``, "Edge
        multicast"); else one STORE a word and Dbuf.
    config_spans : bool
        The Cbufs hold the slots that PEs share once, in records of a span of PEs the MicC
        sends to each of them (``docs/system.md``, "MicC"); else one PE's each (the default:
        with early start, the earlier configuration slows streamed layers on the 8 x 8).
    """
    dma_channels: int = 4
    mem_latency: int = 20
    mem_bandwidth: float = 8.0
    config_ports: int = 4
    overlap: bool = True
    early_start: bool | None = None
    edge_multicast: bool = True
    config_spans: bool = False

    def __post_init__(self):
        if self.early_start is None:
            object.__setattr__(self, "early_start", bool(self.overlap))
        elif self.early_start and not self.overlap:
            raise FdpuError("early start runs contexts beside their pass's DMA-in: it needs "
                            "overlap (not --no-overlap)")


#: The README's system: 4 DMA channels at 8 B/cycle with 20 cycles of latency, 4 ports, the
#: configuration overlapped with the DMA-in, early start and edge multicast.
DEFAULT = System()
