"""Train, prune and export the example network: a 64 -> 256 -> 128 -> 10 ReLU MLP on
scikit-learn's digits.

Usage::

    pip install -e .[nets]                       # scikit-learn and onnx
    python scripts/train_digits.py               # writes examples/digits/ (see below)

What it does, all seeded (``--seed``, default 0):

1. splits the 1,797 8 x 8 digit images (pixels 0..16, scaled to 0..1) into 1,437 training and
   360 test images (stratified);
2. trains ``MLPClassifier(hidden_layer_sizes=(256, 128))`` (ReLU, Adam);
3. magnitude-prunes each layer to the paper's kind of density (9 %, 9 %, 25 % of the weights
   kept: ``sw.compiler.prune.prune``), then retrains with the pruned weights held at zero
   (a few epochs of ``partial_fit``, the mask re-applied after each);
4. writes ``examples/digits/digits.npz`` in the network layout of ``sw/compiler/net.py``
   (``W0..W2`` as ``K x C``, ``b0..b2``, ``act``), ``digits.onnx`` (the same network as
   ``Gemm`` (``transB = 1``) and ``Relu`` nodes), ``test_x.npy`` (360 x 64 float16) and
   ``test_y.npy`` (the labels), and prints the float32 test accuracy before and after pruning.
"""

import argparse
import os
import sys
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sw.compiler.prune import prune  # noqa: E402

#: Fraction of each layer's weights kept.
DENSITIES = (0.09, 0.09, 0.25)


def _masks(clf):
    return [prune(w, d) != 0 for w, d in zip(clf.coefs_, DENSITIES)]


def _apply(clf, masks):
    for w, m in zip(clf.coefs_, masks):
        w[~m] = 0.0


def _onnx(path, layers):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, value = [], [], "x"
    for i, (w, b, act) in enumerate(layers):
        out = f"fc{i}" if act else "y"
        inits += [numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [value, f"W{i}", f"b{i}"], [out], transB=1,
                                      name=f"fc{i}"))
        value = out
        if act:
            value = f"relu{i}"
            nodes.append(helper.make_node("Relu", [out], [value], name=f"relu{i}"))
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", layers[0][0].shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", layers[-1][0].shape[0]])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "examples", "digits"))
    args = ap.parse_args(argv)
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, digits.target, test_size=360,
                                          random_state=args.seed, stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(256, 128), max_iter=300, random_state=args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(xtr, ytr)
    dense_acc = clf.score(xte, yte)
    masks = _masks(clf)
    _apply(clf, masks)
    pruned_acc = clf.score(xte, yte)
    for _ in range(60):                         # retrain with the pruned weights held at 0
        clf.partial_fit(xtr, ytr)
        _apply(clf, masks)
    acc = clf.score(xte, yte)
    layers = [(w.T.astype(np.float16), b.astype(np.float16), i < len(clf.coefs_) - 1)
              for i, (w, b) in enumerate(zip(clf.coefs_, clf.intercepts_))]
    os.makedirs(args.out, exist_ok=True)
    np.savez(os.path.join(args.out, "digits.npz"),
             **{f"W{i}": w for i, (w, _, _) in enumerate(layers)},
             **{f"b{i}": b for i, (_, b, _) in enumerate(layers)},
             act=np.array(["relu" if a else "none" for _, _, a in layers]))
    _onnx(os.path.join(args.out, "digits.onnx"), layers)
    np.save(os.path.join(args.out, "test_x.npy"), xte.astype(np.float16))
    np.save(os.path.join(args.out, "test_y.npy"), yte.astype(np.int64))
    kept = [int(np.count_nonzero(w)) for w, _, _ in layers]
    print(f"digits MLP 64-256-128-10, seed {args.seed}: float32 test accuracy {dense_acc:.2%} "
          f"dense, {pruned_acc:.2%} just pruned, {acc:.2%} pruned and retrained; weights kept "
          f"{' / '.join(f'{k:,} of {w.size:,}' for k, (w, _, _) in zip(kept, layers))}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
