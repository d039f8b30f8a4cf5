"""Lint-clean expression helpers shared by every block.

Each helper returns an Amaranth expression (nothing stateful: no signals, no modules) and
exists for one of two reasons:

* **Verilog widths.**  Yosys trims constants to their minimal width, so a plain ``x == 1``
  becomes ``x == 1'h1`` in the generated Verilog and draws a Verilator ``WIDTH`` warning;
  :func:`equals`, :func:`increment` and :func:`zero_extend` build the same logic with no
  widths to match.
* **Balanced trees.**  A long left-nested chain of operators (``a | b | c | ...`` written as a
  fold) overflows Python's recursion in ``amaranth.sim`` and simulates several times slower
  in Icarus; :func:`balanced_tree` (and :func:`any_of`, :func:`all_of`, :func:`sum_of`,
  :func:`popcount` built on it) pairs neighbours level by level instead.
"""

import enum
import operator

from amaranth import Cat, Const, Mux

__all__ = ["equals", "increment", "zero_extend", "balanced_tree", "any_of", "all_of", "sum_of",
           "popcount", "lowest_one", "is_one_of"]


def equals(x, value):
    """Return ``x == value`` (``value`` a non-negative constant or an enum member) as an AND of
    (inverted) bits."""
    x = x.as_value() if hasattr(x, "as_value") else x
    value = value.value if isinstance(value, enum.Enum) else value
    if value >> len(x):
        return Const(0, 1)
    return Cat(*[x[i] if value >> i & 1 else ~x[i] for i in range(len(x))]).all()


def increment(x):
    """Return ``x + 1`` modulo ``2 ** len(x)``."""
    return (x + Const(1, len(x)))[:len(x)]


def zero_extend(x, width):
    """Return ``x`` zero-extended (or truncated) to ``width`` bits."""
    return Cat(x, Const(0, width - len(x))) if width > len(x) else x[:width]


def balanced_tree(values, op):
    """Return ``op`` folded over ``values`` as a balanced binary tree.

    Parameters
    ----------
    values : iterable of Value
        At least one operand.
    op : callable
        ``op(a, b)``: the two-operand operation (associative, so the shape does not change
        the result).

    Neighbours are paired level by level (``v0 op v1``, ``v2 op v3``, ...; an odd last operand
    moves up unchanged), so the depth is ``ceil(log2(n))``.
    """
    values = list(values)
    if not values:
        raise ValueError("balanced_tree needs at least one operand")
    while len(values) > 1:
        values = [op(a, b) for a, b in zip(values[0::2], values[1::2])] + (
            [values[-1]] if len(values) % 2 else [])
    return values[0]


def any_of(values):
    """Return the OR of ``values`` (a balanced tree)."""
    return balanced_tree(values, operator.or_)


def all_of(values):
    """Return the AND of ``values`` (a balanced tree)."""
    return balanced_tree(values, operator.and_)


def sum_of(values, width=None):
    """Return the sum of ``values`` as a balanced adder tree.

    With ``width``, every partial sum is truncated to ``width`` bits (the operands should then
    be ``width`` bits wide, so that no add mixes widths); without it the sum grows as
    Amaranth's arithmetic does.
    """
    if width is None:
        return balanced_tree(values, operator.add)
    return balanced_tree(values, lambda a, b: (a + b)[:width])


def popcount(bits, width):
    """Return the number of set ``bits`` as a ``width``-bit balanced adder tree.

    Every add has operands of the full width (a one-bit value zero-extended would be a WIDTH
    warning in the generated Verilog); no bits count as a ``width``-bit zero.
    """
    bits = list(bits)
    if not bits:
        return Const(0, width)
    return sum_of([Mux(b, Const(1, width), Const(0, width)) for b in bits], width)


def lowest_one(value):
    """Return ``value`` with only its lowest set bit kept (single-bit logic, no adder)."""
    seen = Const(0, 1)
    bits = []
    for i in range(len(value)):
        bits.append(value[i] & ~seen)
        seen = seen | value[i]
    return Cat(*bits)


def is_one_of(x, values):
    """Return whether ``x`` equals one of the non-negative constants ``values`` (1 bit)."""
    return Cat(*[equals(x, int(v)) for v in values]).any()
