"""Capture one FC job of the runtime as files a standalone Verilator driver can replay.

``tb.host.runtime.run_fc_rtl`` is run with the simulation step replaced: instead of building and
running the cocotb bench, the generated Verilog of the system top, the run spec and the
external memory image are written to ``OUT``:

* ``fdpu_system.v``: the Verilog of the system top (same component, same parameters as the
  runtime);
* ``job.txt``: the replay script of ``scripts/speed/driver.cpp`` (memory model registers, the
  external memory's non-zero 64-bit words, then per pass and phase the register writes, the
  start pulse and the cycle bound);
* ``spec.json``: the runtime's spec (for reference);
* ``fdpu_system_async.v``: the same design with the ``sync`` domain's reset asynchronous
  (:func:`async_verilog`), the experiment of docs/harness.md "Simulation speed".

Usage::

    .venv/bin/python scripts/speed/make_job.py OUT [--rows 8 --cols 8 --slots 64
        --out-features 64 --in-features 256 --batch 16 --mode sparse --density 0.25]

The defaults are the case of ``scripts/bench_rtl.py speed`` on Verilator.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from amaranth import ClockDomain
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import Fragment, ValueCastable, _ir
from amaranth.lib import wiring

import hw.lib.shared
from hw.tooling.verilog import to_verilog
from sw.compiler import fc_plan, layers, planner
from sw.spec.arch import ArrayParams
from tb.host import runtime


class _Captured(Exception):
    pass


def _convert_async(component, name):
    """Convert like ``hw.lib.shared.convert_plain``, with an asynchronous ``sync`` reset."""
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        ports["__".join(map(str, path))] = (value, _ir.PortDirection.Input
                                            if member.flow == wiring.In
                                            else _ir.PortDirection.Output)
    fragment = Fragment.get(component, None)
    sync = ClockDomain("sync", async_reset=True)
    fragment.add_domains(sync)
    ports["clk"] = (sync.clk, _ir.PortDirection.Input)
    ports["rst"] = (sync.rst, _ir.PortDirection.Input)
    return amaranth_verilog.convert(fragment, name=name, ports=ports, emit_src=False)


def async_verilog(component, name):
    """Return ``to_verilog(component, name)`` with every ``sync`` reset asynchronous.

    ``always @(posedge clk, posedge rst) if (rst) q <= init; else q <= next``: ``rst`` leaves
    the next-state logic of every register, so a Verilator model no longer re-evaluates all
    of it whenever a top-level input (``rst``) may have changed.
    """
    saved = hw.lib.shared.convert_plain
    hw.lib.shared.convert_plain = _convert_async
    try:
        return to_verilog(component, name)
    finally:
        hw.lib.shared.convert_plain = saved


def capture(out, p, w, x, mode):
    """Write the job of ``w`` (K x C) and ``x`` (N x C) on ``p`` to folder ``out``."""
    import tb.host.runner

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plan = planner.plan_fc(w.shape[0], w.shape[1], x.shape[0], mode, p)

    def fake_run(top, params, test_module, sim, **kwargs):
        spec_path = kwargs["extra_env"]["FDPU_RUN_SPEC"]
        (out / "fdpu_system.v").write_text(to_verilog(top, "fdpu_system"))
        (out / "fdpu_system_async.v").write_text(async_verilog(top, "fdpu_system"))
        shutil.copy(spec_path, out / "spec.json")
        with open(spec_path) as f:
            spec = json.load(f)
        write_job(out / "job.txt", spec)
        raise _Captured

    saved = tb.host.runner.run_cocotb
    tb.host.runner.run_cocotb = fake_run
    try:
        runtime.run_fc_rtl(plan, w, x, "verilator")
    except _Captured:
        pass
    finally:
        tb.host.runner.run_cocotb = saved
    return plan


def write_job(path, spec):
    """Write the replay script of ``spec`` (see the module docstring) to ``path``."""
    lines = []
    mem = spec["mem"]
    lines.append(f"mem {mem['latency']} {mem['bw']} {mem['stall']}")
    if spec.get("channels", 1) != 1 or spec.get("overlap"):
        raise SystemExit("make_job: the driver replays one DMA channel without overlap only")
    with np.load(spec["memories"]) as z:
        idx, val = z["idx0"], z["val0"].astype(np.uint64)
    lines.append(f"words {len(idx)}")
    lines += [f"{i:x} {v:x}" for i, v in zip(idx.tolist(), val.tolist())]
    for ps in spec["passes"]:
        for phase in ("in", "compute", "out"):
            if phase == "compute":
                regs = " ".join(f"{k}={v}" for k, v in ps["regs"].items())
                lines.append(f"compute {spec['max_cycles']} {regs}")
            else:
                (lst, count), = ps[f"dma_{phase}"]          # one channel
                if count:
                    lines.append(f"dma {spec['dma_max_cycles']} {lst} {count}")
    lines.append("end")
    Path(path).write_text("\n".join(lines) + "\n")


def main(argv=None):
    """Capture the job named by the command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--out-features", type=int, default=64)
    ap.add_argument("--in-features", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--mode", choices=fc_plan.MODES, default="sparse")
    ap.add_argument("--density", type=float, default=0.25)
    args = ap.parse_args(argv)
    p = ArrayParams(rows=args.rows, cols=args.cols, slots=args.slots, dbuf_bytes=1 << 21)
    w = layers.make_weights((args.out_features, args.in_features), args.density, 0)
    x = layers.make_inputs(w.shape[1], args.batch, 0)
    plan = capture(args.out, p, w, x, args.mode)
    print(f"captured {plan.mode} K={plan.K} C={plan.C} N={plan.N} on {p.rows}x{p.cols} "
          f"({plan.passes} passes) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
