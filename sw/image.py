"""The binary configuration image: what the MicC loads into the array and the Dbufs.

Contract
--------
An :class:`Image` holds

* ``program``: ``uint64[rows, cols, slots, parts]``, the instruction word of every slot in
  64-bit parts (part 0 = bits 63:0), as the MicC sends them in ``CONFIG``/``INSN`` flits;
  unused slots are 0 (``INVALID``);
* ``regs``: ``uint64[rows, cols, regs]``, the local registers (``CONFIG``/``REG``);
* ``preloads``: rows ``(x, y, slot, operand, value)``, the initial tokens of feedback edges
  (``CONFIG``/``PRELOAD``), in delivery order;
* ``segments``: ``{global byte address: bytes}``, the Dbuf contents before the run (everything
  else is 0);
* ``contexts``, ``window`` (contexts in flight, ``1 .. operand_depth``) and
  ``ends_per_context`` (context-end messages the MicC waits for per context);
* ``meta``: JSON-friendly notes (the plan, where the outputs are).

:meth:`Image.check` validates everything against the image's :class:`~sw.arch.ArrayParams`
(every word decodes, every destination and segment is inside the array and the Dbufs) and
raises :class:`~sw.errors.FdpuError` naming the fault.  :meth:`Image.save` writes an
uncompressed ``.npz``; :func:`load` reads and checks one.
"""

from dataclasses import asdict, dataclass, field
import json
import os
import zipfile

import numpy as np

from . import isa
from .arch import ArrayParams
from .errors import FdpuError

__all__ = ["FORMAT_TAG", "Image", "load"]

#: Format tag stored in every image file.
FORMAT_TAG = "fdpu-image-v1"


def word_parts(params):
    """Return the 64-bit parts of one instruction word for ``params``."""
    return isa.insn_layout(params).width // 64


@dataclass
class Image:
    """One configuration image (see the module doc)."""
    params: ArrayParams
    program: np.ndarray
    regs: np.ndarray
    preloads: list
    segments: dict
    contexts: int
    window: int
    ends_per_context: int
    meta: dict = field(default_factory=dict)

    def word(self, x, y, slot):
        """Return the instruction word of a slot as an int."""
        parts = self.program[y, x, slot]
        return sum(int(p) << (64 * i) for i, p in enumerate(parts))

    def instructions(self):
        """Return ``{(x, y, slot): Instruction}`` of every configured slot (decoded)."""
        out = {}
        ys, xs, ss = np.nonzero(self.program.any(axis=3))
        for y, x, s in zip(ys.tolist(), xs.tolist(), ss.tolist()):
            out[(x, y, s)] = isa.decode(self.word(x, y, s), self.params)
        return out

    def check(self):
        """Raise :class:`FdpuError` unless the image is consistent with its parameters."""
        p = self.params
        shape = (p.rows, p.cols, p.slots, word_parts(p))
        if self.program.shape != shape or self.program.dtype != np.uint64:
            raise FdpuError(f"image program has shape {self.program.shape} "
                            f"{self.program.dtype}; a {p.rows}x{p.cols} array with {p.slots} "
                            f"slots needs uint64 {shape}")
        if self.regs.shape != (p.rows, p.cols, p.regs):
            raise FdpuError(f"image registers have shape {self.regs.shape}, expected "
                            f"{(p.rows, p.cols, p.regs)}")
        insns = self.instructions()
        for x, y, slot, operand, value in self.preloads:
            insn = insns.get((x, y, slot))
            if insn is None or operand not in insn.token_operands:
                raise FdpuError(f"preload for ({x},{y}).{slot}.{operand} names no token "
                                f"operand of a configured instruction")
            if not 0 <= value < 1 << 64:
                raise FdpuError(f"preload value {value} does not fit 64 bits")
        for (x, y, s), insn in insns.items():
            for d in insn.dests:
                tgt = insns.get((d.x, d.y, d.slot))
                if tgt is None:
                    raise FdpuError(f"instruction at ({x},{y}).{s} sends to {d}, an "
                                    f"unconfigured slot")
                if d.operand not in tgt.token_operands:
                    raise FdpuError(f"instruction at ({x},{y}).{s} sends to {d}, which is "
                                    f"not a token operand of {tgt.op.name}")
        for addr, data in self.segments.items():
            if not 0 <= addr or addr + len(data) > p.memory_bytes:
                raise FdpuError(f"memory segment at {addr:#x} ({len(data)} bytes) is outside "
                                f"the Dbufs (0..{p.memory_bytes - 1:#x})")
            if len(data) and p.dbuf_of(addr)[0] != p.dbuf_of(addr + len(data) - 1)[0]:
                raise FdpuError(f"memory segment at {addr:#x} ({len(data)} bytes) crosses a "
                                f"Dbuf boundary")
        if not isinstance(self.contexts, int) or self.contexts < 0:
            raise FdpuError(f"contexts must be a non-negative integer, got {self.contexts!r}")
        if not 1 <= self.window <= p.operand_depth:
            raise FdpuError(f"window must be in 1..{p.operand_depth} (operand_depth), got "
                            f"{self.window}")
        ends = sum(1 for i in insns.values() if i.end)
        if self.ends_per_context != ends or (self.contexts and not ends):
            raise FdpuError(f"ends_per_context is {self.ends_per_context} but the program has "
                            f"{ends} END instructions (need at least one to finish)")
        if not any(i.op is isa.Op.CTX for i in insns.values()) and self.contexts:
            raise FdpuError("the program has no CTX instruction: no context can start")

    def save(self, path):
        """Write the image as an uncompressed ``.npz`` to ``path``."""
        addrs = sorted(self.segments)
        blob = b"".join(self.segments[a] for a in addrs)
        info = dict(format=FORMAT_TAG, params=asdict(self.params), contexts=self.contexts,
                    window=self.window, ends_per_context=self.ends_per_context,
                    meta=self.meta)
        pre = np.array([[x, y, s, o] for x, y, s, o, _ in self.preloads],
                       dtype=np.int64).reshape(-1, 4)
        prev = np.array([v for *_, v in self.preloads], dtype=np.uint64)
        np.savez(path, info=np.array(json.dumps(info)), program=self.program, regs=self.regs,
                 preloads=pre, preload_values=prev,
                 seg_addr=np.array(addrs, dtype=np.int64),
                 seg_len=np.array([len(self.segments[a]) for a in addrs], dtype=np.int64),
                 seg_data=np.frombuffer(blob, dtype=np.uint8))


def load(path):
    """Read and check an image written by :meth:`Image.save`.

    Raises
    ------
    FdpuError
        If the file is not an FDPU image or the image is malformed.
    """
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        raise FdpuError(f"{path}: not an FDPU image (.npz written by 'fdpu asm')")
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(str(z["info"]))
            if info.get("format") != FORMAT_TAG:
                raise FdpuError(f"{path}: format tag {info.get('format')!r}, expected "
                                f"{FORMAT_TAG!r}")
            params = ArrayParams(**info["params"])
            pre, prev = z["preloads"], z["preload_values"]
            addrs, lens, data = z["seg_addr"], z["seg_len"], z["seg_data"].tobytes()
            segments, o = {}, 0
            for a, n in zip(addrs.tolist(), lens.tolist()):
                segments[a] = data[o:o + n]
                o += n
            img = Image(params, z["program"], z["regs"],
                        [(*map(int, r), int(v)) for r, v in zip(pre, prev)], segments,
                        int(info["contexts"]), int(info["window"]),
                        int(info["ends_per_context"]), info.get("meta", {}))
    except FdpuError:
        raise
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise FdpuError(f"{path}: malformed FDPU image ({type(exc).__name__}: {exc})") from None
    img.check()
    return img
