"""``MNIST(root, train, download, transform)`` reading the uncompressed IDX files under ``root/MNIST/raw`` (the layout
torchvision reads: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-...``); never downloads.
``data`` is uint8 [n, 28, 28], ``targets`` int64 [n]; an item is (transform(image), int label)."""

import os

import numpy as np
import torch


def _idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic, count = int.from_bytes(raw[0:4], "big"), int.from_bytes(raw[4:8], "big")
    if magic == 2051:
        rows, cols = int.from_bytes(raw[8:12], "big"), int.from_bytes(raw[12:16], "big")
        return np.frombuffer(raw, np.uint8, offset=16).reshape(count, rows, cols)
    if magic == 2049:
        return np.frombuffer(raw, np.uint8, offset=8)
    raise ValueError(f"{path}: not an IDX image or label file (magic {magic})")


class MNIST(torch.utils.data.Dataset):
    def __init__(self, root, train=True, download=False, transform=None, target_transform=None):
        prefix = "train" if train else "t10k"
        raw = os.path.join(root, "MNIST", "raw")
        self.data = torch.from_numpy(_idx(os.path.join(raw, f"{prefix}-images-idx3-ubyte")).copy())
        self.targets = torch.from_numpy(_idx(os.path.join(raw, f"{prefix}-labels-idx1-ubyte")).astype(np.int64))
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        image, target = self.data[index], int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target
