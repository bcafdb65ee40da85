"""Train a small CNN on the digits in PyTorch and export it with `torch.onnx.export`, as a PyTorch user would.

Run as its own process (`python tests/export/torch_digits.py OUT_DIR`) so PyTorch never
shares a process with TensorFlow. Writes into OUT_DIR: `model.onnx` (+ its external
data file, torch's default), `calibration.npz` (training rows), `labelled.npz` (held-out
rows + labels) and `torch-outputs.npz` (PyTorch's own logits on the held-out rows).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from export.data import load_digits_splits

EPOCHS = 10


def build() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def main(out: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # on shared cores more threads only fight each other
    splits = load_digits_splits()
    to_nchw = lambda images: np.ascontiguousarray(images.transpose(0, 3, 1, 2))  # noqa: E731
    x_train, y_train = torch.from_numpy(to_nchw(splits.x_train)), torch.from_numpy(splits.y_train).long()
    x_test = to_nchw(splits.x_test)
    net = build()
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-3)
    for _ in range(EPOCHS):
        order = torch.randperm(len(x_train))
        for start in range(0, len(order), 64):
            batch = order[start : start + 64]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
    net.eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(x_test)).numpy()
    out.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        net,
        (torch.from_numpy(x_test[:2]),),
        str(out / "model.onnx"),
        input_names=["image"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch", min=1)},),
        opset_version=18,
        dynamo=True,
    )
    np.savez(out / "calibration.npz", image=to_nchw(splits.x_train))
    np.savez(out / "labelled.npz", image=x_test, labels=splits.y_test)
    np.savez(out / "torch-outputs.npz", logits=logits, accuracy=np.array((logits.argmax(1) == splits.y_test).mean()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
