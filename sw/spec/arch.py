"""Array parameters, coordinates and the global address map: one source of truth.

Everything that sizes the FDPU lives in one frozen :class:`ArrayParams`; the hardware
generators (``hw``), the assembler and the golden model all take the same object, and every
derived width (coordinate bits, slot bits, flit width, ...) is a property computed here, so no
two places can disagree.  ``ArrayParams()`` is the configuration every figure of the README is
measured on, and the one place its values are written: the commands' defaults
(:data:`sw.cli.options.DEFAULTS`), the named tops (``tb.host.tops``) and the factories
(:func:`hw.top.build_fdpu`, :func:`hw.pe.pe.make_pe`) read them from here.  A test or bench on
a smaller PE names its sizes explicitly.

Coordinates
-----------
The mesh has ``rows x cols`` routers, one per PE, at ``(x, y)`` with ``x`` the column
(0 = west) and ``y`` the row (0 = north).  The unused edge ports of the mesh (``2 * rows +
2 * cols`` of them, 32 on 8 x 8) attach the Dbufs.  An edge port is addressed by the coordinate
just outside the array: ``(x, -1)`` north, ``(cols, y)`` east, ``(x, rows)`` south,
``(-1, y)`` west.  On the wire a coordinate is stored *biased by one* (``x + 1``, ``y + 1``) so
that the whole ring ``-1 .. cols`` fits an unsigned field; XY routing then needs no special
case for most edge ports: route along X to the target's column (clamped into the array), then
along Y to its row (clamped), then out through the local port or the edge port
(:meth:`ArrayParams.route`).

Dbuf numbering, in this order: north edge west to east (``0 .. cols-1``), east edge north to
south, south edge west to east, west edge north to south.

Address map
-----------
One flat byte address space of 32 bits.  Dbuf ``i`` holds the bytes
``[i * dbuf_bytes, (i + 1) * dbuf_bytes)``; :meth:`ArrayParams.dbuf_of` maps an address to its
Dbuf and offset.  Accesses are 2, 4 or 8 bytes, naturally aligned; an address past the last
Dbuf, or misaligned, is an error that the Dbuf reports (it answers, it never drops).
"""

import enum
from dataclasses import dataclass

from sw.spec.errors import FdpuError

__all__ = ["Dir", "ArrayParams", "PAPER", "bits_for"]


def bits_for(count):
    """Return the bits needed to number ``count`` things (at least 1)."""
    return max(1, (count - 1).bit_length())


class Dir(enum.IntEnum):
    """A router port.  ``LOCAL`` is the PE attached to the router."""
    NORTH = 0
    EAST = 1
    SOUTH = 2
    WEST = 3
    LOCAL = 4


@dataclass(frozen=True)
class ArrayParams:
    """The sizes of one FDPU configuration.

    The defaults are the README's configuration: the paper's 8 x 8 array with its 6 KB operand
    buffer per PE (128 slots x 3 operands x depth 2 x 8 bytes), its two integer units, 2 MiB
    Dbufs and 8 Cbufs of 64 KiB.

    Parameters
    ----------
    rows, cols : int
        PE array shape (1..16 each).
    slots : int
        Instruction slots per PE (a power of two).  Each slot is one instruction of the graph
        and owns one operand-buffer entry.
    operand_depth : int
        Operands each operand of a slot can hold (a power of two): how many contexts may be
        waiting at one instruction.  With ``slots = 128``, 3 operands of 8 bytes and depth 2
        the operand buffer is 6 KB, the paper's size.
    regs : int
        Local 64-bit registers per PE (a power of two), set at configuration, read by
        instructions as operands.
    dbuf_bytes : int
        Bytes per Dbuf (a power of two; the paper's are 2 MB).
    cbufs : int
        Command buffers (the paper's 8, on the west side).
    cbuf_bytes : int
        Bytes per Cbuf (a power of two).
    clock_mhz : int
        Nominal clock, for reporting only.
    int_issue : int
        INT/MEM/CTRL instructions a PE may issue per cycle, 1 or 2 (the paper's PE has two
        integer units; the FP pipe always issues one).  The golden model's cycle estimate and
        the blocking chooser read it; see docs/mapping.md for what it buys the sparse graph.
    """
    rows: int = 8
    cols: int = 8
    slots: int = 128
    operand_depth: int = 2
    regs: int = 16
    dbuf_bytes: int = 2 * 1024 * 1024
    cbufs: int = 8
    cbuf_bytes: int = 64 * 1024
    clock_mhz: int = 1000
    int_issue: int = 2

    #: Bits of a data token: four binary16 lanes, or one 32-bit integer in the low half.
    TOKEN_BITS = 64
    #: Bits of a byte address.
    ADDR_BITS = 32
    #: Source operands an instruction can have.
    MAX_OPERANDS = 3
    #: Destinations an instruction word can name.
    MAX_DESTS = 4
    #: Floating-point lanes per token.
    LANES = 4

    def __post_init__(self):
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 16:
                raise FdpuError(f"{name} must be an integer in 1..16, got {value!r}")
        for name in ("slots", "operand_depth", "regs", "dbuf_bytes", "cbuf_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value & (value - 1):
                raise FdpuError(f"{name} must be a power of two, got {value!r}")
        if not 2 <= self.slots <= 1024:
            raise FdpuError(f"slots must be in 2..1024, got {self.slots}")
        if self.regs > 256:
            raise FdpuError(f"regs must be at most 256, got {self.regs}")
        if (not isinstance(self.int_issue, int) or isinstance(self.int_issue, bool)
                or self.int_issue not in (1, 2)):
            raise FdpuError(f"int_issue must be 1 or 2, got {self.int_issue!r}")
        if not isinstance(self.cbufs, int) or self.cbufs < 1:
            raise FdpuError(f"cbufs must be a positive integer, got {self.cbufs!r}")
        if self.dbuf_bytes < 64:
            raise FdpuError(f"dbuf_bytes must be at least 64, got {self.dbuf_bytes}")
        if self.num_dbufs * self.dbuf_bytes > 1 << self.ADDR_BITS:
            raise FdpuError(
                f"{self.num_dbufs} Dbufs of {self.dbuf_bytes} bytes exceed the "
                f"{self.ADDR_BITS}-bit address space")

    # Derived sizes ---------------------------------------------------------------------------

    @property
    def num_pes(self):
        """Return the number of PEs."""
        return self.rows * self.cols

    @property
    def num_dbufs(self):
        """Return the number of Dbufs: one per unused mesh edge port."""
        return 2 * (self.rows + self.cols)

    @property
    def x_bits(self):
        """Return the width of a biased X coordinate (``-1 .. cols`` stored as ``0 .. cols+1``)."""
        return bits_for(self.cols + 2)

    @property
    def y_bits(self):
        """Return the width of a biased Y coordinate (``-1 .. rows`` stored as ``0 .. rows+1``)."""
        return bits_for(self.rows + 2)

    @property
    def slot_bits(self):
        """Return the width of a slot index."""
        return bits_for(self.slots)

    @property
    def reg_bits(self):
        """Return the width of a register index."""
        return bits_for(self.regs)

    @property
    def dbuf_addr_bits(self):
        """Return the width of a byte offset inside one Dbuf."""
        return bits_for(self.dbuf_bytes)

    @property
    def operand_buffer_bytes(self):
        """Return the operand-buffer size of one PE, in bytes."""
        return self.slots * self.MAX_OPERANDS * self.operand_depth * self.TOKEN_BITS // 8

    @property
    def peak_flops_per_cycle(self):
        """Return the peak floating-point operations per cycle (a multiply-add counts 2)."""
        return self.num_pes * self.LANES * 2

    # Coordinates -----------------------------------------------------------------------------

    def pe_coords(self):
        """Return every PE coordinate ``(x, y)``, row by row."""
        return [(x, y) for y in range(self.rows) for x in range(self.cols)]

    def dbuf_coord(self, index):
        """Return the edge coordinate ``(x, y)`` of Dbuf ``index`` (see the module doc)."""
        if not isinstance(index, int) or not 0 <= index < self.num_dbufs:
            raise FdpuError(f"Dbuf index must be in 0..{self.num_dbufs - 1}, got {index!r}")
        r, c = self.rows, self.cols
        if index < c:
            return (index, -1)
        index -= c
        if index < r:
            return (c, index)
        index -= r
        if index < c:
            return (index, r)
        return (-1, index - c)

    def dbuf_at(self, x, y):
        """Return the index of the Dbuf at edge coordinate ``(x, y)``, or None."""
        r, c = self.rows, self.cols
        if y == -1 and 0 <= x < c:
            return x
        if x == c and 0 <= y < r:
            return c + y
        if y == r and 0 <= x < c:
            return c + r + x
        if x == -1 and 0 <= y < r:
            return 2 * c + r + y
        return None

    def dbuf_side(self, index):
        """Return the router port (:class:`Dir`) through which Dbuf ``index`` is reached."""
        x, y = self.dbuf_coord(index)
        if y == -1:
            return Dir.NORTH
        if x == self.cols:
            return Dir.EAST
        if y == self.rows:
            return Dir.SOUTH
        return Dir.WEST

    def route(self, src, dst):
        """Return the XY route from router ``src`` to coordinate ``dst`` as a list of ports.

        ``src`` is a PE coordinate; ``dst`` a PE or edge coordinate.  The route goes along X to
        the target's column (clamped into the array), then along Y to its row (clamped), then
        out of the ``LOCAL`` port for a PE or the edge port for a Dbuf.  The last turn into a
        west or east Dbuf is a Y-to-X turn, which XY routing otherwise forbids; it cannot close
        a cycle because a Dbuf port only sinks flits (``docs/noc.md``).  The list holds the
        output port taken at each router; the golden model counts hops with it and the router
        implements the same rule.
        """
        (x, y), (dx, dy) = src, dst
        if not (0 <= x < self.cols and 0 <= y < self.rows):
            raise FdpuError(f"route source {src} is not a PE of the {self.rows}x{self.cols} array")
        if self.dbuf_at(dx, dy) is None and not (0 <= dx < self.cols and 0 <= dy < self.rows):
            raise FdpuError(f"route target {dst} is neither a PE nor a Dbuf port")
        tx, ty = min(max(dx, 0), self.cols - 1), min(max(dy, 0), self.rows - 1)
        ports = [Dir.EAST if tx > x else Dir.WEST] * abs(tx - x)
        ports += [Dir.SOUTH if ty > y else Dir.NORTH] * abs(ty - y)
        if dy == -1:
            ports.append(Dir.NORTH)
        elif dy == self.rows:
            ports.append(Dir.SOUTH)
        elif dx == -1:
            ports.append(Dir.WEST)
        elif dx == self.cols:
            ports.append(Dir.EAST)
        else:
            ports.append(Dir.LOCAL)
        return ports

    def edge_router(self, index):
        """Return the PE coordinate of the router whose edge port Dbuf ``index`` sits at."""
        x, y = self.dbuf_coord(index)
        return min(max(x, 0), self.cols - 1), min(max(y, 0), self.rows - 1)

    def edge_line(self, index):
        """Return ``(on_line, side)`` of Dbuf ``index``'s edge: ``on_line(x, y)`` tells the
        routers next to that edge (row 0 for a north Dbuf, the last row for a south one,
        column 0 for a west one, the last column for an east one), ``side`` the port
        (:class:`Dir`) through which they reach it."""
        side = self.dbuf_side(index)
        lines = {Dir.NORTH: lambda x, y: y == 0, Dir.SOUTH: lambda x, y: y == self.rows - 1,
                 Dir.WEST: lambda x, y: x == 0, Dir.EAST: lambda x, y: x == self.cols - 1}
        return lines[side], side

    def multicast_dbufs(self, src, dst):
        """Return the Dbufs an edge-multicast request (:data:`sw.spec.packet.MULTICAST`) from
        router ``src`` to the Dbuf at ``dst`` reaches, in the order its route passes them.

        The request follows :meth:`route`; every router of the route on ``dst``'s edge line
        (:meth:`edge_line`) sends a copy out of its edge port, to the Dbuf there.  So from
        a router on that line the copies go to every Dbuf of the edge between it and ``dst``;
        from elsewhere, to the Dbufs between the route's turn onto the line and ``dst`` (a
        north or south ``dst`` only to itself, the route meeting its line at its column).
        The one rule the routers (:mod:`hw.noc.router`), the DMA and the planner share.
        """
        k = self.dbuf_at(*dst)
        if k is None:
            raise FdpuError(f"a multicast request goes to a Dbuf port, not to {dst}")
        on_line, side = self.edge_line(k)
        x, y = src
        out = []
        step = {Dir.EAST: (1, 0), Dir.WEST: (-1, 0), Dir.SOUTH: (0, 1), Dir.NORTH: (0, -1)}
        for port in self.route(src, dst):
            if on_line(x, y):
                dx, dy = step[side]
                out.append(self.dbuf_at(x + dx, y + dy))
            if port in step:
                x, y = x + step[port][0], y + step[port][1]
        return out

    # Address map -----------------------------------------------------------------------------

    @property
    def memory_bytes(self):
        """Return the bytes of all Dbufs together."""
        return self.num_dbufs * self.dbuf_bytes

    def dbuf_base(self, index):
        """Return the first global byte address of Dbuf ``index``."""
        self.dbuf_coord(index)
        return index * self.dbuf_bytes

    def dbuf_of(self, address):
        """Return ``(dbuf index, byte offset)`` of a global byte address."""
        if not isinstance(address, int) or not 0 <= address < self.memory_bytes:
            raise FdpuError(
                f"address {address!r} is outside the Dbufs (0..{self.memory_bytes - 1})")
        return divmod(address, self.dbuf_bytes)


#: The paper's configuration: 8 x 8 PEs, 32 Dbufs of 2 MB, 8 Cbufs, 1 GHz.
#: The default configuration (the README's), as a value.
PAPER = ArrayParams()
