"""The runtime: turn an image into memory files for the RTL top, run it, read the results back.

Contract
--------
* :func:`image_flits` lists what the MicC sends: the CONFIG flits (instruction parts of every
  configured slot, non-zero registers, preloads, in that order) and one OPERAND template per
  ``CTX`` slot (the MicC writes the context ID into ``data``).  They go into the Cbufs, the
  CONFIG flits first (``docs/system.md``).
* :func:`write_memories` writes the ``$readmemh`` files the top loads at time 0 in the
  simulator's working directory: ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` (``@word`` records,
  64-bit little-endian words, only the image's segments).
* :func:`run_rtl` builds the top for the image's parameters, runs ``tb.top.test_run`` on
  Icarus or Verilator (Python awaits only the top's ``o_halt``, with a cycle bound), and returns
  an :class:`RtlRun` with the read-back Dbuf words and the hardware counters.
* :func:`run_fc_rtl` runs every pass of an FC plan that way and gathers the result like
  :func:`sw.golden.run_fc` (exact) does, so the two can be compared bit for bit.

Errors: an image whose configuration does not fit the Cbufs raises :class:`FdpuError` before
any simulation (the MicC also flags it in hardware); a run that does not finish within its
cycle bound, or ends with error bits, raises :class:`RtlError` whose message names the MicC
state, contexts issued/retired/ended and every PE's error flags.
"""

from dataclasses import dataclass, field
import json
import os
import tempfile

import numpy as np

from . import isa
from .arch import ArrayParams
from .errors import FdpuError
from .packet import ConfigWhat, Kind, body_layout, flit_width, header_layout

__all__ = ["RtlError", "RtlRun", "image_flits", "write_memories", "cbuf_capacity",
           "run_rtl", "run_fc_rtl", "MICC_STATES", "PE_ERRORS", "MICC_ERRORS"]

#: Names of the MicC states (``hw.micc.MiccState``; kept here so ``sw`` needs no ``hw``).
MICC_STATES = ("IDLE", "CONFIG", "DRAIN", "CTX", "WAIT", "DONE")
#: Names of the MicC error bits (``hw.micc.MiccError``).
MICC_ERRORS = ("CONFIG_TOO_BIG", "BAD_REGS", "BAD_FLIT", "BAD_END")
#: Names of the PE error bits (``hw.pe_types.PeError``).
PE_ERRORS = ("UNKNOWN_OPCODE", "OVERFLOW", "BAD_ADDRESS", "DBUF_ERROR")


class RtlError(FdpuError):
    """The RTL run ended in an error or did not finish (deadlock/timeout)."""


def _flit(params, kind, x, y, **body):
    header = header_layout(params)
    word = header.pack(kind=int(kind), dst_x=x + 1, dst_y=y + 1)
    return word | body_layout(kind, params).pack(**body) << header.width


def cbuf_word_bits(params):
    """Return the bits of one Cbuf word (``hw.cbuf.word_bits``)."""
    return -(-flit_width(params) // 64) * 64


def cbuf_capacity(params):
    """Return how many flits the Cbufs hold."""
    return params.cbufs * (params.cbuf_bytes * 8 // cbuf_word_bits(params))


def image_flits(image):
    """Return ``(config, templates)``: the CONFIG flits and the CTX OPERAND templates (ints)."""
    p = image.params
    config, templates = [], []
    configured = image.program.any(axis=3)
    for y, x, s in zip(*(a.tolist() for a in np.nonzero(configured))):
        for j, part in enumerate(image.program[y, x, s].tolist()):
            config.append(_flit(p, Kind.CONFIG, x, y, what=ConfigWhat.INSN, index=j, slot=s,
                                data=part))
    for y, x, r in zip(*(a.tolist() for a in np.nonzero(image.regs))):
        config.append(_flit(p, Kind.CONFIG, x, y, what=ConfigWhat.REG, index=r, slot=0,
                            data=int(image.regs[y, x, r])))
    for x, y, s, o, v in image.preloads:
        config.append(_flit(p, Kind.CONFIG, x, y, what=ConfigWhat.PRELOAD, index=o, slot=s,
                            data=v))
    for (x, y, s), insn in sorted(image.instructions().items(), key=lambda t: (t[0][1],
                                                                               t[0][0], t[0][2])):
        if insn.op is isa.Op.CTX:
            templates.append(_flit(p, Kind.OPERAND, x, y, slot=s, operand=0, data=0))
    return config, templates


def _hex_lines(words, width):
    digits = width // 4
    return [f"{w:0{digits}x}" for w in words]


def write_memories(image, folder, config=None, templates=None):
    """Write ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` for ``image`` into ``folder``.

    Returns ``(n_config, n_ctx)``.  Raises :class:`FdpuError` when the configuration does not
    fit the Cbufs.
    """
    p = image.params
    if config is None:
        config, templates = image_flits(image)
    words = list(config) + list(templates)
    cap = cbuf_capacity(p)
    if len(words) > cap:
        raise FdpuError(f"the configuration needs {len(words)} Cbuf words ({len(config)} "
                        f"CONFIG flits + {len(templates)} CTX templates), more than the "
                        f"{p.cbufs} Cbufs of {p.cbuf_bytes} bytes hold ({cap})")
    os.makedirs(folder, exist_ok=True)
    wb = cbuf_word_bits(p)
    depth = cap // p.cbufs
    for i in range(p.cbufs):
        chunk = words[i * depth:(i + 1) * depth]
        with open(os.path.join(folder, f"cbuf_{i}.hex"), "w") as f:
            f.write("\n".join(_hex_lines(chunk, wb) or ["0"]) + "\n")
    per = {k: [] for k in range(p.num_dbufs)}
    for addr, blob in sorted(image.segments.items()):
        k, off = p.dbuf_of(addr)
        per[k].append((off, blob))
    for k, segs in per.items():
        lines = []
        for off, blob in segs:
            lo = off & ~7
            pad = bytes(off - lo) + bytes(blob)
            pad += bytes(-len(pad) % 8)
            w = np.frombuffer(pad, dtype="<u8")
            lines.append(f"@{lo // 8:x}")
            lines.extend(np.char.mod("%016x", w).tolist())
        with open(os.path.join(folder, f"dbuf_{k}.hex"), "w") as f:
            f.write("\n".join(lines or ["0"]) + "\n")
    return len(config), len(templates)
