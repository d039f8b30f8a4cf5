"""Train three small scikit-learn MLPs and export them with skl2onnx, as a user would.

    pip install scikit-learn skl2onnx        # needed here only; the .onnx files are shipped
    python examples/exported/export_sklearn.py

Writes, beside this script, for each model ``NAME.onnx`` (as ``skl2onnx.to_onnx`` writes it:
nothing edited) and ``NAME_x.npy`` / ``NAME_y.npy`` (held-out inputs and labels or targets;
the model without ZipMap uses ``digits_clf``'s):

* ``digits_clf``: ``MLPClassifier`` on scikit-learn's digits (10 classes, 64 -> 32 -> 10),
  probabilities through ``ZipMap``;
* ``digits_clf_nozipmap``: the same model exported with ``options={"zipmap": False}``;
* ``cancer_bin``: a binary ``MLPClassifier`` on the breast-cancer set (30 -> 16 -> 1);
* ``diabetes_reg``: ``MLPRegressor`` on the diabetes set (10 -> 16 -> 1).

The inputs are scaled (``StandardScaler``, fitted on the training rows) and stored as float32.
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.preprocessing import StandardScaler
from skl2onnx import to_onnx

HERE = Path(__file__).resolve().parent


def _split(x, y, n_test):
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=n_test, random_state=0)
    scale = StandardScaler().fit(xtr)
    return (scale.transform(xtr).astype(np.float32), scale.transform(xte).astype(np.float32),
            ytr, yte)


def _save(name, model, xte, yte=None, **options):
    onx = to_onnx(model, xte[:1], target_opset=17, **options)
    (HERE / f"{name}.onnx").write_bytes(onx.SerializeToString())
    if yte is not None:
        np.save(HERE / f"{name}_x.npy", xte)
        np.save(HERE / f"{name}_y.npy", yte)


def main():
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = _split(x, y, 120)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=400, random_state=0).fit(xtr, ytr)
    _save("digits_clf", clf, xte, yte.astype(np.int64))
    _save("digits_clf_nozipmap", clf, xte, options={id(clf): {"zipmap": False}})
    x, y = load_breast_cancer(return_X_y=True)
    xtr, xte, ytr, yte = _split(x, y, 80)
    _save("cancer_bin", MLPClassifier(hidden_layer_sizes=(16,), max_iter=600,
                                      random_state=0).fit(xtr, ytr), xte,
          yte.astype(np.int64))
    x, y = load_diabetes(return_X_y=True)
    xtr, xte, ytr, yte = _split(x, y, 60)
    reg = MLPRegressor(hidden_layer_sizes=(16,), max_iter=2000, random_state=0).fit(xtr, ytr)
    _save("diabetes_reg", reg, xte, yte.astype(np.float32))


if __name__ == "__main__":
    main()
