"""The float64 reference of an FC layer and the error bound the golden model must meet.

Contract
--------
:func:`reference` returns ``Y = X @ W.T`` in float64 from the binary16 inputs (exact values).
:func:`error_bound` returns, per output, a bound on ``|Y16 - Y|`` for the FC graphs'
accumulation order (``docs/golden.md``): ``acc = fma(W[k][c], X[n][c], acc)`` for
``c = 0, 1, ..., C-1``, one rounding per step.  With ``s_c`` the exact partial sums, step ``c``
rounds ``acc_{c-1} + p_c`` (the product is exact inside the FMA), whose magnitude is at most
``|s_c| + E_{c-1}``, so with ``u = 2**-11`` and ``t = 2**-25`` (half the subnormal spacing,
the absolute error where the relative model fails):

    ``E_c = (1 + u) * E_{c-1} + u * |s_c| + t``,   ``E_{-1} = 0``

is a rigorous bound on ``|acc_c - s_c|`` (a running form of Higham, *Accuracy and Stability of
Numerical Algorithms*, section 4.2; unlike the closed ``gamma(C)`` form it stays finite and
tight for ``C`` in the tens of thousands).  It is evaluated in float64 in column blocks; the
float64 rounding of the bound itself is covered by a ``1e-9`` relative margin.  Overflow is not
covered: an output beyond the binary16 range (|Y| > 65504) is reported as not matching.
Extra steps that add an exact zero (sparse padding columns) do not change the bound.

With the epilogue ``y = relu(fl(acc + b))`` (``FADD`` then ``FMAX #0``) the reference is
``relu(s + b)`` and the bound ``(1 + u) * E + u * |s + b| + t``: ``|acc + b - (s + b)| <= E``,
the rounding of the sum adds at most ``u * |acc + b| + t <= u * (|s + b| + E) + t``, and
``max(., 0)`` does not increase a distance.

That a-priori bound compounds ``(1 + u)**C``, which is ~2e5 for C = 25088 (vgg16-fc6).  The
*running* error bound (Higham, section 3.3) does not: rounding to nearest gives
``|fl(v) - v| <= u |fl(v)| + t``, so with ``acc_c`` the *rounded* partial sums,

    ``|acc_{C-1} - s_{C-1}| <= u * sum_c |acc_c| + C * t``

holds for the sequence that produced the result.  :func:`sw.compiler.graphs.fc_result` returns
``sum_c |acc_c|`` (``mu``) alongside the result; :func:`check` uses the smaller of the two
bounds when ``mu`` is given (both are rigorous for a correctly rounded FMA chain in the
documented order; the running one assumes the result came from that chain, which the golden
model's own tests and the bit-exact RTL comparison establish).  :func:`check` applies them.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["U", "reference", "error_bound", "Check", "check"]

#: Unit roundoff of binary16.
U = 2.0 ** -11
_SUB = 2.0 ** -25


def reference(weights, inputs, bias=None, relu=False):
    """Return the float64 ``N x K`` product ``inputs @ weights.T`` (plus ``bias``, a length-``K``
    vector of binary16 values or bit patterns as :attr:`FcPlan.bias` holds them, then ReLU
    when ``relu``)."""
    w = np.asarray(weights, dtype=np.float16).astype(np.float64)
    x = np.asarray(inputs, dtype=np.float16).astype(np.float64)
    y = x @ w.T
    if bias is not None:
        y = y + _bias64(bias)
    return np.maximum(y, 0.0) if relu else y


def _bias64(bias):
    """Return a bias as float64 values: bit patterns (a tuple of ints) or binary16 values."""
    arr = np.asarray(bias)
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.uint16).view(np.float16)
    return np.asarray(arr, dtype=np.float16).astype(np.float64)


def error_bound(weights, inputs):
    """Return the ``N x K`` bound ``E_{C-1}`` of the module doc."""
    w = np.asarray(weights, dtype=np.float16).astype(np.float64)
    x = np.asarray(inputs, dtype=np.float16).astype(np.float64)
    n, c = x.shape
    k = w.shape[0]
    block = max(1, min(c, 4_000_000 // max(1, n * k)))
    s = np.zeros((n, k))
    e = np.zeros((n, k))
    for lo in range(0, c, block):
        hi = min(c, lo + block)
        b = hi - lo
        part = np.cumsum(x[:, None, lo:hi] * w[None, :, lo:hi], axis=2) + s[:, :, None]
        growth = (1 + U) ** np.arange(b - 1, -1, -1)
        e = e * (1 + U) ** b + (U * np.abs(part) + _SUB) @ growth
        s = part[:, :, -1]
    return e * (1 + 1e-9) + 1e-300


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


def check(result, weights, inputs, mu=None, steps=None, bias=None, relu=False):
    """Compare a binary16 ``N x K`` ``result`` with :func:`reference` within the bound.

    ``mu`` (``N x K``, the sum of the rounded partial sums' magnitudes over ``steps`` FMA steps,
    default ``C``) enables the running bound of the module doc; ``bias`` and ``relu`` are the
    epilogue's (:func:`reference`; the bound grows by the bias addition's rounding).
    """
    y = np.asarray(result, dtype=np.float16).astype(np.float64)
    ref = reference(weights, inputs, bias)
    bound = error_bound(weights, inputs)
    if mu is not None:
        steps = np.asarray(weights).shape[1] if steps is None else steps
        running = (U * np.asarray(mu) + steps * _SUB) * (1 + 1e-9)
        bound = np.minimum(bound, running)
    if bias is not None:
        bound = ((1 + U) * bound + U * np.abs(ref) + _SUB) * (1 + 1e-9)
    if relu:
        ref = np.maximum(ref, 0.0)
    with np.errstate(invalid="ignore"):
        err = np.abs(y - ref)
        bad = ~(err <= bound)
        ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1), np.where(err > 0,
                                                                                 np.inf, 0))
    return Check(not bad.any(), float(np.nanmax(err)) if err.size else 0.0,
                 float(bound.max()) if bound.size else 0.0,
                 float(np.nanmax(ratio)) if ratio.size else 0.0, int(bad.sum()))
