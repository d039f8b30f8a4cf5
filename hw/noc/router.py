"""A 5-port mesh router with deterministic XY routing and virtual output queues.

::

                      i_flit[N]  o_flit[N]
                          |         ^
                       +--v---------+--+
                       | [VOQ]         |
       o_flit[W] <-----+      5 x 5    +-----> o_flit[E]
       i_flit[W] --->[VOQ]   crossbar  [VOQ]<--- i_flit[E]
                       |   round-robin |
         i_x, i_y ---->|  per output   |
                       |        [VOQ]  |
                       +--^---------+--+
                          |         v
                      i_flit[S]  o_flit[S]       (and LOCAL: i_flit[L] -> [VOQ], o_flit[L])

     [VOQ] = VoqBuffer: ``depth`` slots shared by 5 virtual output queues (one per output)

Contract
--------
Ports
    ``i_x``, ``i_y``: the router's PE coordinate, driven by constants in the mesh.
    ``i_flit[d]`` / ``o_flit[d]`` for every :class:`sw.spec.arch.Dir` ``d`` (index = ``int(d)``),
    :mod:`amaranth.lib.stream` ports whose payload is :func:`hw.noc.flit.flit_layout`.
Routing
    The router at PE ``(x, y)`` (the inputs ``i_x``, ``i_y``: a coordinate is not a parameter,
    so all routers of a mesh are one Verilog module) sends a flit to ``(dx, dy)`` (the biased
    ``dst_x``/``dst_y`` minus one) exactly as :meth:`sw.spec.arch.ArrayParams.route`: along X
    towards ``dx`` clamped into ``0 .. cols-1``; at that column along Y towards ``dy`` clamped
    into ``0 .. rows-1``; at that router out of NORTH if ``dy == -1``, SOUTH if
    ``dy == rows``, WEST if ``dx == -1``, EAST if ``dx == cols``, else LOCAL.  The edge facts
    (first/last column/row) come from the coordinate inputs and the constant shape.  Only the
    header is looked at, once, when the flit enters; the body is carried unchanged.
Edge multicast
    A flit of a multicast kind (``MSTORE``, ``MLOAD``: :mod:`sw.spec.packet`) at a router on
    its destination Dbuf's edge line (row 0 for a north Dbuf, the last row for a south one,
    column 0 for a west one, the last column for an east one) leaves both along its route
    and through that edge port (:func:`multicast_copy`), so it reaches every Dbuf of
    :meth:`sw.spec.arch.ArrayParams.multicast_dbufs`.  The flit holds its slot until both
    outputs have taken it; each output keeps its own arrival order.  Deadlock freedom is
    unchanged: the extra output is a Dbuf's, which only sinks requests.
Buffering and flow control
    Each input has a :class:`VoqBuffer` of ``depth`` flit slots; a flit is stored with its
    output port and its age.  An input is ``ready`` exactly when a slot is free; that depends
    on the router's state only, never combinationally on ``valid``, so the mesh has no
    combinational loop.  A flit leaves its slot only in a cycle where its output transfers
    it: nothing is dropped or overwritten.
Arbitration
    Each input offers every output the oldest of its flits routed there (a virtual output
    queue), so a flit waiting for a busy output does not block flits behind it bound
    elsewhere (no head-of-line blocking; one FIFO per input saturated an 8 x 8 mesh at 0.36
    flits/node/cycle under uniform traffic, this at 0.43, ``docs/noc.md``).  Each output
    grants one offering input, round-robin starting after the input it granted last (a grant
    holds until the transfer), so a waiting input is served within 4 transfers of that
    output.  At an edge exit (a port to a Dbuf) the inputs offering a store (``STORE``,
    ``MSTORE``: the DMA's delivery, a PE's output) go first, round-robin among them: a Dbuf
    that its engines' loads keep busy would otherwise take one DMA word in every two to four
    cycles, and the DMA, which streams a descriptor into one Dbuf, would run at that rate
    (``docs/noc.md``, "Stores first at the Dbufs").  A load waits at most as long as stores
    keep arriving for that Dbuf, which a DMA list or a graph's stores bound.  Outputs decide
    independently: one input may send to several outputs in a cycle.
Latency and throughput
    One cycle per hop at zero load: a flit accepted on edge *t* is offered on the output from
    edge *t + 1*; one flit per port per cycle.
Ordering
    Flits from one input to one output leave in arrival order; with deterministic routing
    the mesh therefore keeps the order of flits per (source, destination).  Flits to
    different outputs may overtake each other (they belong to different pairs).
"""

from amaranth import C, Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.spec import check_params
from hw.noc.flit import Bits, flit_layout
from sw.spec.arch import ArrayParams, Dir
from sw.spec.packet import MULTICAST, Kind

__all__ = ["PORTS", "Router", "VoqBuffer", "biased_coordinate", "route_rules", "route_onehot",
           "multicast_copy", "edge_exits"]

#: The router ports, in index order.
PORTS = tuple(Dir)


def route_rules(params, bx, by, dst_x, dst_y):
    """Return the XY routing rule of a router as ``[(condition, Dir)]``.

    The first rule whose condition holds gives the output port; if none holds the port is
    ``Dir.LOCAL``.  ``dst_x`` and ``dst_y`` are the *biased* header fields; ``bx`` and ``by``
    the router's own *biased* coordinate (``x + 1``, ``y + 1``), Amaranth values of
    ``params.x_bits`` / ``params.y_bits`` bits.  Only the array's shape is a constant: whether
    the router is in the first or last column or row is derived from its coordinate.
    """
    cols, rows = params.cols, params.rows
    cx, cy, tx, ty = Bits(bx), Bits(by), Bits(dst_x), Bits(dst_y)
    # Clamping the target into the array means: go east only while not in the last column,
    # west only while not in the first; the same along Y.
    return [
        ((dst_x > bx) & ~(cx == cols), Dir.EAST),
        ((dst_x < bx) & ~(cx == 1), Dir.WEST),
        ((dst_y > by) & ~(cy == rows), Dir.SOUTH),
        ((dst_y < by) & ~(cy == 1), Dir.NORTH),
        (ty == 0, Dir.NORTH),
        (ty == rows + 1, Dir.SOUTH),
        (tx == 0, Dir.WEST),
        (tx == cols + 1, Dir.EAST),
    ]


def biased_coordinate(m, params, x, y):
    """Return ``(x + 1, y + 1)`` as signals of ``params.x_bits`` / ``y_bits`` bits.

    ``x`` and ``y`` are a PE's column and row (``0 .. cols-1``, ``0 .. rows-1``), so the biased
    values fit the header's coordinate width.
    """
    bx = Signal(params.x_bits, name="coord_bx")
    by = Signal(params.y_bits, name="coord_by")
    m.d.comb += [bx.eq((x + 1)[:params.x_bits]), by.eq((y + 1)[:params.y_bits])]
    return bx, by


def route_onehot(m, params, bx, by, dst_x, dst_y, prefix="route"):
    """Return the output port of :func:`route_rules` as a list of 5 one-bit values (by Dir).

    Every rule's condition becomes a signal of ``m``: Amaranth re-emits an expression at each
    use, so naming it once keeps the generated Verilog small.
    """
    ports = [C(0, 1) for _ in PORTS]
    earlier = C(0, 1)
    for k, (cond, port) in enumerate(route_rules(params, bx, by, dst_x, dst_y)):
        named = Signal(name=f"{prefix}_rule{k}")
        m.d.comb += named.eq(cond)
        ports[port] = ports[port] | (named & ~earlier)
        earlier = earlier | named
    ports[Dir.LOCAL] = ports[Dir.LOCAL] | ~earlier
    return ports


def multicast_copy(m, params, bx, by, head, prefix="copy"):
    """Return the 5-bit one-hot-or-zero port (by ``Dir``) through which a flit with header
    ``head`` leaves as an edge-multicast copy at the router ``(bx, by)`` (biased): the edge
    port of its destination Dbuf's edge when the flit is of a multicast kind
    (:data:`sw.spec.packet.MULTICAST`) and the router is on that edge's line
    (:meth:`sw.spec.arch.ArrayParams.edge_line`), else 0."""
    cols, rows = params.cols, params.rows
    kind = Bits(head.kind.as_value())
    multicast = Signal(name=f"{prefix}_mc")
    m.d.comb += multicast.eq(_or_of([kind == k.value for k in MULTICAST]))
    cx, cy, tx, ty = Bits(bx), Bits(by), Bits(head.dst_x), Bits(head.dst_y)
    sides = {Dir.NORTH: (ty == 0) & (cy == 1), Dir.SOUTH: (ty == rows + 1) & (cy == rows),
             Dir.WEST: (tx == 0) & (cx == 1), Dir.EAST: (tx == cols + 1) & (cx == cols)}
    bits = [C(0, 1) for _ in PORTS]
    for side, cond in sides.items():
        bits[side] = cond
    copy = Signal(len(PORTS), name=prefix)
    m.d.comb += copy.eq(Mux(multicast, Cat(*bits), 0))
    return copy


def edge_exits(params, bx, by):
    """Return whether the router ``(bx, by)`` (biased) is on the north, south, west and east
    edge (four one-bit values): there that output port is an edge port, a Dbuf's (or a
    controller's)."""
    cx, cy = Bits(bx), Bits(by)
    return cy == 1, cy == params.rows, cx == 1, cx == params.cols


def _is_store(kind):
    """Return whether a flit of ``kind`` (a header's ``kind`` field) writes a Dbuf: ``STORE``
    or ``MSTORE``."""
    k = Bits(kind.as_value())
    return (k == Kind.STORE.value) | (k == Kind.MSTORE.value)


def _any(bits):
    """Return the OR of the bits of ``bits`` (0 for no bits)."""
    return bits.any() if len(bits) else C(0, 1)


def _lowest(value):
    """Return ``value`` with only its lowest set bit kept: ``value & -value`` (word operations)."""
    return value & (~value + 1)[:len(value)]


def _or_of(values):
    """Return the OR of ``values`` (equal widths)."""
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out


def _check_int(name, value, low):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise TypeError(f"{name} must be an integer >= {low}, not {value!r}")


class Router(wiring.Component):
    """Route single-flit packets between 5 ports with XY routing (see the module doc).

    The router has no per-instance parameter: its coordinate is an input, so every router of
    a mesh is the same design (:class:`hw.noc.mesh.Mesh` shares one Verilog module among them).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Array shape (the routing rule needs ``rows`` and ``cols``) and coordinate widths.
    width : int, optional
        Flit width in bits; default :func:`hw.noc.flit.default_width`.
    depth : int
        Flit slots per input buffer (:class:`VoqBuffer`), at least 2.

    Attributes
    ----------
    i_x, i_y : In(params.x_bits), In(params.y_bits)
        This router's PE column and row (``0 .. cols-1``, ``0 .. rows-1``); held constant.
    i_flit : In(stream.Signature(flit_layout)).array(5)
        Flits in, indexed by ``Dir``.
    o_flit : Out(stream.Signature(flit_layout)).array(5)
        Flits out, indexed by ``Dir``.
    """

    def __init__(self, params=ArrayParams(), *, width=None, depth=4):
        check_params(params)
        _check_int("depth", depth, 2)
        self.params, self.depth = params, depth
        self.layout = flit_layout(params, width)
        self.width = self.layout.size
        flit = stream.Signature(self.layout)
        super().__init__({
            "i_x": In(params.x_bits),
            "i_y": In(params.y_bits),
            "i_flit": In(flit).array(len(PORTS)),
            "o_flit": Out(flit).array(len(PORTS)),
        })

    @property
    def key(self):
        """Return what makes two routers the same Verilog module (:class:`hw.lib.shared.Shared`)."""
        return ("router", self.params.rows, self.params.cols, self.width, self.depth)

    def elaborate(self, platform):
        m = Module()
        n = len(PORTS)
        bx, by = biased_coordinate(m, self.params, self.i_x, self.i_y)
        buffers = []
        for d in PORTS:
            name = d.name.lower()
            buf = VoqBuffer(self.layout, self.depth)
            m.submodules[f"in_{name}"] = buf
            wiring.connect(m, wiring.flipped(self.i_flit[d]), buf.i_flit)
            # The route is decided once, on entry (the coordinate is constant); an
            # edge-multicast flit on its Dbuf's edge line also takes the edge port.
            head = self.i_flit[d].payload
            route = route_onehot(m, self.params, bx, by, head.dst_x, head.dst_y,
                                 f"route_{name}")
            copy = multicast_copy(m, self.params, bx, by, head, f"copy_{name}")
            m.d.comb += buf.i_route.eq(Cat(*route) | copy)
            buffers.append(buf)

        exits = dict(zip((Dir.NORTH, Dir.SOUTH, Dir.WEST, Dir.EAST),
                         edge_exits(self.params, bx, by)))
        for o in PORTS:
            name = o.name.lower()
            offers = [buffers[i].o_voq[o] for i in range(n)]
            request = Signal(n, name=f"req_{name}")
            m.d.comb += request.eq(Cat(*(offer.valid for offer in offers)))
            # Candidates: at an edge exit the stores among the requests if there are any
            # (module doc, "Arbitration"), else every request.
            cand = request
            if o in exits:
                stores = Signal(n, name=f"stores_{name}")
                m.d.comb += stores.eq(request & Cat(*(_is_store(offer.payload.kind)
                                                       for offer in offers)))
                cand = Signal(n, name=f"cand_{name}")
                m.d.comb += cand.eq(Mux(exits[o] & stores.any(), stores, request))
            # One-hot: the input granted last.  Round-robin: the lowest candidate input above
            # it, else the lowest candidate input.
            last = Signal(n, name=f"last_{name}", init=1 << (n - 1))
            above = Signal(n, name=f"above_{name}")
            m.d.comb += above.eq(Cat(*(_any(last[:i]) for i in range(n))))
            masked = Signal(n, name=f"masked_{name}")
            m.d.comb += masked.eq(cand & above)
            grant = Signal(n, name=f"grant_{name}")
            # A flit offered but not taken stays offered, unchanged (the stream rules): the
            # grant of a stalled output holds until its transfer.  The buffer keeps its offer
            # to this output unchanged meanwhile (only younger flits arrive).
            hold = Signal(name=f"hold_{name}")
            held = Signal(n, name=f"held_{name}")
            m.d.comb += grant.eq(Mux(hold, held, _lowest(Mux(masked.any(), masked, cand))))
            out = self.o_flit[o]
            m.d.sync += [hold.eq(out.valid & ~out.ready), held.eq(grant)]
            with m.If(out.valid & out.ready):
                m.d.sync += last.eq(grant)
            payload = offers[n - 1].payload.as_value()
            for i in reversed(range(n - 1)):
                payload = Mux(grant[i], offers[i].payload.as_value(), payload)
            m.d.comb += [out.valid.eq(request.any()), out.payload.eq(payload)]
            for i in range(n):
                m.d.comb += offers[i].ready.eq(grant[i] & out.ready)
        return m


class VoqBuffer(wiring.Component):
    """Hold ``depth`` flits of one router input as one virtual output queue per output.

    One storage of ``depth`` slots; each flit is stored with its output ports (``i_route``,
    one-hot, or two bits for an edge-multicast copy, decided on entry) and an age (an
    ``older[i][j]`` matrix: slot ``i`` entered before slot ``j``).  Output ``o`` is offered
    the *oldest* stored flit routed to ``o``, so flits for one output leave in arrival order,
    while a flit for a busy output no longer blocks the flits behind it that go elsewhere (no
    head-of-line blocking).  Several outputs may take a
    flit each in one cycle; one flit enters per cycle, into the lowest free slot.

    Parameters
    ----------
    layout : amaranth.lib.data.StructLayout
        The flit layout.
    depth : int
        Slots, at least 2.

    Attributes
    ----------
    i_flit : In(stream.Signature(layout))
        Flits in; ``ready`` is "a slot is free", a function of the state only.
    i_route : In(5)
        Output ports of ``i_flit.payload`` (valid with it): one-hot, or several bits for a
        flit that leaves through several outputs; its slot is free once each has taken it.
    o_voq : Out(stream.Signature(layout)).array(5)
        Per output (indexed by ``Dir``) the oldest flit routed there; an offer stays
        unchanged until taken (only younger flits enter meanwhile).
    """

    def __init__(self, layout, depth):
        _check_int("depth", depth, 2)
        self.layout, self.depth = layout, depth
        flit = stream.Signature(layout)
        super().__init__({
            "i_flit": In(flit),
            "i_route": In(len(PORTS)),
            "o_voq": Out(flit).array(len(PORTS)),
        })

    def elaborate(self, platform):
        m = Module()
        n, depth = len(PORTS), self.depth
        width = Shape.cast(self.layout).width
        valid = Signal(depth)
        slot = [Signal(width, name=f"slot{i}") for i in range(depth)]
        # Per output, the slots routed there (bit i: slot i's flit goes to that output): the
        # route is kept transposed, so each output's candidates are one AND with ``valid``.
        routed = [Signal(depth, name=f"routed_{d.name.lower()}") for d in PORTS]
        older = [Signal(depth, name=f"older{i}") for i in range(depth)]

        free = Signal(depth)
        m.d.comb += [free.eq(_lowest(~valid)), self.i_flit.ready.eq(~valid.all())]
        write = Signal()
        m.d.comb += write.eq(self.i_flit.valid & self.i_flit.ready)

        taken = []
        for o in range(n):
            wants = Signal(depth, name=f"wants_{PORTS[o].name.lower()}")
            m.d.comb += wants.eq(valid & routed[o])
            # The oldest: no other slot that also wants o is older (row j of ``older``: the
            # slots younger than slot j).
            blocked = _or_of([Mux(wants[j], older[j], 0) for j in range(depth)])
            oldest = Signal(depth, name=f"oldest_{PORTS[o].name.lower()}")
            m.d.comb += oldest.eq(wants & ~blocked)
            offer = self.o_voq[o]
            # ``oldest`` is one-hot (or zero, and then the payload is not looked at), so a
            # chain of 2:1 multiplexers selects its slot.
            payload = slot[depth - 1]
            for i in reversed(range(depth - 1)):
                payload = Mux(oldest[i], slot[i], payload)
            m.d.comb += [offer.valid.eq(oldest.any()), offer.payload.eq(payload)]
            taken.append(Mux(offer.ready, oldest, 0))

        # State changes only under ``If``s: a simulator's unknown (an undriven ``valid`` or
        # ``ready`` is X on Icarus before the bench drives it) then leaves the state alone
        # instead of making the slot bits X for good.
        # A flit routed to several outputs (an edge-multicast copy) keeps its slot until the
        # last of them has taken it; each output that takes it drops it from its queue.
        left = [Signal(depth, name=f"left_{PORTS[o].name.lower()}") for o in range(n)]
        for o in range(n):
            m.d.comb += left[o].eq(routed[o] & ~taken[o])
        remaining = _or_of(left)
        taken = _or_of(taken)
        with m.If(write):
            for o in range(n):
                m.d.sync += routed[o].eq((left[o] & ~free) | Mux(self.i_route[o], free, 0))
        with m.Elif(taken.any()):
            for o in range(n):
                m.d.sync += routed[o].eq(left[o])
        for i in range(depth):
            with m.If(write & free[i]):
                m.d.sync += [valid[i].eq(1), slot[i].eq(self.i_flit.payload)]
            with m.Elif(taken[i]):
                m.d.sync += valid[i].eq(remaining[i])
            # A new flit is younger than every stored one: its row clears, and it joins the
            # row of every valid slot.  Rows of free slots are stale but never read (masked by
            # valid) and cleared when the slot is written.
            with m.If(write & free[i]):
                m.d.sync += older[i].eq(0)
            with m.Elif(write & valid[i]):
                m.d.sync += older[i].eq(older[i] | free)
        return m


def build_router(rows=4, cols=4, width=0, depth=4):
    """Return a :class:`Router` for ``fdpu verilog --top router`` (``width`` 0: the default)."""
    return Router(ArrayParams(rows=rows, cols=cols), width=width or None, depth=depth)
