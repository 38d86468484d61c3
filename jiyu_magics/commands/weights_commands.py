"""``jiyu export-weights``: a run's checkpoint (a sharded one too) as one file."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_commands(commands) -> None:
    p = commands.add_parser(
        "export-weights",
        help="write a run's checkpoint (sharded or not) as one file that a single process loads",
        description="The model's weights of a checkpoint as a plain state dict "
        "(model.load_state_dict(torch.load(FILE))), or with --whole the whole checkpoint as one "
        "jiyu checkpoint file that --resume takes. The checkpoint is a run's newest (or that of "
        "--step), or a checkpoint path; a sharded one (--strategy fsdp: a .dcp folder with a "
        "shard per rank) is put together here, whatever number of ranks wrote it.",
    )
    p.add_argument("source", metavar="RUN|CHECKPOINT", help="run id (or unique prefix), or a checkpoint path")
    p.add_argument("--to", required=True, metavar="FILE", help="the file to write (replaced if it is one)")
    p.add_argument("--step", type=int, metavar="N", help="the run's checkpoint of step N (default: its newest)")
    p.add_argument("--whole", action="store_true", help="model, optimizer, step and RNG, not only the weights")
    p.add_argument(
        "--force", action="store_true", help="write through a symbolic link at FILE (to its target; refused otherwise)"
    )
    p.set_defaults(handler=run_export_weights)


def run_export_weights(args: argparse.Namespace) -> int:
    from ..jobs import JobError
    from ..train import TrainConfigError
    from ..train.weights_export import export_weights
    from . import CliError

    try:
        source = _checkpoint(args)
        print(export_weights(source, args.to, whole=args.whole, force=args.force).describe())
    except (JobError, TrainConfigError) as error:
        raise CliError(str(error)) from None
    except OSError as error:  # the atomic write's own line says what and where (a full disk: how much)
        raise CliError(error.strerror or f"cannot write {args.to}: {error}") from None
    return 0


def _checkpoint(args: argparse.Namespace) -> Path:
    """A path that exists is the checkpoint; anything else names a run."""
    from .. import jobs
    from ..train.weights_export import checkpoint_of_run
    from . import CliError

    path = Path(args.source).expanduser()
    if path.exists():
        if args.step is not None:
            raise CliError("--step picks among a run's checkpoints: give a run id, not a path")
        return path
    return checkpoint_of_run(jobs.resolve(args.source).id, args.step)
