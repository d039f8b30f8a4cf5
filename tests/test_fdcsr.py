"""Tests of the FD-CSR format (sw/compiler/fdcsr.py): round trips, the paper's example, the offset
and padding rules, every corruption class, byte accounting, SciPy and .npz files."""

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.compiler import fdcsr
from sw.spec.errors import FdpuError


def bits(a):
    return np.asarray(a).view(np.uint16)


def random_half(rng, shape, density):
    """Return float16 data with arbitrary bit patterns (NaN, inf, subnormals) at `density`,
    +0.0 elsewhere; never -0.0, which FD-CSR does not store (docs/fdcsr.md "What is zero";
    test_zero_definition_both_zeros_keeps_nan_inf)."""
    raw = rng.integers(1, 1 << 16, size=shape, dtype=np.uint16)
    raw[raw == 0x8000] = 0x8001
    raw[rng.random(shape) >= density] = 0
    return raw.view(np.float16)


shapes = st.one_of(
    st.tuples(st.integers(1, 70)),
    st.tuples(st.integers(1, 6), st.integers(1, 70)),
)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, density=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
       seed=st.integers(0, 2**32 - 1))
def test_round_trip_is_bit_exact(shape, density, seed):
    print("seed", seed)
    x = random_half(np.random.default_rng(seed), shape, density)
    enc = fdcsr.encode(x)
    c = shape[-1]
    k = 1 if len(shape) == 1 else shape[0]
    assert enc.shape == shape
    assert enc.rows_per_weight_row == -(-c // 16)
    assert enc.colidx.size == enc.rowoff.size == k * enc.rows_per_weight_row
    assert enc.nnz == np.count_nonzero(bits(x))
    out = enc.decode()
    assert out.dtype == np.float16 and out.shape == shape
    assert np.array_equal(bits(out), bits(x))
    # Values are the non-+0.0 elements in row-major order.
    assert np.array_equal(bits(enc.values), bits(x).ravel()[bits(x).ravel() != 0])


def test_paper_example_6339():
    x = np.zeros(16, dtype=np.float16)
    set_bits = [i for i in range(16) if (6339 >> i) & 1]
    assert set_bits == [0, 1, 6, 7, 11, 12]
    x[set_bits] = np.arange(1, 7)
    enc = fdcsr.encode(x)
    assert enc.colidx.dtype == np.uint16 and enc.colidx.tolist() == [6339]
    assert enc.rowoff.dtype == np.uint32 and enc.rowoff.tolist() == [0]
    assert enc.values.dtype == np.float16 and enc.values.tolist() == [1, 2, 3, 4, 5, 6]


def test_all_zero_row_gets_offset_of_next_nonzero():
    x = np.zeros(64, dtype=np.float16)
    x[[0, 5, 15]] = 1          # row 0: 3 non-zeros
    x[[33, 40]] = 2            # row 1 all zero, row 2: 2 non-zeros, row 3 all zero
    enc = fdcsr.encode(x)
    assert enc.rowoff.tolist() == [0, 3, 3, 5]
    assert enc.colidx.tolist() == [(1 << 0) | (1 << 5) | (1 << 15), 0, (1 << 1) | (1 << 8), 0]
    assert enc.nnz == 5


def test_each_weight_row_is_padded_to_16():
    x = np.arange(1, 3 * 20 + 1, dtype=np.float16).reshape(3, 20)
    enc = fdcsr.encode(x)
    assert enc.rows_per_weight_row == 2 and enc.rows == 6
    assert enc.colidx.tolist() == [0xFFFF, 0x000F] * 3
    assert enc.rowoff.tolist() == [0, 16, 20, 36, 40, 56]


def test_zero_definition_both_zeros_keeps_nan_inf():
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 6e-8, 0.0], dtype=np.float16)
    x_bits = bits(x).copy()
    x_bits[2] = 0x7C01         # a signalling-NaN payload must survive too
    x = x_bits.view(np.float16)
    enc = fdcsr.encode(x)
    assert enc.colidx.tolist() == [0b0111100]           # -0.0 is a zero: not stored
    x_bits[1] = 0                                       # ... and decodes as +0.0
    assert np.array_equal(bits(enc.decode()), x_bits)


def test_other_floats_cast_to_float16_round_to_nearest_even():
    one = 1.0
    x = np.array([one + 2**-11, one + 3 * 2**-11, 1e-9, 1e6, -1e-9], dtype=np.float64)
    enc = fdcsr.encode(x)
    out = enc.decode()
    assert out.tolist()[:2] == [1.0, 1.0 + 2**-9]   # ties to even
    assert bits(out)[2] == 0 and bits(out)[4] == 0   # underflow to +0 / -0: both dropped
    assert np.isinf(out[3])
    assert enc.nnz == 3
    assert np.array_equal(bits(fdcsr.encode(x.astype(np.float32)).decode()), bits(out))


@pytest.mark.parametrize("bad, what", [
    (np.arange(16), "dtype"),
    (np.ones(16, dtype=bool), "dtype"),
    (np.ones(16, dtype=np.complex64), "dtype"),
    (np.array([1.0, None], dtype=object), "dtype"),
    (np.float16(1.0), "0-D"),
    (np.ones((2, 2, 16), dtype=np.float16), "3-D"),
    (np.ones((0,), dtype=np.float16), "empty"),
    (np.ones((3, 0), dtype=np.float16), "empty"),
])
def test_encode_rejects_bad_input(bad, what):
    with pytest.raises(FdpuError, match=what):
        fdcsr.encode(bad)


def good():
    x = np.zeros((2, 20), dtype=np.float16)
    x[0, [0, 3, 17]] = 1
    x[1, [2, 4, 5, 19]] = 2
    enc = fdcsr.encode(x)
    assert enc.rowoff.tolist() == [0, 2, 3, 6]
    return enc.values.copy(), enc.colidx.copy(), enc.rowoff.copy(), enc.shape


def test_corruption_wrong_dtype():
    v, c, r, s = good()
    with pytest.raises(FdpuError, match="values must have dtype float16, got float32"):
        fdcsr.FDCSR(v.astype(np.float32), c, r, s)
    with pytest.raises(FdpuError, match="colidx must have dtype uint16, got int16"):
        fdcsr.FDCSR(v, c.astype(np.int16), r, s)
    with pytest.raises(FdpuError, match="rowoff must have dtype uint32, got uint64"):
        fdcsr.FDCSR(v, c, r.astype(np.uint64), s)
    with pytest.raises(FdpuError, match="values must be a numpy array"):
        fdcsr.FDCSR(v.tolist(), c, r, s)
    with pytest.raises(FdpuError, match="colidx must be 1-D, got 2-D"):
        fdcsr.FDCSR(v, c.reshape(2, 2), r, s)


def test_corruption_wrong_lengths_for_shape():
    v, c, r, s = good()
    with pytest.raises(FdpuError, match=r"colidx has 3 entries but shape \(2, 20\) needs 4"):
        fdcsr.FDCSR(v, c[:3], r, s)
    with pytest.raises(FdpuError, match=r"rowoff has 4 entries but shape \(2, 40\) needs 6"):
        fdcsr.FDCSR(v, np.zeros(6, np.uint16), r, (2, 40))
    for shape in [(2, 20, 1), (0, 20), (), "ab", (2.5, 3)]:
        with pytest.raises(FdpuError, match="shape must be"):
            fdcsr.FDCSR(v, c, r, shape)


def test_corruption_padding_bits():
    v, c, r, s = good()
    c[3] |= np.uint16(1 << 4)      # column 20 of weight row 1 does not exist
    with pytest.raises(FdpuError, match=r"colidx\[3\] = 0x0018 sets padding bits past column "
                                        r"C = 20.*0x000f"):
        fdcsr.FDCSR(v, c, r, s)


def test_corruption_offsets_and_popcounts():
    v, c, r, s = good()
    r2 = r.copy()
    r2[2] += 1
    with pytest.raises(FdpuError, match=r"rowoff\[2\] = 4 but rowoff\[1\] \+ "
                                        r"popcount\(colidx\[1\]\) = 3"):
        fdcsr.FDCSR(v, c, r2, s)
    r3 = r.copy()
    r3[0] = 1
    with pytest.raises(FdpuError, match=r"rowoff\[0\] = 1"):
        fdcsr.FDCSR(v, c, r3, s)
    c2 = c.copy()
    c2[0] |= np.uint16(1 << 9)
    with pytest.raises(FdpuError, match=r"rowoff\[1\] = 2 but rowoff\[0\] \+ "
                                        r"popcount\(colidx\[0\]\) = 3"):
        fdcsr.FDCSR(v, c2, r, s)
    with pytest.raises(FdpuError, match=r"len\(values\) = 6 but rowoff\[3\] \+ "
                                        r"popcount\(colidx\[3\]\) = 7"):
        fdcsr.FDCSR(v[:-1], c, r, s)


def test_corruption_stored_zero():
    v, c, r, s = good()
    v[4] = 0.0
    with pytest.raises(FdpuError, match=r"values\[4\] is a zero \(0x0000\)"):
        fdcsr.FDCSR(v, c, r, s)
    v[4] = -0.0
    with pytest.raises(FdpuError, match=r"values\[4\] is a zero \(0x8000\)"):
        fdcsr.FDCSR(v, c, r, s)


def test_stats_byte_accounting():
    x = np.zeros((3, 40), dtype=np.float16)
    x[:, ::4] = 1
    s = fdcsr.encode(x).stats()
    assert s.shape == (3, 40) and s.rows == 9 and s.elements == 120
    assert s.nnz == 30 and s.density == pytest.approx(0.25)
    assert (s.values_bytes, s.colidx_bytes, s.rowoff_bytes) == (60, 18, 36)
    assert s.total_bytes == 114 and s.dense_bytes == 240
    assert s.ratio == pytest.approx(114 / 240) and s.compression == pytest.approx(240 / 114)
    assert s.as_dict()["shape"] == [3, 40]


def test_to_scipy_and_back():
    rng = np.random.default_rng(7)
    x = random_half(rng, (5, 37), 0.3)
    x_bits = bits(x)
    x_bits[np.isnan(x)] = 0x7E00     # canonical NaN: SciPy round trips it exactly
    enc = fdcsr.encode(x)
    m = enc.to_scipy()
    assert isinstance(m, scipy.sparse.csr_array)
    assert m.dtype == np.float32 and m.shape == (5, 37) and m.nnz == enc.nnz
    coo = m.tocoo()
    assert np.array_equal(bits(coo.data.astype(np.float16)), bits(x)[coo.row, coo.col])
    assert np.count_nonzero(bits(x)[coo.row, coo.col]) == enc.nnz
    assert fdcsr.from_scipy(m) == enc
    assert fdcsr.from_scipy(scipy.sparse.csr_matrix(m)) == enc


def test_to_scipy_one_dimensional_is_one_row():
    x = np.array([0, 1, 0, 2], dtype=np.float16)
    m = fdcsr.encode(x).to_scipy()
    assert m.shape == (1, 4) and m.toarray().tolist() == [[0, 1, 0, 2]]


def test_from_scipy_sums_duplicates_and_drops_zero_entries():
    m = scipy.sparse.coo_array(([1.0, 2.0, 0.0, -0.0, 1e-12], ([0, 0, 1, 1, 1], [3, 3, 0, 1, 2])),
                               shape=(2, 17))
    enc = fdcsr.from_scipy(m)
    d = enc.decode()
    assert d[0, 3] == 3.0 and enc.nnz == 1 and bits(d)[1, 1] == 0     # -0.0 is not stored


@pytest.mark.parametrize("bad, what", [
    (np.eye(3), "scipy.sparse"),
    (scipy.sparse.csr_array(np.eye(3, dtype=np.int64)), "floating-point dtype"),
    (scipy.sparse.csr_array((0, 5), dtype=np.float32), "empty"),
])
def test_from_scipy_rejects(bad, what):
    with pytest.raises(FdpuError, match=what):
        fdcsr.from_scipy(bad)


def test_save_load_round_trip(tmp_path):
    x = random_half(np.random.default_rng(3), (4, 33), 0.4)
    enc = fdcsr.encode(x)
    path = tmp_path / "w.fdcsr"          # no suffix is added to the given name
    enc.save(path)
    back = fdcsr.load(path)
    assert back == enc and back.values.dtype == np.float16
    assert np.array_equal(bits(back.decode()), bits(x))
    with np.load(path) as npz:
        assert set(npz.files) == {"values", "colidx", "rowoff", "shape", "format"}
        assert str(npz["format"]) == fdcsr.FORMAT_TAG


def test_load_rejects_foreign_files(tmp_path):
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.zeros(3))
    with pytest.raises(FdpuError, match="missing member.*values, colidx, rowoff, shape, format"):
        fdcsr.load(foreign)
    enc = fdcsr.encode(np.ones(16, dtype=np.float16))
    tagged = tmp_path / "tag.npz"
    np.savez(tagged, values=enc.values, colidx=enc.colidx, rowoff=enc.rowoff,
             shape=np.array([16]), format=np.array("other-v9"))
    with pytest.raises(FdpuError, match="format tag.*fdpu-fdcsr-v1"):
        fdcsr.load(tagged)
    corrupt = tmp_path / "corrupt.npz"
    np.savez(corrupt, values=enc.values[:3], colidx=enc.colidx, rowoff=enc.rowoff,
             shape=np.array([16]), format=np.array(fdcsr.FORMAT_TAG))
    with pytest.raises(FdpuError, match=r"corrupt.npz: FD-CSR len\(values\) = 3"):
        fdcsr.load(corrupt)
    plain = tmp_path / "plain.npy"
    np.save(plain, np.zeros(3))
    with pytest.raises(FdpuError, match="not an FD-CSR .npz file"):
        fdcsr.load(plain)
    with pytest.raises(FileNotFoundError):
        fdcsr.load(tmp_path / "missing.npz")
