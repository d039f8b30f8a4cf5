"""Magnitude pruning to a target density (the pruning step of Deep Compression).

Contract
--------
:func:`prune` keeps the ``k = round(density * w.size)`` elements of largest magnitude ``|w|``
of one layer (the whole array, not per row) and sets every other element to +0.0.

* ``round`` is Python's: half to even (``density * size`` is a float; e.g. 0.5 * 5 -> 2).
* Ties at the threshold magnitude are broken by position: among equal magnitudes the elements
  earlier in row-major (C) order are kept.  The result is therefore a pure function of the
  input, independent of numpy's selection algorithm.
* Magnitudes are compared exactly: ``|w|`` of an IEEE float orders like its bit pattern with the
  sign bit cleared, read as an unsigned integer, which is what is partitioned.  -0.0 and +0.0
  have magnitude 0.
* The result has the input's dtype and shape; kept elements are bit-identical to the input.
  If the array has fewer than ``k`` non-zero elements, all of them are kept (the other kept
  slots hold zeros).
* ``density`` must be a real number in [0, 1]; the weights a non-empty real floating-point array
  without NaN (infinities are allowed and have the largest magnitude).

Cost: one O(n) ``np.partition`` of an unsigned-integer key array; a 4096 x 25088 layer prunes
in about a second.
"""

import numbers

import numpy as np

from sw.spec.errors import FdpuError

__all__ = ["check_density", "keep_count", "prune"]

_KEY = {2: (np.uint16, 0x7FFF), 4: (np.uint32, 0x7FFF_FFFF), 8: (np.uint64, 0x7FFF_FFFF_FFFF_FFFF)}


def check_density(density, name="density"):
    """Return ``density`` as a float after checking it is a real number in [0, 1].

    Raises
    ------
    FdpuError
        If it is not a real number or lies outside [0, 1] (NaN included).
    """
    if isinstance(density, bool) or not isinstance(density, numbers.Real):
        raise FdpuError(f"{name} must be a number in [0, 1], got {density!r}")
    d = float(density)
    if not 0.0 <= d <= 1.0:
        raise FdpuError(f"{name} must be in [0, 1], got {density!r}")
    return d


def keep_count(density, size):
    """Return how many elements :func:`prune` keeps: ``round(density * size)``."""
    return int(round(check_density(density) * size))


def prune(weights, density):
    """Keep the ``round(density * size)`` largest-magnitude weights, zero the rest.

    Parameters
    ----------
    weights : numpy.ndarray
        A non-empty real floating-point array (float16, float32 or float64) without NaN.
    density : float
        Fraction of the elements to keep, in [0, 1].

    Returns
    -------
    numpy.ndarray
        A new array of the same dtype and shape; ties at the threshold keep the elements
        earlier in row-major order.

    Raises
    ------
    FdpuError
        For a density outside [0, 1], a non-float or empty array, or NaN weights.
    """
    density = check_density(density)
    w = np.asarray(weights)
    if not np.issubdtype(w.dtype, np.floating) or w.dtype.itemsize not in _KEY:
        raise FdpuError(f"weights to prune must be float16, float32 or float64, got {w.dtype}")
    if w.size == 0:
        raise FdpuError(f"weights to prune must not be empty, got shape {w.shape}")
    key_dtype, magnitude_mask = _KEY[w.dtype.itemsize]
    k = int(round(density * w.size))
    flat = np.ascontiguousarray(w).reshape(-1)
    if np.isnan(flat).any():
        raise FdpuError("weights to prune contain NaN; magnitude pruning needs real numbers")
    if k == flat.size:
        return w.copy()
    out = np.zeros(flat.size, dtype=w.dtype)
    if k == 0:
        return out.reshape(w.shape)
    key = flat.view(key_dtype) & key_dtype(magnitude_mask)
    threshold = np.partition(key, flat.size - k)[flat.size - k]
    keep = key > threshold
    short = k - int(np.count_nonzero(keep))
    # The k-th largest key is `threshold`, so at least `short` elements equal it: keep the
    # first ones in row-major order.
    ties = np.flatnonzero(key == threshold)[:short]
    keep[ties] = True
    out[keep] = flat[keep]
    return out.reshape(w.shape)
