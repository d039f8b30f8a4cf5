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
* ``ctx_base``: the first context ID (the CTX tokens carry ``ctx_base .. ctx_base + contexts
  - 1``; the odd passes of a double-buffered layer read the second half of their descriptor
  tables with it, ``sw.compiler.dbuf_layout``);
* ``meta``: JSON-friendly notes (the plan, where the outputs are).

:meth:`Image.cbuf_words` encodes the image for the Cbufs as 64-bit words, compactly (only
what the graph uses, about one word per CONFIG flit): the *configuration* is a list of
records, each a header word (:func:`sw.spec.cbuf.cbuf_header_layout`: ``what``, destination PE
(biased), first ``slot`` and ``index``, ``count``) followed by ``count`` data words; data word ``i``
becomes one CONFIG flit of that ``what`` for that PE, at the header's ``(slot, index)``
advanced ``i`` times (INSN: ``index`` counts the instruction word's 64-bit parts, then
``slot`` moves on; REG and PRELOAD: ``index`` counts).  A run of consecutive configured slots
of a PE is one record, so is a run of non-zero registers; a preload is a record of one word.
Then one *CTX template* word per ``CTX`` slot (:func:`sw.spec.cbuf.cbuf_template_layout`:
destination PE, ``slot``, ``operand``): the MicC sends it as an OPERAND flit whose data is the
context ID. :func:`expand_cbuf` is the MicC's expansion in Python (the reference of
``hw.ctrl.micc``).

Several configuration ports (``hw.ctrl.micc.Micc(ports=P)``): :meth:`Image.cbuf_port_words` splits
the records by PE over the ports of :func:`sw.spec.ports.config_ports` (one edge port per array
edge): each PE goes to the port nearest to it (:func:`sw.spec.ports.config_port_of`), so on a square
array each port configures one quadrant and the ports' flits share no mesh link.  Port ``p``'s words
go to Cbuf region ``p`` (``P`` regions of whole banks); the CTX templates follow port 0's records.

:meth:`Image.check` validates everything against the image's :class:`~sw.spec.arch.ArrayParams`
(every word decodes, every destination and segment is inside the array and the Dbufs) and
raises :class:`~sw.spec.errors.FdpuError` naming the fault.  :meth:`Image.save` writes an
uncompressed ``.npz``; :func:`load` reads and checks one.
"""

import json
import os
import zipfile
from dataclasses import asdict, dataclass, field

import numpy as np

from sw.spec import isa
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import (MAX_RECORD, cbuf_header_layout, cbuf_template_layout,
                          word_parts)
from sw.spec.errors import FdpuError
from sw.spec.packet import ConfigWhat, Kind, pack_flit, unbias
from sw.spec.ports import config_port_of

__all__ = ["FORMAT_TAG", "Image", "load", "expand_cbuf"]


#: Format tag stored in every image file.
FORMAT_TAG = "fdpu-image-v1"


def _runs_of(indices):
    """Return ``[(first, length)]`` of the runs of consecutive integers in sorted ``indices``."""
    runs = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][1] < MAX_RECORD // 4:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return runs


def expand_cbuf(params, config, templates, ctx=0):
    """Return the flits (ints) the MicC sends for Cbuf ``config`` and ``templates`` words.

    The CONFIG flits of every record in order, then the OPERAND flit of every template with
    data ``ctx`` (one context start).  Raises :class:`FdpuError` when a record runs past the
    end of ``config``.
    """
    hdr, tpl = cbuf_header_layout(params), cbuf_template_layout(params)
    parts = word_parts(params)
    config = [int(w) for w in config]
    flits, i = [], 0
    while i < len(config):
        h = hdr.unpack(config[i])
        if i + 1 + h["count"] > len(config):
            raise FdpuError(f"Cbuf record at word {i} announces {h['count']} data words; only "
                            f"{len(config) - i - 1} follow")
        slot, index = h["slot"], h["index"]
        dst = (unbias(h["dst_x"]), unbias(h["dst_y"]))
        for word in config[i + 1:i + 1 + h["count"]]:
            # INSN: part 0 first, as every packer of the project (the PE takes any order).
            flits.append(pack_flit(params, Kind.CONFIG, dst, what=h["what"], index=index,
                                   slot=slot, data=word))
            index += 1
            if h["what"] == ConfigWhat.INSN and index == parts:
                slot, index = slot + 1, 0
        i += 1 + h["count"]
    for word in templates:
        t = tpl.unpack(int(word))
        flits.append(pack_flit(params, Kind.OPERAND, (unbias(t["dst_x"]), unbias(t["dst_y"])),
                               slot=t["slot"], operand=t["operand"], data=ctx))
    return flits


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
    ctx_base: int = 0

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

    def cbuf_words(self):
        """Return ``(config, templates)``: the image as Cbuf words (uint64 arrays, module doc).

        Only what the graph uses: the configured slots, the non-zero registers, the preloads
        and the CTX slots, in the order of the flits of ``tb.host.memories.image_flits``.
        """
        configs, templates = self.cbuf_port_words(1)
        return configs[0], templates

    def cbuf_port_words(self, ports):
        """Return ``(configs, templates)``: per configuration port its Cbuf records, and the
        CTX templates (port 0's), as uint64 arrays (module doc).

        Port ``q`` gets the records of the PEs :func:`config_port_of` gives it, in the order
        of :meth:`cbuf_words` (so every PE receives its flits in the same order).
        """
        p = self.params
        owner = config_port_of(p, ports)
        out = [[] for _ in range(ports)]
        hdr, tpl = cbuf_header_layout(p), cbuf_template_layout(p)
        parts = self.program.shape[3]
        configured = self.program.any(axis=3)
        for y in range(p.rows):
            for x in range(p.cols):
                words = out[owner[y, x]]
                for first, n in _runs_of(np.nonzero(configured[y, x])[0].tolist()):
                    words.append(hdr.pack(what=ConfigWhat.INSN, dst_x=x + 1, dst_y=y + 1,
                                          slot=first, index=0, count=n * parts))
                    words.extend(self.program[y, x, first:first + n].reshape(-1).tolist())
        for y in range(p.rows):
            for x in range(p.cols):
                words = out[owner[y, x]]
                for first, n in _runs_of(np.nonzero(self.regs[y, x])[0].tolist()):
                    words.append(hdr.pack(what=ConfigWhat.REG, dst_x=x + 1, dst_y=y + 1,
                                          slot=0, index=first, count=n))
                    words.extend(self.regs[y, x, first:first + n].tolist())
        for x, y, s, o, v in self.preloads:
            words = out[owner[y, x]]
            words.append(hdr.pack(what=ConfigWhat.PRELOAD, dst_x=x + 1, dst_y=y + 1, slot=s,
                                  index=o, count=1))
            words.append(v)
        # The CTX slots, by row, column and slot: their opcode field is in part 0.
        lay = isa.insn_layout(p)
        ops = (self.program[..., 0] >> np.uint64(lay.offsets["op"])) \
            & np.uint64((1 << lay.field("op").width) - 1)
        ys, xs, ss = np.nonzero(configured & (ops == isa.Op.CTX.value))
        templates = [tpl.pack(dst_x=x + 1, dst_y=y + 1, slot=s, operand=0)
                     for y, x, s in zip(ys.tolist(), xs.tolist(), ss.tolist())]
        return ([np.array([int(w) for w in words], dtype=np.uint64) for words in out],
                np.array(templates, dtype=np.uint64))

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
        if isinstance(self.ctx_base, bool) or not isinstance(self.ctx_base, int) \
                or not 0 <= self.ctx_base or self.ctx_base + self.contexts > 1 << 32:
            raise FdpuError(f"ctx_base must be a non-negative integer with ctx_base + contexts "
                            f"below 2**32, got {self.ctx_base!r}")
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
                    ctx_base=self.ctx_base, meta=self.meta)
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
                        int(info["ends_per_context"]), info.get("meta", {}),
                        int(info.get("ctx_base", 0)))
    except FdpuError:
        raise
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise FdpuError(f"{path}: malformed FDPU image ({type(exc).__name__}: {exc})") from None
    img.check()
    return img
