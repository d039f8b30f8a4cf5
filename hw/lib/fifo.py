"""A parametric stream FIFO.

:class:`StreamFIFO` puts an :mod:`amaranth.lib.fifo` ``SyncFIFOBuffered`` behind a pair of
:mod:`amaranth.lib.stream` ports, so blocks of the accelerator can decouple with one line::

    m.submodules.q = q = StreamFIFO(width=64, depth=4)
    wiring.connect(m, src=producer.o_token, dst=q.i_data)
    wiring.connect(m, src=q.o_data, dst=consumer.i_token)

Contract
--------
Handshake
    Both ports follow the :mod:`amaranth.lib.stream` rules: a transfer happens on a rising edge
    where ``valid`` and ``ready`` are both high. ``i_data.ready`` depends only on the FIFO's
    state (never combinationally on ``i_data.valid``); ``o_data.valid`` and ``o_data.payload``
    come from registers, so the FIFO cuts every combinational path between its two sides.
    Once ``o_data.valid`` is high it stays high, with a stable payload, until the word is
    taken.
Capacity
    Exactly ``depth`` words: ``i_data.ready`` is low if and only if ``level == depth``.
Latency
    2 cycles: a word accepted on edge *t* is offered on ``o_data`` from edge *t + 2*.
Throughput
    One word per cycle in and out for ``depth >= 3``. Shallower FIFOs are slower when they run
    full, because ``ready`` is computed from the state before the same-cycle read (which is
    what keeps them free of combinational paths): ``depth == 1`` moves a word every other
    cycle, ``depth == 2`` two words in three cycles.
Implementation
    ``SyncFIFOBuffered(depth)``: an output register plus a ``depth - 1`` word memory. For
    ``depth == 2`` that memory would have one word and a zero-width address, which Yosys
    writes as ``[-1:0]`` (a Verilator ASCRANGE warning); so depth 2 uses a 3-deep buffer
    admitted to 2 words instead (one spare word of storage).
Ordering
    First in, first out; no word is lost, duplicated or reordered.
Level
    ``level`` counts the words held (0 .. ``depth``), including a word in flight between the
    storage and the output register; it is updated one cycle after each transfer.
"""

from amaranth import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO"]


class StreamFIFO(wiring.Component):
    """Buffer a stream of ``width``-bit words, ``depth`` deep.

    Parameters
    ----------
    width : int
        Payload width in bits, at least 1.
    depth : int
        Number of words held, at least 1.

    Attributes
    ----------
    i_data : In(stream.Signature(width))
        Words in.
    o_data : Out(stream.Signature(width))
        Words out, in arrival order.
    level : Out(range(depth + 1))
        Number of words currently held.

    Raises
    ------
    TypeError
        If ``width`` or ``depth`` is not a positive integer.
    """

    def __init__(self, width, depth):
        for name, value in (("width", width), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        self._width = width
        self._depth = depth
        super().__init__({
            "i_data": In(stream.Signature(width)),
            "o_data": Out(stream.Signature(width)),
            "level": Out(range(depth + 1)),
        })

    @property
    def width(self):
        """Payload width in bits."""
        return self._width

    @property
    def depth(self):
        """Capacity in words."""
        return self._depth

    def elaborate(self, platform):
        m = Module()
        # depth 2: avoid a 1-word memory with a zero-width address (see the module docstring).
        inner_depth = 3 if self.depth == 2 else self.depth
        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(width=self.width, depth=inner_depth)
        if inner_depth == self.depth:
            m.d.comb += self.i_data.ready.eq(buffer.w_rdy)
        else:
            m.d.comb += self.i_data.ready.eq(buffer.w_rdy & (buffer.level != self.depth))
        m.d.comb += [
            buffer.w_data.eq(self.i_data.payload),
            buffer.w_en.eq(self.i_data.valid & self.i_data.ready),
            self.o_data.payload.eq(buffer.r_data),
            self.o_data.valid.eq(buffer.r_rdy),
            buffer.r_en.eq(self.o_data.ready),
            self.level.eq(buffer.level),
        ]
        return m
