"""Amaranth payload layouts of the processing element, derived from
:mod:`sw.spec.isa`/:mod:`sw.spec.packet`.

Every layout here is built from the one source of truth (:func:`sw.spec.isa.insn_layout`)
through :meth:`sw.spec.bitfields.Layout.struct_fields`, so the
bit positions the PE decodes are the ones the assembler encodes.

* :func:`insn_struct` -- the instruction word.
* :func:`loop_imm_struct` -- the ``count``/``step`` sub-fields of a counting instruction's ``imm``.
* :func:`coord_layout` -- a PE coordinate (the ``i_coord`` port).
* :func:`local_layout` -- a token written into this PE's operand buffer.
* :func:`dispatch_layout` -- a result with the destinations it still has to reach.
* :func:`insn_dest` -- destination ``i`` of an instruction word, as :func:`dest_layout` packs it.
* :func:`int_tag_layout`, :func:`fp_tag_layout` -- what rides through the INT and FP units
  beside an operation (the result's destinations and END; FACC bookkeeping).
* :func:`int_state_layout` -- the per-slot state of SCAN, ITER, BSCAN and BPOS.
"""

from amaranth import Cat
from amaranth.lib import data

from sw.spec.arch import bits_for
from sw.spec.isa import insn_layout, loop_imm_layout
from sw.spec.status import PeError

__all__ = ["insn_struct", "loop_imm_struct", "coord_layout", "dest_layout", "local_layout",
           "dispatch_layout", "insn_dest", "int_tag_layout", "fp_tag_layout",
           "int_state_layout", "error_layout"]


def insn_struct(params):
    """Return the instruction word of ``params`` as a ``data.StructLayout``."""
    return data.StructLayout(insn_layout(params).struct_fields())


def loop_imm_struct():
    """Return the immediate of the counting instructions (ITER, SCAN, BSCAN, BPOS, FACC) as a
    ``data.StructLayout`` of :func:`sw.spec.isa.loop_imm_layout`: ``count``, then ``step``
    (raw bits; ``step`` is two's complement, sign-extend it)."""
    return data.StructLayout(loop_imm_layout().struct_fields())


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


def insn_dest(insn, i):
    """Return destination ``i`` of the instruction word view ``insn`` as the bits of
    :func:`dest_layout` (``x``, ``y``, ``slot``, ``operand``)."""
    return Cat(getattr(insn, f"d{i}_x"), getattr(insn, f"d{i}_y"),
               getattr(insn, f"d{i}_slot"), getattr(insn, f"d{i}_operand"))


def int_tag_layout(params):
    """Return the tag of an INT unit operation: the result's ``dests``, ``dmask``, ``end``,
    ``ectx``, and ``wide``/``hi`` (MOV, CTX, SWITCH and MCAST forward the high 32 bits of
    operand 0)."""
    return data.StructLayout({"dests": dispatch_layout(params).members["dests"],
                              "dmask": params.MAX_DESTS, "end": 1, "ectx": 32, "wide": 1,
                              "hi": 32})


def fp_tag_layout(params):
    """Return the tag of an FP unit operation: the result's ``dests``, ``dmask``, ``end``,
    ``ectx``; ``facc`` (a FACC step), ``emit`` (its last: the result leaves), its ``slot``
    and the FACC ``count`` to store (:func:`hw.pe.fp_step.facc_state_layout`)."""
    return data.StructLayout({"dests": dispatch_layout(params).members["dests"],
                              "dmask": params.MAX_DESTS, "end": 1, "ectx": 32, "facc": 1,
                              "emit": 1, "slot": params.slot_bits, "count": 16})


def int_state_layout():
    """Return a slot's SCAN/ITER/BSCAN/BPOS state: ``acc`` (SCAN's sum, ITER's next value,
    BSCAN's running address, BPOS's base), ``count`` (SCAN's firings, ITER's/BSCAN's tokens
    left), ``mask`` (BSCAN's bits not yet scanned, BPOS's set bits not yet emitted)."""
    return data.StructLayout({"acc": 32, "count": 16, "mask": 32})


def error_layout(params):
    """Return the error status: ``flags`` (one bit per :class:`PeError`) and ``slot``."""
    return data.StructLayout({"flags": len(PeError), "slot": params.slot_bits})
