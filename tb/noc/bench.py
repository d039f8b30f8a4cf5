"""A bench-only Amaranth wrapper around :class:`hw.mesh.Mesh`: traffic generators, ejectors
and counters in HDL, so a Verilator run of tens of thousands of cycles costs Python nothing
per cycle.

Per PE: a xorshift generator draws, each cycle before ``stop``, a new flit with probability
``rate / 65536`` (Bernoulli injection); generated flits wait in an unbounded source queue
(a counter) and enter the mesh at its LOCAL port, stamped with the injection cycle; the
destination follows ``pattern`` (:data:`sw.noc_model.PATTERNS`).  The LOCAL output is always
ready.  Counters, per PE, over the measurement window ``[warmup, stop)``: flits generated,
flits ejected, the sum and the maximum of their network latencies (ejection cycle - injection
cycle + 1).  One shared histogram of ``BINS`` bins of ``2**BIN_SHIFT`` cycles (the last bin holds
everything longer) *samples* the ejections: in each cycle it looks at one node, round-robin
(node ``cycle mod num_pes``), and counts that node's ejection if there is one.  That is an
unbiased sample of 1 in ``num_pes`` of the flits for the 99th percentile, at the cost of one
counter bank instead of one per node (a per-node 64-bin histogram made the 8 x 8 bench's
Verilator build take over 5 minutes).
Every flit ejected anywhere carries a checksum of its source and stamp; ``bad`` counts
mismatches (a corrupted or misrouted flit).  ``done`` rises when the cycle counter reaches
``total``.
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.mesh import Mesh
from hw.noc_types import FlitKind
from sw.arch import ArrayParams

__all__ = ["NocBench", "BINS", "BIN_SHIFT", "build_bench"]

BINS = 256
BIN_SHIFT = 1
_STAMP = 16
_CHECK = 8


def _xorshift(m, seed, name):
    state = Signal(32, init=seed, name=name)
    x = state ^ (state << 13)[:32]
    x = x ^ (x >> 17)
    x = x ^ (x << 5)[:32]
    m.d.sync += state.eq(x)
    return state


class NocBench(wiring.Component):
    """Mesh plus HDL traffic and counters (see the module doc)."""

    def __init__(self, params, pattern="uniform", depth=4):
        self.params, self.pattern, self.depth = params, pattern, depth
        n = params.num_pes
        self.node_bits = max(1, (n - 1).bit_length())
        super().__init__({
            "rate": In(17),
            "warmup": In(32),
            "stop": In(32),
            "total": In(32),
            "done": Out(1),
            "bad": Out(32),
            "generated": Out(32).array(n),
            "ejected": Out(32).array(n),
            "latency": Out(48).array(n),
            "max_latency": Out(_STAMP).array(n),
            "hist": Out(32).array(BINS),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        width = 3 + p.x_bits + p.y_bits + _STAMP + self.node_bits + _CHECK
        m.submodules.mesh = mesh = Mesh(p, width=width, depth=self.depth)
        body = data.StructLayout({"stamp": _STAMP, "src": self.node_bits, "check": _CHECK})
        cycle = Signal(32)
        m.d.sync += cycle.eq(cycle + (cycle != self.total))
        m.d.comb += self.done.eq(cycle == self.total)
        measuring = (cycle >= self.warmup) & (cycle < self.stop)
        for k in range(p.num_dbufs):
            m.d.comb += mesh.o_edge[k].ready.eq(1)

        def check(src, stamp):
            return (stamp[:_CHECK] ^ stamp[_CHECK:] ^ src ^ C(0xA5, _CHECK))[:_CHECK]

        bad_terms = []
        sample_lat = [None] * p.num_pes          # (valid, latency) per node, for the sampler
        for (x, y) in p.pe_coords():
            node = y * p.cols + x
            gen = _xorshift(m, 0x9E3779B9 ^ (node * 0x85EBCA6B & 0xFFFFFFFF) | 1, f"gen{node}")
            dst = _xorshift(m, 0x7F4A7C15 ^ (node * 0xC2B2AE35 & 0xFFFFFFFF) | 1, f"dst{node}")
            new = (cycle < self.stop) & (gen[:16] < self.rate)
            pending = Signal(32, name=f"pending{node}")
            port = mesh.i_local[node]
            sent = port.valid & port.ready
            m.d.sync += pending.eq(pending + new - sent)
            m.d.comb += port.valid.eq(pending != 0)
            with m.If(measuring & new):
                m.d.sync += self.generated[node].eq(self.generated[node] + 1)

            uni_x = (dst[:8] * p.cols)[8:]
            uni_y = (dst[8:16] * p.rows)[8:]
            if self.pattern == "uniform":
                tx, ty = uni_x, uni_y
            elif self.pattern == "transpose":
                tx, ty = y, x
            elif self.pattern == "bitcomp":
                tx, ty = p.cols - 1 - x, p.rows - 1 - y
            elif self.pattern == "neighbor":
                tx, ty = (x + 1) % p.cols, y
            elif self.pattern == "hotspot":
                hot = dst[16:18] == 0
                tx, ty = Mux(hot, p.cols // 2, uni_x), Mux(hot, p.rows // 2, uni_y)
            else:
                raise ValueError(f"unknown pattern {self.pattern!r}")
            flit = port.payload
            fields = data.View(body, flit.body)
            m.d.comb += [
                flit.kind.eq(FlitKind.OPERAND),
                flit.dst_x.eq(tx + 1), flit.dst_y.eq(ty + 1),
                fields.stamp.eq(cycle[:_STAMP]), fields.src.eq(node),
                fields.check.eq(check(C(node, self.node_bits), cycle[:_STAMP])),
            ]

            out = mesh.o_local[node]
            got = data.View(body, out.payload.body)
            m.d.comb += out.ready.eq(1)
            latency = Signal(_STAMP, name=f"lat{node}")
            m.d.comb += latency.eq(cycle[:_STAMP] - got.stamp + 1)
            wrong = Signal(name=f"wrong{node}")
            m.d.comb += wrong.eq(out.valid & ((got.check != check(got.src, got.stamp))
                                              | (out.payload.dst_x != x + 1)
                                              | (out.payload.dst_y != y + 1)))
            bad_terms.append(wrong)
            sample_lat[node] = (out.valid, latency)
            with m.If(out.valid & measuring):
                m.d.sync += [
                    self.ejected[node].eq(self.ejected[node] + 1),
                    self.latency[node].eq(self.latency[node] + latency),
                ]
                with m.If(latency > self.max_latency[node]):
                    m.d.sync += self.max_latency[node].eq(latency)

        # The sampler: one node per cycle, round-robin.
        turn = Signal(range(p.num_pes))
        m.d.sync += turn.eq(Mux(turn == p.num_pes - 1, 0, turn + 1))
        s_valid, s_lat = Signal(), Signal(_STAMP)
        with m.Switch(turn):
            for node, (valid, latency) in enumerate(sample_lat):
                with m.Case(node):
                    m.d.comb += [s_valid.eq(valid), s_lat.eq(latency)]
        binned = Signal(range(BINS))
        m.d.comb += binned.eq(Mux(s_lat >= (BINS - 1) << BIN_SHIFT, BINS - 1,
                                  s_lat >> BIN_SHIFT))
        with m.If(s_valid & measuring):
            with m.Switch(binned):
                for b in range(BINS):
                    with m.Case(b):
                        m.d.sync += self.hist[b].eq(self.hist[b] + 1)
        m.d.sync += self.bad.eq(self.bad + sum(bad_terms))
        return m


def build_bench(rows=8, cols=8, pattern="uniform", depth=4):
    """Return a :class:`NocBench` (the registry-style factory used by ``fdpu noc-bench``)."""
    return NocBench(ArrayParams(rows=rows, cols=cols), pattern, depth)
