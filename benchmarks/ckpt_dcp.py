"""Checkpoints of an FSDP model: one full state dict through rank 0 vs sharded (DCP), save and load.

A ~100 M-parameter MLP (``--width`` x ``--layers`` Linear layers) is sharded with FSDP2
(``fully_shard``) over ``--nproc`` CPU ranks (gloo; ``--device cuda``: a rank per GPU, NCCL) and
AdamW has taken a step (its moments exist: ~3x the parameters in all). Variants, interleaved
(their order rotates every round):

- full: what jiyu wrote before, and what a single-file checkpoint costs: ``get_state_dict(
  full_state_dict=True, cpu_offload=True)`` gathers model and optimizer on rank 0, which
  ``torch.save``s them (``save_atomic``: temp file, fsync, rename). Load: every rank reads the
  file whole and ``set_state_dict(full_state_dict=True)`` takes its shard.
- dcp: ``sharded_checkpoint.save_sharded`` (the engine's save: every rank ``dcp.save``s its
  shard, rank 0 writes the state file and renames the folder). Load: ``load_sharded``
  (``dcp.load``: each rank reads what its shards need, then ``set_state_dict``).
- async (save only): ``dcp.async_save`` on its own gloo group: the time the training loop is
  blocked (staging a CPU copy) and the time until the save is complete.

With ``--steps N``, also what a checkpoint adds to the training loop's time: N training steps
alone, after a blocking DCP save, and while an async save writes in the background (waited for
after them). Meant for GPUs: on this 2-core CPU machine a step of the 100 M model takes seconds
to tens of seconds under load, and its noise hides the checkpoint (measured once with
``--steps 4``: +30 s blocking, +42 s async, on 102 s of steps).

Each timing runs from a barrier to a barrier (every rank finished). Printed: medians per variant
and the ratios full/dcp measured in this run, and rank 0's peak memory above its level before
each variant (resident memory sampled every 5 ms; on a GPU, the GPU memory allocated). Files go
to a temporary folder on ``--dir``'s disk.

    python benchmarks/ckpt_dcp.py [--nproc 2] [--repeat 5] [--width 2048] [--layers 24] [--steps N] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--steps", type=int, default=0, help="training steps timed around a save (default 0: none)")
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl, one GPU per rank)")
    args = parser.parse_args()
    if "RANK" in os.environ:
        return Worker(args).run()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ckpt-dcp-") as folder:
        # freed tensors go back to the OS at once (no dynamic mmap threshold): resident memory
        # then follows what is alive, and its peak is what a variant held
        env = dict(
            os.environ, PYTHONPATH=str(ROOT), TMPDIR=folder, CKPT_DCP_FOLDER=folder, MALLOC_MMAP_THRESHOLD_="65536"
        )
        env.setdefault("OMP_NUM_THREADS", "1")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}"]
        subprocess.run([*command, __file__, *sys.argv[1:]], env=env, check=True)


class Worker:
    def __init__(self, args):
        import torch
        import torch.distributed as dist

        self.args, self.torch, self.dist = args, torch, dist
        self.folder = Path(os.environ["CKPT_DCP_FOLDER"])
        self.device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if args.device == "cuda" else None
        if self.device is not None:
            torch.cuda.set_device(self.device)
        dist.init_process_group("cpu:gloo,cuda:nccl" if self.device is not None else "gloo")
        self.rank = dist.get_rank()
        from jiyu_magics.train.process_group import DistContext

        self.context = DistContext(self.rank, dist.get_world_size(), 0, dist.get_backend())
        self.async_group = dist.new_group(backend="gloo")  # async saves talk on a group of their own
        self.model, self.optimizer = self._model()

    def _model(self):
        torch, nn = self.torch, self.torch.nn
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(self.args.width, self.args.width) for _ in range(self.args.layers)])
        if self.device is not None:
            model.to(self.device)
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), 1e-4)
        model(torch.randn(4, self.args.width, device=self.device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        return model, optimizer

    def run(self) -> None:
        params = sum(p.numel() for p in self.model.parameters())  # DTensors count globally
        saves = {"full": self.save_full, "dcp": self.save_dcp, "async": self.save_async}
        loads = {"full": self.load_full, "dcp": self.load_dcp}
        times: dict[str, list[float]] = {}
        peaks: dict[str, list[float]] = {}
        backend = self.dist.get_backend()
        self.say(f"model: {params / 1e6:.1f} M parameters, {self.context.world_size} ranks, backend {backend}")
        for index in range(self.args.repeat + 1):  # round 0 warms up (first-call costs), not counted
            order = list(saves)[index % 3 :] + list(saves)[: index % 3]
            for name in order:
                path = self.folder / f"{name}-{index}"
                seconds, peak, extra = self.timed(lambda name=name, path=path: saves[name](path))
                if index:
                    times.setdefault(f"save {name}", []).append(seconds)
                    peaks.setdefault(f"save {name}", []).append(peak)
                    if extra is not None:
                        times.setdefault("save async (until complete)", []).append(extra)
                if name in loads:
                    seconds, peak, _ = self.timed(lambda name=name, path=path: loads[name](path))
                    if index:
                        times.setdefault(f"load {name}", []).append(seconds)
                        peaks.setdefault(f"load {name}", []).append(peak)
                self.remove(path)
            if self.args.steps:
                self.overlap_round(index, times)
        self.report(params, times, peaks)
        self.dist.destroy_process_group()

    # -- the variants ------------------------------------------------------------------------
    def save_full(self, path: Path):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        from jiyu_magics.train.checkpoint import FORMAT, save_atomic

        model, optimizer = get_state_dict(
            self.model, self.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if self.rank == 0:
            save_atomic({"format": FORMAT, "model": model, "optimizer": optimizer}, path.with_suffix(".pt"))

    def load_full(self, path: Path) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        state = self.torch.load(path.with_suffix(".pt"), map_location="cpu", weights_only=True)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=StateDictOptions(full_state_dict=True),
        )

    def save_dcp(self, path: Path) -> None:
        from jiyu_magics.train.sharded_checkpoint import save_sharded

        save_sharded(self.model, self.optimizer, {"step": 1}, path.with_suffix(".dcp"), self.context)

    def load_dcp(self, path: Path) -> None:
        from jiyu_magics.train.sharded_checkpoint import load_sharded

        load_sharded(self.model, self.optimizer, path.with_suffix(".dcp"), distributed=True)

    def save_async(self, path: Path) -> float:
        """Starts the save; ``timed`` measures the blocking part and waits for the rest."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        started = time.perf_counter()
        tensors, target = {"model": model, "optimizer": optimizer}, path.with_suffix(".async")
        future = dcp.async_save(tensors, checkpoint_id=target, process_group=self.async_group)
        self.pending = (future, started)

    # -- the step time around a checkpoint ---------------------------------------------------
    def overlap_round(self, index: int, times: dict[str, list[float]]) -> None:
        """``--steps`` training steps: alone, after a blocking DCP save, and while an async
        save writes (waited for after the steps): what a checkpoint adds to the loop's time."""
        cases = {
            "steps alone": lambda path: self.train(),
            "steps after save dcp": lambda path: (self.save_dcp(path), self.train()),
            "steps during save async": lambda path: (self.save_async(path), self.train(), self.pending[0].result()),
        }
        order = list(cases)[index % 3 :] + list(cases)[: index % 3]
        for name in order:
            path = self.folder / f"overlap-{index}"
            seconds, _, _ = self.timed(lambda name=name, path=path: cases[name](path), wait_async=False)
            if index:
                times.setdefault(name, []).append(seconds)
            self.remove(path)

    def train(self) -> None:
        torch = self.torch
        batch = torch.randn(16, self.args.width, device=self.device)
        for _ in range(self.args.steps):
            self.model(batch).square().mean().backward()
            self.optimizer.step()
            self.optimizer.zero_grad()

    # -- measuring ---------------------------------------------------------------------------
    def timed(self, action, wait_async: bool = True) -> tuple[float, float, float | None]:
        """(seconds from a barrier to a barrier, rank 0's peak MiB above its level before, seconds
        until an async save completed)."""
        self.pending = None
        sampler = PeakMemory() if self.rank == 0 else None
        if self.device is not None:
            gpu_base = self.torch.cuda.memory_allocated(self.device)
            self.torch.cuda.reset_peak_memory_stats(self.device)
        self.dist.barrier()
        started = time.perf_counter()
        action()
        if self.device is not None:
            self.torch.cuda.synchronize(self.device)
        blocked = time.perf_counter() - started
        self.dist.barrier()
        seconds = max(self.context.gather(blocked))  # the slowest rank's time
        complete = None
        if self.pending is not None and wait_async:
            future, began = self.pending
            future.result()
            complete = max(self.context.gather(time.perf_counter() - began))
        peak = sampler.stop() if sampler else 0.0
        if self.device is not None:  # on a GPU: the GPU memory above its level before, not the host's
            peak = (self.torch.cuda.max_memory_allocated(self.device) - gpu_base) / 2**20
        return seconds, peak, complete

    def remove(self, path: Path) -> None:
        self.dist.barrier()
        if self.rank == 0:
            for suffix in (".pt", ".dcp", ".async"):
                target = path.with_suffix(suffix)
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
        self.dist.barrier()

    def report(self, params: int, times: dict[str, list[float]], peaks: dict[str, list[float]]) -> None:
        median = {name: statistics.median(values) for name, values in times.items()}
        peak = {name: statistics.median(values) for name, values in peaks.items()}
        for name in sorted(median):
            memory = "GPU" if self.device is not None else "resident"
            extra = f", rank 0 {memory} peak +{peak[name]:.0f} MiB" if name in peak else ""
            self.say(f"{name:28s} median {median[name]:7.3f} s over {len(times[name])}{extra}")
        self.say(f"ratio save full/dcp: {median['save full'] / median['save dcp']:.2f}x")
        self.say(f"ratio load full/dcp: {median['load full'] / median['load dcp']:.2f}x")
        self.say(f"ratio save dcp/async blocking: {median['save dcp'] / median['save async']:.2f}x")
        if "steps alone" in median:
            alone = median["steps alone"]
            sync, overlapped = median["steps after save dcp"] - alone, median["steps during save async"] - alone
            self.say(
                f"{self.args.steps} steps take {alone:.2f} s; a checkpoint adds {sync:.2f} s blocking (dcp.save), "
                f"{overlapped:.2f} s async (async_save, waited for after the steps): ratio {sync / overlapped:.2f}x"
            )
        summary = {"params": params, "nproc": self.context.world_size, "median_s": median, "peak_mib": peak}
        self.say("json " + json.dumps(summary))

    def say(self, line: str) -> None:
        if self.rank == 0:
            print(line, flush=True)


class PeakMemory:
    """Rank 0's resident memory, sampled every 5 ms in a thread; ``stop`` returns the peak above
    the level at the start, in MiB."""

    def __init__(self):
        import psutil

        self.process = psutil.Process()
        self.base = self.peak = self.process.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return (self.peak - self.base) / 2**20


if __name__ == "__main__":
    main()
