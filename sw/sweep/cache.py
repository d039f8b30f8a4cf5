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
import stat
import tempfile
from pathlib import Path

from sw.spec.errors import FdpuError
from sw.spec.provenance import tool_versions, tree_digest
from sw.spec.system import SIMULATORS
from sw.sweep.table import FIGURES

__all__ = ["ROOT", "SOURCES", "source_digest", "tool_versions", "file_digest", "key",
           "RECORD_FIELDS", "integrity", "record_problem", "Store"]

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


#: The largest input file a point may name (a K x C binary16 matrix at the layers' element
#: limit, ``sw.compiler.layers.MAX_ELEMENTS``, with room for an ``.npy`` header).
MAX_INPUT_BYTES = 2 * (1 << 28) + (1 << 20)


def file_digest(path):
    """Return the SHA-256 of a file's bytes (an input file of a point: its contents, not its
    name, determine the result).  The file must be a regular file of at most
    :data:`MAX_INPUT_BYTES`, checked before it is opened (a FIFO or a device would never end)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise FdpuError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FdpuError(f"{path}: not a regular file (a point's input files are .npy files; "
                        f"a FIFO or a device has no end to hash)")
    if info.st_size > MAX_INPUT_BYTES:
        raise FdpuError(f"{path}: {info.st_size:,} bytes; a point's input file holds at most "
                        f"{MAX_INPUT_BYTES:,} (2^28 binary16 values)")
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


#: The fields every cached record has, with their types (:func:`record_problem`).
RECORD_FIELDS = {"key": str, "name": str, "point": dict, "args": list, "sim": str,
                 "status": int, "result": dict, "wall": dict, "command": str, "tools": dict,
                 "source": str, "integrity": str}


def integrity(record):
    """Return the SHA-256 of a record's content (every field but ``integrity``, canonical
    JSON): what :meth:`Store.put` stores with it and :meth:`Store.get` checks."""
    body = {k: v for k, v in record.items() if k != "integrity"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def record_problem(record, k):
    """Return what is wrong with ``record`` as the cached record of key ``k`` (``None``: it is
    sound): not a JSON object, a field of :data:`RECORD_FIELDS` missing or of another type,
    another key, a figure of the result that is not a number, or content that does not match
    its integrity digest (edited after it was written)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for field, kind in RECORD_FIELDS.items():
        if field not in record:
            return f"field {field!r} missing"
        if not isinstance(record[field], kind) or isinstance(record[field], bool) \
                and kind is int:
            return f"field {field!r} is not a {kind.__name__}"
    if record["key"] != k:
        return f"its key is {record['key'][:16]}..., the file's name says {k[:16]}..."
    if record["status"] not in (0, 1):
        return f"status {record['status']} (a record holds a run that ended: 0 or 1)"
    for _, field, fmt in FIGURES:               # the figures a table formats as numbers
        v = record["result"].get(field)
        if fmt != "{}" and v is not None and not _number(v):
            return f"result {field!r} is not a number"
    if not _number(record["wall"].get("point_s")):
        return "wall 'point_s' is not a number"
    if record["integrity"] != integrity(record):
        return "its content does not match its integrity digest (edited after it was written)"
    return None


#: The largest cached record read (a record holds a point's figures, not its data).
MAX_RECORD_BYTES = 64 << 20


class Store:
    """A directory of cached point records, ``<key>.json`` each.

    ``get(key)`` returns the record or ``None``: a missing file is a miss, and so is a record
    that is not sound (:func:`record_problem`), whose problem :attr:`problems` keeps, so that
    it is reported and recomputed, never used; ``put(key, record)`` writes it atomically with
    its integrity digest.  ``partial(key)`` is the directory where an RTL
    point keeps its finished segments while it runs (``fdpu run --checkpoint``), so that a
    stopped sweep resumes a long point where it stopped; it is removed once the point's
    record is in the store.
    """

    def __init__(self, directory):
        self.dir = Path(directory)
        self.problems = {}
        if self.dir.exists() and not self.dir.is_dir():
            raise FdpuError(f"cache {self.dir}: exists and is not a directory")

    def path(self, k):
        return self.dir / f"{k}.json"

    def partial(self, k):
        return self.dir / "partial" / k

    def get(self, k):
        path = self.path(k)
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            self.problems[k] = "not a regular file of at most 64 MiB"
            return None
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError) as exc:
            self.problems[k] = f"not readable JSON ({exc})"
            return None
        problem = record_problem(rec, k)
        if problem:
            self.problems[k] = problem
            return None
        self.problems.pop(k, None)
        return rec

    def put(self, k, record):
        self.dir.mkdir(parents=True, exist_ok=True)
        record = {**record, "integrity": integrity(record)}
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
