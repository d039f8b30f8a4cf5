# amaranth: UnusedElaboratable=no
"""The DMA descriptor and the status enums: one definition in ``sw.spec``, the same in ``hw``.

The descriptor test reads a packed descriptor through the hardware's own view of it (the
``StructLayout`` ``hw.ctrl.dma`` builds from :func:`sw.spec.dma.descriptor_layout`), so an
encoder in the host and a decoder in the DMA cannot disagree; the enum tests check that the
shaped enums the state machines hold have the spec's names, values and register width.
"""

import random

import pytest
from amaranth.hdl import Shape
from amaranth.lib import data

from hw.ctrl.dma import DmaState as HwDmaState
from hw.ctrl.dma import Dma
from hw.ctrl.micc import Micc
from hw.ctrl.micc import MiccState as HwMiccState
from hw.noc.flit import FlitKind
from sw.spec import status
from sw.spec.arch import ArrayParams
from sw.spec.dma import (COPIES_BITS, DESC_BYTES, WORD_BITS, DescFlag, copy_targets,
                         descriptor_layout, edge_targets, pack_descriptor, unpack_descriptor)
from sw.spec.errors import FdpuError
from sw.spec.ports import dma_ports
from sw.spec.packet import Kind

SEED = 20261202


def test_descriptor_words_are_the_documented_ones():
    # word 0 = ext | local << 32; word 1 = length | OUT << 31 | CBUF << 32 | MOVE << 33 |
    # MCAST << 34 | copies << 35 (docs, runtime).
    assert pack_descriptor(0x1000, 0x2008, 0x40) == [0x1000 | 0x2008 << 32, 0x40]
    assert pack_descriptor(8, 16, 24, DescFlag.OUT) == [8 | 16 << 32, 24 | 1 << 31]
    assert pack_descriptor(8, 16, 24, DescFlag.CBUF) == [8 | 16 << 32, 24 | 1 << 32]
    assert pack_descriptor(8, 16, 24, DescFlag.MOVE) == [8 | 16 << 32, 24 | 1 << 33]
    assert pack_descriptor(8, 16, 24, DescFlag.MCAST) == [8 | 16 << 32, 24 | 1 << 34]
    assert (int(DescFlag.OUT), int(DescFlag.CBUF), int(DescFlag.MOVE),
            int(DescFlag.MCAST)) == (1, 2, 4, 8)
    assert COPIES_BITS == 29
    assert descriptor_layout().width == 2 * WORD_BITS == 8 * DESC_BYTES


def test_descriptor_round_trips_through_the_hardware_view():
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    view_layout = data.StructLayout(descriptor_layout().struct_fields())
    for _ in range(200):
        ext, loc, n = rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(31)
        flags = DescFlag(rng.randrange(16))
        copies = rng.getrandbits(COPIES_BITS)
        words = pack_descriptor(ext, loc, n, flags, copies)
        assert all(0 <= w < 1 << WORD_BITS for w in words)
        assert unpack_descriptor(words) == (ext, loc, n, flags, copies)
        view = view_layout.const({"ext": ext, "local": loc, "length": n,
                                  "out": int(DescFlag.OUT in flags),
                                  "cbuf": int(DescFlag.CBUF in flags),
                                  "move": int(DescFlag.MOVE in flags),
                                  "mcast": int(DescFlag.MCAST in flags), "copies": copies})
        assert view.as_value().value == words[0] | words[1] << WORD_BITS


def test_multicast_targets():
    assert copy_targets(5, 0) == [5]
    assert copy_targets(5, 0b101) == [5, 6, 8]
    assert pack_descriptor(0, 0, 8, copies=1)[1] == 8 | 1 << 35
    assert copy_targets(0, 1 << COPIES_BITS - 1) == [0, COPIES_BITS]


def test_move_descriptor_round_trips_with_its_copies():
    # A MOVE: ext is the source Dbuf address; copies sit above the mcast bit, all 29 of them.
    copies = (1 << COPIES_BITS) - 1
    words = pack_descriptor(0x408, 0x1010, 0x80, DescFlag.MOVE, copies)
    assert words == [0x408 | 0x1010 << 32, 0x80 | 1 << 33 | copies << 35]
    assert words[1] >> 63 == 1
    assert unpack_descriptor(words) == (0x408, 0x1010, 0x80, DescFlag.MOVE, copies)
    for flags in (DescFlag.MOVE | DescFlag.OUT, DescFlag.MOVE | DescFlag.CBUF):
        assert unpack_descriptor(pack_descriptor(0, 8, 16, flags)) == (0, 8, 16, flags, 0)
    with pytest.raises(FdpuError, match="copies = 536870912 does not fit its 29-bit field"):
        pack_descriptor(0, 0, 8, DescFlag.MOVE, 1 << COPIES_BITS)


def test_descriptor_field_too_wide_is_an_error():
    with pytest.raises(FdpuError, match="length = 2147483648 does not fit its 31-bit field"):
        pack_descriptor(0, 0, 1 << 31)


@pytest.mark.parametrize("spec, hw", [(status.MiccState, HwMiccState),
                                      (status.DmaState, HwDmaState), (Kind, FlitKind)])
def test_shaped_enums_are_the_spec_enums(spec, hw):
    assert [(m.name, m.value) for m in hw] == [(m.name, m.value) for m in spec]
    assert hw.__module__.startswith("hw.")
    if spec is not Kind:
        assert Shape.cast(hw) == Shape(status.STATE_BITS)


def test_state_ports_have_the_state_shape_and_errors_one_bit_each():
    micc, dma = Micc(), Dma()
    assert micc.signature.members["o_state"].shape is HwMiccState
    assert dma.signature.members["o_state"].shape is HwDmaState
    assert micc.signature.members["o_error"].shape == len(status.MiccError)
    assert dma.signature.members["o_error"].shape == len(status.DmaError)
    assert [e.value for e in status.MiccError] == list(range(len(status.MiccError)))
    assert [e.value for e in status.DmaError] == list(range(len(status.DmaError)))


def test_edge_targets_follow_the_route_along_the_edge():
    # The 8 x 8: each channel's port reaches its own edge's Dbufs with one flit; a Dbuf
    # off the route's edge line only itself (sw.spec.arch.ArrayParams.multicast_dbufs).
    p = ArrayParams()
    west, east, north, south = dma_ports(p)[:4]
    assert edge_targets(p, north, 0) == [7, 6, 5, 4, 3, 2, 1, 0]
    assert edge_targets(p, west, p.dbuf_at(-1, 7)) == list(range(24, 32))
    assert edge_targets(p, east, p.dbuf_at(8, 0)) == list(range(15, 7, -1))
    assert edge_targets(p, south, p.dbuf_at(7, 8)) == list(range(16, 24))
    assert edge_targets(p, west, p.dbuf_at(0, 8)) == [p.dbuf_at(0, 8)]
    assert edge_targets(p, north, 5) == [7, 6, 5]
    for port in dma_ports(p):
        for k in range(p.num_dbufs):
            reach = edge_targets(p, port, k)
            assert reach[-1] == k and len(set(reach)) == len(reach)
    with pytest.raises(FdpuError, match="goes to a Dbuf port"):
        p.multicast_dbufs((0, 0), (3, 3))
