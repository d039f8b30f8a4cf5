"""The golden model: run an assembled image token by token.

Contract (``docs/golden.md``)
-----------------------------
:func:`run_image` executes the *binary* image (every word decoded with :func:`sw.spec.isa.decode`)
under the execution model of ``docs/isa.md``: per-operand FIFOs of ``operand_depth`` matched
in arrival order; an instruction fires when every token operand is present and its PE-local
destinations have room (remote ones are not checked; a remote token that finds its FIFO full
is an :class:`OperandOverflowError`); ``ITER``, ``BSCAN`` and ``BPOS`` emit one token per step,
the first with the firing (a token-count ``ITER`` of count 0 and a ``BPOS`` of no set bit fire
and emit nothing); a ``FACC`` with a count operand takes it at the first step of each
accumulation; loads and stores keep up to ``2**TAG_BITS`` accesses in flight per slot and
forward their replies in issue order; the MicC delivers context IDs to every ``CTX`` slot with
at most ``window`` contexts in flight and retires a context when ``ends_per_context`` END
messages carrying its ID have arrived.

Timing is an event order, not a cycle count: every delivery gets a latency (unit latency, one
step per mesh hop, a Dbuf round trip) plus, when ``seed`` is given, a random extra delay; a
mesh link and a PE-local path stay in order, loads may come back out of order.  Each token
carries a *shadow tag* (context ID and loop indices; not a hardware field): an instruction
whose operands carry different tags raises :class:`ContextOrderError` (PAPER.md Fig. 7).  The
tokens of a data-dependent emitter (``BPOS``, a token-count ``ITER``) carry their context and
the mark ``*`` instead of loop indices: their number depends on the data, so they are checked
for their context only.  A run
that stops with contexts unfinished raises :class:`DeadlockError` with what is waiting where;
``max_events`` bounds a run (:class:`GoldenTimeout`).  All these are
:class:`~sw.spec.errors.FdpuError` s.

A run returns a :class:`RunResult`: the Dbufs (:class:`Memory`) and what the run did
(:class:`sw.models.golden_counters.Counters`).  FC layers run on it through
:mod:`sw.models.golden_fc`.
"""

import heapq
import random
from collections import Counter, deque
from dataclasses import dataclass

from sw.models.golden_counters import Counters
from sw.spec import fp16
from sw.spec.errors import FdpuError
from sw.spec.isa import (Op, Unit, facc_emits, issue_pipe, mcast_selects, token_continues,
                         token_count)
from sw.spec.packet import TAG_BITS

__all__ = ["GoldenError", "ContextOrderError", "OperandOverflowError", "DeadlockError",
           "GoldenTimeout", "MemoryFault", "Memory", "RunResult", "run_image", "bscan", "bpos"]

M32 = 0xFFFF_FFFF
M64 = (1 << 64) - 1
_LAT = {Unit.INT: 2, Unit.FP: 4, Unit.CTRL: 1, Unit.MEM: 1, Unit.NONE: 1}
# What the RTL PE adds to a unit's latency before a consumer can fire (docs/pe.md, measured
# by scripts/bench_pe.py): dispatch, operand write and the consumer's pick, 3 cycles on the
# same PE (INT -> INT 5 cycles fire to fire); 7 + hops to another PE (one hop: 10).
_LOCAL = 3
_REMOTE = 7
_BCAST = 0x0001_0001_0001_0001
_FACC_INIT = 0x8000_8000_8000_8000


class GoldenError(FdpuError):
    """A run of the golden model detected a fault (what the hardware flags as an error)."""


class ContextOrderError(GoldenError):
    """An instruction consumed operands of different contexts or iterations."""


class OperandOverflowError(GoldenError):
    """A token arrived at a full operand FIFO."""


class DeadlockError(GoldenError):
    """The run stopped with contexts unfinished, or left tokens behind."""


class GoldenTimeout(GoldenError):
    """The run exceeded its event bound."""


class MemoryFault(GoldenError):
    """A load or store outside every Dbuf, or misaligned."""


class Memory:
    """The Dbufs: a flat byte space, allocated per Dbuf on first touch."""

    def __init__(self, params, segments=()):
        self.params = params
        self.bufs = {}
        for addr, data in dict(segments).items():
            self.write(addr, data)

    def _buf(self, d):
        if d not in self.bufs:
            self.bufs[d] = bytearray(self.params.dbuf_bytes)
        return self.bufs[d]

    def check(self, addr, n, what):
        """Raise :class:`MemoryFault` unless ``n`` bytes at ``addr`` are a legal access."""
        if not 0 <= addr <= self.params.memory_bytes - n:
            raise MemoryFault(f"{what}: address {addr:#x} is outside every Dbuf "
                              f"(0..{self.params.memory_bytes - 1:#x})")
        if n in (2, 4, 8) and addr % n:
            raise MemoryFault(f"{what}: address {addr:#x} is not aligned to {n} bytes")

    def read(self, addr, n):
        """Return ``n`` bytes at global address ``addr``."""
        d, off = divmod(addr, self.params.dbuf_bytes)
        return bytes(self._buf(d)[off:off + n])

    def write(self, addr, data):
        """Write ``data`` at global address ``addr`` (within one Dbuf)."""
        d, off = divmod(addr, self.params.dbuf_bytes)
        self._buf(d)[off:off + len(data)] = data


@dataclass
class RunResult:
    """The memory after a run, the counters, the last event time and the events handled.

    ``time`` is an *estimate* of cycles (issue width, unit latencies, hops and Dbuf ports
    modelled; mesh link contention not): see ``docs/golden.md``.
    """
    memory: Memory
    counters: Counters
    time: int
    events: int


class _Slot:
    __slots__ = ("key", "insn", "ops", "fifos", "reserved", "local", "hops", "iter", "acc",
                 "result", "count", "left", "memq", "ends", "producers", "last", "retry")

    def __init__(self, key, insn):
        self.key = key
        self.insn = insn
        self.ops = insn.token_operands
        self.fifos = [deque(), deque(), deque()]
        self.reserved = [0, 0, 0]
        self.iter = None
        self.acc = None
        self.result = 0          # a FACC's last step's sum (the PE's state memory: 0 at first)
        self.count = 0
        self.left = 0            # a count-operand FACC: steps left in this accumulation
        self.memq = deque()
        self.ends = 0
        self.producers = set()
        self.last = {}
        self.retry = -1


def _s32(v):
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def _int_op(op, a, b):
    a &= M32
    b &= M32
    if op is Op.ADD:
        return (a + b) & M32
    if op is Op.SUB:
        return (a - b) & M32
    if op is Op.MUL:
        return (a * b) & M32
    if op is Op.AND:
        return a & b
    if op is Op.OR:
        return a | b
    if op is Op.XOR:
        return a ^ b
    if op is Op.SHL:
        return (a << (b & 31)) & M32
    if op is Op.SHR:
        return a >> (b & 31)
    if op is Op.SRA:
        return (_s32(a) >> (b & 31)) & M32
    if op is Op.EQ:
        return int(a == b)
    if op is Op.LT:
        return int(_s32(a) < _s32(b))
    if op is Op.LTU:
        return int(a < b)
    raise AssertionError(op)


def bscan(mask, base, count):
    """Return the ``count`` tokens of one ``BSCAN mask, base`` firing (``docs/isa.md``).

    Token ``j`` is ``base + 2 * popcount(mask & ((2 << j) - 1))`` (32-bit wrap) when bit ``j``
    of ``mask`` (low 32 bits) is set, else 0.  With an FD-CSR row's ``colidx`` as ``mask`` and
    ``base`` = item base + 2 x ``rowoff``, a stored weight's token is its value's address
    minus the value load's offset, plus 2 (never 0), and a zero weight's is 0.
    """
    mask &= M32
    out = []
    seen = 0
    for j in range(count):
        if mask >> j & 1:
            seen += 1
            out.append((base + 2 * seen) & M32)
        else:
            out.append(0)
    return out


def bpos(mask, base, count, step):
    """Return the tokens of one ``BPOS mask, base`` firing (``docs/isa.md``).

    One token ``base + j * step`` (32-bit wrap) per set bit ``j < count`` of ``mask`` (low 32
    bits), in increasing ``j``; none for a mask without such a bit.
    """
    return [(base + j * step) & M32 for j in range(count) if mask >> j & 1]


#: The shadow-tag mark of a data-dependent emitter's tokens (module doc).
VARYING = "*"

_PIPE_NAMES = {"fp": "fp", "p0": "mem", "p2": "int"}


def _pipe(insn):
    # The estimate's issue pipe of insn (docs/golden.md): the RTL's (sw.spec.isa.issue_pipe), pipe 0
    # named "mem", pipe 2 "int"; with int_issue = 1 "mem" folds into "int" (_Machine._issue).
    return _PIPE_NAMES[issue_pipe(insn.op, insn.pipe0)]


def _fp_imm(imm):
    return (imm & 0xFFFF) * _BCAST


class _Machine:
    def __init__(self, image, seed, jitter, max_events):
        self.image = image
        self.p = image.params
        self.rng = random.Random(seed) if seed is not None else None
        self.jitter = jitter
        self.max_events = max_events
        self.mem = Memory(self.p, image.segments)
        self.c = Counters()
        self.events = []
        self.seq = 0
        self.now = 0
        self.slots = {}
        for key, insn in image.instructions().items():
            self.slots[key] = _Slot(key, insn)
        for key, st in self.slots.items():
            st.local = [(d.x, d.y) == key[:2] for d in st.insn.dests]
            st.hops = [len(self.p.route(key[:2], (d.x, d.y))) for d in st.insn.dests]
            for d, loc in zip(st.insn.dests, st.local):
                if loc:
                    self.slots[(d.x, d.y, d.slot)].producers.add(key)
        self.preloaded = Counter()
        for x, y, s, o, v in image.preloads:
            self.slots[(x, y, s)].fifos[o].append((v, None))
            self.preloaded[(x, y, s, o)] += 1
        self.ctx_slots = sorted(k for k, st in self.slots.items() if st.insn.op is Op.CTX)
        self.next_ctx = 0
        self.retired = 0
        self.end_counts = Counter()
        self.pipe_free = {}
        self.dbuf_free = {}

    # Scheduling -----------------------------------------------------------------------------

    def _push(self, t, kind, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, args))

    def _issue(self, st, pipe):
        # Like the RTL PE, each pipe issues one instruction (or ITER/BSCAN token) per cycle:
        # "fp", "int" (INT/CTRL with BSCAN tokens, and MEM and ITER with int_issue = 1) and,
        # with int_issue = 2, "mem" (the RTL's pipe 0: loads, stores and ITER tokens, the
        # address streams, and pipe0-hinted INT/CTRL instructions).
        # pipe_free holds (cycle, issues in that cycle) per pipe.
        if pipe == "mem" and self.p.int_issue == 1:
            pipe = "int"
        key = (st.key[0], st.key[1], pipe)
        width = 1
        cycle, used = self.pipe_free.get(key, (-1, 0))
        if cycle == self.now and used >= width:
            free = self.now + 1
            if st.retry < free:
                st.retry = free
                self._push(free, "iter", st.key)
            return False
        self.pipe_free[key] = (self.now, used + 1 if cycle == self.now else 1)
        return True

    def _rand(self, n):
        return self.rng.randint(0, n) if self.rng and n > 0 else 0

    def _send(self, st, i, value, tag, latency):
        d = st.insn.dests[i]
        dkey = (d.x, d.y, d.slot)
        if st.local[i]:
            self.slots[dkey].reserved[d.operand] += 1
            self.c.tokens_local += 1
            t = self.now + latency + _LOCAL + self._rand(self.jitter)
        else:
            self.c.tokens_mesh += 1
            self.c.token_hops += st.hops[i]
            t = self.now + latency + _REMOTE + st.hops[i] + self._rand(self.jitter)
        # One source to one destination is one path: it stays in order.
        t = max(t, st.last.get(i, 0))
        st.last[i] = t
        self._push(t, "tok", dkey, d.operand, value, tag, st.local[i])

    def _start_contexts(self):
        while self.next_ctx < self.image.contexts and \
                self.next_ctx < self.retired + self.image.window:
            ctx = self.next_ctx
            self.next_ctx += 1
            for key in self.ctx_slots:
                self.c.ctx_starts += 1
                st = self.slots[key]
                t = max(self.now + 1 + self._rand(self.jitter), st.last.get("micc", 0))
                st.last["micc"] = t
                self._push(t, "tok", key, 0, self.image.ctx_base + ctx, (ctx,), False)

    def _end(self, st, delay):
        ctx = st.ends
        st.ends += 1
        self.c.ctx_ends += 1
        self._push(self.now + delay + 1 + self._rand(self.jitter), "end", ctx, st.key)

    # Running --------------------------------------------------------------------------------

    def run(self):
        self._start_contexts()
        handled = 0
        done_at = 0 if self.retired >= self.image.contexts else None
        # Run until no event is left (tokens still in flight when the last context retires,
        # e.g. a final feedback token, must land before the leftover check).
        while self.events:
            t, _, kind, args = heapq.heappop(self.events)
            self.now = t
            handled += 1
            if self.max_events and handled > self.max_events:
                raise GoldenTimeout(f"timeout: {handled - 1} events without finishing "
                                    f"({self.retired} of {self.image.contexts} contexts "
                                    f"retired); {self._stuck()}")
            if kind == "tok":
                self._token(*args)
            elif kind == "mem":
                key, entry, value = args
                entry[1] = value
                self._try(self.slots[key])
            elif kind == "iter":
                st = self.slots[args[0]]
                st.retry = -1       # no retry pending any more: a later wake must push one
                self._try(st)
            elif kind == "end":
                self._ctx_end(*args)
                if done_at is None and self.retired >= self.image.contexts:
                    done_at = self.now
        if self.retired < self.image.contexts:
            raise DeadlockError(f"deadlock: no event left with {self.retired} of "
                                f"{self.image.contexts} contexts retired; {self._stuck()}")
        self._check_clean()
        return RunResult(self.mem, self.c, done_at, handled)

    def _token(self, key, operand, value, tag, local):
        st = self.slots.get(key)
        if st is None:
            raise GoldenError(f"a token reached unconfigured slot ({key[0]},{key[1]}).{key[2]}")
        fifo = st.fifos[operand]
        if local:
            st.reserved[operand] -= 1
        elif len(fifo) >= self.p.operand_depth:
            raise OperandOverflowError(
                f"operand FIFO overflow at ({key[0]},{key[1]}).{key[2]} {st.insn.op.name} "
                f"operand {operand}: {len(fifo)} tokens already waiting (operand_depth "
                f"{self.p.operand_depth}); the flow-control rule of docs/isa.md is broken")
        fifo.append((value, tag))
        self._try(st)

    def _ctx_end(self, ctx, key):
        if ctx >= self.image.contexts:
            raise GoldenError(f"slot ({key[0]},{key[1]}).{key[2]} sent an END for context "
                              f"{ctx}, but only {self.image.contexts} contexts run")
        self.end_counts[ctx] += 1
        while self.end_counts[self.retired] >= self.image.ends_per_context and \
                self.retired < self.image.contexts:
            self.retired += 1
        self._start_contexts()

    def _room(self, st, indices):
        depth = self.p.operand_depth
        for i in indices:
            if st.local[i]:
                d = st.insn.dests[i]
                tgt = self.slots[(d.x, d.y, d.slot)]
                if len(tgt.fifos[d.operand]) + tgt.reserved[d.operand] >= depth:
                    return False
        return True

    def _wake(self, st):
        for pk in sorted(st.producers):
            pst = self.slots[pk]
            if pst.retry < self.now:
                pst.retry = self.now
                self._push(self.now, "iter", pk)

    def _try(self, st):
        insn = st.insn
        op = insn.op
        ndest = range(len(insn.dests))
        while True:
            if st.memq:
                entry = st.memq[0]
                if entry[1] is not None and self._room(st, ndest):
                    st.memq.popleft()
                    value = entry[1]
                    for i in ndest:
                        self._send(st, i, value, entry[2], 1)
                    if insn.end and op.is_store:
                        self._end(st, 1)
                    continue
            if st.iter is not None:
                if not self._room(st, ndest) or not self._issue(st, st.iter[4]):
                    return
                self._emit(st)
                if st.iter is not None:
                    self._push(self.now + 1, "iter", st.key)
                    return
                continue
            if not self._fire(st):
                return

    def _emit(self, st):
        # One token of an ITER/BSCAN/BPOS firing: token i, tagged with the loop index i (a
        # data-dependent emitter's tag is fixed: its context and the VARYING mark).
        emit, total, i, tag, pipe = st.iter
        value = emit(i)
        if tag is not None and tag[-1] != VARYING:
            tag = tag + (i,)
        for j in range(len(st.insn.dests)):
            self._send(st, j, value, tag, 1)
        i += 1
        st.iter = None if i == total else (emit, total, i, st.iter[3], pipe)

    def _start_emitter(self, st, tokens, tag, pipe, varying):
        # An emitter's firing: its first token now, the others one per cycle; none at all
        # (a token-count ITER of count 0, a BPOS of no set bit) is a firing that sends nothing.
        if not tokens:
            return
        if varying and tag is not None:
            tag = tag[:1] + (VARYING,)
        st.iter = (tokens.__getitem__, len(tokens), 0, tag, pipe)
        self._emit(st)

    def _needed(self, st):
        # The token operands this firing needs: a count-operand FACC takes operand 2 only at
        # the first step of an accumulation.
        if st.insn.op is Op.FACC and st.insn.nsrc == 3 and st.left:
            return st.ops[:2]
        return st.ops

    def _operand(self, st, i, popped):
        insn = st.insn
        if insn.regmask >> i & 1:
            return int(self.image.regs[st.key[1], st.key[0], insn.regs[i]])
        if i >= insn.nsrc:
            return _fp_imm(insn.imm) if insn.op.unit is Unit.FP else insn.imm & M32
        return popped[i][0]

    def _fire(self, st):
        insn, op = st.insn, st.insn.op
        ops = self._needed(st)
        for i in ops:
            if not st.fifos[i]:
                return False
        if op.is_load or op.is_store:
            if len(st.memq) >= 1 << TAG_BITS:
                return False
        if op is Op.SWITCH:
            cond = self._operand(st, 1, {1: st.fifos[1][0]} if 1 in st.ops else {})
            taken = (cond & M32) != 0
            ndest = range(insn.ntrue) if taken else range(insn.ntrue, len(insn.dests))
        elif op is Op.MCAST:
            mask = self._operand(st, 1, {1: st.fifos[1][0]} if 1 in st.ops else {})
            ndest = mcast_selects(insn, mask)
        elif op is Op.FACC:
            if insn.nsrc == 3:
                left = st.left or max(1, token_count(st.fifos[2][0][0]))
                last = left == 1
            else:
                last = facc_emits(insn.count, insn.step, st.count + 1)
            ndest = range(len(insn.dests)) if last else ()
        elif op.is_load or op.is_store:
            ndest = ()
        else:
            # ITER and BSCAN included: the firing's issue emits their first token.
            ndest = range(len(insn.dests))
        if not self._room(st, ndest):
            return False
        pipe = _pipe(insn)
        if not self._issue(st, pipe):
            return False
        popped = {i: st.fifos[i].popleft() for i in ops}
        self._wake(st)
        tags = [popped[i][1] for i in ops if not (op is Op.SWITCH and i == 2)]
        known = [t for t in tags if t is not None]
        if any(t[-1] == VARYING for t in known):
            known = [t[:1] for t in known]
        if any(_loop_free(t) != _loop_free(known[0]) for t in known):
            x, y, s = st.key
            detail = ", ".join(f"operand {i}: {self._tagtext(popped[i][1])}" for i in ops)
            raise ContextOrderError(
                f"context-order error at ({x},{y}).{s} {op.name}: it consumed operands of "
                f"different contexts/iterations ({detail}); a SWITCH whose branches rejoin "
                f"needs its feedback edge (PAPER.md section 4)")
        tag = known[0] if known else None
        self.c.ops[op.name] += 1
        a = lambda i: self._operand(st, i, popped)  # noqa: E731
        lat = _LAT[op.unit]
        if op is Op.LDHBZ and a(0) & M32 == 0:
            # address 0 gives +0.0 without a memory access, in issue order.
            entry = [None, None, tag]
            st.memq.append(entry)
            self._push(self.now + 1 + self._rand(self.jitter), "mem", st.key, entry, 0)
            return True
        if op.is_load or op.is_store:
            addr = (a(0) + insn.imm) & M32
            n = op.access_bytes
            self.mem.check(addr, n, f"{op.name} at ({st.key[0]},{st.key[1]}).{st.key[2]}")
            d = self.p.dbuf_of(addr)[0]
            hops = len(self.p.route(st.key[:2], self.p.dbuf_coord(d)))
            self.c.mem_packets += 2
            self.c.mem_hops += 2 * hops
            if op.is_load:
                raw = int.from_bytes(self.mem.read(addr, n), "little")
                value = raw * _BCAST if op in (Op.LDHB, Op.LDHBZ) else raw
                self.c.bytes_read += n
            else:
                self.mem.write(addr, (a(1) & ((1 << (8 * n)) - 1)).to_bytes(n, "little"))
                self.c.bytes_written += n
                value = 0
            entry = [None, None, tag]
            st.memq.append(entry)
            # One access per cycle per Dbuf; the reply comes back over the same hop count.
            serve = max(self.now + hops, self.dbuf_free.get(d, 0))
            self.dbuf_free[d] = serve + 1
            delay = serve + 1 + hops + self._rand(4 * self.jitter)
            self._push(delay, "mem", st.key, entry, value)
            return True
        if op is Op.ITER:
            step, start = insn.step, a(0) & M32
            count = insn.count or token_count(a(0))
            self._start_emitter(st, [(start + i * step) & M32 for i in range(count)], tag,
                                pipe, varying=not insn.count)
            return True
        if op is Op.BSCAN:
            self._start_emitter(st, bscan(a(0), a(1), insn.count), tag, pipe, varying=False)
            return True
        if op is Op.BPOS:
            self._start_emitter(st, bpos(a(0), a(1), insn.count, insn.step), tag, pipe,
                                varying=True)
            return True
        if op is Op.SWITCH:
            value = a(0)
        elif op is Op.MCAST:
            # Each destination gets the tokens its mask bits select: a data-dependent stream.
            value = a(0)
            tag = None if tag is None else tag[:1] + (VARYING,)
        elif op in (Op.MOV, Op.CTX):
            value = a(0)
        elif op is Op.IMM:
            value = insn.imm & M32
        elif op is Op.FIMM:
            value = _fp_imm(insn.imm)
        elif op is Op.SCAN:
            st.acc = ((st.acc or 0) + a(1)) & M32
            value = (a(0) + st.acc) & M32
            st.count += 1
            if st.count == insn.count:
                st.acc, st.count = 0, 0
        elif op is Op.FACC:
            acc = _FACC_INIT if st.acc is None else st.acc
            if insn.nsrc == 3 and not st.left and token_continues(a(2)):
                acc = st.result                     # the sum goes on from the last run's
            st.acc = st.result = int(fp16.simd4_fma(a(0), a(1), acc))
            if insn.nsrc == 3:
                if not st.left:
                    st.left = token_count(a(2))
                    if not st.left:
                        x, y, s = st.key
                        raise GoldenError(f"FACC at ({x},{y}).{s}: its count operand gives a "
                                          f"count of 0 (the PE's BAD_COUNT error)")
                st.left -= 1
                if st.left:
                    return True
            else:
                st.count += 1
                if not facc_emits(insn.count, insn.step, st.count):
                    return True
            value = st.acc
            if insn.nsrc == 3 or st.count == insn.count:
                st.acc, st.count = None, 0          # else a partial result: the sum goes on
            if tag is not None and insn.step and len(tag) > 1 and tag[-1] != VARYING:
                # A span's results, one per 2**span steps: the loop index they fold, shifted.
                tag = tag[:-1] + (tag[-1] >> insn.step,)
            elif tag is not None:
                tag = tag[:1]
        elif op is Op.FADD:
            value = int(fp16.simd4_add(a(0), a(1)))
        elif op is Op.FSUB:
            value = int(fp16.simd4_sub(a(0), a(1)))
        elif op is Op.FMUL:
            value = int(fp16.simd4_mul(a(0), a(1)))
        elif op is Op.FMADD:
            value = int(fp16.simd4_fma(a(0), a(1), a(2)))
        elif op is Op.FMAX:
            value = int(fp16.simd4_max(a(0), a(1)))
        else:
            value = _int_op(op, a(0), a(1))
        for i in ndest:
            self._send(st, i, value, tag, lat)
        if insn.end:
            self._end(st, lat)
        return True

    @staticmethod
    def _tagtext(tag):
        if tag is None:
            return "preload"
        return f"context {tag[0]}" + (f" iteration {list(tag[1:])}" if len(tag) > 1 else "")

    def _stuck(self):
        waiting = []
        for key in sorted(self.slots):
            st = self.slots[key]
            have = [len(f) for f in st.fifos]
            pre = [self.preloaded[(*key, o)] for o in range(3)]
            if any(h > p for h, p in zip(have, pre)) or st.memq or st.iter:
                miss = [i for i in self._needed(st) if not st.fifos[i]]
                waiting.append(f"({key[0]},{key[1]}).{key[2]} {st.insn.op.name} holds "
                               f"{have} tokens" + (f", waits for operand {miss}" if miss
                                                   else ", waits for room downstream"))
            if len(waiting) >= 8:
                waiting.append("...")
                break
        return "stuck: " + ("; ".join(waiting) if waiting else "nothing holds tokens")

    def _check_clean(self):
        for key, st in self.slots.items():
            for o in range(3):
                if len(st.fifos[o]) != self.preloaded[(*key, o)]:
                    raise DeadlockError(
                        f"run finished with {len(st.fifos[o])} tokens left at "
                        f"({key[0]},{key[1]}).{key[2]} {st.insn.op.name} operand {o} "
                        f"(expected {self.preloaded[(*key, o)]}); {self._stuck()}")


def _loop_free(tag):
    """Return ``tag`` without its trailing loop indices of 0: a FACC with a span
    (:func:`sw.spec.isa.facc_imm`) tags its ``j``-th result of a context ``j`` (the loop index
    it folds, shifted), so a context's only result, index 0, meets a token of the context's
    own, which has none."""
    while len(tag) > 1 and tag[-1] == 0:
        tag = tag[:-1]
    return tag


def run_image(image, seed=None, jitter=4, max_events=50_000_000):
    """Run ``image`` token by token and return a :class:`RunResult`.

    Parameters
    ----------
    image : sw.compiler.image.Image
        A checked image.
    seed : int, optional
        Seed of the delivery-order randomizer; ``None`` gives fixed latencies.
    jitter : int
        Largest random extra delay of a delivery (a Dbuf reply gets up to 4x that).
    max_events : int
        Event bound; exceeding it raises :class:`GoldenTimeout`.
    """
    return _Machine(image, seed, jitter, max_events).run()
