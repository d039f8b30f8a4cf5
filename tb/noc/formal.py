"""Formal harnesses of the router and the Dbuf, proved with Yosys ``sat`` (no SymbiYosys).

Each harness is an Amaranth module whose free inputs are the design's inputs and whose
properties are ``Assert`` statements (``Assume`` for the environment).  :func:`prove` converts
it to RTLIL, lowers the checks (``chformal -lower``) and runs ``sat -prove-asserts``: bounded
(``-seq N``) from the initial state, or by temporal induction (``-tempinduct``).

* :class:`RouteHarness` (combinational): for every router coordinate ``(x, y)`` of the array
  and every header the router chooses the output ``ArrayParams.route((x, y), dst)[0]`` of
  every legal target, one-hot (the coordinate is a router input, so it is free in the proof).
* :class:`RouterOccupancyHarness`: the environment tags each flit with the input it entered
  (an ``Assume`` on the opaque body); a shadow counter per input counts flits in minus flits
  that left any output with that tag.  It never exceeds the buffer ``depth`` (no overflow: no
  flit accepted into a full buffer, none overwritten), never goes below zero and no cycle
  sends more of an input's flits than it holds (no flit leaves that did not enter: no
  duplicate); an output offered but not taken keeps its flit.  Unicast flits only: an
  edge-multicast flit leaves through two outputs by design (the mesh bench checks its
  copies).
* :class:`DbufCreditHarness`: requests accepted minus replies delivered stays in
  ``0 .. reply_depth`` (the credit counter never over- or underflows; no reply without a
  request), and a stalled reply is held.
"""

import subprocess
import tempfile
from pathlib import Path

from amaranth import Cat, Elaboratable, Module, Signal
from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume
from amaranth.lib import data

from hw.noc.dbuf import Dbuf
from hw.noc.flit import FlitKind
from hw.noc.router import PORTS, Router, biased_coordinate, route_onehot
from hw.tooling.synth import find_yosys
from sw.spec.arch import ArrayParams
from sw.spec.packet import MULTICAST

__all__ = ["RouteHarness", "RouterOccupancyHarness", "DbufCreditHarness", "prove"]


def _targets(params):
    """Return every legal target coordinate: the PEs and the edge (Dbuf) coordinates."""
    return params.pe_coords() + [params.dbuf_coord(k) for k in range(params.num_dbufs)]


class RouteHarness(Elaboratable):
    """The XY rule of every router of ``params`` against ``ArrayParams.route``'s first hop.

    The router's coordinate is a free input (constrained to the array), like the header: one
    proof covers every router and every header.  ``shift`` (default 0) compares router
    ``(x, y)`` with the software route of router ``((x + shift) mod cols, y)``: a mutant the
    proof must reject (the check can fail).
    """

    def __init__(self, params, shift=0):
        self.params, self.shift = params, shift
        self.x = Signal(params.x_bits)
        self.y = Signal(params.y_bits)
        self.dst_x = Signal(params.x_bits)
        self.dst_y = Signal(params.y_bits)

    def ports(self):
        """Return the free inputs."""
        return [self.x, self.y, self.dst_x, self.dst_y]

    def elaborate(self, platform):
        m = Module()
        p = self.params
        bx, by = biased_coordinate(m, p, self.x, self.y)
        onehot = Signal(len(PORTS))
        m.d.comb += onehot.eq(Cat(*route_onehot(m, p, bx, by, self.dst_x, self.dst_y)))
        legal = Signal()
        want = Signal(len(PORTS))
        # Nested cases (router, then target) keep the multiplexer trees shallow: one flat case
        # per (router, target) pair of 8 x 8 overflows the SAT solver's stack.
        with m.Switch(Cat(self.x, self.y)):
            for (x, y) in p.pe_coords():
                reference = ((x + self.shift) % p.cols, y)
                with m.Case(x | y << p.x_bits):
                    with m.Switch(Cat(self.dst_x, self.dst_y)):
                        for (tx, ty) in _targets(p):
                            hop = p.route(reference, (tx, ty))[0]
                            with m.Case((tx + 1) | (ty + 1) << p.x_bits):
                                m.d.comb += [legal.eq(1), want.eq(1 << int(hop))]
        m.d.comb += Assume(legal)
        m.d.comb += Assert(onehot == want)
        return m


def _multicast(kind):
    """Return whether a flit ``kind`` field is an edge-multicast kind."""
    value = kind.as_value()
    out = 0
    for k in MULTICAST:
        out = out | (value == k.value)
    return out


def _stream_rule(m, port, name):
    """Assert that an offered, not taken flit is offered again unchanged on the next cycle."""
    stalled = Signal(name=f"{name}_stalled")
    held = Signal.like(port.payload.as_value(), name=f"{name}_held")
    m.d.sync += [stalled.eq(port.valid & ~port.ready), held.eq(port.payload.as_value())]
    with m.If(stalled):
        m.d.comb += Assert(port.valid & (port.payload.as_value() == held))


class RouterOccupancyHarness(Elaboratable):
    """Per-input occupancy of a narrow router stays in ``0 .. depth`` (see the module doc)."""

    TAG_BITS = 3

    def __init__(self, params=ArrayParams(rows=3, cols=3, slots=64, operand_depth=4,
                                          int_issue=1), depth=2, limit=None):
        # ``limit`` below ``depth`` is a mutant: the FIFOs do fill, so the proof must fail.
        self.params, self.depth = params, depth
        self.limit = depth if limit is None else limit
        header = 3 + params.x_bits + params.y_bits
        self.router = Router(params, width=header + self.TAG_BITS, depth=depth)

    def ports(self):
        """Return the free inputs (coordinate, the router's inputs and the outputs' ``ready``)."""
        r = self.router
        return [r.i_x, r.i_y] + [s for d in range(len(PORTS)) for s in
                                 (r.i_flit[d].valid, r.i_flit[d].payload.as_value(),
                                  r.o_flit[d].ready)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.router = r = self.router
        n = len(PORTS)
        p = self.params
        # The coordinate is free but, as in a mesh, inside the array and constant.
        started = Signal()
        coord = Signal(p.x_bits + p.y_bits)
        m.d.sync += [started.eq(1), coord.eq(Cat(r.i_x, r.i_y))]
        m.d.comb += Assume((r.i_x < p.cols) & (r.i_y < p.rows))
        with m.If(started):
            m.d.comb += Assume(Cat(r.i_x, r.i_y) == coord)
        tag = [data.View(r.layout, r.o_flit[o].payload.as_value()).body[:self.TAG_BITS]
               for o in range(n)]
        for d in range(n):
            port = r.i_flit[d]
            m.d.comb += Assume(port.payload.body[:self.TAG_BITS] == d)
            # Unicast flits: an edge-multicast one leaves through two outputs (the mesh bench
            # checks those copies, tb.noc.bench_mesh.edge_multicast).
            m.d.comb += Assume(~port.valid | ~_multicast(port.payload.kind))
            occupancy = Signal(range(-1, self.depth + 2), name=f"occ_{PORTS[d].name.lower()}")
            entered = port.valid & port.ready
            left = [r.o_flit[o].valid & r.o_flit[o].ready & (tag[o] == d) for o in range(n)]
            # Several outputs may each take a flit of input d in one cycle (one virtual output
            # queue each), but never more flits than the input holds: a flit entering now
            # cannot leave before the next cycle.
            m.d.sync += occupancy.eq(occupancy + entered - sum(left))
            m.d.comb += [
                Assert(occupancy >= 0),
                Assert(occupancy <= self.limit),
                Assert(sum(left) <= occupancy),
            ]
        for o in range(n):
            _stream_rule(m, r.o_flit[o], f"out_{PORTS[o].name.lower()}")
        return m


class DbufCreditHarness(Elaboratable):
    """Outstanding requests of a small Dbuf stay in ``0 .. reply_depth`` (posted MSTOREs,
    which get no reply, do not count)."""

    def __init__(self, params=ArrayParams(rows=1, cols=1, dbuf_bytes=64, slots=64, operand_depth=4,
                                          int_issue=1), index=0,
                 reply_depth=3):
        self.reply_depth = reply_depth
        self.dbuf = Dbuf(params, index, reply_depth=reply_depth)

    def ports(self):
        """Return the free inputs (requests and the replies' ``ready``)."""
        d = self.dbuf
        return [d.i_req.valid, d.i_req.payload.as_value(), d.o_reply.ready]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dbuf = dut = self.dbuf
        # A posted STORE (MSTORE) is answered by no reply: it is not outstanding.
        posted = dut.i_req.payload.kind.as_value() == FlitKind.MSTORE.value
        took = dut.i_req.valid & dut.i_req.ready & ~posted
        gave = dut.o_reply.valid & dut.o_reply.ready
        outstanding = Signal(range(-1, self.reply_depth + 2))
        m.d.sync += outstanding.eq(outstanding + took - gave)
        m.d.comb += [
            Assert(outstanding >= 0),
            Assert(outstanding <= self.reply_depth),
            Assert(~dut.o_reply.valid | (outstanding > 0)),
        ]
        _stream_rule(m, dut.o_reply, "reply")
        return m


def prove(harness, *, seq=None, tempinduct=False, timeout_s=600):
    """Prove the asserts of ``harness`` with Yosys ``sat``; return the Yosys log.

    Parameters
    ----------
    harness : amaranth.hdl.Elaboratable
    seq : int, optional
        Bounded proof over ``seq`` cycles from the initial state (registers at their ``init``).
    tempinduct : bool
        Unbounded proof by temporal induction instead.

    Raises
    ------
    AssertionError
        If Yosys finds a counterexample (its trace is in the message) or fails.
    """
    if seq is None and not tempinduct:
        mode = ""                                       # combinational
    elif tempinduct:
        mode = " -tempinduct -seq 1 -maxsteps 24"
    else:
        mode = f" -seq {seq}"
    with tempfile.TemporaryDirectory(prefix="fdpu-formal-") as tmp:
        tmp = Path(tmp)
        (tmp / "top.il").write_text(rtlil.convert(harness, name="top", ports=harness.ports(),
                                                  emit_src=False))
        script = "; ".join([
            # memory: sat has no model of memory ports; chformal -lower: $check -> $assert.
            "read_rtlil top.il", "hierarchy -top top", "proc", "flatten", "memory",
            "chformal -lower", "opt_clean", "async2sync", "dffunmap",
            f"sat -prove-asserts -set-assumes -set-init-zero -show-inputs{mode} -verify",
        ])
        result = subprocess.run([*find_yosys(), "-p", script], cwd=tmp, capture_output=True,
                                text=True, timeout=timeout_s, check=False)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        tail = "\n".join(log.splitlines()[-60:])
        raise AssertionError(f"formal check failed (yosys status {result.returncode}):\n{tail}")
    return log
