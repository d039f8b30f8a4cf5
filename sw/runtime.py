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


def _dbuf_words(image):
    """Return ``{dbuf: {word index: value}}`` of the image's segments (little-endian)."""
    p = image.params
    out = {k: {} for k in range(p.num_dbufs)}
    for addr, blob in image.segments.items():
        if not len(blob):
            continue
        k, off = p.dbuf_of(addr)
        lo = off & ~7
        buf = bytearray(off - lo) + bytes(blob)
        buf += bytes(-len(buf) % 8)
        words = np.frombuffer(bytes(buf), dtype="<u8")
        nz = np.nonzero(words)[0]
        bank = out[k]
        for i, v in zip((nz + lo // 8).tolist(), words[nz].tolist()):
            bank[i] = bank.get(i, 0) | v
    return out


@dataclass
class RtlRun:
    """What one RTL run of an image did.

    ``status``: the top's registers after halt (``cycles``, ``issued``, ``retired``, per-PE
    ``int_fires``/``fp_fires``/``pe_error``, ``dbuf_reqs``, ``mesh_flits``...); ``words``:
    ``{(dbuf, word): value}`` read back; ``wall_s``: load and run seconds; ``waves``: path.
    """
    params: ArrayParams
    status: dict
    words: dict = field(default_factory=dict)
    wall_s: dict = field(default_factory=dict)
    waves: str = None

    @property
    def cycles(self):
        """Return the cycles from start to done."""
        return self.status["o_cycles"]

    def read(self, address, nbytes):
        """Return ``nbytes`` of Dbuf memory at global ``address`` (read-back ranges only)."""
        p = self.params
        k, off = p.dbuf_of(address)
        first, last = off // 8, (off + nbytes - 1) // 8
        blob = b"".join(int(self.words[(k, i)]).to_bytes(8, "little")
                        for i in range(first, last + 1))
        return blob[off - first * 8:off - first * 8 + nbytes]


def describe_status(status, params):
    """Return a one-line account of the MicC, contexts and error bits of a status dict."""
    from_bits = lambda value, names: ",".join(n for i, n in enumerate(names)  # noqa: E731
                                              if value >> i & 1) or "none"
    state = status["o_state"]
    text = (f"MicC state {MICC_STATES[state] if state < len(MICC_STATES) else state}, contexts "
            f"issued {status['o_issued']}, retired {status['o_retired']}, "
            f"CTX_END messages {status['o_ends']}, error bits "
            f"{from_bits(status['o_error'], _ERROR_NAMES)}")
    bad = [f"PE ({n % params.cols},{n // params.cols}): {from_bits(e, PE_ERRORS)}"
           for n, e in enumerate(status["pe_error"]) if e]
    return text + ("; " + "; ".join(bad) if bad else "; no PE error flags")


#: Names of the top's ``o_error`` bits (``hw.top.ERROR_BITS``).
_ERROR_NAMES = tuple(f"MICC_{e}" for e in MICC_ERRORS) + tuple(f"PE_{e}" for e in PE_ERRORS) \
    + ("STRAY_REQUEST", "STRAY_EDGE")


def run_rtl(image, sim, *, reads=(), max_cycles=None, waves=False, progress=False, depth=4,
            timeout_s=3600, work_dir=None, config=None):
    """Run ``image`` on the RTL top under ``sim`` (``"icarus"`` or ``"verilator"``).

    Parameters
    ----------
    image : sw.image.Image
    reads : sequence of (address, nbytes)
        Dbuf ranges to read back after the run.
    max_cycles : int, optional
        Cycle bound; default ``200_000 + 2_000 * contexts``.
    config : (list, list), optional
        CONFIG flits and CTX templates to load instead of :func:`image_flits` (tests of bad
        configurations).

    Raises
    ------
    RtlError
        "timeout ... deadlock" when the bound passes, or the error bits the top raised.
    """
    from hw.top import FDPU
    from tb.runner import run_cocotb

    if sim not in ("icarus", "verilator"):
        raise FdpuError(f"sim must be icarus or verilator, not {sim!r}")
    p = image.params
    cfg, templates = image_flits(image) if config is None else config
    cap = cbuf_capacity(p)
    if config is None and len(cfg) + len(templates) > cap:
        raise FdpuError(f"the configuration needs {len(cfg) + len(templates)} Cbuf words "
                        f"({len(cfg)} CONFIG flits + {len(templates)} CTX templates), more "
                        f"than the {p.cbufs} Cbufs of {p.cbuf_bytes} bytes hold ({cap})")
    if max_cycles is None:
        max_cycles = 200_000 + 2_000 * image.contexts
    if work_dir is None:
        root = os.path.join(os.getcwd(), "build", "runtime")
        os.makedirs(root, exist_ok=True)
        work_dir = tempfile.mkdtemp(prefix="run-", dir=root)
    words = (list(cfg) + list(templates))[:cap]
    mask = (1 << 64) - 1
    cb = np.array([[w & mask, w >> 64 & mask] for w in words], dtype=np.uint64).reshape(-1, 2)
    arrays = {"cbuf": cb}
    for k, bank in _dbuf_words(image).items():
        idx = sorted(bank)
        arrays[f"dbuf{k}_idx"] = np.array(idx, dtype=np.int64)
        arrays[f"dbuf{k}_val"] = np.array([bank[i] for i in idx], dtype=np.uint64)
    mem_path = os.path.join(work_dir, "memories.npz")
    np.savez(mem_path, **arrays)
    spans = []
    for addr, n in reads:
        k, off = p.dbuf_of(addr)
        first, last = off // 8, (off + n - 1) // 8
        spans.append((k, first, last - first + 1))
    spec = dict(rows=p.rows, cols=p.cols, cbufs=p.cbufs, dbufs=p.num_dbufs,
                cbuf_depth=cap // p.cbufs, memories=mem_path,
                out=os.path.join(work_dir, "result.npz"), reads=spans,
                max_cycles=int(max_cycles), chunk=int(min(max_cycles, 100_000)),
                progress=bool(progress),
                regs=dict(i_n_config=len(cfg), i_n_ctx=len(templates),
                          i_contexts=image.contexts, i_window=image.window,
                          i_ends=image.ends_per_context))
    spec_path = os.path.join(work_dir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    top = FDPU(p, depth=depth, behavioural=True)
    res = run_cocotb(top, {}, "tb.top.test_run", sim, name="fdpu", waves=waves,
                     extra_env={"FDPU_RUN_SPEC": spec_path}, timeout_s=timeout_s, seed=1)
    with np.load(spec["out"]) as z:
        status = json.loads(str(z["status"]))
        got = {}
        for j, (k, first, count) in enumerate(spans):
            if f"r{j}" in z:
                for i, v in enumerate(z[f"r{j}"].tolist()):
                    got[(k, first + i)] = v
    run = RtlRun(p, status, got, dict(load_s=status["load_s"], run_s=status["run_s"],
                                      build_s=res.build_s),
                 str(res.waves) if res.waves else None)
    if not status["halted"]:
        raise RtlError(f"timeout after {status['waited']} cycles on {sim}: deadlock or a graph "
                       f"that never finishes: {describe_status(status, p)}")
    if status["o_error"] or not status["o_done"]:
        raise RtlError(f"the RTL run on {sim} stopped with an error after "
                       f"{status['o_cycles']} cycles: {describe_status(status, p)}")
    return run


def run_fc_rtl(plan, weights, inputs, sim, **kwargs):
    """Run every pass of ``plan`` on the RTL; return ``(result N x K float16, runs)``.

    Mirrors :func:`sw.golden.run_fc` with ``exact=True``: the same images, the same gathering,
    so the result is comparable bit for bit.  ``kwargs`` go to :func:`run_rtl`.
    """
    from . import graphs
    from .asm import assemble
    from .golden import _program

    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    graph, placement = _program(plan)
    y = np.zeros((plan.N, plan.K), dtype=np.float16)
    runs = []
    for p in range(plan.passes):
        segments, outputs = graphs.pass_memory(plan, w16, x16, p)
        image = assemble(graph, placement, segments, plan.pass_contexts(p))
        run = run_rtl(image, sim, reads=[(addr, plan.output_bytes) for _, addr in outputs],
                      **kwargs)
        runs.append(run)
        part = graphs.gather_outputs(plan, outputs, run.read)
        mask = np.zeros((plan.N, plan.K), dtype=bool)
        for i, _ in outputs:
            kbi, gbi = plan.item(i)
            mask[gbi * plan.gb * 4:(gbi + 1) * plan.gb * 4,
                 kbi * plan.kb:(kbi + 1) * plan.kb] = True
        y[mask] = part[mask]
    return y, runs
