"""The PE's sticky error status.

Contract
--------
* ``i_raise[j]`` (``valid``, ``slot``): condition ``j`` of this cycle; it sets flag
  ``flags[j]`` (a :class:`sw.spec.status.PeError`) of ``o_error.flags`` one cycle later, for
  good (only a reset clears it).  Several conditions may name the same flag.
* ``o_error.slot``: the slot of the first error: the ``slot`` of the lowest-numbered raised
  condition in the first cycle that raises one; later errors leave it.
"""

from amaranth import Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.spec import check_params
from hw.pe.layouts import error_layout
from sw.spec.status import PeError

__all__ = ["ErrorLatch"]


class ErrorLatch(wiring.Component):
    """Sticky error flags and the slot of the first error (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Sizes the slot numbers.
    flags : sequence of PeError
        The flag each ``i_raise`` condition sets, highest priority first.
    """

    def __init__(self, params, flags):
        check_params(params)
        flags = tuple(flags)
        if not flags or not all(isinstance(f, PeError) for f in flags):
            raise TypeError(f"flags must be a non-empty sequence of PeError, not {flags!r}")
        self._flags = flags
        super().__init__({
            "i_raise": In(data.StructLayout({"valid": 1, "slot": params.slot_bits}))
            .array(len(flags)),
            "o_error": Out(error_layout(params)),
        })

    def elaborate(self, platform):
        m = Module()
        err_flags = Signal(len(PeError))
        err_slot = Signal(len(self.o_error.slot))
        m.d.comb += [self.o_error.flags.eq(err_flags), self.o_error.slot.eq(err_slot)]
        first = Const(0, 1)
        for cond, flag in zip(self.i_raise, self._flags):
            with m.If(cond.valid):
                m.d.sync += err_flags[flag].eq(1)
                with m.If(~err_flags.any() & ~first):
                    m.d.sync += err_slot.eq(cond.slot)
            first = first | cond.valid
        return m
