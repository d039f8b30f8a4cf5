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
(biased), first ``slot`` and ``index``, ``count``, span) followed by ``count`` data words; data
word ``i`` becomes one CONFIG flit of that ``what`` for that PE, at the header's ``(slot,
index)`` advanced ``i`` times (INSN: ``index`` counts the instruction word's 64-bit parts, then
``slot`` moves on; REG and PRELOAD: ``index`` counts).  A run of consecutive configured slots
of a PE is one record, so is a run of non-zero registers; a preload is a record of one word.
With ``spans`` (:meth:`Image.cbuf_port_words`) the slots the PEs of a rectangle hold alike
are one record of its span, which the MicC sends to each of them, an INSN word moved to each
(:mod:`sw.spec.cbuf`).
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
(integer counts in range, every word decodes, every destination and segment is inside the array
and the Dbufs, segments do not overlap) and raises :class:`~sw.spec.errors.FdpuError` naming the
fault.  :meth:`Image.save` writes an uncompressed ``.npz``; :func:`load` reads one without
trusting it (every member and table checked, :mod:`sw.compiler.npyfile`) and checks the image.
"""

import dataclasses
import json
import numbers
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from sw.compiler import npyfile
from sw.spec import isa
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import (MAX_RECORD, cbuf_header_layout, cbuf_template_layout,
                          dest_fields, move_insn_part, valid_parts, word_parts)
from sw.spec.errors import FdpuError
from sw.spec.packet import ConfigWhat, Kind, pack_flit, unbias
from sw.spec.ports import config_port_of

__all__ = ["FORMAT_TAG", "MAX_CONTEXTS", "MAX_SEGMENTS", "MAX_INFO_BYTES", "Image", "load",
           "expand_cbuf", "config_word_counts"]


#: Format tag stored in every image file.
FORMAT_TAG = "fdpu-image-v1"
#: Most contexts one image may run.
MAX_CONTEXTS = 1 << 20
#: Most memory segments one image file may list.
MAX_SEGMENTS = 1 << 20
#: Most bytes the ``info`` member of an image file may declare (a string of 4 M characters).
MAX_INFO_BYTES = 1 << 24

#: The members of an image file, in the order :meth:`Image.save` writes them.
_MEMBERS = ("info", "program", "regs", "preloads", "preload_values", "seg_addr", "seg_len",
            "seg_data")
#: The keys of its ``info`` object; the first five are required.
_INFO_KEYS = ("format", "params", "contexts", "window", "ends_per_context", "ctx_base", "meta")


def _runs_of(indices):
    """Return ``[(first, length)]`` of the runs of consecutive integers in sorted ``indices``."""
    runs = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][1] < MAX_RECORD // 4:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return runs


def _rectangles(owner, port):
    """Return the rectangles ``(x0, y0, width, height)`` that cover the PEs of ``port``
    (``owner``: every PE's port): the PEs' bounding box where they fill it (a quadrant), else
    each row's runs of consecutive PEs; in row-major order of their first PE."""
    ys, xs = np.nonzero(owner == port)
    if not len(ys):
        return []
    y0, y1, x0, x1 = ys.min(), ys.max(), xs.min(), xs.max()
    if len(ys) == (y1 - y0 + 1) * (x1 - x0 + 1):
        return [(int(x0), int(y0), int(x1 - x0 + 1), int(y1 - y0 + 1))]
    out = []
    for y in range(int(y0), int(y1) + 1):
        for first, n in _runs_of(np.nonzero(owner[y] == port)[0].tolist()):
            out.append((first, y, n, 1))
    return out


def _moved(params, words, a, b):
    """Return ``words`` (``uint64[..., parts]``, one instruction word per row) moved by
    ``(a, b)`` (:func:`sw.spec.cbuf.move_insn_part`, vectorized over the rows)."""
    out = words.copy()
    for f in dest_fields(params):
        part = out[..., f.part]
        valid = (words[..., f.valid_part] >> np.uint64(f.valid_lo)) & np.uint64(1)
        mask = np.uint64((1 << f.width) - 1)
        field_ = (part >> np.uint64(f.lo)) & mask
        step = np.uint64((a if f.axis == "x" else b) % (1 << f.width))
        moved = ((field_ + step) & mask) << np.uint64(f.lo)
        keep = part & ~(mask << np.uint64(f.lo))
        out[..., f.part] = np.where(valid.astype(bool), keep | moved, part)
    return out


def _shared_slots(params, program, todo, rect):
    """Return the slots every PE of ``rect`` has yet to configure (``todo``: ``bool[rows,
    cols, slots]``) with the word of its first PE moved to it (:func:`_moved`): what one
    record of that span holds for all of them."""
    x0, y0, w, h = rect
    shared = todo[y0, x0].copy()
    base = program[y0, x0]
    for b in range(h):
        for a in range(w):
            if a or b:
                same = (program[y0 + b, x0 + a] == _moved(params, base, a, b)).all(axis=1)
                shared &= todo[y0 + b, x0 + a] & same
    return shared


def _insn_records(params, program, todo, rect):
    """Yield ``(x, y, first slot, slots, span)`` records that configure the slots ``todo``
    (``bool[rows, cols, slots]``, cleared as they are taken) of the PEs of ``rect``: the runs
    of slots all of them share (:func:`_shared_slots`) as records of the rectangle's span,
    then the rest in each half of the rectangle (cut across its longer side), down to single
    PEs."""
    x0, y0, w, h = rect
    if w * h == 1:
        for first, n in _runs_of(np.nonzero(todo[y0, x0])[0].tolist()):
            yield x0, y0, first, n, (0, 0)
        todo[y0, x0] = False
        return
    shared = _shared_slots(params, program, todo, rect)
    for first, n in _runs_of(np.nonzero(shared)[0].tolist()):
        yield x0, y0, first, n, (w - 1, h - 1)
    todo[y0:y0 + h, x0:x0 + w] &= ~shared
    if w >= h:
        halves = [(x0, y0, w // 2, h), (x0 + w // 2, y0, w - w // 2, h)]
    else:
        halves = [(x0, y0, w, h // 2), (x0, y0 + h // 2, w, h - h // 2)]
    for half in halves:
        yield from _insn_records(params, program, todo, half)


def _records(params, program, configured, regs, preloads, ports, spans=False):
    """Yield ``(port, what, x, y, slot, index, count, value, span)``, the configuration's
    records in Cbuf order (module doc): per port its PEs' configured slots (``configured``:
    ``bool[rows, cols, slots]``), per PE in row-major order its runs of slots, or with
    ``spans`` per rectangle of its PEs (:func:`_rectangles`) as records of the spans that
    share them (:func:`_insn_records`, ``program`` the words); then per PE its runs of non-zero
    registers (``regs``, or None for none), then every preload ``(x, y, slot, operand,
    value)`` of ``preloads``; ``port`` is the configuration port of the PE, ``value`` a
    preload's (0 otherwise), ``span`` ``(span_x, span_y)``."""
    owner = config_port_of(params, ports)
    parts = word_parts(params)
    todo = configured.copy()
    for port in range(ports):
        if spans:
            for rect in _rectangles(owner, port):
                for x, y, first, n, span in _insn_records(params, program, todo, rect):
                    yield port, ConfigWhat.INSN, x, y, first, 0, n * parts, 0, span
            continue
        for y, x in zip(*(a.tolist() for a in np.nonzero(owner == port))):
            for first, n in _runs_of(np.nonzero(configured[y, x])[0].tolist()):
                yield port, ConfigWhat.INSN, x, y, first, 0, n * parts, 0, (0, 0)
    if regs is not None:
        for y in range(params.rows):
            for x in range(params.cols):
                for first, n in _runs_of(np.nonzero(regs[y, x])[0].tolist()):
                    yield owner[y, x], ConfigWhat.REG, x, y, 0, first, n, 0, (0, 0)
    for x, y, s, o, v in preloads:
        yield owner[y, x], ConfigWhat.PRELOAD, x, y, s, o, 1, v, (0, 0)


def config_word_counts(params, program, preloads, ctx_slots, ports, spans=False, regs=None):
    """Return ``(per port the words of its Cbuf records, per port the CONFIG flits and record
    headers its MicC port sends and reads, the CTX template words)`` of an image whose slots
    hold ``program`` (``uint64[rows, cols, slots, parts]``, 0 where unused; without
    ``spans`` a ``bool[rows, cols, slots]`` of the configured slots will do), the registers
    ``regs`` (``None``: all zero), the ``preloads`` ``[(x, y, slot, operand, value)]`` and ``ctx_slots`` CTX
    slots: the lengths :meth:`Image.cbuf_port_words` gives, without encoding the image (the
    performance model's configuration bytes and time,
    :func:`sw.compiler.asm.config_word_counts`)."""
    words, sent = [0] * ports, [0] * ports
    configured = program if program.dtype == bool else program.any(axis=3)
    for port, _, _, _, _, _, count, _, (sx, sy) in _records(params, program, configured, regs,
                                                            preloads, ports, spans):
        words[port] += 1 + count
        sent[port] += 1 + count * (sx + 1) * (sy + 1)
    return words, sent, int(ctx_slots)


def expand_cbuf(params, config, templates, ctx=0):
    """Return the flits (ints) the MicC sends for Cbuf ``config`` and ``templates`` words.

    The CONFIG flits of every record in order (each data word to every PE of the record's
    span, ``x`` fastest, an INSN word moved to each: :func:`sw.spec.cbuf.move_insn_part`),
    then the OPERAND flit of every template with data ``ctx`` (one context start).  Raises
    :class:`FdpuError` when a record runs past the end of ``config``.
    """
    hdr, tpl = cbuf_header_layout(params), cbuf_template_layout(params)
    parts = word_parts(params)
    kept_from = valid_parts(params)
    config = [int(w) for w in config]
    flits, i, kept = [], 0, 0
    while i < len(config):
        h = hdr.unpack(config[i])
        if i + 1 + h["count"] > len(config):
            raise FdpuError(f"Cbuf record at word {i} announces {h['count']} data words; only "
                            f"{len(config) - i - 1} follow")
        slot, index = h["slot"], h["index"]
        x0, y0 = unbias(h["dst_x"]), unbias(h["dst_y"])
        insn = h["what"] == ConfigWhat.INSN
        for word in config[i + 1:i + 1 + h["count"]]:
            # INSN: part 0 first, as every packer of the project (the PE takes any order).
            for b in range(h["span_y"] + 1):
                for a in range(h["span_x"] + 1):
                    data = move_insn_part(params, word, index, a, b, kept) if insn else word
                    flits.append(pack_flit(params, Kind.CONFIG, (x0 + a, y0 + b),
                                           what=h["what"], index=index, slot=slot, data=data))
            if insn:
                for dest, bit in kept_from.get(index, ()):
                    kept = kept & ~(1 << dest) | (word >> bit & 1) << dest
            index += 1
            if insn and index == parts:
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
        """Return ``{(x, y, slot): Instruction}`` of every configured slot (decoded).

        Raises :class:`FdpuError` naming the slot of a word that does not decode.
        """
        out = {}
        ys, xs, ss = np.nonzero(self.program.any(axis=3))
        for y, x, s in zip(ys.tolist(), xs.tolist(), ss.tolist()):
            try:
                out[(x, y, s)] = isa.decode(self.word(x, y, s), self.params)
            except FdpuError as exc:
                raise FdpuError(f"program slot ({x},{y}).{s}: {exc}") from None
        return out

    def cbuf_words(self, spans=False):
        """Return ``(config, templates)``: the image as Cbuf words (uint64 arrays, module doc).

        Only what the graph uses: the configured slots, the non-zero registers, the preloads
        and the CTX slots; without ``spans`` in the order of the flits of
        ``tb.host.memories.image_flits``, with ``spans`` the slots that PEs share in records
        of their span (:meth:`cbuf_port_words`).
        """
        configs, templates = self.cbuf_port_words(1, spans)
        return configs[0], templates

    def cbuf_port_words(self, ports, spans=False):
        """Return ``(configs, templates)``: per configuration port its Cbuf records, and the
        CTX templates (port 0's), as uint64 arrays (module doc).

        Port ``q`` gets the records of the PEs :func:`config_port_of` gives it, in the order
        of :meth:`cbuf_words` (so every PE receives its flits in the same order).  With
        ``spans``, the slots several PEs of a rectangle hold alike (their destinations moved
        with them) are one record of that span (:func:`_insn_records`): each PE receives the
        same words, its slots in another order.
        """
        p = self.params
        out = [[] for _ in range(ports)]
        hdr, tpl = cbuf_header_layout(p), cbuf_template_layout(p)
        parts = self.program.shape[3]
        configured = self.program.any(axis=3)
        for port, what, x, y, slot, index, count, value, (sx, sy) in _records(
                p, self.program, configured, self.regs, self.preloads, ports, spans):
            words = out[port]
            words.append(hdr.pack(what=what, dst_x=x + 1, dst_y=y + 1, slot=slot, index=index,
                                  count=count, span_x=sx, span_y=sy))
            if what == ConfigWhat.INSN:
                words.extend(self.program[y, x, slot:slot + count // parts].reshape(-1).tolist())
            elif what == ConfigWhat.REG:
                words.extend(self.regs[y, x, index:index + count].tolist())
            else:
                words.append(value)
        ys, xs, ss = np.nonzero(configured & (self.opcodes() == isa.Op.CTX.value))
        templates = [tpl.pack(dst_x=x + 1, dst_y=y + 1, slot=s, operand=0)
                     for y, x, s in zip(ys.tolist(), xs.tolist(), ss.tolist())]
        return ([np.array([int(w) for w in words], dtype=np.uint64) for words in out],
                np.array(templates, dtype=np.uint64))

    def opcodes(self):
        """Return ``int[rows, cols, slots]``: every slot's opcode field (0 where unused)."""
        lay = isa.insn_layout(self.params)
        return ((self.program[..., 0] >> np.uint64(lay.offsets["op"]))
                & np.uint64((1 << lay.field("op").width) - 1)).astype(np.int64)

    def check(self):
        """Raise :class:`FdpuError` unless the image is consistent with its parameters.

        Checked: ``contexts`` (an integer in ``1 ..`` :data:`MAX_CONTEXTS`), ``window``
        (``1 .. operand_depth``), ``ctx_base`` (``ctx_base + contexts <= 2**32``) and
        ``ends_per_context`` (the number of END instructions, at least one) are integers, not
        bools or floats; ``meta`` is a dict; ``program`` and ``regs`` are uint64 arrays of the
        parameters' shapes; every configured word decodes and sends only to token operands of
        configured slots; every preload names a token operand of a configured instruction
        and its value fits 64 bits; segments, numbered by ascending address, hold at least
        one byte each, lie inside one Dbuf each and do not overlap.  There must be a CTX
        instruction.
        """
        p = self.params
        self._check_counts()
        shape = (p.rows, p.cols, p.slots, word_parts(p))
        if not isinstance(self.program, np.ndarray) or self.program.shape != shape \
                or self.program.dtype != np.uint64:
            raise FdpuError(f"image program has shape {np.shape(self.program)} "
                            f"{getattr(self.program, 'dtype', type(self.program).__name__)}; a "
                            f"{p.rows}x{p.cols} array with {p.slots} slots needs uint64 {shape}")
        if not isinstance(self.regs, np.ndarray) or self.regs.shape != (p.rows, p.cols, p.regs) \
                or self.regs.dtype != np.uint64:
            raise FdpuError(f"image registers have shape {np.shape(self.regs)} "
                            f"{getattr(self.regs, 'dtype', type(self.regs).__name__)}, expected "
                            f"uint64 {(p.rows, p.cols, p.regs)}")
        insns = self.instructions()
        for i, (x, y, slot, operand, value) in enumerate(self.preloads):
            insn = insns.get((x, y, slot))
            if insn is None or operand not in insn.token_operands:
                raise FdpuError(f"preload {i}, ({x},{y}).{slot}.{operand}, names no token "
                                f"operand of a configured instruction")
            if not _is_int(value) or not 0 <= value < 1 << 64:
                raise FdpuError(f"preload {i} value {value!r} does not fit 64 bits")
        for (x, y, s), insn in insns.items():
            for d in insn.dests:
                tgt = insns.get((d.x, d.y, d.slot))
                if tgt is None:
                    raise FdpuError(f"instruction at ({x},{y}).{s} sends to {d}, an "
                                    f"unconfigured slot")
                if d.operand not in tgt.token_operands:
                    raise FdpuError(f"instruction at ({x},{y}).{s} sends to {d}, which is "
                                    f"not a token operand of {tgt.op.name}")
        prev_end = 0
        for i, addr in enumerate(sorted(self.segments)):
            n = len(self.segments[addr])
            where = f"memory segment {i} at {addr:#x} ({n} bytes)"
            if not n:
                raise FdpuError(f"{where} is empty; a segment holds at least one byte")
            if not 0 <= addr or addr + n > p.memory_bytes:
                raise FdpuError(f"{where} is outside the Dbufs (0..{p.memory_bytes - 1:#x})")
            if p.dbuf_of(addr)[0] != p.dbuf_of(addr + n - 1)[0]:
                raise FdpuError(f"{where} crosses a Dbuf boundary")
            if i and addr < prev_end:
                raise FdpuError(f"{where} overlaps segment {i - 1}, which ends at "
                                f"{prev_end - 1:#x}")
            prev_end = addr + n
        ends = sum(1 for i in insns.values() if i.end)
        if self.ends_per_context != ends:
            raise FdpuError(f"ends_per_context is {self.ends_per_context} but the program has "
                            f"{ends} END instructions (need at least one to finish)")
        if not any(i.op is isa.Op.CTX for i in insns.values()):
            raise FdpuError("the program has no CTX instruction: no context can start")

    def _check_counts(self):
        """Check ``contexts``, ``window``, ``ctx_base``, ``ends_per_context`` (their types and
        ranges) and ``meta`` (a dict): the part of :meth:`check` that an image file's ``info``
        member holds."""
        p = self.params
        _check_int("contexts", self.contexts, 1, MAX_CONTEXTS)
        _check_int("window", self.window, 1, p.operand_depth, " (operand_depth)")
        if not _is_int(self.ctx_base) or not 0 <= self.ctx_base \
                or self.ctx_base + self.contexts > 1 << 32:
            raise FdpuError(f"ctx_base must be a non-negative integer with ctx_base + contexts "
                            f"below 2**32, got {_short(self.ctx_base)}")
        _check_int("ends_per_context", self.ends_per_context, 1, p.num_pes * p.slots)
        if not isinstance(self.meta, dict):
            raise FdpuError(f"meta must be a dict (a JSON object), got "
                            f"{type(self.meta).__name__}")

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


def _is_int(value):
    """Return whether ``value`` is an integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_int(name, value, lo, hi, why=""):
    """Raise :class:`FdpuError` unless ``value`` is an integer (not a bool) in ``lo .. hi``."""
    if not _is_int(value) or not lo <= value <= hi:
        raise FdpuError(f"{name} must be an integer in {lo}..{hi}{why}, got {_short(value)}")


def _short(value):
    """Return ``repr(value)``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_kind(value):
    for kind, name in ((dict, "object"), (list, "array"), (str, "string"), (bool, "boolean"),
                       ((int, float), "number")):
        if isinstance(value, kind):
            return name
    return "null"


def _read_info(z, path):
    """Return the checked ``info`` dict of the open archive ``z`` (see :func:`load`)."""
    raw = z.read("info", kinds="U", limit=MAX_INFO_BYTES)
    name = f"{path} member 'info'"
    if raw.shape != ():
        raise FdpuError(f"{name} must be one string (a JSON object), got an array of shape "
                        f"{raw.shape}")
    try:
        info = json.loads(str(raw))
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if len(str(exc)) <= 80 else str(exc)[:77] + "..."
        raise FdpuError(f"{name} is not valid JSON ({type(exc).__name__}: {reason})") from None
    if not isinstance(info, dict):
        raise FdpuError(f"{name} holds a JSON {_json_kind(info)}; it must be a JSON object "
                        f"with keys {', '.join(_INFO_KEYS)}")
    if info.get("format") != FORMAT_TAG:
        raise FdpuError(f"{name}: format tag {_short(info.get('format'))}, expected "
                        f"{FORMAT_TAG!r}")
    allowed = f"{', '.join(_INFO_KEYS)} (ctx_base and meta optional)"
    missing = [k for k in _INFO_KEYS[:5] if k not in info]
    if missing:
        raise FdpuError(f"{name}: missing key(s) {', '.join(missing)}; keys: {allowed}")
    unknown = [_short(k) for k in info if k not in _INFO_KEYS]
    if unknown:
        raise FdpuError(f"{name}: unknown key(s) {', '.join(unknown)}; allowed: {allowed}")
    params = info["params"]
    if not isinstance(params, dict):
        raise FdpuError(f"{name}: params is a JSON {_json_kind(params)}; it must be an object "
                        f"of the array parameters")
    fields = [f.name for f in dataclasses.fields(ArrayParams)]
    for key, value in params.items():
        if key not in fields:
            raise FdpuError(f"{name}: params has unknown key {_short(key)}; allowed: "
                            f"{', '.join(fields)}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise FdpuError(f"{name}: params.{key} must be an integer, got {_short(value)}")
    try:
        info["params"] = ArrayParams(**params)
    except FdpuError as exc:
        raise FdpuError(f"{name}: params: {exc}") from None
    return info


def _preloads(path, params, pre, values):
    """Return the preload tuples of the ``preloads`` and ``preload_values`` tables."""
    if pre.ndim != 2 or pre.shape[1] != 4:
        raise FdpuError(f"{path} member 'preloads' must be a table of N rows of 4 integers "
                        f"(x, y, slot, operand), got shape {pre.shape}")
    if values.ndim != 1 or values.shape[0] != pre.shape[0]:
        raise FdpuError(f"{path} member 'preload_values' has shape {values.shape} but member "
                        f"'preloads' has {pre.shape[0]} rows; one value per preload")
    most = params.num_pes * params.slots * params.MAX_OPERANDS * params.operand_depth
    if pre.shape[0] > most:
        raise FdpuError(f"{path} member 'preloads' has {pre.shape[0]:,} rows; at most {most:,} "
                        f"fit the array (every operand of every slot full)")
    return [(*row, v) for row, v in zip(pre.tolist(), values.tolist())]


def _segments(path, addrs, lens, data):
    """Return ``{address: bytes}`` of the ``seg_addr``, ``seg_len`` and ``seg_data`` tables."""
    for member, arr in (("seg_addr", addrs), ("seg_len", lens)):
        if arr.ndim != 1:
            raise FdpuError(f"{path} member '{member}' must be 1-D, got shape {arr.shape}")
    if addrs.shape != lens.shape:
        raise FdpuError(f"{path} member 'seg_addr' has {addrs.size} entries but member "
                        f"'seg_len' has {lens.size}; one address and one length per segment")
    if data.ndim != 1 or data.dtype != np.uint8:
        raise FdpuError(f"{path} member 'seg_data' must be 1-D uint8 (the segments' bytes), "
                        f"got {data.dtype} of shape {data.shape}")
    if addrs.size > MAX_SEGMENTS:
        raise FdpuError(f"{path} member 'seg_addr' lists {addrs.size:,} segments; at most "
                        f"{MAX_SEGMENTS:,} are allowed")
    for member, arr, bad, rule in (
            ("seg_len", lens, lens < 1, "a segment holds at least 1 byte"),
            ("seg_len", lens, lens > data.size,
             f"longer than the {data.size:,} bytes of member 'seg_data'"),
            ("seg_addr", addrs, addrs < 0, "addresses are non-negative")):
        hit = np.flatnonzero(bad)
        if hit.size:
            i = int(hit[0])
            raise FdpuError(f"{path} member '{member}' entry {i} is {int(arr[i]):,}; {rule}")
    hit = np.flatnonzero(addrs[1:] <= addrs[:-1])
    if hit.size:
        i = int(hit[0]) + 1
        raise FdpuError(f"{path} member 'seg_addr' entry {i} ({int(addrs[i]):#x}) is not above "
                        f"entry {i - 1} ({int(addrs[i - 1]):#x}); segments are listed by "
                        f"ascending address, each once")
    total = int(lens.astype(np.int64).sum())        # each length <= data.size: no overflow
    if total != data.size:
        raise FdpuError(f"{path} member 'seg_len' totals {total:,} bytes but member 'seg_data' "
                        f"holds {data.size:,}; they must agree")
    blob, segments, o = data.tobytes(), {}, 0
    for a, n in zip(addrs.tolist(), lens.tolist()):
        segments[a] = blob[o:o + n]
        o += n
    return segments


def load(path):
    """Read and check an image written by :meth:`Image.save`.

    The file is read with :class:`sw.compiler.npyfile.Archive` (a regular file; every member's
    compression, declared size, CRC and ``.npy`` header checked before its data) and must hold
    exactly the members ``info``, ``program``, ``regs``, ``preloads``, ``preload_values``,
    ``seg_addr``, ``seg_len`` and ``seg_data``:

    * ``info``: one string of at most :data:`MAX_INFO_BYTES`, a JSON object with the format tag
      :data:`FORMAT_TAG`, ``params`` (integer :class:`~sw.spec.arch.ArrayParams` fields),
      ``contexts``, ``window``, ``ends_per_context`` and optionally ``ctx_base`` and ``meta``
      (an object), no other key;
    * ``preloads``: an N x 4 integer table (x, y, slot, operand) with N values in
      ``preload_values``, N at most what the operand buffers hold;
    * ``seg_addr`` and ``seg_len``: 1-D integer tables of equal length (at most
      :data:`MAX_SEGMENTS`), addresses non-negative and strictly ascending, lengths positive
      and totalling the length of ``seg_data`` (1-D uint8);

    then the image is checked with :meth:`Image.check` (segments numbered as in the tables).

    Raises
    ------
    FdpuError
        Naming the file (and the member, key or entry) for any of the faults above.
    OSError
        If the file does not exist or cannot be read.
    """
    path = os.fspath(path)
    with npyfile.Archive(path, "an FDPU image", "write one with 'fdpu asm -o IMAGE.npz'") as z:
        missing = [m for m in _MEMBERS if m not in z.members]
        if missing:
            raise FdpuError(f"{path}: not an FDPU image: missing member(s) "
                            f"{', '.join(missing)}; an image has {', '.join(_MEMBERS)}")
        extra = [_short(m) for m in list(z.members) + z.others if m not in _MEMBERS]
        if extra:
            raise FdpuError(f"{path}: unexpected member(s) {', '.join(extra)} in an FDPU "
                            f"image; an image has exactly {', '.join(_MEMBERS)}")
        info = _read_info(z, path)
        program, regs = z.read("program", kinds="u"), z.read("regs", kinds="u")
        pre, values = z.read("preloads", kinds="iu"), z.read("preload_values", kinds="iu")
        addrs, lens = z.read("seg_addr", kinds="iu"), z.read("seg_len", kinds="iu")
        data = z.read("seg_data", kinds="u")
    params = info["params"]
    img = Image(params, program, regs, _preloads(path, params, pre, values),
                _segments(path, addrs, lens, data), info["contexts"], info["window"],
                info["ends_per_context"], info.get("meta", {}), info.get("ctx_base", 0))
    try:
        img._check_counts()
    except FdpuError as exc:
        raise FdpuError(f"{path} member 'info': {exc}") from None
    try:
        img.check()
    except FdpuError as exc:
        raise FdpuError(f"{path}: {exc}") from None
    return img
