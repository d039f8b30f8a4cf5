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

from hw.lib.select import onehot
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
        M = K * NB                               # operand memories, numbered k * NB + b
        lgb = NB.bit_length() - 1                # bank = slot[:lgb]
        net_valid, net_tok = self.i_net.valid, self.i_net.tok
        ports = list(self.i_local)
        srcs = [(net_valid, net_tok)] + [(port.valid, port.payload) for port in ports]
        n = len(srcs)

        # Each source names one memory (none for an operand index of K or more): its number
        # and that number one-hot, computed once per source; the priority is a running mask
        # of the memories taken by the sources before it (word operations, not one test per
        # source, memory and bit).
        hot, wins = [], []
        taken = Const(0, M)
        for j, (valid, tok) in enumerate(srcs):
            h = onehot(m, Cat(tok.slot[:lgb], tok.operand), M, f"wr_hot_src{j}")
            free = Signal(name=f"wr_free{j}")
            win = Signal(name=f"wr_win{j}")
            m.d.comb += [free.eq((h & ~taken).any()), win.eq(valid & free)]
            if j < n - 1:
                t = Signal(M, name=f"wr_taken{j}")
                m.d.comb += t.eq(taken | (h & valid.replicate(M)))
                taken = t
            hot.append(h)
            wins.append((win, free))
        granted = Signal(M, name="wr_granted")
        m.d.comb += granted.eq(taken | (hot[-1] & srcs[-1][0].replicate(M)))

        # The winning source of each memory, by number (at most one wins a memory).
        idx = [Signal(range(n), name=f"wr_src{i}") for i in range(M)]
        for j in range(n):
            for i in range(M):
                with m.If(wins[j][0] & hot[j][i]):
                    m.d.comb += idx[i].eq(j)
        for k in range(K):
            for b in range(NB):
                i = k * NB + b
                grant = self.o_grant[k][b]
                with m.Switch(idx[i]):
                    for j, (valid, tok) in enumerate(srcs[:-1]):
                        with m.Case(j):
                            m.d.comb += grant.tok.eq(tok)
                    with m.Default():
                        m.d.comb += grant.tok.eq(srcs[-1][1])
                # (The enables as continuous assignments: Icarus runs no `always @*` block at
                # time 0.)
                m.d.comb += [grant.valid.eq(granted[i]),
                             grant.net.eq(net_valid & hot[0][i])]
        # A local port is ready when its operand memory port is free of the sources before it.
        for j, port in enumerate(ports, start=1):
            m.d.comb += port.ready.eq(wins[j][1])
        return m
