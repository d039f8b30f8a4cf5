"""How every file the project writes is written: beside the target, then renamed over it.

Contract
--------
:func:`replacing` yields a temporary path in the target's directory (same suffix); when the
block ends without an exception the file is renamed over the target, otherwise removed.  A
rename replaces a symbolic link that is already at the target, never the file it points to,
so an output is never written through a link; a failed or interrupted write leaves no partial
file and the older file intact.  A write error is an :class:`~sw.spec.errors.FdpuError` naming
the target.  :func:`write_text` writes a text file that way.  :func:`lock_dir` holds an
exclusive lock on a directory while a command writes into it, so that a second command on the
same directory is refused instead of interleaving its files with the first one's.
"""

import fcntl
import os
import tempfile
from contextlib import contextmanager

from sw.spec.errors import FdpuError

__all__ = ["replacing", "write_text", "lock_dir"]


@contextmanager
def replacing(path):
    """Yield a temporary path beside ``path`` (with the same suffix); when the block ends
    without an exception, rename it to ``path``; otherwise remove it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    suffix = os.path.splitext(base)[1]
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=f".tmp{suffix}")
    except OSError as exc:
        raise FdpuError(f"{path}: cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        raise FdpuError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path, text):
    """Write ``text`` (UTF-8) to ``path`` through :func:`replacing`; a file name that is not
    UTF-8 in it (held as surrogate escapes) is written as the bytes it was."""
    with replacing(path) as tmp:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)


@contextmanager
def lock_dir(path, what):
    """Hold an exclusive lock on the directory ``path`` for the block (``what`` names the
    option that chose it, for the error); another holder makes it an :class:`FdpuError` at
    once.  The lock goes with the process: nothing is left behind."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise FdpuError(f"{what} {path}: cannot open the directory: {exc.strerror or exc}") \
            from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FdpuError(f"{what} {path}: another fdpu command is writing into it; wait for "
                            f"it to end or give another directory") from None
        yield
    finally:
        os.close(fd)
