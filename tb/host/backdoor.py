"""Backdoor access to SRAM storage through the simulator's VPI, without cocotb handles.

Why: ``dut.<path>.storage[i].value = v`` makes cocotb create a handle per word that neither
cocotb nor the simulator frees: about 2.3 kB of the simulator process per word (Verilator
5.048 + cocotb 2.1: 200,000 words written, +455 MB resident, of which clearing cocotb's handle
cache gives back 10 MB) and ~21 us per word.  alexnet-fc8 at batch 64 writes 5.8 M words (the
external memories, then the Dbufs of ``--backdoor-in``): 14.3 GB resident and two minutes
(docs/system.md, "Memory of a run").

:class:`Backdoor` writes and reads ranges of an unpacked array (``reg [W-1:0] storage [0:D-1]``
of :mod:`hw.lib.sram`, ``W <= 64``) with the standard VPI calls, reached through ``ctypes`` in the
simulator process that cocotb runs in: per word ``vpi_handle_by_index``, ``vpi_put_value`` or
``vpi_get_value`` (``vpiVectorVal``, ``vpiNoDelay``), then ``vpi_release_handle`` (or
``vpi_free_object``).  On Verilator that frees everything (200,000 words: +0 MB beyond the
data, ~2 us per word); Icarus 11 keeps ~2 kB per word it was asked for either way (its
configurations are small).  The array has one VPI handle, looked up by its path once.

Writes take effect at once (``vpiNoDelay``), where a cocotb ``.value =`` waits for the time
step's ReadWrite phase; the SRAM model reads its storage only on a clock edge, so a word
written between two edges is seen by the next edge either way.  Do not call it in the
ReadOnly phase.

``FDPU_BACKDOOR=cocotb`` in the environment (or ``Backdoor(mode="cocotb")``) goes through
cocotb handles instead, as before: for comparisons, or a simulator whose process does not
export the VPI.
"""

import ctypes
import os

import numpy as np

__all__ = ["Backdoor", "BACKDOOR_ENV", "MODES"]

#: Environment variable choosing the mode of :class:`Backdoor` (default ``vpi``).
BACKDOOR_ENV = "FDPU_BACKDOOR"

#: Modes of :class:`Backdoor`.
MODES = ("vpi", "cocotb")

_VPI_VECTOR_VAL, _VPI_NO_DELAY = 9, 1


class _VecVal(ctypes.Structure):
    _fields_ = [("aval", ctypes.c_uint32), ("bval", ctypes.c_uint32)]


class _ValueUnion(ctypes.Union):
    _fields_ = [("vector", ctypes.POINTER(_VecVal)), ("integer", ctypes.c_int32),
                ("real", ctypes.c_double), ("misc", ctypes.c_char_p)]


class _Value(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int32), ("value", _ValueUnion)]


def _vpi():
    """Return the simulator's VPI entry points (the process's own dynamic symbols)."""
    lib = ctypes.CDLL(None)
    vpi = {}
    for name, res, args in (
            ("vpi_handle_by_name", ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_void_p]),
            ("vpi_handle_by_index", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int32]),
            ("vpi_put_value", ctypes.c_void_p,
             [ctypes.c_void_p, ctypes.POINTER(_Value), ctypes.c_void_p, ctypes.c_int32]),
            ("vpi_get_value", None, [ctypes.c_void_p, ctypes.POINTER(_Value)]),
            ("vpi_release_handle", ctypes.c_int32, [ctypes.c_void_p]),
            ("vpi_free_object", ctypes.c_int32, [ctypes.c_void_p])):
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.restype, fn.argtypes = res, args
        vpi[name] = fn
    return vpi


class Backdoor:
    """Write and read ranges of SRAM storage arrays (see the module doc).

    Parameters
    ----------
    mode : {"vpi", "cocotb"}, optional
        Default: ``FDPU_BACKDOOR`` from the environment, else ``"vpi"``.
    """

    def __init__(self, mode=None):
        mode = mode or os.environ.get(BACKDOOR_ENV) or "vpi"
        if mode not in MODES:
            raise ValueError(f"{BACKDOOR_ENV} must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self._handles = {}
        if mode == "vpi":
            self.vpi = _vpi()
            for name in ("vpi_handle_by_name", "vpi_handle_by_index", "vpi_put_value",
                         "vpi_get_value"):
                if name not in self.vpi:
                    raise RuntimeError(f"the simulator process exports no {name}: set "
                                       f"{BACKDOOR_ENV}=cocotb")
            self.free = self.vpi.get("vpi_release_handle") or self.vpi.get("vpi_free_object")

    def _array(self, storage):
        """Return the VPI handle of the cocotb array handle ``storage`` (cached per path)."""
        path = storage._path
        h = self._handles.get(path)
        if h is None:
            h = self.vpi["vpi_handle_by_name"](path.encode(), None)
            if not h:
                raise RuntimeError(f"no VPI object named {path}")
            self._handles[path] = h
        return h

    def _words(self, storage, first, offsets):
        """Yield ``(offset, VPI handle of word first + offset)``, freeing each after use."""
        h, by_index = self._array(storage), self.vpi["vpi_handle_by_index"]
        for i in offsets:
            word = by_index(h, first + int(i))
            if not word:
                raise IndexError(f"{storage._path} has no word {first + int(i)}")
            yield i, word
            if self.free:
                self.free(word)

    def write(self, storage, first, words, *, skip_zero=False):
        """Write ``words`` (uint64) into ``storage[first:first + len(words)]``.

        ``skip_zero``: the range is known to hold zeros; only the non-zero words are written.
        """
        words = np.asarray(words, dtype=np.uint64)
        offsets = np.flatnonzero(words) if skip_zero else np.arange(len(words))
        values = words[offsets].tolist()
        if self.mode == "cocotb":
            for i, w in zip(offsets.tolist(), values):
                storage[first + i].value = w
            return
        vec = (_VecVal * 2)()
        val = _Value(_VPI_VECTOR_VAL, _ValueUnion(vector=vec))
        put = self.vpi["vpi_put_value"]
        for (_, word), w in zip(self._words(storage, first, offsets.tolist()), values):
            vec[0].aval, vec[1].aval = w & 0xFFFFFFFF, w >> 32
            put(word, ctypes.byref(val), None, _VPI_NO_DELAY)

    def read(self, storage, first, count):
        """Return ``storage[first:first + count]`` as uint64; unknown bits raise."""
        out = np.zeros(count, dtype=np.uint64)
        if self.mode == "cocotb":
            for i in range(count):
                value = storage[first + i].value
                if not value.is_resolvable:
                    raise AssertionError(f"{storage._path}[{first + i}] holds unknown bits: "
                                         f"{value}")
                out[i] = int(value)
            return out
        val = _Value(_VPI_VECTOR_VAL)
        get = self.vpi["vpi_get_value"]
        for i, word in self._words(storage, first, range(count)):
            get(word, ctypes.byref(val))
            lo, hi = val.value.vector[0], val.value.vector[1]
            if lo.bval or hi.bval:
                raise AssertionError(f"{storage._path}[{first + i}] holds unknown bits")
            out[i] = lo.aval | hi.aval << 32
        return out
