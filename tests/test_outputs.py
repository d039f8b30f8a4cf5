"""Output files: checked before any work, written whole or not at all, strict JSON."""

import json
import os

import numpy as np
import pytest

from cliutil import assert_user_error, run
from sw.cli import output
from sw.spec.errors import FdpuError

LAYER = ("--in-features", 16, "--out-features", 4)


def test_check_outputs_refusals(tmp_path):
    src = tmp_path / "w.npy"
    np.save(src, np.zeros((2, 2), np.float16))
    cases = [
        ([("--out", str(tmp_path))], "is a directory"),
        ([("--out", "/dev/null")], "not a regular file"),
        ([("--out", str(tmp_path / "no" / "y.npy"))], "does not exist"),
        ([("--out", "")], "the path is empty"),
        ([("--out", str(src))], "is also the input --weights"),
        ([("--out", str(tmp_path / "a")), ("--json", str(tmp_path / "a"))],
         "--out and --json are the same file"),
    ]
    for outputs, match in cases:
        with pytest.raises(FdpuError, match=match):
            output.check_outputs(outputs, [("--weights", str(src))])
    output.check_outputs([("--out", str(tmp_path / "y.npy")), ("--json", None)])


def test_replacing_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with output.replacing(target) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]                        # no temporary left


def test_strict_json(tmp_path):
    path = tmp_path / "r.json"
    output.write_json(path, {"a": float("inf"), "b": [1.0, float("nan")], "c": 2})
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    assert data == {"a": None, "b": [1.0, None], "c": 2, "non_finite": ["a", "b[1]"]}


def test_run_checks_outputs_before_running(capsys, tmp_path):
    y = tmp_path / "y.npy"
    assert_user_error(capsys, "run", *LAYER, "--out", y, "--json", tmp_path / "no" / "r.json",
                      match="does not exist")
    assert not y.exists()
    w = tmp_path / "w.npy"
    np.save(w, np.ones((4, 16), np.float16))
    assert_user_error(capsys, "run", "--weights", w, "--out", w, match="is also the input")
    status, _, _ = run(capsys, "run", *LAYER, "--out", y, "--json", tmp_path / "r.json")
    assert status == 0 and np.load(y).shape == (1, 4)
    assert sorted(os.listdir(tmp_path)) == ["r.json", "w.npy", "y.npy"]


def test_fdcsr_never_overwrites_its_input(capsys, tmp_path):
    w = tmp_path / "w.npy"
    np.save(w, np.eye(16, dtype=np.float16))
    assert_user_error(capsys, "fdcsr", "encode", w, "-o", w, match="is also the input IN")
    assert np.load(w).shape == (16, 16)
    status, _, _ = run(capsys, "fdcsr", "encode", w, "-o", tmp_path / "w.fd")
    assert status == 0 and (tmp_path / "w.fd").exists()             # the name given, exactly
    status, _, _ = run(capsys, "fdcsr", "decode", tmp_path / "w.fd", "-o", tmp_path / "b.npy")
    assert status == 0 and np.array_equal(np.load(tmp_path / "b.npy"), np.load(w))


def test_asm_writes_the_name_given(capsys, tmp_path):
    args = ("asm", *LAYER, "--rows", 1, "--cols", 1, "--slots", 32)
    assert_user_error(capsys, *args, "-o", tmp_path / "image.bin", match="ending in .npz")
    assert not (tmp_path / "image.bin.npz").exists()
    status, out, _ = run(capsys, *args, "-o", tmp_path / "image.npz")
    assert status == 0 and os.listdir(tmp_path) == ["image.npz"]
    status, out, _ = run(capsys, "disasm", tmp_path / "image.npz")
    assert status == 0 and out


@pytest.mark.parametrize("argv, match", [
    (("--sweep", "s.png", "--points", 0), "--points must be in 1..100"),
    (("--points", 3), "--points sets the points of a --sweep"),
    (("--rate", 0), "--rate must be in (0, 1]"),
    (("--depth", 0), "--depth must be in 2..64"),
    (("--depth", 1), "--depth must be in 2..64"),
    (("--cycles", 10 ** 12), "--cycles must be in 100..10,000,000"),
    (("--rows", 0), "--rows must be an integer"),
    (("--json", "/dev/full"), "not a regular file"),
])
def test_noc_bench_bad_input(capsys, tmp_path, monkeypatch, argv, match):
    monkeypatch.chdir(tmp_path)
    assert_user_error(capsys, "noc-bench", *argv, match=match)
    assert not os.listdir(tmp_path)


def test_verilog_output_checked_first(capsys, tmp_path):
    assert_user_error(capsys, "verilog", "--top", "fifo", "-o", tmp_path / "no" / "f.v",
                      match="does not exist")


def test_a_name_with_control_characters_stays_one_escaped_line(capsys, tmp_path):
    # A newline in a file name must not split the error, nor start a fake "fdpu: error:"
    # line; an escape sequence must not reach the terminal raw.
    for name in ("a\nfdpu: error: fake.npy", "b\x1b[31mred.npy"):
        path = tmp_path / name
        path.write_bytes(b"x")
        status, _, err = run(capsys, "run", "--weights", path)
        assert status == 2 and err.count("\n") == 1 and err.startswith("fdpu: error: ")
        assert "\x1b" not in err and ("\\n" in err or "\\x1b" in err)


@pytest.mark.parametrize("argv, match", [
    (["--top", "fifo", "--param", f"depth={2 ** 30}"], "depth=1073741824 is above the most it "
                                                        "builds, 65536"),
    (["--top", "fifo", "--param", "width=100000"], "width=100000 is above the most it builds"),
    (["--top", "router", "--param", "depth=5000"], "depth=5000 is above the most it builds"),
])
def test_rtl_tool_sizes_are_bounded_before_elaboration(capsys, tmp_path, argv, match):
    assert_user_error(capsys, "verilog", *argv, "-o", tmp_path / "x.v", match=match)
    assert not (tmp_path / "x.v").exists()


def test_fpu_check_random_cases_are_bounded(capsys):
    assert_user_error(capsys, "fpu-check", "--sim", "icarus", "--op", "fma", "--random",
                      10 ** 12, match="--random N must be a number of cases in 1..100,000,000")
