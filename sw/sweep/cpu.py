"""The host CPU measured on the paper's layers: the comparison of the paper's Table 4.

Contract
--------
The paper compares FDPU's utilization on sparse FC layers with a CPU's, a GPU's and a mobile
GPU's, taken from another paper (PAPER.md section 7).  Here the machine that runs ``fdpu
paper`` is measured on the same layers and batches, in float32:

* :func:`machine` names the CPU (``/proc/cpuinfo``'s model name, clock and vector flags, the
  cores numpy's BLAS may use, the BLAS library);
* :func:`peak` is the host's peak in floating-point operations per second, obtained two
  ways: **measured**, the best of five float32 dense matrix products of 2048 x 2048 x 2048
  through numpy's BLAS on every core (what a perfectly blocked layer could reach here;
  :func:`measure_points` measures it before and after the layers and keeps the highest rate
  any dense product reached, the layers' included, since a shared machine's load only ever
  lowers a rate; the utilizations are against it), and **nominal**, ``cores x clock x
  vector lanes x 2 (a
  multiply-add) x FMA units``, with the FMA units per core assumed (2 on x86 cores with
  AVX2/AVX-512 FMA, 1 otherwise) and the clock the one ``/proc/cpuinfo`` reports (turbo and
  throttling ignore it): printed beside, never used for the ratio;
* :func:`measure` times one layer: dense, ``W X^T`` through BLAS (every core); sparse, the
  layer's CSR matrix (``scipy.sparse``, the stored weights only) times the dense inputs
  (scipy's sparse product runs on one core); each the best of ``repeats`` runs after a
  warm-up, and its *useful* operations are FDPU's (``2 K C N`` dense, ``2 nnz N`` sparse), so
  the utilizations compare the same work.

Weights and inputs are the zoo's seeded synthetic ones (:func:`sw.compiler.layers.make_weights`
at the paper's density, :func:`sw.compiler.layers.make_inputs`), as FDPU's points.  Wall-clock
times on a shared machine move with its load: the best of several runs is kept, and the
report states the machine and the date.
"""

import os
import platform
import re
import time

import numpy as np
from scipy import sparse

from sw.compiler import layers

__all__ = ["machine", "peak", "measure", "measure_points", "GEMM_SIZE"]

#: The side of the square float32 product that measures the host's peak.
GEMM_SIZE = 2048


def _cpuinfo():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out = {}
    for key in ("model name", "cpu MHz", "flags"):
        m = re.search(rf"^{key}\s*:\s*(.*)$", text, re.M)
        if m:
            out[key] = m.group(1).strip()
    return out


def _blas():
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except (KeyError, TypeError, AttributeError):
        return "unknown"


def machine():
    """Return what the host is: CPU model, clock (MHz, as reported), vector flags, cores, the
    BLAS numpy uses, numpy's and scipy's versions, the OS."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    vector = [f for f in ("avx512f", "avx2", "fma", "avx", "sse4_2", "neon", "asimd")
              if f in flags]
    return dict(cpu=info.get("model name", platform.processor() or platform.machine()),
                mhz=float(info["cpu MHz"]) if "cpu MHz" in info else None,
                vector_flags=vector, cores=os.cpu_count() or 1, blas=_blas(),
                numpy=np.__version__, scipy=__import__("scipy").__version__,
                system=f"{platform.system()} {platform.release()}")


def _best(fn, repeats):
    fn()                                        # warm-up: caches, BLAS threads, page faults
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def peak(host=None, repeats=5):
    """Return the host's peak (see the module doc): ``measured`` and ``nominal`` floating-point
    operations per second, and how each was obtained."""
    host = host or machine()
    rng = np.random.default_rng(0)
    n = GEMM_SIZE
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    seconds = _best(lambda: a @ b, repeats)
    flags = set(host["vector_flags"])
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags or "avx" in flags else 4
    fma_units = 2 if "fma" in flags else 1
    nominal = None
    if host["mhz"]:
        nominal = host["cores"] * host["mhz"] * 1e6 * lanes * 2 * fma_units
    return dict(measured=2 * n ** 3 / seconds,
                measured_how=f"best of {repeats} float32 {n} x {n} x {n} products through "
                             f"numpy's BLAS ({host['blas']}) on {host['cores']} core(s)",
                nominal=nominal,
                nominal_how=f"{host['cores']} core(s) x {host['mhz']} MHz x {lanes} float32 "
                            f"lanes x 2 (multiply-add) x {fma_units} FMA unit(s) per core "
                            f"(assumed from the flags)")


def measure(spec, batch, mode, seed=0, repeats=3):
    """Return the host's time on zoo layer ``spec`` at ``batch`` (``mode``: ``dense`` or
    ``sparse``): seconds (best of ``repeats``), useful operations and operations per
    second."""
    w = layers.make_weights(spec, None if mode == "sparse" else 1.0, seed).astype(np.float32)
    x = layers.make_inputs(spec.in_features, batch, seed).astype(np.float32)
    xt = np.ascontiguousarray(x.T)
    if mode == "dense":
        seconds = _best(lambda: w @ xt, repeats)
        useful = 2 * w.size * batch
    else:
        csr = sparse.csr_matrix(w)
        seconds = _best(lambda: csr @ xt, repeats)
        useful = 2 * csr.nnz * batch
    return dict(seconds=seconds, useful_flops=useful, flops_per_s=useful / seconds)


def measure_points(names, batches, repeats=3, progress=None):
    """Return the host, its peak and, per ``(layer, batch, mode)``, :func:`measure` with the
    utilization against the measured peak; ``progress(done, total)`` after each."""
    host = machine()
    first = peak(host)
    out = dict(machine=host, date=time.strftime("%Y-%m-%d"), points=[])
    todo = [(n, b, m) for n in names for b in batches for m in ("dense", "sparse")]
    for i, (name, batch, mode) in enumerate(todo):
        got = measure(layers.get_layer(name), batch, mode, repeats=repeats)
        got.update(layer=name, batch=batch, mode=mode)
        out["points"].append(got)
        if progress:
            progress(i + 1, len(todo))
    last = peak(host)
    dense = [p["flops_per_s"] for p in out["points"] if p["mode"] == "dense"]
    top = dict(first)
    top["measured"] = max([first["measured"], last["measured"], *dense])
    top["measured_how"] = (f"the highest rate of a float32 dense product during the "
                           f"measurement: {first['measured_how']}, before and after the "
                           f"layers ({first['measured'] / 1e9:,.1f} and "
                           f"{last['measured'] / 1e9:,.1f} GFLOP/s), and the layers' dense "
                           f"products")
    out["peak"] = top
    for p in out["points"]:
        p["utilization"] = p["flops_per_s"] / top["measured"]
    return out
