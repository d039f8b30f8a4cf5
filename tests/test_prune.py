"""Tests of magnitude pruning (sw/compiler/prune.py): exact kept count, largest magnitudes kept,
deterministic ties, dtype and bit preservation, and input validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.compiler.prune import keep_count, prune
from sw.spec.errors import FdpuError


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 40)),
       density=st.floats(0, 1), dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_keeps_exactly_the_largest(shape, density, dtype, seed):
    print("seed", seed)
    w = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    w[w == 0] = 1                                   # no zeros: every kept slot is visible
    out = prune(w, density)
    k = round(density * w.size)
    assert out.dtype == w.dtype and out.shape == w.shape
    kept = out != 0
    assert np.count_nonzero(kept) == k
    assert np.array_equal(out[kept].view(np.uint8), w[kept].view(np.uint8))
    if 0 < k < w.size:
        assert np.abs(w[kept]).min() >= np.abs(w[~kept]).max()


def test_ties_keep_earlier_elements_in_row_major_order():
    w = np.array([[1.0, -1.0, 1.0], [-1.0, 1.0, 0.5]], dtype=np.float32)
    out = prune(w, 0.5)
    assert out.tolist() == [[1.0, -1.0, 1.0], [0.0, 0.0, 0.0]]
    w = np.array([0.5, 2.0, -1.0, 1.0, 1.0, -2.0], dtype=np.float16)
    assert prune(w, 4 / 6).tolist() == [0.0, 2.0, -1.0, 1.0, 0.0, -2.0]


def test_edges_zero_and_one():
    w = np.array([[3.0, -0.0], [np.inf, -2.0]])
    zero = prune(w, 0)
    assert zero.tolist() == [[0, 0], [0, 0]] and not np.signbit(zero).any()
    full = prune(w, 1)
    assert full is not w and np.array_equal(full.view(np.uint64), w.view(np.uint64))
    assert prune(w, 0.25).tolist() == [[0, 0], [np.inf, 0]]   # inf is the largest magnitude


def test_fewer_nonzeros_than_kept_slots():
    w = np.array([0.0, 5.0, 0.0, -1.0], dtype=np.float32)
    assert prune(w, 0.75).tolist() == [0.0, 5.0, 0.0, -1.0]


def test_keep_count_rounds_half_to_even():
    assert keep_count(0.5, 5) == 2 and keep_count(0.5, 7) == 4
    assert keep_count(0.09, 100) == 9 and keep_count(0.04, 4096 * 25088) == 4110418


@pytest.mark.parametrize("density", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_rejects_bad_density(density):
    with pytest.raises(FdpuError, match="density must be"):
        prune(np.ones(4, dtype=np.float32), density)


@pytest.mark.parametrize("w, what", [
    (np.ones(4, dtype=np.int32), "float16, float32 or float64"),
    (np.ones(4, dtype=np.complex64), "float16, float32 or float64"),
    (np.ones(0, dtype=np.float32), "empty"),
    (np.array([1.0, np.nan]), "NaN"),
])
def test_rejects_bad_weights(w, what):
    with pytest.raises(FdpuError, match=what):
        prune(w, 0.5)
