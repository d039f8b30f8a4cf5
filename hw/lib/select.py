"""Selection primitives built for Verilator speed: decode, index, multiplex, priority, round robin.

Each helper adds named signals and continuous assignments to a module ``m`` and returns the
result.  They are written as word-wide operations (one right shift, a binary search on whole
words) because Verilator compiles those to a few word instructions, where a case statement or a
multiplexer tree per bit costs one test per bit in every use.  They use no ``always @*``
process: Icarus does not run one at time 0, so a process whose inputs never change would leave
its output X.

* :func:`onehot` -- decode an index into a one-hot vector.
* :func:`bit_at` -- one bit of a vector at a run-time index.
* :func:`shift_mux` -- one of several values at a run-time index.
* :func:`first_set` -- the lowest set bit of a vector (priority encoder).
* :func:`round_robin` -- a set bit of a vector, starting after the previous pick.
"""

from amaranth import Cat, Const, Mux, Signal

__all__ = ["onehot", "bit_at", "shift_mux", "first_set", "round_robin"]


def onehot(m, x, n, name):
    """Return a one-hot ``Signal(n)``: bit ``v`` is ``x == v`` (one right shift).

    ``Const(1 << (2**w - 1)) >> ~x`` for a ``w``-bit ``x``: a right shift keeps the width of
    the shifted value, so Verilator compiles it to a word shift (a left shift of a
    variable amount widens the result, a case statement becomes a table or a chain).

    Parameters
    ----------
    m : Module
        Receives the assignment.
    x : Value
        The index (unsigned).
    n : int
        Width of the result; values of ``x`` at or above ``n`` give 0.
    name : str
        Name of the result signal.
    """
    w = len(x)
    out = Signal(n, name=name)
    if w == 0:
        m.d.comb += out.eq(1)
    else:
        hot = Const(1 << ((1 << w) - 1), 1 << w) >> ~x
        m.d.comb += out.eq(hot[:n] if n < 1 << w else hot)
    return out


def bit_at(vec, idx):
    """Return bit ``idx`` of ``vec`` (a run-time index) as one right shift (an expression)."""
    return (vec >> idx)[0]


def shift_mux(m, values, idx, name):
    """Return ``values[idx]`` as one wide shift (0 when ``idx`` is out of range).

    Each value is padded to a power-of-two width and the concatenation shifted right by
    ``idx`` times that width: Verilator compiles this to a few word operations, where a
    multiplexer tree or a case statement is inlined into every use as a ternary chain.
    The result is as wide as the widest value; signals are named ``<name>_vec``/``_shr``.
    """
    values = [v.as_value() if hasattr(v, "as_value") else v for v in values]
    width = max(len(v) for v in values)
    lg = (width - 1).bit_length()
    vec = Signal((1 << lg) * len(values), name=f"{name}_vec")
    # Pad with copies of the top bit, not zeros: Yosys drops leading constant zeros of the
    # concatenation, and the shift would then draw a WIDTH warning.
    m.d.comb += vec.eq(Cat(*[Cat(v, v[-1].replicate((1 << lg) - len(v))) if len(v) < 1 << lg
                             else v for v in values]))
    shifted = Signal(len(vec), name=f"{name}_shr")
    m.d.comb += shifted.eq(vec >> (Cat(Const(0, lg), idx) if lg else idx))
    return shifted[:width]


def first_set(m, vec, name):
    """Return ``(any, index)`` of the lowest set bit of ``vec`` (index all ones when none is set).

    A binary search on whole words, most significant index bit first: is the lower half
    empty? then search the upper half, else the lower one (a few word operations, where a
    tree of one multiplexer per bit costs one test per bit in Verilator).  Continuous
    assignments, not a process: Icarus does not run an ``always @*`` block at time 0, so a
    process whose inputs never change (a pool that stays empty) would leave its output X.
    """
    lg = max(1, (len(vec) - 1).bit_length())
    cur = Signal(1 << lg, name=f"{name}_v{lg}")
    m.d.comb += cur.eq(vec)
    bits = []
    for level in reversed(range(lg)):
        half = 1 << level
        empty = ~cur[:half].any()
        bits.append(empty)
        nxt = Signal(half, name=f"{name}_v{level}")
        m.d.comb += nxt.eq(Mux(empty, cur[half:], cur[:half]))
        cur = nxt
    idx = Signal(range(1 << lg), name=f"{name}_idx")
    m.d.comb += idx.eq(Cat(*reversed(bits)))
    return vec.any(), idx


def round_robin(m, vec, name):
    """Pick a set bit of ``vec``, starting after the previous pick; return ``(any, index, last)``.

    ``last`` is the register of the previous pick (``<name>_last``); the caller updates it
    (``with m.If(any): m.d.sync += last.eq(index)``), so it decides what counts as a pick.
    """
    n = len(vec)
    last = Signal(range(max(2, n)), name=f"{name}_last")
    above = Signal(n, name=f"{name}_above")
    # above[i] = i > last: the mask of bits 0..last is all ones shifted right by ~last (a
    # right shift keeps the width: one word operation).
    w = 1 << len(last)
    upto = Const((1 << w) - 1, w) >> ~last
    m.d.comb += above.eq(vec & ~upto[:n])
    any_hi, idx_hi = first_set(m, above, f"{name}_hi")
    any_all, idx_all = first_set(m, vec, f"{name}_all")
    idx = Signal.like(idx_all, name=f"{name}_pick")
    m.d.comb += idx.eq(Mux(any_hi, idx_hi, idx_all))
    return any_all, idx, last
