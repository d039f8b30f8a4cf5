"""The bench of a :class:`hw.array.PeArray`: MicC and Dbufs at the mesh edge ports.

:class:`TB` drives a ``pe_array`` DUT:

* **Dbufs**: every edge port ``k`` sinks ``o_req[k]`` (random backpressure), checks that the
  request reached the Dbuf that owns its address, and answers on ``i_reply[k]`` with
  :class:`sw.models.noc.DbufModel` ``k`` after a random latency, replies in any order.
* **MicC** at its edge port: the image's CONFIG flits (:func:`tb.host.memories.image_flits`,
  the MicC's order), then context IDs to every CTX slot (window-limited), injected on
  ``i_reply[micc]`` in order; CTX_END flits on ``o_reply[micc]`` retire contexts.
* ``o_fire[n]`` is counted per opcode over all PEs; every wait is bounded and says "deadlock".
"""

from collections import Counter, deque

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from sw.models.noc import DbufModel
from sw.spec.isa import Op
from sw.spec.packet import Kind, end_count, flit_fields, pack_flit
from sw.spec.status import PeError
from tb.host.memories import image_flits
from tb.pe.harness import wait_until_retired

#: The bits of a PE's error flags, below its first error's slot in ``o_error``.
FLAGS = len(PeError)

__all__ = ["TB"]


class TB:
    """MicC and Dbufs around a ``pe_array`` DUT (see the module docstring)."""

    def __init__(self, dut, params, micc, rng, *, backpressure=0.2, mem_delay=(2, 24)):
        self.dut, self.p, self.micc, self.rng = dut, params, micc, rng
        self.k_micc = params.dbuf_at(*micc)
        assert self.k_micc is not None, f"the MicC at {micc} is not on an edge port"
        self.backpressure, self.mem_delay = backpressure, mem_delay
        self.dbufs = [DbufModel(params, k) for k in range(params.num_dbufs)]
        self.cycle = 0
        self.micc_q = deque()
        self.replies = {k: [] for k in range(params.num_dbufs)}
        self.offered = {k: None for k in range(params.num_dbufs)}
        self.fired = Counter()
        self.ends = Counter()
        self.end_log = []
        self.contexts = self.window = self.ends_per_context = 0
        self.ctx_slots = []
        self.next_ctx = self.retired = 0
        self.moves = 0
        for k in range(params.num_dbufs):
            getattr(dut, f"i_reply__{k}__valid").value = 0
        self._task = cocotb.start_soon(self._run())

    def load_image(self, image):
        """Queue the image's configuration (every PE), its memory and its contexts."""
        self.micc_q.extend(image_flits(image)[0])
        for dbuf in self.dbufs:
            dbuf.load(image.segments)
        self.contexts, self.window = image.contexts, image.window
        self.ends_per_context = image.ends_per_context
        self.ctx_slots = sorted(k for k, i in image.instructions().items() if i.op is Op.CTX)
        self._start_contexts()

    def _start_contexts(self):
        while self.next_ctx < self.contexts and self.next_ctx < self.retired + self.window:
            for x, y, s in self.ctx_slots:
                self.micc_q.append(pack_flit(self.p, Kind.OPERAND, (x, y), slot=s, operand=0,
                                             data=self.next_ctx))
            self.next_ctx += 1

    def dbuf_bytes(self, d):
        """Return the contents of Dbuf ``d``."""
        return self.dbufs[d].contents()

    def _request(self, k, word):
        kind, _, f = flit_fields(self.p, word)
        assert kind in (Kind.LOAD, Kind.STORE), f"edge port {k} got a {kind.name} request"
        addr = f["addr"]
        owner = self.p.dbuf_of(addr)[0]
        assert owner == k, f"{kind.name} of {addr:#x} reached Dbuf {k}, owner is Dbuf {owner}"
        self.replies[k].append((self.cycle + self.rng.randint(*self.mem_delay),
                                self.dbufs[k].reply(word)))

    def _reply_out(self, k, word):
        kind, _, f = flit_fields(self.p, word)
        assert kind is Kind.CTX_END and k == self.k_micc, \
            f"edge port {k} received a {kind.name} flit on the reply network"
        ctx = f["data"] & 0xFFFF_FFFF
        n = end_count(f["count"])      # a flit stands for n END messages
        self.end_log.extend([ctx] * n)
        self.ends[ctx] += n
        while self.retired < self.contexts and self.ends[self.retired] >= self.ends_per_context:
            self.retired += 1
        self._start_contexts()

    def _next_for(self, k):
        due = [i for i, (t, _) in enumerate(self.replies[k]) if t <= self.cycle]
        micc = k == self.k_micc and self.micc_q
        if micc and (not due or self.rng.random() < 0.5):
            return self.micc_q.popleft()
        if due:
            return self.replies[k].pop(self.rng.choice(due))[1]
        return None

    async def _run(self):
        dut, p = self.dut, self.p
        port = {k: (getattr(dut, f"o_req__{k}__valid"), getattr(dut, f"o_req__{k}__ready"),
                    getattr(dut, f"o_req__{k}__payload"),
                    getattr(dut, f"i_reply__{k}__valid"), getattr(dut, f"i_reply__{k}__ready"),
                    getattr(dut, f"i_reply__{k}__payload"),
                    getattr(dut, f"o_reply__{k}__valid"), getattr(dut, f"o_reply__{k}__ready"),
                    getattr(dut, f"o_reply__{k}__payload")) for k in range(p.num_dbufs)}
        fires = [getattr(dut, f"o_fire__{n}") for n in range(p.num_pes)]
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            in_reset = dut.rst.value == 1
            for k, (rq_v, rq_r, rq_p, rp_v, rp_r, rp_p, ro_v, ro_r, ro_p) in port.items():
                rq_r.value = int(self.rng.random() >= self.backpressure)
                ro_r.value = 1
                if self.offered[k] is None and not in_reset:
                    self.offered[k] = self._next_for(k)
                    if self.offered[k] is not None:
                        rp_p.value = self.offered[k]
                rp_v.value = int(self.offered[k] is not None)
            await ReadOnly()
            if in_reset:
                continue
            for k, (rq_v, rq_r, rq_p, rp_v, rp_r, rp_p, ro_v, ro_r, ro_p) in port.items():
                if rq_v.value == 1 and rq_r.value == 1:
                    self._request(k, rq_p.value.to_unsigned())
                    self.moves += 1
                if rp_v.value == 1 and rp_r.value == 1:
                    self.offered[k] = None
                    self.moves += 1
                if ro_v.value == 1:
                    self._reply_out(k, ro_p.value.to_unsigned())
                    self.moves += 1
            for sig in fires:
                bits = str(sig.value)[::-1]
                if bits[0] == "1":
                    self.fired[Op(int(bits[1:7][::-1], 2)).name] += 1
                if bits[7] == "1":
                    self.fired[Op(int(bits[8:14][::-1], 2)).name] += 1

    @property
    def busy(self):
        """Whether flits are still queued for the array."""
        return bool(self.micc_q or any(self.replies.values())
                    or any(v is not None for v in self.offered.values()))

    def pending(self):
        """Describe what is pending, for timeout messages."""
        errs = [str(getattr(self.dut, f"o_error__{n}").value) for n in range(self.p.num_pes)]
        return (f"{self.retired} of {self.contexts} contexts retired, {len(self.micc_q)} MicC "
                f"flits queued, replies queued {[len(v) for v in self.replies.values()]}, "
                f"fired {dict(self.fired)}, PE error status {errs}")

    async def wait_retired(self, max_cycles, stall=3000):
        """Wait until every context retired and nothing is queued (bounded, as
        :func:`tb.pe.harness.wait_until_retired`)."""
        await wait_until_retired(self, lambda: (sum(self.fired.values()), self.moves),
                                 max_cycles, stall)

    def stop(self):
        """Stop driving the DUT."""
        self._task.cancel()
        for k in range(self.p.num_dbufs):
            getattr(self.dut, f"i_reply__{k}__valid").value = 0

    def errors(self):
        """Return the PEs' ``(flags, slot)`` status, by PE index."""
        out = []
        for n in range(self.p.num_pes):
            v = getattr(self.dut, f"o_error__{n}").value.to_unsigned()
            out.append((v & (1 << FLAGS) - 1, v >> FLAGS))
        return out
