"""Property-based fuzzing of what users hand the project as files and addresses: ONNX models
(a valid model's bytes mutated), sweep TOML files, sweep grids, cached records and scheduler
addresses.  Every example ends in a result or in one ``fdpu: error:`` line with exit status 2
(for a cached record: a sound record or a miss with its problem), never a traceback or a
hang, and a refused command writes no file.  ``-m slow`` runs many more examples.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cliutil import call
from sw.sweep import cache

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))


def _call(argv, capsys):
    """Run ``fdpu argv``; return ``(status, stderr)``, failing on any exception."""
    return call(capsys, *argv)


def _one_line_or_result(status, err, what):
    assert status in (0, 1, 2), (status, what, err)
    if status == 2:
        assert err.startswith("fdpu: error: ") and err.count("\n") == 1, (what, err)
    assert "Traceback" not in err, (what, err)


def _model_bytes():
    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), "W")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "B")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "B"], ["h"], transB=1),
                           helper.make_node("Relu", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
                          [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


MODEL = _model_bytes()

#: A mutation of the model's bytes: positions and new bytes, or a cut.
MUTATIONS = st.lists(st.tuples(st.integers(0, len(MODEL) - 1), st.integers(0, 255)),
                     min_size=1, max_size=6)


def _mutated(edits, cut):
    data = bytearray(MODEL)
    for at, value in edits:
        data[at] = value
    return bytes(data[:cut]) if cut else bytes(data)


def _onnx_case(tmp_path, capsys, edits, cut):
    path = tmp_path / "m.onnx"
    path.write_bytes(_mutated(edits, cut))
    out = tmp_path / "y.npy"
    out.unlink(missing_ok=True)
    status, err = _call(["net", path, "--batch", 2, "--out", out], capsys)
    _one_line_or_result(status, err, (edits, cut))
    if status == 2:
        assert not out.exists()


@FAST
@given(edits=MUTATIONS, cut=st.one_of(st.none(), st.integers(1, len(MODEL))))
def test_mutated_onnx(tmp_path_factory, capsys, edits, cut):
    _onnx_case(tmp_path_factory.mktemp("onnx"), capsys, edits, cut)


@pytest.mark.slow
@SLOW
@given(edits=MUTATIONS, cut=st.one_of(st.none(), st.integers(1, len(MODEL))))
def test_mutated_onnx_long(tmp_path_factory, capsys, edits, cut):
    _onnx_case(tmp_path_factory.mktemp("onnx"), capsys, edits, cut)


#: TOML-ish text: tables, keys, values of every kind, nesting and garbage.
TOML = st.lists(st.one_of(
    st.sampled_from(["[grid]", "[fixed]", "[[point]]", "[other]", "batch = [1, 4]",
                     "batch = 1", "in-features = 32", "out-features = 8", "sim = 'model'",
                     "mode = ['dense', 'sparse']", "weights = '/dev/zero'", "x = {a = 1}",
                     "batch = []", "batch = [[[[1]]]]", "density = nan", "= 1", "[grid",
                     "seed = 99999999999999999999", "sim = 'verilator'"]),
    st.text(max_size=20)), max_size=8).map("\n".join)


def _toml_case(tmp_path, capsys, text):
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    out = tmp_path / "o"
    status, err = _call(["sweep", "--file", path, "--dry-run", "--out", out, "--cache",
                         tmp_path / "c"], capsys)
    _one_line_or_result(status, err, text)
    assert not out.exists()                         # a dry run writes nothing


@FAST
@given(text=TOML)
def test_sweep_files(tmp_path_factory, capsys, text):
    _toml_case(tmp_path_factory.mktemp("toml"), capsys, text)


@FAST
@given(grid=st.lists(st.tuples(st.sampled_from(["batch", "seed", "density", "rows", "mode",
                                                "nope", "in-features", "sim"]),
                               st.lists(st.sampled_from(["1", "4", "0", "-1", "x", "0.5",
                                                         "dense", "model", "1e9", ""]),
                                        min_size=1, max_size=4)),
                     max_size=4))
def test_sweep_grids(tmp_path_factory, capsys, grid):
    tmp = tmp_path_factory.mktemp("grid")
    argv = ["sweep", "--set", "out-features=8", "--dry-run", "--out", tmp / "o", "--cache",
            tmp / "c"]
    for name, values in grid:
        argv += ["--grid", f"{name}={','.join(values)}"]
    status, err = _call(argv, capsys)
    _one_line_or_result(status, err, grid)


def _record(k):
    return dict(key=k, name="batch=1", point={"batch": 1}, args=["--batch", "1"], sim="model",
                status=0, result={"cycles": 210_976, "match": True}, wall={"point_s": 1.5},
                command="fdpu run --batch 1", tools={}, source="a" * 64)


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(
    allow_nan=False, allow_infinity=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10)


@FAST
@given(field=st.sampled_from(sorted(cache.RECORD_FIELDS) + ["result", "wall"]), value=JSON,
       raw=st.one_of(st.none(), st.binary(max_size=40)))
def test_cache_records(tmp_path_factory, field, value, raw):
    # Whatever a record file holds, the store returns a sound record or a miss with its
    # problem: it never raises, and an edited record is never returned.
    store = cache.Store(tmp_path_factory.mktemp("cache"))
    store.put("k", _record("k"))
    rec = json.loads(store.path("k").read_text())
    rec[field] = value
    if raw is None:
        store.path("k").write_text(json.dumps(rec))
    else:
        store.path("k").write_bytes(raw)
    got = store.get("k")
    if got is None:
        assert store.problems["k"]
    else:
        assert got == rec and cache.record_problem(got, "k") is None


@FAST
@given(address=st.one_of(
    st.text(max_size=30),
    st.builds(lambda s, h, p: f"{s}://{h}:{p}", st.sampled_from(["tcp", "tls", "ucx", "inproc",
                                                                  "ws", "http", ""]),
              st.sampled_from(["a", "1.2.3", "", "[::1]", "x y"]),
              st.one_of(st.integers(-5, 70000).map(str), st.sampled_from(["", "b"])))))
def test_scheduler_addresses(tmp_path_factory, capsys, address):
    # Addresses are checked before any connection: none is made here (a refused address
    # is one line; one that passes the check is not tried, --dry-run runs nothing).
    tmp = tmp_path_factory.mktemp("sched")
    status, err = _call(["sweep", "--set", "in-features=32", "--set", "out-features=8",
                         "--scheduler", address, "--dry-run", "--out", tmp / "o", "--cache",
                         tmp / "c"], capsys)
    _one_line_or_result(status, err, address)
