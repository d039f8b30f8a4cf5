"""The status registers of the MicC, the DMA and the PEs: their states and their error bits.

The hardware (:mod:`hw.ctrl.micc`, :mod:`hw.ctrl.dma`) shows its state in a
:data:`STATE_BITS`-bit register (``o_state``, the top's ``o_state`` / ``o_dma_state``) and its
errors in a sticky register with one bit per error (``o_error``, bit ``e`` set for error
``e``); a PE (:mod:`hw.pe.errors`) keeps its :class:`PeError` flags the same way.  The host
(:mod:`tb.host.run_results`) names what it reads with the same enums.

These are plain :class:`enum.IntEnum` (the spec needs no Amaranth); :func:`hw.lib.spec.shaped_enum`
derives the shaped Amaranth enums the state machines hold, with the same names and values.
"""

import enum

__all__ = ["STATE_BITS", "MiccState", "MiccError", "DmaState", "DmaError", "PeError"]

#: Bits of a state register (``o_state`` of the MicC and of the DMA).
STATE_BITS = 3


class MiccState(enum.IntEnum):
    """The MicC's state (``o_state``); a run goes IDLE, CONFIG, DRAIN, HOLD, CTX, WAIT, DONE
    (the values are not in that order: HOLD has the last value)."""
    IDLE = 0
    CONFIG = 1
    DRAIN = 2
    CTX = 3
    WAIT = 4
    DONE = 5
    HOLD = 6


class MiccError(enum.IntEnum):
    """Bit positions of the MicC's ``o_error``."""
    #: ``n_config + n_ctx`` (port 0) or ``n_config_<p>`` exceeds a port's Cbuf region.
    CONFIG_TOO_BIG = 0
    #: ``window`` outside ``1 .. operand_depth``, or contexts without CTX slots or ENDs.
    BAD_REGS = 1
    #: A flit other than CTX_END reached the MicC.
    BAD_FLIT = 2
    #: A CTX_END for a context that is not in flight, or more ends than ``i_ends``.
    BAD_END = 3
    #: The Cbufs were written (DMA) while the MicC was running.
    CBUF_BUSY = 4


class DmaState(enum.IntEnum):
    """The DMA's state (``o_state``)."""
    IDLE = 0
    FETCH = 1
    CHECK = 2
    MOVE = 3
    FINISH = 4
    DONE = 5


class DmaError(enum.IntEnum):
    """Bit positions of the DMA's ``o_error``."""
    #: A descriptor breaks the alignment/range rules.
    BAD_DESC = 0
    #: A Dbuf answered a DMA access with ``err``.
    DBUF_ERROR = 1


for _states in (MiccState, DmaState):
    if max(_states) >> STATE_BITS:
        raise ImportError(f"{_states.__name__} does not fit its {STATE_BITS}-bit register")


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
    #: A FACC with a count operand started an accumulation with a count of 0 (the step is
    #: done as if the count were 1: the run's results are not to be trusted).
    BAD_COUNT = 4
