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
    Exactly ``depth`` words: ``i_data.ready`` is low when ``level == depth``, and otherwise
    high, except with ``depth == 2``, where it is also low for the one cycle in which the
    first word moves from the storage into the output register.
Latency
    2 cycles: a word accepted on edge *t* is offered on ``o_data`` from edge *t + 2*.
Throughput
    One word per cycle in and out for ``depth >= 3``. With ``depth`` 1 or 2 the FIFO can
    accept only every other cycle when it runs full (``ready`` is computed from the state
    before the same-cycle read, which is what keeps it free of combinational paths).
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
        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(width=self.width, depth=self.depth)
        m.d.comb += [
            buffer.w_data.eq(self.i_data.payload),
            buffer.w_en.eq(self.i_data.valid),
            self.i_data.ready.eq(buffer.w_rdy),
            self.o_data.payload.eq(buffer.r_data),
            self.o_data.valid.eq(buffer.r_rdy),
            buffer.r_en.eq(self.o_data.ready),
            self.level.eq(buffer.level),
        ]
        return m
