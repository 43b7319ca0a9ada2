"""``Compose``, ``ToTensor``, ``Normalize`` and ``Lambda`` with torchvision's arithmetic on MNIST's uint8 images:
ToTensor maps a [28, 28] uint8 image to a float [1, 28, 28] in [0, 1]; Normalize subtracts the mean and divides
by the standard deviation, per channel."""

import torch


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, image):
        image = torch.as_tensor(image)
        return (image.to(torch.float32) / 255.0).unsqueeze(0) if image.dim() == 2 else image.to(torch.float32) / 255.0


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


class Lambda:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)
