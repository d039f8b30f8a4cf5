"""The RTL top's memories for an image: Cbuf words, CONFIG flits, ``$readmemh`` files.

Contract
--------
* :func:`image_flits` lists what the MicC sends: the CONFIG flits (instruction parts of every
  configured slot, non-zero registers, preloads, in that order) and one OPERAND template per
  ``CTX`` slot (the MicC writes the context ID into ``data``).  The Cbufs hold them in the
  compact encoding of :meth:`sw.compiler.image.Image.cbuf_words` (records of 64-bit words, about one
  word per flit), which the MicC expands (``docs/system.md``).
* :func:`cbuf_capacity` is the Cbufs' size in words; :func:`check_fits` checks a configuration
  (records and CTX templates, per configuration port) against it; :func:`port_configs` takes
  Cbuf records given as one list or per configuration port.
* :func:`write_memories` writes the ``$readmemh`` files of the Cbuf words and the Dbufs:
  ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` (``@word`` records, 64-bit little-endian words, only
  the image's segments).

Errors: a configuration that does not fit the Cbufs (or its port's region of them), or names a
configuration port the top does not have, raises :class:`FdpuError`.
"""

import os

import numpy as np

from sw.spec import isa
from sw.spec.cbuf import word_bits
from sw.spec.errors import FdpuError
from sw.spec.packet import ConfigWhat, Kind, pack_flit

__all__ = ["cbuf_capacity", "image_flits", "check_fits", "port_configs", "write_memories"]


def cbuf_capacity(params):
    """Return how many words the Cbufs hold."""
    return params.cbufs * (params.cbuf_bytes * 8 // word_bits(params))


def image_flits(image):
    """Return ``(config, templates)``: the CONFIG flits and the CTX OPERAND templates (ints).

    The flits :func:`sw.compiler.image.expand_cbuf` makes of :meth:`Image.cbuf_words
    <sw.compiler.image.Image.cbuf_words>` (the MicC's order): the instruction parts of every
    configured slot, part 0 first, PEs in row-major order; every non-zero register; the
    preloads in image order.  A bench configuring one PE keeps the flits addressed to it.
    """
    p = image.params
    config, templates = [], []

    def cfg(x, y, what, index, slot, data):
        config.append(pack_flit(p, Kind.CONFIG, (x, y), what=what, index=index, slot=slot,
                                data=int(data)))

    configured = image.program.any(axis=3)
    for y, x, s in zip(*(a.tolist() for a in np.nonzero(configured))):
        for j, part in enumerate(image.program[y, x, s].tolist()):
            cfg(x, y, ConfigWhat.INSN, j, s, part)
    for y, x, r in zip(*(a.tolist() for a in np.nonzero(image.regs))):
        cfg(x, y, ConfigWhat.REG, r, 0, image.regs[y, x, r])
    for x, y, s, o, v in image.preloads:
        cfg(x, y, ConfigWhat.PRELOAD, o, s, v)
    for (x, y, s), insn in sorted(image.instructions().items(),
                                  key=lambda t: (t[0][1], t[0][0], t[0][2])):
        if insn.op is isa.Op.CTX:
            templates.append(pack_flit(p, Kind.OPERAND, (x, y), slot=s, operand=0, data=0))
    return config, templates


def check_fits(p, n_config, n_ctx, port=0, ports=1):
    """Raise :class:`FdpuError` unless ``n_config`` records + ``n_ctx`` templates fit the Cbufs.

    With ``ports`` configuration ports, port ``port``'s words must fit its region of the Cbufs
    (a ``ports``-th of them); the CTX templates go with port 0.
    """
    cap = cbuf_capacity(p)
    if ports == 1:
        if n_config + n_ctx > cap:
            raise FdpuError(f"the configuration needs {n_config + n_ctx} Cbuf words ({n_config} "
                            f"of configuration records + {n_ctx} CTX templates), more than the "
                            f"{p.cbufs} Cbufs of {p.cbuf_bytes} bytes hold ({cap})")
        return
    region = cap // ports
    if n_config + n_ctx > region:
        what = f" + {n_ctx} CTX templates" if port == 0 else ""
        raise FdpuError(f"configuration port {port} needs {n_config + n_ctx} Cbuf words "
                        f"({n_config} of configuration records{what}), more than its region "
                        f"of the Cbufs holds ({region} words: {p.cbufs} Cbufs of "
                        f"{p.cbuf_bytes} bytes over {ports} ports)")


def port_configs(params, config, ports):
    """Return ``config`` as a list of per-port Cbuf record lists, checked against ``ports``.

    ``config`` is either one list of words (port 0's records) or a list of per-port lists.
    Raises :class:`FdpuError` when it names a configuration port the top does not have.
    """
    seqs = (list, tuple, np.ndarray)
    per_port = len(config) > 0 and all(isinstance(c, seqs) for c in config)
    out = [list(c) for c in config] if per_port else [list(config)]
    if len(out) > ports:
        raise FdpuError(f"the configuration has Cbuf records for configuration port "
                        f"{len(out) - 1}; the top has {ports} configuration port"
                        f"{'s' if ports > 1 else ''} (0..{ports - 1})")
    return out + [[] for _ in range(ports - len(out))]


def _hex_lines(words, width):
    digits = width // 4
    return [f"{w:0{digits}x}" for w in words]


def write_memories(image, folder, config=None, templates=None):
    """Write ``cbuf_<i>.hex`` and ``dbuf_<k>.hex`` for ``image`` into ``folder``.

    ``config``/``templates``: Cbuf words instead of :meth:`~sw.compiler.image.Image.cbuf_words`.
    Returns ``(n_config, n_ctx)``.  Raises :class:`FdpuError` when the configuration does not
    fit the Cbufs.
    """
    p = image.params
    if config is None:
        config, templates = image.cbuf_words()
    words = [int(w) for w in config] + [int(w) for w in templates]
    check_fits(p, len(config), len(templates))
    os.makedirs(folder, exist_ok=True)
    wb = word_bits(p)
    depth = cbuf_capacity(p) // p.cbufs
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
