"""Convolution as matrix multiplication: a network's convolution layer and its unrolling.

Contract
--------
A convolution layer (:class:`sw.compiler.net.Conv`) is a 2-D convolution with ``groups = 1``
and no dilation (PAPER.md section 6: FDPU runs a convolution layer as a matrix multiplication
on the same array):

* ``weights``: ``K x C x R x S`` binary16 (``K`` filters of ``C`` channels, ``R x S``
  kernel); ``bias``: ``K`` values or ``None``; ``activation``: ``"relu"`` or ``None``;
* ``stride``: ``(sh, sw)``; ``pads``: ``(top, left, bottom, right)``, zeros added around the
  input (ONNX's ``pads`` order), any of them 0 or more;
* ``name``: where it came from, for messages.

The multiplication the array runs (:attr:`~sw.compiler.net.Conv.matrix`, :func:`unroll`,
:func:`fold`), computed here for any object with the layer's attributes:

* weights: the ``K x (C R S)`` matrix, columns in ``(c, r, s)`` order (the filters as rows);
* inputs: the *unrolled* inputs (im2col), ``(N P Q) x (C R S)``: row ``(n, p, q)`` holds the
  window of output position ``(p, q)`` of image ``n``, ``X[n, c, p sh + r - top, q sw + s -
  left]`` (zero outside the image), columns in the weights' order;
* outputs: ``(N P Q) x K``, folded back to ``N x K x P x Q`` (NCHW, as ONNX and torch hold
  activations).

So every output is ``O[n, k, p, q] = sum over (c, r, s) of W[k, c, r, s] X[n, c, p sh + r -
top, q sw + s - left]``, accumulated in ``(c, r, s)`` order by the array's graph of choice
(:mod:`sw.compiler.graphs`); bias and ReLU are the FC layer's epilogue.

Where the unrolling runs: on the host (:func:`unroll`), so a convolution layer is an FC layer
of batch ``N P Q`` to the planner, the golden model, the performance model and the RTL; the
unrolled inputs cross the external port, ``R S / (sh sw)`` times the input's bytes.
:func:`min_external_bytes` is the layer's own minimum (weights, the input once, the outputs),
which the network's report gives beside the bytes the run moved (docs/net.md, "Convolution
layers").
"""


from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from sw.spec.errors import FdpuError

__all__ = ["Geometry", "describe", "out_size", "unroll", "fold", "reference", "min_external_bytes"]


@dataclass(frozen=True)
class Geometry:
    """A convolution's shape without its weights (a zoo layer's): ``K`` filters over
    ``channels`` input channels of ``height x width`` images, ``kernel`` ``(R, S)``,
    ``stride`` ``(sh, sw)``, ``pads`` ``(top, left, bottom, right)``; what :func:`unroll`,
    :func:`fold` and :func:`out_size` read (a :class:`sw.compiler.net.Conv` has the same
    attributes)."""

    K: int
    channels: int
    height: int
    width: int
    kernel: tuple
    stride: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)
    name: str = ""

    @property
    def C(self):
        """Columns of the weight matrix: ``C R S``."""
        return self.channels * self.kernel[0] * self.kernel[1]

    @property
    def output(self):
        """``(P, Q)``."""
        return out_size(self, self.height, self.width)

    def rows(self, n):
        """Rows of the unrolled inputs of ``n`` images: ``n P Q``."""
        p, q = self.output
        return n * p * q

    def describe(self):
        """Return :func:`describe` of this shape."""
        return describe(self)


def describe(layer):
    """Return ``K x C x R x S, stride sh x sw, pads t,l,b,r`` of a convolution (a
    :class:`Geometry` or a :class:`sw.compiler.net.Conv`), for reports."""
    r, s = layer.kernel
    return (f"{layer.K} x {layer.channels} x {r} x {s}, stride {layer.stride[0]} x "
            f"{layer.stride[1]}, pads {','.join(map(str, layer.pads))}")


def out_size(conv, h, w):
    """Return the output ``(P, Q)`` of ``conv`` on ``h x w`` images, refusing a kernel larger
    than the padded image."""
    (r, s), (sh, sw), (t, left, b, right) = conv.kernel, conv.stride, conv.pads
    hp, wp = h + t + b, w + left + right
    if hp < r or wp < s:
        raise FdpuError(f"{conv.name}: the {r} x {s} kernel is larger than the input of "
                        f"{h} x {w} padded to {hp} x {wp}")
    return (hp - r) // sh + 1, (wp - s) // sw + 1


def _check_input(conv, x):
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1] != conv.channels:
        raise FdpuError(f"{conv.name}: takes N x {conv.channels} x H x W inputs, got shape "
                        f"{x.shape}")
    return x


def unroll(conv, x):
    """Return the unrolled inputs (``(N P Q) x (C R S)``, ``x``'s dtype) of ``x``
    (``N x C x H x W``): see the module doc."""
    x = _check_input(conv, x)
    n, _, h, w = x.shape
    p, q = out_size(conv, h, w)
    (r, s), (sh, sw), (t, left, b, right) = conv.kernel, conv.stride, conv.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, right)))
    win = sliding_window_view(xp, (r, s), axis=(2, 3))[:, :, :(p - 1) * sh + 1:sh,
                                                       :(q - 1) * sw + 1:sw]
    # N x C x P x Q x R x S -> N x P x Q x C x R x S
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * p * q, -1)


def fold(conv, y, n, h, w):
    """Return the ``N x K x P x Q`` outputs from the array's ``(N P Q) x K`` outputs ``y`` of
    ``n`` images of ``h x w``."""
    p, q = out_size(conv, h, w)
    return np.ascontiguousarray(np.asarray(y).reshape(n, p, q, conv.K).transpose(0, 3, 1, 2))


def reference(conv, x):
    """Return ``conv`` on ``x`` in float64, computed directly from the definition (a loop
    over the kernel positions, not through :func:`unroll`): the check of the unrolling, with
    the bias and the activation."""
    x = _check_input(conv, x).astype(np.float64)
    n, _, h, w = x.shape
    p, q = out_size(conv, h, w)
    (r, s), (sh, sw), (t, left, b, right) = conv.kernel, conv.stride, conv.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, right)))
    wt = conv.weights.astype(np.float64)
    out = np.zeros((n, conv.K, p, q))
    for i in range(r):
        for j in range(s):
            patch = xp[:, :, i:i + (p - 1) * sh + 1:sh, j:j + (q - 1) * sw + 1:sw]
            out += np.einsum("nchw,kc->nkhw", patch, wt[:, :, i, j])
    if conv.bias is not None:
        out += conv.bias.astype(np.float64)[None, :, None, None]
    if conv.activation == "relu":
        out = np.maximum(out, 0.0)
    return out


def min_external_bytes(conv, n, h, w, weight_bytes):
    """Return the layer's minimal external traffic on ``n`` images of ``h x w``: its weights
    once (``weight_bytes``, as the graph stores them at the least), the input once and the
    outputs once (binary16)."""
    p, q = out_size(conv, h, w)
    return weight_bytes + 2 * n * (conv.channels * h * w + conv.K * p * q)
