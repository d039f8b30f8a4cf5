"""The PE's load/store reorder pool: replies of any order, results in each slot's issue order.

``entries`` (a power of two) entries are shared by all slots.  A load or store takes a free
entry when it is sent; the request's ``tag`` and ``slot`` fields carry the entry number (low
bits in ``tag``), the Dbuf echoes them, the REPLY writes the entry and marks it replied (a
LDHBZ of address 0 is entered as replied at issue, with its ``zero`` bit, and sends nothing).
Each slot's entries form a list in issue order (a successor link per entry, the slot's last
entry in a per-slot tail memory); ``first`` marks the oldest entry of its slot.  An entry
retires when it is first and its reply is in: in issue order within a slot, in any order
between slots (a slow Dbuf holds up only its own slot).

Contract
--------
* Issue (pipe 0's S1): ``i_slot`` is the slot in S1 (its last entry is looked up at once);
  ``o_free`` (``any``, ``idx``) is the entry an access would take this cycle; ``o_ovf_mode``:
  the slot's last entry in the pool is an overflow entry (so must this one be);
  ``o_ovf_free``: fewer than ``entries / 2`` overflow entries are in the pool.  With
  ``i_issue.valid`` the access takes entry ``o_free.idx`` with its context ID ``ectx``, its
  retire ``lane``, whether it reserved its destinations (``resv``; else it is an *overflow*
  entry that reserves them when it retires) and ``zero`` (a LDHBZ of address 0: replied
  now, its result is 0).  Overflow entries are at most ``entries / 2``, so that accesses
  with room always find an entry (docs/pe.md, "Why it cannot deadlock").
* Replies (``i_reply``, the input stage's REPLY): fill the entry ``Cat(tag, slot)`` at once;
  ``o_reply_slot`` is that entry's slot (for the DBUF_ERROR status).
* Retirement, two lanes (one per memory dispatcher): each lane picks (R0, round robin) a
  retirable entry of its lane, reads its reply, and in R1 offers it on ``o_retire[j]``
  (``valid``, ``idx``, ``ectx``, ``resv``, ``zero``, ``data``: the reply's 64 bits);
  ``pick_slot`` is the slot of the R0 pick, whose instruction the PE reads for R1.
  ``i_retire_go[j]`` retires the R1 entry (its successor becomes first); an R1 that does not
  go is dropped: the entry stays and is picked again (never while it is in R1).  Entries
  retire one cycle after R1 at the earliest; a retiring entry's slot may issue in the same
  cycle (it is then not linked behind the leaving entry).
* ``o_alloc``: the entries in use (diagnosis).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.select import bit_at, first_set, onehot, round_robin
from hw.lib.spec import check_params
from hw.noc.flit import body_layout
from sw.spec.packet import Kind

__all__ = ["ReorderPool"]


class ReorderPool(wiring.Component):
    """The load/store reorder pool (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Slots and the flit layout.
    entries : int
        Pool entries, a power of two of at least 2.
    """

    def __init__(self, params, entries):
        check_params(params)
        if not (isinstance(entries, int) and entries >= 2 and entries & (entries - 1) == 0):
            raise TypeError(f"entries must be a power of two of at least 2, not {entries!r}")
        self._params, self._entries = params, entries
        sb, lgp = params.slot_bits, entries.bit_length() - 1
        super().__init__({
            "i_slot": In(sb),
            "i_issue": In(data.StructLayout({"valid": 1, "ectx": 32, "lane": 1, "resv": 1,
                                             "zero": 1})),
            "o_free": Out(data.StructLayout({"any": 1, "idx": lgp})),
            "o_ovf_mode": Out(1),
            "o_ovf_free": Out(1),
            "i_reply": In(data.StructLayout({"valid": 1, "body": body_layout(Kind.REPLY,
                                                                              params)})),
            "o_reply_slot": Out(sb),
            "o_retire": Out(data.StructLayout({"valid": 1, "idx": lgp, "pick_slot": sb,
                                               "ectx": 32, "resv": 1, "zero": 1,
                                               "data": 64})).array(2),
            "i_retire_go": In(1).array(2),
            "o_alloc": Out(entries),
        })

    def elaborate(self, platform):
        m = Module()
        p, P = self._params, self._entries
        S, sb = p.slots, p.slot_bits
        lgp = P.bit_length() - 1

        alloc = Signal(P, name="pool_alloc")          # entry in use
        pvalid = Signal(P, name="pvalid")             # ... and its reply has arrived
        first = Signal(P, name="pool_first")          # ... and it is its slot's oldest
        has_nxt = Signal(P, name="pool_has_nxt")      # ... and a younger one follows
        lane = Signal(P, name="pool_lane")            # ... and retires on memory lane 1
        resv = Signal(P, name="pool_resv")            # ... its destinations reserved at issue
        m.d.comb += self.o_alloc.eq(alloc)
        m.submodules.pool_data = pool_data = Memory(
            shape=data.StructLayout({"data": 64, "err": 1}), depth=P, init=[])
        m.submodules.pool_info = pool_info = Memory(
            shape=data.StructLayout({"slot": sb, "ectx": 32, "zero": 1}), depth=P, init=[])
        pool_info_w = pool_info.write_port()
        m.submodules.pool_nxt = pool_nxt = Memory(shape=lgp, depth=P, init=[])
        m.submodules.pool_ptail = pool_ptail = Memory(shape=lgp, depth=S, init=[])
        # Overflow entries (issued without room, `resv` clear), at most P/2 of them.
        novf = Signal(lgp + 1, name="pool_novf")
        m.d.comb += self.o_ovf_free.eq(~novf[lgp - 1:].any())         # novf < P / 2
        ret_go = [Signal(name=f"ret_go{j}") for j in range(2)]       # entry `ret_idx[j]`
        ret_idx = [Signal(lgp, name=f"ret_idx{j}") for j in range(2)]  # retires on lane j
        free_any, free_idx = first_set(m, ~alloc, "pool_free")
        m.d.comb += [self.o_free.any.eq(free_any), self.o_free.idx.eq(free_idx)]

        # Issue: the new entry, linked behind the slot's last one if that one is still in the
        # pool (and not retiring right now); otherwise it is the slot's oldest.
        issue = self.i_issue.valid
        pool_link = Signal(name="pool_link")         # ... behind entry pool_link_to
        pool_link_to = Signal(lgp, name="pool_link_to")
        m.d.comb += [pool_info_w.addr.eq(free_idx), pool_info_w.en.eq(issue),
                     pool_info_w.data.slot.eq(self.i_slot),
                     pool_info_w.data.ectx.eq(self.i_issue.ectx),
                     pool_info_w.data.zero.eq(self.i_issue.zero)]
        pt_r = pool_ptail.read_port(domain="comb")
        pt_w = pool_ptail.write_port()
        last_info = pool_info.read_port(domain="comb")
        m.d.comb += [pt_r.addr.eq(self.i_slot), last_info.addr.eq(pt_r.data),
                     pt_w.addr.eq(self.i_slot), pt_w.data.eq(free_idx),
                     pt_w.en.eq(issue)]
        m.d.comb += pool_link.eq(bit_at(alloc, pt_r.data)
                                 & (last_info.data.slot == self.i_slot)
                                 & ~Cat(*[ret_go[j] & (ret_idx[j] == pt_r.data)
                                          for j in range(2)]).any())
        m.d.comb += pool_link_to.eq(pt_r.data)
        m.d.comb += self.o_ovf_mode.eq(pool_link & ~bit_at(resv, pt_r.data))
        ovf_issue = issue & ~self.i_issue.resv       # an overflow load is sent this cycle
        nxt_w = pool_nxt.write_port()
        m.d.comb += [nxt_w.addr.eq(pt_r.data), nxt_w.data.eq(free_idx),
                     nxt_w.en.eq(issue & pool_link)]

        # Replies.
        rep = self.i_reply.body
        is_rep = self.i_reply.valid
        rep_idx = Signal(lgp, name="rep_idx")
        pool_dw = pool_data.write_port()
        rep_info = pool_info.read_port(domain="comb")
        m.d.comb += rep_idx.eq(Cat(rep.tag, rep.slot)[:lgp])
        m.d.comb += [pool_dw.addr.eq(rep_idx), rep_info.addr.eq(rep_idx)]
        m.d.comb += [pool_dw.data.data.eq(rep.data), pool_dw.data.err.eq(rep.err),
                     pool_dw.en.eq(is_rep)]
        m.d.comb += self.o_reply_slot.eq(rep_info.data.slot)

        # Two retire lanes: R0 picks, R1 offers.
        ready_e = Signal(P, name="pool_ready")      # retirable entries
        m.d.comb += ready_e.eq(alloc & pvalid & first)
        nxt_r, nxt_live, ovf_ret = [], [], []
        for j in range(2):
            out = self.o_retire[j]
            r1_valid = Signal(name=f"r1_valid{j}")
            r1_idx = Signal(lgp, name=f"r1_idx{j}")
            r1_ectx = Signal(32, name=f"r1_ectx{j}")
            r1_resv = Signal(name=f"r1_resv{j}")
            r1_zero = Signal(name=f"r1_zero{j}")      # a skipped LDHBZ: the result is 0
            in_r1 = onehot(m, r1_idx, P, f"pool_r1_{j}")
            mine = Signal(P, name=f"retire_mine{j}")
            m.d.comb += mine.eq(ready_e & (lane if j else ~lane)
                                & ~(in_r1 & r1_valid.replicate(P)))
            any_ret, ret_pick, ret_last = round_robin(m, mine, f"retire{j}")
            with m.If(any_ret):
                m.d.sync += ret_last.eq(ret_pick)
            ret_info = pool_info.read_port(domain="comb")
            nr = pool_nxt.read_port(domain="comb")
            pool_r = pool_data.read_port()
            m.d.comb += [ret_info.addr.eq(ret_pick), pool_r.addr.eq(ret_pick),
                         out.pick_slot.eq(ret_info.data.slot), nr.addr.eq(r1_idx)]
            m.d.sync += [r1_valid.eq(any_ret), r1_idx.eq(ret_pick),
                         r1_ectx.eq(ret_info.data.ectx), r1_resv.eq(bit_at(resv, ret_pick)),
                         r1_zero.eq(ret_info.data.zero)]
            m.d.comb += [out.valid.eq(r1_valid), out.idx.eq(r1_idx), out.ectx.eq(r1_ectx),
                         out.resv.eq(r1_resv), out.zero.eq(r1_zero),
                         out.data.eq(pool_r.data.data)]
            m.d.comb += [ret_go[j].eq(self.i_retire_go[j]), ret_idx[j].eq(r1_idx)]
            nxt_r.append(nr.data)
            nxt_live.append(bit_at(has_nxt, r1_idx))
            ovf_ret.append(ret_go[j] & ~r1_resv)
        # (Two counters modulo 2P, sent and retired, so no narrow operand is subtracted.)
        n_sent = Signal(lgp + 1, name="pool_ovf_sent")
        n_done = Signal(lgp + 1, name="pool_ovf_done")
        m.d.sync += [n_sent.eq(n_sent + ovf_issue), n_done.eq(n_done + ovf_ret[0] + ovf_ret[1])]
        m.d.comb += novf.eq(n_sent - n_done)
        # Entry bookkeeping: allocation (free_idx), its link (pool_link_to), the reply
        # (rep_idx) and the retirements (ret_idx, whose successors become first) touch
        # different entries in a cycle (a retiring entry is first, its successor is not).
        # Each vector is updated as a whole (x = (x & ~clear) | set, in the order of the
        # writes: the new entry, the reply, the link, then lane 0's and lane 1's retirement).
        def rep_p(bit):
            return bit.replicate(P)

        new = onehot(m, free_idx, P, "pool_new") & rep_p(issue)
        lnk = onehot(m, pool_link_to, P, "pool_lnk") & rep_p(issue & pool_link)
        got = onehot(m, rep_idx, P, "pool_rep") & rep_p(is_rep)
        ret = [onehot(m, ret_idx[j], P, f"pool_ret{j}") & rep_p(ret_go[j]) for j in range(2)]
        nxt = [onehot(m, nxt_r[j], P, f"pool_nx{j}") & rep_p(ret_go[j] & nxt_live[j])
               for j in range(2)]

        def load(vec, bit):
            return (vec & ~new) | (new & rep_p(bit))

        first_nx = load(first, ~pool_link)
        for j in range(2):
            first_nx = (first_nx & ~ret[j]) | nxt[j]
        m.d.sync += [alloc.eq((alloc | new) & ~ret[0] & ~ret[1]),
                     pvalid.eq(load(pvalid, self.i_issue.zero) | got),
                     first.eq(first_nx),
                     has_nxt.eq((has_nxt & ~new) | lnk),
                     lane.eq(load(lane, self.i_issue.lane)),
                     resv.eq(load(resv, self.i_issue.resv))]
        return m
