"""Property-based fuzzing of the command line: any options, good or bad, end in a result or in
one ``fdpu: error:`` line with exit status 2, never a traceback, and a refused command writes
no file.

Each command is driven with options drawn from its own parser (every option it has, values of
the right type and of wrong ones: negative, zero, huge, NaN, empty, text), kept to small layers
and arrays so that an accepted example runs in milliseconds.  ``-m slow`` runs many more
examples.
"""

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliutil import call

FAST = settings(max_examples=80, deadline=None,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=2000, deadline=None,
                suppress_health_check=list(HealthCheck))

#: Values tried for an option: well-formed and not.
VALUES = st.one_of(
    st.integers(-3, 70).map(str),
    st.sampled_from(["0", "1", "2", "4", "16", "65535", "65536", "1e9", "-1", "nan", "inf",
                     "-inf", "0.5", "1.5", "", " ", "x", "dense", "sparse", "skip", "gather",
                     "switch", "golden", "model", "auto", "exact", "fast",
                     "alexnet-fc8", "vgg16-fc8", "nope"]))

#: ``fdpu run`` options drawn (the layer is fixed small; --sim icarus/verilator, --json and
#: --out are left out: the first simulate, the others are covered by tests/test_outputs.py).
RUN_OPTS = ["--density", "--batch", "--seed", "--kb", "--gb", "--wfan", "--rows", "--cols",
            "--slots", "--operand-depth", "--int-issue", "--dbuf-bytes", "--mem-latency",
            "--mem-bandwidth", "--dma-channels", "--config-ports", "--order-seed", "--mode",
            "--sparse-graph", "--engine", "--golden", "--max-cycles"]
FLAGS = ["--no-feedback", "--waves", "--double-buffer", "--no-double-buffer", "--no-overlap"]


def _call(argv, capsys):
    """Run ``fdpu argv``; return ``(status, stderr)``, failing on any exception."""
    return call(capsys, *argv)


def _check(status, err, argv):
    assert status in (0, 1, 2), (status, argv, err)
    if status == 2:
        assert err.startswith("fdpu: error: ") and err.count("\n") == 1, (argv, err)


def _run_argv(opts, flags, c, k, sim):
    argv = ["run", "--sim", sim, "--in-features", c, "--out-features", k,
            "--rows", 1, "--cols", 1, "--slots", 32]
    for opt, value in opts:
        argv += [opt, value]
    return argv + list(flags)


def _fuzz_run(opts, flags, c, k, sim, capsys):
    argv = _run_argv(opts, flags, c, k, sim)
    status, err = _call(argv, capsys)
    _check(status, err, argv)


_RUN = dict(opts=st.lists(st.tuples(st.sampled_from(RUN_OPTS), VALUES), max_size=4),
            flags=st.lists(st.sampled_from(FLAGS), max_size=2, unique=True),
            c=st.integers(1, 48), k=st.integers(1, 6), sim=st.sampled_from(["golden", "model"]))


@FAST
@given(**_RUN)
def test_run_options(opts, flags, c, k, sim, capsys):
    _fuzz_run(opts, flags, c, k, sim, capsys)


@pytest.mark.slow
@SLOW
@given(**_RUN)
def test_run_options_long(opts, flags, c, k, sim, capsys):
    _fuzz_run(opts, flags, c, k, sim, capsys)


def _fuzz_small_commands(which, value, extra, tmp_path, capsys):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        argv = {
            "layers": ["layers", "--seed", value] + extra,
            "stats": ["fdcsr", "stats", "--layer", "alexnet-fc8", "--density", value],
            "asm": ["asm", "--in-features", 16, "--out-features", 4, "--rows", 1, "--cols", 1,
                    "--slots", 32, "--pass", value] + extra,
            "verilog": ["verilog", "--top", "fifo", "--param", f"depth={value}"] + extra,
            "sweep": ["sweep", "--dry-run", "--set", "sim=model", "--set", "in-features=16",
                      "--set", "out-features=4", "--grid", f"batch={value}", "--cache", "c",
                      "--out", "o"] + extra,
            "paper": ["paper", "--dry-run", "--batches", value, "--cache", "c",
                      "--out", "o"] + extra,
            "noc": ["noc-bench", "--rate", value, "--points", 0, "--sweep", "s.png"] + extra,
        }[which]
        status, err = _call(argv, capsys)
        _check(status, err, argv)
        if status == 2:                        # a refused command leaves nothing behind
            assert not os.listdir(tmp_path), (argv, os.listdir(tmp_path))
    finally:
        os.chdir(cwd)
        for name in os.listdir(tmp_path):
            path = tmp_path / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


@FAST
@given(which=st.sampled_from(["layers", "stats", "asm", "verilog", "sweep", "paper", "noc"]),
       value=VALUES, extra=st.lists(st.sampled_from(["--json", "-o", "--workers", "--scheduler",
                                                     "x.json", "0", "serial"]), max_size=2))
def test_other_commands(which, value, extra, tmp_path_factory, capsys):
    _fuzz_small_commands(which, value, extra, tmp_path_factory.mktemp("fuzz"), capsys)


#: ``fdpu net`` options drawn (on a tiny two-layer network, golden or model).
NET_OPTS = ["--batch", "--seed", "--density", "--limit", "--mode", "--sparse-graph", "--rows",
            "--cols", "--slots", "--engine", "--golden", "--max-cycles", "--mem-latency",
            "--dma-channels", "--sim"]


@pytest.fixture(scope="module")
def tiny_net(tmp_path_factory):
    import numpy as np
    path = tmp_path_factory.mktemp("net") / "net.npz"
    rng = np.random.default_rng(7)
    np.savez(path, W0=rng.standard_normal((6, 12)), b0=rng.standard_normal(6),
             W1=rng.standard_normal((3, 6)))
    return path


@FAST
@given(opts=st.lists(st.tuples(st.sampled_from(NET_OPTS), VALUES), max_size=4))
def test_net_options(opts, tiny_net, capsys):
    argv = ["net", tiny_net, "--rows", 1, "--cols", 1, "--slots", 32]
    for opt, value in opts:
        if opt == "--sim" and value not in ("golden", "model"):
            continue                           # the RTL simulators are not fuzzed (minutes)
        argv += [opt, value]
    status, err = _call(argv, capsys)
    _check(status, err, argv)
