"""Read and write binary16 test vectors in Berkeley TestFloat's ``testfloat_gen`` text format.

One case per line: the operands, then the expected result, then the exception flags, each
in hexadecimal and separated by white space, e.g. for ``f16_mulAdd``::

    3C00 4000 BC00 3C00 00

Operands and results are binary16 bit patterns (1 to 4 hex digits); flags are read and
ignored (the FDPU does not model exception flags).  Empty lines are skipped.  Anything else
raises :class:`sw.spec.errors.FdpuError` naming the file, the line number and what a line must
hold.
"""

import io
import re

import numpy as np

from sw.compiler.npyfile import open_regular
from sw.spec.errors import FdpuError

__all__ = ["read_vectors", "write_vectors"]

_HEX = re.compile(r"[0-9A-Fa-f]+\Z")


def read_vectors(path, arity):
    """Read a ``testfloat_gen`` file of binary16 cases with ``arity`` operands.

    Parameters
    ----------
    path : str or os.PathLike
    arity : int
        Operands per case (3 for ``f16_mulAdd``, 2 for ``f16_add``/``f16_mul``).

    Returns
    -------
    operands : tuple of numpy.ndarray of uint16
        ``arity`` arrays, one per operand position.
    expected : numpy.ndarray of uint16

    Raises
    ------
    FdpuError
        For a malformed line or a file without any case.
    OSError
        If the file cannot be read.
    """
    fields = arity + 2
    what = (f"{arity} hexadecimal binary16 operands, the hexadecimal binary16 result and "
            f"hexadecimal flags")
    rows = []
    raw = open_regular(path, "TestFloat vectors are a text file of testfloat_gen lines")
    with io.TextIOWrapper(raw, encoding="ascii", errors="replace") as f:
        for number, line in enumerate(f, 1):
            tokens = line.split()
            if not tokens:
                continue
            if len(tokens) != fields:
                raise FdpuError(f"{path}, line {number}: expected {fields} fields ({what}), "
                                f"got {len(tokens)}: {line.strip()[:60]!r}")
            for position, token in enumerate(tokens):
                if not _HEX.match(token):
                    raise FdpuError(f"{path}, line {number}: field {position + 1} {token!r} "
                                    f"is not hexadecimal; expected {what}")
                if position < arity + 1 and len(token) > 4:
                    raise FdpuError(f"{path}, line {number}: field {position + 1} {token!r} "
                                    f"is not a binary16 value (1 to 4 hex digits)")
            rows.append([int(token, 16) for token in tokens[:arity + 1]])
    if not rows:
        raise FdpuError(f"{path}: no test cases; expected lines of {what}")
    table = np.array(rows, dtype=np.uint16)
    return tuple(table[:, k] for k in range(arity)), table[:, arity]


def write_vectors(path, operands, expected, flags=None):
    """Write cases in ``testfloat_gen`` format (upper-case hex, flags ``00`` by default).

    Parameters
    ----------
    path : str or os.PathLike
    operands : sequence of array_like of uint16
    expected : array_like of uint16
    flags : array_like of int, optional
    """
    columns = [np.asarray(x, dtype=np.uint16) for x in operands]
    expected = np.asarray(expected, dtype=np.uint16)
    flags = np.zeros(len(expected), dtype=np.uint8) if flags is None else np.asarray(flags)
    with open(path, "w", encoding="ascii") as f:
        for row in zip(*columns, expected, flags):
            f.write(" ".join(f"{int(v):04X}" for v in row[:-1]) + f" {int(row[-1]):02X}\n")
