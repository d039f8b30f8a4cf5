"""The sparse graphs' bound (scripts/sparse_bound.py, docs/dataflow.md): its count of the skip
graph's Dbuf requests is the golden model's, and the reuse and broadcast counts follow the
masks."""

import numpy as np
import pytest

from scriptutil import load_script
from sw.spec.arch import ArrayParams

P22 = ArrayParams(rows=2, cols=2, slots=128, operand_depth=2, int_issue=2, dbuf_bytes=1 << 16)


@pytest.mark.parametrize("batch, density", [(64, 0.25), (4, 0.09), (24, 0.5)])
def test_the_skip_count_is_the_golden_models(batch, density):
    sb = load_script("sparse_bound")
    w, mask, plan = sb.masks_and_plan((48, 160), density, batch, P22, seed=3)
    lane_groups = -(-batch // P22.LANES)
    req, facc = sb.requests(mask, plan.rows, 1, plan.gb, lane_groups)
    greq, gfacc = sb.golden_requests(plan, w, batch)
    assert facc == gfacc == int(mask.sum()) * lane_groups
    # The golden count holds the descriptors' loads besides (a few per context).
    assert req <= greq <= req * 1.03, (req, greq)


def test_reuse_loads_an_input_once_per_group_of_rows():
    sb = load_script("sparse_bound")
    rng = np.random.default_rng(7)
    mask = rng.random((16, 64)) < 0.3
    order = tuple(range(16))
    assert sb.union_columns(mask, order, 1) == mask.sum()
    assert sb.union_columns(mask, order, 16) == np.count_nonzero(mask.any(axis=0))
    same = np.tile(mask[:1], (16, 1))                  # every row stores the same columns
    assert sb.union_columns(same, order, 4) == 4 * mask[0].sum()
    # Padding rows (index >= K) are left out.
    assert sb.union_columns(mask, order + (16, 17), 1) == mask.sum()
    skip, facc = sb.requests(mask, order, 1, 4, 4)
    reuse, facc4 = sb.requests(mask, order, 4, 4, 4)
    bcast, _ = sb.requests(mask, order, 4, 4, 4, broadcast=True)
    assert facc == facc4 == mask.sum() * 4
    assert bcast < reuse < skip


def test_broadcast_is_bound_by_the_engines_input_port():
    sb = load_script("sparse_bound")
    mask = np.zeros((32, 100), bool)
    mask[:, :10] = True                                # density 0.1
    rows = sb.rows_for(mask, tuple(range(32)), 0.1, 16, P22, 0.96)
    by = {name: rate for name, _, rate, _ in rows}
    assert by["broadcast 4 x 8"] == pytest.approx(0.4)
    assert by["broadcast 8 x 4"] == pytest.approx(0.8)


def test_the_shapes_kept_fit_the_slots():
    # A FACC and its store per row and lane group: 4 x 16 does not fit 128 slots, 4 x 8 does;
    # each row count keeps its widest lane-group count that fits.
    sb = load_script("sparse_bound")
    assert sb.engine_slots(1, 16) <= 128 < sb.engine_slots(4, 16)
    assert sb.engine_slots(4, 8) <= 128 < sb.engine_slots(8, 8)
    mask = np.ones((32, 64), bool)
    names = [name for name, *_ in sb.rows_for(mask, tuple(range(32)), 1.0, 16, P22, 0.96)]
    assert names == ["skip 1 x 16", "reuse 2 x 8", "broadcast 2 x 8", "reuse 4 x 8",
                     "broadcast 4 x 8", "reuse 8 x 4", "broadcast 8 x 4", "reuse 16 x 1",
                     "broadcast 16 x 1"]


@pytest.mark.parametrize("argv, message", [
    (["--density", "2"], "--density 2.0: must be in (0, 1]"),
    (["--batch", "0"], "--batch 0: must be at least 1"),
    (["--batch", "8"], "--batch 8: no measured dense rate at 2 lane groups"),
    (["--in-features", "64"], "--in-features and --out-features go together"),
])
def test_bad_arguments_are_refused_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        load_script("sparse_bound").main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_the_table_of_a_random_layer(capsys):
    load_script("sparse_bound").main(["--in-features", "96", "--out-features", "40", "--batch",
                                      "64", "--density", "0.25", "--no-golden"])
    out = capsys.readouterr().out
    assert "40x96, batch 64 (16 lane groups)" in out
    assert "skip 1 x 16" in out and "reuse 8 x 4" in out and "broadcast 16 x 1" in out
