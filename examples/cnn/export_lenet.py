"""Train, prune and export a small LeNet-style CNN on scikit-learn's digits, as a user would.

    pip install torch onnx onnxscript scikit-learn      # here only; the tests do not need torch
    python examples/cnn/export_lenet.py

The network takes the digits as images (``N x 1 x 8 x 8``, values in 0..1):

    Conv(1 -> 8, 3 x 3, pad 1) -> ReLU -> MaxPool(2)             # 8 x 4 x 4
    Conv(8 -> 16, 3 x 3, pad 1) -> BatchNorm -> ReLU -> MaxPool(2)  # 16 x 2 x 2
    Flatten -> Linear(64, 32) -> ReLU -> Linear(32, 10)

It is trained (Adam, 400 full-batch steps), magnitude-pruned layer by layer to the densities of
:data:`DENSITY` and fine-tuned with the pruned weights held at zero, then exported in eval mode
(both exporters fold the eval-mode BatchNorm into the convolution themselves; ``fdpu net``
folds an ONNX ``BatchNormalization`` that a model still has).
Writes, beside this script:

* ``lenet_digits.onnx``: the default exporter (``torch.onnx.export``, its weights inline:
  ``external_data=False``);
* ``lenet_digits_legacy.onnx``: ``dynamo=False`` (the TorchScript exporter);
* ``lenet_x.npy`` / ``lenet_y.npy``: the 360 held-out images (float32) and their labels;
* ``lenet.json``: the float32 test accuracy of the pruned network and each layer's density.
"""

import json
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent

#: Fraction of each layer's weights kept by pruning (conv1, conv2, fc1, fc2).
DENSITY = {"0": 0.75, "3": 0.5, "8": 0.3, "10": 0.5}


def net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def train(model, x, y, steps, masks=None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if masks:
            with torch.no_grad():
                for name, mask in masks.items():
                    model.get_parameter(name).mul_(mask)
    model.eval()


def prune(model):
    """Zero the smallest weights of each layer of :data:`DENSITY`; return the masks."""
    masks = {}
    with torch.no_grad():
        for index, keep in DENSITY.items():
            w = model.get_parameter(f"{index}.weight")
            k = int(round(keep * w.numel()))
            cut = w.abs().flatten().kthvalue(w.numel() - k).values if k < w.numel() else -1
            masks[f"{index}.weight"] = (w.abs() > cut).to(w.dtype)
            w.mul_(masks[f"{index}.weight"])
    return masks


def main():
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, random_state=0)
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    model = net()
    train(model, xt, yt, 400)
    masks = prune(model)
    train(model, xt, yt, 200, masks)
    with torch.no_grad():
        acc = float((model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean())
    sample = torch.from_numpy(xte[:1])
    batch = {"input": {0: "N"}, "output": {0: "N"}}
    torch.onnx.export(model, (sample,), HERE / "lenet_digits.onnx", input_names=["input"],
                      output_names=["output"], dynamic_axes=batch, external_data=False)
    torch.onnx.export(model, (sample,), HERE / "lenet_digits_legacy.onnx", dynamo=False,
                      input_names=["input"], output_names=["output"], dynamic_axes=batch)
    np.save(HERE / "lenet_x.npy", xte)
    np.save(HERE / "lenet_y.npy", yte.astype(np.int64))
    density = {name: float((m != 0).float().mean()) for name, m in masks.items()}
    (HERE / "lenet.json").write_text(json.dumps(dict(
        test_images=len(yte), accuracy_float32=acc, density=density,
        torch=torch.__version__), indent=1) + "\n")
    print(f"float32 test accuracy {acc:.2%}; densities {density}")


if __name__ == "__main__":
    main()
