"""The in-memory fast path keeps a DataLoader's batch sizes, shuffling and drop_last, and
shards like DistributedSampler."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from jiyu_magics.train.batch_source import (
    LoaderBatches,
    TensorBatches,
    distributed_loader,
    tensor_loader_plan,
    training_batches,
)
from jiyu_magics.train.train_errors import TrainConfigError

DATA = TensorDataset(torch.arange(100).float().unsqueeze(1), torch.arange(100))


@pytest.mark.parametrize("shuffle, drop_last", [(True, False), (False, False), (True, True)])
def test_fast_path_matches_the_loader_batch_by_batch_in_size_and_content(shuffle, drop_last):
    loader = DataLoader(DATA, batch_size=32, shuffle=shuffle, drop_last=drop_last)
    fast = training_batches(loader, batch_size=None, shuffle=True, drop_last=False, fast=True, seed=1)
    assert isinstance(fast, TensorBatches) and len(fast) == len(loader)
    fast_batches, slow_batches = list(fast.epoch(1)), list(loader)
    assert [len(b[1]) for b in fast_batches] == [len(b[1]) for b in slow_batches]
    if not drop_last:  # with drop_last a shuffled epoch drops different samples each time
        assert sorted(torch.cat([b[1] for b in fast_batches]).tolist()) == list(range(100))
    assert all(torch.equal(b[0].squeeze(1).long(), b[1]) for b in fast_batches), "rows stay aligned"
    first = torch.cat([b[1] for b in fast_batches])
    assert torch.equal(first, torch.cat([b[1] for b in fast.epoch(1)])), "an epoch's order is reproducible"
    assert torch.equal(first, torch.cat([b[1] for b in fast.epoch(2)])) != shuffle


def test_fast_path_resumes_mid_epoch_without_touching_skipped_batches():
    fast = TensorBatches(DATA.tensors, 10, seed=5)
    whole = [b[1] for b in fast.epoch(3)]
    rest = [b[1] for b in fast.epoch(3, skip=4)]
    assert len(rest) == len(whole) - 4 and all(torch.equal(a, b) for a, b in zip(whole[4:], rest, strict=False))


def test_fast_path_only_where_it_reproduces_the_loader():
    assert tensor_loader_plan(DataLoader(DATA, batch_size=8, shuffle=True)) is True
    assert tensor_loader_plan(DataLoader(DATA, batch_size=8)) is False
    assert tensor_loader_plan(DataLoader(DATA, batch_size=8, collate_fn=lambda b: b)) is None
    assert tensor_loader_plan(DataLoader(list(zip(range(10), range(10), strict=False)), batch_size=8)) is None
    loader = DataLoader(DATA, batch_size=8, shuffle=True)
    assert isinstance(
        training_batches(loader, batch_size=None, shuffle=True, drop_last=False, fast=False, seed=0), LoaderBatches
    )


@pytest.mark.parametrize("size", [100, 101])
def test_sharding_is_disjoint_covers_everything_and_matches_distributed_sampler(size):
    tensors = (torch.arange(size),)
    shards = [TensorBatches(tensors, 8, seed=4, rank=r, world_size=2) for r in range(2)]
    seen = [torch.cat([b[0] for b in s.epoch(2)]) for s in shards]
    assert len(seen[0]) == len(seen[1]) and set(seen[0].tolist()) | set(seen[1].tolist()) == set(range(size))
    if size % 2 == 0:
        assert not set(seen[0].tolist()) & set(seen[1].tolist())
    sampler = DistributedSampler(range(size), num_replicas=2, rank=1, shuffle=True, seed=4)
    sampler.set_epoch(2)
    assert seen[1].tolist() == list(sampler)


def test_distributed_loader_keeps_the_loader_settings():
    collate = lambda batch: batch  # noqa: E731
    loader = DataLoader(
        list(range(50)),
        batch_size=7,
        shuffle=True,
        drop_last=True,
        collate_fn=collate,
        num_workers=1,
        persistent_workers=True,
        prefetch_factor=3,
    )
    sharded = distributed_loader(loader, rank=1, world_size=2, seed=0, shuffle=True)
    assert isinstance(sharded.sampler, DistributedSampler) and sharded.sampler.rank == 1 and sharded.sampler.shuffle
    assert (sharded.batch_size, sharded.drop_last, sharded.collate_fn, sharded.num_workers) == (7, True, collate, 1)
    assert sharded.persistent_workers and sharded.prefetch_factor == 3


def test_tensors_and_datasets_need_a_batch_size():
    with pytest.raises(TrainConfigError, match="needs batch_size"):
        training_batches(DATA, batch_size=None, shuffle=True, drop_last=False, fast=True, seed=0)
    batches = training_batches(DATA.tensors, batch_size=30, shuffle=False, drop_last=True, fast=True, seed=0)
    assert len(batches) == 3
