"""The FDPU instruction set and instruction word: one source of truth for ``hw`` and ``sw``.

Semantics (``docs/isa.md`` has the full story)
----------------------------------------------
An instruction occupies one *slot* of one PE.  It waits for ``nsrc`` source operands; operand
``i`` comes either as a token delivered to ``(pe, slot, i)`` or, when bit ``i`` of ``regmask``
is set, from local register ``reg<i>`` (always present; registers are set at configuration).
When every operand is present and its results can be accepted, the instruction *fires*: it
consumes one token per token operand (the oldest: operands are matched per instruction in
arrival order, which keeps contexts in order) and sends its 64-bit result to each destination
``(x, y, slot, operand)``.  A missing trailing operand of an operation (``nsrc`` below its
arity) is the immediate: ``ADD`` with ``nsrc = 1`` is ``a + imm``.

Tokens are 64 bits.  Integer instructions read the low 32 bits of their operands as two's
complement and produce a 32-bit result zero-extended to 64 bits; comparisons give 1 or 0;
shifts use the low 5 bits of the shift amount.  Floating-point instructions work on four IEEE
754 binary16 lanes (lane 0 in bits 15:0), round to nearest even, subnormals kept, FMADD fused.
An FP immediate is ``imm[15:0]``, broadcast to the four lanes.  ``FMAX a, b`` is IEEE 754-2019
``maximum`` per lane: a NaN operand gives the canonical NaN, ``-0 < +0``, otherwise the larger
operand unchanged (no rounding); ``FMAX t0, #0`` (``imm = 0``, +0.0) is ReLU.

Special instructions:

* ``SWITCH data, cond[, feedback]``: when ``cond`` (low 32 bits) is non-zero, ``data`` goes to
  destinations ``0 .. ntrue-1``, else to ``ntrue .. MAX_DESTS-1``.  The optional third operand
  is the *feedback* operand of PAPER.md section 4: a token from the join instruction, whose
  value is ignored.  Its edge carries an initial token (a configuration *preload*), so the
  first context passes and each later one waits for the previous one to reach the join.
* ``MCAST data, mask`` (the masked multicast): ``imm`` = ``n`` (0..7) names a nibble of the
  mask; ``data`` (all 64 bits) goes to each destination ``i`` whose bit ``4 n + i`` of ``mask``
  is set, to none when no such bit is set (the firing still consumes both operands).  One
  input word reaches the rows of a block that store its column (docs/dataflow.md, "The sparse
  graphs' bound"); each destination receives a data-dependent number of tokens per context.
* ``CTX ctx``: the entry point of a context: the MicC delivers each context ID to operand 0;
  ``CTX`` forwards it.  Any number of ``CTX`` slots may exist; all receive every context.
* ``END`` flag (any instruction): when it fires, the PE also sends a context-end message to the
  MicC (for a store: when the Dbuf has acknowledged the write).  The message carries the
  number of earlier END messages of that slot, which is the context ID because an END
  instruction fires once per context and contexts pass each instruction in order.  The MicC
  expects ``ends_per_context`` such messages per context.
* ``ITER start`` (the loop instruction): ``imm[15:0]`` = ``count`` (1..65535), ``imm[31:16]`` =
  signed ``step`` (:func:`loop_imm_layout`: the sub-fields of every counting instruction's
  immediate); one firing emits ``count`` tokens ``start + i * step``, in order.  With
  ``count = 0`` in the immediate the count comes from the token (:func:`token_count`): start is
  ``start[31:0]``, count ``start[47:32]`` (0..65535); a token count of 0 fires and emits nothing.
* ``SCAN base, x`` (the integer prefix sum, for the sparse graph's ADD chain):
  keeps a 32-bit accumulator per slot, starting at 0; each firing computes ``acc += x`` and
  emits ``base + acc``; after ``imm[15:0]`` (1..65535) firings it restarts at 0.
* ``BSCAN mask, base`` (the bit-scan iterator, the sparse graph's whole decode of one
  FD-CSR row): ``imm[15:0]`` = ``count`` (1..32).  One firing consumes one ``mask`` and one
  ``base`` token and emits ``count`` tokens in order, like ``ITER``: token ``j`` is
  ``base + 2 * popcount(mask & ((2 << j) - 1))`` (32-bit wrap) when bit ``j`` of ``mask``
  (low 32 bits) is set, else ``0``.  With ``base`` = twice the row's value offset plus the
  item base this is the stored value's address plus 2, never 0, so a ``SWITCH`` whose data
  and condition are the same token sends stored weights one way and zeros the other.
* ``BPOS mask, base`` (the set-bit iterator, the zero-skipping graph's decode of one FD-CSR
  word): ``imm[15:0]`` = ``count`` (1..32), ``imm[31:16]`` = signed ``step``.  One firing
  consumes one ``mask`` and one ``base`` token and emits, in increasing ``j``, one token
  ``base + j * step`` (32-bit wrap) for each set bit ``j < count`` of ``mask`` (low 32 bits),
  one per issue cycle; a mask with no such bit fires and emits nothing.  Zero bits cost no
  token and no cycle: a row's input addresses, only where a weight is stored.
* ``FACC a, b[, n]`` (the accumulating loop body): keeps a SIMD-4 accumulator per slot,
  starting at -0.0 in every lane (so the first step is exactly ``a * b``); each firing computes
  ``acc = fma(a, b, acc)``; after ``count`` firings it emits ``acc`` and restarts.  With
  ``nsrc = 2`` the count is ``imm[15:0]`` (1..65535).  With ``nsrc = 3`` the immediate's
  count is 0 and the count comes from the token operand ``n``: the first step of each
  accumulation also consumes ``n`` (the other steps do not wait for it) and the accumulation
  takes ``n[47:32]`` steps (:func:`token_count`); a count of 0 is the PE's sticky
  ``BAD_COUNT`` error (the step is done as if the count were 1; the golden model raises), so
  a row with no stored weight is given one stored +0.0 by the host.  A count token with its
  continue bit (bit 48, :data:`TOKEN_CONTINUE_AT`) starts its accumulation from the slot's
  last result instead of -0.0, so one sum runs on over several counted runs (each emits what
  it has so far).  With ``nsrc = 2`` the
  immediate's ``step`` field (``imm[31:16]``) is the FACC's *span* ``s`` (0..15,
  :func:`facc_imm`): with ``s >= 1`` the accumulator also leaves after every ``2**s``
  steps of an accumulation, *without* restarting (a running partial sum, as the last step's
  result leaves), so one accumulation can span ``count / 2**s`` contexts that each feed it
  ``2**s`` steps and each store what it has so far (a context of a streamed plan,
  ``docs/dataflow.md``).
* ``LDH/LDHB/LDW/LDD addr``: load 2 (zero-extended), 2 (binary16 broadcast to four lanes),
  4 or 8 bytes from ``addr + imm``; ``STH/STW/STD addr, data``: store the low 2, 4 or 8 bytes
  of ``data`` at ``addr + imm`` and, once the Dbuf has written them, send a 0 token to the
  destinations (so a graph can wait for its stores before it ends a context).
* ``LDHBZ addr`` (the sparse graphs' value load): ``LDHB``, except that an ``addr``
  token whose low 32 bits are 0 gives +0.0 in the four lanes (the 64-bit token 0) *without a
  memory access*.  Results still leave in issue order.  A zero weight (BSCAN's token 0, or the
  SWITCH graph's zero branch) then costs the Dbufs nothing, as the paper's ``FIMM 0.0`` branch.
* ``IMM trigger`` / ``FIMM trigger``: emit the (sign-extended) immediate or the FP immediate
  when the trigger operand arrives (its value is ignored).

The ``pipe0`` flag (a scheduling hint; results never depend on it): issue this
INT/CTRL instruction on pipe 0, beside the loads, stores and ITERs, when the PE has two integer
pipes (``int_issue == 2``); with one INT pipe it is ignored.  Loads, stores and ITER always go
to pipe 0 (the flag changes nothing for them); an FP instruction with ``pipe0`` is an error.

Opcode 0 is ``INVALID``: an unconfigured slot; a token delivered to it is an error.
"""

import enum
import functools
from dataclasses import dataclass, field

from sw.spec.arch import bits_for
from sw.spec.bitfields import Field, Layout
from sw.spec.errors import FdpuError

__all__ = ["Unit", "Op", "Dest", "Instruction", "insn_layout", "loop_imm_layout", "loop_imm",
           "loop_count", "token_count", "token_continues", "count_token", "TOKEN_COUNT_AT",
           "TOKEN_CONTINUE_AT", "facc_imm",
           "facc_emits", "facc_results", "FACC_MAX_SPAN",
           "encode", "decode", "disassemble", "issue_pipe", "PIPE0_OPS", "OPCODE_BITS",
           "MCAST_NIBBLES", "mcast_selects"]

#: Width of the opcode field.
OPCODE_BITS = 6


class Unit(enum.Enum):
    """The PE pipe that executes an instruction."""
    NONE = "none"
    INT = "int"
    FP = "fp"
    MEM = "mem"
    CTRL = "ctrl"


class Op(enum.IntEnum):
    """Opcodes.  ``Op.X.arity`` is the number of operands, ``Op.X.unit`` its pipe."""
    INVALID = 0
    # 32-bit integer.
    ADD = 1
    SUB = 2
    MUL = 3
    AND = 4
    OR = 5
    XOR = 6
    SHL = 7
    SHR = 8
    SRA = 9
    EQ = 10
    LT = 11
    LTU = 12
    IMM = 13
    MOV = 14
    CTX = 15
    ITER = 16
    SCAN = 17
    BSCAN = 18
    BPOS = 19
    # SIMD-4 binary16.
    FIMM = 24
    FADD = 25
    FSUB = 26
    FMUL = 27
    FMADD = 28
    FACC = 29
    FMAX = 30
    # Memory.
    LDH = 32
    LDHB = 33
    LDW = 34
    LDD = 35
    STH = 36
    STW = 37
    STD = 38
    LDHBZ = 39
    # Control.
    SWITCH = 40
    MCAST = 41

    @property
    def arity(self):
        """Return the number of operands the operation takes (the last may be the immediate)."""
        return _ARITY[self]

    @property
    def min_operands(self):
        """Return the fewest operands that must be given (tokens or registers)."""
        return _MIN_OPERANDS.get(self, self.arity)

    @property
    def unit(self):
        """Return the :class:`Unit` that executes the operation."""
        return _UNIT[self]

    @property
    def is_load(self):
        """Return whether the operation is a load."""
        return self in (Op.LDH, Op.LDHB, Op.LDW, Op.LDD, Op.LDHBZ)

    @property
    def is_store(self):
        """Return whether the operation is a store."""
        return self in (Op.STH, Op.STW, Op.STD)

    @property
    def access_bytes(self):
        """Return the bytes a load or store moves (0 for other operations)."""
        return _ACCESS_BYTES.get(self, 0)


_ARITY = {
    Op.INVALID: 0,
    Op.ADD: 2, Op.SUB: 2, Op.MUL: 2, Op.AND: 2, Op.OR: 2, Op.XOR: 2, Op.SHL: 2, Op.SHR: 2,
    Op.SRA: 2, Op.EQ: 2, Op.LT: 2, Op.LTU: 2,
    Op.IMM: 1, Op.MOV: 1, Op.CTX: 1, Op.ITER: 1, Op.SCAN: 2, Op.BSCAN: 2, Op.BPOS: 2,
    Op.FIMM: 1, Op.FADD: 2, Op.FSUB: 2, Op.FMUL: 2, Op.FMADD: 3, Op.FACC: 3, Op.FMAX: 2,
    Op.LDH: 1, Op.LDHB: 1, Op.LDW: 1, Op.LDD: 1, Op.STH: 2, Op.STW: 2, Op.STD: 2,
    Op.LDHBZ: 1, Op.SWITCH: 3, Op.MCAST: 2,
}
# Operations whose last operand may be the immediate accept one operand fewer; SWITCH's
# feedback operand is optional, and so is FACC's count operand (else the count is the
# immediate's).  Operations that use the immediate for something else (IMM, FIMM, ITER, SCAN,
# BSCAN, BPOS, loads, stores) need all their operands.
_MIN_OPERANDS = {
    Op.ADD: 1, Op.SUB: 1, Op.MUL: 1, Op.AND: 1, Op.OR: 1, Op.XOR: 1, Op.SHL: 1, Op.SHR: 1,
    Op.SRA: 1, Op.EQ: 1, Op.LT: 1, Op.LTU: 1,
    Op.FADD: 1, Op.FSUB: 1, Op.FMUL: 1, Op.FMADD: 2, Op.FACC: 2, Op.FMAX: 1,
    Op.SWITCH: 2,
}
_UNIT = {op: Unit.INT for op in Op}
_UNIT.update({Op.INVALID: Unit.NONE, Op.SWITCH: Unit.CTRL, Op.MCAST: Unit.CTRL,
              Op.CTX: Unit.CTRL, Op.ITER: Unit.CTRL, Op.BSCAN: Unit.CTRL, Op.BPOS: Unit.CTRL})
_UNIT.update({op: Unit.FP for op in (Op.FIMM, Op.FADD, Op.FSUB, Op.FMUL, Op.FMADD, Op.FACC,
                                     Op.FMAX)})
_UNIT.update({op: Unit.MEM for op in (Op.LDH, Op.LDHB, Op.LDW, Op.LDD, Op.STH, Op.STW,
                                      Op.STD, Op.LDHBZ)})
_ACCESS_BYTES = {Op.LDH: 2, Op.LDHB: 2, Op.LDW: 4, Op.LDD: 8, Op.STH: 2, Op.STW: 4, Op.STD: 8,
                 Op.LDHBZ: 2}


#: The nibbles of a 32-bit mask an ``MCAST`` can name (its ``imm``).
MCAST_NIBBLES = 8


def mcast_selects(insn, mask):
    """Return the indices of ``insn``'s destinations an ``MCAST`` with mask token ``mask``
    serves (the module doc)."""
    bits = (mask & 0xFFFF_FFFF) >> (4 * insn.imm)
    return [i for i in range(len(insn.dests)) if bits >> i & 1]


def issue_pipe(op, pipe0=False):
    """Return the RTL PE's issue pipe of ``op`` with two INT pipes: ``"fp"``, ``"p0"`` or ``"p2"``.

    FP operations issue on the FP pipe; loads, stores, ``ITER`` and the INT/CTRL instructions
    with the ``pipe0`` hint (``Instruction.pipe0``) on pipe 0, beside the loads; every other
    INT/CTRL instruction (``BSCAN`` and ``BPOS`` included) on pipe 2.  With ``int_issue = 1``
    pipes 0 and 2 are one pipe.  The one statement of the rule: the PE fixes a slot's pipe by
    it when the slot is configured (``hw.pe.pe``), the golden model's cycle estimate and the
    blocking chooser's issue counts follow it (docs/pe.md, "Second INT pipe").
    """
    if op.unit is Unit.FP:
        return "fp"
    return "p0" if op.unit is Unit.MEM or op is Op.ITER or pipe0 else "p2"


#: The opcodes that issue on pipe 0 whatever the hint: loads, stores and ``ITER``.
PIPE0_OPS = tuple(op for op in Op if op is not Op.INVALID and issue_pipe(op) == "p0")


@dataclass(frozen=True)
class Dest:
    """A destination: operand ``operand`` of slot ``slot`` of the PE at ``(x, y)``."""
    x: int
    y: int
    slot: int
    operand: int

    def __str__(self):
        return f"({self.x},{self.y}).{self.slot}.{self.operand}"


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction word.

    ``regs[i]`` is the register read for operand ``i`` when bit ``i`` of ``regmask`` is set.
    ``dests`` lists up to ``MAX_DESTS`` destinations; for ``SWITCH`` the first ``ntrue`` are the
    branch taken when the condition is non-zero.  ``imm`` is a 32-bit two's-complement value.
    ``pipe0`` is the pipe hint of the module doc (last, so positional construction is kept).
    """
    op: Op
    nsrc: int = 0
    regmask: int = 0
    regs: tuple = (0, 0, 0)
    end: bool = False
    ntrue: int = 0
    imm: int = 0
    dests: tuple = field(default_factory=tuple)
    pipe0: bool = False

    @property
    def count(self):
        """Return the ``count`` sub-field of ``imm`` (:func:`loop_imm_layout`)."""
        return loop_count(self.imm)

    @property
    def step(self):
        """Return the signed ``step`` sub-field of ``imm`` (:func:`loop_imm_layout`)."""
        return self.imm >> _LOOP_STEP_AT          # imm is signed: an arithmetic shift

    @property
    def token_operands(self):
        """Return the indices of the operands that arrive as tokens."""
        return tuple(i for i in range(self.nsrc) if not self.regmask >> i & 1)

    def check(self, params):
        """Raise :class:`FdpuError` unless the instruction is well formed for ``params``."""
        op = Op(self.op)
        if op is Op.INVALID:
            if self != Instruction(Op.INVALID):
                raise FdpuError("an INVALID (empty) slot must have every field 0")
            return
        if not op.min_operands <= self.nsrc <= op.arity:
            raise FdpuError(f"{op.name} takes {op.min_operands}..{op.arity} operands, "
                            f"not {self.nsrc}")
        if self.regmask >> self.nsrc:
            raise FdpuError(f"{op.name}: regmask {self.regmask:#b} names an operand beyond "
                            f"nsrc = {self.nsrc}")
        if len(self.regs) != params.MAX_OPERANDS or any(
                not 0 <= r < params.regs for r in self.regs):
            raise FdpuError(f"{op.name}: registers {self.regs} must be 3 indices in "
                            f"0..{params.regs - 1}")
        if not -(1 << 31) <= self.imm < 1 << 31:
            raise FdpuError(f"{op.name}: immediate {self.imm} does not fit 32 signed bits")
        if len(self.dests) > params.MAX_DESTS:
            raise FdpuError(f"{op.name}: {len(self.dests)} destinations, at most "
                            f"{params.MAX_DESTS}")
        if self.pipe0 and op.unit is Unit.FP:
            raise FdpuError(f"{op.name}: pipe0 (the INT pipe hint) is set on an FP instruction; "
                            f"it is allowed only on INT/MEM/CTRL instructions")
        if op is Op.SWITCH:
            if not 0 <= self.ntrue <= len(self.dests):
                raise FdpuError(f"SWITCH: ntrue = {self.ntrue} must be in 0..{len(self.dests)}")
        elif self.ntrue:
            raise FdpuError(f"{op.name}: ntrue is only for SWITCH")
        if op is Op.SCAN or op is Op.FACC and self.nsrc == 2:
            if not 1 <= self.count <= _LOOP_COUNT_MASK:
                raise FdpuError(f"{op.name}: count imm[15:0] must be in 1..{_LOOP_COUNT_MASK}, "
                                f"got 0")
        if op is Op.FACC and not 0 <= self.step <= FACC_MAX_SPAN:
            raise FdpuError(f"FACC: the span imm[31:16] must be in 0..{FACC_MAX_SPAN} (partial "
                            f"results every 2**span steps; 0: none), got {self.step}")
        if op is Op.FACC and self.nsrc == 3:
            if self.step:
                raise FdpuError("FACC with a count operand (nsrc = 3): the span imm[31:16] "
                                "must be 0")
            if self.count:
                raise FdpuError(f"FACC with a count operand (nsrc = 3): count imm[15:0] must be "
                                f"0, got {self.count}")
            if self.regmask >> 2 & 1:
                raise FdpuError("FACC: the count operand (operand 2) must be a token, "
                                "not a register")
        if op is Op.MCAST and not 0 <= self.imm < MCAST_NIBBLES:
            raise FdpuError(f"MCAST: the mask's nibble imm must be in 0..{MCAST_NIBBLES - 1}, "
                            f"got {self.imm}")
        if op in (Op.BSCAN, Op.BPOS) and not 1 <= self.count <= 32:
            raise FdpuError(f"{op.name}: count imm[15:0] must be in 1..32 (the bits of the "
                            f"mask), got {self.count}")
        for d in self.dests:
            if not (0 <= d.x < params.cols and 0 <= d.y < params.rows):
                raise FdpuError(f"{op.name}: destination {d} is not a PE of the "
                                f"{params.rows}x{params.cols} array")
            if not 0 <= d.slot < params.slots:
                raise FdpuError(f"{op.name}: destination {d} names slot {d.slot}, "
                                f"allowed 0..{params.slots - 1}")
            if not 0 <= d.operand < params.MAX_OPERANDS:
                raise FdpuError(f"{op.name}: destination {d} names operand {d.operand}, "
                                f"allowed 0..{params.MAX_OPERANDS - 1}")


@functools.lru_cache(maxsize=32)
def insn_layout(params):
    """Return the :class:`~sw.spec.bitfields.Layout` of an instruction word for ``params``
    (one shared object per ``params``: layouts are not changed after they are made).

    The word is padded to a multiple of 64 bits: configuration sends it in 64-bit parts.  The
    fields up to ``imm`` (``pipe0`` included) fit in part 0, which the PE decodes when a slot is
    configured (its unit and pipe).
    """
    xb, yb = bits_for(params.cols), bits_for(params.rows)
    fields = [
        Field("op", OPCODE_BITS),
        Field("nsrc", 2),
        Field("regmask", params.MAX_OPERANDS),
        *[Field(f"reg{i}", params.reg_bits) for i in range(params.MAX_OPERANDS)],
        Field("end", 1),
        Field("pipe0", 1),
        Field("ntrue", bits_for(params.MAX_DESTS + 1)),
        Field("imm", 32, signed=True),
    ]
    for i in range(params.MAX_DESTS):
        fields += [Field(f"d{i}_valid", 1), Field(f"d{i}_x", xb), Field(f"d{i}_y", yb),
                   Field(f"d{i}_slot", params.slot_bits), Field(f"d{i}_operand", 2)]
    used = sum(f.width for f in fields)
    return Layout("instruction", fields, width=-(-used // 64) * 64)


def loop_imm_layout():
    """Return the :class:`~sw.spec.bitfields.Layout` of the 32-bit immediate of the counting
    instructions (the ``imm`` field of :func:`insn_layout`).

    * ``count`` (``imm[15:0]``): ``ITER``'s and ``BSCAN``'s tokens per firing, ``BPOS``'s
      mask bits, ``SCAN``'s firings per restart, ``FACC``'s firings per result; 0 for an
      ``ITER`` or ``FACC`` whose count comes from a token (:func:`token_count`).
    * ``step`` (``imm[31:16]``, signed): ``ITER``'s and ``BPOS``'s increment, ``FACC``'s
      span (:func:`facc_imm`; unused by the others).

    :attr:`Instruction.count` and :attr:`Instruction.step` read it, :func:`loop_imm` writes it,
    the PE decodes it (``hw.pe.layouts.loop_imm_struct``).
    """
    return Layout("loop immediate", [Field("count", 16), Field("step", 16, signed=True)])


_LOOP = loop_imm_layout()
_LOOP_COUNT_AT = _LOOP.offsets["count"]
_LOOP_COUNT_MASK = (1 << _LOOP.field("count").width) - 1
_LOOP_STEP_AT = _LOOP.offsets["step"]


def loop_imm(count, step=0):
    """Return the signed 32-bit ``imm`` of a counting instruction (:func:`loop_imm_layout`).

    Raises :class:`FdpuError` when ``count`` is not in 0..65535 or ``step`` not in
    -32768..32767.
    """
    word = _LOOP.pack(count=count, step=step)
    return word - (1 << 32) if word >> 31 else word


#: The largest FACC span: partial results at most every ``2**15`` steps (``count`` < 2**16).
FACC_MAX_SPAN = 15


def facc_imm(count, span=0):
    """Return the immediate of a ``FACC`` of ``count`` steps per accumulation (``nsrc = 2``)
    that also emits its running sum after every ``2**span`` steps (``span`` 0: only at the
    end; module doc).

    Raises :class:`FdpuError` when ``count`` is not in 1..65535 or ``span`` not in
    0..:data:`FACC_MAX_SPAN`.
    """
    if not 1 <= count <= _LOOP_COUNT_MASK or not 0 <= span <= FACC_MAX_SPAN:
        raise FdpuError(f"FACC: count {count} must be in 1..{_LOOP_COUNT_MASK} and span {span} "
                        f"in 0..{FACC_MAX_SPAN}")
    return loop_imm(count, span)


def facc_emits(count, span, done):
    """Return whether the ``done``-th step (1-based) of an accumulation of ``count`` steps
    with span ``span`` emits (the last step, or with a span every ``2**span``-th)."""
    return done == count or span > 0 and done % (1 << span) == 0


def facc_results(count, span, steps):
    """Return the results ``steps`` steps of a FACC of ``count`` steps per accumulation and
    span ``span`` emit (``steps`` may be a :class:`~fractions.Fraction`, a rate per context:
    then the emissions are counted at their average, one per ``2**span`` steps and one per
    accumulation's last, remainder, step)."""
    if not span:
        return steps // count if isinstance(steps, int) else steps / count
    per = count >> span << span
    whole = (count >> span) + (count != per)        # the emissions of one accumulation
    if not isinstance(steps, int):
        return steps * whole / count
    return steps // count * whole + (steps % count) // (1 << span)


def loop_count(imm):
    """Return the ``count`` sub-field of the immediate ``imm`` (:func:`loop_imm_layout`)."""
    return (imm >> _LOOP_COUNT_AT) & _LOOP_COUNT_MASK


#: Where a count token carries its count: bits ``[47:32]`` (``ITER`` with count 0 reads its
#: start from bits ``[31:0]`` of the same token; ``FACC``'s operand 2).
TOKEN_COUNT_AT = 32

#: A count token's *continue* bit (bit 48): a counted ``FACC`` whose accumulation this token
#: starts takes the slot's last result as its start value instead of -0.0 (one accumulation
#: over several counted runs: the skip graph streamed over an item's contexts).  ``ITER``
#: ignores it.
TOKEN_CONTINUE_AT = 48


def token_count(token):
    """Return the count a count token carries: bits ``[47:32]`` of the 64-bit ``token``."""
    return (token >> TOKEN_COUNT_AT) & _LOOP_COUNT_MASK


def token_continues(token):
    """Return whether the count token ``token`` has its continue bit
    (:data:`TOKEN_CONTINUE_AT`) set."""
    return bool(token >> TOKEN_CONTINUE_AT & 1)


def count_token(start, count, continues=False):
    """Return the 64-bit token of ``start`` (low 32 bits), ``count`` (bits 47:32) and, with
    ``continues``, the continue bit (:data:`TOKEN_CONTINUE_AT`).

    Raises :class:`FdpuError` unless ``start`` fits 32 bits and ``count`` is in 0..65535.
    """
    if not 0 <= start < 1 << 32 or not 0 <= count <= _LOOP_COUNT_MASK:
        raise FdpuError(f"count token: start {start} must be in 0..2**32-1 and count {count} "
                        f"in 0..{_LOOP_COUNT_MASK}")
    return start | count << TOKEN_COUNT_AT | int(bool(continues)) << TOKEN_CONTINUE_AT


def encode(insn, params):
    """Return the instruction word (an int) of ``insn`` for ``params``."""
    insn.check(params)
    values = dict(op=int(insn.op), nsrc=insn.nsrc, regmask=insn.regmask, end=int(insn.end),
                  pipe0=int(insn.pipe0), ntrue=insn.ntrue, imm=insn.imm)
    values.update({f"reg{i}": r for i, r in enumerate(insn.regs)})
    for i, d in enumerate(insn.dests):
        values.update({f"d{i}_valid": 1, f"d{i}_x": d.x, f"d{i}_y": d.y, f"d{i}_slot": d.slot,
                       f"d{i}_operand": d.operand})
    return insn_layout(params).pack(**values)


def decode(word, params):
    """Return the :class:`Instruction` of instruction word ``word``; check it is well formed.

    Raises :class:`FdpuError` for an unknown opcode, destinations with gaps, or any field the
    instruction cannot have (see :meth:`Instruction.check`).
    """
    f = insn_layout(params).unpack(word)
    try:
        op = Op(f["op"])
    except ValueError:
        raise FdpuError(f"unknown opcode {f['op']} in instruction word {word:#x}") from None
    dests = []
    for i in range(params.MAX_DESTS):
        if f[f"d{i}_valid"]:
            if len(dests) != i:
                raise FdpuError(f"instruction word {word:#x}: destination {i} is valid but "
                                f"destination {len(dests)} is not (destinations must be packed)")
            dests.append(Dest(f[f"d{i}_x"], f[f"d{i}_y"], f[f"d{i}_slot"],
                              f[f"d{i}_operand"]))
    insn = Instruction(op=op, nsrc=f["nsrc"], regmask=f["regmask"],
                       regs=tuple(f[f"reg{i}"] for i in range(params.MAX_OPERANDS)),
                       end=bool(f["end"]), ntrue=f["ntrue"], imm=f["imm"], dests=tuple(dests),
                       pipe0=bool(f["pipe0"]))
    insn.check(params)
    return insn


def disassemble(insn):
    """Return one readable line for ``insn``, e.g. ``FMADD t0, t1, r3 -> (1,0).5.2 [end]``.

    A set ``pipe0`` hint is shown as ``[pipe0]`` at the end.
    """
    op = Op(insn.op)
    if op is Op.INVALID:
        return "INVALID"
    operands = [f"r{insn.regs[i]}" if insn.regmask >> i & 1 else f"t{i}"
                for i in range(insn.nsrc)]
    if insn.nsrc < op.arity and op.min_operands <= insn.nsrc and \
            op not in (Op.SWITCH, Op.FACC):
        operands.append(f"#{insn.imm}")
    elif op in (Op.IMM, Op.LDH, Op.LDHB, Op.LDW, Op.LDD, Op.STH, Op.STW, Op.STD):
        operands.append(f"#{insn.imm}")
    elif op is Op.FIMM:
        operands.append(f"#0x{insn.imm & 0xFFFF:04x}")
    elif op in (Op.ITER, Op.BPOS):
        count = "token" if op is Op.ITER and insn.count == 0 else insn.count
        operands.append(f"count={count} step={insn.step}")
    elif op is Op.FACC and insn.nsrc == 3:
        pass                                      # the count is operand 2
    elif op is Op.FACC and insn.step:
        operands.append(f"count={insn.count} every={1 << insn.step}")
    elif op in (Op.FACC, Op.SCAN, Op.BSCAN):
        operands.append(f"count={insn.count}")
    elif op is Op.MCAST:
        operands.append(f"nibble={insn.imm}")
    text = f"{op.name} {', '.join(operands)}".rstrip()
    if op is Op.SWITCH:
        taken = ", ".join(map(str, insn.dests[:insn.ntrue])) or "-"
        other = ", ".join(map(str, insn.dests[insn.ntrue:])) or "-"
        text += f" -> true: {taken}; false: {other}"
    elif insn.dests:
        text += " -> " + ", ".join(map(str, insn.dests))
    if insn.end:
        text += " [end]"
    if insn.pipe0:
        text += " [pipe0]"
    return text
