"""A bench-only top: :class:`hw.noc.mesh.Noc` with a :class:`hw.noc.dbuf.Dbuf` on every edge port.

Ports (the PE side of the ``Noc``): ``i_local[n]``, ``o_local[n]``, ``o_stray[n]`` per PE and
``o_reply[k]`` per edge port (reply-mesh flits addressed to an edge coordinate; a well-formed
bench sends none).  The edge request inputs (``i_req[k]``, the DMA's) are held idle.  Dbuf
``k`` takes ``o_req[k]`` and answers into ``i_reply[k]``.
"""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import flipped

from hw.noc.dbuf import Dbuf
from hw.noc.mesh import Noc
from sw.spec.arch import ArrayParams

__all__ = ["NocMemory"]


class NocMemory(wiring.Component):
    """Build the request/reply ``Noc`` of ``params`` with its Dbufs (see the module doc)."""

    #: The members of :class:`hw.noc.mesh.Noc`'s signature this top exposes.
    PORTS = ("i_local", "o_local", "o_stray", "o_reply")

    def __init__(self, params=ArrayParams(rows=2, cols=2, dbuf_bytes=128, slots=64,
                                          operand_depth=4, int_issue=1), *, depth=2,
                 reply_depth=2):
        if not isinstance(params, ArrayParams):
            raise TypeError(f"params must be an sw.spec.arch.ArrayParams, not {params!r}")
        self.params, self.depth, self.reply_depth = params, depth, reply_depth
        self.noc = Noc(params, depth=depth)
        self.dbufs = [Dbuf(params, k, reply_depth=reply_depth) for k in range(params.num_dbufs)]
        # The ports are the Noc's own PE-side members (one definition of their shapes).
        members = self.noc.signature.members
        super().__init__({name: members[name] for name in self.PORTS})

    def elaborate(self, platform):
        m = Module()
        m.submodules.noc = noc = self.noc
        for n in range(self.params.num_pes):
            wiring.connect(m, flipped(self.i_local[n]), noc.i_local[n])
            wiring.connect(m, noc.o_local[n], flipped(self.o_local[n]))
            wiring.connect(m, noc.o_stray[n], flipped(self.o_stray[n]))
        for k, dbuf in enumerate(self.dbufs):
            m.submodules[f"dbuf{k}"] = dbuf
            wiring.connect(m, noc.o_req[k], dbuf.i_req)
            wiring.connect(m, dbuf.o_reply, noc.i_reply[k])
            wiring.connect(m, noc.o_reply[k], flipped(self.o_reply[k]))
            m.d.comb += noc.i_req[k].valid.eq(0)
        return m
