"""The loaders of the user's files against corrupt and malicious input.

``sw.compiler.layers.load_npy`` (``--weights``, ``--inputs``, ``fdpu fdcsr encode``),
``sw.compiler.fdcsr.load`` (``fdpu fdcsr decode``) and ``sw.compiler.image.load``
(``fdpu disasm``): every bad file, made by hand here, ends in one ``FdpuError`` that names the
file (and the member or entry), never a traceback, a hang or a large allocation; then files
mutated at random (hypothesis) go through the command line, which must exit 0 or print one
``fdpu: error:`` line and exit 2.
"""

import io
import json
import os
import pickle
import signal
import struct
import warnings
import zipfile

import numpy as np
import pytest
from cliutil import assert_user_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib import format as npformat

import sw.cli
from sw.compiler import fdcsr, image, npyfile
from sw.compiler.layers import load_npy, load_weights
from sw.spec.errors import FdpuError

SMALL_IMAGE = ["--in-features", "16", "--out-features", "4", "--rows", "1", "--cols", "1",
               "--slots", "32"]


# -- seed files ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Valid files: ``w.npy`` (4 x 16 float16), its FD-CSR ``w.npz`` and an image ``img.npz``."""
    root = tmp_path_factory.mktemp("seeds")
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 16)) * (rng.random((4, 16)) < 0.5)
    np.save(root / "w.npy", w.astype(np.float16))
    assert sw.cli.main(["fdcsr", "encode", str(root / "w.npy"), "-o", str(root / "w.npz")]) == 0
    assert sw.cli.main(["asm", *SMALL_IMAGE, "-o", str(root / "img.npz")]) == 0
    return {name: root / name for name in ("w.npy", "w.npz", "img.npz")}


def npy_bytes(arr):
    """Return ``arr`` saved as ``.npy`` bytes."""
    f = io.BytesIO()
    np.save(f, arr)
    return f.getvalue()


def members_of(path):
    """Return ``{key: array}`` of an ``.npz`` file."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def write_zip(path, members, method=zipfile.ZIP_STORED):
    """Write ``{name: bytes}`` as a zip archive (duplicates allowed: a list of pairs)."""
    items = members.items() if isinstance(members, dict) else members
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # zipfile's note on a duplicate name
        with zipfile.ZipFile(path, "w", method) as z:
            for name, data in items:
                z.writestr(name, data)


def member_span(path, member):
    """Return ``(first byte, length)`` of the stored data of ``member`` in the zip ``path``."""
    data = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len, info.compress_size


@pytest.fixture
def no_hang():
    """Fail (instead of hanging) if the test blocks for 10 seconds."""
    def timeout(*_):
        raise TimeoutError("the loader blocked")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def refused(load, path, match):
    """Check that ``load(path)`` raises one-line FdpuError naming ``path`` and ``match``."""
    with pytest.raises(FdpuError) as exc:
        load(path)
    text = str(exc.value)
    assert str(path) in text and "\n" not in text, text
    assert match in text, text
    return text


# -- load_npy ------------------------------------------------------------------------------------

def test_npy_special_files_are_refused_without_blocking(tmp_path, no_hang, capsys):
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    refused(load_npy, fifo, "is a named pipe (FIFO), not a regular file")
    refused(load_npy, tmp_path, "is a directory, not a regular file")
    refused(load_npy, "/dev/null", "is a character device, not a regular file")
    assert_user_error(capsys, "run", "--weights", fifo, match=f"{fifo}: is a named pipe")
    assert_user_error(capsys, "fdcsr", "encode", fifo, "-o", tmp_path / "o.npz",
                      match=f"{fifo}: is a named pipe")
    assert_user_error(capsys, "fdcsr", "stats", fifo, match=f"{fifo}: is a named pipe")
    with pytest.raises(FileNotFoundError):
        load_npy(tmp_path / "missing.npy")


def test_npy_that_is_no_npy_array(tmp_path):
    cases = {"empty.npy": b"", "text.npy": b"1 2 3\n", "pickle.npy": pickle.dumps([1, 2]),
             "short.npy": b"\x93NUM"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    refused(load_npy, tmp_path / "empty.npy", "is empty")
    refused(load_npy, tmp_path / "text.npy", "not a .npy array file (it does not begin with")
    refused(load_npy, tmp_path / "pickle.npy", "not a .npy array file (a Python pickle)")
    refused(load_npy, tmp_path / "short.npy", "not a .npy array file")
    np.savez(tmp_path / "a.npz", w=np.ones(3))
    refused(load_npy, tmp_path / "a.npz", "is an .npz archive (a zip), not one .npy array")


@pytest.mark.parametrize("arr, match", [
    (np.array([{"a": 1}], dtype=object), "dtype object (pickled Python objects) is not allowed"),
    (np.array(["abc"]), "dtype <U3 is not allowed; allowed: bool, signed integer"),
    (np.zeros(2, dtype=[("a", "<f2"), ("b", "<i4")]), "is not allowed"),
    (np.zeros(2, dtype="datetime64[s]"), "dtype datetime64[s] is not allowed"),
])
def test_npy_dtypes_that_are_not_numeric(tmp_path, arr, match):
    path = tmp_path / "bad.npy"
    np.save(path, arr, allow_pickle=True)
    refused(load_npy, path, match)


def test_npy_headers_that_are_corrupt(tmp_path):
    good = npy_bytes(np.ones((3, 4), dtype=np.float16))
    end = good.index(b"}")
    cases = {
        "flipped.npy": good[:12] + bytes([good[12] ^ 0xFF]) + good[13:],
        # An unclosed parenthesis: numpy's Python 2 fallback raised tokenize.TokenError.
        "unclosed.npy": good.replace(b"(3, 4)", b"(3, 4 "),
        "notdict.npy": good[:10] + b"[" + good[11:end] + b"]" + good[end + 1:],
        "keys.npy": good.replace(b"'descr'", b"'DESCR'"),
        "v3.npy": good[:6] + b"\x03" + good[7:],
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    for name in ("flipped.npy", "unclosed.npy", "notdict.npy", "keys.npy"):
        refused(load_npy, tmp_path / name, ".npy header is not the dictionary numpy.save writes (")
    refused(load_npy, tmp_path / "v3.npy", ".npy format version 3.0 is not supported")


def write_header(path, descr, shape, data=b"", version=(1, 0)):
    """Write a ``.npy`` header declaring ``descr`` and ``shape``, then ``data``."""
    f = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    if version == (1, 0):
        npformat.write_array_header_1_0(f, header)
    else:
        npformat.write_array_header_2_0(f, header)
    path.write_bytes(f.getvalue() + data)


def test_npy_sizes_checked_before_the_data(tmp_path, monkeypatch):
    huge = tmp_path / "huge.npy"
    write_header(huge, "<f8", (1 << 40,), b"\0" * 64)
    refused(load_npy, huge, "the .npy header declares a float64 array of shape (1099511627776,), "
                            "8,796,093,022,208 bytes; at most 2,147,483,648 bytes (2 GiB) are "
                            "allowed")
    negative = tmp_path / "negative.npy"
    write_header(negative, "<f2", (-1, 4), version=(2, 0))
    refused(load_npy, negative, "declares shape (-1, 4), with a negative dimension")
    good = npy_bytes(np.ones((3, 4), dtype=np.float16))
    (tmp_path / "cut.npy").write_bytes(good[:-5])
    refused(load_npy, tmp_path / "cut.npy",
            "truncated: has 19 bytes of the 24 the .npy header declares (shape (3, 4), float16)")
    (tmp_path / "long.npy").write_bytes(good + b"xyz")
    refused(load_npy, tmp_path / "long.npy", "3 trailing bytes after the 24 the .npy header "
                                             "declares")
    (tmp_path / "ok.npy").write_bytes(good)
    monkeypatch.setattr(npyfile, "MAX_ARRAY_BYTES", 16)
    refused(load_npy, tmp_path / "ok.npy", "24 bytes; at most 16 bytes are allowed")


def test_npy_good_files_still_load(tmp_path):
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    np.save(tmp_path / "f.npy", f)
    back = load_npy(tmp_path / "f.npy")
    assert np.array_equal(back, f) and back.flags.writeable
    write_header(tmp_path / "v2.npy", "<f2", (2,), np.ones(2, np.float16).tobytes(), (2, 0))
    assert load_npy(tmp_path / "v2.npy").tolist() == [1.0, 1.0]
    with pytest.raises(FdpuError, match="weights must be 2-D"):
        load_weights(tmp_path / "v2.npy")
    np.save(tmp_path / "e.npy", np.zeros((0, 3)))
    assert load_npy(tmp_path / "e.npy").shape == (0, 3)


# -- fdcsr.load ----------------------------------------------------------------------------------

def test_fdcsr_special_and_non_zip_files(seeds, tmp_path, no_hang, capsys):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    refused(fdcsr.load, fifo, "is a named pipe (FIFO), not a regular file")
    refused(fdcsr.load, tmp_path, "is a directory")
    assert_user_error(capsys, "fdcsr", "decode", fifo, "-o", tmp_path / "o.npy",
                      match=f"{fifo}: is a named pipe")
    cut = tmp_path / "cut.npz"
    cut.write_bytes(seeds["w.npz"].read_bytes()[:-30])
    refused(fdcsr.load, cut, "not an FD-CSR .npz file (no zip end record: not a zip archive, "
                             "or truncated)")
    refused(fdcsr.load, seeds["w.npy"], "not an FD-CSR .npz file")


def test_fdcsr_member_with_a_bad_crc(seeds, tmp_path):
    bad = tmp_path / "crc.npz"
    data = bytearray(seeds["w.npz"].read_bytes())
    start, length = member_span(seeds["w.npz"], "values.npy")
    data[start + length - 1] ^= 0x40                  # the last value's high byte
    bad.write_bytes(data)
    refused(fdcsr.load, bad, "member 'values' is unreadable (Bad CRC-32 for file 'values.npy'); "
                             "the file is corrupt")


def test_fdcsr_member_compression_and_encryption(seeds, tmp_path):
    raw = {i.filename: zipfile.ZipFile(seeds["w.npz"]).read(i)
           for i in zipfile.ZipFile(seeds["w.npz"]).infolist()}
    write_zip(tmp_path / "bz.npz", raw, zipfile.ZIP_BZIP2)
    refused(fdcsr.load, tmp_path / "bz.npz", "is compressed with zip method 12; allowed: stored")
    write_zip(tmp_path / "deflated.npz", raw, zipfile.ZIP_DEFLATED)
    assert fdcsr.load(tmp_path / "deflated.npz") == fdcsr.load(seeds["w.npz"])
    data = bytearray(seeds["w.npz"].read_bytes())
    at = data.index(b"PK\x01\x02")                    # the first central directory entry
    data[at + 8] |= 1                                 # its "encrypted" flag
    (tmp_path / "enc.npz").write_bytes(data)
    first = zipfile.ZipFile(seeds["w.npz"]).infolist()[0].filename[:-4]
    refused(fdcsr.load, tmp_path / "enc.npz", f"member '{first}' is encrypted")


def test_fdcsr_zip_bombs_refused_before_inflating(seeds, tmp_path, monkeypatch):
    raw = members_of(seeds["w.npz"])
    raw["values"] = np.zeros(4 << 20, dtype=np.float16)          # 8 MiB, deflates to ~8 KiB
    np.savez_compressed(tmp_path / "bomb.npz", **raw)
    assert (tmp_path / "bomb.npz").stat().st_size < 100_000
    monkeypatch.setattr(npyfile, "MAX_ARRAY_BYTES", 1 << 20)
    refused(fdcsr.load, tmp_path / "bomb.npz",
            "member 'values' declares 8,388,736 bytes uncompressed; at most 1,048,576 bytes "
            "(1 MiB) are allowed")
    sizes = [i.file_size for i in zipfile.ZipFile(seeds["w.npz"]).infolist()]
    monkeypatch.setattr(npyfile, "MAX_ARRAY_BYTES", max(sizes))  # each fits, not all together
    refused(fdcsr.load, seeds["w.npz"], "of the members read before it that exceeds the")
    monkeypatch.setattr(npyfile, "MAX_DIRECTORY_BYTES", 100)
    refused(fdcsr.load, seeds["w.npz"], "its zip directory declares")


def test_fdcsr_members_that_are_wrong(seeds, tmp_path):
    raw = {i.filename: zipfile.ZipFile(seeds["w.npz"]).read(i)
           for i in zipfile.ZipFile(seeds["w.npz"]).infolist()}
    write_zip(tmp_path / "twice.npz", list(raw.items()) + [("values.npy", raw["values.npy"])])
    refused(fdcsr.load, tmp_path / "twice.npz", "lists member 'values.npy' twice")
    write_zip(tmp_path / "text.npz", {**raw, "colidx.npy": b"hello"})
    refused(fdcsr.load, tmp_path / "text.npz", "member 'colidx': not a .npy array file")
    write_zip(tmp_path / "obj.npz", {**raw, "rowoff.npy": npy_bytes(np.array([None]))})
    refused(fdcsr.load, tmp_path / "obj.npz", "member 'rowoff': dtype object (pickled Python "
                                              "objects) is not allowed")
    write_zip(tmp_path / "cut.npz", {**raw, "values.npy": raw["values.npy"][:-1]})
    refused(fdcsr.load, tmp_path / "cut.npz", "member 'values': truncated: has")
    write_zip(tmp_path / "tag.npz", {**raw, "format.npy": npy_bytes(np.array("x" * 1000))})
    refused(fdcsr.load, tmp_path / "tag.npz", "member 'format' declares 4,128 bytes "
                                              "uncompressed; at most 4,096 bytes (4 KiB)")
    write_zip(tmp_path / "tag2.npz", {**raw, "format.npy": npy_bytes(np.array(7))})
    refused(fdcsr.load, tmp_path / "tag2.npz", "member 'format': dtype int64 is not allowed; "
                                               "allowed: string")
    write_zip(tmp_path / "shape.npz", {**raw, "shape.npy": npy_bytes(np.array([1, 2, 3]))})
    refused(fdcsr.load, tmp_path / "shape.npz", "member 'shape' must hold 1 or 2 integers")
    write_zip(tmp_path / "dtype.npz", {**raw, "values.npy": npy_bytes(np.ones(3))})
    refused(fdcsr.load, tmp_path / "dtype.npz", "FD-CSR values must have dtype float16")


def test_fdcsr_decode_refuses_a_dense_result_above_the_limit(tmp_path, monkeypatch, capsys):
    w = np.zeros((64, 1024), dtype=np.float16)
    w[3, 5] = 1                                      # 25 KB of FD-CSR, 128 KiB dense
    fdcsr.encode(w).save(tmp_path / "w.npz")
    monkeypatch.setattr(npyfile, "MAX_ARRAY_BYTES", 1 << 16)
    assert_user_error(capsys, "fdcsr", "decode", tmp_path / "w.npz", "-o", tmp_path / "d.npy",
                      match="decodes to 131,072 bytes of dense float16 (shape 64 x 1024); at "
                            "most 65,536 bytes")
    assert not (tmp_path / "d.npy").exists()


# -- image.load ----------------------------------------------------------------------------------

def write_image(path, seed, changes=None, **arrays):
    """Write the image ``seed`` with the keys ``changes`` of its ``info`` and the member
    ``arrays`` replaced (None: dropped)."""
    members = members_of(seed)
    if changes is not None:
        new = json.loads(str(members["info"]))
        new.update(changes)
        members["info"] = np.array(json.dumps(new))
    members.update(arrays)
    np.savez(path, **{k: v for k, v in members.items() if v is not None})
    return path


def test_image_special_and_corrupt_files(seeds, tmp_path, no_hang, capsys, monkeypatch):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    refused(image.load, fifo, "is a named pipe (FIFO), not a regular file")
    assert_user_error(capsys, "disasm", fifo, match=f"{fifo}: is a named pipe")
    refused(image.load, seeds["w.npy"], "not an FDPU image (no zip end record")
    data = bytearray(seeds["img.npz"].read_bytes())
    start, length = member_span(seeds["img.npz"], "program.npy")
    data[start + length // 2] ^= 1
    (tmp_path / "crc.npz").write_bytes(data)
    refused(image.load, tmp_path / "crc.npz", "member 'program' is unreadable (Bad CRC-32")
    monkeypatch.setattr(npyfile, "MAX_ARRAY_BYTES", 256)
    refused(image.load, seeds["img.npz"], "declares")


def test_image_members(seeds, tmp_path):
    img = seeds["img.npz"]
    refused(image.load, write_image(tmp_path / "a.npz", img, seg_len=None),
            "not an FDPU image: missing member(s) seg_len; an image has info, program")
    refused(image.load, write_image(tmp_path / "b.npz", img, extra=np.zeros(1)),
            "unexpected member(s) 'extra' in an FDPU image")
    raw = {i.filename: zipfile.ZipFile(img).read(i) for i in zipfile.ZipFile(img).infolist()}
    write_zip(tmp_path / "c.npz", {**raw, "notes.txt": b"hi"})
    refused(image.load, tmp_path / "c.npz", "unexpected member(s) 'notes.txt'")


@pytest.mark.parametrize("info, match", [
    (np.array(["{}", "{}"]), "member 'info' must be one string (a JSON object), got an array"),
    (np.array(3), "member 'info': dtype int64 is not allowed; allowed: string"),
    (np.array("{'format': 1"), "member 'info' is not valid JSON (JSONDecodeError: Expecting"),
    (np.array("[1, 2]"), "member 'info' holds a JSON array; it must be a JSON object"),
    (np.array("[" * 100000 + "]" * 100000), "member 'info' is not valid JSON (RecursionError"),
    (np.array(json.dumps({"format": "fdpu-image-v0"})),
     "member 'info': format tag 'fdpu-image-v0', expected 'fdpu-image-v1'"),
])
def test_image_info_that_is_no_json_object(seeds, tmp_path, info, match):
    refused(image.load, write_image(tmp_path / "i.npz", seeds["img.npz"], **{"info": info}),
            match)


@pytest.mark.parametrize("change, match", [
    (dict(contexts=1.7), "member 'info': contexts must be an integer in 1..1048576, got 1.7"),
    (dict(contexts=True), "contexts must be an integer in 1..1048576, got True"),
    (dict(contexts=2.0), "contexts must be an integer in 1..1048576, got 2.0"),
    (dict(contexts=0), "contexts must be an integer in 1..1048576, got 0"),
    (dict(contexts=2 ** 20 + 1), "got 1048577"),
    (dict(contexts="2"), "got '2'"),
    (dict(window=1.5), "member 'info': window must be an integer in 1..2 (operand_depth), got "
                       "1.5"),
    (dict(window=3), "window must be an integer in 1..2 (operand_depth), got 3"),
    (dict(ends_per_context=2.0), "ends_per_context must be an integer in 1..32, got 2.0"),
    (dict(ends_per_context=1), "ends_per_context is 1 but the program has 2 END"),
    (dict(ctx_base=-1), "ctx_base must be a non-negative integer"),
    (dict(ctx_base=2 ** 32 - 1), "ctx_base + contexts below 2**32"),
    (dict(meta=[1]), "member 'info': meta must be a dict (a JSON object), got list"),
    (dict(extra=1), "member 'info': unknown key(s) 'extra'; allowed: format, params"),
    (dict(params=[1]), "member 'info': params is a JSON array; it must be an object"),
    (dict(params={"rows": 1.0}), "member 'info': params.rows must be an integer, got 1.0"),
    (dict(params={"rows": True}), "params.rows must be an integer, got True"),
    (dict(params={"rows": 17}), "member 'info': params: rows must be an integer in 1..16"),
    (dict(params={"lanes": 4}), "member 'info': params has unknown key 'lanes'; allowed: rows"),
])
def test_image_info_values(seeds, tmp_path, change, match):
    refused(image.load, write_image(tmp_path / "i.npz", seeds["img.npz"], change), match)


def test_image_info_keys_missing(seeds, tmp_path):
    members = members_of(seeds["img.npz"])
    info = json.loads(str(members["info"]))
    del info["window"]
    members["info"] = np.array(json.dumps(info))
    np.savez(tmp_path / "i.npz", **members)
    refused(image.load, tmp_path / "i.npz", "member 'info': missing key(s) window")


def test_image_program_regs_and_preloads(seeds, tmp_path):
    img = seeds["img.npz"]
    program = members_of(img)["program"]

    def bad(match, **arrays):
        refused(image.load, write_image(tmp_path / "i.npz", img, **arrays), match)

    bad("member 'program': dtype int64 is not allowed; allowed: unsigned integer",
        program=program.astype(np.int64))
    bad("image program has shape (1, 1, 32, 2) uint32; a 1x1 array with 32 slots needs uint64",
        program=program.astype(np.uint32))
    bad("image program has shape (1, 1, 16, 2) uint64", program=program[:, :, :16])
    word = program.copy()
    word[0, 0, 30, 0] = 63
    bad("program slot (0,0).30: unknown opcode 63", program=word)
    bad("image registers have shape (1, 1, 3) uint64, expected uint64 (1, 1, 16)",
        regs=np.zeros((1, 1, 3), np.uint64))
    bad("member 'regs': dtype float64 is not allowed", regs=np.zeros((1, 1, 16)))
    bad("member 'preloads' must be a table of N rows of 4 integers (x, y, slot, operand), got "
        "shape (1, 3)", preloads=np.zeros((1, 3), np.int64),
        preload_values=np.zeros(1, np.uint64))
    bad("member 'preload_values' has shape (2,) but member 'preloads' has 1 rows",
        preloads=np.zeros((1, 4), np.int64), preload_values=np.zeros(2, np.uint64))
    bad("member 'preloads': dtype float64 is not allowed; allowed: signed integer",
        preloads=np.zeros((1, 4)), preload_values=np.zeros(1, np.uint64))
    bad("member 'preloads' has 193 rows; at most 192 fit the array",
        preloads=np.zeros((193, 4), np.int64), preload_values=np.zeros(193, np.uint64))
    bad("preload 0, (0,0).31.0, names no token operand of a configured instruction",
        preloads=np.array([[0, 0, 31, 0]]), preload_values=np.zeros(1, np.uint64))
    bad("preload 0 value -1 does not fit 64 bits",
        preloads=np.array([[0, 0, 1, 0]]), preload_values=np.array([-1]))


def test_image_segment_tables(seeds, tmp_path, monkeypatch):
    img = seeds["img.npz"]
    m = members_of(img)
    addr, length, data = m["seg_addr"], m["seg_len"], m["seg_data"]
    assert len(addr) >= 2 and length[0] >= 2
    dbuf = json.loads(str(m["info"]))["params"]["dbuf_bytes"]

    def bad(match, **arrays):
        return refused(image.load, write_image(tmp_path / "i.npz", img, **arrays), match)

    overlap = addr.copy()
    overlap[1] = addr[0] + length[0] - 1
    bad(f"memory segment 1 at {overlap[1]:#x} ({length[1]} bytes) overlaps segment 0, which "
        f"ends at {addr[0] + length[0] - 1:#x}", seg_addr=overlap)
    bad(f"member 'seg_addr' entry 1 ({addr[0]:#x}) is not above entry 0 ({addr[1]:#x}); "
        "segments are listed by ascending address, each once", seg_addr=addr[[1, 0, 2, 3]])
    same = addr.copy()
    same[1] = same[0]
    bad("member 'seg_addr' entry 1", seg_addr=same)
    bad(f"member 'seg_len' totals {data.size - 5:,} bytes but member 'seg_data' holds "
        f"{data.size:,}; they must agree", seg_len=length - np.eye(len(length), dtype=int)[0] * 5)
    bad(f"member 'seg_len' totals {data.size:,} bytes but member 'seg_data' holds "
        f"{data.size - 1:,}", seg_data=data[:-1])
    zero = length.copy()
    zero[2] = 0
    bad("member 'seg_len' entry 2 is 0; a segment holds at least 1 byte", seg_len=zero)
    bad("member 'seg_len' entry 0 is 9,999; longer than the 312 bytes of member 'seg_data'",
        seg_len=np.array([9999, 1, 1, 1]))
    negative = addr.copy()
    negative[0] = -8
    bad("member 'seg_addr' entry 0 is -8; addresses are non-negative", seg_addr=negative)
    bad("member 'seg_addr' has 4 entries but member 'seg_len' has 3", seg_len=length[:3])
    bad("member 'seg_addr' must be 1-D, got shape (2, 2)", seg_addr=addr.reshape(2, 2))
    bad("member 'seg_addr': dtype float64 is not allowed", seg_addr=addr.astype(float))
    bad("member 'seg_data' must be 1-D uint8 (the segments' bytes), got uint16",
        seg_data=data.view(np.uint16))
    four = dict(seg_len=np.array([4]), seg_data=np.zeros(4, np.uint8))
    bad(f"memory segment 0 at {dbuf - 2:#x} (4 bytes) crosses a Dbuf boundary",
        seg_addr=np.array([dbuf - 2]), **four)
    bad("memory segment 0 at 0x7ffffe (4 bytes) is outside the Dbufs (0..0x7fffff)",
        seg_addr=np.array([4 * dbuf - 2]), **four)
    monkeypatch.setattr(image, "MAX_SEGMENTS", 3)
    bad("member 'seg_addr' lists 4 segments; at most 3 are allowed")


def test_good_image_still_loads_and_disassembles(seeds, capsys):
    img = image.load(seeds["img.npz"])
    assert img.contexts >= 1 and len(img.segments) >= 2
    assert sw.cli.main(["disasm", str(seeds["img.npz"])]) == 0
    assert "; FDPU image: 1x1 PEs, 32 slots" in capsys.readouterr().out


# -- random corruption through the command line --------------------------------------------------

#: A mutation: up to 4 bytes XOR-ed with a non-zero byte, or the file cut short.
MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 1 << 32), st.integers(1, 255)),
                                        min_size=1, max_size=4)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 32)))

LOADERS = {
    "npy": ("w.npy", ["run", "--weights", "{F}", "--rows", "1", "--cols", "1", "--slots", "32"]),
    "fdcsr": ("w.npz", ["fdcsr", "decode", "{F}", "-o", "{OUT}"]),
    "image": ("img.npz", ["disasm", "{F}"]),
}


def mutate(data, mutation):
    """Return ``data`` with ``mutation`` (see :data:`MUTATIONS`) applied."""
    kind, arg = mutation
    if kind == "cut":
        return data[:arg % len(data)]
    out = bytearray(data)
    for at, xor in arg:
        out[at % len(out)] ^= xor
    return bytes(out)


def run_cli(capsys, loader, path):
    """Run the loader's command on ``path``: exit 0 (warnings allowed), or 2 with one
    ``fdpu: error:`` line."""
    argv = [a.format(F=path, OUT=path.with_name("out.npy")) for a in LOADERS[loader][1]]
    status = sw.cli.main(argv)
    _, err = capsys.readouterr()
    assert status in (0, 2), (status, err)
    if status == 2:
        assert err.startswith("fdpu: error: ") and err.count("\n") == 1, err
    else:
        assert all(line.startswith("fdpu: warning: ") for line in err.splitlines()), err


def corrupt_file(seeds, capsys, loader, mutation):
    name = LOADERS[loader][0]
    path = seeds[name].with_name("mutated" + os.path.splitext(name)[1])
    path.write_bytes(mutate(seeds[name].read_bytes(), mutation))
    run_cli(capsys, loader, path)


def corrupt_member(seeds, capsys, loader, index, mutation):
    """Mutate one member of an archive and write it again with valid CRCs: the ``.npy`` and
    table checks, not the zip's, must catch it."""
    name = LOADERS[loader][0]
    with zipfile.ZipFile(seeds[name]) as z:
        raw = {i.filename: z.read(i) for i in z.infolist()}
    key = sorted(raw)[index % len(raw)]
    raw[key] = mutate(raw[key], mutation)
    path = seeds[name].with_name("rezipped.npz")
    write_zip(path, raw)
    run_cli(capsys, loader, path)


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
FUZZ_LONG = settings(FUZZ, max_examples=2000)


@pytest.mark.parametrize("loader", list(LOADERS))
@FUZZ
@given(mutation=MUTATIONS)
def test_corrupt_files_end_in_one_error_line(seeds, capsys, loader, mutation):
    corrupt_file(seeds, capsys, loader, mutation)


@pytest.mark.parametrize("loader", ["fdcsr", "image"])
@FUZZ
@given(index=st.integers(0, 15), mutation=MUTATIONS)
def test_corrupt_members_end_in_one_error_line(seeds, capsys, loader, index, mutation):
    corrupt_member(seeds, capsys, loader, index, mutation)


def test_a_string_member_past_unicode_ends_in_one_error_line(seeds, capsys):
    # A bit flip that makes a UTF-32 code unit of the image's JSON member no character (the
    # case a fuzz run found: Python's JSON scanner failed with a SystemError on it).
    corrupt_member(seeds, capsys, "image", 0, ("flip", [(1471, 1)]))


@pytest.mark.slow
@pytest.mark.parametrize("loader", list(LOADERS))
@FUZZ_LONG
@given(mutation=MUTATIONS)
def test_corrupt_files_end_in_one_error_line_long(seeds, capsys, loader, mutation):
    corrupt_file(seeds, capsys, loader, mutation)


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["fdcsr", "image"])
@FUZZ_LONG
@given(index=st.integers(0, 15), mutation=MUTATIONS)
def test_corrupt_members_end_in_one_error_line_long(seeds, capsys, loader, index, mutation):
    corrupt_member(seeds, capsys, loader, index, mutation)


def test_text_inputs_refuse_pipes_and_binary_files(tmp_path, capsys):
    """Sweep files and TestFloat vectors: a named pipe is refused at once (never waited on), a
    binary file is not TOML."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_user_error(capsys, "sweep", "--file", fifo, "--out", tmp_path / "s",
                      match="fifo: not a regular file; a sweep file is a TOML text file")
    assert_user_error(capsys, "fpu-check", "--sim", "icarus", "--op", "fma", "--vectors", fifo,
                      match="is a named pipe (FIFO), not a regular file; TestFloat vectors")
    np.save(tmp_path / "w.npy", np.ones(3))
    assert_user_error(capsys, "sweep", "--file", tmp_path / "w.npy", "--out", tmp_path / "s",
                      match="w.npy: not valid TOML (UTF-8 text)")
    assert_user_error(capsys, "fdcsr", "stats", "--layer", "alexnet-fc8", "--seed", -1,
                      match="--seed must be a non-negative integer, got -1")
