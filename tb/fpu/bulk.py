"""Push many operations through a one-in, one-out pipelined unit as fast as cocotb allows.

:func:`drive_bulk` is one coroutine doing, per clock cycle, the least Python possible: after
the rising edge it offers the next prepared payload (an ``int``) on ``i_op`` and sets
``o_res.ready``; in ``ReadOnly()`` it samples both handshakes (the values the next edge acts
on, as in :mod:`tb.common.stream`) and appends each result payload to a list.  Payloads are built
and results compared in bulk, with numpy, before and after the run.

Idle and backpressure cycles come from pre-drawn boolean arrays (random with the given
probabilities), so pacing costs no per-cycle random calls.
"""

import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["payload_ints", "drive_bulk"]


def payload_ints(layout, **fields):
    """Return the ``i_op`` payloads as Python ints, packing numpy field arrays per ``layout``.

    Parameters
    ----------
    layout : amaranth.lib.data.StructLayout
        Payload layout (its field offsets are used).
    **fields : array_like of int
        One array per field, all of the same length (values must fit their field).

    Returns
    -------
    list of int
    """
    columns = []
    for name, values in fields.items():
        offset = layout[name].offset
        columns.append([int(v) << offset for v in np.asarray(values).tolist()])
    return [sum(parts) for parts in zip(*columns)]


async def drive_bulk(dut, payloads, *, rng, idle=0.0, stall=0.0, max_cycles=None):
    """Send ``payloads`` into ``i_op``, collect ``o_res`` payloads; return them and the cycles.

    Parameters
    ----------
    dut : cocotb handle
        A design with ``clk`` and streams ``i_op`` (in), ``o_res`` (out), out of reset.
    payloads : list of int
    rng : numpy.random.Generator
        Draws the idle/backpressure pattern.
    idle, stall : float
        Probability that the source skips a cycle / that ``o_res.ready`` is low.
    max_cycles : int, optional
        Bound; default ``4 * len(payloads) / (1 - max(idle, stall)) + 200``.

    Returns
    -------
    results : list of int
        ``o_res`` payloads in arrival order.
    cycles : int
        Clock cycles from the first offer to the last result.

    Raises
    ------
    AssertionError
        "deadlock" when the bound runs out, with how many operations were sent and returned.
    """
    n = len(payloads)
    if max_cycles is None:
        max_cycles = int(4 * n / max(1e-3, 1 - max(idle, stall))) + 200
    period = 4093
    idle_at = (rng.random(period) < idle).tolist()
    stall_at = (rng.random(period) < stall).tolist()
    clk = dut.clk
    in_valid, in_ready, in_payload = dut.i_op__valid, dut.i_op__ready, dut.i_op__payload
    out_valid, out_ready, out_payload = dut.o_res__valid, dut.o_res__ready, dut.o_res__payload
    results = []
    append = results.append
    sent = 0
    offered = False
    ready_now = None
    cycle = 0
    while len(results) < n:
        await RisingEdge(clk)
        cycle += 1
        if cycle > max_cycles:
            in_valid.value = 0
            raise AssertionError(f"deadlock: after {max_cycles} cycles {sent} of {n} "
                                 f"operations were accepted and {len(results)} results "
                                 f"returned")
        if not offered and sent < n and not idle_at[cycle % period]:
            in_payload.value = payloads[sent]
            in_valid.value = 1
            offered = True
        elif not offered:
            in_valid.value = 0
        ready = not stall_at[cycle % period]
        if ready != ready_now:
            out_ready.value = int(ready)
            ready_now = ready
        await ReadOnly()
        if offered and in_ready.value == 1:
            sent += 1
            offered = False
        if ready and out_valid.value == 1:
            append(out_payload.value.to_unsigned())
    await RisingEdge(clk)
    in_valid.value = 0
    return results, cycle
