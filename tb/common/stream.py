"""cocotb drivers, monitors and scoreboards for Amaranth stream ports.

Amaranth flattens a stream member ``i_data: In(stream.Signature(w))`` into the Verilog
ports ``i_data__valid``, ``i_data__ready`` and ``i_data__payload``; these helpers take the
DUT and the member name (``"i_data"``).

Timing (the same on Icarus and Verilator): every helper writes its inputs just after a
rising edge, then waits for ``ReadOnly()`` of that time step, when everything has settled, and
samples ``valid``/``ready`` there. What it sees is exactly what the next rising edge will
act on, so a transfer is recorded once, in the cycle it happens, without relying on whether a
simulator shows registers' old or new values right after ``RisingEdge``.

Pacing: a *pause* argument is ``None`` (full rate), a probability in ``[0, 1]`` drawn from a
``random.Random``, or any iterator of truthy/falsy values consumed once per cycle
(``itertools.cycle([1, 1, 1, 0])`` pauses three cycles of four). A truthy value means "pause
this cycle": the source does not start a new word (a word already offered stays offered
until taken, as the stream rules require), the sink drives ``ready`` low.

Every wait takes a cycle bound; running out raises ``AssertionError`` whose message starts
with "timeout" (or "deadlock" when words are stuck) and says what was pending.
"""

import itertools
import random
from collections import deque

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["pause_pattern", "wait_cycles", "StreamSource", "StreamSink", "StreamMonitor",
           "Scoreboard"]


def pause_pattern(pause, rng=None):
    """Return an endless iterator of booleans, ``True`` meaning "pause this cycle".

    Parameters
    ----------
    pause : None, float or iterable
        ``None``: never pause. A float ``p`` in ``[0, 1]``: pause with probability ``p``
        (drawn from ``rng``). An iterable: its values, taken as truthy/falsy; when it ends the
        stream stops pausing.
    rng : random.Random, optional
        Source of randomness for a probability; default a ``random.Random`` seeded from the
        global ``random`` (which cocotb seeds from ``COCOTB_RANDOM_SEED`` for each test).
    """
    if pause is None:
        return itertools.repeat(False)
    if isinstance(pause, (int, float)) and not isinstance(pause, bool):
        if not 0 <= pause <= 1:
            raise ValueError(f"pause probability must be in [0, 1], not {pause!r}")
        rng = rng or random.Random(random.getrandbits(64))
        return (rng.random() < pause for _ in itertools.count())
    return itertools.chain((bool(value) for value in pause), itertools.repeat(False))


class _Port:
    """The valid/ready/payload handles of one stream member of the DUT."""

    def __init__(self, dut, name):
        self.name = name
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        # A zero-width payload has no Verilog port.
        self.payload = getattr(dut, f"{name}__payload", None)

    def fires(self):
        """Return whether valid and ready are both high (call in ``ReadOnly``)."""
        return self.valid.value == 1 and self.ready.value == 1

    def read_payload(self):
        return 0 if self.payload is None else self.payload.value.to_unsigned()


async def wait_cycles(clk, condition, max_cycles, what):
    """Wait rising edges of ``clk`` until ``condition()`` holds, at most ``max_cycles``.

    ``condition`` is evaluated in ``ReadOnly()`` after each edge (and once before the first).
    ``what`` is a callable or text describing what is pending, for the timeout message.
    """
    for _ in range(max_cycles):
        if condition():
            return
        await RisingEdge(clk)
        await ReadOnly()
    if not condition():
        pending = what() if callable(what) else what
        raise AssertionError(f"timeout after {max_cycles} cycles: {pending}")


class StreamSource:
    """Drive a stream input of the DUT (the DUT consumes, e.g. ``i_data``).

    Parameters
    ----------
    dut : cocotb handle
    name : str
        Stream member name, e.g. ``"i_data"``.
    clk : cocotb handle
    pause : see :func:`pause_pattern`
        Idle cycles between words.
    rng : random.Random, optional
    rst : cocotb handle, optional
        While it reads 1, the source offers nothing.

    The source starts running when constructed; queue words with :meth:`send`.
    """

    def __init__(self, dut, name, clk, *, pause=None, rng=None, rst=None):
        self._port = _Port(dut, name)
        self._clk = clk
        self._rst = rst
        self._pause = pause_pattern(pause, rng)
        self._queue = deque()
        self._offered = None         # word currently on the port, or None
        self.sent = 0                # words accepted by the DUT
        self.cycle = 0
        self._port.valid.value = 0
        self._task = cocotb.start_soon(self._run())

    def set_pause(self, pause, rng=None):
        """Change the idle-cycle pattern from the next cycle on."""
        self._pause = pause_pattern(pause, rng)

    def send(self, *words):
        """Queue words to offer, in order."""
        self._queue.extend(words)

    @property
    def pending(self):
        """Words queued or offered but not yet accepted."""
        return len(self._queue) + (self._offered is not None)

    async def wait_sent(self, max_cycles):
        """Wait until the DUT has accepted every queued word (bounded by ``max_cycles``)."""
        await wait_cycles(self._clk, lambda: self.pending == 0, max_cycles,
                          lambda: f"deadlock: source {self._port.name} still has "
                                  f"{self.pending} words to send (offering "
                                  f"{self._offered!r}, ready={self._port.ready.value})")

    async def _run(self):
        port = self._port
        accepted = False
        while True:
            await RisingEdge(self._clk)
            self.cycle += 1
            if accepted:
                self._offered = None
            paused = next(self._pause)
            in_reset = self._rst is not None and self._rst.value == 1
            if self._offered is None and self._queue and not paused and not in_reset:
                self._offered = self._queue.popleft()
                if port.payload is not None:
                    port.payload.value = self._offered
                port.valid.value = 1
            elif self._offered is None:
                port.valid.value = 0
            await ReadOnly()
            accepted = self._offered is not None and port.ready.value == 1
            if accepted:
                self.sent += 1


class StreamMonitor:
    """Watch a stream port and record every transfer; check the stream rules on it.

    Parameters
    ----------
    dut, name, clk
        As for :class:`StreamSource`.
    callback : callable, optional
        Called with each transferred payload (as an ``int``), in order.
    check_protocol : bool
        Raise if ``valid`` drops, or the payload changes, before a transfer.
    """

    def __init__(self, dut, name, clk, *, callback=None, check_protocol=True):
        self._port = _Port(dut, name)
        self._clk = clk
        self._callback = callback
        self._check = check_protocol
        self.items = deque()         # transferred payloads not yet taken by recv()
        self.count = 0
        self.cycle = 0
        self.last_transfer_cycle = None
        self._task = cocotb.start_soon(self._run())

    async def recv(self, max_cycles):
        """Return the next transferred payload, waiting at most ``max_cycles`` cycles."""
        await wait_cycles(self._clk, lambda: bool(self.items), max_cycles,
                          lambda: f"nothing arrived on {self._port.name} "
                                  f"({self.count} words so far, valid="
                                  f"{self._port.valid.value}, ready={self._port.ready.value})")
        return self.items.popleft()

    async def wait_count(self, count, max_cycles):
        """Wait until ``count`` words have transferred in total."""
        await wait_cycles(self._clk, lambda: self.count >= count, max_cycles,
                          lambda: f"deadlock: {self._port.name} transferred {self.count} of "
                                  f"{count} words (valid={self._port.valid.value}, "
                                  f"ready={self._port.ready.value})")

    async def _run(self):
        port = self._port
        held = None                  # payload offered but not taken last cycle
        while True:
            await RisingEdge(self._clk)
            await ReadOnly()
            self.cycle += 1
            valid = port.valid.value == 1
            if self._check and held is not None:
                if not valid:
                    raise AssertionError(f"stream rule broken on {port.name}: valid dropped "
                                         f"before payload {held:#x} was taken")
                if port.read_payload() != held:
                    raise AssertionError(f"stream rule broken on {port.name}: payload changed "
                                         f"from {held:#x} to {port.read_payload():#x} "
                                         f"before it was taken")
            held = None
            if valid and port.ready.value == 1:
                word = port.read_payload()
                self.count += 1
                self.last_transfer_cycle = self.cycle
                self.items.append(word)
                if self._callback is not None:
                    self._callback(word)
            elif valid and port.payload is not None:
                held = port.read_payload()


class StreamSink(StreamMonitor):
    """Drive ``ready`` of a stream output of the DUT (e.g. ``o_data``) and collect words.

    Parameters
    ----------
    dut, name, clk, callback, check_protocol
        As for :class:`StreamMonitor`.
    pause : see :func:`pause_pattern`
        Backpressure: cycles with ``ready`` low.
    rng : random.Random, optional
    """

    def __init__(self, dut, name, clk, *, pause=None, rng=None, callback=None,
                 check_protocol=True):
        super().__init__(dut, name, clk, callback=callback, check_protocol=check_protocol)
        self._pause = pause_pattern(pause, rng)
        self._port.ready.value = 0
        self._driver = cocotb.start_soon(self._drive())

    def set_pause(self, pause, rng=None):
        """Change the backpressure pattern from the next cycle on."""
        self._pause = pause_pattern(pause, rng)

    async def _drive(self):
        while True:
            await RisingEdge(self._clk)
            self._port.ready.value = 0 if next(self._pause) else 1


class Scoreboard:
    """Compare received items with expected ones, in order.

    Parameters
    ----------
    name : str
        Used in messages.
    """

    def __init__(self, name):
        self.name = name
        self._expected = deque()
        self.matched = 0

    def expect(self, *items):
        """Append items that must arrive, in this order."""
        self._expected.extend(items)

    def receive(self, item):
        """Check one received item against the oldest expected one."""
        if not self._expected:
            raise AssertionError(f"{self.name}: unexpected item {item!r} after "
                                 f"{self.matched} matched (nothing more was expected)")
        want = self._expected.popleft()
        if item != want:
            raise AssertionError(f"{self.name}: item {self.matched} is {item!r}, expected "
                                 f"{want!r} (next expected: {list(self._expected)[:4]!r})")
        self.matched += 1

    @property
    def outstanding(self):
        """Number of expected items not received yet."""
        return len(self._expected)

    def check_done(self):
        """Raise if expected items never arrived."""
        if self._expected:
            raise AssertionError(f"{self.name}: {len(self._expected)} expected items never "
                                 f"arrived after {self.matched} matched; first missing "
                                 f"{list(self._expected)[:4]!r}")
