"""Small real models and data for the training tests (scikit-learn's bundled digits, no download)."""

from __future__ import annotations

import os
import signal

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
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(32 * 4 * 4, 10),
    )


def mlp(inputs: int = 20, hidden: int = 32, classes: int = 2, dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, classes))


def blobs(n: int = 256, inputs: int = 20, seed: int = 0) -> TensorDataset:
    """A separable two-class problem: the label is the sign of the first feature."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, inputs, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long())


def loader(dataset: TensorDataset, batch_size: int = 32, shuffle: bool = True, **options) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **options)


class MisbehavingMlp(nn.Module):
    """A 20 → 32 → 2 MLP that misbehaves at one training step, its n-th forward in train mode:
    at ``nan_at`` its output is NaN (a loss gone bad); at ``interrupt_at`` it sends its own process
    SIGINT first, as the user's Stop interrupts a kernel. -1: never (set the attribute to -1 to
    fix the cause and train on)."""

    def __init__(self, nan_at: int = -1, interrupt_at: int = -1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
        self.nan_at, self.interrupt_at, self.calls = nan_at, interrupt_at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.interrupt_at:
                os.kill(os.getpid(), signal.SIGINT)
        out = self.net(x)
        return out * float("nan") if self.training and self.calls == self.nan_at else out


def shell_setup(samples: int, *classes: str) -> str:
    """What a notebook runs before its ``%%train`` cell, for the tests that train in a real shell:
    torch imported, the seed fixed, ``X``/``y`` the sign-of-the-first-feature problem (``samples``
    points of 20 features), and ``classes``, model classes of this module, imported."""
    imports = "".join(f"from tests.train_models import {name}\n" for name in classes)
    return f"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
{imports}torch.manual_seed(0)
X = torch.randn({samples}, 20); y = (X[:, 0] > 0).long()
"""


def shell_train_body(model: str, lr: float) -> str:
    """The body of a ``%%train`` cell after ``shell_setup``: ``model`` (its source), AdamW at
    ``lr``, batches of 32, cross-entropy; it starts with a newline, to follow the magic's line."""
    return f"""
model = {model}
optimizer = torch.optim.AdamW(model.parameters(), {lr})
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
loss_fn = nn.CrossEntropyLoss()
"""
