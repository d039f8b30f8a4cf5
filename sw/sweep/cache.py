"""The sweep's result cache: one JSON record per point, keyed by everything that determines it.

A point's result is a function of

* every ``fdpu run`` option's value, defaults included (the layer, the seed of its data, the
  array, the system, ``--sim``), and the contents of its input files (``--weights``,
  ``--inputs``, ``--bias``);
* the project's code that turns them into a result (:func:`source_digest`, per kind of
  simulator, :data:`SOURCES`): the spec, compiler and planner that make the images, the models
  (with the performance model's calibration constants, which also choose a plan), the command
  that computes the figures, and for the RTL the hardware description that becomes the
  Verilog and the host runtime and testbench that run it; not the sweep's and report's own
  code, nor the other commands';
* the simulator and its version, and the versions of the libraries that generate and run the
  Verilog (:func:`tool_versions`).

:func:`key` hashes the three; :class:`Store` keeps one ``<key>.json`` file per point in a
directory, written atomically (a temporary file renamed), so an interrupted sweep loses at
most the points that were running, any number of processes may share a store, and a rerun with
one changed point reruns that point only.  Any change to the project's code changes every key:
results of older code are kept but never reused.
"""

import hashlib
import json
import os
import tempfile
from pathlib import Path

from sw.spec.errors import FdpuError
from sw.spec.provenance import tool_versions, tree_digest
from sw.spec.system import SIMULATORS

__all__ = ["ROOT", "SOURCES", "source_digest", "tool_versions", "file_digest", "key", "Store"]

#: The project's checkout (the directory holding ``hw/``, ``sw/`` and ``tb/``).
ROOT = Path(__file__).resolve().parents[2]

#: The source files and trees whose code determines a result, per kind of ``--sim``: what
#: makes the images (spec, compiler, the planner's options and its model-driven choice), what
#: computes the figures (the models; the command of that ``--sim``), and for the RTL the
#: hardware that becomes the Verilog and the host and testbench that run it.
_COMMON = ("sw/spec", "sw/compiler", "sw/models", "sw/cli/options.py")
SOURCES = {"golden": _COMMON + ("sw/cli/run.py",),
           "model": _COMMON + ("sw/cli/model.py",),
           "rtl": _COMMON + ("hw", "tb", "sw/runtime", "sw/cli/rtl.py")}


def _kind(sim):
    return "rtl" if sim in SIMULATORS else sim


def source_digest(sim="verilator", root=ROOT):
    """Return the SHA-256 of the source files that determine a ``--sim sim`` result (path and
    bytes of each: :func:`sw.spec.provenance.tree_digest` of :data:`SOURCES`)."""
    return tree_digest(Path(root), SOURCES[_kind(sim)])


def file_digest(path):
    """Return the SHA-256 of a file's bytes (an input file of a point: its contents, not its
    name, determine the result)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise FdpuError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return h.hexdigest()


def key(options, sim, digest=None, files=()):
    """Return the cache key (hex SHA-256) of the point whose ``fdpu run`` options (every
    option's value, defaults included) are ``options``; ``files`` lists the options naming
    input files, whose contents are hashed in (:func:`file_digest`)."""
    parts = dict(options=options, sim=sim, tools=tool_versions(sim),
                 source=digest or source_digest(sim))
    contents = {name: file_digest(options[name]) for name in files if options.get(name)}
    if contents:                         # only then: the keys of points without files stay
        parts["files"] = contents
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class Store:
    """A directory of cached point records, ``<key>.json`` each.

    ``get(key)`` returns the record or ``None`` (a file that does not parse is a miss);
    ``put(key, record)`` writes it atomically.  ``partial(key)`` is the directory where an RTL
    point keeps its finished segments while it runs (``fdpu run --checkpoint``), so that a
    stopped sweep resumes a long point where it stopped; it is removed once the point's
    record is in the store.
    """

    def __init__(self, directory):
        self.dir = Path(directory)
        if self.dir.exists() and not self.dir.is_dir():
            raise FdpuError(f"cache {self.dir}: exists and is not a directory")

    def path(self, k):
        return self.dir / f"{k}.json"

    def partial(self, k):
        return self.dir / "partial" / k

    def get(self, k):
        try:
            with open(self.path(k), encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and rec.get("key") == k else None

    def put(self, k, record):
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1, allow_nan=False)
                f.write("\n")
            os.replace(tmp, self.path(k))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
