"""The R x C mesh of :class:`hw.noc.router.Router`\\ s, and the request/reply pair of meshes.

::

               o_edge/i_edge[0]   [1]  ...  [C-1]          (north edge, Dbufs 0 .. C-1)
                    |              |          |
  [2C+R+0] --- R(0,0) ------- R(1,0) ... R(C-1,0) --- [C+0]      east edge: Dbufs C .. C+R-1
     ...         |              |          |           ...       south: C+R .. 2C+R-1 (W->E)
  [2C+R+R-1]-R(0,R-1) ------ ...       R(C-1,R-1) --- [C+R-1]    west: 2C+R .. 2C+2R-1 (N->S)
                    |              |          |
                [C+R+0]       [C+R+1]  ... [C+R+C-1]             (south edge)

Contract
--------
:class:`Mesh` is one network: ``i_local[n]`` / ``o_local[n]`` is the LOCAL port of the router
at PE ``n = y * cols + x``; ``i_edge[k]`` / ``o_edge[k]`` is the edge port where Dbuf ``k`` sits
(numbering of :meth:`sw.spec.arch.ArrayParams.dbuf_coord`).  Neighbouring routers are wired
port-to-port; the mesh adds no logic.  The routers take their coordinates as inputs
(constants here) and are wrapped in :class:`hw.lib.shared.Shared`: the generated Verilog has one
router module, instantiated ``rows * cols`` times.  Every property of the router holds per
hop: a flit is never lost, duplicated or changed; flits of one (source, destination) pair arrive in
order; the route is :meth:`sw.spec.arch.ArrayParams.route`; zero-load latency is one cycle per
router crossed (``hops + 1`` cycles from ``i_local`` to ``o_local`` for ``hops`` links).

:class:`Noc` is what the rest of the accelerator uses: two meshes, *request* (LOAD, STORE)
and *reply* (everything else), so requests and replies never share a buffer
(``docs/noc.md``).  Per PE: ``i_local[n]`` (any kind; steered by :func:`sw.spec.packet.net_of`)
and ``o_local[n]`` (the reply mesh's LOCAL output: operands, replies, configuration).  Per
edge port ``k``: ``o_req[k]`` (requests to Dbuf ``k``), ``i_reply[k]`` (Dbuf ``k``'s replies),
``i_req[k]`` (requests injected at the edge: DMA), ``o_reply[k]`` (reply-network flits
addressed to the edge coordinate ``k``: context ends to the MicC, store acks to the DMA).
The request mesh's LOCAL outputs carry a request addressed to a PE coordinate, which no
well-formed program sends; they are exposed as ``o_stray[n]`` so that the PE array can flag
them instead of the network dropping them.
"""

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, flipped

from hw.lib.shared import Shared
from hw.lib.spec import check_params
from hw.noc.flit import flit_layout, is_request
from hw.noc.router import Router
from sw.spec.arch import ArrayParams, Dir

__all__ = ["Mesh", "Noc"]


class Mesh(wiring.Component):
    """Build a ``rows x cols`` mesh of routers (one network; see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Array shape.
    width : int, optional
        Flit width; default :func:`hw.noc.flit.default_width`.
    depth : int
        Flits per router input FIFO, at least 2.

    Attributes
    ----------
    i_local, o_local : stream arrays of ``params.num_pes`` flits (index ``y * cols + x``)
    i_edge, o_edge : stream arrays of ``params.num_dbufs`` flits (index = Dbuf number)
    """

    def __init__(self, params=ArrayParams(), *, width=None, depth=4):
        check_params(params)
        self.params, self.depth = params, depth
        self.layout = flit_layout(params, width)
        self.width = self.layout.size
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise TypeError(f"depth must be an integer >= 2, not {depth!r}")
        flit = stream.Signature(self.layout)
        super().__init__({
            "i_local": In(flit).array(params.num_pes),
            "o_local": Out(flit).array(params.num_pes),
            "i_edge": In(flit).array(params.num_dbufs),
            "o_edge": Out(flit).array(params.num_dbufs),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        routers = {}
        for (x, y) in p.pe_coords():
            # The coordinate is an input, so every router is the same design: inside
            # hw.tooling.verilog.to_verilog they are one Verilog module instantiated rows * cols
            # times.
            plain = Router(p, width=self.width, depth=self.depth)
            r = routers[x, y] = Shared(plain, key=plain.key, name="router")
            m.submodules[f"r_{x}_{y}"] = r
            m.d.comb += [r.i_x.eq(x), r.i_y.eq(y)]
        step = {Dir.NORTH: (0, -1), Dir.EAST: (1, 0), Dir.SOUTH: (0, 1), Dir.WEST: (-1, 0)}
        for (x, y), r in routers.items():
            n = y * p.cols + x
            wiring.connect(m, flipped(self.i_local[n]), r.i_flit[Dir.LOCAL])
            wiring.connect(m, r.o_flit[Dir.LOCAL], flipped(self.o_local[n]))
            for d, (sx, sy) in step.items():
                nx, ny = x + sx, y + sy
                neighbour = routers.get((nx, ny))
                if neighbour is not None:
                    # Each link is wired once, from its source router's output.
                    opposite = Dir((d + 2) % 4)
                    wiring.connect(m, r.o_flit[d], neighbour.i_flit[opposite])
                else:
                    k = p.dbuf_at(nx, ny)
                    wiring.connect(m, flipped(self.i_edge[k]), r.i_flit[d])
                    wiring.connect(m, r.o_flit[d], flipped(self.o_edge[k]))
        return m


class Noc(wiring.Component):
    """Build the request and reply meshes with per-PE steering (see the module doc).

    Parameters
    ----------
    params : sw.spec.arch.ArrayParams
        Array shape and the flit format.
    depth : int
        Flits per router input FIFO, at least 2.
    """

    def __init__(self, params=ArrayParams(), *, depth=4):
        check_params(params)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise TypeError(f"depth must be an integer >= 2, not {depth!r}")
        self.params, self.depth = params, depth
        flit = stream.Signature(flit_layout(params, None))
        pes, dbufs = params.num_pes, params.num_dbufs
        super().__init__({
            "i_local": In(flit).array(pes),
            "o_local": Out(flit).array(pes),
            "o_stray": Out(flit).array(pes),
            "o_req": Out(flit).array(dbufs),
            "i_req": In(flit).array(dbufs),
            "i_reply": In(flit).array(dbufs),
            "o_reply": Out(flit).array(dbufs),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.request = req = Mesh(self.params, depth=self.depth)
        m.submodules.reply = rep = Mesh(self.params, depth=self.depth)
        for n in range(self.params.num_pes):
            src = self.i_local[n]
            to_request = is_request(src.payload.kind)
            m.d.comb += [
                req.i_local[n].payload.eq(src.payload),
                rep.i_local[n].payload.eq(src.payload),
                req.i_local[n].valid.eq(src.valid & to_request),
                rep.i_local[n].valid.eq(src.valid & ~to_request),
                src.ready.eq(
                    (to_request & req.i_local[n].ready) | (~to_request & rep.i_local[n].ready)),
            ]
            wiring.connect(m, rep.o_local[n], flipped(self.o_local[n]))
            wiring.connect(m, req.o_local[n], flipped(self.o_stray[n]))
        for k in range(self.params.num_dbufs):
            wiring.connect(m, req.o_edge[k], flipped(self.o_req[k]))
            wiring.connect(m, flipped(self.i_req[k]), req.i_edge[k])
            wiring.connect(m, flipped(self.i_reply[k]), rep.i_edge[k])
            wiring.connect(m, rep.o_edge[k], flipped(self.o_reply[k]))
        return m


def build_mesh(rows=4, cols=4, width=0, depth=4):
    """Return a :class:`Mesh` for ``fdpu verilog --top mesh`` (``width`` 0: the default)."""
    return Mesh(ArrayParams(rows=rows, cols=cols), width=width or None, depth=depth)


def build_noc(rows=2, cols=2, depth=4):
    """Return a :class:`Noc` for ``fdpu verilog --top noc``."""
    return Noc(ArrayParams(rows=rows, cols=cols), depth=depth)
