"""FD-CSR, the paper's sparse weight format (PAPER.md section 5): encode, decode, check, store.

Contract
--------
A weight array is cut into *rows* of 16 elements.  Each row has

* one ``colidx`` entry (``np.uint16``): a bitmask whose bit ``i`` (LSB = the row's first
  element) is 1 where element ``i`` is stored;
* one ``rowoff`` entry (``np.uint32``): the position in ``values`` of the row's first stored
  element.  An all-zero row gets the offset its first element *would* have, i.e. the offset of
  the next row's first stored element (so ``rowoff`` is the exclusive prefix sum of the rows'
  popcounts and always ``rowoff[r + 1] == rowoff[r] + popcount(colidx[r])``);

and ``values`` (``np.float16``) holds the stored elements in row-major order.  There is no
trailing sentinel: ``colidx`` and ``rowoff`` have exactly one entry per row, so their length
depends only on the shape (what a static dataflow graph needs); ``len(values)`` equals
``rowoff[-1] + popcount(colidx[-1])``.

What is "zero".  An element is *not* stored iff its binary16 bit pattern is ``0x0000`` (+0.0).
Every other pattern is stored, including -0.0 (``0x8000``), NaNs (with their payload) and
infinities, so ``encode(x).decode()`` reproduces ``x`` bit for bit.

Shapes.  A 1-D array of length ``L`` is one weight row of ``L`` elements.  A 2-D ``K x C`` weight
matrix is encoded weight row by weight row, each padded with zeros to a multiple of 16, so a
16-element row never spans two weight rows: there are ``rows_per_weight_row = ceil(C / 16)``
rows per weight row and ``K * ceil(C / 16)`` rows in all.  Padding bits (past column ``C``) are
always 0.

Offset width.  ``rowoff`` is ``np.uint32``.  The largest layer of the zoo, VGG-16 FC6
(4096 x 25088 = 102,760,448 weights), needs 27 bits for a fully dense encoding, so 16 bits are
far too few and 32 bits suffice with room (up to 2**32 - 1 stored values, 8 GiB of values);
32 bits is also the width of the PE's integer/address units that add the offset to the
column-index bits, so the hardware consumes the offsets without conversion.

Input dtypes.  float16 input is used as is.  Other real floating dtypes are converted to
float16 with numpy's IEEE cast: round to nearest, ties to even, directly from the source
precision (no double rounding); magnitudes beyond 65504 become +-inf, tiny ones subnormal or
+-0.  Integer, boolean, complex and object arrays, 0-D or 3-D+ and empty arrays are rejected.

SciPy.  :meth:`FDCSR.to_scipy` returns a ``scipy.sparse.csr_array`` of dtype float32 (SciPy's
sparse formats do not support float16; float16 -> float32 is exact), whose explicit entries are
exactly the stored FD-CSR elements (so -0.0 and NaN entries are kept).  A 1-D FD-CSR becomes a
``1 x L`` matrix.  :func:`from_scipy` accepts any 2-D ``scipy.sparse`` array or matrix.

Files.  :meth:`FDCSR.save` writes an uncompressed ``.npz`` with keys ``values``, ``colidx``,
``rowoff``, ``shape`` and ``format`` (= :data:`FORMAT_TAG`); :func:`load` reads them without
trusting the file (:mod:`sw.compiler.npyfile`: regular files only, every member's size,
compression, CRC and header checked before its data) and validates the structure.

Everything is vectorized: a 4096 x 25088 layer encodes and decodes in about a second each
(``scripts/bench_fdcsr.py``).
"""

import os
from dataclasses import asdict, dataclass

import numpy as np

from sw.compiler import npyfile
from sw.spec.errors import FdpuError
from sw.spec.fp16 import positive_zeros

__all__ = ["ROW", "FORMAT_TAG", "FDCSR", "FDCSRStats", "encode", "from_scipy", "load"]

#: Elements per FD-CSR row (one 16-bit column-index mask per row).
ROW = 16
#: Format tag stored in every FD-CSR ``.npz`` file.
FORMAT_TAG = "fdpu-fdcsr-v1"

VALUES_DTYPE = np.dtype(np.float16)
COLIDX_DTYPE = np.dtype(np.uint16)
ROWOFF_DTYPE = np.dtype(np.uint32)

_NPZ_KEYS = ("values", "colidx", "rowoff", "shape", "format")
#: Most bytes the small members (``format``, ``shape``) may declare.
_TAG_BYTES = 4096


@dataclass(frozen=True)
class FDCSRStats:
    """Sizes of one FD-CSR encoding, in bytes, and how it compares with dense binary16.

    ``ratio`` is ``total_bytes / dense_bytes`` (below 1 means FD-CSR is smaller) and
    ``compression`` its inverse.  ``density`` is ``nnz`` over the number of elements of the
    unpadded array.
    """

    shape: tuple
    elements: int
    rows: int
    nnz: int
    density: float
    values_bytes: int
    colidx_bytes: int
    rowoff_bytes: int
    total_bytes: int
    dense_bytes: int
    ratio: float
    compression: float

    def as_dict(self):
        """Return the statistics as a JSON-friendly ``dict``."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


class FDCSR:
    """An FD-CSR encoded 1-D or 2-D binary16 array.

    The constructor takes the three arrays as they are (no conversion) and calls
    :meth:`validate`, so every ``FDCSR`` object is consistent.  Build one with :func:`encode`,
    :func:`from_scipy` or :func:`load`.

    Parameters
    ----------
    values : numpy.ndarray
        1-D ``float16``: the stored elements in row-major order.
    colidx : numpy.ndarray
        1-D ``uint16``: one bitmask per 16-element row.
    rowoff : numpy.ndarray
        1-D ``uint32``: one offset into ``values`` per 16-element row.
    shape : tuple of int
        ``(L,)`` or ``(K, C)``: the shape of the dense array.

    Raises
    ------
    FdpuError
        If the arrays do not form a consistent FD-CSR encoding of ``shape``.
    """

    def __init__(self, values, colidx, rowoff, shape):
        self.values = values
        self.colidx = colidx
        self.rowoff = rowoff
        self.shape = _check_shape(shape)
        self.validate()

    def __repr__(self):
        return (f"FDCSR(shape={self.shape}, nnz={self.nnz}, rows={self.rows}, "
                f"density={self.density:.4f})")

    # -- geometry ---------------------------------------------------------------------------

    @property
    def weight_rows(self):
        """Number of weight rows ``K`` (1 for a 1-D array)."""
        return 1 if len(self.shape) == 1 else self.shape[0]

    @property
    def columns(self):
        """Number of columns ``C`` of a weight row (``L`` for a 1-D array)."""
        return self.shape[-1]

    @property
    def rows_per_weight_row(self):
        """Number of 16-element rows per weight row, ``ceil(C / 16)``."""
        return -(-self.columns // ROW)

    @property
    def rows(self):
        """Total number of 16-element rows, ``K * ceil(C / 16)``."""
        return self.weight_rows * self.rows_per_weight_row

    @property
    def size(self):
        """Number of elements of the dense (unpadded) array."""
        return int(np.prod(self.shape))

    @property
    def nnz(self):
        """Number of stored elements."""
        return int(self.values.size)

    @property
    def density(self):
        """Stored elements over all elements of the dense array."""
        return self.nnz / self.size

    # -- checks -----------------------------------------------------------------------------

    def validate(self):
        """Check that the arrays form a consistent FD-CSR encoding of :attr:`shape`.

        Raises
        ------
        FdpuError
            Naming the first inconsistency found: a wrong dtype or dimension, a length that
            does not match the shape, a padding bit set past column ``C``, an offset that
            disagrees with the popcounts, a ``values`` length that disagrees with the last
            offset, or a stored +0.0.
        """
        expected_dtypes = (("values", VALUES_DTYPE), ("colidx", COLIDX_DTYPE),
                           ("rowoff", ROWOFF_DTYPE))
        for name, dtype in expected_dtypes:
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray):
                raise FdpuError(f"FD-CSR {name} must be a numpy array of {dtype}, "
                                f"got {type(arr).__name__}")
            if arr.dtype != dtype:
                raise FdpuError(f"FD-CSR {name} must have dtype {dtype}, got {arr.dtype}")
            if arr.ndim != 1:
                raise FdpuError(f"FD-CSR {name} must be 1-D, got {arr.ndim}-D")
        rows = self.rows
        for name in ("colidx", "rowoff"):
            n = getattr(self, name).size
            if n != rows:
                raise FdpuError(
                    f"FD-CSR {name} has {n} entries but shape {self.shape} needs {rows} "
                    f"(one per 16-element row: {self.weight_rows} x ceil({self.columns}/16))")
        tail = self.columns % ROW
        if tail:
            allowed = (1 << tail) - 1
            last = self.colidx[self.rows_per_weight_row - 1::self.rows_per_weight_row]
            bad = np.flatnonzero(last & np.uint16(0xFFFF ^ allowed))
            if bad.size:
                r = int(bad[0]) * self.rows_per_weight_row + self.rows_per_weight_row - 1
                raise FdpuError(
                    f"FD-CSR colidx[{r}] = {int(self.colidx[r]):#06x} sets padding bits past "
                    f"column C = {self.columns}; the last row of each weight row allows only "
                    f"mask {allowed:#06x}")
        pop = np.bitwise_count(self.colidx).astype(np.int64)
        off = self.rowoff.astype(np.int64)
        if off[0] != 0:
            raise FdpuError(f"FD-CSR rowoff[0] = {off[0]} but the first row's offset must be 0")
        bad = np.flatnonzero(off[1:] != off[:-1] + pop[:-1])
        if bad.size:
            i = int(bad[0]) + 1
            raise FdpuError(
                f"FD-CSR rowoff[{i}] = {off[i]} but rowoff[{i - 1}] + popcount(colidx[{i - 1}])"
                f" = {off[i - 1] + pop[i - 1]}")
        end = int(off[-1] + pop[-1])
        if end != self.values.size:
            raise FdpuError(
                f"FD-CSR len(values) = {self.values.size} but rowoff[{rows - 1}] + "
                f"popcount(colidx[{rows - 1}]) = {end}")
        zeros = np.flatnonzero((self.values.view(np.uint16) & 0x7FFF) == 0)
        if zeros.size:
            raise FdpuError(f"FD-CSR values[{int(zeros[0])}] is a zero "
                            f"({self.values.view(np.uint16)[zeros[0]]:#06x}); only elements "
                            f"other than +0.0 and -0.0 may be stored")

    # -- conversions ------------------------------------------------------------------------

    def mask(self):
        """Return the ``rows x 16`` boolean mask of stored elements (padding included)."""
        packed = self.colidx.astype("<u2", copy=False).view(np.uint8).reshape(-1, 2)
        return np.unpackbits(packed, axis=1, bitorder="little").view(np.bool_)

    def decode(self):
        """Return the dense ``float16`` array, bit for bit the one that was encoded."""
        bits = np.zeros((self.rows, ROW), dtype=np.uint16)
        bits[self.mask()] = self.values.view(np.uint16)
        dense = bits.reshape(self.weight_rows, self.rows_per_weight_row * ROW)
        dense = dense[:, :self.columns].view(np.float16)
        if len(self.shape) == 1:
            return dense.reshape(self.shape)
        return np.ascontiguousarray(dense)

    def to_scipy(self):
        """Return a float32 ``scipy.sparse.csr_array`` whose entries are the stored elements.

        A 1-D FD-CSR becomes a ``1 x L`` matrix.  float16 -> float32 is exact.
        """
        import scipy.sparse
        k, c = self.weight_rows, self.columns
        rpw = self.rows_per_weight_row
        mask = self.mask().reshape(k, rpw * ROW)
        cols = np.nonzero(mask)[1].astype(np.int64)
        # Stored values per weight row: sum of its rows' popcounts, via the offsets.
        starts = np.append(self.rowoff[::rpw].astype(np.int64), self.nnz)
        data = self.values.astype(np.float32)
        return scipy.sparse.csr_array((data, cols, starts), shape=(k, c))

    # -- accounting -------------------------------------------------------------------------

    def stats(self):
        """Return the byte accounting of this encoding as an :class:`FDCSRStats`."""
        values_bytes = self.values.nbytes
        colidx_bytes = self.rows * COLIDX_DTYPE.itemsize
        rowoff_bytes = self.rows * ROWOFF_DTYPE.itemsize
        total = values_bytes + colidx_bytes + rowoff_bytes
        dense = self.size * VALUES_DTYPE.itemsize
        return FDCSRStats(shape=self.shape, elements=self.size, rows=self.rows, nnz=self.nnz,
                          density=self.density, values_bytes=values_bytes,
                          colidx_bytes=colidx_bytes, rowoff_bytes=rowoff_bytes,
                          total_bytes=total, dense_bytes=dense, ratio=total / dense,
                          compression=dense / total)

    # -- files ------------------------------------------------------------------------------

    def save(self, path):
        """Write this encoding to the ``.npz`` file ``path`` (see :func:`load`)."""
        with open(path, "wb") as f:
            np.savez(f, values=self.values, colidx=self.colidx, rowoff=self.rowoff,
                     shape=np.array(self.shape, dtype=np.int64),
                     format=np.array(FORMAT_TAG))

    def __eq__(self, other):
        if not isinstance(other, FDCSR):
            return NotImplemented
        return (self.shape == other.shape
                and np.array_equal(self.colidx, other.colidx)
                and np.array_equal(self.rowoff, other.rowoff)
                and np.array_equal(self.values.view(np.uint16), other.values.view(np.uint16)))

    __hash__ = None


def _check_shape(shape):
    """Return ``shape`` as a tuple of 1 or 2 positive Python ints, or raise FdpuError."""
    try:
        dims = tuple(int(d) for d in shape)
        ok = all(int(d) == d for d in shape)
    except (TypeError, ValueError):
        raise FdpuError(f"FD-CSR shape must be a tuple of 1 or 2 positive integers, "
                        f"got {shape!r}") from None
    if not ok or len(dims) not in (1, 2) or min(dims) < 1:
        raise FdpuError(f"FD-CSR shape must be a tuple of 1 or 2 positive integers, "
                        f"got {shape!r}")
    return dims


def as_float16(dense, name="array"):
    """Return ``dense`` as a 1-D or 2-D non-empty float16 ndarray (RNE cast), or raise.

    Parameters
    ----------
    dense : array_like
        Real floating-point data.
    name : str
        How to name the input in error messages.
    """
    arr = np.asarray(dense)
    if not np.issubdtype(arr.dtype, np.floating):
        raise FdpuError(f"{name} must have a real floating-point dtype (float16, float32, "
                        f"float64), got {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise FdpuError(f"{name} must be 1-D or 2-D (K x C), got {arr.ndim}-D of shape "
                        f"{arr.shape}")
    if arr.size == 0:
        raise FdpuError(f"{name} must not be empty, got shape {arr.shape}")
    if arr.dtype != VALUES_DTYPE:
        with np.errstate(over="ignore", under="ignore"):
            arr = arr.astype(VALUES_DTYPE)
    return arr


def encode(dense):
    """Encode a 1-D or 2-D array into FD-CSR.

    Parameters
    ----------
    dense : array_like
        Floating-point data, 1-D (one weight row) or 2-D (``K x C``, one weight row per row).
        Non-float16 input is cast to float16 (round to nearest, ties to even).

    Returns
    -------
    FDCSR
        The encoding; every element other than a zero is stored (``-0.0`` counts as zero,
        as ``+0.0`` does, and decodes as ``+0.0``).

    Raises
    ------
    FdpuError
        For a non-floating dtype, a dimension other than 1 or 2, or an empty array.
    """
    arr = positive_zeros(as_float16(dense, "FD-CSR input"))
    shape = arr.shape
    mat = arr.reshape(1, -1) if arr.ndim == 1 else arr
    k, c = mat.shape
    rpw = -(-c // ROW)
    bits = np.ascontiguousarray(mat).view(np.uint16)
    nz = bits != 0
    if c % ROW:
        padded = np.zeros((k, rpw * ROW), dtype=np.bool_)
        padded[:, :c] = nz
    else:
        padded = nz
    colidx = np.packbits(padded.reshape(-1, ROW), axis=1, bitorder="little")
    colidx = colidx.view("<u2").reshape(-1).astype(COLIDX_DTYPE, copy=False)
    counts = np.bitwise_count(colidx)
    ends = np.cumsum(counts, dtype=np.uint64)
    nnz = int(ends[-1])
    if nnz > np.iinfo(ROWOFF_DTYPE).max:
        raise FdpuError(f"FD-CSR input has {nnz} non-zero elements; 32-bit row offsets "
                        f"address at most {np.iinfo(ROWOFF_DTYPE).max}")
    rowoff = np.empty(colidx.size, dtype=ROWOFF_DTYPE)
    rowoff[0] = 0
    rowoff[1:] = ends[:-1]
    values = bits[nz].view(VALUES_DTYPE)
    return FDCSR(values, colidx, rowoff, shape)


def from_scipy(matrix):
    """Encode a 2-D ``scipy.sparse`` array or matrix into FD-CSR.

    Duplicate entries are summed (SciPy's convention) in the matrix's dtype, then every entry
    is cast to float16 (RNE); entries whose result is +0.0 are not stored, others are (so an
    explicit -0.0 entry is kept).

    Raises
    ------
    FdpuError
        If ``matrix`` is not a 2-D scipy sparse array/matrix of real floating dtype, or empty.
    """
    import scipy.sparse
    if not scipy.sparse.issparse(matrix):
        raise FdpuError(f"from_scipy expects a scipy.sparse array or matrix, "
                        f"got {type(matrix).__name__}")
    if matrix.ndim != 2:
        raise FdpuError(f"from_scipy expects a 2-D sparse matrix, got {matrix.ndim}-D")
    if not np.issubdtype(matrix.dtype, np.floating):
        raise FdpuError(f"sparse matrix must have a real floating-point dtype, "
                        f"got {matrix.dtype}")
    if 0 in matrix.shape:
        raise FdpuError(f"sparse matrix must not be empty, got shape {matrix.shape}")
    coo = scipy.sparse.coo_array(matrix)
    coo.sum_duplicates()
    dense = np.zeros(coo.shape, dtype=VALUES_DTYPE)
    with np.errstate(over="ignore", under="ignore"):
        dense[coo.row, coo.col] = coo.data.astype(VALUES_DTYPE)
    return encode(dense)


def load(path):
    """Read an FD-CSR ``.npz`` file written by :meth:`FDCSR.save`.

    The file is read with :class:`sw.compiler.npyfile.Archive`: a regular file, a zip archive
    whose members ``values``, ``colidx``, ``rowoff``, ``shape`` and ``format`` are each checked
    (compression, declared size, CRC, ``.npy`` header, numeric dtype; other members are not
    read) before their data, then the arrays are validated as an FD-CSR encoding.

    Raises
    ------
    FdpuError
        Naming the file (and the member): not a regular file, not a zip archive, a missing
        or unreadable member, a declared size above
        :data:`sw.compiler.npyfile.MAX_ARRAY_BYTES`, another format tag, a ``shape`` that is
        not 1 or 2 integers, or arrays that are not a consistent FD-CSR encoding.
    OSError
        If the file does not exist or cannot be read.
    """
    path = os.fspath(path)
    with npyfile.Archive(path, "an FD-CSR .npz file",
                         "write one with 'fdpu fdcsr encode'") as npz:
        missing = [k for k in _NPZ_KEYS if k not in npz.members]
        if missing:
            raise FdpuError(f"{path}: not an FD-CSR .npz file: missing member(s) "
                            f"{', '.join(missing)}; an FD-CSR file has {', '.join(_NPZ_KEYS)}")
        tag = npz.read("format", kinds="U", limit=_TAG_BYTES)
        if tag.shape != () or str(tag) != FORMAT_TAG:
            raise FdpuError(f"{path}: format tag is {_tag_text(tag)}, expected {FORMAT_TAG!r}")
        shape = npz.read("shape", kinds="iu", limit=_TAG_BYTES)
        if shape.ndim != 1 or shape.size not in (1, 2):
            raise FdpuError(f"{path} member 'shape' must hold 1 or 2 integers, got shape "
                            f"{shape.shape}")
        arrays = {k: npz.read(k) for k in ("values", "colidx", "rowoff")}
    try:
        return FDCSR(arrays["values"], arrays["colidx"], arrays["rowoff"],
                     tuple(shape.tolist()))
    except FdpuError as exc:
        raise FdpuError(f"{path}: {exc}") from None


def _tag_text(tag):
    """Return a short description of a format-tag member that is not the expected tag."""
    if tag.shape != ():
        return f"an array of shape {tag.shape}"
    text = repr(str(tag))
    return text if len(text) <= 60 else text[:57] + "..."
