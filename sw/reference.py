"""The float64 reference of an FC layer and the error bound the golden model must meet.

Contract
--------
:func:`reference` returns ``Y = X @ W.T`` in float64 from the binary16 inputs (exact values).
:func:`error_bound` returns, per output, a bound on ``|Y16 - Y|`` for *any* evaluation that
accumulates the ``n`` products one fused multiply-add at a time in binary16 (the FC graphs'
order, ``docs/golden.md``):

    ``|err| <= gamma(n) * sum_c |W[k][c] * X[n][c]| + n * 2**-25``,
    ``gamma(n) = n * u / (1 - n * u)``, ``u = 2**-11``

Each FMA adds one rounding error, relative ``u`` of the running sum while normal (the
standard recursive-summation argument, Higham, *Accuracy and Stability of Numerical
Algorithms*, section 4.2, with the products exact inside the FMA), and at most half a
subnormal spacing, ``2**-25``, absolute when the sum is subnormal.  The bound is infinite when
``n * u >= 1`` (no guarantee) and does not cover overflow: an output beyond the binary16 range
(|Y| > 65504) is reported as not matching.  :func:`check` applies the bound.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["U", "reference", "error_bound", "Check", "check"]

#: Unit roundoff of binary16.
U = 2.0 ** -11
_SUB = 2.0 ** -25


def reference(weights, inputs):
    """Return the float64 ``N x K`` product ``inputs @ weights.T``."""
    w = np.asarray(weights, dtype=np.float16).astype(np.float64)
    x = np.asarray(inputs, dtype=np.float16).astype(np.float64)
    return x @ w.T


def error_bound(weights, inputs, terms=None):
    """Return the ``N x K`` bound of the module doc (``terms`` defaults to ``C``)."""
    w = np.abs(np.asarray(weights, dtype=np.float16).astype(np.float64))
    x = np.abs(np.asarray(inputs, dtype=np.float16).astype(np.float64))
    n = w.shape[1] if terms is None else terms
    if n * U >= 1:
        return np.full((x.shape[0], w.shape[0]), np.inf)
    gamma = n * U / (1 - n * U)
    return gamma * (x @ w.T) + n * _SUB


@dataclass
class Check:
    """The outcome of :func:`check`."""
    holds: bool
    max_error: float
    max_bound: float
    worst_ratio: float
    failures: int

    def as_dict(self):
        """Return a JSON-friendly dict."""
        return dict(holds=self.holds, max_error=self.max_error, max_bound=self.max_bound,
                    worst_ratio=self.worst_ratio, failures=self.failures)


def check(result, weights, inputs, terms=None):
    """Compare a binary16 ``N x K`` ``result`` with :func:`reference` within :func:`error_bound`.

    ``terms`` is the number of FMA steps per output (default ``C``; sparse graphs also step
    through the padding columns, which add exact zeros).
    """
    y = np.asarray(result, dtype=np.float16).astype(np.float64)
    ref = reference(weights, inputs)
    bound = error_bound(weights, inputs, terms)
    with np.errstate(invalid="ignore"):
        err = np.abs(y - ref)
        bad = ~(err <= bound)
        ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1), np.where(err > 0,
                                                                                 np.inf, 0))
    return Check(not bad.any(), float(np.nanmax(err)) if err.size else 0.0,
                 float(bound.max()) if bound.size else 0.0,
                 float(np.nanmax(ratio)) if ratio.size else 0.0, int(bad.sum()))
