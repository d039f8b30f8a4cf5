r"""The FDPU processing element: instruction and operand buffers, dataflow issue, 2-3 pipes.

Execution model: the :mod:`sw.spec.isa` and :mod:`sw.spec.packet` docstrings; design notes,
figures and reasoning in ``docs/pe.md``.

Structure (the components, ``hw/pe/<file>.py``, in brackets)::

                 i_flit (reply network: OPERAND, REPLY, CONFIG), always ready
                   |
          [InputStage]--CONFIG-->  insn mem (slots x 64-bit parts), regs, slot flags, PRELOAD
                   |--REPLY---->  [ReorderPool] (pool entries, per-slot issue order)
                   |                 --> retire lane 0 --> dispatch M0
                   |                 --> retire lane 1 --> dispatch M1
                   |--OPERAND--+
                               v
   dispatch I/F/M0/M1/I2 local -> [OperandStore]: [OperandWriteArbiter], operand memories
                                  per operand index and bank, FIFO pointers WP/RP/WA,
                                  non-empty bits, reservations (room)
                               |
      ready vector --> [SlotPicker] INT --> S1: [OperandSelect] --> [IntStep] -> IntAlu (2) ->|
                   |                           \--> [MemRequest] -> o_req, [ReorderPool]    |
                   |-> [SlotPicker] FP  --> S1: [OperandSelect] --> [FpStep] -> SimdFpu (4) ->|
                   \-> [SlotPicker] INT2 -> S1: [OperandSelect] --> [IntStep] -> IntAlu (2) ->|
                     [SlotState]: END counts, SCAN/ITER/BSCAN/BPOS and FACC state per slot   |
                     [Dispatcher] I, F, I2 (unit results) <-------------------------------------+
                       local destinations -> the operand store; others -> [ReplyPort] -> o_rep
                     [ErrorLatch]: sticky error flags -> o_error

:class:`Pe` owns the instruction memory and the busy and no-room slot flags, decides each
pipe's firing (room, unit ready, for LD/ST a request FIFO place and a pool entry) and runs the
retire lanes; each component's contract is in its module docstring.

Contract
--------
* ``i_coord`` (unless built with a constant ``x, y``): this PE's column and row, not biased
  (:func:`hw.pe.layouts.coord_layout`); a run-time input, so every PE is the same module.
* ``i_flit``: reply-network flits addressed to this PE; ``ready`` is constantly high (DESIGN.md
  invariant 2: ejection never waits on firing).  A registered input stage sinks one flit per
  cycle: OPERAND tokens win the write port of their operand memory over local results;
  CONFIG writes the instruction part / register or pushes a PRELOAD token (configuring part
  0 of a slot clears its FIFO pointers, END count, INT and FACC state: configuration
  precedes the run); REPLY fills its reorder pool entry, allocated at issue.
* ``o_req``: LOAD/STORE flits (request network); the ``tag`` and ``slot`` fields carry the
  pool entry (the Dbuf echoes them).  ``o_rep``: OPERAND flits to other PEs and CTX_END
  flits to the MicC (reply network).  Both stream rules-abiding FIFO outputs.  END
  messages of one context that follow each other within 16 cycles, or wait while ``o_rep``
  is blocked, leave as one CTX_END flit with a ``count``
  (:class:`hw.pe.dispatch.ReplyPort`).
* Firing: a slot is *ready* when its opcode is known, the FIFO of every token operand it
  needs holds a token, and it is not busy (a FACC with a step in flight, an ITER, BSCAN or
  BPOS emitting: it is picked again as a *continuation*, one token per pick).  A FACC with a
  count operand needs operand 2 only at the first step of each accumulation (the per-slot
  flip-flop vector ``cmid_v``: the slot's FACC count is not 0); the later steps neither wait
  for nor take it.  Each cycle a round-robin picker per pipe chooses one ready slot of that
  pipe (FP slots: the FP pipe; INT slots: pipe 0, or with ``params.int_issue == 2`` LD/ST and
  ITER slots and those whose instruction has the ``pipe0`` hint pipe 0, the others, BSCAN
  and BPOS included, pipe 2, fixed when the slot is configured); one cycle later (S1) the
  instruction fires if each *local* destination FIFO has room (occupancy counts tokens
  present plus results reserved in flight), its unit accepts, and for LD/ST the request FIFO
  has room and the pool a free entry; otherwise it is dropped and picked again.  Each slot's
  results leave in firing order; each slot's load/store results in issue order (not across
  slots).  A firing that emits nothing (an ITER whose token count is 0, a BPOS of no set bit)
  serves no destination and reserves no room; the slot does not become busy.
* ``LDHBZ`` of an address token whose low 32 bits are 0 sends no request (needs no
  request FIFO room, checks no address): it takes its pool entry like any load and retires
  the token 0 in its slot's issue order; other addresses load as ``LDHB``.
* Remote destinations are not checked; a mesh token finding its FIFO full is dropped and sets
  the sticky OVERFLOW flag; a FACC count operand of 0 sets BAD_COUNT (the step is done as
  if the count were 1).  Errors (:class:`sw.spec.status.PeError`) are sticky in
  ``o_error.flags``; ``o_error.slot`` is the slot of the first one.
* ``o_fire``: one pulse per instruction fired on each pipe with its opcode (for counting):
  ``int_*``, ``fp_*`` and, with ``int_issue == 2``, ``int2_*``.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.fifo import StreamFIFO
from hw.lib.logic import all_of, any_of, equals, is_one_of
from hw.lib.select import onehot
from hw.lib.spec import check_params
from hw.noc.flit import flit_layout
from hw.pe.alu import IntAlu
from hw.pe.dispatch import Dispatcher, ReplyPort
from hw.pe.errors import ErrorLatch
from hw.pe.fp_step import NEG_ZERO4, FpStep
from hw.pe.fpu import SimdFpu
from hw.pe.inputs import InputStage
from hw.pe.int_step import IntStep
from hw.pe.layouts import (PeError, coord_layout, error_layout, fp_tag_layout,
                           insn_dest, insn_struct, int_tag_layout)
from hw.pe.operand_store import OperandStore
from hw.pe.operands import OperandSelect
from hw.pe.pick import SlotPicker
from hw.pe.pool import ReorderPool
from hw.pe.request import MemRequest
from hw.pe.slot_state import SlotState
from sw.spec.arch import ArrayParams
from sw.spec.isa import Op
from sw.spec.packet import TAG_BITS

__all__ = ["Pe", "make_pe", "NEG_ZERO4"]

# The memory operations by the ISA's own classification (LDHBZ, is opcode 39, past
# the stores: no opcode range holds exactly the loads).
_LOADS = tuple(op for op in Op if op.is_load)
_STORES = tuple(op for op in Op if op.is_store)
BANKS = 4
"""Default operand memory banks per operand index (``Pe(banks=...)``)."""


class Pe(wiring.Component):
    """One processing element (see the module docstring).

    Parameters
    ----------
    params : ArrayParams
        Array configuration (slots, operand depth, registers, address map, ...).
    x, y : int or None
        This PE's coordinate as constants, or ``None`` (default): the coordinate is the input
        port ``i_coord``, so that every PE of an array is the same Verilog module.
    micc : tuple of int
        Coordinate of the MicC (CTX_END destination), default ``(-1, 0)`` (west edge); the
        same for every PE.
    pool : int
        Entries of the load/store reorder pool (power of two, default 32): the loads and
        stores the PE keeps in flight, shared by all slots.
    banks : int
        Operand memories (banks) per operand index, 2 (bank = ``slot[0]``) or 4 (bank =
        ``slot[1:0]``); default :data:`BANKS`.  Each bank has its own write port, so local
        deliveries to one operand index of slots in different banks go in the same cycle.

    Attributes
    ----------
    i_coord : In(coord_layout(params))
        Only when ``x``, ``y`` are ``None``: this PE's column ``x`` and row ``y`` (not biased);
        drive it with constants.
    i_flit : In(stream.Signature(hw.noc.flit.flit_layout(params)))
    o_req, o_rep : Out(stream.Signature(hw.noc.flit.flit_layout(params)))
    o_error : Out(error_layout(params))
    o_fire : Out(...)
        ``int_valid``/``int_op`` and ``fp_valid``/``fp_op`` (and ``int2_valid``/``int2_op``
        when ``params.int_issue == 2``): the instructions fired this cycle.
    """

    def __init__(self, params=None, x=None, y=None, micc=(-1, 0), pool=32, banks=BANKS):
        # A rejected PE is never elaborated: no "created but never used" warning for it.
        self._MustUse__silence = True
        params = ArrayParams() if params is None else params
        check_params(params)
        if (x is None) != (y is None):
            raise ValueError(f"give both x and y (a fixed coordinate) or neither (the "
                             f"i_coord port), not x={x!r}, y={y!r}")
        if x is not None and not (isinstance(x, int) and 0 <= x < params.cols
                                  and isinstance(y, int) and 0 <= y < params.rows):
            raise ValueError(f"PE coordinate ({x!r}, {y!r}) is outside the "
                             f"{params.rows}x{params.cols} array")
        if (not isinstance(micc, tuple) or len(micc) != 2
                or not (-1 <= micc[0] <= params.cols and -1 <= micc[1] <= params.rows)):
            raise ValueError(f"micc must be an (x, y) coordinate in -1..cols, -1..rows, "
                             f"not {micc!r}")
        most = 1 << (TAG_BITS + params.slot_bits)
        if not (isinstance(pool, int) and 2 <= pool <= most and pool & (pool - 1) == 0):
            raise ValueError(f"pool must be a power of two from 2 to {most} (the request's "
                             f"tag and slot fields number the entries), not {pool!r}")
        if banks not in (2, 4) or banks > params.slots:
            raise ValueError(f"banks must be 2 or 4 (operand memories per operand index, by "
                             f"the slot number's low bits) and at most slots "
                             f"({params.slots}), not {banks!r}")
        self._params, self._x, self._y, self._micc = params, x, y, micc
        self._pool, self._banks = pool, banks
        flit = flit_layout(params)
        ports = {
            "i_flit": In(stream.Signature(flit)),
            "o_req": Out(stream.Signature(flit)),
            "o_rep": Out(stream.Signature(flit)),
            "o_error": Out(error_layout(params)),
            "o_fire": Out(data.StructLayout({"int_valid": 1, "int_op": 6,
                                             "fp_valid": 1, "fp_op": 6}
                                            | ({"int2_valid": 1, "int2_op": 6}
                                               if params.int_issue == 2 else {}))),
        }
        if x is None:
            ports["i_coord"] = In(coord_layout(params))
        self._MustUse__silence = False
        super().__init__(ports)

    @property
    def banks(self):
        """The operand memory banks per operand index (2 or 4)."""
        return self._banks

    @property
    def params(self):
        """The :class:`~sw.spec.arch.ArrayParams` of the PE."""
        return self._params

    def elaborate(self, platform):
        m = Module()
        p = self._params
        S, K, ND = p.slots, p.MAX_OPERANDS, p.MAX_DESTS
        insn_l = insn_struct(p)
        # Pipes: 0 INT/MEM/CTRL, 1 FP, 2 a second INT/CTRL pipe (no loads/stores) when
        # params.int_issue == 2.  A slot is never in two pipes' S1 at once.
        NP = 3 if p.int_issue == 2 else 2
        int_pipes = (0, 2) if NP == 3 else (0,)
        decoders = {}

        def hot(sig):
            # One shared one-hot decode per slot signal: the per-slot flip-flops below are
            # updated as whole vectors, `x = (x & ~clear) | set`, with masks built from these.
            if id(sig) not in decoders:
                decoders[id(sig)] = (sig, onehot(m, sig, S, f"dec{len(decoders)}"))
            return decoders[id(sig)][1]

        # The coordinate: a run-time input (one module for all PEs) or constants.
        coord = Signal(coord_layout(p), name="coord")
        if self._x is None:
            m.d.comb += coord.eq(self.i_coord)
        else:
            m.d.comb += [coord.x.eq(self._x), coord.y.eq(self._y)]
        # The parts below share what they make through `ns` (names as in one function).
        ns = SimpleNamespace(p=p, S=S, K=K, ND=ND, NP=NP, coord=coord, insn_l=insn_l,
                             int_pipes=int_pipes, hot=hot)
        self._storage(m, ns)
        self._units(m, ns)
        self._pick(m, ns)
        self._issue(m, ns)
        alus, busy, clear = ns.alus, ns.busy, ns.clear
        cmid, disp, fpu, inputs = ns.cmid, ns.disp, ns.fpu, ns.inputs
        insn_mem, noroom, pipes = ns.insn_mem, ns.noroom, ns.pipes
        pool, raise_err, state, store = ns.pool, ns.raise_err, ns.state, ns.store

        # ---- unit results to the dispatchers -----------------------------------------------
        self._unit_results(m, alus, fpu, disp, state, pipes[1])

        # ---- load/store replies: the reorder pool, retired in issue order ------------------
        m.d.comb += pool.i_reply.eq(inputs.o_reply)
        raise_err.append((inputs.o_reply.valid & inputs.o_reply.body.err, PeError.DBUF_ERROR,
                          pool.o_reply_slot))
        for j in range(2):
            self._retire_lane(m, j, pool.o_retire[j], pool.i_retire_go[j], disp[2 + j],
                              insn_mem, store.i_resv[j], store.o_room[j], coord)

        # ---- remote flits: dispatchers -> o_rep (CTX_END messages coalesced) ----
        m.submodules.rep_port = rep_port = ReplyPort(p, self._micc, len(disp))
        for j, d in enumerate(disp):
            wiring.connect(m, d.o_flit, rep_port.i_flit[j])
        wiring.connect(m, rep_port.o_rep, wiring.flipped(self.o_rep))

        # ---- slot flags: no room, busy --------------------------------------------------------
        nr = noroom
        for pipe in pipes:                        # (a slot is in one pipe's S1 at a time)
            nr = (nr & ~pipe.hot) | (pipe.hot & pipe.last.replicate(S))
        m.d.sync += noroom.eq(nr)
        bset = any_of([hot(q.slot) & q.busy_set.replicate(S) for q in pipes])
        bclr = any_of([hot(q.busy_clr_slot) & q.busy_clr.replicate(S) for q in pipes])
        m.d.sync += busy.eq((busy | bset) & ~bclr)
        fp = pipes[1]
        fdone = hot(fp.busy_clr_slot) & fp.busy_clr.replicate(S)
        m.d.sync += cmid.eq(((cmid & ~fdone) | (fdone & fp.facc_mid.replicate(S)))
                            & ~(clear.hot & clear.part0.replicate(S)))

        # ---- sticky errors ---------------------------------------------------------------------
        m.submodules.errors = errors = ErrorLatch(p, [flag for _, flag, _ in raise_err])
        for port, (cond_, _, slot) in zip(errors.i_raise, raise_err):
            m.d.comb += [port.valid.eq(cond_), port.slot.eq(slot)]
        m.d.comb += self.o_error.eq(errors.o_error)
        return m

    def _storage(self, m, ns):
        """Instructions, configuration, operands and slot state."""
        p, S, K, ND = ns.p, ns.S, ns.K, ns.ND
        NP, coord, insn_l, int_pipes = ns.NP, ns.coord, ns.insn_l, ns.int_pipes
        # ---- storage: instructions, configuration, operands, slot state ------------------
        m.submodules.insn_mem = insn_mem = Memory(shape=insn_l.size, depth=S, init=[])
        insn_w = insn_mem.write_port(granularity=64)
        # The input stage registers every flit and decodes the configuration.
        m.submodules.inputs = inputs = InputStage(p)
        wiring.connect(m, wiring.flipped(self.i_flit), inputs.i_flit)
        m.d.comb += [insn_w.addr.eq(inputs.o_insn.slot),
                     insn_w.data.eq(inputs.o_insn.data.replicate(insn_l.size // 64)),
                     insn_w.en.eq(inputs.o_insn.en)]
        # Configuring a slot (part 0 of its word) clears its state: configuration precedes
        # the run, and memories keep their contents over a reset.
        clear = inputs.o_cfg

        # Dispatchers: one per unit (INT, FP, the second INT) and memory lane.  All but the
        # FP one (its FACC results have one destination) offer every local destination of a
        # result at once: a load fanned out to 4 FACCs of consecutive slots is written in
        # 1 cycle (4 banks) or 2 (2 banks) instead of 4.
        disp = []
        for name in ("int", "fp", "mem0", "mem1") + (("int2",) if NP == 3 else ()):
            d = Dispatcher(p, self._micc, local_ports=1 if name == "fp" else ND)
            m.submodules[f"disp_{name}"] = d
            m.d.comb += d.i_coord.eq(coord)
            disp.append(d)
        # Operand write priority after the mesh token: the unit dispatchers (a blocked one
        # stalls its unit and so its pipe; the second INT pipe's MOV fan-out trees first),
        # then the memory lanes (a blocked lane only delays its retirements).  Measured on
        # the 6 x 4 dense engine: mesh, INT, FP, M0, M1, INT2 gave 0.69 FACC/cycle, this
        # order 0.85.
        order = ([4] if NP == 3 else []) + [0, 1, 3, 2]
        ports = [port for j in order for port in disp[j].o_local]
        # Reservation groups, highest priority first: the two retire lanes, then the pipes.
        m.submodules.store = store = OperandStore(p, self._banks, len(ports), NP, 2 + NP, ND)
        m.d.comb += [store.i_known.eq(inputs.o_slots.known),
                     store.i_net.eq(inputs.o_token),
                     store.i_clear.valid.eq(clear.part0), store.i_clear.slot.eq(clear.slot),
                     store.i_clear.hot.eq(clear.hot)]
        for port, local in zip(ports, store.i_local):
            wiring.connect(m, port, local)
        m.submodules.state = state = SlotState(p, int_pipes)
        m.d.comb += [state.i_clear.valid.eq(clear.part0), state.i_clear.slot.eq(clear.slot)]
        raise_err = [(r.valid, flag, r.slot) for r, flag in zip(store.o_raise, store.RAISES)]

        # What the ready vector sees in parallel is in flip-flops, one S-bit vector per
        # property (bit s: slot s), so that each is updated and read by word-wide operations
        # (Verilator turns a per-bit update into one test per bit: docs/harness.md,
        # "Simulation speed"): opcode known, pipe, token operands (the input stage's), the
        # operand FIFOs' non-empty bits (the store's), busy and "no room" (below).
        slots = inputs.o_slots
        busy = Signal(S, name="busy_v")
        noroom = Signal(S, name="noroom_v")       # last pick: destination full
        nonempty = store.o_nonempty
        # Per-slot views under the names diagnosis benches read (tb/pe/probe.py: ne<slot>,
        # noroom<slot>, busy<slot>); Verilator drops them, nothing in the PE reads them.
        for s in range(S):
            m.d.comb += [Signal(K, name=f"ne{s}").eq(Cat(*[nonempty[k][s] for k in range(K)])),
                         Signal(name=f"noroom{s}").eq(noroom[s]),
                         Signal(name=f"busy{s}").eq(busy[s])]
        ns.busy, ns.clear, ns.disp, ns.inputs, ns.insn_mem = busy, clear, disp, inputs, insn_mem
        ns.nonempty, ns.noroom, ns.raise_err = nonempty, noroom, raise_err
        ns.slots, ns.state, ns.store = slots, state, store

    def _units(self, m, ns):
        """The ALUs, the FPU, the request queue and the reorder pool."""
        p, int_pipes = ns.p, ns.int_pipes
        # ---- units ---------------------------------------------------------------------------
        alus = {}
        for pp in int_pipes:
            alus[pp] = m.submodules[f"alu{pp}" if pp else "alu"] = IntAlu(
                tag_width=int_tag_layout(p).size)
        fpu = m.submodules.fpu = SimdFpu(tag_width=fp_tag_layout(p).size)
        m.submodules.req_q = req_q = StreamFIFO(width=flit_layout(p).size, depth=4)
        m.d.comb += [self.o_req.valid.eq(req_q.o_data.valid),
                     self.o_req.payload.eq(req_q.o_data.payload),
                     req_q.o_data.ready.eq(self.o_req.ready)]
        # The load/store reorder pool: entries taken at issue, filled by the replies, retired
        # in each slot's issue order on two lanes (hw.pe.pool).
        m.submodules.pool = pool = ReorderPool(p, self._pool)
        m.d.comb += Signal(self._pool, name="pool_alloc").eq(pool.o_alloc)  # (tb/pe/probe.py)
        ns.alus, ns.fpu, ns.req_q, ns.pool = alus, fpu, req_q, pool

    def _pick(self, m, ns):
        """S0: each pipe picks one ready slot (round robin)."""
        K, NP, S, busy, insn_mem = ns.K, ns.NP, ns.S, ns.busy, ns.insn_mem
        int_pipes, nonempty, noroom = ns.int_pipes, ns.nonempty, ns.noroom
        slots, state, store = ns.slots, ns.state, ns.store
        # ---- S0: pick one ready slot per pipe (round robin) ----------------------------------
        # A FACC with a count operand needs operand 2 at the first step of an accumulation
        # only: `cmid` (bit s) says slot s is past that step, i.e. its FACC count is not 0
        # (written with the count the FPU's result writes back, so it agrees with the state
        # S1 reads; also set mid-way through a FACC without a count operand, whose operand 2
        # is never a token).
        cmid = Signal(S, name="cmid_v")
        need = [slots.tmask[k] & ~cmid if k == 2 else slots.tmask[k] for k in range(K)]
        tok_ok = Signal(S, name="tok_ok")         # every token operand it needs has one
        m.d.comb += tok_ok.eq(all_of([~need[k] | nonempty[k] for k in range(K)]))
        pipes = []
        for pp in range(NP):
            # INT pipe: a busy slot is an emitting ITER, BSCAN or BPOS, ready for its next
            # token.
            go_on = busy if pp != 1 else Const(0, S)
            # Each slot has one pipe, so its results leave in firing order: FP slots pipe 1;
            # with a second INT pipe, LD/ST and ITER slots pipe 0 and the other INT/CTRL
            # slots pipe 2; otherwise every INT/MEM/CTRL slot pipe 0.
            unit = (slots.isfp if pp == 1 else ~slots.isfp if NP == 2
                    else ~slots.isfp & (slots.onp0 if pp == 0 else ~slots.onp0))
            m.submodules[f"pick{pp}"] = picker = SlotPicker(S, pp != 1, pp)
            m.d.comb += [picker.i_ready.eq(slots.known & unit & ((tok_ok & ~busy) | go_on)),
                         picker.i_noroom.eq(noroom), picker.i_busy.eq(busy)]
            slot0 = picker.o_pick.slot
            insn_r = insn_mem.read_port()
            m.d.comb += [insn_r.addr.eq(slot0), store.i_read[pp].pick.eq(slot0),
                         store.i_read[pp].s1.eq(picker.o_s1.slot)]
            if pp == 1:
                m.d.comb += state.i_facc.pick.eq(slot0)
            else:
                m.d.comb += state.i_scan[int_pipes.index(pp)].pick.eq(slot0)
            s1_valid = Signal(name=f"s1_valid{pp}")   # (tb/pe/probe.py)
            m.d.comb += s1_valid.eq(picker.o_s1.valid)
            pipes.append(_Pipe(pp, s1_valid, picker.o_s1, insn_r.data))
        ns.cmid, ns.pipes = cmid, pipes

    def _issue(self, m, ns):
        """S1 of each pipe: operands, room check, fire."""
        p, alus, coord, fpu, inputs, insn_l = ns.p, ns.alus, ns.coord, ns.fpu, ns.inputs, ns.insn_l
        int_pipes, pipes, pool = ns.int_pipes, ns.pipes, ns.pool
        raise_err, req_q, state, store = ns.raise_err, ns.req_q, ns.state, ns.store
        # ---- S1 of each pipe: operands, room check, fire ----------------------------------
        for pp, pipe in enumerate(pipes):
            insn = Signal(insn_l, name=f"insn{pp}")
            m.d.comb += [insn.eq(pipe.insn), state.i_ends[pp].slot.eq(pipe.slot)]
            m.submodules[f"operands{pp}"] = sel = OperandSelect(p, pp)
            m.d.comb += [sel.i_insn.eq(insn), sel.i_coord.eq(coord)]
            m.d.comb += [a.eq(b) for a, b in zip(sel.i_tokens, store.o_token[pp])]
            m.d.comb += [a.eq(b) for a, b in zip(sel.i_regs, inputs.o_regs)]
            opv, has = sel.o_value, sel.o_has
            go = Signal(name=f"go{pp}")            # fires (or emits, for a continuation)
            room = Signal(name=f"room{pp}")        # (tb/pe/probe.py)
            resv = Signal(name=f"resv{pp}")        # go reserves the local destinations
            m.d.comb += room.eq(store.o_room[2 + pp])
            if pp == 1:
                # A FACC step before its last emits no result, so it needs no room.
                m.submodules.fp_step = fstep = FpStep(p)
                facc = state.o_facc
                m.d.comb += [fstep.i_insn.eq(insn), fstep.i_a.eq(opv[0]), fstep.i_b.eq(opv[1]),
                             fstep.i_c.eq(opv[2]), fstep.i_has_b.eq(has[1]),
                             fstep.i_has_c.eq(has[2]), fstep.i_facc.eq(facc),
                             fstep.i_slot.eq(pipe.slot), fstep.i_ectx.eq(state.o_ends[1]),
                             fstep.i_dmask.eq(sel.o_dmask), sel.i_emits.eq(fstep.o_emits),
                             fstep.i_go.eq(go), state.i_ends[1].inc.eq(fstep.o_end_inc),
                             sel.i_keep[2].eq(fstep.o_keep_c),
                             pipe.busy_set.eq(fstep.o_busy_set)]
                raise_err.append((fstep.o_bad_count, PeError.BAD_COUNT, pipe.slot))
                fo = fstep.o_fpu
                m.d.comb += [fpu.i_op.payload.op.eq(fo.op), fpu.i_op.payload.a.eq(fo.a),
                             fpu.i_op.payload.b.eq(fo.b), fpu.i_op.payload.c.eq(fo.c),
                             fpu.i_op.payload.tag.eq(fo.tag),
                             fpu.i_op.valid.eq(pipe.valid & room),
                             go.eq(pipe.valid & room & fpu.i_op.ready), resv.eq(1)]
            else:
                alu, j = alus[pp], int_pipes.index(pp)
                # The ALU operation and the slot's next SCAN/ITER/BSCAN/BPOS state.
                m.submodules[f"int_step{pp}"] = istep = IntStep(p, pp)
                m.d.comb += [istep.i_insn.eq(insn), istep.i_a.eq(opv[0]), istep.i_b.eq(opv[1]),
                             istep.i_has_b.eq(has[1]), istep.i_cont.eq(pipe.cont),
                             istep.i_state.eq(state.o_scan[j]),
                             istep.i_ectx.eq(state.o_ends[pp]), istep.i_dmask.eq(sel.o_dmask),
                             istep.i_is_mem.eq(pipe.is_mem), istep.i_go.eq(go),
                             sel.i_emits.eq(istep.o_emits),
                             state.i_scan[j].slot.eq(pipe.slot),
                             state.i_scan[j].en.eq(istep.o_state.en),
                             state.i_scan[j].data.eq(istep.o_state.data),
                             state.i_ends[pp].inc.eq(istep.o_end_inc),
                             pipe.busy_set.eq(istep.o_busy_set),
                             pipe.busy_clr.eq(istep.o_busy_clr),
                             alu.i_op.payload.op.eq(istep.o_alu.op),
                             alu.i_op.payload.a.eq(istep.o_alu.a),
                             alu.i_op.payload.b.eq(istep.o_alu.b),
                             alu.i_op.payload.tag.eq(istep.o_alu.tag)]
                alu_go = Signal(name=f"alu_go{pp}")
                m.d.comb += alu_go.eq(pipe.valid & room & alu.i_op.ready)
                if pp == 2:
                    m.d.comb += [go.eq(alu_go), alu.i_op.valid.eq(pipe.valid & room),
                                 resv.eq(1)]
                else:
                    raise_err += self._mem_issue(m, pipe, insn, opv, coord, room, alu_go, resv,
                                                 go, req_q, pool, state.o_ends[0])
                    m.d.comb += alu.i_op.valid.eq(pipe.valid & room & ~pipe.is_mem)
            fire = Signal(name=f"fire{pp}")
            m.d.comb += [fire.eq(go & ~pipe.cont), sel.i_fire.eq(fire),
                         store.i_consume[pp].slot.eq(pipe.slot),
                         store.i_consume[pp].ops.eq(sel.o_pop)]
            for i, entry in enumerate(store.i_resv[2 + pp]):
                m.d.comb += [entry.slot.eq(getattr(insn, f"d{i}_slot")),
                             entry.operand.eq(getattr(insn, f"d{i}_operand")),
                             entry.local.eq(sel.o_local[i]),
                             entry.take.eq(go & sel.o_local[i] & resv)]
            name = ("int", "fp", "int2")[pp]
            m.d.comb += [getattr(self.o_fire, f"{name}_valid").eq(fire),
                         getattr(self.o_fire, f"{name}_op").eq(insn.op)]
            # A slot that did not go for want of room goes last next time; so does a memory
            # operation that did not go, for whatever reason (no room, no pool entry, the
            # overflow cap): one that kept failing while staying "fresh" starved a slot whose
            # stale flag said "no room" although its consumers were waiting for it (a load's
            # flag is only refreshed when it is picked: the 8 x 8's ~1,000-cycle tails).
            m.d.comb += pipe.last.eq((~room | pipe.is_mem) & ~go)

    def _unit_results(self, m, alus, fpu, disp, state, fp_pipe):
        """Hand the ALUs' and the FPU's results to their dispatchers (``disp``: INT, FP, ...,
        INT2); an FPU accumulation step before its last goes back to the slot's FACC state
        instead, the last one also to the FP dispatcher, and either clears the slot's busy and
        says whether its accumulation goes on (``facc_mid``, for its ``cmid`` bit)."""
        p = self._params
        for pp, alu in alus.items():
            itag = Signal(int_tag_layout(p), name=f"itag{pp}")
            di = disp[0 if pp == 0 else 4]
            m.d.comb += itag.eq(alu.o_res.payload.tag)
            dpi = di.i_res.payload
            m.d.comb += [
                di.i_res.valid.eq(alu.o_res.valid), alu.o_res.ready.eq(di.i_res.ready),
                dpi.data.eq(Cat(alu.o_res.payload.result,
                                Mux(itag.wide, itag.hi, Const(0, 32)))),
                dpi.dests.eq(itag.dests), dpi.dmask.eq(itag.dmask), dpi.end.eq(itag.end),
                dpi.ectx.eq(itag.ectx),
            ]
        ftag = Signal(fp_tag_layout(p))
        m.d.comb += ftag.eq(fpu.o_res.payload.tag)
        dpf = disp[1].i_res.payload
        to_disp = ~ftag.facc | ftag.emit
        m.d.comb += [
            disp[1].i_res.valid.eq(fpu.o_res.valid & to_disp),
            fpu.o_res.ready.eq(Mux(to_disp, disp[1].i_res.ready, 1)),
            dpf.data.eq(fpu.o_res.payload.result), dpf.dests.eq(ftag.dests),
            dpf.dmask.eq(ftag.dmask), dpf.end.eq(ftag.end), dpf.ectx.eq(ftag.ectx),
        ]
        # An accumulation step's partial sum goes back to the slot's FACC state.
        fdone = fpu.o_res.valid & fpu.o_res.ready & ftag.facc
        m.d.comb += [state.i_facc.slot.eq(ftag.slot), state.i_facc.en.eq(fdone),
                     state.i_facc.data.acc.eq(fpu.o_res.payload.result),
                     state.i_facc.data.count.eq(ftag.count),
                     fp_pipe.busy_clr.eq(fdone), fp_pipe.facc_mid.eq(ftag.count.any())]
        fp_pipe.busy_clr_slot = ftag.slot

    def _mem_issue(self, m, pipe, insn, opv, coord, room, alu_go, resv, go, req_q, pool, ectx):
        """Pipe 0's loads and stores: drive ``pipe.is_mem``, ``go`` and ``resv`` (a LD/ST
        reserves its local destinations at issue unless it goes as an overflow entry), the
        request FIFO and the reorder pool's issue port; return the error conditions raised."""
        p = self._params
        m.d.comb += pipe.is_mem.eq(~pipe.cont & is_one_of(insn.op, _LOADS + _STORES))
        m.submodules.request = request = MemRequest(p, self._pool)
        m.d.comb += [request.i_insn.eq(insn), request.i_a.eq(opv[0]), request.i_b.eq(opv[1]),
                     request.i_coord.eq(coord), request.i_entry.eq(pool.o_free.idx)]
        in_range = request.o_in_range
        # LDHBZ of an address token 0: +0.0 without a request (and without an address check).
        # It still takes a pool entry, so that its slot's results leave in issue order,
        # entered as replied at once with the `zero` bit of pool_info set: its retire lane
        # sends 0, and pool_data keeps one write port, the REPLY's.
        skip = Signal(name="pool_skip")
        m.d.comb += skip.eq(equals(insn.op, int(Op.LDHBZ)) & ~opv[0][:32].any())
        mem_ok = (req_q.i_data.ready | skip) & pool.o_free.any
        # The memory lane (dispatcher) of the replies: lane 1 when some destination is an
        # operand 1 or 2, so the two operands of a FACC/FMADD fed by loads arrive in the same
        # cycle (weight loads feed operand 0 only, input loads operand 1, also when a MOV of
        # their fan-out tree comes first); one slot always uses the same lane (its order
        # holds).
        lane = Signal(name="mem_lane")
        m.d.comb += lane.eq(Cat(*[getattr(insn, f"d{i}_valid")
                                  & getattr(insn, f"d{i}_operand").any()
                                  for i in range(p.MAX_DESTS)]).any())
        # A load/store with room in its local destinations reserves them now, unless its slot
        # has overflow entries in the pool (a slot's reserved entries must precede its
        # overflow ones: an overflow head waiting for room must not wait on a younger load
        # that holds the room).  A load without room may still go as an overflow entry while
        # fewer than half the pool's entries are overflow ones.
        issue_resv = Signal(name="pool_issue_resv")
        is_load = Signal(name="is_load")
        mem_go = Signal(name="mem_go")
        issue = Signal(name="pool_issue")
        m.d.comb += [is_load.eq(is_one_of(insn.op, _LOADS)),
                     issue_resv.eq(room & ~pool.o_ovf_mode),
                     mem_go.eq(mem_ok & (issue_resv | (is_load & pool.o_ovf_free))),
                     go.eq(Mux(pipe.is_mem, pipe.valid & mem_go, alu_go)),
                     resv.eq(~(pipe.is_mem & ~issue_resv)),
                     req_q.i_data.payload.eq(request.o_flit),
                     req_q.i_data.valid.eq(go & pipe.is_mem & in_range & ~skip),
                     issue.eq(go & pipe.is_mem & (in_range | skip)),
                     pool.i_slot.eq(pipe.slot), pool.i_issue.valid.eq(issue),
                     pool.i_issue.ectx.eq(ectx), pool.i_issue.lane.eq(lane),
                     pool.i_issue.resv.eq(issue_resv), pool.i_issue.zero.eq(skip),
                     Signal(name="pool_ovf_issue").eq(issue & ~issue_resv)]  # (tb/pe/bench_pe)
        return [(go & pipe.is_mem & ~in_range & ~skip, PeError.BAD_ADDRESS, pipe.slot)]

    def _retire_lane(self, m, j, entry, retire_go, disp, insn_mem, group, room, coord):
        """Retire lane ``j``: hand the reorder pool's retiring ``entry`` to the memory
        dispatcher ``disp``.

        The pool picks (R0, round robin) a retirable entry of the lane; here, in R1, the
        instruction is read and the result offered to the dispatcher, which retires the entry
        (``retire_go``).  An overflow entry also needs room in its local destinations then,
        reserved in that cycle by the store's reservation ``group`` (before the pipes').  An
        R1 that cannot go is dropped: the entry stays and is picked again.
        """
        p, ND = self._params, self._params.MAX_DESTS
        insn_r = insn_mem.read_port()
        m.d.comb += insn_r.addr.eq(entry.pick_slot)
        insn = Signal(insn_struct(p), name=f"rinsn{j}")
        go = Signal(name=f"ret_go{j}")
        m.d.comb += [insn.eq(insn_r.data), go.eq(disp.i_res.valid & disp.i_res.ready),
                     retire_go.eq(go)]
        for i, resv in enumerate(group):
            local = Signal(name=f"r_local{j}_{i}")
            m.d.comb += [local.eq(getattr(insn, f"d{i}_valid")
                                  & (getattr(insn, f"d{i}_x") == coord.x)
                                  & (getattr(insn, f"d{i}_y") == coord.y)),
                         resv.slot.eq(getattr(insn, f"d{i}_slot")),
                         resv.operand.eq(getattr(insn, f"d{i}_operand")),
                         resv.local.eq(local), resv.take.eq(go & ~entry.resv & local)]
        res = disp.i_res.payload
        store = is_one_of(insn.op, _STORES)
        m.d.comb += [
            disp.i_res.valid.eq(entry.valid & (entry.resv | room)),
            res.data.eq(Mux(store | entry.zero, Const(0, 64), entry.data)),
            res.dmask.eq(Cat(*[getattr(insn, f"d{i}_valid") for i in range(ND)])),
            res.end.eq(insn.end & store),            # a load's END is never sent (ISA)
            res.ectx.eq(entry.ectx),
        ]
        m.d.comb += [res.dests[i].eq(insn_dest(insn, i)) for i in range(ND)]


class _Pipe:
    """One issue pipe as :class:`Pe` wires it: the S1 register of its picker and the
    instruction read, and the signals its slot-flag updates collect."""

    def __init__(self, pp, valid, s1, insn):
        self.valid, self.slot, self.cont, self.hot = valid, s1.slot, s1.cont, s1.hot
        self.insn = insn                          # the instruction word (S1)
        self.is_mem = Signal(name=f"is_mem{pp}")  # a load/store (pipe 0 only)
        self.busy_set = Signal(name=f"busy_set{pp}")
        self.busy_clr = Signal(name=f"busy_clr{pp}")
        self.busy_clr_slot = s1.slot              # (the FP pipe: the FPU result's slot)
        self.last = Signal(name=f"goes_last{pp}")  # the slot goes last at its next pick
        self.facc_mid = Signal(name=f"facc_mid{pp}")  # (FP) the returning step is not the last


_ARRAY = ArrayParams()


def make_pe(rows=_ARRAY.rows, cols=_ARRAY.cols, slots=_ARRAY.slots,
            operand_depth=_ARRAY.operand_depth, regs=_ARRAY.regs, dbuf_bytes=_ARRAY.dbuf_bytes,
            x=-1, y=-1, micc_x=-1, micc_y=0, pool=32, int_issue=_ARRAY.int_issue, banks=None):
    """Return a :class:`Pe` built from plain integers (for ``tb.host.tops`` and the benches).

    ``x``/``y`` of -1 (default) give the PE its ``i_coord`` input port; other values build it
    with a constant coordinate.
    """
    params = ArrayParams(rows=rows, cols=cols, slots=slots, operand_depth=operand_depth,
                         regs=regs, dbuf_bytes=dbuf_bytes, int_issue=int_issue)
    banks = BANKS if banks is None else banks
    if x == -1 and y == -1:
        return Pe(params, micc=(micc_x, micc_y), pool=pool, banks=banks)
    return Pe(params, x, y, (micc_x, micc_y), pool, banks)
