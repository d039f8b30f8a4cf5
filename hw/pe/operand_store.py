"""The operand store: every slot's operand FIFOs, their writes, reads, room and flags.

Each (slot, operand ``k``) has a FIFO of ``operand_depth`` tokens.  The tokens live in one
memory per operand index ``k`` and bank ``b`` (the slot number's low bits: ``slot[0]`` with 2
banks, ``slot[1:0]`` with 4), each with its own write port, so local deliveries to one operand
index of slots in different banks go in the same cycle; a bank is addressed by the slot's row
(its number without the bank bits) and the FIFO entry.  The FIFO pointers live in three
memories addressed by the key ``Cat(operand, slot)``, each pointer modulo ``2 * depth`` with a
single kind of writer:

* WP, the write pointer: the operand writes;
* RP, the read pointer: the consumes (firings);
* WA, the allocation pointer: mesh tokens on arrival, local results when their producer
  reserves the entry (it fires, or a load retires as an overflow entry).

Tokens present are ``WP - RP`` (more than 0 is *non-empty*); occupancy is ``WA - RP``, never
above ``depth``, so its top bit means *full*.  Every write port writes a different key in a
cycle: a reservation that races a mesh token or an earlier reservation for the same FIFO is
refused (``o_room``), and the producer tries again.

Contract
--------
* ``i_known``: bit ``s``, slot ``s`` has a known opcode.  A token for another slot is dropped
  and reported (``o_raise``).
* ``i_net`` (``valid``, ``tok``): the mesh token of this cycle (OPERAND or PRELOAD).  It is
  written when its slot is known and its FIFO has room (operand 3 never has), else dropped
  and reported; it always wins its memory's write port.
* ``i_local[j]``: the dispatchers' local ports (streams of tokens), in priority order after
  the mesh token (:class:`hw.pe.write_arbiter.OperandWriteArbiter`).  Written without a room
  check: the producer reserved the entry.
* ``i_read[pp]`` (``pick``, ``s1``): pipe ``pp``'s slot of stage S0, whose operand FIFO heads
  are read (a synchronous read), and its slot of S1, which selects the bank.
  ``o_token[pp][k]`` (S1): the head of operand ``k``'s FIFO of that slot (undefined if empty).
* ``i_consume[pp]`` (``slot``, ``ops``): pipe ``pp`` pops the head of operand ``k``'s FIFO of
  ``slot`` for each bit ``k`` of ``ops`` (the FIFO is not empty; a slot is in one pipe's S1 at
  a time).
* ``i_resv[g][i]`` (``slot``, ``operand``, ``local``, ``take``) and ``o_room[g]``: the
  reservation groups, highest priority first, each with ``dests`` entries.  ``o_room[g]``
  (combinational, not from group ``g``'s own ``take``) is high when every ``local`` entry of
  the group finds its FIFO below depth and neither the mesh token nor the ``take`` of an
  earlier group names the same FIFO this cycle.  ``take`` reserves the entry (WA + 1); the
  caller sets it only for a ``local`` entry of a group with room.
* ``i_clear`` (``valid``, ``slot``, ``hot``: ``slot`` one-hot): configuring ``slot`` zeroes its
  pointers and clears its non-empty bits.  It borrows the write ports of bank 0, pipe 0's
  consumes and the first reservations (of group 0, then the next groups), so it must not
  overlap a run (configuration precedes it).
* ``o_nonempty[k]`` (registered): bit ``s``, operand ``k``'s FIFO of slot ``s`` holds a token.
  A write wins over the last token's consume; the clear wins over both.
* ``o_raise[j]`` (``valid``, ``slot``): the errors of this cycle, setting the
  :data:`OperandStore.RAISES` flags in order: an unknown slot's mesh token, a mesh token
  finding its FIFO full, then an unknown slot's local token per memory ``(k, b)``.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.logic import any_of, equals, increment
from hw.lib.select import bit_at, onehot
from hw.lib.spec import check_params
from hw.pe.layouts import local_layout
from hw.pe.write_arbiter import OperandWriteArbiter
from sw.spec.status import PeError

__all__ = ["OperandStore"]


class OperandStore(wiring.Component):
    """The operand FIFOs of every slot (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Slots, operand depth, operands, token width.
    banks : int
        Operand memories per operand index, 2 or 4.
    ports : int
        Local write ports (``i_local``).
    pipes : int
        Issue pipes (``i_read``, ``i_consume``, ``o_token``).
    groups : int
        Reservation groups (``i_resv``, ``o_room``).
    dests : int
        Entries per reservation group.
    """

    def __init__(self, params, banks, ports, pipes, groups, dests):
        self._MustUse__silence = True      # (a rejected one is never elaborated: no warning)
        check_params(params)
        if banks not in (2, 4) or banks > params.slots:
            raise TypeError(f"banks must be 2 or 4 and at most slots, not {banks!r}")
        for name, value in (("ports", ports), ("pipes", pipes), ("groups", groups),
                            ("dests", dests)):
            if not (isinstance(value, int) and value >= 1):
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        if groups * dests + 1 < params.MAX_OPERANDS:
            raise TypeError(f"groups * dests must be at least {params.MAX_OPERANDS - 1} (a "
                            f"slot clear borrows their write ports), not {groups * dests}")
        self._params, self._banks, self._ports = params, banks, ports
        self._pipes, self._groups, self._dests = pipes, groups, dests
        p, S, K, sb = params, params.slots, params.MAX_OPERANDS, params.slot_bits
        tok = local_layout(p)
        flag = data.StructLayout({"valid": 1, "slot": sb})
        self._MustUse__silence = False
        super().__init__({
            "i_known": In(S),
            "i_net": In(data.StructLayout({"valid": 1, "tok": tok})),
            "i_local": In(stream.Signature(tok)).array(ports),
            "i_read": In(data.StructLayout({"pick": sb, "s1": sb})).array(pipes),
            "o_token": Out(p.TOKEN_BITS).array(pipes, K),
            "i_consume": In(data.StructLayout({"slot": sb, "ops": K})).array(pipes),
            "i_resv": In(data.StructLayout({"slot": sb, "operand": 2, "local": 1, "take": 1}))
            .array(groups, dests),
            "o_room": Out(1).array(groups),
            "i_clear": In(data.StructLayout({"valid": 1, "slot": sb, "hot": S})),
            "o_nonempty": Out(S).array(K),
            "o_raise": Out(flag).array(len(self.RAISES)),
        })

    @property
    def RAISES(self):
        """The :class:`~sw.spec.status.PeError` flag of each ``o_raise`` condition."""
        n = self._params.MAX_OPERANDS * self._banks
        return (PeError.UNKNOWN_OPCODE, PeError.OVERFLOW) + (PeError.UNKNOWN_OPCODE,) * n

    def elaborate(self, platform):
        m = Module()
        p, NB, NP = self._params, self._banks, self._pipes
        S, D, K = p.slots, p.operand_depth, p.MAX_OPERANDS
        lgd = D.bit_length() - 1                 # FIFO entry index bits (0 when D == 1)
        pb = lgd + 1                             # FIFO pointer bits: modulo 2 * depth
        lgb = NB.bit_length() - 1                # bank = slot[:lgb]
        known, clear = self.i_known, self.i_clear

        def fifo_addr(slot, ptr):
            # Address in a bank: the slot's row (its number without the bank bits) and entry.
            return Cat(ptr[:lgd], slot[lgb:]) if lgd else slot[lgb:]

        def key_of(k, slot):
            return Cat(Const(k, 2), slot) if isinstance(k, int) else Cat(k, slot)

        opmem = [[Memory(shape=p.TOKEN_BITS, depth=S // NB * D, init=[]) for b in range(NB)]
                 for k in range(K)]
        for k in range(K):
            for b in range(NB):
                m.submodules[f"opmem{k}_{b}"] = opmem[k][b]
        ptr_mems = {}
        for name in ("wp", "rp", "wa"):
            ptr_mems[name] = m.submodules[f"{name}_mem"] = Memory(shape=pb, depth=4 * S,
                                                                  init=[])

        def ptr_read(name, key):
            port = ptr_mems[name].read_port(domain="comb")
            m.d.comb += port.addr.eq(key)
            return port.data

        def full_of(key):
            return (ptr_read("wa", key) - ptr_read("rp", key))[lgd]

        # ---- writes: the mesh token (room-checked), then the arbitrated local tokens ------
        raises = []
        net_tok, net_valid = self.i_net.tok, self.i_net.valid
        net_key = Cat(net_tok.operand, net_tok.slot)
        net_known = bit_at(known, net_tok.slot)
        net_full = full_of(net_key) | net_tok.operand.all()     # (operand 3 does not exist)
        net_ok = Signal(name="net_ok")
        m.d.comb += net_ok.eq(net_valid & net_known & ~net_full)
        wa_net = ptr_mems["wa"].write_port()
        m.d.comb += [wa_net.addr.eq(net_key), wa_net.data.eq(increment(ptr_read("wa", net_key))),
                     wa_net.en.eq(net_ok)]
        raises += [(net_valid & ~net_known, net_tok.slot),
                   (net_valid & net_known & net_full, net_tok.slot)]

        m.submodules.arbiter = arbiter = OperandWriteArbiter(p, NB, self._ports)
        m.d.comb += [arbiter.i_net.valid.eq(net_valid), arbiter.i_net.tok.eq(net_tok)]
        for port, local in zip(self.i_local, arbiter.i_local):
            wiring.connect(m, wiring.flipped(port), local)
        wp_w = [[ptr_mems["wp"].write_port() for b in range(NB)] for k in range(K)]
        set_ = [[] for k in range(K)]
        for k in range(K):
            for b in range(NB):
                grant = arbiter.o_grant[k][b]
                sel = grant.tok
                # A local token goes to a known slot; the reservation made at issue gives room.
                local_known = bit_at(known, sel.slot)
                ok = Signal(name=f"wr_en{k}_{b}")
                slot = Signal(p.slot_bits, name=f"wr_slot{k}_{b}")
                m.d.comb += [ok.eq(grant.valid & Mux(grant.net, net_ok, local_known)),
                             slot.eq(sel.slot)]
                tail = ptr_read("wp", key_of(k, slot))
                opw = opmem[k][b].write_port()
                w = wp_w[k][b]
                m.d.comb += [opw.addr.eq(fifo_addr(slot, tail)), opw.data.eq(sel.data),
                             opw.en.eq(ok),
                             w.addr.eq(key_of(k, slot)), w.data.eq(increment(tail)), w.en.eq(ok)]
                raises.append((grant.valid & ~grant.net & ~local_known, sel.slot))
                bank = Const(sum(1 << s for s in range(b, S, NB)), S)
                set_[k].append(onehot(m, slot, S, f"wr_hot{k}_{b}") & ok.replicate(S) & bank)

        # ---- reservations, in group priority order ----------------------------------------
        # A group's entry clashes with the mesh token and with the takes of earlier groups.
        wa_ports = []
        for g, group in enumerate(self.i_resv):
            terms = []
            for i, entry in enumerate(group):
                key = Signal(p.slot_bits + 2, name=f"resv_key{g}_{i}")
                m.d.comb += key.eq(Cat(entry.operand, entry.slot))
                clash = net_valid & (net_key == key)
                for earlier in self.i_resv[:g]:
                    for e in earlier:
                        clash = clash | (e.take & (Cat(e.operand, e.slot) == key))
                terms.append(~entry.local | (~full_of(key) & ~clash))
                w = ptr_mems["wa"].write_port()
                m.d.comb += [w.addr.eq(key), w.data.eq(increment(ptr_read("wa", key))),
                             w.en.eq(entry.take)]
                wa_ports.append(w)
            m.d.comb += self.o_room[g].eq(Cat(*terms).all())

        for k, w in enumerate((wa_ports + [wa_net])[:K]):    # (the clear's WA writes)
            with m.If(clear.valid):
                m.d.comb += [w.addr.eq(key_of(k, clear.slot)), w.en.eq(1), w.data.eq(0)]

        # ---- reads and consumes ------------------------------------------------------------
        clr = [[] for k in range(K)]
        for pp in range(NP):
            pick, s1 = self.i_read[pp].pick, self.i_read[pp].s1
            for k in range(K):
                head = fifo_addr(pick, ptr_read("rp", key_of(k, pick)))
                reads = [opmem[k][b].read_port() for b in range(NB)]
                m.d.comb += [r.addr.eq(head) for r in reads]
                token = self.o_token[pp][k]
                if NB == 2:
                    m.d.comb += token.eq(Mux(s1[0], reads[1].data, reads[0].data))
                else:
                    with m.Switch(s1[:lgb]):
                        for b in range(NB):
                            with m.Case(b):
                                m.d.comb += token.eq(reads[b].data)
            cons = self.i_consume[pp]
            for k in range(K):
                key = key_of(k, cons.slot)
                rpv = ptr_read("rp", key)
                w = ptr_mems["rp"].write_port()
                last = Signal(name=f"cons_last{pp}_{k}")
                m.d.comb += [w.addr.eq(key), w.data.eq(increment(rpv)), w.en.eq(cons.ops[k]),
                             last.eq(equals((ptr_read("wp", key) - rpv)[:pb], 1))]
                if pp == 0:
                    with m.If(clear.valid):
                        m.d.comb += [w.addr.eq(key_of(k, clear.slot)), w.en.eq(1), w.data.eq(0)]
                clr[k].append((cons.ops[k] & last).replicate(S))
            hot = onehot(m, cons.slot, S, f"cons_hot{pp}")
            for k in range(K):
                clr[k][-1] = hot & clr[k][-1]

        # ---- the clear of a configured slot: write pointers; the non-empty bits ----------
        for k in range(K):
            with m.If(clear.valid):
                m.d.comb += [wp_w[k][0].addr.eq(key_of(k, clear.slot)), wp_w[k][0].en.eq(1),
                             wp_w[k][0].data.eq(0)]
            ne = self.o_nonempty[k]
            m.d.sync += ne.eq(((ne & ~any_of(clr[k])) | any_of(set_[k]))
                              & ~(clear.hot & clear.valid.replicate(S)))
        for port, (cond, slot) in zip(self.o_raise, raises):
            m.d.comb += [port.valid.eq(cond), port.slot.eq(slot)]
        return m
