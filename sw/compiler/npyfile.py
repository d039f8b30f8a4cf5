"""Reading the user's ``.npy`` files and ``.npz`` archives safely: checked, bounded, unpickled.

Contract
--------
Every reader here takes a file the user names and either returns what it holds or raises
:class:`~sw.spec.errors.FdpuError` with a one-line message that names the file (and the archive
member), says what is wrong and what is allowed; a missing or unreadable file raises
``OSError``.  Whatever the bytes, a reader never unpickles, never blocks and never allocates
more than the limits below allow:

* only regular files are opened (a directory, named pipe, device or socket is refused; the file
  is opened with ``O_NONBLOCK`` and checked with ``fstat``, so a FIFO never blocks);
* an array's ``.npy`` header (magic string, version 1.0 or 2.0, dtype, shape, order) is read
  with numpy's own readers and checked before any data: the dtype's kind must be allowed
  (never ``object``), the declared size at most :data:`MAX_ARRAY_BYTES`, and the data exactly
  as long as the header declares (a shorter file is *truncated*, a longer one has *trailing
  bytes*);
* an archive's zip directory must be at most :data:`MAX_DIRECTORY_BYTES`, each member read
  stored or deflated (what ``numpy.savez`` and ``numpy.savez_compressed`` write), not
  encrypted, and its declared uncompressed size checked against the limit (and, summed over
  the members read, against the same limit) before a byte of it is inflated; a bad CRC, a
  truncated or corrupt member is an error naming the member.

The limits are module constants read at each call, so a test may lower them.
"""

import io
import os
import stat
import struct
import tokenize
import warnings
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npformat

from sw.spec.errors import FdpuError

__all__ = ["MAX_ARRAY_BYTES", "MAX_DIRECTORY_BYTES", "NUMERIC", "open_regular", "is_zip",
           "read_npy", "Archive"]

#: Most bytes one array (or all the members read from one archive together) may declare.
MAX_ARRAY_BYTES = 1 << 31
#: Most bytes an archive's zip directory may have (an FDPU ``.npz`` needs well under 1 KiB).
MAX_DIRECTORY_BYTES = 1 << 16
#: Allowed dtype kinds of a numeric array: bool, signed and unsigned integers, float, complex.
NUMERIC = "biufc"

_KIND_NAMES = {"b": "bool", "i": "signed integer", "u": "unsigned integer", "f": "float",
               "c": "complex", "U": "string"}
#: Enough bytes for the magic string, the header length and numpy's largest safe header.
_HEADER_PREFIX = npformat.MAGIC_LEN + 4 + 10000
_CHUNK = 1 << 20
_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
#: What a corrupt zip archive or member may raise from :mod:`zipfile` and :mod:`zlib`.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError,
               EOFError, ValueError, OSError, struct.error, zlib.error)


def _file_kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _size_text(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n:,} bytes ({n >> shift} {unit})"
    return f"{n:,} bytes"


def _reason(exc):
    """Return the first line of an exception's message, at most 100 characters."""
    text = (str(exc).splitlines() or [""])[0] or type(exc).__name__
    return text if len(text) <= 100 else text[:97] + "..."


def open_regular(path, hint):
    """Open ``path`` for binary reading if it is a regular file; return the file object.

    Parameters
    ----------
    path : str
        The file.
    hint : str
        What is allowed, ending the message (e.g. ``"weights must be saved with numpy.save"``).

    Raises
    ------
    FdpuError
        If ``path`` is a directory, a named pipe, a device or a socket.  The file is opened
        with ``O_NONBLOCK``, so a named pipe without a writer never blocks.
    OSError
        If it does not exist or cannot be opened.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise FdpuError(f"{path}: is {_file_kind(mode)}, not a regular file; {hint}")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode                 # what was opened, if it changed meanwhile
        if not stat.S_ISREG(mode):
            raise FdpuError(f"{path}: is {_file_kind(mode)}, not a regular file; {hint}")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_zip(path, hint):
    """Return whether the regular file ``path`` is a zip archive (never blocks on a FIFO).

    Raises :class:`FdpuError` ending in ``hint`` for a file that is not regular (see
    :func:`open_regular`).
    """
    with open_regular(path, hint) as f:
        return zipfile.is_zipfile(f)


def _read_into(f, buf, start):
    """Fill ``buf[start:]`` from ``f`` in chunks; return the number of bytes filled."""
    view, pos = memoryview(buf), start
    while pos < len(buf):
        chunk = f.read(min(_CHUNK, len(buf) - pos))
        if not chunk:
            break
        view[pos:pos + len(chunk)] = chunk
        pos += len(chunk)
    return pos


def _read_header(prefix, name, allowed_hint):
    """Return ``(shape, fortran_order, dtype, data offset)`` of the ``.npy`` header in
    ``prefix`` (the first bytes of the array), read with numpy's own header readers."""
    if not prefix:
        raise FdpuError(f"{name}: is empty; {allowed_hint}")
    if prefix[:2] == b"PK":
        raise FdpuError(f"{name}: is an .npz archive (a zip), not one .npy array; "
                        f"{allowed_hint}")
    head = io.BytesIO(prefix)
    try:
        version = npformat.read_magic(head)
    except ValueError:
        what = "a Python pickle" if prefix[:1] == b"\x80" else \
            "it does not begin with the .npy magic string \\x93NUMPY"
        raise FdpuError(f"{name}: not a .npy array file ({what}); {allowed_hint}") from None
    readers = {(1, 0): npformat.read_array_header_1_0, (2, 0): npformat.read_array_header_2_0}
    if version not in readers:
        raise FdpuError(f"{name}: .npy format version {version[0]}.{version[1]} is not "
                        f"supported; allowed: 1.0 and 2.0 (what numpy.save writes for numeric "
                        f"arrays)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # numpy's note on Python 2 headers
            shape, fortran, dtype = readers[version](head)
    except (ValueError, TypeError, SyntaxError, KeyError, IndexError, AttributeError,
            OverflowError, RecursionError, tokenize.TokenError) as exc:
        if isinstance(exc, tokenize.TokenError):
            exc = exc.args[0]
        if len(prefix) == _HEADER_PREFIX and "EOF" in str(exc):
            exc = f"longer than {_HEADER_PREFIX - npformat.MAGIC_LEN - 4} bytes"
        raise FdpuError(f"{name}: .npy header is not the dictionary numpy.save writes "
                        f"({_reason(exc)})") from None
    return shape, fortran, dtype, head.tell()


def _check_dtype(dtype, name, kinds):
    allowed = ", ".join(_KIND_NAMES[k] for k in kinds)
    if dtype.hasobject:
        raise FdpuError(f"{name}: dtype {dtype} (pickled Python objects) is not allowed; "
                        f"allowed: {allowed}")
    if dtype.kind not in kinds or dtype.names is not None or dtype.subdtype is not None \
            or dtype.itemsize == 0:
        raise FdpuError(f"{name}: dtype {dtype} is not allowed; allowed: {allowed}")


def read_npy(f, available, name, kinds=NUMERIC, limit=None,
             hint="write it with numpy.save"):
    """Read one ``.npy`` array of ``available`` bytes from the binary stream ``f``.

    Parameters
    ----------
    f : binary file object
        Positioned at the array's magic string.
    available : int
        The bytes the array occupies in ``f`` (its file's or member's size): the header and
        the data must fill exactly this many.
    name : str
        The array's name in messages (a path, or ``"PATH member 'KEY'"``).
    kinds : str
        Allowed dtype kinds (``numpy.dtype.kind`` letters, default :data:`NUMERIC`).
    limit : int, optional
        Most bytes the header may declare (default :data:`MAX_ARRAY_BYTES`).
    hint : str
        How to make a right file, ending the message when it is no ``.npy`` array at all.

    Returns
    -------
    numpy.ndarray
        A writeable array with the header's dtype, shape and order.

    Raises
    ------
    FdpuError
        For a missing magic string, an unsupported version, an unreadable header, a dtype of
        another kind (objects always), a declared size above ``limit``, data shorter or longer
        than declared, or a read error of the underlying zip member.
    """
    limit = MAX_ARRAY_BYTES if limit is None else limit
    prefix = f.read(min(available, _HEADER_PREFIX))
    shape, fortran, dtype, offset = _read_header(prefix, name, hint)
    _check_dtype(dtype, name, kinds)
    if any(d < 0 for d in shape):
        raise FdpuError(f"{name}: the .npy header declares shape {shape}, with a negative "
                        f"dimension")
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    if nbytes > limit:
        raise FdpuError(f"{name}: the .npy header declares a {dtype} array of shape {shape}, "
                        f"{nbytes:,} bytes; at most {_size_text(limit)} are allowed")
    have = available - offset
    if have < nbytes:
        raise FdpuError(f"{name}: truncated: has {have:,} bytes of the {nbytes:,} the .npy "
                        f"header declares (shape {shape}, {dtype})")
    if have > nbytes:
        raise FdpuError(f"{name}: {have - nbytes:,} trailing bytes after the {nbytes:,} the "
                        f".npy header declares (shape {shape}, {dtype}); the file is corrupt")
    buf = bytearray(nbytes)
    tail = prefix[offset:offset + nbytes]
    buf[:len(tail)] = tail
    got = _read_into(f, buf, len(tail))
    if got < nbytes:
        raise FdpuError(f"{name}: truncated: has {got:,} bytes of the {nbytes:,} the .npy "
                        f"header declares (shape {shape}, {dtype})")
    if dtype.kind == "U" and nbytes:
        # UTF-32 code units past U+10FFFF or in the surrogate range are no text: Python
        # would make strings of them that its own codecs cannot take.
        units = np.frombuffer(buf, dtype=dtype.str[0] + "u4")
        bad = (units > 0x10FFFF) | ((units >= 0xD800) & (units <= 0xDFFF))
        if bad.any():
            raise FdpuError(f"{name}: a string holds the code unit {int(units[bad][0]):#x}, "
                            f"which is not a Unicode character; the file is corrupt")
    try:
        arr = np.frombuffer(buf, dtype=dtype, count=count) if nbytes else np.empty(0, dtype)
        return arr.reshape(shape, order="F" if fortran else "C")
    except ValueError as exc:
        raise FdpuError(f"{name}: the .npy header declares shape {shape}, which numpy cannot "
                        f"make ({_reason(exc)})") from None


class Archive:
    """An ``.npz`` archive opened for checked reading of its members (a context manager).

    Parameters
    ----------
    path : str
        The file.
    what : str
        What the file should be, for messages, e.g. ``"an FD-CSR .npz file"``.
    hint : str
        How to make a right one, e.g. ``"write one with 'fdpu fdcsr encode'"``.

    Attributes
    ----------
    members : dict
        ``{key: zipfile.ZipInfo}`` of the ``.npy`` members (``key`` without ``.npy``).
    others : list of str
        The names of the members that are not ``.npy`` arrays.

    Raises
    ------
    FdpuError
        If ``path`` is not a regular file, not a zip archive, has a zip directory larger than
        :data:`MAX_DIRECTORY_BYTES`, an unreadable directory or a member name twice.
    OSError
        If it does not exist or cannot be opened.
    """

    def __init__(self, path, what, hint):
        self.path, self.hint = os.fspath(path), hint
        self._file = open_regular(self.path, hint)
        self._zip, self._used = None, 0
        try:
            self._open(what, hint)
        except BaseException:
            self.close()
            raise

    def _open(self, what, hint):
        path = self.path
        try:
            # zipfile's own reader of the end record (private, stable since Python 2): the
            # directory size it gives is what ZipFile would read and parse.
            end = zipfile._EndRecData(self._file)
        except OSError:                               # shorter than an end record
            end = None
        except _ZIP_ERRORS as exc:
            raise FdpuError(f"{path}: unreadable zip archive ({_reason(exc)}); {hint}") from None
        if not end:
            raise FdpuError(f"{path}: not {what} (no zip end record: not a zip archive, or "
                            f"truncated); {hint}")
        if end[zipfile._ECD_SIZE] > MAX_DIRECTORY_BYTES:
            raise FdpuError(f"{path}: its zip directory declares {end[zipfile._ECD_SIZE]:,} "
                            f"bytes; at most {_size_text(MAX_DIRECTORY_BYTES)} are allowed "
                            f"(not {what}; {hint})")
        try:
            self._zip = zipfile.ZipFile(self._file)
            infos = self._zip.infolist()
        except _ZIP_ERRORS as exc:
            raise FdpuError(f"{path}: unreadable zip archive ({_reason(exc)}); {hint}") from None
        self.members, self.others, seen = {}, [], set()
        for info in infos:
            if info.filename in seen:
                raise FdpuError(f"{path}: the zip archive lists member '{info.filename}' "
                                f"twice; the file is corrupt")
            seen.add(info.filename)
            if info.filename.endswith(".npy"):
                self.members[info.filename[:-4]] = info
            else:
                self.others.append(info.filename)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the archive and its file."""
        if self._zip is not None:
            self._zip.close()
        self._file.close()

    def read(self, key, kinds=NUMERIC, limit=None):
        """Return the array of member ``key`` (checked as :func:`read_npy` checks a file).

        ``limit`` (default :data:`MAX_ARRAY_BYTES`) bounds the member's declared uncompressed
        size and, together with every member read before it, the archive's.  The declared
        size, the compression method and encryption are checked before the member is opened.

        Raises
        ------
        FdpuError
            Naming the file and the member: missing, encrypted, compressed by another method
            than stored or deflated, declared too large, a bad CRC, a truncated or corrupt
            member, or any fault :func:`read_npy` finds.
        """
        limit = MAX_ARRAY_BYTES if limit is None else limit
        name = f"{self.path} member '{key}'"
        info = self.members.get(key)
        if info is None:
            raise FdpuError(f"{name} is missing")
        if info.flag_bits & 0x1:
            raise FdpuError(f"{name} is encrypted; FDPU archives are not")
        if info.compress_type not in _ZIP_METHODS:
            raise FdpuError(f"{name} is compressed with zip method {info.compress_type}; "
                            f"allowed: stored (numpy.savez) or deflated "
                            f"(numpy.savez_compressed)")
        most = min(limit, MAX_ARRAY_BYTES)
        if info.file_size > most:
            raise FdpuError(f"{name} declares {info.file_size:,} bytes uncompressed; at most "
                            f"{_size_text(most)} are allowed")
        if self._used + info.file_size > MAX_ARRAY_BYTES:
            raise FdpuError(f"{name} declares {info.file_size:,} bytes uncompressed; with the "
                            f"{self._used:,} bytes of the members read before it that exceeds "
                            f"the {_size_text(MAX_ARRAY_BYTES)} allowed for one archive")
        self._used += info.file_size
        try:
            with self._zip.open(info) as f:
                arr = read_npy(f, info.file_size, name, kinds, limit, self.hint)
                if f.read(1):                  # also makes zipfile check the CRC at the end
                    raise FdpuError(f"{name} holds more than the {info.file_size:,} bytes it "
                                    f"declares; the file is corrupt")
        except _ZIP_ERRORS as exc:
            if isinstance(exc, FdpuError):
                raise
            raise FdpuError(f"{name} is unreadable ({_reason(exc)}); the file is "
                            f"corrupt") from None
        return arr
