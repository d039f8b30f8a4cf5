"""``fdpu sweep`` and ``fdpu paper``: grids, checks before anything runs, the result cache, Dask
against a serial run, the paper's report."""

import json
import os

import numpy as np
import pytest

from cliutil import assert_user_error, run
from sw.cli import sweep as sweep_cli
from sw.models import perf_fit
from sw.spec.errors import FdpuError
from sw.sweep import cache, execute, grid, paper, table

SMALL = ["--set", "in-features=64", "--set", "out-features=16", "--set", "rows=2",
         "--set", "cols=2"]


# --- grids ------------------------------------------------------------------------------------

def test_assignments_and_product_order():
    g = grid.parse_assignments(["batch=1,4", "sparse_graph=skip,gather", "density=0.25"])
    assert g == {"batch": [1, 4], "sparse-graph": ["skip", "gather"], "density": [0.25]}
    pts = grid.expand(g, {"sim": "model"})
    assert len(pts) == 4
    assert [(p["batch"], p["sparse-graph"]) for p in pts] == [
        (1, "skip"), (1, "gather"), (4, "skip"), (4, "gather")]      # last option fastest
    assert all(p["sim"] == "model" for p in pts)
    assert grid.expand({"batch": [1, 1]}) == [{"batch": 1}]             # duplicates dropped


def test_toml(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[grid]\nbatch = [1, 64]\nmode = "dense"\n[fixed]\nsim = "model"\n'
                 '[[point]]\nlayer = "alexnet-fc8"\nbatch = 4\n')
    g, fixed, singles = grid.load_toml(f)
    assert g == {"batch": [1, 64], "mode": ["dense"]} and fixed == {"sim": "model"}
    pts = grid.expand(g, fixed, singles)
    assert pts[-1] == {"sim": "model", "layer": "alexnet-fc8", "batch": 4} and len(pts) == 3


@pytest.mark.parametrize("text, match", [
    ("[grid\n", "not valid TOML"),
    ("[grids]\nbatch = 1\n", "unknown top-level key"),
    ("[grid]\nbatch = []\n", "empty list"),
    ("[[point]]\nbatch = [1, 2]\n", "is a list"),
    ("[grid]\nbatch = {a = 1}\n", "not a string, number or boolean"),
    ("", "no points"),
])
def test_bad_toml(tmp_path, text, match):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(FdpuError, match=match):
        grid.load_toml(f)


def _check(points):
    from sw.cli import run as run_cli
    return grid.check_points(points, sweep_cli.run_parser(), run_cli.check_options)


def test_check_points_gives_arguments_and_every_option():
    (args, options), = _check([{"sim": "model", "layer": "alexnet-fc8", "batch": 4,
                                "double-buffer": False}])
    assert args == ["--batch", "4", "--no-double-buffer", "--layer", "alexnet-fc8",
                    "--sim", "model"]
    assert options["rows"] == 8 and options["dbuf_bytes"] == 1 << 21      # defaults included
    assert options["double_buffer"] is False


@pytest.mark.parametrize("point, match", [
    ({"sim": "model", "layer": "alexnet-fc9"}, "unknown layer"),
    ({"sim": "model", "layer": "alexnet-fc8", "batch": 0}, "--batch must be at least 1"),
    ({"sim": "model", "layer": "alexnet-fc8", "mode": "diagonal"}, "invalid choice"),
    ({"sim": "model", "layer": "alexnet-fc8", "batch": "many"}, "invalid int value"),
    ({"sim": "model", "layer": "alexnet-fc8", "colour": 3}, "not an option of fdpu run"),
    ({"sim": "model", "layer": "alexnet-fc8", "json": "x.json"}, "cannot be swept"),
    ({"sim": "model", "layer": "alexnet-fc8", "waves": True}, "cannot be swept"),
    ({"sim": "model", "layer": "alexnet-fc8", "double-buffer": 3}, "is a switch"),
    ({"sim": "model", "layer": "alexnet-fc8", "engine": "exact"}, "not to --sim model"),
    ({"sim": "icarus", "layer": "alexnet-fc8", "dma-channels": 0}, "--dma-channels"),
    ({"sim": "model", "layer": "alexnet-fc8", "mode": "dense", "sparse-graph": "skip"},
     "--mode sparse only"),
])
def test_bad_point_is_refused_with_its_name(point, match):
    with pytest.raises(FdpuError, match=match) as exc:
        _check([{"sim": "model", "layer": "alexnet-fc8"}, point])
    assert str(exc.value).startswith(f"point '{grid.point_name(point)}'")


def test_cache_key_covers_options_simulator_and_source():
    base = dict(batch=4, sim="model")
    k = cache.key(base, "model", "a" * 64)
    assert k == cache.key(dict(base), "model", "a" * 64)
    assert k != cache.key(dict(base, batch=8), "model", "a" * 64)
    assert k != cache.key(base, "model", "b" * 64)
    assert k != cache.key(base, "verilator", "a" * 64)
    assert len(cache.source_digest("model")) == 64
    assert cache.source_digest("icarus") == cache.source_digest("verilator") != \
        cache.source_digest("model")


def test_cache_key_format_is_stable(monkeypatch):
    """A key is a function of its parts only: changing how they are hashed orphans every
    cached record (docs/data/paper-rtl holds hours of RTL runs), so it is pinned here."""
    monkeypatch.setattr(cache, "tool_versions", lambda sim: {"numpy": "2.4.6"})
    assert cache.key({"batch": 4}, "model", "a" * 64) == \
        "35b88133b9e976668e6b494caaba118b603eb83db945308edc2882578e786b10"


def _record(k, **more):
    rec = dict(key=k, name="batch=1", point={"batch": 1}, args=["--batch", "1"], sim="model",
               status=0, result={"cycles": 210_976, "match": True}, wall={"point_s": 1.5},
               command="fdpu run --batch 1", tools={}, source="a" * 64)
    rec.update(more)
    return rec


def test_store_round_trip_and_corrupt_file(tmp_path):
    s = cache.Store(tmp_path / "c")
    assert s.get("k1") is None
    s.put("k1", _record("k1"))
    got = s.get("k1")
    assert got == {**_record("k1"), "integrity": cache.integrity(got)}
    s.path("k1").write_text("{not json")
    assert s.get("k1") is None and "not readable JSON" in s.problems["k1"]   # a miss
    with pytest.raises(ValueError):
        s.put("k2", _record("k2", wall={"point_s": float("nan")}))    # strict JSON only
    assert not list((tmp_path / "c").glob(".tmp-*"))                  # no partial file left


@pytest.mark.parametrize("edit, problem", [
    (lambda r: r["result"].update(cycles=1), "does not match its integrity digest"),
    (lambda r: r.pop("result"), "field 'result' missing"),
    (lambda r: r.update(status="0"), "field 'status' is not a int"),
    (lambda r: r.update(status=True), "field 'status' is not a int"),
    (lambda r: r.update(key="other"), "its key is"),
    (lambda r: r["result"].update(cycles="many"), "result 'cycles' is not a number"),
    (lambda r: r.update(integrity=1), "field 'integrity' is not a str"),
])
def test_a_record_edited_or_malformed_is_never_used(tmp_path, edit, problem):
    # A cached record is checked against its fields and its integrity digest before use: a
    # hand edit (cycles 210,976 -> 1 with the right key) or a missing or mistyped field makes
    # it a miss with the problem kept for the report, not a figure in the table.
    s = cache.Store(tmp_path / "c")
    s.put("k1", _record("k1"))
    rec = json.loads(s.path("k1").read_text())
    edit(rec)
    s.path("k1").write_text(json.dumps(rec))
    assert s.get("k1") is None
    assert problem in s.problems["k1"]


def test_a_record_that_is_not_a_regular_file_is_a_miss(tmp_path):
    s = cache.Store(tmp_path / "c")
    (tmp_path / "c").mkdir()
    os.mkfifo(s.path("k1"))
    assert s.get("k1") is None and "not a regular file" in s.problems["k1"]


# --- the command: bad input before anything runs ----------------------------------------------

@pytest.mark.parametrize("argv, match", [
    (["--grid", "batch"], "expected NAME=VALUE"),
    (["--grid", "batch=1", "--grid", "batch=2"], "given twice"),
    (["--set", "batch=1,2"], "one value"),
    ([], "no points"),
    (["--set", "sim=model", "--set", "layer=nope"], "unknown layer"),
    (["--set", "sim=model", "--set", "layer=alexnet-fc8", "--scheduler", "serial",
      "--workers", "2"], "--workers sets the size of the local cluster"),
    (["--set", "sim=model", "--set", "layer=alexnet-fc8", "--workers", "0"],
     "--workers must be in 1..256"),
    (["--set", "sim=model", "--set", "layer=alexnet-fc8", "--scheduler", "localhost"],
     "expected local, serial or a Dask scheduler address"),
])
def test_bad_sweep_input(capsys, tmp_path, argv, match):
    out = tmp_path / "out"
    assert_user_error(capsys, "sweep", *argv, "--out", out, "--cache", tmp_path / "c",
                      match=match)
    assert not out.exists() and not (tmp_path / "c").exists()


def test_unreachable_scheduler(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "CONNECT_TIMEOUT", 2)
    assert_user_error(capsys, "sweep", "--set", "sim=model", "--set", "layer=alexnet-fc8",
                      "--scheduler", "tcp://127.0.0.1:9", "--out", tmp_path / "o",
                      "--cache", tmp_path / "c", match="cannot reach the Dask scheduler")
    assert not list((tmp_path / "o").glob("points/*"))


@pytest.mark.parametrize("address, match", [
    ("tls://127.0.0.1:8786", "the tls:// transport is not supported"),
    ("ucx://127.0.0.1:8786", "the ucx:// transport is not supported"),
    ("inproc://x", "the inproc:// transport is not supported"),
    ("tcp://a:b", "tcp://HOST:PORT (port 1..65535)"),
    ("tcp://127.0.0.1:99999", "tcp://HOST:PORT (port 1..65535)"),
])
def test_scheduler_schemes_are_checked_by_name(capsys, tmp_path, address, match):
    assert_user_error(capsys, "sweep", *SMALL, "--set", "sim=model", "--scheduler", address,
                      "--out", tmp_path / "o", "--cache", tmp_path / "c", match=match)


def test_a_scheduler_that_never_answers_is_given_up_on(capsys, tmp_path, monkeypatch):
    # A server that accepts the connection and says nothing: bounded, one error line.
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    monkeypatch.setattr(execute, "CONNECT_TIMEOUT", 1)
    try:
        assert_user_error(capsys, "sweep", *SMALL, "--set", "sim=model", "--set", "seed=99",
                          "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}",
                          "--out", tmp_path / "o", "--cache", tmp_path / "c",
                          match="cannot reach the Dask scheduler")
    finally:
        server.close()


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_point_file_that_is_not_a_regular_file_is_refused_before_hashing(capsys, tmp_path,
                                                                          kind):
    path = {"fifo": tmp_path / "w.npy", "device": "/dev/zero", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    assert_user_error(capsys, "sweep", "--set", f"weights={path}", "--dry-run", "--out",
                      tmp_path / "o", "--cache", tmp_path / "c", match="not a regular file")


def test_sweep_files_and_grids_are_bounded(capsys, tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("[grid]\nbatch = " + "[" * 40 + "1" + "]" * 40 + "\n")
    assert_user_error(capsys, "sweep", "--file", deep, "--dry-run", "--out", tmp_path / "o",
                      match="levels deep; a sweep file lists options (at most 16 levels)")
    deeper = tmp_path / "deeper.toml"
    deeper.write_text("a = " + "[" * 20000 + "]" * 20000 + "\n")
    assert_user_error(capsys, "sweep", "--file", deeper, "--dry-run", "--out", tmp_path / "o",
                      match="nested deeper than 16 levels")
    many = ",".join(str(i) for i in range(1, 1001))
    assert_user_error(capsys, "sweep", "--grid", f"batch={many}", "--grid",
                      f"seed={many}", "--set", "in-features=32", "--set", "out-features=8",
                      "--dry-run", "--out", tmp_path / "o",
                      match="the sweep has 1,000,000 points (the grid's product 1000 x 1000); "
                            "at most 100,000")


def test_outputs_never_go_through_a_link_nor_over_an_input(capsys, tmp_path):
    out, victim = tmp_path / "o", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("keep\n")
    (out / "table.csv").symlink_to(victim)
    (out / "table.md").symlink_to(victim)
    status, _, err = run(capsys, "sweep", *SMALL, "--set", "sim=model", "--scheduler",
                         "serial", "--out", out, "--cache", tmp_path / "c")
    assert status == 0, err
    assert victim.read_text() == "keep\n"                       # the link replaced, not followed
    assert not (out / "table.csv").is_symlink()
    assert "in-features" in (out / "table.csv").read_text()
    # A sweep file (or a point's input) that is one of the outputs is refused before any work.
    own = out / "table.md"
    own.write_text("[grid]\nbatch = [1]\n[fixed]\nin-features = 32\nout-features = 8\n")
    assert_user_error(capsys, "sweep", "--file", own, "--out", out, "--cache", tmp_path / "c",
                      match="is a file the command writes into --out")
    assert "[grid]" in own.read_text()
    # An output name that is a directory: refused before the points run.
    bad = tmp_path / "b"
    (bad / "table.csv").mkdir(parents=True)
    assert_user_error(capsys, "sweep", *SMALL, "--set", "sim=model", "--scheduler", "serial",
                      "--out", bad, "--cache", tmp_path / "c", match="table.csv is a directory")
    assert not (bad / "points").exists()


def test_two_commands_on_one_out_directory(capsys, tmp_path):
    import fcntl
    out = tmp_path / "o"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                  # as a running sweep holds it
        assert_user_error(capsys, "sweep", *SMALL, "--set", "sim=model", "--scheduler",
                          "serial", "--out", out, "--cache", tmp_path / "c",
                          match="another fdpu command is writing into it")
        assert_user_error(capsys, "paper", "--layers", "alexnet-fc8", "--batches", "1",
                          "--graphs", "dense", "--scheduler", "serial", "--out", out,
                          "--cache", tmp_path / "c", match="another fdpu command is writing")
    finally:
        os.close(fd)
    assert not list(out.iterdir())


def test_an_edited_cache_record_is_reported_and_recomputed(capsys, tmp_path):
    c, out = tmp_path / "c", tmp_path / "o"
    argv = ["sweep", *SMALL, "--set", "sim=model", "--scheduler", "serial", "--cache", c,
            "--out", out]
    assert run(capsys, *argv)[0] == 0
    (path,) = c.glob("*.json")
    rec = json.loads(path.read_text())
    cycles = rec["result"]["cycles"]
    rec["result"]["cycles"] = 1
    path.write_text(json.dumps(rec))
    status, out_text, _ = run(capsys, *argv)
    assert status == 0 and "not used" in out_text and "integrity digest" in out_text
    (point,) = (out / "points").glob("*.json")
    assert json.loads(point.read_text())["result"]["cycles"] == cycles


# --- running: cache, serial against Dask ------------------------------------------------------

def _records(out):
    recs = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    return {r["key"]: r for r in recs}


def test_cache_hit_reruns_nothing_and_a_changed_point_reruns_alone(capsys, tmp_path):
    c = tmp_path / "c"
    argv = ["sweep", *SMALL, "--set", "sim=model", "--grid", "batch=1,8", "--scheduler",
            "serial", "--cache", c]
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "a")
    assert status == 0 and "0 cached, 2 to run" in out
    first = {p.name: p.stat().st_mtime_ns for p in c.glob("*.json")}
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "b")
    assert status == 0 and "2 cached, 0 to run" in out
    assert {p.name: p.stat().st_mtime_ns for p in c.glob("*.json")} == first
    assert _records(tmp_path / "a") == _records(tmp_path / "b")
    argv[argv.index("batch=1,8")] = "batch=1,16"
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "d")
    assert status == 0 and "1 cached, 1 to run" in out
    csv_text = (tmp_path / "d" / "table.csv").read_text()
    assert csv_text.count("\n") == 3 and "utilization" in csv_text
    assert "| batch |" in (tmp_path / "d" / "table.md").read_text()
    # Into the same --out again: points/ holds this run's records only (batch 8's goes), and
    # a file of the user's there stays.
    (tmp_path / "a" / "points" / "notes.txt").write_text("mine")
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "a")
    assert status == 0
    names = sorted(p.name for p in (tmp_path / "a" / "points").iterdir())
    assert names == sorted([p.name for p in (tmp_path / "d" / "points").iterdir()]
                           + ["notes.txt"])


def test_local_cluster_equals_serial(capsys, tmp_path):
    """Two Dask workers and a serial run give the same records (an Icarus RTL point and model
    points); only wall times differ."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[grid]\nmode = ["dense", "sparse"]\n'
                     '[fixed]\nsim = "model"\n'
                     '[[point]]\nsim = "icarus"\nmode = "dense"\n')
    argv = ["sweep", "--file", sweep, "--set", "in-features=32", "--set", "out-features=4",
            "--set", "batch=4", "--set", "rows=1", "--set", "cols=1", "--set", "slots=32",
            "--set", "dbuf-bytes=4096", "--set", "density=0.5"]
    status, out, err = run(capsys, *argv, "--scheduler", "serial", "--cache", tmp_path / "c1",
                           "--out", tmp_path / "serial")
    assert status == 0, (out, err)
    status, out, err = run(capsys, *argv, "--workers", "2", "--cache", tmp_path / "c2",
                           "--out", tmp_path / "dask")
    assert status == 0 and "local, 2 workers" in out, (out, err)
    a, b = _records(tmp_path / "serial"), _records(tmp_path / "dask")
    assert a.keys() == b.keys() and len(a) == 3
    for k in a:
        assert a[k]["result"] == b[k]["result"], a[k]["name"]
        assert a[k]["wall"].keys() == b[k]["wall"].keys()
    rtl = [r for r in a.values() if r["sim"] == "icarus"]
    assert len(rtl) == 1 and all(r["result"]["match"] for r in rtl)


def test_table_of_records():
    recs = [dict(key="k1", point=dict(batch=1, sim="model"), result=dict(cycles=10, N=1),
                 wall=dict(point_s=1.0)),
            dict(key="k2", point=dict(batch=4, sim="model"), result=dict(cycles=20, N=4),
                 wall=dict(point_s=2.0))]
    header, rows = table.rows(recs)
    assert header[0] == "batch" and "sim" not in header          # only what varies
    assert rows[1][header.index("cycles")] == "20"
    assert "k2" in table.to_csv(recs)


# --- the paper --------------------------------------------------------------------------------

def test_paper_points_and_metric():
    pts = paper.points("rtl")
    assert len(pts) == 36 and all(p["sim"] == "verilator" for p in pts)
    assert [p.get("sparse-graph", "dense") for p in pts[-9:]] == ["gather"] * 9
    assert paper.paper_utilization(dict(N=1, issue_utilization=0.4)) == pytest.approx(0.1)
    assert paper.paper_utilization(dict(N=64, issue_utilization=0.9)) == 0.9


@pytest.mark.parametrize("argv, match", [
    (["--layers", "alexnet-fc9"], "unknown alexnet-fc9"),
    (["--batches", "2"], "unknown 2"),
    (["--graphs", "skip"], "must include dense"),
    (["--source", "model", "--scheduler", "serial", "--workers", "1"], "--workers"),
])
def test_bad_paper_input(capsys, tmp_path, argv, match):
    assert_user_error(capsys, "paper", *argv, "--out", tmp_path / "p", "--cache",
                      tmp_path / "c", match=match)
    assert not (tmp_path / "p").exists()


def test_paper_model_report(capsys, tmp_path):
    out = tmp_path / "p"
    status, text, err = run(capsys, "paper", "--source", "model", "--layers", "alexnet-fc8",
                            "--batches", "1,64", "--graphs", "dense,switch,skip",
                            "--scheduler", "serial", "--cache", tmp_path / "c", "--out", out)
    assert status == 0, (text, err)
    md = (out / "report.md").read_text()
    for statement in paper.STATEMENTS.values():
        assert statement in md
    assert "performance model" in md and "fdpu model-check" in md
    assert "| alexnet-fc8 | 64 | skip |" in md
    # Where the RTL ran the very point (a calibration point), the model's error against it.
    assert "measured error: compute / end to end (RTL point)" in md
    row = next(line for line in md.splitlines() if line.startswith("| alexnet-fc8 | 64 | skip"))
    name = row.rsplit("(", 1)[1].split(",")[0].rstrip(") |")
    cfg = next(p for p in perf_fit.load()["points"] if p["name"] == name)["config"]
    assert (cfg["layer"], cfg["N"], cfg["sparse_graph"]) == ("alexnet-fc8", 64, "skip")
    for png in ("fig10_utilization.png", "fig11_bandwidth.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    recs = json.loads((out / "records.json").read_text())
    assert len(recs) == 6 and {r["sim"] for r in recs} == {"model"}
    assert os.path.getsize(out / "table.csv") > 0
    # The host CPU beside FDPU, on the same layer and batches.
    assert "## A CPU beside FDPU (the paper's Table 4)" in md
    assert "| alexnet-fc8 | 64 |" in md and "GFLOP/s measured" in md
    cpu = json.loads((out / "cpu.json").read_text())
    assert {(p["layer"], p["batch"], p["mode"]) for p in cpu["points"]} == {
        ("alexnet-fc8", b, m) for b in (1, 64) for m in ("dense", "sparse")}
    assert cpu["machine"]["cores"] >= 1 and cpu["peak"]["measured"] > 0


def test_paper_reports_convolutions_beside_section_6(capsys, tmp_path):
    out = tmp_path / "p"
    status, text, err = run(capsys, "paper", "--source", "model", "--layers",
                            "alexnet-fc8,alexnet-conv3", "--batches", "1", "--graphs",
                            "dense,switch,gather,skip", "--scheduler", "serial", "--cache",
                            tmp_path / "c", "--out", out)
    assert status == 0, (text, err)
    recs = json.loads((out / "records.json").read_text())
    conv = [r for r in recs if r["point"]["layer"] == "alexnet-conv3"]
    assert sorted(paper.graph_of(r) for r in conv) == ["dense", "skip", "switch"]
    assert all(r["result"]["conv"].startswith("384 x 256 x 3 x 3") for r in conv)
    md = (out / "report.md").read_text()
    assert "## Convolution layers (the paper's section 6)" in md and paper.CONV_STATEMENT in md
    assert "| alexnet-conv3 | 1 |" in md and "The skip graph changes it" in md
    # The FC statements and figures use the FC layers only.
    assert "| alexnet-conv3 | 1 | dense |" not in md
    rows = paper.conv_summary(recs)
    row = rows[("alexnet-conv3", 1)]
    assert row["weights_share"] == pytest.approx(2 * 384 * 2304 / (2 * 256 * 13 * 13))
    assert row["graphs"]["skip"]["vs_dense"] < 1 < row["graphs"]["switch"]["vs_dense"]
    # The default layers of the RTL source leave the convolutions out (days of simulation).
    status, text, _ = run(capsys, "paper", "--source", "rtl", "--dry-run", "--cache",
                          tmp_path / "c2", "--out", tmp_path / "q")
    assert status == 0 and "alexnet-conv" not in text


@pytest.fixture
def dask_cluster():
    """A one-worker Dask cluster to reach by its scheduler address, as a user's would be."""
    import logging

    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
        yield cluster


def test_sweep_on_a_scheduler_address(capsys, tmp_path, dask_cluster):
    status, out, err = run(capsys, "sweep", *SMALL, "--set", "sim=model", "--grid",
                           "mode=dense,sparse", "--scheduler", dask_cluster.scheduler_address,
                           "--cache", tmp_path / "c", "--out", tmp_path / "o")
    assert status == 0, (out, err)
    assert f"0 cached, 2 to run ({dask_cluster.scheduler_address}" in out
    assert len(_records(tmp_path / "o")) == 2


def test_workers_with_other_source_are_refused(capsys, tmp_path, dask_cluster, monkeypatch):
    # The workers compute the project's own digests; this process pretends to run other code.
    monkeypatch.setattr(cache, "source_digest", lambda sim="verilator", root=None: "0" * 64)
    assert_user_error(capsys, "sweep", *SMALL, "--set", "sim=model", "--scheduler",
                      dask_cluster.scheduler_address, "--cache", tmp_path / "c", "--out",
                      tmp_path / "o", match="the workers run another version of the project")
    assert not list(tmp_path.glob("c/*.json"))


def test_paper_cached_only_reports_what_the_cache_holds(capsys, tmp_path):
    args = ("paper", "--source", "model", "--layers", "alexnet-fc8", "--graphs", "dense,skip",
            "--scheduler", "serial", "--cache", tmp_path / "c")
    status, _, _ = run(capsys, *args, "--batches", "64", "--out", tmp_path / "a")
    assert status == 0
    status, text, err = run(capsys, *args, "--cached-only", "--out", tmp_path / "b")
    assert status == 0, (text, err)
    assert "4 point(s) not in the cache, not run (--cached-only)" in text
    md = (tmp_path / "b" / "report.md").read_text()
    assert "**4 of 6 points are not measured yet**" in md and "alexnet-fc8 batch 1 dense" in md
    assert "| alexnet-fc8 | 64 | skip |" in md
    assert len(list((tmp_path / "c").glob("*.json"))) == 2          # nothing else ran


def test_input_files_by_content(capsys, tmp_path, monkeypatch):
    """A point's --weights path is made absolute (points run elsewhere) and its contents, not
    its name, are in the key: new contents under the same name rerun the point."""
    import numpy as np
    monkeypatch.chdir(tmp_path)
    np.save("W.npy", np.full((4, 16), 0.5, np.float16))
    argv = ["sweep", "--set", "sim=golden", "--set", "weights=W.npy", "--set", "rows=1",
            "--set", "cols=1", "--set", "slots=32", "--scheduler", "serial", "--cache", "c"]
    status, out, err = run(capsys, *argv, "--out", "a")
    assert status == 0 and "0 cached, 1 to run" in out, (out, err)
    rec, = _records(tmp_path / "a").values()
    assert rec["args"][rec["args"].index("--weights") + 1] == str(tmp_path / "W.npy")
    status, out, _ = run(capsys, *argv, "--out", "b")
    assert "1 cached, 0 to run" in out
    np.save("W.npy", np.full((4, 16), 0.25, np.float16))
    status, out, _ = run(capsys, *argv, "--out", "d")
    assert status == 0 and "0 cached, 1 to run" in out
    assert_user_error(capsys, "sweep", "--set", "sim=golden", "--set", "weights=none.npy",
                      "--out", "e", match="none.npy: cannot read")


def test_paper_summary_by_hand():
    """The statements' figures on made-up records: gaps, bandwidth ratios, spread, mean."""
    def rec(layer, batch, graph, util, bw):
        point = dict(layer=layer, batch=batch, mode="dense" if graph == "dense" else "sparse")
        if graph != "dense":
            point["sparse-graph"] = graph
        return dict(point=point, result=dict(N=batch, issue_utilization=util,
                                             peak_bandwidth=bw))
    recs = []
    for layer, d64, s64 in (("alexnet-fc6", 0.96, 0.80), ("alexnet-fc8", 0.90, 0.86)):
        recs += [rec(layer, 4, "dense", 0.50, 60.0), rec(layer, 4, "switch", 0.46, 10.0),
                 rec(layer, 64, "dense", d64, 20.0), rec(layer, 64, "switch", s64, 5.0)]
    s = paper.summary(recs)
    assert s["small_batch_gap"]["switch"] == pytest.approx(0.04)
    assert s["batch64_gap"]["switch"] == pytest.approx((0.16 + 0.04) / 2)
    assert s["bandwidth_ratio"]["switch"] == pytest.approx((4.0, 6.0))
    assert s["across_sparsity"]["switch"] == pytest.approx(0.06)       # 0.86 - 0.80 at 64
    assert s["vs_cpu_gpu"]["switch"] == pytest.approx(0.83)
    one = [rec("alexnet-fc8", 1, "dense", 0.48, 60.0)]
    assert paper.summary(one)["small_batch_gap"] == {}                  # no sparse point


def test_a_point_file_whose_name_is_not_utf8(capsys, tmp_path):
    # A file name that is not UTF-8 (bytes 0xff) goes through the key, the subprocess, the
    # record and the table as the bytes it is: a result, not a UnicodeError.
    raw = os.fsencode(tmp_path) + b"/w\xff.npy"
    with open(raw, "wb") as f:
        np.save(f, np.ones((8, 32), dtype=np.float16))
    name = os.fsdecode(raw)
    out = tmp_path / "o"
    status, _, err = run(capsys, "sweep", "--set", f"weights={name}", "--set", "batch=1",
                         "--set", "sim=model", "--scheduler", "serial", "--out", out,
                         "--cache", tmp_path / "c")
    assert status == 0, err
    assert b"w\xff.npy" in (out / "table.csv").read_bytes()


def test_cpu_measures_fdpus_useful_work():
    # The host's time on a layer counts FDPU's useful operations (2 K C N dense, 2 nnz N
    # sparse); the measured peak is at least every dense rate seen, so no utilization of a
    # dense product exceeds 1.
    from sw.compiler import layers
    from sw.sweep import cpu
    got = cpu.measure_points(["alexnet-fc8"], [4], repeats=1)
    spec = layers.get_layer("alexnet-fc8")
    dense, sp = got["points"]
    assert (dense["mode"], sp["mode"]) == ("dense", "sparse")
    assert dense["useful_flops"] == 2 * spec.weights * 4
    w = layers.make_weights(spec)
    assert sp["useful_flops"] == 2 * int(np.count_nonzero(w)) * 4
    for p in got["points"]:
        assert p["utilization"] == pytest.approx(p["flops_per_s"] / got["peak"]["measured"])
    assert dense["utilization"] <= 1
    assert "2048 x 2048 x 2048" in got["peak"]["measured_how"]
    assert got["machine"]["blas"] and got["date"]
