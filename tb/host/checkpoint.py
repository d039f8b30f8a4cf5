"""Resumable RTL jobs: a job run as segments of passes, each segment's result kept on disk.

A layer on the 8 x 8 RTL can take hours; a run stopped before its end (a job limit, Ctrl-C, a
reboot) would start again from zero.  ``tb.host.runtime.run_job(checkpoint=DIR)`` runs the
job as *segments* of ``segment_passes`` consecutive passes, one simulation each, and keeps each
finished segment's result in ``DIR``; run again with the same ``DIR`` it loads the segments
that finished and simulates only the rest.

Contract
--------
* A segment's result is the bench's result file (``tb.top.bench_run``: the passes' records,
  the final registers, the result words read back), stored as ``DIR/<key>.npz``, written to a
  temporary file in ``DIR`` and renamed, so a stop leaves either the whole file or none (the
  rename replaces a symlink of that name, it never writes through one).
* :func:`segment_key` is a SHA-256 of everything that determines the segment's result: the
  simulator and tool versions, the source of the hardware, the spec layer and the bench
  (``hw``, ``sw/spec``, ``tb``), the top's parameters, the run spec (registers, descriptor
  lists, memory model, cycle bounds; file paths left out), the external memory image and the
  Cbuf words it starts from.  A change to any of them is a new key: an older result is never
  reused.  A file that does not load, or holds another number of passes, is a miss (the
  segment runs again).
* What carries over between segments is restored, not assumed: a segment starts from the
  Cbuf words the pass before it left (``tb.host.job_plan.plan_job(cbuf_loaded=...)``, written
  by backdoor); the Dbufs need nothing (each pass's DMA-in writes every word its runs cover,
  zeros included).  A segment's first pass therefore moves the same bytes as in a run straight
  through.  What a fresh simulation does not restore is the external memory model's own
  state (its bandwidth limiter below 8 B/cycle, ``MemModel.bandwidth``, and its stall
  generator, ``MemModel.stall``) and, in a double-buffered job, the overlap across a segment
  boundary (a segment's first pass does not load behind the pass before it): these change
  cycles, never bits.  At full bandwidth, without stalls or double buffering, the segments
  give the cycles and counters of a run straight through (``tests/test_checkpoint.py``);
  :func:`default_segment_passes` segments a job only then (one segment a pass), and keeps any
  other job whole (one segment, kept when it ends) unless a segment size is asked for.
"""

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from sw.spec.errors import FdpuError
from sw.spec.provenance import tool_versions, tree_digest

__all__ = ["SOURCES", "source_digest", "segment_key", "default_segment_passes", "Checkpoint"]

#: The checkout (the directory holding ``hw/``, ``sw/`` and ``tb/``).
_ROOT = Path(__file__).resolve().parents[2]

#: What turns a run spec into a result: the hardware, the spec layer it is generated from, the
#: bench and the harness.
SOURCES = ("hw", "sw/spec", "tb")


def source_digest(root=_ROOT):
    """Return the SHA-256 of the :data:`SOURCES` files (:func:`sw.spec.provenance.tree_digest`)."""
    return tree_digest(Path(root), SOURCES)


def default_segment_passes(passes, mem, double_buffer):
    """Return the passes per segment of a job of ``passes`` passes when none is asked for: 1
    where segments give the cycles of a run straight through (no double buffering, the memory
    ``mem`` at full bandwidth without stalls), else all of them (one segment)."""
    exact = not double_buffer and mem.bandwidth >= 8 and mem.stall == 0
    return 1 if exact else max(1, passes)


def segment_key(sim, params, top, spec, memories, preload):
    """Return the key (hex SHA-256) of one segment.

    ``params``: the array's :class:`~sw.spec.arch.ArrayParams`; ``top``: the system top's
    other parameters (``ext_bytes``, ``depth``, ``dma_channels``, ``config_ports``,
    ``waves``); ``spec``: the run spec (its file paths are left out); ``memories``: the
    external memory arrays (``JobPlan.memory_arrays``); ``preload``: the Cbuf words it
    starts from (``JobPlan.cbuf_preload``).
    """
    h = hashlib.sha256()
    paths = ("memories", "out", "progress_file")
    head = dict(sim=sim, params=asdict(params), top=top,
                spec={k: v for k, v in spec.items() if k not in paths},
                tools=tool_versions(sim),
                source=source_digest())
    h.update(json.dumps(head, sort_keys=True, default=repr).encode())
    for name in sorted(memories):
        h.update(name.encode() + b"\0" + np.ascontiguousarray(memories[name]).tobytes())
    for at, words in preload:
        h.update(str(at).encode() + b"\0" + np.asarray(words, dtype=np.uint64).tobytes())
    return h.hexdigest()


class Checkpoint:
    """A directory of finished segments, ``<key>.npz`` each (the module doc).

    Raises :class:`FdpuError` at construction when ``directory`` exists and is not a
    directory, or cannot be created.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise FdpuError(f"{directory}: the checkpoint is not a directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FdpuError(f"{directory}: cannot create the checkpoint directory: "
                            f"{exc.strerror or exc}") from None

    def path(self, key):
        """Return the file of segment ``key``."""
        return self.directory / f"{key}.npz"

    def get(self, key, passes):
        """Return the file of a finished segment ``key`` of ``passes`` passes, or ``None``
        (missing, unreadable, or not a finished run of that many passes)."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            with np.load(path) as z:
                out = json.loads(str(z["result"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
            return None
        if not isinstance(out, dict) or out.get("failure") is not None \
                or len(out.get("passes", ())) != passes:
            return None
        return path

    def put(self, key, result):
        """Keep the bench's result file ``result`` as segment ``key`` (atomically)."""
        fd, tmp = tempfile.mkstemp(prefix=".segment-", suffix=".npz", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f, open(result, "rb") as src:
                while block := src.read(1 << 20):
                    f.write(block)
            os.replace(tmp, self.path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
