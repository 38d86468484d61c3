"""Training data as the engine consumes it: batches per epoch, resumable at a batch index.

The fast path: a ``DataLoader`` over an in-memory ``TensorDataset`` collates one sample at a
time (~660 us per batch of 64 on a 2-core CPU), while a batched gather of a shuffled index
(``index_select``) costs ~100 us; for small models the loader, not the model, bounds the speed.
:class:`TensorBatches` gives the same batch sizes, shuffling and ``drop_last`` behaviour, shards
like ``DistributedSampler`` under DDP, and can resume mid-epoch without touching the data. It
is used automatically for tensor data with the default sampler and collate (``fast_data=False``
turns it off); the order of a shuffled epoch differs from the loader's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, NamedTuple

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
    default_collate,
)

from .train_errors import TrainConfigError

DEVICE_RESIDENT_BYTES = 1 << 30  # tensor data up to this size is moved to the GPU once


class TensorBatches:
    """Shuffled batches gathered from in-memory tensors with one ``index_select`` each."""

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        sizes = {int(t.shape[0]) for t in tensors}
        if len(sizes) != 1:
            raise TrainConfigError(f"tensors have different first dimensions: {sorted(sizes)}")
        self.tensors = list(tensors)
        self.size = sizes.pop()
        self.batch_size = batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.rank, self.world_size = rank, world_size
        self.per_rank = math.ceil(self.size / world_size)
        self.kind = "tensor batches (fast path)"

    def __len__(self) -> int:
        whole, rest = divmod(self.per_rank, self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)

    def place(self, device: torch.device) -> TensorBatches:
        """Moves small datasets onto the GPU once, so each batch is a device-side gather."""
        if device.type == "cuda" and sum(t.nbytes for t in self.tensors) <= DEVICE_RESIDENT_BYTES:
            self.tensors = [t.to(device) for t in self.tensors]
        return self

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's sample indices for ``epoch``, as ``DistributedSampler`` would give them:
        a permutation seeded by ``seed + epoch``, padded to a multiple of the world size."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        padding = self.per_rank * self.world_size - self.size
        if padding:
            order = torch.cat([order, order[:padding]])
        return order[self.rank :: self.world_size]

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[tuple[torch.Tensor, ...]]:
        order = self.indices(epoch).to(self.tensors[0].device)
        for start in range(skip * self.batch_size, len(self) * self.batch_size, self.batch_size):
            chosen = order[start : start + self.batch_size]
            yield tuple(t.index_select(0, chosen) for t in self.tensors)


class LoaderBatches:
    """Any re-iterable of batches (normally a ``DataLoader``). Resuming mid-epoch replays the
    epoch's order (the engine restores the RNG state of the epoch start first) and drops the
    batches already trained on."""

    def __init__(self, loader: Iterable, owns_sampler: bool = False):
        self.loader = loader
        self.owns_sampler = owns_sampler  # the engine made its DistributedSampler: the seed is ours to set
        self.batch_size = getattr(loader, "batch_size", None)
        self.kind = type(loader).__name__

    @property
    def seed(self) -> int | None:
        return getattr(getattr(self.loader, "sampler", None), "seed", None)

    @seed.setter
    def seed(self, value: int) -> None:
        """A resumed run keeps the shuffling seed of the run it continues."""
        loader = self.loader
        if self.owns_sampler and isinstance(loader, DataLoader) and isinstance(loader.sampler, DistributedSampler):
            loader.sampler.seed = value

    def __len__(self) -> int:
        if not isinstance(self.loader, Sized):
            raise TypeError(f"a {self.kind} has no length")
        return len(self.loader)

    def place(self, device) -> LoaderBatches:
        """Nothing to move ahead: a loader's batches go to the device one by one."""
        return self

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Any]:
        for holder in (getattr(self.loader, "sampler", None), getattr(self.loader, "batch_sampler", None)):
            if holder is not None and hasattr(holder, "set_epoch"):
                holder.set_epoch(epoch)
        batches = iter(self.loader)
        for _ in range(skip):
            if next(batches, None) is None:
                break
        return batches


def training_batches(
    data: Any,
    *,
    batch_size: int | None,
    shuffle: bool,
    drop_last: bool,
    fast: bool,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
) -> TensorBatches | LoaderBatches:
    """The engine's view of ``data``: a DataLoader, a Dataset or tensors (with ``batch_size``),
    or any re-iterable of batches."""
    if isinstance(data, DataLoader):
        if batch_size is not None:
            raise TrainConfigError("batch_size conflicts with the DataLoader's own batch size; drop one")
        return _from_loader(data, fast=fast, seed=seed, rank=rank, world_size=world_size)
    if isinstance(data, (Dataset, torch.Tensor)) or _tensor_tuple(data):
        if batch_size is None:
            raise TrainConfigError(f"a {type(data).__name__} needs batch_size (or pass a DataLoader)")
        tensors = _tensors_of(data)
        if tensors is not None and fast:
            return TensorBatches(
                tensors, batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed, rank=rank, world_size=world_size
            )
        dataset = TensorDataset(*tensors) if tensors is not None and not isinstance(data, Dataset) else data
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
        return _from_loader(loader, fast=False, seed=seed, rank=rank, world_size=world_size)
    if not isinstance(data, Iterable):
        raise TrainConfigError(
            f"training data must be a DataLoader, Dataset, tensors or an iterable of batches, got {type(data).__name__}"
        )
    return LoaderBatches(data)


def validation_batches(
    data: Any, *, batch_size: int | None, fast: bool, rank: int = 0, world_size: int = 1
) -> TensorBatches | LoaderBatches | None:
    if data is None:
        return None
    if isinstance(data, DataLoader):
        return _from_loader(data, fast=fast, seed=0, rank=rank, world_size=world_size, evaluation=True)
    return training_batches(
        data, batch_size=batch_size, shuffle=False, drop_last=False, fast=fast, seed=0, rank=rank, world_size=world_size
    )


def _from_loader(
    loader: DataLoader, *, fast: bool, seed: int, rank: int, world_size: int, evaluation: bool = False
) -> TensorBatches | LoaderBatches:
    same = _tensor_loader(loader) if fast else None
    if same is not None:
        return TensorBatches(
            same.tensors,
            same.batch_size,
            shuffle=same.shuffles and not evaluation,
            drop_last=loader.drop_last,
            seed=seed,
            rank=rank,
            world_size=world_size,
        )
    if world_size > 1 and not isinstance(loader.sampler, DistributedSampler):
        return LoaderBatches(
            distributed_loader(loader, rank, world_size, seed, shuffle=not evaluation), owns_sampler=True
        )
    return LoaderBatches(loader)


def tensor_loader_plan(loader: DataLoader) -> bool | None:
    """Whether the fast path reproduces this loader: ``None`` when not (custom dataset,
    collate_fn, sampler or batch sampler), else whether it shuffles."""
    same = _tensor_loader(loader)
    return None if same is None else same.shuffles


class _TensorLoader(NamedTuple):
    """A loader the fast path reproduces: its tensors, its batch size, whether it shuffles."""

    tensors: tuple[torch.Tensor, ...]
    batch_size: int
    shuffles: bool


def _tensor_loader(loader: DataLoader) -> _TensorLoader | None:
    dataset, batch_size = loader.dataset, loader.batch_size
    if type(dataset) is not TensorDataset or batch_size is None:
        return None
    if loader.collate_fn is not default_collate or type(loader.batch_sampler) is not BatchSampler:
        return None
    sampler = loader.sampler
    if type(sampler) is SequentialSampler:
        return _TensorLoader(dataset.tensors, batch_size, shuffles=False)
    if type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == len(dataset):
        return _TensorLoader(dataset.tensors, batch_size, shuffles=True)
    return None


def distributed_loader(loader: DataLoader, rank: int, world_size: int, seed: int, shuffle: bool) -> DataLoader:
    """The same loader with a ``DistributedSampler``: batch size, workers, pin_memory,
    collate_fn, drop_last and worker settings preserved. A loader that already shards
    (its sampler is a ``DistributedSampler``) is returned as it is."""
    if isinstance(loader.sampler, DistributedSampler) or loader.batch_size is None:
        return loader
    shuffles = shuffle and isinstance(loader.sampler, RandomSampler)
    sampler: DistributedSampler[int] = DistributedSampler(
        loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffles, seed=seed
    )
    workers = loader.num_workers
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context if workers else None,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers if workers else False,
        pin_memory_device=loader.pin_memory_device,
    )


def _tensor_tuple(data: Any) -> bool:
    return isinstance(data, (tuple, list)) and bool(data) and all(isinstance(t, torch.Tensor) for t in data)


def _tensors_of(data: Any) -> list[torch.Tensor] | None:
    if isinstance(data, torch.Tensor):
        return [data]
    if type(data) is TensorDataset:
        return list(data.tensors)
    if _tensor_tuple(data):
        return list(data)
    return None
