"""Run binary16 vectors through the generated Verilog of the SIMD-4 unit and compare in bulk.

Used by ``fdpu fpu-check`` and by the long test: the lanes are written to an ``.npz``, the
cocotb test ``tb.fpu.bench_fpu.vectors`` drives them (four lanes per operation, as fast as
cocotb allows) and writes the result lanes back; :func:`mismatches` compares with numpy.
"""

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sw.spec import fp16
from tb.host import runner

__all__ = ["VectorRun", "run_vectors", "mismatches"]


@dataclass(frozen=True)
class VectorRun:
    """Outcome of :func:`run_vectors`.

    Attributes
    ----------
    got : numpy.ndarray of uint16
        One result lane per input lane (padding removed).
    cycles : int
        Simulated clock cycles from the first operation offered to the last result.
    drive_s : float
        Wall-clock seconds of the simulation loop alone.
    run_s, build_s, total_s : float
        Simulator run (incl. start-up), build (0 when reused) and end-to-end seconds.
    seed : int
        Seed of the idle/backpressure pattern.
    """
    got: np.ndarray
    cycles: int
    drive_s: float
    run_s: float
    build_s: float
    total_s: float
    seed: int


def run_vectors(op, lanes, sim, *, idle=0.0, stall=0.0, seed=None, timeout_s=3600):
    """Run the lanes of ``op`` through the ``fpu`` top on ``sim``; return a :class:`VectorRun`.

    Parameters
    ----------
    op : str
        One of :data:`tb.fpu.model.OPS`.
    lanes : sequence of array_like of uint16
        ``ARITY[op]`` operand arrays of equal length (any length; padded to a multiple of 4).
    sim : {"icarus", "verilator"}
    idle, stall : float
        Probabilities of idle source cycles and of backpressure.
    seed : int, optional
        cocotb seed (pacing pattern); default as :func:`tb.host.runner.run_cocotb`.
    timeout_s : float
        Wall-clock bound of the simulation.
    """

    started = time.monotonic()
    lanes = [np.asarray(x, dtype=np.uint16).ravel() for x in lanes]
    n = len(lanes[0])
    padded = -(-n // 4) * 4 if n else 4
    arrays = {}
    for key, index in zip("abc", range(3)):
        column = np.zeros(padded, dtype=np.uint16)
        if index < len(lanes):
            column[:n] = lanes[index]
        arrays[key] = column
    with tempfile.TemporaryDirectory(prefix="fdpu-fpu-") as tmp:
        vectors = Path(tmp) / "vectors.npz"
        results = Path(tmp) / "results.npz"
        np.savez(vectors, op=np.array(op), **arrays)
        run = runner.run_cocotb("fpu", {"tag_width": 8}, "tb.fpu.bench_fpu", sim, testcase="vectors",
                         seed=seed, timeout_s=timeout_s,
                         extra_env={"FDPU_FPU_VECTORS": str(vectors),
                                    "FDPU_FPU_RESULTS": str(results),
                                    "FDPU_FPU_IDLE": str(idle), "FDPU_FPU_STALL": str(stall)})
        with np.load(results) as data:
            got = data["result"].astype(np.uint16)
            tags, sent = data["tag"], data["sent_tag"]
            cycles, drive_s = int(data["cycles"]), float(data["wall"])
    if len(tags) != len(sent) or not np.array_equal(tags, sent):
        raise AssertionError(f"results lost, duplicated or reordered on {sim}: "
                             f"{len(tags)} results for {len(sent)} operations")
    return VectorRun(got=got[:n], cycles=cycles, drive_s=drive_s, run_s=run.run_s,
                     build_s=run.build_s, total_s=time.monotonic() - started, seed=run.seed)


def mismatches(got, expected):
    """Return the indices where ``got`` differs from ``expected`` (a NaN expects ``0x7E00``).

    Parameters
    ----------
    got, expected : array_like of uint16
    """
    got = np.asarray(got, dtype=np.uint16)
    expected = np.asarray(expected, dtype=np.uint16)
    expected = np.where(fp16.is_nan(expected), np.uint16(fp16.QNAN), expected)
    return np.nonzero(got != expected)[0]
