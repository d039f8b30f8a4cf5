"""The operand write arbiters: one grant per operand memory and cycle, the mesh token first.

The PE has one operand memory per operand index ``k`` and bank ``b`` (the slot number's low
bits), each with one write port.  Tokens come from the mesh (OPERAND and PRELOAD flits, which
never wait: the mesh is never stalled by the PE) and from the dispatchers' local ports
(results for this PE's own slots).

Contract
--------
* ``i_net`` (``valid``, ``tok``): the mesh token of this cycle; it always wins its memory's
  port (it has no ready: the PE takes it or drops it as an overflow).
* ``i_local[j]``: the dispatchers' local ports, streams of tokens (slot, operand, data), in
  priority order after the mesh token.  ``ready`` is high when the port's operand memory
  granted it this cycle (combinationally from the ``valid`` of the mesh token and of the
  ports before it, never from its own ``valid``).  Tokens for different memories go in the
  same cycle.
* ``o_grant[k][b]`` (``valid``, ``net``, ``tok``): the token written into memory ``(k, b)``
  this cycle, if any (``valid``), and whether it is the mesh token (``net``); the PE checks
  and writes it.
"""

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals
from hw.lib.spec import check_params
from hw.pe.layouts import local_layout

__all__ = ["OperandWriteArbiter"]


class OperandWriteArbiter(wiring.Component):
    """Fixed-priority arbiters of the operand memories' write ports (module docstring).

    Parameters
    ----------
    params : ArrayParams
        Slots and operands.
    banks : int
        Operand memories per operand index: 2 (bank = ``slot[0]``) or 4 (``slot[1:0]``).
    ports : int
        Local ports (``i_local``), highest priority first.
    """

    def __init__(self, params, banks, ports):
        check_params(params)
        if banks not in (2, 4):
            raise TypeError(f"banks must be 2 or 4, not {banks!r}")
        self._params, self._banks, self._ports = params, banks, ports
        tok = local_layout(params)
        grant = data.StructLayout({"valid": 1, "net": 1, "tok": tok})
        super().__init__({
            "i_net": In(data.StructLayout({"valid": 1, "tok": tok})),
            "i_local": In(stream.Signature(tok)).array(ports),
            "o_grant": Out(grant).array(params.MAX_OPERANDS, banks),
        })

    def elaborate(self, platform):
        m = Module()
        K, NB = self._params.MAX_OPERANDS, self._banks
        lgb = NB.bit_length() - 1                # bank = slot[:lgb]
        net_valid, net_tok = self.i_net.valid, self.i_net.tok
        ports = list(self.i_local)
        srcs = [(net_valid, net_tok)] + [(port.valid, port.payload) for port in ports]

        def targets(tok, k, b):
            if NB == 2:
                return equals(tok.operand, k) & (tok.slot[0] if b else ~tok.slot[0])
            return equals(tok.operand, k) & equals(tok.slot[:lgb], b)

        # Priority per operand memory port: the mesh token, then the local ports in order.
        # before[j][k][b]: a source ahead of source j wants port (k, b).
        before = [[[Const(0, 1)] * NB for k in range(K)]]
        for j, (valid, tok) in enumerate(srcs[:-1]):
            row = []
            for k in range(K):
                row.append([])
                for b in range(NB):
                    t = Signal(name=f"wr_taken{j}_{k}_{b}")
                    m.d.comb += t.eq(before[j][k][b] | (valid & targets(tok, k, b)))
                    row[k].append(t)
            before.append(row)
        for k in range(K):
            for b in range(NB):
                grant = self.o_grant[k][b]
                for j, (valid, tok) in enumerate(srcs):
                    with m.If(valid & targets(tok, k, b) & ~before[j][k][b]):
                        m.d.comb += grant.tok.eq(tok)
                # (The enables as continuous assignments: Icarus runs no `always @*` block at
                # time 0.)
                m.d.comb += [grant.valid.eq(before[-1][k][b]
                                            | (srcs[-1][0] & targets(srcs[-1][1], k, b))),
                             grant.net.eq(net_valid & targets(net_tok, k, b))]
        # A local port is ready when its operand memory port granted it this cycle.
        for j, port in enumerate(ports, start=1):
            tok = port.payload
            m.d.comb += port.ready.eq(Cat(*[targets(tok, k, b) & ~before[j][k][b]
                                           for k in range(K) for b in range(NB)]).any())
        return m
