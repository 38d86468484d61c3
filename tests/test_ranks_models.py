"""Models a pool's ranks hold survive what the pool survives, through real kernels
(jupyter_client) and gloo on the CPU: a DDP model, an FSDP2 model, a ``dist.new_group`` subgroup
and a ``DeviceMesh`` made in an earlier cell train on (the same objects) after an error inside a
collective and after an interrupt inside one; the failed step's gradients are never applied;
a dead rank replaced joins through the documented ``--on-join`` recipes (DDP: the survivors'
weights and optimizer state; FSDP: the latest sharded checkpoint) and trains with the others;
a subgroup that held the dead rank says so in one line."""

from __future__ import annotations

import ast
import time

import pytest

from .test_ranks import Kernel, pool_of, rank_pid

START = "%load_ext jiyu_magics\n%ranks start 2 --device cpu --name {name}"

DEFINITIONS = """\
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.fsdp import fully_shard
rank = dist.get_rank()

def net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

def sharded_net(seed):
    model = net(seed)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    return fully_shard(model)

def train(model, optimizer, steps=5, fail_on=None, sleep_on=None):
    # zeroes after the step: a gradient left from a failed step would be applied by the next one
    for _ in range(steps):
        loss = model(torch.randn(8, 4) * (rank + 1)).pow(2).mean()
        if rank == fail_on:
            raise ValueError("bad batch")
        if rank == sleep_on:
            print("asleep", flush=True)
            import time; time.sleep(60)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

def spread(model, optimizer):
    # how far this rank's weights and Adam moments are from the mean over ranks
    mine = torch.cat([p.detach().flatten() for p in model.parameters()]
                     + [s["exp_avg"].flatten() for s in optimizer.state.values()])
    mean = mine.clone()
    dist.all_reduce(mean)
    return float((mean / dist.get_world_size() - mine).abs().max())

def full_weights(model):
    return [round(float(p.detach().full_tensor().double().sum()), 6) for p in model.parameters()]
"""

BUILD = """\
model = DDP(net(0))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
sharded = sharded_net(1)
sharded_opt = torch.optim.Adam(sharded.parameters(), lr=0.01)
pair = dist.new_group([0, 1])
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
built = [id(model), id(sharded), id(pair), id(mesh)]
train(model, opt, steps=2)
train(sharded, sharded_opt, steps=2)
"""


def per_rank(kernel: Kernel, expression: str) -> dict[int, object]:
    """Each rank's value of ``expression`` (a literal), by rank."""
    cell = kernel.run(f"%%ranks --all-output\nprint('value', repr({expression}))")
    assert cell.status == "ok", cell.errors
    values = {}
    for line in cell.text.splitlines():
        head, _, value = line.partition(" value ")
        assert head.startswith("[rank") and value, cell.text
        values[int(head[5:-1])] = ast.literal_eval(value)
    return values


def assert_trains_on(kernel: Kernel) -> None:
    """The same objects train 5 steps on every rank, and the replicas agree after."""
    cell = kernel.run(
        "%%ranks\ntrain(model, opt)\ntrain(sharded, sharded_opt)\n"
        "x = torch.ones(1) * (rank + 1)\ndist.all_reduce(x, group=pair)\n"
        "y = torch.ones(1)\ndist.all_reduce(y, group=mesh.get_group('tp'))"
    )
    assert cell.status == "ok", cell.errors
    same = per_rank(kernel, "[id(model), id(sharded), id(pair), id(mesh)] == built")
    assert same == {0: True, 1: True}, "the objects built before the failure, not new ones"
    spreads = per_rank(kernel, "spread(model, opt)")
    assert spreads == {0: 0.0, 1: 0.0}, f"DDP weights and Adam moments equal on every rank: {spreads}"
    full = per_rank(kernel, "full_weights(sharded)")
    assert full[0] == full[1], f"FSDP's gathered weights agree: {full}"
    sums = per_rank(kernel, "(x.item(), y.item())")
    assert sums == {0: (3.0, 2.0), 1: (3.0, 2.0)}, sums
    names = per_rank(kernel, "(dist.get_backend(), dist.group.WORLD._get_backend_name(), type(pair).__name__)")
    assert names == {r: ("jiyu", "gloo", "LastingGroup") for r in (0, 1)}, names


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("models")
    kernel = Kernel(cwd, cwd / "home", env={"TMPDIR": str(cwd)})
    started = kernel.run(START.format(name="models"))
    assert started.status == "ok", started.text + str(started.errors)
    defined = kernel.run(f"%%ranks\n{DEFINITIONS}")
    assert defined.status == "ok", defined.errors
    built = kernel.run(f"%%ranks\n{BUILD}")
    assert built.status == "ok", built.errors
    yield kernel
    kernel.run("%ranks stop")
    kernel.close()


@pytest.mark.parametrize("which", ["model, opt", "sharded, sharded_opt"])
def test_an_error_between_forward_and_backward_leaves_the_model_training(kernel, which):
    """Rank 1 raises after its forward; rank 0 goes on into backward and waits there in DDP's
    all-reduce (FSDP's reduce-scatter) for a rank that never comes."""
    cell = kernel.run(f"%%ranks\ntrain({which}, steps=1, fail_on=1)")
    (error,) = cell.errors
    assert error["evalue"] == "rank 1: ValueError: bad batch", error
    said = "\n".join(error["traceback"])
    assert "rank 0: the collective it waited in was aborted" in said, said
    assert "the process group was rebuilt" in said and "every rank kept its state" in said, said
    assert "model, sharded: the failed step was undone (its gradients dropped" in said, said
    name = which.split(",")[0]
    dropped = per_rank(kernel, f"all(p.grad is None for p in {name}.parameters())")
    assert dropped == {0: True, 1: True}, "no gradient of the failed step is left to be applied"
    assert_trains_on(kernel)


def test_an_interrupt_inside_a_collective_leaves_the_models_training(kernel):
    """Rank 1 sleeps before its backward, rank 0 waits in DDP's all-reduce; the kernel's
    interrupt (the stop button) ends the cell; the models train on."""
    msg = kernel.start("%%ranks --all-output\ntrain(model, opt, steps=1, sleep_on=1)")
    kernel.read_until(msg, "[rank1] asleep")
    began = time.monotonic()
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=120)
    assert time.monotonic() - began < 15, "the interrupt ends the cell in seconds"
    (error,) = cell.errors
    assert "interrupted" in error["evalue"] or "KeyboardInterrupt" in error["evalue"], error
    assert_trains_on(kernel)


def test_a_replaced_rank_joins_a_ddp_model_and_an_fsdp_model_and_an_old_subgroup_says_so(tmp_path):
    """A rank killed inside a training step; ``%ranks restart`` with the documented join
    recipes: DDP from the survivors (``share_training_state``), FSDP from the latest sharded
    checkpoint (its shards died with the rank). Every rank then trains with equal replicas; the
    subgroup made before the death is refused in one line."""
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        assert kernel.run(START.format(name="joins")).status == "ok"
        assert kernel.run(f"%%ranks\n{DEFINITIONS}").status == "ok"
        built = kernel.run(f"%%ranks\n{BUILD}\nCKPT = {str(tmp_path / 'sharded-ckpt')!r}")
        assert built.status == "ok", built.errors
        saved = kernel.run(
            "%%ranks\nimport torch.distributed.checkpoint as dcp\n"
            "from torch.distributed.checkpoint.state_dict import get_state_dict\n"
            "weights, moments = get_state_dict(sharded, sharded_opt)\n"
            "dcp.save({'model': weights, 'optim': moments}, checkpoint_id=CKPT)\n"
            "saved_weights = full_weights(sharded)"
        )
        assert saved.status == "ok", saved.errors
        hook = kernel.run(
            f"%%ranks --on-join\n{DEFINITIONS}\n"
            "import torch.distributed.checkpoint as dcp\n"
            "from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict\n"
            "from jiyu_magics.train import share_training_state\n"
            "if 'model' not in globals():  # the new rank builds the models (no collective in DDP's constructor)\n"
            "    model = DDP(net(0), init_sync=False)\n"
            "    opt = torch.optim.Adam(model.parameters(), lr=0.01)\n"
            "    sharded = sharded_net(1)\n"
            "    sharded_opt = torch.optim.Adam(sharded.parameters(), lr=0.01)\n"
            f"    CKPT = {str(tmp_path / 'sharded-ckpt')!r}\n"
            "share_training_state(model, opt)  # rank 0's weights and Adam moments on every rank\n"
            "weights, moments = get_state_dict(sharded, sharded_opt)\n"
            "state = {'model': weights, 'optim': moments}\n"
            "dcp.load(state, checkpoint_id=CKPT)\n"
            "set_state_dict(sharded, sharded_opt, model_state_dict=state['model'], optim_state_dict=state['optim'])"
        )
        assert hook.status == "ok" and "kept as the join hook" in hook.text, hook.errors
        pool = pool_of(kernel.home)
        victim = rank_pid(kernel.home, pool.id, 1)
        died = kernel.run("%%ranks\nif rank == 1:\n    os.kill(os.getpid(), 9)\ntrain(model, opt, steps=1)")
        (error,) = died.errors
        assert error["ename"] == "RankDied" and error["evalue"].startswith("rank 1 died: killed by SIGKILL"), error
        restarted = kernel.run("%ranks restart 1")
        assert restarted.status == "ok" and "rank(s) 1 joined in" in restarted.text, restarted.errors
        assert rank_pid(kernel.home, pool.id, 1) != victim
        assert kernel.run("%%ranks\nreloaded = full_weights(sharded)").status == "ok"  # a collective: every rank
        back = per_rank(kernel, "reloaded == saved_weights if 'saved_weights' in globals() else None")
        assert back == {0: True, 1: None}, f"every rank's FSDP shards are the checkpoint's again: {back}"
        trained = kernel.run("%%ranks\ntrain(model, opt)\ntrain(sharded, sharded_opt)")
        assert trained.status == "ok", trained.errors
        assert per_rank(kernel, "spread(model, opt)") == {0: 0.0, 1: 0.0}
        full = per_rank(kernel, "full_weights(sharded)")
        assert full[0] == full[1], full
        stale = kernel.run("%%ranks 0\ndist.all_reduce(torch.ones(1), group=pair)")
        (error,) = stale.errors
        assert error["evalue"].startswith("rank 0: GroupRetired: the process group of ranks 0, 1"), error
        assert "holds rank 1, replaced since" in error["evalue"] and "--on-join" in error["evalue"], error
        assert kernel.run("%%ranks\nprint('fine')").status == "ok", "a refused subgroup leaves the pool whole"
    finally:
        kernel.run("%ranks stop")
        kernel.close()


@pytest.mark.gpu
def test_a_ddp_model_on_nccl_trains_on_after_an_error_inside_its_all_reduce(tmp_path):
    """On a machine with two GPUs: the same as on gloo, over NCCL: rank 1 raises after its
    forward, rank 0 waits in DDP's all-reduce; the communicator under the lasting group is
    aborted (``ncclCommAbort``) and replaced, and the same DDP model trains on, equal on both."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs: one NCCL rank per GPU")
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        assert kernel.run("%load_ext jiyu_magics\n%ranks start 2 --name nccl-ddp").status == "ok"
        gpu = DEFINITIONS.replace("torch.randn(8, 4)", "torch.randn(8, 4, device='cuda')")
        built = kernel.run(f"%%ranks\n{gpu}\nmodel = DDP(net(0).cuda())\nopt = torch.optim.Adam(model.parameters())")
        assert built.status == "ok", built.errors
        failed = kernel.run("%%ranks\ntrain(model, opt, steps=1, fail_on=1)")
        (error,) = failed.errors
        assert error["evalue"] == "rank 1: ValueError: bad batch", error
        trained = kernel.run("%%ranks\ntrain(model, opt)")
        assert trained.status == "ok", trained.errors
        assert per_rank(kernel, "spread(model, opt)") == {0: 0.0, 1: 0.0}
    finally:
        kernel.run("%ranks stop")
        kernel.close()
