"""Tests of ``fdpu fdcsr`` and ``fdpu layers`` through :func:`sw.cli`: outputs, files,
JSON, and one-line errors with exit status 2 for bad input."""

import json

import numpy as np
import pytest
from cliutil import assert_user_error, run

import sw.cli
from sw.compiler import fdcsr


def test_encode_decode_round_trip(tmp_path, capsys):
    x = np.zeros((3, 21), dtype=np.float16)
    x[0, 0], x[1, 17], x[2, 20] = 1.5, -0.0, np.inf
    np.save(tmp_path / "w.npy", x)
    status, out, err = run(capsys, "fdcsr", "encode", tmp_path / "w.npy")
    assert status == 0 and "w.npz" in out and "shape 3 x 21, nnz 2" in out   # -0.0 is a zero
    assert err.startswith("fdpu: warning: ") and "1 NaN or infinite value(s) stored" in err
    enc = fdcsr.load(tmp_path / "w.npz")
    assert enc.nnz == 2
    status, out, _ = run(capsys, "fdcsr", "decode", tmp_path / "w.npz", "-o", tmp_path / "d.npy")
    assert status == 0 and "d.npy" in out
    back = np.load(tmp_path / "d.npy")
    x[1, 17] = 0.0                                                # decoded as +0.0
    assert back.dtype == np.float16 and np.array_equal(back.view(np.uint16), x.view(np.uint16))


def test_encode_casts_float64_and_names_output(tmp_path, capsys):
    np.save(tmp_path / "w.npy", np.linspace(-1, 1, 40))
    status, out, _ = run(capsys, "fdcsr", "encode", tmp_path / "w.npy", "-o", tmp_path / "o.npz")
    assert status == 0 and "o.npz" in out
    assert fdcsr.load(tmp_path / "o.npz").shape == (40,)


def test_stats_of_npy_npz_and_layer(tmp_path, capsys):
    x = np.zeros((2, 32), dtype=np.float32)
    x[:, :8] = 1
    np.save(tmp_path / "w.npy", x)
    status, out, _ = run(capsys, "fdcsr", "stats", tmp_path / "w.npy", "--json",
                         tmp_path / "s.json")
    assert status == 0
    for text in ("2 x 32", "non-zeros (nnz)", "16", "0.2500", "values bytes", "32",
                 "colidx bytes", "rowoff bytes", "FD-CSR total bytes", "56",
                 "dense binary16 bytes", "128", "0.4375"):
        assert text in out, text
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["file"].endswith("w.npy") and s["total_bytes"] == 56 and s["rowoff_bytes"] == 16
    fdcsr.encode(x).save(tmp_path / "w.npz")
    status, out2, _ = run(capsys, "fdcsr", "stats", tmp_path / "w.npz")
    body = [line for line in out.splitlines() if "│" in line]
    assert status == 0 and len(body) == 11
    assert [line for line in out2.splitlines() if "│" in line] == body
    status, out, _ = run(capsys, "fdcsr", "stats", "--layer", "vgg16-fc8", "--seed", 3,
                         "--json", tmp_path / "l.json")
    assert status == 0 and "1000 x 4096" in out and "942,080" in out
    s = json.loads((tmp_path / "l.json").read_text())
    assert s["layer"] == "vgg16-fc8" and s["seed"] == 3 and s["nnz"] == 942_080
    assert s["total_bytes"] == 2 * 942_080 + 6 * 1000 * 256


def test_stats_layer_density_override(capsys):
    status, out, _ = run(capsys, "fdcsr", "stats", "--layer", "alexnet-fc8", "--density", 0.5)
    assert status == 0 and "2,048,000" in out and "0.5000" in out


def test_layers_table(tmp_path, capsys):
    status, out, _ = run(capsys, "layers", "--json", tmp_path / "z.json")
    assert status == 0
    for text in ("alexnet-fc6", "vgg16-fc6", "25,088", "102,760,448", "205.52", "23%"):
        assert text in out, text
    z = json.loads((tmp_path / "z.json").read_text())
    assert [r["name"] for r in z] == ["alexnet-fc6", "alexnet-fc7", "alexnet-fc8",
                                      "vgg16-fc6", "vgg16-fc7", "vgg16-fc8"] + [
        f"alexnet-conv{i}" for i in range(1, 6)]
    assert "fdcsr" not in z[0] and "conv" not in z[0]
    assert z[-1]["conv"] == dict(shape="256 x 384 x 3 x 3, stride 1 x 1, pads 1,1,1,1",
                                 input=[384, 13, 13], output=[256, 13, 13])


def test_layers_stats(tmp_path, capsys):
    status, out, _ = run(capsys, "layers", "--stats", "vgg16-fc8", "alexnet-fc8", "--json",
                         tmp_path / "z.json")
    assert status == 0
    assert "vgg16-fc8" in out and "alexnet-fc8" in out and "vgg16-fc6" not in out
    assert "942,080" in out and "2.40x" in out and "2.29x" in out
    z = json.loads((tmp_path / "z.json").read_text())
    assert z[0]["fdcsr"]["nnz"] == 942_080 and z[1]["fdcsr"]["ratio"] == pytest.approx(0.4375)


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    missing = tmp_path / "missing.npy"
    assert_user_error(capsys, "fdcsr", "encode", missing, match="No such file")
    assert_user_error(capsys, "fdcsr", "decode", missing, match="No such file")
    assert_user_error(capsys, "fdcsr", "stats", missing, match="No such file")
    np.save(tmp_path / "i.npy", np.arange(4))
    assert_user_error(capsys, "fdcsr", "encode", tmp_path / "i.npy", match="dtype")
    assert_user_error(capsys, "fdcsr", "decode", tmp_path / "i.npy",
                      match="not an FD-CSR .npz file")
    np.savez(tmp_path / "f.npz", a=np.zeros(2))
    assert_user_error(capsys, "fdcsr", "decode", tmp_path / "f.npz", match="missing member")
    assert_user_error(capsys, "fdcsr", "stats", tmp_path / "f.npz", match="missing member")
    assert_user_error(capsys, "fdcsr", "stats", match="exactly one of IN")
    assert_user_error(capsys, "fdcsr", "stats", tmp_path / "i.npy", "--layer", "vgg16-fc8",
                      match="exactly one of IN")
    assert_user_error(capsys, "fdcsr", "stats", tmp_path / "i.npy", "--density", 0.5,
                      match="--density applies only with --layer")
    assert_user_error(capsys, "fdcsr", "stats", "--layer", "vgg16-fc8", "--density", 1.5,
                      match="density must be in [0, 1], got 1.5")
    assert_user_error(capsys, "fdcsr", "stats", "--layer", "lenet", match="known layers:")
    assert_user_error(capsys, "fdcsr", "stats", "--layer", "vgg16-fc8", "--seed", -1,
                      match="seed must be a non-negative integer")
    assert_user_error(capsys, "layers", "lenet", match="unknown layer 'lenet'")
    assert_user_error(capsys, "layers", "--stats", "--seed", -2,
                      match="--seed must be a non-negative integer")


@pytest.mark.parametrize("argv", [["fdcsr", "--help"], ["fdcsr", "encode", "--help"],
                                  ["fdcsr", "decode", "--help"], ["fdcsr", "stats", "--help"],
                                  ["layers", "--help"]])
def test_help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        sw.cli.main(argv)
    assert exc.value.code == 0
    assert "usage: fdpu" in capsys.readouterr().out


def test_encode_refuses_values_beyond_binary16(tmp_path, capsys):
    """A finite float32 value beyond binary16 would silently become infinity: refused."""
    np.save(tmp_path / "big.npy", np.array([[1.0, 0.0], [0.0, 1e6]], np.float32))
    assert_user_error(capsys, "fdcsr", "encode", tmp_path / "big.npy",
                      match="1 finite value(s) beyond the binary16 range (|x| <= 65504), the "
                            "first 1e+06 at index (1, 1)")
    assert not (tmp_path / "big.npz").exists()
