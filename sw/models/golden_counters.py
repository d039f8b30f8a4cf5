"""What a golden run did: its counters, and the same counters counted without running.

Contract (``docs/golden.md``)
-----------------------------
:class:`Counters`: firings per opcode, operand tokens delivered PE-locally and over the mesh
(with hops from :meth:`~sw.spec.arch.ArrayParams.route`), memory packets (requests and
replies) with their hops, bytes read and written, context starts and ends.  Every
:func:`sw.models.golden.run_image` counts them.

:func:`program_counters` derives them from the decoded program by propagating token counts
(the vectorized path of :mod:`sw.models.golden_fc`); for the graphs it supports it gives what
the interpreter counts (``tests/test_golden.py``).
"""

from collections import Counter
from dataclasses import dataclass, field

from sw.spec.errors import FdpuError
from sw.spec.isa import Op, facc_results

__all__ = ["Counters", "program_counters"]


@dataclass
class Counters:
    """What a run did (see the module doc)."""
    ops: Counter = field(default_factory=Counter)
    tokens_local: int = 0
    tokens_mesh: int = 0
    token_hops: int = 0
    mem_packets: int = 0
    mem_hops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    ctx_starts: int = 0
    ctx_ends: int = 0

    def __iadd__(self, other):
        self.ops.update(other.ops)
        for name in ("tokens_local", "tokens_mesh", "token_hops", "mem_packets", "mem_hops",
                     "bytes_read", "bytes_written", "ctx_starts", "ctx_ends"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    @property
    def instructions(self):
        """Return the total firings."""
        return sum(self.ops.values())

    def as_dict(self):
        """Return the counters as a JSON-friendly dict (opcodes by name, sorted)."""
        d = {k: getattr(self, k) for k in ("tokens_local", "tokens_mesh", "token_hops",
                                           "mem_packets", "mem_hops", "bytes_read",
                                           "bytes_written", "ctx_starts", "ctx_ends")}
        d["instructions"] = self.instructions
        d["ops"] = {k: int(v) for k, v in sorted(self.ops.items()) if v}
        return d



def program_counters(image, contexts, switch_true, mem_hops, accesses=None, emitted=None):
    """Return the :class:`Counters` of running ``contexts`` contexts of ``image``'s program.

    Token counts are propagated through the decoded program (edges into SWITCH operand 2 are
    the feedback edges and are not followed).  ``switch_true[(x, y, slot)]`` is the total
    number of SWITCH firings that take the True branch, ``mem_hops(x, y, slot)`` the hops from
    a memory instruction to the Dbuf it accesses, ``accesses[(x, y, slot)]`` the firings of a
    ``LDHBZ`` that access memory (a non-zero address; default: all), ``emitted[(x, y, slot)]``
    the tokens a data-dependent emitter (``BPOS``, a token-count ``ITER``) sends to each
    destination in all, for an ``MCAST`` a list of them by destination (a ``FACC`` with a
    count operand sends one result per count token).
    Supports graphs whose only cycles are SWITCH feedback edges (all FC graphs).
    """
    accesses = accesses or {}
    emitted = emitted or {}
    p = image.params
    insns = image.instructions()
    into = Counter()
    indeg = Counter()
    for key, insn in insns.items():
        for d in insn.dests:
            if not (insns[(d.x, d.y, d.slot)].op is Op.SWITCH and d.operand == 2):
                indeg[(d.x, d.y, d.slot)] += 1
    ready = [k for k in insns if indeg[k] == 0]
    seen = 0
    c = Counters()
    fires = {}
    while ready:
        key = ready.pop()
        seen += 1
        insn = insns[key]
        op = insn.op
        if op is Op.CTX:
            n = contexts
            c.ctx_starts += contexts
        else:
            first = insn.token_operands[0] if insn.token_operands else None
            n = into[(key, first)]
        fires[key] = n
        c.ops[op.name] += n
        if insn.end:
            c.ctx_ends += n
        if op.is_load or op.is_store:
            h = mem_hops(*key)
            m = accesses.get(key, n) if op is Op.LDHBZ else n
            c.mem_packets += 2 * m
            c.mem_hops += 2 * m * h
            if op.is_load:
                c.bytes_read += m * op.access_bytes
            else:
                c.bytes_written += m * op.access_bytes
        per_dest = []
        for i, d in enumerate(insn.dests):
            if op is Op.BPOS or op is Op.ITER and not insn.count:
                k = emitted[key]
            elif op is Op.MCAST:
                k = emitted[key][i]           # the tokens its mask sent to destination i
            elif op in (Op.ITER, Op.BSCAN):
                k = n * insn.count
            elif op is Op.FACC:
                k = into[(key, 2)] if insn.nsrc == 3 else facc_results(insn.count, insn.step, n)
            elif op is Op.SWITCH:
                t = switch_true.get(key, 0)
                k = t if i < insn.ntrue else n - t
            else:
                k = n
            per_dest.append(k)
        for d, k in zip(insn.dests, per_dest):
            dkey = (d.x, d.y, d.slot)
            into[(dkey, d.operand)] += k
            if (d.x, d.y) == key[:2]:
                c.tokens_local += k
            else:
                c.tokens_mesh += k
                c.token_hops += k * len(p.route(key[:2], (d.x, d.y)))
            if not (insns[dkey].op is Op.SWITCH and d.operand == 2):
                indeg[dkey] -= 1
                if indeg[dkey] == 0:
                    ready.append(dkey)
    if seen != len(insns):
        raise FdpuError("program_counters: the program has a cycle other than SWITCH "
                        "feedback edges; run it with run_image")
    return c
