"""Both zeros count as zero: FD-CSR, weights made or loaded, nnz; underflow is reported."""

import json

import numpy as np

from cliutil import run
from sw.compiler import fdcsr, layers, net
from sw.spec import fp16


def _masked(k=8, c=32, seed=1):
    """Weights pruned the way users do it, W *= mask: the negative pruned ones become -0.0."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, c)).astype(np.float32)
    mask = rng.random((k, c)) < 0.25
    return (w * mask).astype(np.float16), int(mask.sum())


def test_negative_zero_is_not_stored():
    w, kept = _masked()
    assert np.count_nonzero(w.view(np.uint16) == fp16.NEG_ZERO) > 0       # the trap is there
    enc = fdcsr.encode(w)
    assert enc.nnz == kept
    back = enc.decode()
    assert np.count_nonzero(back.view(np.uint16) == fp16.NEG_ZERO) == 0    # decodes as +0.0
    assert np.array_equal(back, w)                                         # equal as numbers


def test_weights_never_hold_negative_zero(tmp_path):
    w, kept = _masked()
    np.save(tmp_path / "w.npy", w)
    loaded = layers.load_weights(tmp_path / "w.npy")
    assert np.count_nonzero(loaded.view(np.uint16)) == kept
    made = layers.make_weights((16, 64), 0.5, seed=3)
    assert not np.any(made.view(np.uint16) == fp16.NEG_ZERO)
    d = net.Dense(w, name="t")
    assert np.count_nonzero(d.weights.view(np.uint16)) == kept


def test_run_reports_true_nnz_and_underflow(tmp_path, capsys):
    w, kept = _masked()
    w32 = w.astype(np.float32)
    w32[0, 0] = 1e-9                                   # binary16 rounds it to zero
    np.save(tmp_path / "w.npy", w32)
    status, out, err = run(capsys, "run", "--weights", tmp_path / "w.npy", "--rows", 1,
                           "--cols", 1, "--slots", 32, "--json", tmp_path / "r.json")
    assert status == 0, err
    assert err.startswith("fdpu: warning: ") and "1 non-zero weight(s) round to zero" in err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["nnz"] == kept - (1 if w[0, 0] != 0 else 0)


def test_user_weights_without_inputs_are_flagged(tmp_path, capsys):
    np.save(tmp_path / "w.npy", np.ones((4, 16), np.float16))
    status, _, err = run(capsys, "run", "--weights", tmp_path / "w.npy", "--rows", 1, "--cols",
                         1, "--slots", 32)
    assert status == 0 and "runs on 1 seeded synthetic input row(s) (--seed 0)" in err
