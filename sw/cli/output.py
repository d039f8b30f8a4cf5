"""What every ``fdpu`` command prints and writes: the rich console, byte figures, output files.

Output files are checked before a command does any work (:func:`check_outputs`) and written
through :func:`sw.spec.files.replacing`: to a temporary file beside the target, renamed over it
only when complete, so a failed or interrupted write (a full disk) leaves no partial file and an
older file intact, and a symbolic link at the target is replaced, never written through.  JSON is strict (:func:`write_json`: a value that is not finite is written as
``null`` and listed under ``"non_finite"``).
"""

import json
import math
import os
import stat
import sys
import tempfile
from contextlib import contextmanager

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sw.spec.errors import FdpuError
from sw.spec.files import replacing

__all__ = ["MB", "BOUND_ROW", "bound_text", "console", "megabytes", "progress_bar", "rtl_bar", "Bars", "check_outputs",
           "replacing", "write_json", "save_npy"]

MB = 1e6


def console():
    """Return a rich console on the current stdout, 160 columns wide when not a terminal."""
    con = Console(file=sys.stdout)
    if not con.is_terminal:
        con = Console(file=sys.stdout, width=160)
    return con


@contextmanager
def progress_bar(description, unit):
    """Show a transient progress bar on a terminal; yield its ``update(done, total)`` callback.

    The bar reads ``description`` and ``done/total unit``; it disappears when the block ends
    and prints nothing when stdout is not a terminal (logs and ``--json`` runs stay clean).
    """
    with Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                  TimeElapsedColumn(), console=console(), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done, total):
            bar.update(task, completed=done, total=total)
        yield update


@contextmanager
def rtl_bar(head, total, unit):
    """Show a transient progress bar of an RTL run of ``total`` ``unit`` s (passes, chained
    layers); yield the callback the runtime calls with its notes (``pass_index``, ``phase``,
    ``cycles``)."""
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console(),
                  transient=True) as bar:
        task = bar.add_task(f"{head}: building", total=total, info="")

        def show(note):
            now = min(note["pass_index"] + 1, total)
            bar.update(task, completed=note["pass_index"],
                       description=f"{head}: {unit} {now}/{total}",
                       info=f"{note['phase']}, {note['cycles']:,} cycles")
        yield show


class Bars:
    """The commands' :class:`sw.runtime.layer.Reporter`: transient progress bars."""

    def golden(self, label, unit):
        return progress_bar(label, unit)

    def rtl(self, head, total, unit):
        return rtl_bar(head, total, unit)


#: The table row of a run's end-to-end bound (``sw.models.figures.bound``).
BOUND_ROW = "end to end against its bound max(compute, minimal bytes / port bandwidth)"


def bound_text(rec):
    """Return the bound of a run record as the tables print it: cycles, what bounds it, the
    fraction reached."""
    return (f"{rec['bound_cycles']:,} cycles ({rec['bound_by']}), "
            f"{rec['bound_reached']:.0%} reached")


def megabytes(n):
    """Format a byte count in MB (10**6 bytes) with two decimals."""
    return f"{n / MB:,.2f}"


def _same(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs, inputs=()):
    """Refuse, before any work, output files that cannot be written or would destroy data.

    ``outputs`` and ``inputs`` are ``(option, path)`` pairs (a ``None`` path is skipped).  An
    output must be a non-empty path in an existing directory where a file can be created (one
    is created and removed to know), not an existing directory or special file (``/dev/...``),
    not an input, and not another output.
    """
    given = [(flag, os.fspath(p)) for flag, p in outputs if p is not None]
    ins = [(flag, os.fspath(p)) for flag, p in inputs if p]
    for i, (flag, path) in enumerate(given):
        if not path.strip():
            raise FdpuError(f"{flag}: the path is empty")
        if os.path.lexists(path):
            mode = os.stat(path).st_mode if os.path.exists(path) else 0
            if stat.S_ISDIR(mode):
                raise FdpuError(f"{flag} {path}: is a directory (give a file name)")
            if not stat.S_ISREG(mode):
                raise FdpuError(f"{flag} {path}: not a regular file (outputs are written to a "
                                f"temporary file and renamed, which a device or pipe cannot "
                                f"take)")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FdpuError(f"{flag} {path}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FdpuError(f"{flag} {path}: the directory {parent} is not writable")
        try:                            # what the write will do: a temporary file beside it
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".fdpu-check-"):
                pass
        except OSError as exc:
            raise FdpuError(f"{flag} {path}: cannot create a file in {parent}: "
                            f"{exc.strerror or exc}") from None
        for in_flag, in_path in ins:
            if os.path.exists(in_path) and _same(path, in_path):
                raise FdpuError(f"{flag} {path}: is also the input {in_flag}; write the "
                                f"output to another file")
        for other_flag, other in given[:i]:
            if _same(path, other):
                raise FdpuError(f"{other_flag} and {flag} are the same file ({path})")


def _finite(value, where, bad):
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where or "(top)")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def write_json(path, data):
    """Write ``data`` as indented strict JSON to ``path`` (atomically): non-finite numbers
    become ``null`` and, in a dict, their places are listed under ``"non_finite"``."""
    bad = []
    clean = _finite(data, "", bad)
    if bad and isinstance(clean, dict):
        clean["non_finite"] = bad
    with replacing(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(clean, f, indent=2, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())


def save_npy(path, array):
    """Write ``array`` as a ``.npy`` file at exactly ``path`` (atomically)."""
    with replacing(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)
            f.flush()
            os.fsync(f.fileno())
