"""The ``torchrun`` command line and environment every launcher shares (the local launcher,
the job supervisor, the Slurm and Kubernetes specs), so they all start ranks the same way:
each rank runs ``python -m jiyu_magics.jobs.process.rank_worker SCRIPT``, and its output reaches the log
with a ``[rankN]:`` prefix on every line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...core.environment import child_environment
from ...core.processes.run_processes import RANK_MARK
from ...core.runs.files import RUN_ID_ENV, jiyu_home
from ...core.settings import HOME_ENV

WORKER_MODULE = RANK_MARK  # what tells a rank from a leftover in the process table
NODE_LAUNCH_MODULE = "jiyu_magics.jobs.process.node_launch"  # each node of a scheduler's job, before torchrun
# torch >= 2.4 shares the rendezvous TCPStore with the workers; after a restart the ranks then
# read the previous attempt's addresses and gloo/NCCL fail to connect or hang
# (pytorch/pytorch#135712, seen here with torch 2.13). Each attempt's rank 0 hosting its own
# store, as before 2.4, restarts cleanly.
STORE_SETTINGS = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
LINE_PREFIX_TEMPLATE = "[rank${rank}]: "
# Variables a kernel or an enclosing torchrun hands down that would confuse a fresh launch:
# ipykernel's inline matplotlib backend, and the rendezvous of a job we may be running inside.
INHERITED_NOISE = (
    "MPLBACKEND",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "JPY_PARENT_PID",
    "JPY_SESSION_NAME",
)


def command(
    script: str | os.PathLike,
    nproc: int,
    *,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    node_rank: int | None = None,
    rdzv_id: str | None = None,
    rdzv_conf: str | None = None,
    max_restarts: int = 0,
    log_dir: str | os.PathLike | None = None,
    args: Sequence[str] = (),
    launcher: Sequence[str] | None = None,
) -> list[str]:
    """``torchrun`` with the worker entry point. One node without an endpoint is
    ``--standalone`` (torch picks a free rendezvous port); with ``node_rank`` the rendezvous is
    static (``--master-addr`` style), otherwise c10d so nodes may join in any order."""
    cmd = list(launcher or [sys.executable, "-m", "torch.distributed.run"])
    if nnodes == 1 and not rdzv_endpoint:
        cmd.append("--standalone")
    else:
        cmd += [
            "--nnodes",
            str(nnodes),
            "--rdzv-backend",
            "static" if node_rank is not None else "c10d",
            "--rdzv-endpoint",
            str(rdzv_endpoint),
        ]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
        if rdzv_id is not None:
            cmd += ["--rdzv-id", rdzv_id]
        if rdzv_conf is not None:
            cmd += ["--rdzv-conf", rdzv_conf]
    cmd += ["--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts)]
    if log_dir is not None:
        cmd += ["--log-dir", str(log_dir), "--tee", "3"]
    return cmd + ["-m", WORKER_MODULE, str(script), *args]


def join_timeout_conf(seconds: int, static: bool = False) -> str:
    """torchrun's ``--rdzv-conf`` bounding how long the nodes wait for each other: c10d's
    ``join_timeout`` (600 s by default) and its store client's ``read_timeout`` (60 s by default:
    a node whose first node starts late gave up before the join timeout); the static
    rendezvous's ``timeout`` (its store's, 600 s by default)."""
    if static:
        return f"timeout={seconds}"
    return f"join_timeout={seconds},read_timeout={seconds}"


def node_launch(rdzv_endpoint: str, join_timeout: int, launcher: Sequence[str], resolve_timeout: int = 0) -> list[str]:
    """The per-node launcher's command, to which torchrun's is appended (``process.node_launch``)."""
    cmd = [*launcher, "-m", NODE_LAUNCH_MODULE, "--rdzv", rdzv_endpoint, "--join-timeout", str(join_timeout)]
    if resolve_timeout:
        cmd += ["--resolve-timeout", str(resolve_timeout)]
    return [*cmd, "--"]


def environment(
    run_id: str, error_file: str | os.PathLike | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a launch: the caller's (PATH, CUDA_VISIBLE_DEVICES, NCCL_*, what
    ``%env`` set...), minus inherited rendezvous and kernel settings, plus ``extra``, the run id
    (so training writes into this run), the home folder, the rank prefix for log lines, and
    where torchrun copies the first failing rank's error file."""
    env = child_environment(extra, drop=INHERITED_NOISE)
    env.update(
        {
            RUN_ID_ENV: run_id,
            HOME_ENV: str(jiyu_home()),
            "PYTHONUNBUFFERED": "1",
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LINE_PREFIX_TEMPLATE,
        }
    )
    for name, value in STORE_SETTINGS.items():
        env.setdefault(name, value)
    if error_file is not None:
        env["TORCHELASTIC_ERROR_FILE"] = str(Path(error_file))
    return env
