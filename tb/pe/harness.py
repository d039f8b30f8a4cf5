"""The single-PE cocotb bench: the PE's world played in Python.

:class:`TB` drives ``i_flit`` and sinks ``o_rep``/``o_req`` of one :class:`hw.pe.pe.Pe`:

* **mesh loopback**: OPERAND flits the PE sends to itself come back, in order (one mesh path
  keeps order), after a random delay; flits to another PE are collected in ``remote``;
* **Dbufs**: LOAD/STORE requests are answered by one :class:`sw.models.noc.DbufModel` per
  Dbuf after a random latency, in *any* order (replies from different banks overtake each
  other); the bench checks the request went to the Dbuf that owns its address;
* **MicC**: the image's CONFIG flits addressed to this PE (:func:`tb.host.memories.image_flits`,
  the MicC's order) first, then context IDs to every CTX slot with at most ``window``
  contexts in flight, counting CTX_END messages (and flits) per context ID;
* **counting**: ``o_fire`` pulses per opcode, LOAD/STORE requests (``requests``); the
  ``i_flit.ready`` invariant (always high); with ``stamps`` the cycles of every firing and of
  every ``i_flit`` and ``o_rep`` transfer (microbenchmarks).

Tests configure slots directly with :meth:`TB.insn`, :meth:`TB.reg`, :meth:`TB.preload` and
send tokens with :meth:`TB.operand`.

Every wait is bounded; a timeout says "deadlock" and lists what is pending.
"""

import os
import random
from collections import Counter, deque

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from sw.models.noc import DbufModel
from sw.spec.arch import ArrayParams
from sw.spec.cbuf import word_parts
from sw.spec.isa import Op, encode
from sw.spec.packet import ConfigWhat, Kind, bias, end_count, flit_fields, pack_flit, unpack_flit
from sw.spec.status import PeError
from tb.common.clock import reset
from tb.common.stream import StreamSink, pause_pattern
from tb.host.memories import image_flits

__all__ = ["TB", "params_from_env", "reset_pe", "make_rng", "wait_until_retired"]


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


class TB:
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
    stamps : bool
        Record ``fires`` ``(cycle, "int" | "fp", opcode name)``, ``ins`` and ``outs`` (cycles
        of ``i_flit`` and ``o_rep`` transfers).
    """

    def __init__(self, dut, params, x, y, micc, rng, *, idle=0.0, backpressure=0.0,
                 loop_delay=(1, 6), mem_delay=(2, 30), stamps=False):
        self.dut, self.p, self.x, self.y, self.micc = dut, params, x, y, micc
        self.rng = rng
        self.cycle = 0
        self.dbufs = [DbufModel(params, k) for k in range(params.num_dbufs)]
        self.config = deque()
        self.micc_q = deque()
        self.loop = deque()              # (ready cycle, word), in order
        self.replies = []                # (ready cycle, word), any order
        self.inject = deque()            # words a test sends directly
        self.remote = []                 # OPERAND flits to other PEs: (x, y, slot, op, data)
        self.ends = Counter()
        self.end_log = []
        self.end_flits = 0               # CTX_END flits (each stands for ``count`` ENDs)
        self.max_count = 0
        self.stamps = stamps
        self.fires, self.ins, self.outs = [], [], []
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
        here = (self.x, self.y)
        self.config.extend(f for f in image_flits(image)[0] if unpack_flit(self.p, f)[1] == here)
        for dbuf in self.dbufs:
            dbuf.load(image.segments)
        self.contexts, self.window = image.contexts, image.window
        self.ends_per_context = image.ends_per_context
        self.ctx_slots = sorted(s for (x, y, s), i in image.instructions().items()
                                if i.op is Op.CTX and (x, y) == (self.x, self.y))
        self._start_contexts()

    def send(self, *words):
        """Offer words on ``i_flit`` (after configuration, before everything else)."""
        self.inject.extend(words)

    def _config(self, what, index, slot, data):
        self.send(pack_flit(self.p, Kind.CONFIG, (self.x, self.y), what=what, index=index,
                            slot=slot, data=data))

    def insn(self, slot, insn):
        """Send the CONFIG flits of instruction ``insn`` into ``slot``, part 0 first (the
        MicC's order)."""
        word = encode(insn, self.p)
        for i in range(word_parts(self.p)):
            self._config(ConfigWhat.INSN, i, slot, (word >> (64 * i)) & ((1 << 64) - 1))

    def reg(self, r, value):
        """Send the CONFIG flit setting register ``r``."""
        self._config(ConfigWhat.REG, r, 0, value)

    def preload(self, slot, operand, value):
        """Send a PRELOAD token for ``operand`` of ``slot``."""
        self._config(ConfigWhat.PRELOAD, operand, slot, value)

    def operand(self, slot, operand, data):
        """Return an OPERAND flit for ``operand`` of this PE's ``slot``."""
        return pack_flit(self.p, Kind.OPERAND, (self.x, self.y), slot=slot, operand=operand,
                         data=data & ((1 << 64) - 1))

    def dbuf_bytes(self, d):
        """Return the contents of Dbuf ``d``."""
        return self.dbufs[d].contents()

    # The world ----------------------------------------------------------------------------

    def _start_contexts(self):
        while self.next_ctx < self.contexts and self.next_ctx < self.retired + self.window:
            for s in self.ctx_slots:
                self.micc_q.append(self.operand(s, 0, self.next_ctx))
            self.next_ctx += 1

    def _on_rep(self, word):
        kind, dst, f = flit_fields(self.p, word)
        if kind is Kind.OPERAND:
            if dst == (self.x, self.y):
                delay = self.rng.randint(*self.loop_delay)
                ready = max(self.cycle + delay, self.loop[-1][0] if self.loop else 0)
                self.loop.append((ready, word))
            else:
                self.remote.append((*dst, f["slot"], f["operand"], f["data"]))
        elif kind is Kind.CTX_END:
            assert dst == self.micc, f"CTX_END sent to {dst}, the MicC is at {self.micc}"
            assert f["count"] >= 1, "a CTX_END flit of the PE carries count 0"
            ctx = f["data"] & 0xFFFF_FFFF
            n = end_count(f["count"])      # a flit stands for n END messages
            self.end_flits += 1
            self.max_count = max(self.max_count, f["count"])
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
        kind, got, f = flit_fields(self.p, word)
        assert kind in (Kind.LOAD, Kind.STORE), f"o_req carried a {kind.name} flit"
        self.requests += 1
        addr = f["addr"]
        dbuf, _ = self.p.dbuf_of(addr)
        want = self.p.dbuf_coord(dbuf)
        assert got == want, f"{kind.name} of {addr:#x} went to {got}, its Dbuf is at {want}"
        assert (f["src_x"], f["src_y"]) == (bias(self.x), bias(self.y))
        delay = self.rng.randint(*self.mem_delay)
        self.replies.append((self.cycle + delay, self.dbufs[dbuf].reply(word)))

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
                if self.stamps:
                    self.ins.append(self.cycle)
            if dut.rst.value == 0:
                # o_fire: int_valid (bit 0), int_op (6:1), fp_valid (7), fp_op (13:8), with
                # int_issue 2 also int2_valid (14), int2_op (20:15); the opcodes may be X
                # while their valid bit is low.
                bits = str(fire.value)[::-1]
                if bits[0] == "1":
                    name = Op(int(bits[1:7][::-1], 2)).name
                    self.fired[name] += 1
                    self.fired_int0[name] += 1
                    if self.stamps:
                        self.fires.append((self.cycle, "int", name))
                if bits[7] == "1":
                    name = Op(int(bits[8:14][::-1], 2)).name
                    self.fired[name] += 1
                    if self.stamps:
                        self.fires.append((self.cycle, "fp", name))
                if len(bits) > 14 and bits[14] == "1":      # int2_valid, int2_op (20:15)
                    self.fired[Op(int(bits[15:21][::-1], 2)).name] += 1
                if self.stamps and dut.o_rep__valid.value == 1 and dut.o_rep__ready.value == 1:
                    self.outs.append(self.cycle)

    def stop(self):
        """Stop driving and watching the DUT (before the next test builds a new TB)."""
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
        """Return ``(flags, slot)`` of the PE's error status (flag ``e``: bit ``e``, a
        :class:`sw.spec.status.PeError`)."""
        v = self.dut.o_error.value.to_unsigned()
        return v & ((1 << len(PeError)) - 1), v >> len(PeError)


def make_rng():
    """Return a ``random.Random`` seeded from cocotb's per-test seed."""
    return random.Random(random.getrandbits(64))


async def wait_until_retired(tb, progress, max_cycles, stall):
    """Clock ``tb.dut`` until every context retired and ``tb.busy`` is false, then 40 more.

    Fails with "timeout ... deadlock" and ``tb.pending()`` after ``max_cycles`` cycles, or
    after ``stall`` cycles in which ``progress()`` did not change.
    """
    last, still = None, 0
    for cycle in range(max_cycles):
        await RisingEdge(tb.dut.clk)
        if tb.retired >= tb.contexts and not tb.busy:
            break
        now = progress()
        still = still + 1 if now == last else 0
        last = now
        if still >= stall:
            raise AssertionError(f"timeout: deadlock: nothing moved for {stall} cycles "
                                 f"(cycle {cycle}): {tb.pending()}")
    else:
        raise AssertionError(f"timeout after {max_cycles} cycles: deadlock: {tb.pending()}")
    for _ in range(40):
        await RisingEdge(tb.dut.clk)
