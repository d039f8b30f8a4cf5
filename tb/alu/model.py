"""Reference model and operand generator for the 32-bit integer unit (:mod:`hw.pe.alu`).

Plain Python integers, vectorized with numpy (``uint64`` holding 32-bit values, so products
and sums do not overflow before the final wrap).
"""

import numpy as np

__all__ = ["OPS", "reference", "random_operands"]

#: ``hw.pe.alu.IntOp`` names, in the order the tests sweep them.
OPS = ("ADD", "SUB", "MUL", "MADD", "AND", "OR", "XOR", "SHL", "SHR", "SRA", "EQ", "LT", "LTU",
       "MOV")

_MASK = np.uint64(0xFFFF_FFFF)

_EDGE = np.array([0, 1, 2, 3, 5, 15, 16, 31, 32, 33, 0x7FFF, 0x8000, 0xFFFF, 0x1_0000,
                  0x7FFF_FFFF, 0x8000_0000, 0x8000_0001, 0xFFFF_FFFE, 0xFFFF_FFFF,
                  0xDEAD_BEEF, 0x1234_5678], dtype=np.uint64)


def _signed(x):
    return x.astype(np.int64) - ((x >> np.uint64(31)) & np.uint64(1)).astype(np.int64) * (1 << 32)


def reference(op, a, b, c):
    """Return ``op`` applied element-wise to 32-bit operands, as ``uint64`` in 0..2^32-1.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    a, b, c : array_like of int
        Operands in ``0..2**32-1`` (``c`` is read by MADD only).
    """
    a, b, c = (np.asarray(x, dtype=np.uint64) & _MASK for x in (a, b, c))
    sh = b & np.uint64(31)
    if op == "ADD":
        r = a + b
    elif op == "SUB":
        r = a + (np.uint64(1 << 32) - b)   # no uint64 underflow warning
    elif op in ("MUL", "MADD"):
        # Low 32 bits of a * b from 16-bit halves (a uint64 product of 32-bit values is exact).
        r = a * b + (c if op == "MADD" else np.uint64(0))
    elif op == "AND":
        r = a & b
    elif op == "OR":
        r = a | b
    elif op == "XOR":
        r = a ^ b
    elif op == "SHL":
        r = a << sh
    elif op == "SHR":
        r = a >> sh
    elif op == "SRA":
        r = (_signed(a) >> sh.astype(np.int64)).astype(np.uint64)
    elif op == "EQ":
        r = (a == b).astype(np.uint64)
    elif op == "LT":
        r = (_signed(a) < _signed(b)).astype(np.uint64)
    elif op == "LTU":
        r = (a < b).astype(np.uint64)
    elif op == "MOV":
        r = a
    else:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")
    return r & _MASK


def random_operands(n, rng):
    """Return three ``uint64`` arrays of ``n`` 32-bit operands mixing edge values and random.

    ``b`` is often a small number (shift amounts) or equal to ``a`` (EQ, LT ties).
    """
    def pick():
        kind = rng.integers(0, 3, n)
        uniform = rng.integers(0, 1 << 32, n, dtype=np.uint64)
        edge = _EDGE[rng.integers(0, len(_EDGE), n)]
        small = rng.integers(0, 40, n, dtype=np.uint64)
        return np.where(kind == 0, uniform, np.where(kind == 1, edge, small))
    a, b, c = pick(), pick(), pick()
    b = np.where(rng.random(n) < 0.15, a, b)
    return a, b, c
