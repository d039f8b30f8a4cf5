"""Drive a one-stream-in, one-stream-out pipeline under ``amaranth.sim`` (fast unit tests).

:func:`run_pipeline` sends payloads into ``i_op`` with random idle cycles, takes results from
``o_res`` with random backpressure, bounds the run in cycles and returns the results in
arrival order.  It is for the small ``amaranth.sim`` checks; the generated Verilog is tested
with cocotb (:mod:`tb.host.runner`).
"""

import random

from amaranth.sim import Simulator

__all__ = ["run_pipeline"]


def run_pipeline(dut, payloads, *, seed=0, idle=0.3, stall=0.3, max_cycles=None):
    """Push ``payloads`` through ``dut`` and return what comes out of ``o_res``.

    Parameters
    ----------
    dut : wiring.Component
        Has a stream ``i_op`` (in) and a stream ``o_res`` (out).
    payloads : list of dict
        One ``{field: value}`` per operation; each value is set on ``i_op.payload.<field>``
        (through ``as_value()`` for views).
    seed : int
        Seed of the idle/backpressure pattern.
    idle, stall : float
        Probability of an idle source cycle and of a cycle with ``o_res.ready`` low.
    max_cycles : int, optional
        Cycle bound; default ``20 * len(payloads) + 100``.

    Returns
    -------
    list of int
        ``o_res.payload`` of each result as an integer, in arrival order.

    Raises
    ------
    AssertionError
        On timeout (the message says how many results were missing: a deadlock or a loss).
    """
    rng_src = random.Random(seed)
    rng_snk = random.Random(seed + 1)
    bound = max_cycles if max_cycles is not None else 20 * len(payloads) + 100
    results = []
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def source(ctx):
        for payload in payloads:
            while rng_src.random() < idle:
                await ctx.tick()
            for name, value in payload.items():
                field = getattr(dut.i_op.payload, name)
                ctx.set(field.as_value() if hasattr(field, "as_value") else field, value)
            ctx.set(dut.i_op.valid, 1)
            await ctx.tick().until(dut.i_op.ready)
            ctx.set(dut.i_op.valid, 0)

    async def sink(ctx):
        for _ in range(bound):
            ready = rng_snk.random() >= stall
            ctx.set(dut.o_res.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o_res.valid,
                                                       dut.o_res.payload.as_value())
            if valid and ready:
                results.append(payload)
                if len(results) == len(payloads):
                    return
        raise AssertionError(f"timeout after {bound} cycles: {len(results)} of "
                             f"{len(payloads)} results arrived (deadlock or lost results)")

    sim.add_testbench(source, background=True)
    sim.add_testbench(sink)
    sim.run()
    return results
