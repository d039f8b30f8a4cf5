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
   dispatch I/F/M0/M1/I2 local -> [OperandWriteArbiter]s, one port per operand index and bank
                               v
        operand memories 0..2 x bank (slot[:2] or slot[0]); FIFO pointers WP/RP/WA in memories
                               |
      ready vector --> [SlotPicker] INT --> S1: insn + operands --> [IntStep] -> IntAlu (2) ->|
                   |                                 \--> [MemRequest] -> o_req, [ReorderPool] |
                   |-> [SlotPicker] FP  --> S1: insn + operands --> [FpStep] -> SimdFpu (4) ->|
                   \-> [SlotPicker] INT2 -> S1: insn + operands --> [IntStep] -> IntAlu (2) ->|
                     [Dispatcher] I, F, I2 (unit results) <-------------------------------------+
                       local destinations -> operand write arbiters; others -> [ReplyPort] -> o_rep
                     [ErrorLatch]: sticky error flags -> o_error

:class:`Pe` owns the storage (instruction, operand, FIFO pointer, END count, SCAN/ITER and FACC
state memories and the per-slot flag vectors) and wires the components around it; each
component's contract is in its module docstring.

Contract
--------
* ``i_coord`` (unless built with a constant ``x, y``): this PE's column and row, not biased
  (:func:`hw.pe.layouts.coord_layout`); a run-time input, so every PE is the same module.
* ``i_flit``: reply-network flits addressed to this PE; ``ready`` is constantly high (DESIGN.md
  invariant 2: ejection never waits on firing).  A registered input stage sinks one flit per
  cycle: OPERAND tokens win the write port of their operand memory over local results;
  CONFIG writes the instruction part / register or pushes a PRELOAD token (configuring part
  0 of a slot clears its FIFO pointers, END count, SCAN/ITER and FACC state: configuration
  precedes the run); REPLY fills its reorder pool entry, allocated at issue.
* ``o_req``: LOAD/STORE flits (request network); the ``tag`` and ``slot`` fields carry the
  pool entry (the Dbuf echoes them).  ``o_rep``: OPERAND flits to other PEs and CTX_END
  flits to the MicC (reply network).  Both stream rules-abiding FIFO outputs.  END
  messages of one context that follow each other within 16 cycles, or wait while ``o_rep``
  is blocked, leave as one CTX_END flit with a ``count``
  (:class:`hw.pe.dispatch.ReplyPort`).
* Firing: a slot is *ready* when its opcode is known, every token operand FIFO holds a token,
  and it is not busy (a FACC with an accumulation in flight, an ITER or BSCAN emitting: it
  is picked again as a *continuation*, one token per pick).  Each cycle a round-robin picker
  per pipe chooses one ready slot of that pipe (FP slots: the FP pipe; INT slots: pipe 0, or
  with ``params.int_issue == 2`` LD/ST and ITER slots and those whose instruction has the
  ``pipe0`` hint pipe 0, the others, BSCAN included, pipe 2, fixed when the slot
  is configured); one cycle later (S1) the instruction fires if
  each *local* destination FIFO has room (occupancy counts tokens present plus results
  reserved in flight), its unit accepts, and for LD/ST the request FIFO has room and the pool
  a free entry; otherwise it is dropped and picked again.  Each slot's results leave in
  firing order; each slot's load/store results in issue order (not across slots).
* ``LDHBZ`` of an address token whose low 32 bits are 0 sends no request (needs no
  request FIFO room, checks no address): it takes its pool entry like any load and retires
  the token 0 in its slot's issue order; other addresses load as ``LDHB``.
* Remote destinations are not checked; a mesh token finding its FIFO full is dropped and sets
  the sticky OVERFLOW flag.  Errors (:class:`sw.spec.status.PeError`) are sticky in
  ``o_error.flags``; ``o_error.slot`` is the slot of the first one.
* ``o_fire``: one pulse per instruction fired on each pipe with its opcode (for counting):
  ``int_*``, ``fp_*`` and, with ``int_issue == 2``, ``int2_*``.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.fifo import StreamFIFO
from hw.lib.logic import all_of, any_of, equals, increment, is_one_of
from hw.lib.select import bit_at, onehot
from hw.lib.spec import check_params
from hw.noc.flit import flit_layout
from hw.pe.alu import IntAlu
from hw.pe.dispatch import Dispatcher, ReplyPort
from hw.pe.errors import ErrorLatch
from hw.pe.fp_step import NEG_ZERO4, FpStep, facc_state_layout
from hw.pe.fpu import SimdFpu
from hw.pe.inputs import InputStage
from hw.pe.int_step import IntStep
from hw.pe.layouts import (PeError, coord_layout, error_layout, fp_tag_layout,
                           insn_dest, insn_struct, int_tag_layout)
from hw.pe.pick import SlotPicker
from hw.pe.pool import ReorderPool
from hw.pe.request import MemRequest
from hw.pe.write_arbiter import OperandWriteArbiter
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
        S, D, K, ND = p.slots, p.operand_depth, p.MAX_OPERANDS, p.MAX_DESTS
        sb = p.slot_bits
        lgd = D.bit_length() - 1                 # FIFO entry index bits (0 when D == 1)
        pb = lgd + 1                             # FIFO pointer bits: modulo 2 * D
        P = self._pool                           # load/store reorder pool entries
        insn_l = insn_struct(p)
        parts = insn_l.size // 64
        # Pipes: 0 INT/MEM/CTRL, 1 FP, 2 a second INT/CTRL pipe (no loads/stores) when
        # params.int_issue == 2.  A slot is never in two pipes' S1 at once.
        NP = 3 if p.int_issue == 2 else 2
        INT_PIPES = (0, 2) if NP == 3 else (0,)

        NB = self._banks
        lgb = NB.bit_length() - 1                # bank = slot[:lgb]

        def fifo_addr(slot, ptr):
            # Address in a bank: the slot's row (its number without the bank bits) and entry.
            return Cat(ptr[:lgd], slot[lgb:]) if lgd else slot[lgb:]

        decoders = {}

        def hot(sig, n=S):
            # One shared one-hot decode per slot signal: the per-slot flip-flops below are
            # updated as whole vectors, `x = (x & ~clear) | set`, with masks built from these.
            key = (id(sig), n)
            if key not in decoders:
                decoders[key] = (sig, onehot(m, sig, n, f"dec{len(decoders)}"))
            return decoders[key][1]

        # The coordinate: a run-time input (one module for all PEs) or constants.
        coord = Signal(coord_layout(p), name="coord")
        if self._x is None:
            m.d.comb += coord.eq(self.i_coord)
        else:
            m.d.comb += [coord.x.eq(self._x), coord.y.eq(self._y)]

        # ---- storage ---------------------------------------------------------------------
        m.submodules.insn_mem = insn_mem = Memory(shape=insn_l.size, depth=S, init=[])
        insn_w = insn_mem.write_port(granularity=64)
        # Operand memories: one per operand index and bank (the slot number's low bits), each
        # with its own write port, so local deliveries to the same operand index of slots in
        # different banks go in the same cycle.
        opmem = [[Memory(shape=p.TOKEN_BITS, depth=S // NB * D, init=[]) for b in range(NB)]
                 for k in range(K)]
        for k in range(K):
            for b in range(NB):
                m.submodules[f"opmem{k}_{b}"] = opmem[k][b]
        opw = [[mem.write_port() for mem in row] for row in opmem]
        # The input stage registers every flit and decodes the configuration.
        m.submodules.inputs = inputs = InputStage(p)
        wiring.connect(m, wiring.flipped(self.i_flit), inputs.i_flit)
        m.d.comb += [insn_w.addr.eq(inputs.o_insn.slot),
                     insn_w.data.eq(inputs.o_insn.data.replicate(parts)),
                     insn_w.en.eq(inputs.o_insn.en)]
        regs = inputs.o_regs

        # What the ready vector sees in parallel stays in flip-flops, one S-bit vector per
        # property (bit s: slot s), so that each is updated and read by word-wide operations
        # (Verilator turns a per-bit update into one test per bit: docs/harness.md,
        # "Simulation speed"): its opcode is known, its pipe, which operands are tokens (the
        # input stage's, set when a slot is configured); busy; per operand index "non-empty".
        known = inputs.o_slots.known              # opcode valid, not INVALID
        isfp = inputs.o_slots.isfp
        onp0 = inputs.o_slots.onp0                # INT pipe 0 (int_issue 2)
        tmask = inputs.o_slots.tmask              # [k]: operand k is a token
        busy = Signal(S, name="busy_v")
        noroom = Signal(S, name="noroom_v")       # last pick: destination full
        nonempty = [Signal(S, name=f"ne_op{k}") for k in range(K)]
        # Per-slot views under the names diagnosis benches read (tb/pe/probe.py: ne<slot>,
        # noroom<slot>, busy<slot>); Verilator drops them, nothing in the PE reads them.
        for s in range(S):
            m.d.comb += [Signal(K, name=f"ne{s}").eq(Cat(*[nonempty[k][s] for k in range(K)])),
                         Signal(name=f"noroom{s}").eq(noroom[s]),
                         Signal(name=f"busy{s}").eq(busy[s])]
        # The FIFO pointers of every (slot, operand) live in memories addressed by the key
        # Cat(operand, slot), each pointer modulo 2 * depth with a single kind of writer:
        # WP (write pointer: the operand write ports), RP (read pointer: the firings),
        # WA (allocation pointer: mesh tokens on arrival, local results when their producer
        # fires).  Tokens present = WP - RP (> 0 is `nonempty`), occupancy = WA - RP.
        # Every write port writes a different key in a cycle (the room check defers a
        # reservation that races a mesh token or the other pipe for the same FIFO).
        ptr_mems = {}
        for name in ("wp", "rp", "wa"):
            ptr_mems[name] = Memory(shape=pb, depth=4 * S, init=[])
            m.submodules[f"{name}_mem"] = ptr_mems[name]

        def ptr_read(name, key):
            rp_ = ptr_mems[name].read_port(domain="comb")
            m.d.comb += rp_.addr.eq(key)
            return rp_.data

        def fkey(k, slot):
            return Cat(Const(k, 2), slot) if isinstance(k, int) else Cat(k, slot)

        raise_err = []                            # (condition, flag, slot), in priority order

        cfg_part0 = inputs.o_cfg.part0            # part 0 makes the slot live, clears its state
        cfg_slot = inputs.o_cfg.slot
        cfg_hot = inputs.o_cfg.hot
        net_tok = inputs.o_token.tok              # mesh tokens: OPERAND and PRELOAD
        net_valid = inputs.o_token.valid

        # ---- dispatchers ------------------------------------------------------------------
        disp = []
        for name in ("int", "fp", "mem0", "mem1") + (("int2",) if NP == 3 else ()):
            # All but the FP dispatcher (its FACC results have one destination) offer every
            # local destination of a result at once: a load fanned out to 4 FACCs of
            # consecutive slots is written in 1 cycle (4 banks) or 2 (2 banks) instead of 4.
            d = Dispatcher(p, self._micc, local_ports=1 if name == "fp" else ND)
            m.submodules[f"disp_{name}"] = d
            m.d.comb += d.i_coord.eq(coord)
            disp.append(d)

        # ---- operand write arbiters, one per operand memory -------------------------------
        def known_of(slot):
            return bit_at(known, slot)

        def full_of(key):
            # Occupancy WA - RP never exceeds D (= 2 ** lgd): its top bit means "full".
            return (ptr_read("wa", key) - ptr_read("rp", key))[lgd]

        wa_w = {name: ptr_mems["wa"].write_port() for name in ["net"] + [
            f"res{pp}_{i}" for pp in range(NP) for i in range(ND)]}
        wp_w = [[ptr_mems["wp"].write_port() for b in range(NB)] for k in range(K)]
        rp_w = [[ptr_mems["rp"].write_port() for k in range(K)] for pp in range(NP)]
        cons_last = [[Signal(name=f"cons_last{pp}_{k}") for k in range(K)] for pp in range(NP)]
        wr_en = [[Signal(name=f"wr_en{k}_{b}") for b in range(NB)] for k in range(K)]
        wr_slot = [[Signal(sb, name=f"wr_slot{k}_{b}") for b in range(NB)] for k in range(K)]
        net_ok = Signal()
        net_slot_known = known_of(net_tok.slot)
        net_key = Cat(net_tok.operand, net_tok.slot)
        net_full = full_of(net_key) | net_tok.operand.all()     # (operand 3 does not exist)
        m.d.comb += net_ok.eq(net_valid & net_slot_known & ~net_full)
        wa_net = ptr_read("wa", net_key)
        m.d.comb += [wa_w["net"].addr.eq(net_key), wa_w["net"].data.eq(increment(wa_net)),
                     wa_w["net"].en.eq(net_ok)]
        raise_err.append((net_valid & ~net_slot_known, PeError.UNKNOWN_OPCODE, net_tok.slot))
        raise_err.append((net_valid & net_slot_known & net_full, PeError.OVERFLOW,
                          net_tok.slot))
        # Write priority after the mesh token: the unit dispatchers (a blocked one stalls its
        # unit and so its pipe; the second INT pipe's MOV fan-out trees first), then the
        # memory lanes (a blocked lane only delays its retirements).  Measured on the 6 x 4
        # dense engine: mesh, INT, FP, M0, M1, INT2 gave 0.69 FACC/cycle, this order 0.85.
        order = ([4] if NP == 3 else []) + [0, 1, 3, 2]
        ports = [port for j in order for port in disp[j].o_local]
        m.submodules.arbiter = arbiter = OperandWriteArbiter(p, NB, len(ports))
        m.d.comb += [arbiter.i_net.valid.eq(net_valid), arbiter.i_net.tok.eq(net_tok)]
        for port, local in zip(ports, arbiter.i_local):
            wiring.connect(m, port, local)
        for k in range(K):
            for b in range(NB):
                grant = arbiter.o_grant[k][b]
                sel = grant.tok
                # A local token goes to a known slot; the reservation made at issue gives room.
                local_known = known_of(sel.slot)
                ok = grant.valid & Mux(grant.net, net_ok, local_known)
                m.d.comb += [wr_en[k][b].eq(ok), wr_slot[k][b].eq(sel.slot)]
                tail = ptr_read("wp", fkey(k, sel.slot))
                w = wp_w[k][b]
                m.d.comb += [opw[k][b].addr.eq(fifo_addr(sel.slot, tail)),
                             opw[k][b].data.eq(sel.data), opw[k][b].en.eq(ok),
                             w.addr.eq(fkey(k, sel.slot)), w.data.eq(increment(tail)), w.en.eq(ok)]
                raise_err.append((grant.valid & ~grant.net & ~local_known,
                                  PeError.UNKNOWN_OPCODE, sel.slot))

        # ---- issue pipes --------------------------------------------------------------------
        alus = {}
        for pp in INT_PIPES:
            alus[pp] = IntAlu(tag_width=int_tag_layout(p).size)
            m.submodules[f"alu{pp}" if pp else "alu"] = alus[pp]
        fpu = m.submodules.fpu = SimdFpu(tag_width=fp_tag_layout(p).size)
        m.submodules.req_q = req_q = StreamFIFO(width=flit_layout(p).size, depth=4)
        m.d.comb += [
            self.o_req.valid.eq(req_q.o_data.valid),
            self.o_req.payload.eq(req_q.o_data.payload),
            req_q.o_data.ready.eq(self.o_req.ready),
        ]

        consume = [[Signal(name=f"consume{pp}_{k}") for k in range(K)] for pp in range(NP)]
        cons_slot = [Signal(sb, name=f"cons_slot{pp}") for pp in range(NP)]
        reserve = [[Signal(name=f"reserve{pp}_{i}") for i in range(ND)] for pp in range(NP)]
        res_dest = [[Signal(sb + 2, name=f"res_dest{pp}_{i}") for i in range(ND)]
                    for pp in range(NP)]
        busy_set = [Signal(name=f"busy_set{pp}") for pp in range(NP)]
        busy_set_slot = [None] * NP               # (each pipe's S1 slot; FACC: the FPU's tag)
        busy_clr = [Signal(name=f"busy_clr{pp}") for pp in range(NP)]
        busy_clr_slot = [None] * NP


        # END messages sent per slot: the context ID an END carries.  One memory
        # per pipe, read and incremented in S1 when an instruction with END fires (a store's
        # count rides in its reorder pool entry to the acknowledgement, which sends it).
        ends_w, ends_cur, end_inc = [], [], []
        ends_mem = [Memory(shape=32, depth=S, init=[]) for _ in range(2)]   # INT, FP
        m.submodules.ends_mem0, m.submodules.ends_mem1 = ends_mem
        for pp in range(NP):
            mem = ends_mem[1 if pp == 1 else 0]
            ends_w.append(mem.write_port())
            ends_cur.append(mem.read_port(domain="comb"))
            end_inc.append(Signal(name=f"end_inc{pp}"))

        # Per-slot INT state, 32 + 16 + 32 bits: SCAN's accumulator and firing count; an
        # emitting ITER's next value and tokens left; an emitting BSCAN's running address,
        # tokens left and the mask bits not yet scanned (ITER and BSCAN slots are busy
        # meanwhile, and are picked as *continuations*: no operands consumed, the next token
        # emitted).  One memory read at the pick and written in S1 by the slot's own pipe.
        m.submodules.scan_mem = scan_mem = Memory(
            shape=data.StructLayout({"acc": 32, "count": 16, "mask": 32}), depth=S, init=[])
        scan_ws = {pp: scan_mem.write_port() for pp in INT_PIPES}
        scan_rs = {}

        # FACC accumulators: 64-bit acc + 16-bit firing count per slot.
        m.submodules.facc_mem = facc_mem = Memory(
            shape=facc_state_layout(), depth=S, init=[])
        facc_w = facc_mem.write_port()

        # The load/store reorder pool: entries taken at issue, filled by the replies, retired
        # in each slot's issue order on two lanes (hw.pe.pool).
        m.submodules.pool = pool = ReorderPool(p, P)
        free_any, free_idx = pool.o_free.any, pool.o_free.idx
        ovf_free = pool.o_ovf_free
        m.d.comb += Signal(P, name="pool_alloc").eq(pool.o_alloc)    # (tb/pe/probe.py)
        pool_issue = Signal(name="pool_issue")       # a LD/ST is sent: allocate an entry
        pool_skip = Signal(name="pool_skip")         # ... a LDHBZ of address 0: no request
        issue_resv = Signal(name="pool_issue_resv")  # the load/store sent reserved its room
        ovf_issue = Signal(name="pool_ovf_issue")    # an overflow load is sent this cycle
        # Destination entries reserved by the retire lanes this cycle (overflow entries).
        lres = [[Signal(name=f"lres{j}_{i}") for i in range(ND)] for j in range(2)]
        lres_key = [[Signal(sb + 2, name=f"lres_key{j}_{i}") for i in range(ND)]
                    for j in range(2)]
        wa_l = [[ptr_mems["wa"].write_port() for i in range(ND)] for j in range(2)]
        ret_go = [Signal(name=f"ret_go{j}") for j in range(2)]       # lane j retires

        # ---- S0: pick one ready slot per pipe (round robin) ----------------------------------
        tok_ok = Signal(S, name="tok_ok")         # every token operand has one
        m.d.comb += tok_ok.eq(all_of([~tmask[k] | nonempty[k] for k in range(K)]))
        s1 = []
        for pp in range(NP):
            # INT pipe: a busy slot is an emitting ITER or BSCAN, ready for its next token.
            go_on = busy if pp != 1 else Const(0, S)
            # Each slot has one pipe, so its results leave in firing order: FP slots pipe 1;
            # with a second INT pipe, LD/ST and ITER slots pipe 0 and the other INT/CTRL
            # slots pipe 2; otherwise every INT/MEM/CTRL slot pipe 0.
            unit = (isfp if pp == 1 else ~isfp if NP == 2
                    else ~isfp & (onp0 if pp == 0 else ~onp0))
            m.submodules[f"pick{pp}"] = picker = SlotPicker(S, pp != 1, pp)
            m.d.comb += [picker.i_ready.eq(known & unit & ((tok_ok & ~busy) | go_on)),
                         picker.i_noroom.eq(noroom), picker.i_busy.eq(busy)]
            slot0 = picker.o_pick.slot
            s1_valid = Signal(name=f"s1_valid{pp}")   # (tb/pe/probe.py)
            m.d.comb += s1_valid.eq(picker.o_s1.valid)
            s1_slot, s1_cont = picker.o_s1.slot, picker.o_s1.cont
            insn_r = insn_mem.read_port()
            m.d.comb += insn_r.addr.eq(slot0)
            op_r = []
            for k in range(K):
                head = fifo_addr(slot0, ptr_read("rp", fkey(k, slot0)))
                op_r.append([opmem[k][b].read_port() for b in range(NB)])
                m.d.comb += [rp.addr.eq(head) for rp in op_r[-1]]
            facc_r = None
            if pp != 1:
                scan_rs[pp] = scan_mem.read_port()
                m.d.comb += scan_rs[pp].addr.eq(slot0)
            if pp == 1:
                facc_r = facc_mem.read_port()
                m.d.comb += facc_r.addr.eq(slot0)
            s1.append(dict(valid=s1_valid, slot=s1_slot, cont=s1_cont, insn=insn_r, op_r=op_r,
                           facc_r=facc_r, local=[], hot=picker.o_s1.hot))

        # ---- S1 of each pipe: operands, room check, fire ----------------------------------
        for pp in range(NP):
            st = s1[pp]
            insn = Signal(insn_l, name=f"insn{pp}")
            m.d.comb += insn.eq(st["insn"].data)
            opv = []
            for k in range(K):
                v = Signal(64, name=f"opv{pp}_{k}")
                if NB == 2:
                    token = Mux(st["slot"][0], st["op_r"][k][1].data, st["op_r"][k][0].data)
                else:
                    token = Signal(p.TOKEN_BITS, name=f"tok{pp}_{k}")
                    with m.Switch(st["slot"][:lgb]):
                        for b in range(NB):
                            with m.Case(b):
                                m.d.comb += token.eq(st["op_r"][k][b].data)
                # A register operand by a case statement (Verilator: a few branches), not a
                # shift of the 16 concatenated registers (a 1,024-bit word operation).
                regv = Signal(p.TOKEN_BITS, name=f"regv{pp}_{k}")
                with m.Switch(getattr(insn, f"reg{k}")):
                    for r in range(p.regs):
                        with m.Case(r):
                            m.d.comb += regv.eq(regs[r])
                m.d.comb += v.eq(Mux(insn.regmask[k], regv,
                                     token))
                opv.append(v)
            has = [Signal(name=f"has{pp}_{i}") for i in range(K)]   # operand i given
            m.d.comb += [has[0].eq(insn.nsrc.any()), has[1].eq(insn.nsrc[1]),
                         has[2].eq(insn.nsrc.all())]
            is_op = {op: Signal(name=f"is_{op.name.lower()}{pp}")
                     for op in (Op.SWITCH, Op.LDHBZ)}
            for op, sig in is_op.items():
                m.d.comb += sig.eq(equals(insn.op, int(op)))

            # Destinations to serve; SWITCH keeps one branch.
            dmask = Signal(ND, name=f"dmask{pp}")
            valid_d = Cat(*[getattr(insn, f"d{i}_valid") for i in range(ND)])
            cond = opv[1][:32].any()
            first_n = Signal(ND, name=f"first_n{pp}")     # bit i: i < ntrue
            with m.Switch(insn.ntrue):
                for j in range(ND + 1):
                    with m.Case(j):
                        m.d.comb += first_n.eq((1 << j) - 1)
                with m.Default():
                    m.d.comb += first_n.eq((1 << ND) - 1)
            taken = Mux(cond, first_n, ~first_n)
            m.d.comb += dmask.eq(Mux(is_op[Op.SWITCH], valid_d & taken, valid_d))

            # The FP pipe's operation; a FACC step before its last emits no result, so it
            # needs no room.
            emits = Signal(name=f"emits{pp}")
            if pp == 1:
                m.submodules.fp_step = fstep = FpStep(p)
                m.d.comb += [fstep.i_insn.eq(insn), fstep.i_a.eq(opv[0]), fstep.i_b.eq(opv[1]),
                             fstep.i_c.eq(opv[2]), fstep.i_has_b.eq(has[1]),
                             fstep.i_has_c.eq(has[2]), fstep.i_facc.eq(st["facc_r"].data),
                             fstep.i_slot.eq(st["slot"]), fstep.i_ectx.eq(ends_cur[1].data),
                             fstep.i_dmask.eq(dmask), emits.eq(fstep.o_emits)]
            else:
                m.d.comb += emits.eq(1)

            # Room in local destinations (counting tokens in flight), and no same-cycle race
            # with a mesh token or the other pipe for the last free entry.
            room = Signal(name=f"room{pp}")
            room_terms = []
            for i in range(ND):
                dx, dy = getattr(insn, f"d{i}_x"), getattr(insn, f"d{i}_y")
                dslot, dop = getattr(insn, f"d{i}_slot"), getattr(insn, f"d{i}_operand")
                is_local = Signal(name=f"is_local{pp}_{i}")
                m.d.comb += is_local.eq(dmask[i] & (dx == coord.x) & (dy == coord.y) & emits)
                key = Cat(dop, dslot)
                m.d.comb += res_dest[pp][i].eq(key)
                clash = net_valid & (Cat(net_tok.operand, net_tok.slot) == key)
                for j in range(2):                 # so do the retire lanes' reservations
                    for i2 in range(ND):
                        clash = clash | (lres[j][i2] & (lres_key[j][i2] == key))
                for q in range(pp):                # pipes before this one go first
                    for j in range(ND):
                        clash = clash | (reserve[q][j] & (res_dest[q][j] == key))
                room_terms.append(~is_local | (~full_of(key) & ~clash))
                st["local"].append(is_local)
                w = wa_w[f"res{pp}_{i}"]
                m.d.comb += [w.addr.eq(key), w.data.eq(increment(ptr_read("wa", key))),
                             w.en.eq(reserve[pp][i])]
            m.d.comb += room.eq(Cat(*room_terms).all())
            st["room"] = room

            go = Signal(name=f"go{pp}")            # fires (or emits, for a continuation)
            no_resv = Signal(name=f"no_resv{pp}")  # an overflow load: reserves at retire
            st["go"] = go
            if pp != 1:
                alu, scan_r, scan_w = alus[pp], scan_rs[pp], scan_ws[pp]
                is_mem = Signal(name=f"is_mem{pp}")
                st["is_mem"] = is_mem
                if pp == 0:
                    m.d.comb += is_mem.eq(~st["cont"] & is_one_of(insn.op, _LOADS + _STORES))
                # The ALU operation and the slot's next SCAN/ITER/BSCAN state.
                m.submodules[f"int_step{pp}"] = istep = IntStep(p, pp)
                m.d.comb += [istep.i_insn.eq(insn), istep.i_a.eq(opv[0]), istep.i_b.eq(opv[1]),
                             istep.i_has_b.eq(has[1]), istep.i_cont.eq(st["cont"]),
                             istep.i_state.eq(scan_r.data), istep.i_ectx.eq(ends_cur[pp].data),
                             istep.i_dmask.eq(dmask), istep.i_is_mem.eq(is_mem),
                             istep.i_go.eq(go)]
                m.d.comb += [scan_w.addr.eq(st["slot"]), scan_w.en.eq(istep.o_state.en),
                             scan_w.data.eq(istep.o_state.data),
                             end_inc[pp].eq(istep.o_end_inc),
                             busy_set[pp].eq(istep.o_busy_set),
                             busy_clr[pp].eq(istep.o_busy_clr)]
                busy_set_slot[pp] = busy_clr_slot[pp] = st["slot"]
                m.d.comb += [alu.i_op.payload.op.eq(istep.o_alu.op),
                             alu.i_op.payload.a.eq(istep.o_alu.a),
                             alu.i_op.payload.b.eq(istep.o_alu.b),
                             alu.i_op.payload.tag.eq(istep.o_alu.tag)]

            if pp == 2:
                m.d.comb += [go.eq(st["valid"] & room & alu.i_op.ready),
                             alu.i_op.valid.eq(st["valid"] & room)]
            if pp == 0:
                # LD/ST: the request, the reorder pool entry, the room (reserved now or at
                # retirement).
                m.submodules.request = request = MemRequest(p, P)
                m.d.comb += [request.i_insn.eq(insn), request.i_a.eq(opv[0]),
                             request.i_b.eq(opv[1]), request.i_coord.eq(coord),
                             request.i_entry.eq(free_idx)]
                in_range = request.o_in_range
                # LDHBZ of an address token 0: +0.0 without a request (and without
                # an address check).  It still takes a pool entry, so that its slot's results
                # leave in issue order, entered as replied at once with the `zero` bit of
                # pool_info set: its retire lane sends 0, and pool_data keeps one write port,
                # the REPLY's.
                skip = pool_skip
                m.d.comb += skip.eq(is_op[Op.LDHBZ] & ~opv[0][:32].any())
                mem_ok = (req_q.i_data.ready | skip) & free_any
                # The memory lane (dispatcher) of the replies: lane 1 when some destination
                # is an operand 1 or 2, so the two operands of a FACC/FMADD fed by loads
                # arrive in the same cycle (weight loads feed operand 0 only, input loads
                # operand 1, also when a MOV of their fan-out tree comes first); one slot
                # always uses the same lane (its order holds).
                mem_lane = Signal(name="mem_lane")
                m.d.comb += mem_lane.eq(Cat(*[getattr(insn, f"d{i}_valid")
                                              & getattr(insn, f"d{i}_operand").any()
                                              for i in range(ND)]).any())
                # A load/store with room in its local destinations reserves them now, unless
                # its slot has overflow entries in the pool (a slot's reserved entries must
                # precede its overflow ones: an overflow head waiting for room must not wait
                # on a younger load that holds the room).  A load without room may still go
                # as an overflow entry while fewer than P/2 are in the pool.
                ovf_mode = Signal(name="ovf_mode")
                is_load = Signal(name="is_load")
                m.d.comb += is_load.eq(is_one_of(insn.op, _LOADS))
                m.d.comb += issue_resv.eq(room & ~ovf_mode)
                mem_go = Signal(name="mem_go")
                m.d.comb += mem_go.eq(mem_ok & (issue_resv | (is_load & ovf_free)))
                m.d.comb += go.eq(st["valid"] & Mux(is_mem, mem_go, room & alu.i_op.ready))
                m.d.comb += alu.i_op.valid.eq(st["valid"] & room & ~is_mem)
                m.d.comb += no_resv.eq(is_mem & ~issue_resv)

                m.d.comb += [
                    req_q.i_data.payload.eq(request.o_flit),
                    req_q.i_data.valid.eq(go & is_mem & in_range & ~skip),
                ]
                raise_err.append((go & is_mem & ~in_range & ~skip, PeError.BAD_ADDRESS,
                                  st["slot"]))
                issue = pool_issue
                m.d.comb += issue.eq(go & is_mem & (in_range | skip))
                m.d.comb += [pool.i_slot.eq(st["slot"]), pool.i_issue.valid.eq(issue),
                             pool.i_issue.ectx.eq(ends_cur[0].data),
                             pool.i_issue.lane.eq(mem_lane), pool.i_issue.resv.eq(issue_resv),
                             pool.i_issue.zero.eq(skip), ovf_mode.eq(pool.o_ovf_mode),
                             ovf_issue.eq(issue & ~issue_resv)]

            if pp == 1:
                fo = fstep.o_fpu
                m.d.comb += [fstep.i_go.eq(go), end_inc[1].eq(fstep.o_end_inc),
                             busy_set[1].eq(fstep.o_busy_set)]
                m.d.comb += [fpu.i_op.payload.op.eq(fo.op), fpu.i_op.payload.a.eq(fo.a),
                             fpu.i_op.payload.b.eq(fo.b), fpu.i_op.payload.c.eq(fo.c),
                             fpu.i_op.payload.tag.eq(fo.tag),
                             fpu.i_op.valid.eq(st["valid"] & room)]
                m.d.comb += go.eq(st["valid"] & room & fpu.i_op.ready)
                busy_set_slot[1] = st["slot"]

            fire = go & ~st["cont"]
            for k in range(K):
                m.d.comb += consume[pp][k].eq(fire & has[k] & ~insn.regmask[k])
                key = fkey(k, st["slot"])
                rpv = ptr_read("rp", key)
                w = rp_w[pp][k]
                m.d.comb += [w.addr.eq(key), w.data.eq(increment(rpv)), w.en.eq(consume[pp][k]),
                             cons_last[pp][k].eq(equals((ptr_read("wp", key) - rpv)[:pb], 1))]
            m.d.comb += cons_slot[pp].eq(st["slot"])
            m.d.comb += [ends_cur[pp].addr.eq(st["slot"]), ends_w[pp].addr.eq(st["slot"]),
                         ends_w[pp].data.eq(increment(ends_cur[pp].data)),
                         ends_w[pp].en.eq(end_inc[pp])]
            for i in range(ND):
                m.d.comb += reserve[pp][i].eq(go & st["local"][i] & ~no_resv)
            name = ("int", "fp", "int2")[pp]
            m.d.comb += [getattr(self.o_fire, f"{name}_valid").eq(fire),
                         getattr(self.o_fire, f"{name}_op").eq(insn.op)]

        # ---- unit results to the dispatchers -----------------------------------------------
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
        fdone = fpu.o_res.valid & fpu.o_res.ready & ftag.facc
        m.d.comb += [facc_w.addr.eq(ftag.slot), facc_w.en.eq(fdone),
                     facc_w.data.acc.eq(fpu.o_res.payload.result),
                     facc_w.data.count.eq(ftag.count)]
        # Configuring a slot (part 0 of its word) clears its state in memories: FIFO pointers,
        # END counts, SCAN/ITER and FACC state.  Memories keep their contents over a reset,
        # and a slot's previous program may have left tokens, an ITER value or a partial sum
        # behind.  The clear borrows ports of pipe 0 and the operand writes: configuration
        # precedes the run, so nothing else writes them in that cycle.
        clear = cfg_part0
        with m.If(clear):
            m.d.comb += [facc_w.addr.eq(cfg_slot), facc_w.en.eq(1), facc_w.data.eq(0),
                         scan_ws[0].addr.eq(cfg_slot), scan_ws[0].en.eq(1),
                         scan_ws[0].data.eq(0)]
            for pp in range(2):
                m.d.comb += [ends_w[pp].addr.eq(cfg_slot), ends_w[pp].en.eq(1),
                             ends_w[pp].data.eq(0)]
            for k in range(K):
                for w in (wp_w[k][0], rp_w[0][k], wa_w[f"res0_{k}"]):
                    m.d.comb += [w.addr.eq(fkey(k, cfg_slot)), w.en.eq(1), w.data.eq(0)]
        m.d.comb += busy_clr[1].eq(fdone)
        busy_clr_slot[1] = ftag.slot

        # ---- load/store replies: the reorder pool, retired in issue order ------------------
        m.d.comb += pool.i_reply.eq(inputs.o_reply)
        raise_err.append((inputs.o_reply.valid & inputs.o_reply.body.err, PeError.DBUF_ERROR,
                          pool.o_reply_slot))
        # Two retire lanes, one per memory dispatcher: each picks (R0, round robin) a
        # retirable entry of its lane, reads the reply and the instruction, and in R1 hands
        # the result to its dispatcher, which retires the entry; an overflow entry also needs
        # room in its local destinations then (reserved in that cycle, before the pipes'
        # reservations).  An R1 that cannot go is dropped: the entry stays and is picked
        # again (it is not picked while in R1).
        for j in range(2):
            dj = disp[2 + j]
            rt = pool.o_retire[j]
            insn_r2 = insn_mem.read_port()
            m.d.comb += insn_r2.addr.eq(rt.pick_slot)
            rinsn = Signal(insn_l, name=f"rinsn{j}")
            m.d.comb += rinsn.eq(insn_r2.data)
            # Room for an overflow entry: every local destination below depth, and no mesh
            # token or earlier lane reserving the same FIFO in this cycle.
            r_terms = []
            r_local = []
            for i in range(ND):
                dx, dy = getattr(rinsn, f"d{i}_x"), getattr(rinsn, f"d{i}_y")
                key = Cat(getattr(rinsn, f"d{i}_operand"), getattr(rinsn, f"d{i}_slot"))
                loc = Signal(name=f"r_local{j}_{i}")
                m.d.comb += [loc.eq(getattr(rinsn, f"d{i}_valid") & (dx == coord.x)
                                    & (dy == coord.y)),
                             lres_key[j][i].eq(key)]
                clash = net_valid & (Cat(net_tok.operand, net_tok.slot) == key)
                for q in range(j):
                    for i2 in range(ND):
                        clash = clash | (lres[q][i2] & (lres_key[q][i2] == key))
                r_terms.append(~loc | (~full_of(key) & ~clash))
                r_local.append(loc)
            r_room = Signal(name=f"r_room{j}")
            m.d.comb += r_room.eq(Cat(*r_terms).all())
            m.d.comb += [ret_go[j].eq(dj.i_res.valid & dj.i_res.ready),
                         pool.i_retire_go[j].eq(ret_go[j])]
            for i in range(ND):
                m.d.comb += [lres[j][i].eq(ret_go[j] & ~rt.resv & r_local[i]),
                             wa_l[j][i].addr.eq(lres_key[j][i]),
                             wa_l[j][i].data.eq(increment(ptr_read("wa", lres_key[j][i]))),
                             wa_l[j][i].en.eq(lres[j][i])]
            dpm = dj.i_res.payload
            r_store = is_one_of(rinsn.op, _STORES)
            m.d.comb += [
                dj.i_res.valid.eq(rt.valid & (rt.resv | r_room)),
                dpm.data.eq(Mux(r_store | rt.zero, Const(0, 64), rt.data)),
                dpm.dmask.eq(Cat(*[getattr(rinsn, f"d{i}_valid") for i in range(ND)])),
                dpm.end.eq(rinsn.end & r_store),            # a load's END is never sent (ISA)
                dpm.ectx.eq(rt.ectx),
            ]
            m.d.comb += [dpm.dests[i].eq(insn_dest(rinsn, i)) for i in range(ND)]

        # ---- remote flits: dispatchers -> o_rep (CTX_END messages coalesced) ----
        m.submodules.rep_port = rep_port = ReplyPort(p, self._micc, len(disp))
        for j, d in enumerate(disp):
            wiring.connect(m, d.o_flit, rep_port.i_flit[j])
        wiring.connect(m, rep_port.o_rep, wiring.flipped(self.o_rep))

        # ---- non-empty bits (the ready vector's view of the operand FIFOs) ----------------
        # A write wins over the last token's firing; configuring the slot over both.
        for k in range(K):
            set_ = any_of([hot(wr_slot[k][b]) & wr_en[k][b].replicate(S)
                           & Const(sum(1 << s for s in range(b, S, NB)), S)
                           for b in range(NB)])
            clr = any_of([hot(cons_slot[pp]) & (consume[pp][k] & cons_last[pp][k]).replicate(S)
                          for pp in range(NP)])
            m.d.sync += nonempty[k].eq(((nonempty[k] & ~clr) | set_)
                                       & ~(cfg_hot & clear.replicate(S)))
        for pp in range(NP):
            # A memory op that did not go, for whatever reason (no room, no pool entry, the
            # overflow cap), goes last too: one that kept failing while staying "fresh" starved
            # a slot whose stale flag said "no room" although its consumers were waiting for it
            # (a load's flag is only refreshed when it is picked: the 8 x 8's ~1,000-cycle
            # tails).
            st = s1[pp]
            st["last"] = Signal(name=f"goes_last{pp}")
            fail = (~st["room"] | st["is_mem"]) if pp == 0 else ~st["room"]
            m.d.comb += st["last"].eq(fail & ~st["go"])
        nr = noroom
        for pp in range(NP):                      # (a slot is in one pipe's S1 at a time)
            sel = s1[pp]["hot"]
            nr = (nr & ~sel) | (sel & s1[pp]["last"].replicate(S))
        m.d.sync += noroom.eq(nr)
        bset = any_of([hot(busy_set_slot[pp]) & busy_set[pp].replicate(S) for pp in range(NP)])
        bclr = any_of([hot(busy_clr_slot[pp]) & busy_clr[pp].replicate(S) for pp in range(NP)])
        m.d.sync += busy.eq((busy | bset) & ~bclr)

        # ---- sticky errors ---------------------------------------------------------------------
        m.submodules.errors = errors = ErrorLatch(p, [flag for _, flag, _ in raise_err])
        for port, (cond_, _, slot) in zip(errors.i_raise, raise_err):
            m.d.comb += [port.valid.eq(cond_), port.slot.eq(slot)]
        m.d.comb += self.o_error.eq(errors.o_error)
        return m


def make_pe(rows=8, cols=8, slots=64, operand_depth=4, regs=16, dbuf_bytes=2 * 1024 * 1024,
            x=-1, y=-1, micc_x=-1, micc_y=0, pool=32, int_issue=1, banks=None):
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
