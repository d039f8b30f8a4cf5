"""A single-port, byte-writable SRAM for the scratch-pads: small ones in Amaranth, big ones as
an instance of a behavioural Verilog model.

Contract
--------
One access per cycle.  ``rd_en`` with ``addr`` on edge *t* gives ``rd_data`` from edge
*t + 1* (held until the next read); ``wr_en`` (one bit per byte lane) with ``addr`` and
``wr_data`` writes those bytes on edge *t*.  Reading and writing in the same cycle is not
used by the Dbuf; the read then returns the old word.  Contents start at zero in simulation.

Two implementations, same ports:

* ``depth * width <= inline_bits`` (default 1 Mib = 128 KiB): an ``amaranth.lib.memory.Memory``,
  synthesizable and simulated everywhere.
* larger: ``Instance("fdpu_sram", ...)`` of the behavioural module :data:`SRAM_VERILOG`.
  Amaranth writes one initial assignment per memory word (``DESIGN.md``, "Known bites"), so a
  2 MiB Memory would be 256K lines and minutes of Verilator build; the model is a plain
  ``reg`` array, loaded from a ``$readmemh`` file when ``INIT_FILE`` is set, or by backdoor
  (cocotb writes ``<path>.bank.storage[i]``).  :func:`attach_models` appends the model's text to
  generated Verilog that instantiates it.  In an ASIC flow the instance is where the SRAM
  macro goes.
"""

import re

from amaranth import ClockSignal, Instance, Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Sram", "SRAM_MODULE", "SRAM_VERILOG", "attach_models"]

#: Name of the behavioural model's Verilog module.
SRAM_MODULE = "fdpu_sram"

#: The behavioural model (lints clean under ``verilator --lint-only -Wall``).
SRAM_VERILOG = """\
// fdpu_sram: behavioural single-port SRAM with byte-lane writes (hw/lib/sram.py).
module fdpu_sram #(
    parameter integer WIDTH = 64,
    parameter integer DEPTH = 1024,
    parameter integer ABITS = 10,
    parameter integer LANES = 8,
    parameter INIT_FILE = ""
) (
    input wire clk,
    input wire rd_en,
    input wire [ABITS-1:0] addr,
    output reg [WIDTH-1:0] rd_data,
    input wire [LANES-1:0] wr_en,
    input wire [WIDTH-1:0] wr_data
);
    localparam integer LANE = WIDTH / LANES;
    reg [WIDTH-1:0] storage [0:DEPTH-1];
    integer lane;
    integer word;
    initial begin
        rd_data = {WIDTH{1'b0}};
        if (INIT_FILE != "") begin
            $readmemh(INIT_FILE, storage);
        end else begin
            for (word = 0; word < DEPTH; word = word + 1) storage[word] = {WIDTH{1'b0}};
        end
    end
    always @(posedge clk) begin
        if (rd_en) rd_data <= storage[addr];
        for (lane = 0; lane < LANES; lane = lane + 1) begin
            if (wr_en[lane]) storage[addr][lane*LANE +: LANE] <= wr_data[lane*LANE +: LANE];
        end
    end
endmodule
"""


def attach_models(verilog):
    """Return ``verilog`` with :data:`SRAM_VERILOG` appended if it instantiates the model.

    Parameters
    ----------
    verilog : str
        Text from :func:`hw.tooling.verilog.to_verilog`.
    """
    uses = re.search(rf"^\s*{SRAM_MODULE}\s*#", verilog, re.MULTILINE)
    defines = re.search(rf"^module\s+{SRAM_MODULE}\b", verilog, re.MULTILINE)
    if uses and not defines:
        return verilog + SRAM_VERILOG
    return verilog


class Sram(wiring.Component):
    """A ``depth`` x ``width`` SRAM with byte-lane writes (see the module doc).

    Parameters
    ----------
    width : int
        Word width in bits, a multiple of 8.
    depth : int
        Words, at least 2.
    inline_bits : int
        Largest size (``width * depth``) built as an Amaranth ``Memory``.
    init_file : str
        ``$readmemh`` file of the behavioural model (large SRAMs only); empty for zeros.
    """

    def __init__(self, width=64, depth=1024, *, inline_bits=1 << 20, init_file=""):
        if not isinstance(width, int) or isinstance(width, bool) or width < 8 or width % 8:
            raise TypeError(f"width must be a positive multiple of 8, not {width!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise TypeError(f"depth must be an integer >= 2, not {depth!r}")
        self.width, self.depth = width, depth
        self.lanes = width // 8
        self.abits = (depth - 1).bit_length()
        self.inline = width * depth <= inline_bits
        self.init_file = init_file
        super().__init__({
            "addr": In(self.abits),
            "rd_en": In(1),
            "rd_data": Out(width),
            "wr_en": In(self.lanes),
            "wr_data": In(width),
        })

    def elaborate(self, platform):
        m = Module()
        if self.inline:
            m.submodules.mem = mem = memory.Memory(shape=self.width, depth=self.depth, init=[])
            wr = mem.write_port(granularity=8)
            rd = mem.read_port()
            m.d.comb += [
                rd.addr.eq(self.addr), rd.en.eq(self.rd_en), self.rd_data.eq(rd.data),
                wr.addr.eq(self.addr), wr.en.eq(self.wr_en), wr.data.eq(self.wr_data),
            ]
        else:
            m.submodules.bank = Instance(
                SRAM_MODULE,
                p_WIDTH=self.width, p_DEPTH=self.depth, p_ABITS=self.abits, p_LANES=self.lanes,
                p_INIT_FILE=self.init_file,
                i_clk=ClockSignal(), i_rd_en=self.rd_en, i_addr=self.addr,
                o_rd_data=self.rd_data, i_wr_en=self.wr_en, i_wr_data=self.wr_data)
        return m
