"""The single-PE cocotb bench: the PE's world played in Python.

:class:`PeWorld` drives ``i_flit`` and sinks ``o_rep``/``o_req`` of one :class:`hw.pe.pe.Pe`:

* **mesh loopback**: OPERAND flits the PE sends to itself come back, in order (one mesh path
  keeps order), after a random delay; flits to another PE are collected in ``remote``;
* **Dbufs**: LOAD/STORE requests are executed on a :class:`sw.models.golden.Memory` and answered
  after a random latency, in *any* order (replies from different banks overtake each other); the
  bench checks the request went to the Dbuf that owns its address;
* **MicC**: CONFIG flits of an image first, then context IDs to every CTX slot with at most
  ``window`` contexts in flight, counting CTX_END messages per context ID;
* **counting**: ``o_fire`` pulses per opcode, LOAD/STORE requests (``requests``); the
  ``i_flit.ready`` invariant (always high).

Every wait is bounded; a timeout says "deadlock" and lists what is pending.
"""

import os
import random
from collections import Counter, deque

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from sw.models.golden import Memory
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op
from sw.spec.packet import Kind, bias, end_count
from tb.common.clock import reset
from tb.common.stream import StreamSink, pause_pattern
from tb.pe import flits

__all__ = ["PeWorld", "params_from_env", "reset_pe"]


def params_from_env(full):
    """Return ``(ArrayParams, x, y, micc)`` from the harness' full parameter dict.

    A PE built with ``x = y = -1`` takes its coordinate on ``i_coord``: the bench drives
    ``FDPU_PE_COORD`` (``"x,y"``, default ``"0,0"``) there.
    """
    p = ArrayParams(rows=full["rows"], cols=full["cols"], slots=full["slots"],
                    operand_depth=full["operand_depth"], regs=full["regs"],
                    dbuf_bytes=full["dbuf_bytes"], int_issue=full.get("int_issue", 1))
    x, y = full["x"], full["y"]
    if x < 0:
        x, y = (int(v) for v in os.environ.get("FDPU_PE_COORD", "0,0").split(","))
    return p, x, y, (full["micc_x"], full["micc_y"])


async def reset_pe(dut):
    """Reset the PE with its input idle (an undriven ``i_flit.valid`` is X on Icarus and
    would reach the first cycle after reset)."""
    dut.i_flit__valid.value = 0
    await reset(dut.clk, dut.rst)


class PeWorld:
    """Mesh, Dbufs and MicC around one PE (see the module docstring).

    Parameters
    ----------
    dut : cocotb handle of the ``pe`` top
    params, x, y, micc : the PE's configuration
    rng : random.Random
    idle : float
        Probability that the input offers nothing in a cycle.
    backpressure : float
        Probability that ``o_rep``/``o_req`` are not ready in a cycle.
    loop_delay, mem_delay : (int, int)
        Ranges of the loopback and Dbuf latencies in cycles.
    """

    def __init__(self, dut, params, x, y, micc, rng, *, idle=0.0, backpressure=0.0,
                 loop_delay=(1, 6), mem_delay=(2, 30)):
        self.dut, self.p, self.x, self.y, self.micc = dut, params, x, y, micc
        self.rng = rng
        self.cycle = 0
        self.memory = Memory(params)
        self.config = deque()
        self.micc_q = deque()
        self.loop = deque()              # (ready cycle, word), in order
        self.replies = []                # (ready cycle, word), any order
        self.inject = deque()            # words a test sends directly
        self.remote = []                 # OPERAND flits to other PEs: (x, y, slot, op, data)
        self.ends = Counter()
        self.end_log = []
        self.fired = Counter()
        self.fired_int0 = Counter()     # the firings of INT pipe 0, per opcode
        self.requests = 0
        self.in_count = 0
        self.loop_delay, self.mem_delay = loop_delay, mem_delay
        self._idle = pause_pattern(idle, rng)
        self.contexts = 0
        self.window = 1
        self.ends_per_context = 1
        self.ctx_slots = []
        self.next_ctx = 0
        self.retired = 0
        self.rep = StreamSink(dut, "o_rep", dut.clk, pause=backpressure or None, rng=rng,
                              callback=self._on_rep)
        self.req = StreamSink(dut, "o_req", dut.clk, pause=backpressure or None, rng=rng,
                              callback=self._on_req)
        dut.i_flit__valid.value = 0
        coord = getattr(dut, "i_coord", None)
        if coord is not None:          # x in the low bits (hw.pe.layouts.coord_layout)
            coord.value = x | y << max(1, (params.cols - 1).bit_length())
        self._task = cocotb.start_soon(self._run())

    # Loading ------------------------------------------------------------------------------

    def load_image(self, image):
        """Queue the image's configuration and memory; set up the MicC for its contexts."""
        self.config.extend(flits.config_flits(image, self.x, self.y))
        for addr, data in image.segments.items():
            self.memory.write(addr, data)
        self.contexts, self.window = image.contexts, image.window
        self.ends_per_context = image.ends_per_context
        self.ctx_slots = sorted(s for (x, y, s), i in image.instructions().items()
                                if i.op is Op.CTX and (x, y) == (self.x, self.y))
        self._start_contexts()

    def send(self, *words):
        """Offer words on ``i_flit`` (after configuration, before everything else)."""
        self.inject.extend(words)

    # The world ----------------------------------------------------------------------------

    def _start_contexts(self):
        while self.next_ctx < self.contexts and self.next_ctx < self.retired + self.window:
            for s in self.ctx_slots:
                self.micc_q.append(flits.operand(self.p, self.x, self.y, s, 0, self.next_ctx))
            self.next_ctx += 1

    def _on_rep(self, word):
        kind, f = flits.unpack(word, self.p)
        if kind is Kind.OPERAND:
            dst = flits.coord(f["dst_x"], f["dst_y"])
            if dst == (self.x, self.y):
                delay = self.rng.randint(*self.loop_delay)
                ready = max(self.cycle + delay, self.loop[-1][0] if self.loop else 0)
                self.loop.append((ready, word))
            else:
                self.remote.append((*dst, f["slot"], f["operand"], f["data"]))
        elif kind is Kind.CTX_END:
            dst = flits.coord(f["dst_x"], f["dst_y"])
            assert dst == self.micc, f"CTX_END sent to {dst}, the MicC is at {self.micc}"
            ctx = f["data"] & 0xFFFF_FFFF
            n = end_count(f["count"])      # ISA v1.2: a flit stands for n END messages
            self.end_log.extend([ctx] * n)
            assert ctx < max(self.contexts, 1), f"CTX_END for context {ctx} of {self.contexts}"
            self.ends[ctx] += n
            while self.retired < self.contexts and \
                    self.ends[self.retired] >= self.ends_per_context:
                self.retired += 1
            self._start_contexts()
        else:
            raise AssertionError(f"o_rep carried a {kind.name} flit: only OPERAND and CTX_END "
                                 f"belong on the reply network")

    def _on_req(self, word):
        kind, f = flits.unpack(word, self.p)
        assert kind in (Kind.LOAD, Kind.STORE), f"o_req carried a {kind.name} flit"
        self.requests += 1
        addr, n = f["addr"], 1 << f["size"]
        dbuf, _ = self.p.dbuf_of(addr)
        want = self.p.dbuf_coord(dbuf)
        got = flits.coord(f["dst_x"], f["dst_y"])
        assert got == want, f"{kind.name} of {addr:#x} went to {got}, its Dbuf is at {want}"
        assert (f["src_x"], f["src_y"]) == (bias(self.x), bias(self.y))
        err = 0
        if addr % n:
            err, data = 1, 0
        elif kind is Kind.LOAD:
            data = int.from_bytes(self.memory.read(addr, n), "little")
            if f["bcast"]:
                data *= flits.BCAST
        else:
            self.memory.write(addr, (f["data"] & ((1 << (8 * n)) - 1)).to_bytes(n, "little"))
            data = 0
        delay = self.rng.randint(*self.mem_delay)
        self.replies.append((self.cycle + delay, flits.reply(self.p, f, data, err)))

    def _next_word(self):
        if self.config:
            return self.config.popleft()
        if self.inject:
            return self.inject.popleft()
        ready = []
        if self.micc_q:
            ready.append("micc")
        if self.loop and self.loop[0][0] <= self.cycle:
            ready.append("loop")
        due = [i for i, (t, _) in enumerate(self.replies) if t <= self.cycle]
        if due:
            ready.append("reply")
        if not ready:
            return None
        pick = self.rng.choice(ready)
        if pick == "micc":
            return self.micc_q.popleft()
        if pick == "loop":
            return self.loop.popleft()[1]
        return self.replies.pop(self.rng.choice(due))[1]

    async def _run(self):
        dut = self.dut
        fire = dut.o_fire
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            word = None
            if dut.rst.value == 0 and not next(self._idle):
                word = self._next_word()
            dut.i_flit__valid.value = word is not None
            if word is not None:
                dut.i_flit__payload.value = word
            await ReadOnly()
            if word is not None:
                self.in_count += 1
                assert dut.i_flit__ready.value == 1, \
                    "i_flit.ready dropped: the PE made the mesh wait (DESIGN.md invariant 2)"
            if dut.rst.value == 0:
                # o_fire: int_valid (bit 0), int_op (6:1), fp_valid (7), fp_op (13:8), with
                # int_issue 2 also int2_valid (14), int2_op (20:15); the opcodes may be X
                # while their valid bit is low.
                bits = str(fire.value)[::-1]
                if bits[0] == "1":
                    name = Op(int(bits[1:7][::-1], 2)).name
                    self.fired[name] += 1
                    self.fired_int0[name] += 1
                if bits[7] == "1":
                    self.fired[Op(int(bits[8:14][::-1], 2)).name] += 1
                if len(bits) > 14 and bits[14] == "1":      # int2_valid, int2_op (20:15)
                    self.fired[Op(int(bits[15:21][::-1], 2)).name] += 1

    def stop(self):
        """Stop driving and watching the DUT (before the next test builds a new world)."""
        for task in (self._task, self.rep._task, self.rep._driver, self.req._task,
                     self.req._driver):
            task.cancel()
        self.dut.i_flit__valid.value = 0

    # Status -------------------------------------------------------------------------------

    @property
    def busy(self):
        """Whether anything is still on its way to the PE."""
        return bool(self.config or self.inject or self.micc_q or self.loop or self.replies)

    def pending(self):
        """Describe what is pending, for timeout messages."""
        return (f"{self.retired} of {self.contexts} contexts retired (ends {dict(self.ends)}), "
                f"{len(self.config)} config, {len(self.micc_q)} MicC, {len(self.loop)} "
                f"loopback and {len(self.replies)} reply flits queued, fired "
                f"{dict(self.fired)}, error flags {self.dut.o_error.value}")

    def _progress(self):
        return (sum(self.fired.values()), self.rep.count, self.req.count, self.in_count)

    async def wait_retired(self, max_cycles, stall=2000):
        """Wait until every context has retired and nothing is in flight, then a few cycles.

        Fails ("timeout ... deadlock") after ``max_cycles``, or after ``stall`` cycles in which
        nothing fired and no flit moved.
        """
        await wait_until_retired(self, self._progress, max_cycles, stall)
        assert not self.busy, f"flits after the last context: {self.pending()}"

    async def wait_quiet(self, cycles):
        """Run ``cycles`` cycles (for error tests, where nothing finishes)."""
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    def error(self):
        """Return ``(flags, slot)`` of the PE's error status."""
        v = self.dut.o_error.value.to_unsigned()
        return v & 0xF, v >> 4


def make_rng():
    """Return a ``random.Random`` seeded from cocotb's per-test seed."""
    return random.Random(random.getrandbits(64))


async def wait_until_retired(world, progress, max_cycles, stall):
    """Clock ``world.dut`` until every context retired and ``world.busy`` is false, then 40 more.

    Fails with "timeout ... deadlock" and ``world.pending()`` after ``max_cycles`` cycles, or
    after ``stall`` cycles in which ``progress()`` did not change.
    """
    last, still = None, 0
    for cycle in range(max_cycles):
        await RisingEdge(world.dut.clk)
        if world.retired >= world.contexts and not world.busy:
            break
        now = progress()
        still = still + 1 if now == last else 0
        last = now
        if still >= stall:
            raise AssertionError(f"timeout: deadlock: nothing moved for {stall} cycles "
                                 f"(cycle {cycle}): {world.pending()}")
    else:
        raise AssertionError(f"timeout after {max_cycles} cycles: deadlock: {world.pending()}")
    for _ in range(40):
        await RisingEdge(world.dut.clk)
