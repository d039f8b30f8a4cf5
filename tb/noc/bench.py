"""A bench-only Amaranth wrapper around :class:`hw.noc.mesh.Mesh`: traffic generators, ejectors
and counters in HDL, so a Verilator run of tens of thousands of cycles costs Python nothing
per cycle.

Per PE (a :class:`BenchNode`): a xorshift generator draws, each cycle before ``stop``, a new
flit with probability ``rate / 65536`` (Bernoulli injection); generated flits wait in an
unbounded source queue (a counter) and enter the mesh at its LOCAL port, stamped with the
injection cycle; the destination follows ``pattern`` (:data:`PATTERN_CODES`, the rules of
:data:`sw.models.noc.PATTERNS`).  The LOCAL output is always ready.  Counters, per PE, over
the measurement window ``[warmup, stop)``: flits generated, flits ejected, the sum and the
maximum of their network latencies (ejection cycle - injection cycle + 1).  One shared
histogram of ``BINS`` bins of ``2**BIN_SHIFT`` cycles (the last bin holds everything longer)
*samples* the ejections: in each cycle it looks at one node, round-robin (node ``cycle mod
num_pes``), and counts that node's ejection if there is one.  That is an unbiased sample of 1
in ``num_pes`` of the flits for the 99th percentile; the bins are a memory read out through
``hist_addr``/``hist_data`` after the run.  Every flit ejected anywhere carries a checksum of
its source and stamp; ``bad`` counts mismatches (a corrupted or misrouted flit).  ``done``
rises when the cycle counter reaches ``total``.

Everything a sweep varies is an input (``pattern``, ``rate``, ``warmup``, ``stop``,
``total``): one build serves every point and pattern.  The nodes, like the routers, take
their coordinate as inputs and are :class:`hw.lib.shared.Shared`, so the generated Verilog has one
node module and one router module whatever the mesh size (the 8 x 8 bench was 8 MB of Verilog
with 64 router copies and per-node logic inlined).
"""

from amaranth import C, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import sum_of
from hw.lib.shared import Shared
from hw.noc.flit import FlitKind, flit_layout
from hw.noc.mesh import Mesh
from sw.models.noc import PATTERNS
from sw.spec.arch import ArrayParams

__all__ = ["BenchNode", "NocBench", "BINS", "BIN_SHIFT", "PATTERN_CODES", "build_bench"]

BINS = 256
BIN_SHIFT = 1
_STAMP = 16
_CHECK = 8

#: Value of the ``pattern`` input for each pattern of :data:`sw.models.noc.PATTERNS`.
PATTERN_CODES = {"uniform": 0, "transpose": 1, "bitcomp": 2, "neighbor": 3, "hotspot": 4}
if set(PATTERN_CODES) != set(PATTERNS):
    raise ImportError("tb.noc.bench.PATTERN_CODES is out of step with sw.models.noc.PATTERNS")


def _xorshift(m, seed, load, name):
    """Return a 32-bit xorshift state that takes ``seed`` while ``load`` is high."""
    state = Signal(32, name=name)
    x = state ^ (state << 13)[:32]
    x = x ^ (x >> 17)
    x = x ^ (x << 5)[:32]
    m.d.sync += state.eq(Mux(load, seed, x))
    return state


def _check(src, stamp):
    return (stamp[:_CHECK] ^ stamp[_CHECK:] ^ src ^ C(0xA5, _CHECK))[:_CHECK]


class BenchNode(wiring.Component):
    """One PE's traffic source and sink with its counters (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Array shape (the patterns need ``rows`` and ``cols``).
    width : int
        Flit width of the bench's mesh.

    Attributes
    ----------
    i_node, i_x, i_y, i_seed : In
        This node's number, column, row and xorshift seed (constants in :class:`NocBench`).
    load : In(1)
        Load the seeds (cycle 0, before any flit is drawn).
    pattern, rate, gen_en, measuring, stamp : In
        Pattern code, rate in 1/65536, "may draw flits", "in the window", current cycle.
    o_flit, i_flit : the LOCAL ports of the node's router (out of the node, into it)
    generated, ejected, latency, max_latency : Out
        The counters of the window.
    wrong : Out(1)
        The flit ejected now is corrupted or misrouted.
    sample_valid, sample_latency : Out
        A flit is ejected now, and its latency (for the shared histogram).
    """

    def __init__(self, params, width):
        self.params, self.width = params, width
        self.node_bits = max(1, (params.num_pes - 1).bit_length())
        layout = flit_layout(params, width)
        super().__init__({
            "i_node": In(self.node_bits),
            "i_x": In(params.x_bits),
            "i_y": In(params.y_bits),
            "i_seed": In(64),
            "load": In(1),
            "pattern": In(3),
            "rate": In(17),
            "gen_en": In(1),
            "measuring": In(1),
            "stamp": In(_STAMP),
            "o_flit": Out(stream.Signature(layout)),
            "i_flit": In(stream.Signature(layout)),
            "generated": Out(32),
            "ejected": Out(32),
            "latency": Out(48),
            "max_latency": Out(_STAMP),
            "wrong": Out(1),
            "sample_valid": Out(1),
            "sample_latency": Out(_STAMP),
        })

    @property
    def key(self):
        """Return what makes two nodes the same Verilog module (:class:`hw.lib.shared.Shared`)."""
        return ("noc_bench_node", self.params.rows, self.params.cols, self.width)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        body = data.StructLayout({"stamp": _STAMP, "src": self.node_bits, "check": _CHECK})
        gen = _xorshift(m, self.i_seed[:32], self.load, "gen")
        dst = _xorshift(m, self.i_seed[32:], self.load, "dst")
        new = self.gen_en & ~self.load & (gen[:16] < self.rate)
        pending = Signal(32)
        port = self.o_flit
        sent = port.valid & port.ready
        m.d.sync += pending.eq(pending + new - sent)
        m.d.comb += port.valid.eq(pending != 0)
        with m.If(self.measuring & new):
            m.d.sync += self.generated.eq(self.generated + 1)

        x, y = self.i_x, self.i_y
        uni_x = Signal(p.x_bits)
        uni_y = Signal(p.y_bits)
        m.d.comb += [uni_x.eq((dst[:8] * p.cols)[8:]), uni_y.eq((dst[8:16] * p.rows)[8:])]
        tx = Signal(p.x_bits)
        ty = Signal(p.y_bits)
        with m.Switch(self.pattern):
            with m.Case(PATTERN_CODES["transpose"]):       # square arrays only
                m.d.comb += [tx.eq(y), ty.eq(x)]
            with m.Case(PATTERN_CODES["bitcomp"]):
                m.d.comb += [tx.eq(p.cols - 1 - x), ty.eq(p.rows - 1 - y)]
            with m.Case(PATTERN_CODES["neighbor"]):
                m.d.comb += [tx.eq(Mux(x == p.cols - 1, 0, x + 1)), ty.eq(y)]
            with m.Case(PATTERN_CODES["hotspot"]):
                hot = dst[16:18] == 0
                m.d.comb += [tx.eq(Mux(hot, p.cols // 2, uni_x)),
                             ty.eq(Mux(hot, p.rows // 2, uni_y))]
            with m.Default():                               # uniform
                m.d.comb += [tx.eq(uni_x), ty.eq(uni_y)]
        flit = port.payload
        fields = data.View(body, flit.body)
        m.d.comb += [
            flit.kind.eq(FlitKind.OPERAND),
            flit.dst_x.eq(tx + 1), flit.dst_y.eq(ty + 1),
            fields.stamp.eq(self.stamp), fields.src.eq(self.i_node),
            fields.check.eq(_check(self.i_node, self.stamp)),
        ]

        out = self.i_flit
        got = data.View(body, out.payload.body)
        m.d.comb += out.ready.eq(1)
        latency = Signal(_STAMP)
        m.d.comb += latency.eq(self.stamp - got.stamp + 1)
        m.d.comb += [
            self.wrong.eq(out.valid & ((got.check != _check(got.src, got.stamp))
                                       | (out.payload.dst_x != x + 1)
                                       | (out.payload.dst_y != y + 1))),
            self.sample_valid.eq(out.valid),
            self.sample_latency.eq(latency),
        ]
        with m.If(out.valid & self.measuring):
            m.d.sync += [
                self.ejected.eq(self.ejected + 1),
                self.latency.eq(self.latency + latency),
            ]
            with m.If(latency > self.max_latency):
                m.d.sync += self.max_latency.eq(latency)
        return m


def _seed(node):
    """Return the two 32-bit xorshift seeds of ``node`` packed in 64 bits (never zero)."""
    gen = (0x9E3779B9 ^ (node * 0x85EBCA6B & 0xFFFFFFFF)) | 1
    dst = (0x7F4A7C15 ^ (node * 0xC2B2AE35 & 0xFFFFFFFF)) | 1
    return gen | dst << 32


class NocBench(wiring.Component):
    """Mesh plus HDL traffic and counters (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Mesh shape.
    depth : int
        Router input buffer depth.
    """

    def __init__(self, params, depth=4):
        self.params, self.depth = params, depth
        n = params.num_pes
        self.node_bits = max(1, (n - 1).bit_length())
        super().__init__({
            "pattern": In(3),
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
            "hist_addr": In(range(BINS)),
            "hist_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        width = 3 + p.x_bits + p.y_bits + _STAMP + self.node_bits + _CHECK
        m.submodules.mesh = mesh = Mesh(p, width=width, depth=self.depth)
        cycle = Signal(32)
        m.d.sync += cycle.eq(cycle + (cycle != self.total))
        m.d.comb += self.done.eq(cycle == self.total)
        measuring = Signal()
        m.d.comb += measuring.eq((cycle >= self.warmup) & (cycle < self.stop))
        for k in range(p.num_dbufs):
            m.d.comb += mesh.o_edge[k].ready.eq(1)

        nodes = []
        for (x, y) in p.pe_coords():
            n = y * p.cols + x
            plain = BenchNode(p, width)
            node = Shared(plain, key=plain.key, name="noc_bench_node")
            m.submodules[f"node{n}"] = node
            wiring.connect(m, node.o_flit, mesh.i_local[n])
            wiring.connect(m, mesh.o_local[n], node.i_flit)
            m.d.comb += [
                node.i_node.eq(n), node.i_x.eq(x), node.i_y.eq(y), node.i_seed.eq(_seed(n)),
                # Seeds load over two cycles: a hierarchical node (16+ instances in
                # Verilator builds) leaves reset one cycle after the bench (its rst is
                # registered inside it, docs/harness.md recipe 3) and would miss cycle 0.
                node.load.eq(cycle < 2), node.pattern.eq(self.pattern),
                node.rate.eq(self.rate), node.gen_en.eq(cycle < self.stop),
                node.measuring.eq(measuring), node.stamp.eq(cycle[:_STAMP]),
                self.generated[n].eq(node.generated), self.ejected[n].eq(node.ejected),
                self.latency[n].eq(node.latency), self.max_latency[n].eq(node.max_latency),
            ]
            nodes.append(node)

        # The sampler: one node per cycle, round-robin.
        turn = Signal(range(p.num_pes))
        m.d.sync += turn.eq(Mux(turn == p.num_pes - 1, 0, turn + 1))
        s_valid, s_lat = Signal(), Signal(_STAMP)
        with m.Switch(turn):
            for n, node in enumerate(nodes):
                with m.Case(n):
                    m.d.comb += [s_valid.eq(node.sample_valid), s_lat.eq(node.sample_latency)]
        binned = Signal(range(BINS))
        m.d.comb += binned.eq(Mux(s_lat >= (BINS - 1) << BIN_SHIFT, BINS - 1,
                                  s_lat >> BIN_SHIFT))
        # Read-modify-write of one bin per cycle: the read port sees the write of the same
        # cycle (transparent), so back-to-back samples of one bin both count.
        m.submodules.hist = hist = memory.Memory(shape=32, depth=BINS, init=[])
        wr = hist.write_port()
        rd = hist.read_port(transparent_for=(wr,))
        pending, bin_ = Signal(), Signal(range(BINS))
        m.d.comb += rd.addr.eq(binned)
        m.d.sync += [pending.eq(s_valid & measuring), bin_.eq(binned)]
        m.d.comb += [wr.addr.eq(bin_), wr.data.eq(rd.data + 1), wr.en.eq(pending)]
        out = hist.read_port(domain="comb")
        m.d.comb += [out.addr.eq(self.hist_addr), self.hist_data.eq(out.data)]
        m.d.sync += self.bad.eq(self.bad + sum_of([node.wrong for node in nodes]))
        return m


def build_bench(rows=8, cols=8, depth=4):
    """Return a :class:`NocBench` (the registry-style factory used by ``fdpu noc-bench``)."""
    return NocBench(ArrayParams(rows=rows, cols=cols, slots=64, operand_depth=4,
                                int_issue=1), depth)
