"""cocotb test of a PE array on the mesh (``hw.array.PeArray``), on the generated Verilog.

``FDPU_PE_ARRAY``: JSON of the array parameters (``make_pe_array`` keywords);
``FDPU_PE_CASES``: case folders (:mod:`tb.pe.cases`) of images for that array.  Each image is
configured into every PE through the MicC's edge port, its contexts run with Dbuf models at
every edge port (random latency and backpressure, replies out of order), and the Dbufs after
the run, the firings per opcode over all PEs and the context ends are compared with the golden
model's.
"""

import json
import os

import cocotb

from sw.spec.arch import ArrayParams
from tb.common.clock import reset, start_clock
from tb.array.harness import TB
from tb.pe.cases import read_case
from tb.pe.harness import make_rng

CFG = json.loads(os.environ.get("FDPU_PE_ARRAY", "{}"))


@cocotb.test()
async def golden_images_on_the_array(dut):
    """Every case image gives the golden model's Dbufs, firings and context ends."""
    start_clock(dut.clk)
    p = ArrayParams(rows=CFG["rows"], cols=CFG["cols"], slots=CFG["slots"],
                    operand_depth=CFG["operand_depth"], regs=CFG["regs"],
                    dbuf_bytes=CFG["dbuf_bytes"], int_issue=CFG["int_issue"])
    micc = (CFG["micc_x"], CFG["micc_y"])
    # Drive every input from time 0: an undriven valid is X on Icarus, and a router input
    # that samples an X write has X slot-valid bits from then on (the VOQ buffer).
    for k in range(p.num_dbufs):
        getattr(dut, f"i_reply__{k}__valid").value = 0
        getattr(dut, f"o_req__{k}__ready").value = 0
        getattr(dut, f"o_reply__{k}__ready").value = 0
    for folder in json.loads(os.environ.get("FDPU_PE_CASES", "[]")):
        image, expected = read_case(folder)
        await reset(dut.clk, dut.rst)
        tb = TB(dut, p, micc, make_rng())
        tb.load_image(image)
        await tb.wait_retired(200_000)
        problems = []
        if any(flags for flags, _ in tb.errors()):
            problems.append(f"PE error status {tb.errors()}")
        if dut.o_stray.value.to_unsigned():
            problems.append(f"{dut.o_stray.value.to_unsigned()} requests ejected at a PE")
        ops = {k: v for k, v in sorted(tb.fired.items()) if v}
        if ops != expected["ops"]:
            problems.append(f"firings differ: RTL {ops}, golden {expected['ops']}")
        if len(tb.end_log) != expected["ctx_ends"]:
            problems.append(f"{len(tb.end_log)} CTX_END, golden {expected['ctx_ends']}")
        for d in range(p.num_dbufs):
            want = bytes.fromhex(expected["memory"].get(str(d), "")) or bytes(p.dbuf_bytes)
            got = tb.dbuf_bytes(d)
            if got != want:
                problems.append(f"Dbuf {d} differs")
        assert not problems, f"case {expected['name']}: " + "; ".join(problems)
        dut._log.info(f"case {expected['name']}: {image.contexts} contexts, "
                      f"{sum(tb.fired.values())} firings, {tb.cycle} cycles: match")
        tb.stop()
