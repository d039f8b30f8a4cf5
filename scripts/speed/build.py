"""Build and run a standalone Verilator model of a captured job (``make_job.py``) with options.

Each build lands in ``build/speed/<job>/<variant>/`` with the binary ``Vfdpu_system`` and a
``build.json`` (options, build seconds).  ``run`` executes the binary on the job (busy) or idle
and prints the driver's JSON line.

Usage::

    .venv/bin/python scripts/speed/build.py build/speed/job8 base --rate       # recipe 2
    .venv/bin/python scripts/speed/build.py build/speed/job8 regin --reg-in --rate --run
    .venv/bin/python scripts/speed/build.py build/speed/job8 edge --reg-in --edge --rate --run
    .venv/bin/python scripts/speed/build.py build/speed/job8 skip --reg-in --edge --skip --run
    .venv/bin/python scripts/speed/build.py build/speed/job8 o3 --make OPT_FAST=-O3 --rate
    .venv/bin/python scripts/speed/build.py build/speed/job8 flat --hier 0 --make OPT_FAST=-O1
    .venv/bin/python scripts/speed/build.py build/speed/job8 t2 --vopt "--threads 2" --rate
    .venv/bin/python scripts/speed/build.py build/speed/job8 base --idle 20000

Without options a variant is the harness's recipe 2 build (its ``verilator_config``);
``--reg-in`` adds what recipe 3 does (``tb.host.verilator.register_block_inputs``), ``--edge``
what recipe 4 does (``tb.host.hier_wrapper.edge_wrap_hier_blocks``: Verilator without
``--build``, the blocks' wrappers checked and rewritten, then make), ``--skip`` with it what
recipe 5 does (the ticks skip quiescent evaluations; ``FDPU_HIER_SKIP_STATS=1`` and
``FDPU_HIER_SKIP_BACKOFF=N`` in the environment of the binary print the ticks' counts and set
the back-off).  ``--hier N``:
shared modules with N or more instances are hierarchical blocks (0: none, a flat model;
default the harness's threshold).  ``--vopt``: more Verilator options; ``--make``: make
variables (``OPT_FAST``, ``OPT_SLOW``, ``OPT_GLOBAL``); ``--vlt``: more configuration lines;
``--reg-rst``: a flop of ``rst`` outside each shared instance (experiment).  ``--rate``: idle
cycles per CPU second (:func:`idle_rate`); ``--run``: the captured job; ``--idle N``.
"""

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path


from hw.lib.shared import shared_modules
from hw.tooling.verilog import VERILATOR_MAKEFLAGS, verilator_env
from tb.host import hier_wrapper, verilator

HERE = Path(__file__).resolve().parent


def write_hex(job_dir):
    """Write the external memory image of ``job.txt`` as a sparse ``$readmemh`` file."""
    hex_path = (job_dir / "ext.hex").resolve()
    if hex_path.is_file():
        return hex_path
    with open(job_dir / "job.txt") as f:
        f.readline()
        n = int(f.readline().split()[1])
        pairs = [f.readline().split() for _ in range(n)]
    hex_path.write_text("".join(f"@{a}\n{v}\n" for a, v in pairs))
    return hex_path


def patched_verilog(job_dir, source="fdpu_system.v"):
    """Return the job's Verilog with the external memory bank loading ``ext.hex``."""
    text = (job_dir / source).read_text()
    at = text.index("module \\fdpu_system.extmem.sram ")
    i = text.index(".INIT_FILE()", at)
    return text[:i] + f'.INIT_FILE("{write_hex(job_dir)}")' + text[i + len(".INIT_FILE()"):]


def registered_reset(verilog):
    """Return ``verilog`` with each shared module instance reset by a flop of ``rst``.

    The experiment of docs/harness.md "Simulation speed": a hierarchical block whose input
    is wired to a top-level input (``rst``) is updated in the model's input-combinational
    region, i.e. on every evaluation; a registered reset takes it out.  The blocks leave reset
    one cycle after the rest of the design.
    """
    names = "|".join(re.escape(n) for n in shared_modules(verilog))
    out, inside = [], False
    for line in verilog.splitlines(keepends=True):
        if re.match(rf"^  ({names}) shared \($", line):
            out.append("  reg fdpu_sim_rst_q = 1'h1;\n"
                       "  always @(posedge clk) fdpu_sim_rst_q <= rst;\n")
            inside = True
        elif inside and line.startswith("  );"):
            inside = False
        elif inside:
            line = line.replace(".rst(rst)", ".rst(fdpu_sim_rst_q)")
        out.append(line)
    return "".join(out)


def build(job_dir, variant, *, hier=None, vopt=(), make=(), jobs=2, source="fdpu_system.v",
          reg_rst=False, reg_in=False, vlt=(), edge=False, skip=False):
    """Build the variant; return its folder."""
    job_dir = Path(job_dir)
    out = job_dir / variant
    if (out / "build.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    verilog = patched_verilog(job_dir, source)
    saved = verilator.HIER_MIN_INSTANCES
    if hier is not None:
        verilator.HIER_MIN_INSTANCES = hier if hier > 0 else 1 << 30
    try:
        config, options = verilator.verilator_config(verilog, "fdpu_system")
        blocks = verilator.hier_blocks(verilog)
    finally:
        verilator.HIER_MIN_INSTANCES = saved
    if reg_rst:
        verilog = registered_reset(verilog)
    if reg_in:
        verilog = verilator.register_block_inputs(verilog, blocks)
    (out / "fdpu_system.v").write_text(verilog)
    config += "".join(f"{line}\n" for line in vlt)
    (out / "fdpu.vlt").write_text(config)
    env = dict(os.environ)
    env.update(verilator_env())
    env["MAKEFLAGS"] = " ".join([*VERILATOR_MAKEFLAGS, *make])
    build_args = [] if edge else ["--build", "-j", str(jobs)]
    cmd = ["verilator", "--cc", "--exe", *build_args, "-Mdir", str(out / "obj"),
           "--top-module", "fdpu_system", "--prefix", "Vfdpu_system", "-o", "Vfdpu_system",
           "-Wno-fatal", "-Wno-lint", "-Wno-style", "--timescale", "1ns/1ps",
           *options, *vopt, str(out / "fdpu.vlt"), str(HERE / "driver.cpp"),
           str(out / "fdpu_system.v")]
    print("build:", shlex.join(cmd), "MAKEFLAGS=" + env["MAKEFLAGS"], flush=True)
    t0 = time.monotonic()
    with open(out / "build.log", "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
        if edge and not proc.returncode:
            # What tb.host.runner does for cocotb builds: verilate the blocks, give each block
            # the rising-edge wrapper where it is correct, then verilate the top and compile.
            saved_env = dict(os.environ)
            os.environ.update(env)
            try:
                edges = hier_wrapper.edge_wrap_hier_blocks(out / "obj", "Vfdpu_system", log,
                                                     skip=skip)
            finally:
                os.environ.clear()
                os.environ.update(saved_env)
            print("edge wrappers:", edges, flush=True)
            log.flush()
            proc = subprocess.run(["make", "-j", str(jobs), "-C", str(out / "obj"), "-f",
                                   "Vfdpu_system.mk"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)
            if not proc.returncode:
                hier_wrapper.edge_wrap_verify(out / "obj", "Vfdpu_system")
    build_s = time.monotonic() - t0
    if proc.returncode:
        tail = "\n".join((out / "build.log").read_text().splitlines()[-30:])
        raise SystemExit(f"build of {variant} failed after {build_s:.0f} s:\n{tail}")
    size = (out / "obj" / "Vfdpu_system").stat().st_size
    (out / "build.json").write_text(json.dumps(dict(
        variant=variant, source=source, reg_rst=reg_rst, reg_in=reg_in, edge=edge, skip=skip,
        vlt=list(vlt), hier=hier,
        vopt=list(vopt),
        make=list(make), options=options, build_s=round(build_s, 1), binary_bytes=size)) + "\n")
    print(f"built {variant} in {build_s:.0f} s", flush=True)
    return out


def run(job_dir, variant, *, idle=None, prefix=()):
    """Run the variant's binary on the job (or idle); return the driver's record."""
    job_dir = Path(job_dir)
    binary = job_dir / variant / "obj" / "Vfdpu_system"
    cmd = [*prefix, str(binary), str(job_dir / "job.txt")]
    if idle is not None:
        cmd += ["--idle", str(idle)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{variant} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    rec["variant"] = variant
    return rec


def _child_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def idle_rate(job_dir, variant, short=200, long=1200, repeat=3):
    """Return idle cycles per CPU second of the variant, start-up cancelled out.

    Runs ``short`` and ``long`` idle cycles ``repeat`` times each and divides the difference
    in cycles by the smallest difference in the children's CPU time (user + system): the
    machine is shared, so wall-clock rates follow the load; CPU time much less so.
    """
    best = None
    for _ in range(repeat):
        spent = []
        for n in (short, long):
            before = _child_cpu()
            run(job_dir, variant, idle=n)
            spent.append(_child_cpu() - before)
        delta = spent[1] - spent[0]
        best = delta if best is None else min(best, delta)
    return (long - short) / max(best, 1e-9)


def main(argv=None):
    """Build (and optionally run) one variant."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job")
    ap.add_argument("variant")
    ap.add_argument("--hier", type=int, default=None)
    ap.add_argument("--source", default="fdpu_system.v",
                    help="Verilog file of the job folder (fdpu_system_async.v: async reset)")
    ap.add_argument("--reg-rst", action="store_true",
                    help="reset shared module instances from a flop of rst (experiment)")
    ap.add_argument("--reg-in", action="store_true",
                    help="register rst and the coordinates inside hierarchical blocks, as "
                         "tb.host.runner does since recipe 3 (register_block_inputs)")
    ap.add_argument("--edge", action="store_true",
                    help="hierarchical blocks evaluated once per rising edge, as tb.host.runner "
                         "does since recipe 4 (edge_wrap_hier_blocks)")
    ap.add_argument("--skip", action="store_true",
                    help="with --edge: the ticks skip the evaluation of quiescent blocks, as "
                         "tb.host.runner does since recipe 5 (skip_block_check)")
    ap.add_argument("--vlt", nargs="*", default=[],
                    help="more lines for the Verilator configuration file")
    ap.add_argument("--vopt", default="", help="more Verilator options (one string)")
    ap.add_argument("--make", nargs="*", default=[], help="make variables NAME=VALUE")
    ap.add_argument("--run", action="store_true", help="run the job after the build")
    ap.add_argument("--idle", type=int, default=None, help="run N idle cycles instead")
    ap.add_argument("--rate", action="store_true",
                    help="print idle cycles per CPU second (see idle_rate)")
    ap.add_argument("--json", help="append the run's record to this file")
    args = ap.parse_args(argv)
    build(args.job, args.variant, hier=args.hier, vopt=shlex.split(args.vopt), make=args.make,
          source=args.source, reg_rst=args.reg_rst,
          reg_in=args.reg_in, vlt=args.vlt, edge=args.edge, skip=args.skip)
    if args.rate:
        rate = idle_rate(args.job, args.variant)
        print(f"{args.job} {args.variant}: {rate:,.0f} idle cycles per CPU second", flush=True)
    if args.run or args.idle is not None:
        rec = run(args.job, args.variant, idle=args.idle)
        rec["build"] = json.loads((Path(args.job) / args.variant / "build.json").read_text())
        print(json.dumps(rec))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
