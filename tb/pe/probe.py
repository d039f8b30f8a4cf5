"""Per-cycle stall accounting of one PE (``scripts/bench_pe.py --diag``), read from internals.

:class:`StallProbe` samples, every cycle after ``ReadOnly``, the named signals of the
generated Verilog (``hw.pe.pe``: ``go<pipe>``, ``s1_valid<pipe>``, ``room<pipe>``, ``busy<slot>``,
``ne<slot>``, ``pool_alloc``, the memory dispatchers ``disp_mem<lane>``) and counts why the FP
pipe did not fire:

* ``fp_fire``: a FP instruction fired (``fp_span_rate``: firings per cycle from the first to
  the last one, without the configuration and the pipeline fill);
* ``fp_no_room``: one was picked but a local destination FIFO was full;
* ``fp_unit``: one was picked but the FPU did not accept;
* ``fp_no_pick``: nothing was picked the cycle before; then the FP slots' state is tallied in
  slot-cycles: ``acc`` (FACC accumulation in flight), ``no_w`` (operand 0, the weight,
  missing), ``no_in`` (operand 1, the input, missing), ``no_both``, ``rdy`` (ready, being
  picked).

and for the memory side: per LD/ST slot and cycle, ``ldslot_no_addr`` (operand 0 missing),
``ldslot_no_room`` (its last pick found a destination full), ``ldslot_other``; LD/ST picks that did
not fire (``ld_no_room``: FIFO room of a destination, reserved at issue; ``ld_no_entry``: pool full
or request queue full), pool occupancy, and per memory lane the cycles its dispatcher was busy, the
local deliveries (and the cycles with at least one), the cycles it only waited for operand write
ports.  Only for diagnosis: it costs Python time per cycle, and internal names are not an interface
(it fails loudly if a name is gone).
"""

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["StallProbe"]


def _bit(handle):
    v = handle.value
    return v.is_resolvable and int(v) == 1


class StallProbe:
    """Count FP-pipe and memory-lane stall reasons per cycle (see the module docstring).

    Parameters
    ----------
    dut : cocotb handle of the ``pe`` top
    fp_slots : list of int
        The slots of FP instructions (whose operand state is tallied).
    """

    def __init__(self, dut, fp_slots, mem_slots=()):
        self.dut = dut
        self.fp_slots = list(fp_slots)
        self._mem = [(getattr(dut, f"ne{s}"), getattr(dut, f"noroom{s}")) for s in mem_slots]
        self.first_fire = self.last_fire = None
        self.counts = {}
        self.lanes = [getattr(dut, f"disp_mem{j}") for j in range(2)]
        # Local ports: o_local__<i>__valid/ready (one or MAX_DESTS per dispatcher).
        self._lports = [[(getattr(d, f"o_local__{i}__valid"), getattr(d, f"o_local__{i}__ready"))
                         for i in range(4) if hasattr(d, f"o_local__{i}__valid")]
                        for d in self.lanes]
        self._busy = [getattr(dut, f"busy{s}") for s in self.fp_slots]
        self._ne = [getattr(dut, f"ne{s}") for s in self.fp_slots]
        self._task = cocotb.start_soon(self._run())

    def _add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    async def _run(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if dut.rst.value == 1:
                continue
            self._add("cycles")
            if _bit(dut.go1):
                self._add("fp_fire")
                self.last_fire = self.counts["cycles"]
                if self.first_fire is None:
                    self.first_fire = self.last_fire
            elif _bit(dut.s1_valid1):
                self._add("fp_no_room" if not _bit(dut.room1) else "fp_unit")
            else:
                self._add("fp_no_pick")
                for b, ne in zip(self._busy, self._ne):
                    if _bit(b):
                        self._add("slot_acc")
                        continue
                    v = int(ne.value) if ne.value.is_resolvable else 0
                    key = {3: "slot_rdy", 2: "slot_no_w", 1: "slot_no_in"}.get(v & 3,
                                                                             "slot_no_both")
                    self._add(key)
            for ne, nr in self._mem:
                if not (ne.value.is_resolvable and int(ne.value) & 1):
                    self._add("ldslot_no_addr")
                elif _bit(nr):
                    self._add("ldslot_no_room")
                else:
                    self._add("ldslot_other")
            if _bit(dut.s1_valid0) and not _bit(dut.go0):
                self._add("ld_no_room" if not _bit(dut.room0) else "ld_no_entry")
            if _bit(dut.go0):
                self._add("int0_fire")
            alloc = dut.pool_alloc.value
            if alloc.is_resolvable:
                self._add("pool_sum", bin(int(alloc)).count("1"))
            for j, ports in enumerate(self._lports):
                if _bit(self.lanes[j].busy):
                    self._add(f"lane{j}_busy")
                offered = [(v, r) for v, r in ports if _bit(v)]
                done = sum(1 for _, r in offered if _bit(r))
                if done:
                    self._add(f"lane{j}_local", done)
                    self._add(f"lane{j}_local_cycles")
                elif offered:
                    self._add(f"lane{j}_port_wait")

    def stop(self):
        """Stop sampling."""
        self._task.cancel()

    def report(self):
        """Return the counts with derived per-cycle rates."""
        c = dict(self.counts)
        n = max(1, c.get("cycles", 0))
        c["pool_avg"] = round(c.pop("pool_sum", 0) / n, 2)
        c["fp_fire_rate"] = round(c.get("fp_fire", 0) / n, 3)
        if self.first_fire is not None:
            span = self.last_fire - self.first_fire + 1
            c["fp_span"] = span
            c["fp_span_rate"] = round(c.get("fp_fire", 0) / span, 3)
        return c
