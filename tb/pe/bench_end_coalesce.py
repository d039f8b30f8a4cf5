"""cocotb test of CTX_END coalescing on one processing element (``pe`` top).

Environment (set by ``tests/test_end_coalesce.py`` through ``run_cocotb(extra_env=...)``):

* ``FDPU_PE_CASES``: JSON list of case folders (:func:`tb.pe.cases.save_case`);
* ``FDPU_EC_BLOCK``: ``lo,hi`` cycles of the random bursts during which ``o_rep`` is not
  ready (default ``5,60``; between them it is ready for 1 to 4 cycles), as at the 8 x 8's
  congested MicC link; ``o_req`` is not ready with probability 0.2.

Each case runs in :class:`tb.pe.harness.TB` (random delays and backpressure from
cocotb's seed); the bench checks the Dbufs and firings against the golden model, and that the
CTX_END flits' ``count`` fields sum to the golden model's END messages per context while
fewer flits than END messages left the PE (ENDs merged while ``o_rep`` was blocked).
"""

import itertools
import json
import os

import cocotb

from tb.common.clock import start_clock
from tb.pe.cases import read_case
from tb.pe.harness import TB, make_rng, params_from_env, reset_pe

FULL = json.loads(os.environ.get("FDPU_PARAMS", "{}"))


def _bursts(rng, lo, hi):
    """Return an endless pause pattern: blocked for ``lo..hi`` cycles, then open for 1..4."""
    def gen():
        while True:
            yield from itertools.repeat(True, rng.randint(lo, hi))
            yield from itertools.repeat(False, rng.randint(1, 4))
    return gen()


@cocotb.test()
async def ends_coalesce_under_backpressure(dut):
    """Fewer CTX_END flits than END messages; their counts sum to the golden END count."""
    start_clock(dut.clk)
    p, x, y, micc = params_from_env(FULL)
    block = tuple(int(v) for v in os.environ.get("FDPU_EC_BLOCK", "5,60").split(","))
    total_msgs = total_flits = 0
    for folder in json.loads(os.environ.get("FDPU_PE_CASES", "[]")):
        image, expected = read_case(folder)
        await reset_pe(dut)
        tb = TB(dut, p, x, y, micc, make_rng(), idle=0.1)
        tb.rep.set_pause(_bursts(tb.rng, *block))       # o_rep blocked in bursts
        tb.req.set_pause(0.2, tb.rng)
        tb.load_image(image)
        bound = 1000 * (image.contexts + 4) * max(1, sum(expected["ops"].values())
                                                  // max(image.contexts, 1) // 4 + 1)
        await tb.wait_retired(bound)
        name = expected["name"]
        flags, slot = tb.error()
        assert not flags, f"case {name}: PE error flags {flags:#x} (slot {slot})"
        ops = {k: v for k, v in sorted(tb.fired.items()) if v}
        assert ops == expected["ops"], f"case {name}: firings {ops}, golden {expected['ops']}"
        for d in range(p.num_dbufs):
            want = bytes.fromhex(expected["memory"].get(str(d), "")) or bytes(p.dbuf_bytes)
            got = tb.dbuf_bytes(d)
            assert got == want, f"case {name}: Dbuf {d} differs from the golden model's"
        msgs = sum(tb.ends.values())
        assert msgs == expected["ctx_ends"], \
            f"case {name}: the CTX_END counts sum to {msgs}, golden {expected['ctx_ends']} ENDs"
        per_ctx = image.ends_per_context
        bad = {c: n for c, n in tb.ends.items() if n != per_ctx}
        assert not bad and len(tb.ends) == image.contexts, \
            f"case {name}: END messages per context {dict(tb.ends)}, want {per_ctx}"
        dut._log.info(f"case {name}: {msgs} END messages in {tb.end_flits} CTX_END flits "
                      f"(largest count {tb.max_count}), {tb.cycle} cycles, "
                      f"o_rep blocked in bursts of {block[0]}..{block[1]} cycles")
        total_msgs += msgs
        total_flits += tb.end_flits
        tb.stop()
    if block[0] >= 5:
        assert total_flits < total_msgs, \
            f"{total_flits} CTX_END flits for {total_msgs} END messages: nothing coalesced"
