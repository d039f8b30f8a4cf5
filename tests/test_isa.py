"""Tests of the ISA (:mod:`sw.spec.isa`), the packet formats (:mod:`sw.spec.packet`), the bit-field
layouts and the array parameters: encode/decode round trips, every decode error, the
disassembler, stable packet headers, coordinates, routes and the address map."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.spec import isa, packet
from sw.spec.arch import PAPER, ArrayParams, Dir
from sw.spec.bitfields import Field, Layout
from sw.spec.errors import FdpuError
from sw.spec.isa import PIPE0_OPS, Dest, Instruction, Op, Unit, issue_pipe

SEED = int(os.environ.get("FDPU_SEED", "20261130"))
SMALL = ArrayParams(rows=2, cols=3, slots=16, regs=4, operand_depth=4, int_issue=1)


@st.composite
def instructions(draw, params):
    op = draw(st.sampled_from([o for o in Op if o is not Op.INVALID]))
    nsrc = draw(st.integers(op.min_operands, op.arity))
    regmask = draw(st.integers(0, (1 << nsrc) - 1)) if nsrc else 0
    regs = tuple(draw(st.integers(0, params.regs - 1)) for _ in range(3))
    ndest = draw(st.integers(0, params.MAX_DESTS))
    dests = tuple(Dest(draw(st.integers(0, params.cols - 1)), draw(st.integers(0, params.rows - 1)),
                       draw(st.integers(0, params.slots - 1)), draw(st.integers(0, 2)))
                  for _ in range(ndest))
    imm = draw(st.integers(-(1 << 31), (1 << 31) - 1))
    if op is Op.SCAN and imm & 0xFFFF == 0:
        imm |= 1
    if op is Op.FACC:
        # nsrc 2: the count is the immediate's (1..65535), imm[31:16] a span 0..15; nsrc 3:
        # operand 2 (a token) is, and there is no span.
        span = 0 if nsrc == 3 else (imm >> 16) & isa.FACC_MAX_SPAN
        imm = (span << 16) | (0 if nsrc == 3 else imm & 0xFFFF or 1)
        regmask &= 0b011
    if op in (Op.BSCAN, Op.BPOS):
        imm = (imm & ~0xFFFF) | (imm & 0xFFFF) % 32 + 1
    if op is Op.MCAST:
        imm &= isa.MCAST_NIBBLES - 1
    ntrue = draw(st.integers(0, ndest)) if op is Op.SWITCH else 0
    pipe0 = draw(st.booleans()) if op.unit is not Unit.FP else False
    return Instruction(op, nsrc, regmask, regs, draw(st.booleans()), ntrue, imm, dests, pipe0)


@pytest.mark.parametrize("params", [PAPER, SMALL, ArrayParams(rows=1, cols=1, slots=2,
                                                              operand_depth=4, int_issue=1)])
def test_round_trip(params):
    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(instructions(params))
    def check(insn):
        word = isa.encode(insn, params)
        assert 0 <= word < 1 << isa.insn_layout(params).width
        assert isa.decode(word, params) == insn
    check()


def test_word_width_and_struct_fields():
    lay = isa.insn_layout(PAPER)
    assert lay.width == 128 and lay.used <= 128
    assert sum(lay.struct_fields().values()) == 128
    assert list(lay.struct_fields())[0] == "op"


def test_fields_are_where_the_layout_says():
    insn = Instruction(Op.ADD, 1, imm=-2, dests=(Dest(1, 0, 5, 2),))
    f = isa.insn_layout(PAPER).unpack(isa.encode(insn, PAPER))
    assert f["op"] == Op.ADD and f["nsrc"] == 1 and f["imm"] == -2
    assert (f["d0_valid"], f["d0_x"], f["d0_slot"], f["d0_operand"]) == (1, 1, 5, 2)
    assert f["d1_valid"] == 0


@pytest.mark.parametrize("params", [PAPER, ArrayParams(slots=128, int_issue=2, operand_depth=4),
                                    ArrayParams(rows=16, cols=16, slots=256, operand_depth=4,
                                                int_issue=1)])
def test_pipe0_hint_is_one_bit_of_part_0(params):
    # the PE decodes a slot's pipe from part 0 of the word when it is configured.
    lay = isa.insn_layout(params)
    offset = 0
    for f in lay.fields:
        if f.name == "pipe0":
            break
        offset += f.width
    assert f.name == "pipe0" and f.width == 1 and offset < 64
    plain = Instruction(Op.MOV, 1, dests=(Dest(0, 0, 1, 0),))
    hinted = Instruction(Op.MOV, 1, dests=(Dest(0, 0, 1, 0),), pipe0=True)
    assert isa.encode(hinted, params) ^ isa.encode(plain, params) == 1 << offset
    assert isa.decode(isa.encode(hinted, params), params).pipe0
    assert isa.disassemble(hinted) == "MOV t0 -> (0,0).1.0 [pipe0]"
    assert not Instruction(Op.ADD, 2).pipe0                   # default: no hint
    for op in (Op.LDW, Op.STD, Op.ITER, Op.BSCAN, Op.SWITCH, Op.CTX):  # allowed, not FP
        Instruction(op, op.min_operands, imm=1, pipe0=True).check(params)


def test_decode_unknown_opcode():
    with pytest.raises(FdpuError, match="unknown opcode 63"):
        isa.decode(63, PAPER)


def test_decode_gapped_destinations():
    lay = isa.insn_layout(PAPER)
    word = lay.pack(op=int(Op.MOV), nsrc=1, d1_valid=1)
    with pytest.raises(FdpuError, match="destinations must be packed"):
        isa.decode(word, PAPER)


@pytest.mark.parametrize("insn, match", [
    (Instruction(Op.ADD, 0), "takes 1..2 operands"),
    (Instruction(Op.FMADD, 3, regmask=0b1000), "regmask"),
    (Instruction(Op.MOV, 1, ntrue=1), "ntrue is only for SWITCH"),
    (Instruction(Op.SWITCH, 2, ntrue=1), "ntrue = 1 must be in 0..0"),
    (Instruction(Op.SCAN, 2, imm=0), "count imm"),
    (Instruction(Op.FACC, 2, imm=0), "count imm"),
    (Instruction(Op.FACC, 3, imm=4), "count operand .* must be 0, got 4"),
    (Instruction(Op.FACC, 3, regmask=0b100), "operand 2.* must be a token"),
    (Instruction(Op.BPOS, 2, imm=0), "BPOS: count imm"),
    (Instruction(Op.BPOS, 2, imm=33), "must be in 1..32"),
    (Instruction(Op.BSCAN, 2, imm=33), "must be in 1..32"),
    (Instruction(Op.BSCAN, 2, imm=0), "count imm"),
    (Instruction(Op.MOV, 1, dests=(Dest(8, 0, 0, 0),)), "not a PE"),
    (Instruction(Op.MOV, 1, dests=(Dest(0, 0, 128, 0),)), "slot 128"),
    (Instruction(Op.MOV, 1, dests=(Dest(0, 0, 0, 3),)), "operand 3"),
    (Instruction(Op.MOV, 1, dests=(Dest(0, 0, 0, 0),) * 5), "at most 4"),
    (Instruction(Op.MOV, 1, imm=1 << 31), "32 signed bits"),
    (Instruction(Op.MOV, 1, regs=(0, 0, 16)), "registers"),
    (Instruction(Op.INVALID, 1), "INVALID"),
    (Instruction(Op.INVALID, pipe0=True), "INVALID"),
    (Instruction(Op.FMADD, 3, pipe0=True), "FMADD: pipe0 .* FP instruction"),
    (Instruction(Op.FACC, 2, imm=4, pipe0=True), "FACC: pipe0 .* only on INT/MEM/CTRL"),
])
def test_check_rejects(insn, match):
    with pytest.raises(FdpuError, match=match):
        isa.encode(insn, PAPER)


def test_decode_rejects_malformed_word():
    lay = isa.insn_layout(PAPER)
    with pytest.raises(FdpuError, match="takes 1..2"):
        isa.decode(lay.pack(op=int(Op.ADD), nsrc=3), PAPER)
    with pytest.raises(FdpuError, match="wider than"):
        isa.decode(1 << 128, PAPER)


def test_token_count_is_bits_47_to_32():
    tok = isa.count_token(0x1234_5678, 513)
    assert tok == 0x0201_1234_5678 and isa.token_count(tok) == 513
    assert isa.token_count(tok | 0xFFFF << 48) == 513
    with pytest.raises(FdpuError, match="count 65536 in 0..65535"):
        isa.count_token(0, 65536)
    assert not isa.token_continues(tok) and not isa.token_continues(tok | 1 << 49)


def test_count_token_continue_bit_is_bit_48():
    tok = isa.count_token(0x1234_5678, 513, continues=True)
    assert tok == 1 << 48 | 0x0201_1234_5678 and isa.TOKEN_CONTINUE_AT == 48
    assert isa.token_continues(tok) and isa.token_count(tok) == 513


def test_scan_and_opcode_properties():
    assert Op.SCAN.arity == 2 and Op.SCAN.min_operands == 2 and Op.SCAN.unit.value == "int"
    assert Op.FACC.unit.value == "fp" and Op.SWITCH.min_operands == 2
    assert Op.FMAX.arity == 2 and Op.FMAX.min_operands == 1 and Op.FMAX.unit is Unit.FP
    assert issue_pipe(Op.FMAX) == "fp"
    assert Op.LDHB.is_load and Op.STD.is_store and Op.STD.access_bytes == 8
    assert len({int(o) for o in Op}) == len(Op) and max(Op) < 1 << isa.OPCODE_BITS


@pytest.mark.parametrize("insn, text", [
    (Instruction(Op.FMADD, 3, regmask=0b100, regs=(0, 0, 3), end=True,
                 dests=(Dest(1, 0, 5, 2),)), "FMADD t0, t1, r3 -> (1,0).5.2 [end]"),
    (Instruction(Op.ADD, 1, imm=-4), "ADD t0, #-4"),
    (Instruction(Op.SWITCH, 3, ntrue=1, dests=(Dest(0, 0, 1, 0), Dest(0, 0, 2, 0))),
     "SWITCH t0, t1, t2 -> true: (0,0).1.0; false: (0,0).2.0"),
    (Instruction(Op.ITER, 1, imm=(8 << 16) | 40), "ITER t0, count=40 step=8"),
    (Instruction(Op.ITER, 1, imm=(-2 << 16) | 3), "ITER t0, count=3 step=-2"),
    (Instruction(Op.SCAN, 2, imm=16), "SCAN t0, t1, count=16"),
    (Instruction(Op.BSCAN, 2, imm=16), "BSCAN t0, t1, count=16"),
    (Instruction(Op.BPOS, 2, imm=(8 << 16) | 32), "BPOS t0, t1, count=32 step=8"),
    (Instruction(Op.ITER, 1, imm=2 << 16), "ITER t0, count=token step=2"),
    (Instruction(Op.FACC, 2, imm=7), "FACC t0, t1, count=7"),
    (Instruction(Op.FACC, 3), "FACC t0, t1, t2"),
    (Instruction(Op.FIMM, 1, imm=0x3C00), "FIMM t0, #0x3c00"),
    (Instruction(Op.FMAX, 1, imm=0), "FMAX t0, #0"),
    (Instruction(Op.FMAX, 2, regmask=0b10, regs=(0, 2, 0)), "FMAX t0, r2"),
    (Instruction(Op.LDHB, 1, imm=6), "LDHB t0, #6"),
    (Instruction(Op.INVALID), "INVALID"),
])
def test_disassemble(insn, text):
    assert isa.disassemble(insn) == text


# Packets --------------------------------------------------------------------------------------

def test_packet_header_is_stable():
    h = packet.header_layout(PAPER)
    assert [(f.name, f.width) for f in h.fields] == [("kind", 3), ("dst_x", 4), ("dst_y", 4)]
    load = [f.name for f in packet.body_layout(packet.Kind.LOAD, PAPER).fields]
    assert load == ["addr", "size", "bcast", "src_x", "src_y", "slot", "tag"]
    store = [f.name for f in packet.body_layout(packet.Kind.STORE, PAPER).fields]
    assert store == load + ["data"]
    reply = [f.name for f in packet.body_layout(packet.Kind.REPLY, PAPER).fields]
    assert reply == ["slot", "tag", "err", "data"]


def test_flit_layouts_fit_and_round_trip():
    width = packet.flit_width(PAPER)
    for kind in packet.Kind:
        lay = packet.flit_layout(kind, PAPER)
        assert lay.width == width
        word = lay.pack(kind=int(kind), dst_x=packet.bias(-1), dst_y=packet.bias(8))
        f = lay.unpack(word)
        assert packet.unbias(f["dst_x"]) == -1 and packet.unbias(f["dst_y"]) == 8
    assert packet.net_of(packet.Kind.LOAD) is packet.Net.REQUEST
    assert packet.net_of(packet.Kind.REPLY) is packet.Net.REPLY



def test_pack_flit_is_the_full_layout_and_unpacks():
    """The one flit packer: the same word as the full layout, fields or raw body."""
    fields = dict(addr=0x1234, size=3, bcast=0, src_x=packet.bias(2), src_y=packet.bias(7),
                  slot=5, tag=9, data=(1 << 64) - 1)
    word = packet.pack_flit(PAPER, packet.Kind.STORE, (-1, 3), **fields)
    full = packet.flit_layout(packet.Kind.STORE, PAPER)
    assert word == full.pack(kind=int(packet.Kind.STORE), dst_x=0, dst_y=4, **fields)
    kind, dst, body = packet.unpack_flit(PAPER, word)
    assert (kind, dst) == (packet.Kind.STORE, (-1, 3))
    assert packet.pack_flit(PAPER, kind, dst, body) == word
    assert packet.flit_fields(PAPER, word) == (kind, dst, fields)
    with pytest.raises(FdpuError, match="not both"):
        packet.pack_flit(PAPER, kind, dst, 1, slot=1)
    with pytest.raises(FdpuError, match="does not fit"):
        packet.pack_flit(PAPER, packet.Kind.OPERAND, (0, 0), 1 << 200)
    with pytest.raises(FdpuError, match="no field"):
        packet.pack_flit(PAPER, packet.Kind.OPERAND, (0, 0), addr=1)

def test_layout_errors():
    lay = Layout("t", [Field("a", 3), Field("b", 4, signed=True)])
    assert lay.unpack(lay.pack(a=7, b=-8)) == {"a": 7, "b": -8}
    with pytest.raises(FdpuError, match="does not fit"):
        lay.pack(a=8)
    with pytest.raises(FdpuError, match="no field 'c'"):
        lay.pack(c=1)
    with pytest.raises(ValueError, match="duplicate"):
        Layout("t", [Field("a", 1), Field("a", 1)])


# Array parameters -----------------------------------------------------------------------------

@pytest.mark.parametrize("params", [PAPER, SMALL, ArrayParams(rows=1, cols=1, slots=64,
                                                              operand_depth=4, int_issue=1),
                                    ArrayParams(rows=3, cols=5, slots=64, operand_depth=4,
                                                int_issue=1)])
def test_dbuf_coordinates_round_trip(params):
    seen = set()
    for i in range(params.num_dbufs):
        c = params.dbuf_coord(i)
        assert params.dbuf_at(*c) == i
        seen.add(c)
        side = params.dbuf_side(i)
        route = params.route((0, 0), c)
        assert route[-1] is side
    assert len(seen) == 2 * (params.rows + params.cols)


def test_routes_are_xy_and_counted():
    assert PAPER.route((0, 0), (3, 2)) == [Dir.EAST] * 3 + [Dir.SOUTH] * 2 + [Dir.LOCAL]
    assert PAPER.route((5, 5), (8, 0)) == [Dir.EAST, Dir.EAST, Dir.NORTH] + [Dir.NORTH] * 4 + \
        [Dir.EAST]
    assert PAPER.route((2, 2), (2, -1)) == [Dir.NORTH, Dir.NORTH, Dir.NORTH]
    with pytest.raises(FdpuError, match="neither a PE nor a Dbuf"):
        PAPER.route((0, 0), (-1, -1))


def test_address_map():
    assert PAPER.num_dbufs == 32 and PAPER.memory_bytes == 64 << 20
    assert PAPER.dbuf_of(PAPER.dbuf_base(5) + 10) == (5, 10)
    with pytest.raises(FdpuError, match="outside the Dbufs"):
        PAPER.dbuf_of(PAPER.memory_bytes)
    with pytest.raises(FdpuError, match="power of two"):
        ArrayParams(slots=48, operand_depth=4, int_issue=1)
    with pytest.raises(FdpuError, match="rows must be an integer in 1..16"):
        ArrayParams(rows=0, slots=64, operand_depth=4, int_issue=1)


def test_issue_pipe_is_the_one_rule_of_the_pes_pipes():
    # Loads, stores and ITER on pipe 0 (and any INT/CTRL op with the pipe0 hint), FP ops on
    # the FP pipe whatever the hint, every other INT/CTRL op (BSCAN, SWITCH) on pipe 2; the
    # PE decodes PIPE0_OPS at configuration, the golden estimate and the chooser call it.
    assert set(PIPE0_OPS) == {op for op in Op if op.is_load or op.is_store} | {Op.ITER}
    assert {issue_pipe(op) for op in (Op.BSCAN, Op.SWITCH, Op.MOV, Op.ADD, Op.CTX)} == {"p2"}
    assert issue_pipe(Op.MOV, pipe0=True) == "p0" and issue_pipe(Op.LDD, pipe0=True) == "p0"
    assert issue_pipe(Op.FACC) == issue_pipe(Op.FACC, pipe0=True) == "fp"
