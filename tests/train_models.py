"""Small real models and data for the training tests (scikit-learn's bundled digits, no download)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits(split: int = 1500, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """The 1797 8x8 digit images, shuffled once with a fixed seed, as train/validation sets."""
    from sklearn.datasets import load_digits

    data = load_digits()
    order = torch.randperm(len(data.target), generator=torch.Generator().manual_seed(seed))
    images = torch.tensor(data.data, dtype=torch.float32).reshape(-1, 1, 8, 8)[order] / 16.0
    labels = torch.tensor(data.target)[order]
    return TensorDataset(images[:split], labels[:split]), TensorDataset(images[split:], labels[split:])


def digits_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 4 * 4, 10))


def mlp(inputs: int = 20, hidden: int = 32, classes: int = 2, dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, classes))


def blobs(n: int = 256, inputs: int = 20, seed: int = 0) -> TensorDataset:
    """A separable two-class problem: the label is the sign of the first feature."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, inputs, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


def loader(dataset: TensorDataset, batch_size: int = 32, shuffle: bool = True, **options) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **options)
