"""An interrupted command ends what it started: SIGTERM or Ctrl-C to ``fdpu run --sim icarus``
during its simulation leaves no simulator running and prints one line, no traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _children(pid):
    """Return ``{pid: name}`` of every descendant of ``pid``."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            parents[int(entry.name)] = (ppid, name)
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child, (ppid, name) in parents.items():
            if ppid == p and child not in found:
                found[child] = name
                todo.append(child)
    return found


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                    # a zombie is gone for our purpose
        return (Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]) != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig, status, line", [(signal.SIGTERM, 143, "fdpu: terminated"),
                                               (signal.SIGINT, 130, "fdpu: interrupted")])
def test_a_stopped_rtl_run_leaves_no_simulator(tmp_path, sig, status, line):
    cmd = [sys.executable, "-m", "sw.cli", "run", "--sim", "icarus", "--rows", "1", "--cols",
           "1", "--slots", "32", "--operand-depth", "4", "--int-issue", "1", "--dbuf-bytes",
           "65536", "--in-features", "512", "--out-features", "64", "--batch", "32", "--mode",
           "dense"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline, sims = time.monotonic() + 600, {}
    while time.monotonic() < deadline and proc.poll() is None:
        sims = {p: n for p, n in _children(proc.pid).items() if n == "vvp"}
        if sims:
            break
        time.sleep(0.2)
    assert sims, f"the simulator never started (status {proc.poll()})"
    time.sleep(1.0)
    descendants = _children(proc.pid)
    proc.send_signal(sig)                   # to the command only, as kill PID sends it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert err.strip().splitlines()[-1] == line and "Traceback" not in err, err
    time.sleep(0.5)
    left = {p: n for p, n in descendants.items() if _alive(p)}
    assert not left, f"left running: {left}"
