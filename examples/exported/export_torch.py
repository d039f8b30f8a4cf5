"""Train a small torch MLP on scikit-learn's digits and export it with ``torch.onnx.export``,
as a user would, with the exporter's defaults and with ``dynamo=False``.

    pip install torch onnx onnxscript onnxconverter-common scikit-learn   # here only
    python examples/exported/export_torch.py

The model takes the digits as images (``N x 1 x 8 x 8``) and is ``Flatten, Linear(64, 32),
ReLU, Linear(32, 10), Softmax``.  Writes, beside this script:

* ``torch_digits.onnx`` and ``torch_digits.onnx.data``: the default exporter (its weights in
  external data, as it writes them);
* ``torch_digits_legacy.onnx``: ``dynamo=False`` (the TorchScript exporter, weights inline);
* ``torch_digits_fp16.onnx``: the legacy file through onnxconverter-common's float16 converter
  (``keep_io_types=True``: float16 weights, ``Cast`` nodes at the input and the output);
* ``torch_digits_x.npy`` / ``torch_digits_y.npy``: 120 held-out images (float32) and labels.
"""

from pathlib import Path

import numpy as np
import onnx
import torch
from onnxconverter_common import float16
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent


def main():
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=120, random_state=0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for _ in range(300):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
    model = torch.nn.Sequential(*model, torch.nn.Softmax(dim=1)).eval()
    sample = torch.from_numpy(xte[:1])
    batch = {"input": {0: "N"}, "output": {0: "N"}}
    torch.onnx.export(model, (sample,), HERE / "torch_digits.onnx", input_names=["input"],
                      output_names=["output"], dynamic_axes=batch, external_data=True)
    torch.onnx.export(model, (sample,), HERE / "torch_digits_legacy.onnx", dynamo=False,
                      input_names=["input"], output_names=["output"], dynamic_axes=batch)
    legacy = onnx.load(HERE / "torch_digits_legacy.onnx")
    onnx.save(float16.convert_float_to_float16(legacy, keep_io_types=True),
              HERE / "torch_digits_fp16.onnx")
    np.save(HERE / "torch_digits_x.npy", xte)
    np.save(HERE / "torch_digits_y.npy", yte.astype(np.int64))


if __name__ == "__main__":
    main()
