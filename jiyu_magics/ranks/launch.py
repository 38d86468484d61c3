"""Where a local pool's ranks run: under the pool's supervisor (``supervisor``), as the kernel's
child process group on the GPUs its lease gave it. The place comes from the GPU queue as for any
local run (``LocalProcessGroup``); only the process started there differs: not torchrun, whose
agent ends every worker when one dies, but the supervisor, which lets each rank die alone."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.processes.run_processes import POOL_SUPERVISOR_MARK
from ..jobs.gpu_queue import Grant
from ..jobs.launch_spec import LaunchSpec
from ..jobs.process.torchrun_launch import Launch
from ..jobs.rank_placement import LocalProcessGroup


@dataclass
class SupervisedRanks(LocalProcessGroup):
    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        grant: Grant | None = None,
    ) -> Launch:
        env = {**(env or {}), **(grant.env() if grant is not None else {})}
        command = [sys.executable, "-m", POOL_SUPERVISOR_MARK, str(spec.nproc)]
        return Launch.start_command(
            command, nproc=spec.nproc, run_id=run_id, cwd=cwd, env=env, die_with_parent=self.die_with_parent
        )
