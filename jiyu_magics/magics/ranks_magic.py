"""``%ranks`` and ``%%ranks``: ranks that stay alive across cells, driven from a notebook.

The pool (``ranks.pool``) is a run of kind ``ranks``; its agent (``ranks.agent``) decides what
happens when a rank fails, hangs or dies; this module parses, delegates and shows
(``ranks_output``). A cell's output streams in live (rank 0's, or every rank's with
``--all-output``), rank 0's rich output (a display, a figure, the last expression) shows as the
kernel's own, and a failing rank ends the cell with its error and the traceback of its cell.
The ranks keep their state through errors, interrupts, hangs and a dead peer; a pool that
ended (stopped, or its launcher died) is never started again unasked.
"""

from __future__ import annotations

import argparse
import atexit
import shlex
import sys
import time
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..core.events.stall_clock import BadStallTimeout, check_stall_timeout
from ..core.options.run_options import DEVICE, NAME, STALL_TIMEOUT
from ..core.runs.launch_context import LaunchContext
from ..jobs.submit_options import option_spec
from .ranks_output import Background, Echo, RankCellError, RankDied, report, show_stall, show_start_stall

if TYPE_CHECKING:  # imported when a pool starts: %load_ext stays light (no zmq, no lifecycle)
    from IPython.core.interactiveshell import InteractiveShell

    from ..ranks.agent import Outcome, PoolAgent
    from ..ranks.requests import Request

__all__ = ["RankCellError", "RankDied", "RanksMagics", "pool_of"]

PUSH_WARN_BYTES = 100 * 2**20
DEFAULT_STALL_S = 10.0
START_STALL_S = 60.0  # a start on a busy machine took 15 s; a rank stuck before it joins waits 30 min in gloo


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")


def _parser(prog: str) -> _Parser:
    return _Parser(prog=prog, add_help=False)


# What a pool shares with a job is declared once, as a job's option (``SubmitOptions``: the pool
# is a run of the same lifecycle), or for every door (``--name``, ``--device``); %ranks start
# says only what differs: a pool runs here or on Slurm, its nodes are ``--nodes``, its default
# name is ranks-N. The positional nproc and --replace-dead are the pool's own.
POOL_BACKENDS = ("local", "slurm")
POOL_SLURM_OPTIONS = ("partition", "time", "gpus_per_node")
START_STALL = STALL_TIMEOUT.but(
    default=START_STALL_S,
    help="When the ranks have not all joined this many seconds after they started, say where each one "
    "is (every rank's stack: jiyu stacks ID); 0 turns it off.",
)
START_OPTIONS = [
    DEVICE,
    option_spec("gpus"),
    NAME.but(default_text="ranks-N"),
    option_spec("backend").but(choices=POOL_BACKENDS),
    option_spec("nnodes").but(flags=("--nodes",)),
    *map(option_spec, POOL_SLURM_OPTIONS),
]


def _start_parser() -> _Parser:
    parser = _parser("%ranks start")
    nproc = option_spec("nproc")
    parser.add_argument(nproc.name, type=nproc.type, help=nproc.help)
    for spec in START_OPTIONS:
        parser.add_argument(*spec.flags, **spec.argparse_kwargs())
    parser.add_argument(
        "--replace-dead",
        action="store_true",
        help="a rank that dies is replaced at once (then the --on-join cell runs)",
    )
    parser.add_argument(*START_STALL.flags, **START_STALL.argparse_kwargs())
    return parser


START = _start_parser()
PUSH = _parser("%ranks push")
PUSH.add_argument("names", nargs="+")
PULL = _parser("%ranks pull")
PULL.add_argument("name")
PULL.add_argument("--from", dest="rank", type=int, default=0)
PULL.add_argument("--as", dest="local", default=None)
SCATTER = _parser("%ranks scatter")
SCATTER.add_argument("name")
SCATTER.add_argument("--as", dest="remote", default=None)
GATHER = _parser("%ranks gather")
GATHER.add_argument("name")
GATHER.add_argument("--as", dest="local", default=None)
RESTART = _parser("%ranks restart")
RESTART.add_argument("ranks", nargs="*", type=int)
CELL = _parser("%%ranks")
CELL.add_argument("ranks", nargs="?", default=None)
CELL.add_argument("--all-output", action="store_true")
CELL.add_argument("--stall-timeout", type=float, default=DEFAULT_STALL_S)
CELL.add_argument("--bg", action="store_true")
CELL.add_argument("--on-join", action="store_true")


@magics_class
class RanksMagics(Magics):
    def __init__(self, shell: InteractiveShell | None = None) -> None:
        super().__init__(shell)
        self.agent: PoolAgent | None = None
        self.background: Background | None = None
        atexit.register(self._at_exit)

    @property
    def ipython(self) -> InteractiveShell:
        if self.shell is None:
            raise UsageError("%ranks runs in an IPython shell")
        return self.shell

    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None):
        """Ranks that stay alive across cells: processes that keep their variables, their
        process group and their GPU memory from one cell to the next, and through a failure.

        Line form::

            %ranks start N [--device cpu] [--gpus G] [--name NAME] [--replace-dead]
                           [--stall-timeout S]
                                 start N ranks (gloo on the CPU, NCCL on GPUs); the pool is a
                                 run: it leases its GPUs through the queue and shows in %jobs,
                                 jiyu jobs and the lab panel. --replace-dead: a rank that dies
                                 is replaced at once (then the --on-join cell runs). When the
                                 ranks have not all joined S s (default 60) after they started,
                                 the cell says where each one is; an interrupt ends the start
            %ranks start N --backend slurm --nodes M [--partition P] [--time T]
                           [--gpus-per-node G] [--device cpu]
                                 N ranks on each of M nodes of a Slurm allocation (waits while
                                 Slurm holds the job); the kernel lets in the allocation's
                                 nodes only, and interrupts reach the ranks over the channel
            %ranks [status]      the pool: its run, each rank's pid, device and state
            %ranks push NAME ... send the kernel's objects to every rank (pickled)
            %ranks pull NAME [--from K] [--as LOCAL]
                                 bring rank K's object back (default rank 0); a module's
                                 weights load into the kernel's module of that name
            %ranks scatter NAME [--as NAME]
                                 a tensor, array or list split along its first dimension,
                                 one part per rank
            %ranks gather NAME [--as LOCAL]
                                 every rank's NAME joined along the first dimension, in rank order
            %ranks restart [K ...]
                                 a new process for rank K (a dead one, or one that is stuck),
                                 joined with the others, which keep their state; then the
                                 --on-join cell runs on every rank. Without K: every dead rank,
                                 or a process group that could not be rebuilt
            %ranks wait          the end of a --bg cell: its errors, as the cell would have shown them
            %ranks stop          end the pool (kernel shutdown, restart or death ends it too)

        Cell form::

            %%ranks [RANKS] [--all-output] [--stall-timeout S] [--bg]
            <code run on every rank, or on RANKS: 0, or 0,2>

            %%ranks --on-join
            <code every rank runs after a replacement rank joined (empty: none)>

        The cell's output streams in live (rank 0's; --all-output: every rank's, each line
        prefixed); rank 0's displays and figures show here. An error on any rank ends the cell
        with that rank's traceback (one traceback for the same error on several ranks); the
        ranks still busy are interrupted, a collective waiting for the failed rank is aborted,
        the process group is rebuilt, and every rank keeps its state. A kernel interrupt does
        the same (inside fit: a stop at the next step, with a checkpoint). A rank that dies is
        named ("rank 3 died: killed by SIGKILL — out of memory?"); the others keep their state.
        When a rank has not finished S seconds (default 10) after another did, the cell says
        where each rank is: the collective it waits in and the rank that never came. --bg
        returns at once; its output streams in; %ranks wait collects its end. %%train --nproc
        N uses a pool of N: no export, the objects the ranks hold.
        """
        if cell is not None:
            return self._cell(line, cell)
        words = shlex.split(line)
        command, rest = (words[0], words[1:]) if words else ("status", [])
        handler = {
            "start": self._start,
            "status": self._status,
            "stop": self._stop,
            "push": self._push,
            "pull": self._pull,
            "scatter": self._scatter,
            "gather": self._gather,
            "restart": self._restart,
            "wait": self._wait_background,
        }.get(command)
        if handler is None:
            raise UsageError(
                f"%ranks {command}: expected start, status, stop, push, pull, scatter, gather, restart or wait"
            )
        return handler(rest)

    # -- the pool ----------------------------------------------------------------------------------
    def _start(self, words: list[str]) -> None:
        from ..jobs.job_error import JobError
        from ..ranks.agent import PoolAgent
        from ..ranks.pool import RanksPool

        args = START.parse_args(words)
        if self.agent is not None and not self.agent.pool.ended and self.agent.pool.alive():
            raise UsageError(f"a pool runs already: {self.agent.pool.describe()}; %ranks stop first")
        slurm = {name: getattr(args, name) for name in POOL_SLURM_OPTIONS if getattr(args, name) is not None}
        if args.backend == "local" and (slurm or args.nnodes != 1):
            named = [*slurm, *(["nnodes"] if args.nnodes != 1 else [])]
            flags = {spec.name: spec.flag for spec in START_OPTIONS}
            given = ", ".join(flags[name] for name in named)
            raise UsageError(f"%ranks start: {given} take(s) --backend slurm (a local pool runs on this machine)")
        if args.replace_dead and args.backend != "local":
            raise UsageError(
                "%ranks start: --replace-dead needs a local pool (torchrun ends a Slurm pool's ranks together)"
            )
        try:
            stall = check_stall_timeout(args.stall_timeout)
        except BadStallTimeout as error:
            raise UsageError(f"%ranks start: --stall-timeout {args.stall_timeout:g}: expected {error}") from None
        notebook = LaunchContext.from_environ().notebook or self.ipython.user_ns.get("__session__")
        try:
            pool = RanksPool.start(
                args.nproc,
                device=args.device,
                gpus=args.gpus,
                name=args.name,
                notebook=notebook,
                nodes=args.nnodes,
                backend=args.backend,
                slurm=slurm or None,
                on_wait=lambda text: print(f"jiyu: {text}", flush=True),
                stall=stall or None,
                on_stall=show_start_stall,
            )
        except JobError as error:
            raise UsageError(str(error)) from None
        except KeyboardInterrupt:  # its run was ended, nothing of it left running (the lifecycle)
            raise UsageError("%ranks start: interrupted; no pool was started") from None
        pool.watch_idle()
        self.agent = PoolAgent(pool, replace_dead=args.replace_dead)
        print(f"jiyu: {pool.describe()}: ready in {time.time() - pool.started:.1f} s")

    def _status(self, words: list[str]) -> None:
        if words:
            raise UsageError(f"%ranks status takes no arguments, got {' '.join(words)}")
        if self.agent is None:
            print("jiyu: no ranks pool runs in this kernel (%ranks start N)")
            return
        pool = self.agent.pool
        if pool.ended or not pool.alive():
            print(f"jiyu: ranks pool {pool.run_id} has ended ({pool.record_end()})")
            return
        print(pool.describe())
        if self.agent.broken:
            print(f"jiyu: {self.agent.broken}")

    def _stop(self, words: list[str]) -> None:
        if words:
            raise UsageError(f"%ranks stop takes no arguments, got {' '.join(words)}")
        if self.agent is None:
            print("jiyu: no ranks pool runs in this kernel (%ranks start N)")
            return
        agent, self.agent = self.agent, None
        self.background = None
        print(f"jiyu: {agent.pool.shutdown() or f'ranks pool {agent.run_id} had already ended'}")

    def _restart(self, words: list[str]) -> None:
        args = RESTART.parse_args(words)
        agent = self._agent()
        from ..jobs.job_error import JobError

        pool = agent.pool
        ranks = args.ranks or pool.dead()
        bad = [rank for rank in ranks if not 0 <= rank < pool.nproc]
        if bad:
            raise UsageError(f"%ranks restart {bad[0]}: this pool has ranks 0 to {pool.nproc - 1}")
        began = time.monotonic()
        echo = Echo(all_ranks=False)
        try:
            if ranks:
                outcome = agent.replace(ranks, on_message=echo.take)
            elif agent.broken:
                agent.rebuild("asked by %ranks restart")
                print("jiyu: the process group was rebuilt; every rank kept its state")
                return
            else:
                print("jiyu: every rank runs; nothing to restart (%ranks restart K replaces rank K)")
                return
        except JobError as error:
            raise UsageError(str(error)) from None
        print(
            f"jiyu: {pool.describe()}: rank(s) {', '.join(map(str, ranks))} joined in {time.monotonic() - began:.1f} s"
        )
        if outcome.joined is not None:
            from ..ranks.agent import Outcome

            report(Outcome(outcome.joined), "%%ranks --on-join")

    def _agent(self) -> PoolAgent:
        """The pool, refused in one line when there is none or it ended (nothing restarts it
        unasked: a stop stays a stop)."""
        from ..ranks.agent import PoolGone

        if self.agent is None:
            raise UsageError("no ranks pool runs in this kernel: %ranks start N")
        try:
            self.agent.check()
        except PoolGone as gone:
            self.agent = None
            raise UsageError(str(gone)) from None
        if self.background is not None and not self.background.done.is_set():
            raise UsageError("a %%ranks --bg cell runs on the pool: %ranks wait for its end first")
        return self.agent

    def _run(self, what: str, *args, **kwargs) -> Outcome:
        """A request through the agent; the pool's refusals (a dead rank, a broken group) as one line."""
        from ..jobs.job_error import JobError

        agent = self._agent()
        try:
            return agent.run(*args, **kwargs)
        except JobError as error:
            raise UsageError(f"{what}: {error}") from None

    def _at_exit(self) -> None:
        if self.agent is not None:
            self.agent.pool.shutdown()

    # -- objects -----------------------------------------------------------------------------------
    def _push(self, words: list[str]) -> None:
        from ..ranks.protocol import Kind

        args = PUSH.parse_args(words)
        counts, buffers = self._packed(args.names, "%ranks push")
        self._warn_size(sum(len(memoryview(b)) for b in buffers))
        outcome = self._run("%ranks push", Kind.PUSH, {"names": args.names, "counts": counts}, buffers=buffers)
        report(outcome, "%ranks push")
        print(f"jiyu: pushed {', '.join(args.names)} to {len(outcome.request.ranks)} rank(s)")

    def _packed(self, names: list[str], what: str, values: list | None = None) -> tuple[list[int], list]:
        """The objects as the ranks take them (``ranks.objects``); what pickle refuses, in one line."""
        from ..ranks.objects import pack

        counts: list[int] = []
        buffers: list = []
        for index, name in enumerate(names):
            if values is None and name not in self.ipython.user_ns:
                raise UsageError(f"{what}: no {name!r} in the notebook")
            value = self.ipython.user_ns[name] if values is None else values[index]
            try:
                count, parts = pack([value])
            except Exception as error:  # noqa: BLE001 - whatever pickle refuses, in one line
                raise UsageError(f"{what}: {name} cannot be pickled: {type(error).__name__}: {error}") from None
            counts += count
            buffers += parts
        return counts, buffers

    def _warn_size(self, size: int) -> None:
        if size > PUSH_WARN_BYTES and self.agent is not None:
            print(f"jiyu: sending {size / 2**20:.0f} MiB to {self.agent.pool.nproc} ranks", file=sys.stderr)

    def _pull(self, words: list[str]) -> None:
        from ..ranks.objects import unpack
        from ..ranks.protocol import Kind

        args = PULL.parse_args(words)
        outcome = self._run("%ranks pull", Kind.PULL, {"name": args.name}, ranks=[args.rank])
        report(outcome, "%ranks pull")
        message = outcome.request.values[args.rank]
        (value,) = unpack(message["counts"], message.buffers)  # from the pool's own rank
        local = args.local or args.name
        target = self.ipython.user_ns.get(local)
        if message["form"] == "state_dict" and hasattr(target, "load_state_dict"):
            target.load_state_dict(value)
            print(f"jiyu: loaded rank {args.rank}'s {args.name} weights into the notebook's {local}")
            self._pulled_training(f" (rank {args.rank}'s trained {args.name} was pulled into the notebook's {local})")
            return
        self.ipython.user_ns[local] = value
        what = "weights (a state dict: no module of that name here)" if message["form"] == "state_dict" else "value"
        print(f"jiyu: {local} = rank {args.rank}'s {args.name} {what}")

    def _pulled_training(self, said: str) -> None:
        """The latest %%train on the pool no longer says its weights are only in the ranks."""
        from ..ranks.placement import PULL_HINT

        trained = self.agent.trained if self.agent is not None else None
        if trained is not None and PULL_HINT in trained.message:
            trained.message = trained.message.replace(PULL_HINT, said)

    def _scatter(self, words: list[str]) -> None:
        from ..ranks.protocol import Kind
        from ..train.array_parts import split

        args = SCATTER.parse_args(words)
        agent = self._agent()
        if args.name not in self.ipython.user_ns:
            raise UsageError(f"%ranks scatter: no {args.name!r} in the notebook")
        try:
            parts = split(self.ipython.user_ns[args.name], agent.pool.nproc)
        except TypeError as error:
            raise UsageError(f"%ranks scatter: {error}") from None
        remote = args.remote or args.name
        packed = {rank: self._packed([remote], "%ranks scatter", [part]) for rank, part in enumerate(parts)}
        per_rank = {rank: buffers for rank, (_, buffers) in packed.items()}
        fields = {"names": [remote], "counts": {rank: counts for rank, (counts, _) in packed.items()}}
        outcome = self._run("%ranks scatter", Kind.PUSH, fields, per_rank=per_rank)
        report(outcome, "%ranks scatter")
        sizes = ", ".join(str(_length(part)) for part in parts)
        print(f"jiyu: scattered {args.name} as {remote} over {len(parts)} rank(s) ({sizes} along the first dimension)")

    def _gather(self, words: list[str]) -> None:
        from ..ranks.objects import unpack
        from ..ranks.protocol import Kind
        from ..train.array_parts import join

        args = GATHER.parse_args(words)
        outcome = self._run("%ranks gather", Kind.PULL, {"name": args.name})
        report(outcome, "%ranks gather")
        values = outcome.request.values
        parts = [unpack(values[rank]["counts"], values[rank].buffers)[0] for rank in sorted(values)]
        try:
            joined = join(parts)
        except TypeError as error:
            raise UsageError(f"%ranks gather: {error}") from None
        local = args.local or args.name
        self.ipython.user_ns[local] = joined
        print(
            f"jiyu: {local} = {args.name} of {len(parts)} rank(s), joined along the first dimension ({_length(joined)})"
        )

    # -- cells -------------------------------------------------------------------------------------
    def _cell(self, line: str, cell: str) -> None:
        from ..ranks.protocol import Kind

        args = CELL.parse_args(shlex.split(line))
        if args.on_join:
            self._on_join(args, cell)
            return
        agent = self._agent()
        ranks = _ranks(args.ranks, agent.pool.nproc)
        echo = Echo(all_ranks=args.all_output, shown=ranks[0] if args.ranks else 0)
        if args.bg:
            self.background = Background.start(agent, cell, ranks, echo, args.stall_timeout)
            return
        stalled: list[bool] = []

        def on_stall(request: Request) -> None:
            stalled.append(True)
            show_stall(agent, request, args.stall_timeout)

        try:
            outcome = self._run(
                "%%ranks",
                Kind.EXECUTE,
                {"code": cell},
                ranks=ranks,
                on_message=echo.take,
                stall=args.stall_timeout,
                on_stall=on_stall,
            )
        finally:
            if stalled:  # the stall is over with the cell
                agent.pool.lifecycle.store.mark_stalled(agent.run_id, None)
        echo.flush()
        report(outcome, "%%ranks")

    def _on_join(self, args: argparse.Namespace, cell: str) -> None:
        if args.ranks or args.bg or args.all_output:
            raise UsageError("%%ranks --on-join takes no ranks, --bg or --all-output: it runs on every rank")
        agent = self._agent()
        agent.join_hook = cell if cell.strip() else None
        if agent.join_hook is None:
            print("jiyu: no join hook: a replacement rank joins with an empty namespace")
        else:
            print("jiyu: kept as the join hook: every rank runs it after a replacement rank joined")

    def _wait_background(self, words: list[str]) -> None:
        if words:
            raise UsageError(f"%ranks wait takes no arguments, got {' '.join(words)}")
        if self.background is None:
            print("jiyu: no %%ranks --bg cell to wait for")
            return
        background, self.background = self.background, None
        report(background.wait(), "%%ranks --bg")


def _ranks(text: str | None, nproc: int) -> list[int]:
    """``0`` or ``0,2``: which ranks run the cell (default: all)."""
    if text is None:
        return list(range(nproc))
    try:
        ranks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"%%ranks {text}: expected rank numbers like 0 or 0,2") from None
    bad = [rank for rank in ranks if not 0 <= rank < nproc]
    if not ranks or bad:
        raise UsageError(f"%%ranks {text}: this pool has ranks 0 to {nproc - 1}")
    return ranks


def _length(value) -> object:
    shape = getattr(value, "shape", None)
    return tuple(shape)[0] if shape else len(value)


MAGICS = [RanksMagics]


def pool_of(shell) -> PoolAgent | None:
    """The ranks pool this kernel drives (its agent), if one runs (``%%train --nproc N`` trains on it)."""
    magics = shell.magics_manager.registry.get("RanksMagics")
    agent = getattr(magics, "agent", None)
    return agent if agent is not None and not agent.pool.ended else None
