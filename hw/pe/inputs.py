"""The PE's input stage: the registered mesh input and the configuration decoder.

Contract
--------
* ``i_flit``: reply-network flits addressed to this PE (OPERAND, REPLY, CONFIG).  ``ready`` is
  constantly high: the mesh never waits on the PE (DESIGN.md invariant 2, ejection never
  waits on firing).  Every flit is registered; all outputs below belong to the registered
  flit, one cycle after it was offered, and last one cycle (no handshake: the PE's operand
  write port, reply pool and instruction memory always take them).
* ``o_insn``: the instruction memory write of a CONFIG INSN flit: 64-bit part ``index`` of
  slot ``slot`` (``en`` one bit per part, ``data`` the part to replicate over the word).
* ``o_regs``: the local registers, written by CONFIG REG flits (registered here).
* ``o_cfg``: ``part0`` (a CONFIG INSN flit writes part 0 of ``slot``: the slot becomes live
  and the PE clears its state), ``slot`` and ``hot`` (``slot`` one-hot over the slots).
* ``o_slots``: per-slot flags in flip-flops, one ``slots``-bit vector per property (bit ``s``:
  slot ``s``), written when part 0 of the slot is configured and read word-wide by the ready
  vector: ``known`` (the opcode is valid and not INVALID), ``isfp`` (FP pipe), ``onp0``
  (INT pipe 0 with ``int_issue == 2``, :func:`sw.spec.isa.issue_pipe`) and ``tmask[k]``
  (operand ``k`` arrives as a token).
* ``o_token``: a token for this PE's operand buffer, from an OPERAND flit or a CONFIG PRELOAD
  flit (``valid``, ``tok``: slot, operand, data).
* ``o_reply``: a REPLY flit's body (``valid``, ``body``: tag, slot, data, err).
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.logic import equals, is_one_of
from hw.lib.select import onehot
from hw.lib.spec import check_params
from hw.noc.flit import body_layout, body_view, flit_layout
from hw.pe.layouts import insn_struct, local_layout
from sw.spec.isa import PIPE0_OPS, Op, Unit
from sw.spec.packet import ConfigWhat, Kind

__all__ = ["InputStage"]


class InputStage(wiring.Component):
    """The registered mesh input and the configuration decoder (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Slots, registers, operands and the issue pipes (``int_issue``).
    """

    def __init__(self, params):
        check_params(params)
        self._params = params
        p = params
        S, K = p.slots, p.MAX_OPERANDS
        parts = insn_struct(p).size // 64
        super().__init__({
            "i_flit": In(stream.Signature(flit_layout(p))),
            "o_insn": Out(data.StructLayout({"slot": p.slot_bits, "data": 64, "en": parts})),
            "o_regs": Out(p.TOKEN_BITS).array(p.regs),
            "o_cfg": Out(data.StructLayout({"part0": 1, "slot": p.slot_bits, "hot": S})),
            "o_slots": Out(data.StructLayout({"known": S, "isfp": S, "onp0": S,
                                              "tmask": data.ArrayLayout(S, K)})),
            "o_token": Out(data.StructLayout({"valid": 1, "tok": local_layout(p)})),
            "o_reply": Out(data.StructLayout({"valid": 1,
                                              "body": body_layout(Kind.REPLY, p)})),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._params
        S, K = p.slots, p.MAX_OPERANDS
        insn_l = insn_struct(p)
        parts = insn_l.size // 64

        fin = Signal(flit_layout(p), name="fin")
        fin_valid = Signal()
        m.d.comb += self.i_flit.ready.eq(1)
        m.d.sync += [fin_valid.eq(self.i_flit.valid), fin.eq(self.i_flit.payload)]
        kind = fin.kind

        kinds = {}

        def is_kind(k):
            # One named signal per kind: an expression used per slot would be copied per use.
            if k not in kinds:
                kinds[k] = Signal(name=f"is_{k.name.lower()}")
                m.d.comb += kinds[k].eq(fin_valid & equals(kind, int(k)))
            return kinds[k]

        # CONFIG
        cfg = body_view(fin, Kind.CONFIG, p)
        is_cfg = is_kind(Kind.CONFIG)
        cfg_insn = Signal()
        cfg_part0 = Signal()                      # part 0 makes the slot live, clears its state
        m.d.comb += [cfg_insn.eq(is_cfg & equals(cfg.what, ConfigWhat.INSN)),
                     cfg_part0.eq(cfg_insn & equals(cfg.index, 0))]
        m.d.comb += [self.o_insn.slot.eq(cfg.slot), self.o_insn.data.eq(cfg.data)]
        for j in range(parts):
            m.d.comb += self.o_insn.en[j].eq(cfg_insn & equals(cfg.index, j))
        for r in range(p.regs):
            with m.If(is_cfg & equals(cfg.what, ConfigWhat.REG) & equals(cfg.index, r)):
                m.d.sync += self.o_regs[r].eq(cfg.data)
        cfg_slot = Signal(p.slot_bits)
        m.d.comb += cfg_slot.eq(cfg.slot)
        part0 = Signal(insn_l)
        m.d.comb += part0.eq(cfg.data)
        known_op = Signal()
        fp_op = Signal()
        with m.Switch(part0.op):
            for op in Op:
                if op is not Op.INVALID:
                    with m.Case(int(op)):
                        m.d.comb += [known_op.eq(1), fp_op.eq(op.unit is Unit.FP)]
            with m.Default():
                m.d.comb += [known_op.eq(0), fp_op.eq(0)]
        given = Cat(part0.nsrc.any(), part0.nsrc[1], part0.nsrc.all())   # i < nsrc
        tm = Signal(K, name="cfg_tmask")         # (named: an expression is copied per use)
        m.d.comb += tm.eq(Cat(*[given[i] & ~part0.regmask[i] for i in range(K)]))
        # With a second INT pipe each INT/MEM/CTRL slot is given its pipe when configured:
        # LD/ST (the pool and the request port are single) and ITER slots pipe 0, the other
        # INT/CTRL slots pipe 2.  The FC graphs' ITERs are address and repeat streams that
        # feed loads and run ahead of their consumers; beside the loads they leave pipe 2 to
        # the decode and SWITCH loop of the sparse engine.  BSCAN, that loop's decode, stays
        # on pipe 2 (pipe 0 is the loads' and carries the FC graphs' repeat ITERs).  An
        # INT/CTRL slot whose word has the pipe0 hint (in part 0) goes to pipe 0 too, for a
        # graph builder to balance the pipes (the FC plans set none by default:
        # docs/mapping.md).  The pipe
        # is fixed for the slot's life: its results leave through one dispatcher in firing
        # order, and its ITER/SCAN state is read and written by one pipe.
        two_int = p.int_issue == 2
        to_p0 = Signal(name="cfg_to_p0")     # (named: an expression is copied per slot)
        if two_int:
            m.d.comb += to_p0.eq(is_one_of(part0.op, PIPE0_OPS) | part0.pipe0)  # issue_pipe
        cfg_hot = onehot(m, cfg_slot, S, "dec_cfg")
        m.d.comb += [self.o_cfg.part0.eq(cfg_part0), self.o_cfg.slot.eq(cfg_slot),
                     self.o_cfg.hot.eq(cfg_hot)]
        vecs = self.o_slots
        with m.If(cfg_part0):
            for vec, bit in ([(vecs.known, known_op), (vecs.isfp, fp_op)]
                             + [(vecs.tmask[k], tm[k]) for k in range(K)]
                             + ([(vecs.onp0, to_p0)] if two_int else [])):
                m.d.sync += vec.eq((vec & ~cfg_hot) | (cfg_hot & bit.replicate(S)))

        # Mesh tokens: OPERAND and PRELOAD.
        net_tok = self.o_token.tok
        preload = is_cfg & equals(cfg.what, ConfigWhat.PRELOAD)
        m.d.comb += self.o_token.valid.eq(is_kind(Kind.OPERAND) | preload)
        with m.If(is_kind(Kind.OPERAND)):
            tok = body_view(fin, Kind.OPERAND, p)
            m.d.comb += [net_tok.slot.eq(tok.slot), net_tok.operand.eq(tok.operand),
                         net_tok.data.eq(tok.data)]
        with m.If(preload):
            m.d.comb += [net_tok.slot.eq(cfg.slot),
                         net_tok.operand.eq(cfg.index[:2]), net_tok.data.eq(cfg.data)]

        # REPLY
        m.d.comb += [self.o_reply.valid.eq(is_kind(Kind.REPLY)),
                     self.o_reply.body.eq(body_view(fin, Kind.REPLY, p))]
        return m
