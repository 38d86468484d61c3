"""``%ranks`` and ``%%ranks``: torchrun ranks that stay alive across cells, driven from a notebook.

The pool (``jobs.ranks.pool``) is a run of kind ``ranks``; this module parses, delegates and shows.
A cell's output streams in live (rank 0's, or every rank's with ``--all-output``), rank 0's rich
output (a display, a figure, the last expression) shows as the kernel's own, and a failing rank
ends the cell with its error and the traceback of its cell. The pool lives on through errors and
interrupts; when a rank died or stayed stuck in a collective it is started again, and the cell
says that the ranks' state was lost.
"""

from __future__ import annotations

import argparse
import atexit
import os
import pickle
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..core.runs.launch_context import NOTEBOOK_ENV

if TYPE_CHECKING:  # imported when a pool starts: %load_ext stays light (no zmq, no lifecycle)
    from IPython.core.interactiveshell import InteractiveShell

    from ..jobs.ranks.channel import Message
    from ..jobs.ranks.pool import RanksPool, Request

PUSH_WARN_BYTES = 100 * 2**20
WATCH_S = 1.0
DEFAULT_STALL_S = 10.0


class RankCellError(RuntimeError):
    """A rank's cell failed: one line naming the rank and its error, then that rank's
    traceback as its shell formatted it (the cell's own frames)."""

    def __init__(self, rank: int, line: str, traceback: Sequence[str] = ()):
        super().__init__(f"rank {rank}: {line}")
        self.rank, self.traceback = rank, list(traceback)

    def _render_traceback_(self) -> list[str]:
        return [*self.traceback, f"(on rank {self.rank})"] if self.traceback else [f"RankCellError: {self}"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")


def _parser(prog: str) -> _Parser:
    return _Parser(prog=prog, add_help=False)


START = _parser("%ranks start")
START.add_argument("nproc", type=int)
START.add_argument("--device", default=None, help="cpu: gloo ranks that lease no GPU")
START.add_argument("--gpus", type=int, default=None)
START.add_argument("--name", default=None)
START.add_argument("--backend", choices=("local", "slurm"), default="local")
START.add_argument("--nodes", type=int, default=1)
START.add_argument("--partition", default=None)
START.add_argument("--time", default=None)
START.add_argument("--gpus-per-node", type=int, default=None)
PUSH = _parser("%ranks push")
PUSH.add_argument("names", nargs="+")
PULL = _parser("%ranks pull")
PULL.add_argument("name")
PULL.add_argument("--from", dest="rank", type=int, default=0)
PULL.add_argument("--as", dest="local", default=None)
CELL = _parser("%%ranks")
CELL.add_argument("ranks", nargs="?", default=None)
CELL.add_argument("--all-output", action="store_true")
CELL.add_argument("--stall-timeout", type=float, default=DEFAULT_STALL_S)


@magics_class
class RanksMagics(Magics):
    def __init__(self, shell: InteractiveShell | None = None) -> None:
        super().__init__(shell)
        self.pool: RanksPool | None = None
        self.busy = False
        self.died: str | None = None  # why the pool ended while no cell watched it
        self._watch: threading.Thread | None = None
        atexit.register(self._at_exit)

    @property
    def ipython(self) -> InteractiveShell:
        if self.shell is None:
            raise UsageError("%ranks runs in an IPython shell")
        return self.shell

    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None):
        """Ranks that stay alive across cells: torchrun workers that keep their variables,
        their process group and their GPU memory from one cell to the next.

        Line form::

            %ranks start N [--device cpu] [--gpus G] [--name NAME]
                                 start N ranks under torchrun (gloo on the CPU, NCCL on GPUs);
                                 the pool is a run: it leases its GPUs through the queue and
                                 shows in %jobs, jiyu jobs and the lab panel
            %ranks start N --backend slurm --nodes M [--partition P] [--time T]
                           [--gpus-per-node G] [--device cpu]
                                 N ranks on each of M nodes of a Slurm allocation (waits while
                                 Slurm holds the job); the kernel lets in the allocation's
                                 nodes only, and interrupts reach the ranks over the channel
            %ranks [status]      the pool: its run, each rank's pid and device
            %ranks push NAME ... send the kernel's objects to every rank (pickled)
            %ranks pull NAME [--from K] [--as LOCAL]
                                 bring rank K's object back (default rank 0); a module's
                                 weights load into the kernel's module of that name
            %ranks stop          end the pool (kernel shutdown, restart or death ends it too)

        Cell form::

            %%ranks [RANKS] [--all-output] [--stall-timeout S]
            <code run on every rank, or on RANKS: 0, or 0,2>

        The cell's output streams in live (rank 0's; --all-output: every rank's, each line
        prefixed); rank 0's displays and figures show here. An error on any rank ends the cell
        with that rank's traceback; the ranks still busy are interrupted and the pool lives on.
        A kernel interrupt interrupts every rank's cell (inside fit: a stop at the next step,
        with a checkpoint). When a rank has not finished S seconds (default 10) after another
        did, the cell says it stalled, with every rank's stack. %%train --nproc N uses a pool
        of N: no export, the objects the ranks hold.
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
        }.get(command)
        if handler is None:
            raise UsageError(f"%ranks {command}: expected start, status, stop, push or pull")
        return handler(rest)

    # -- the pool ----------------------------------------------------------------------------------
    def _start(self, words: list[str]) -> None:
        args = START.parse_args(words)
        if self.pool is not None and self.pool.alive():
            raise UsageError(f"a pool runs already: {self.pool.describe()}; %ranks stop first")
        slurm = {"partition": args.partition, "time": args.time, "gpus_per_node": args.gpus_per_node}
        slurm = {name: value for name, value in slurm.items() if value is not None}
        if args.backend == "local" and (slurm or args.nodes != 1):
            named = [*slurm, *(["nodes"] if args.nodes != 1 else [])]
            given = ", ".join(f"--{name.replace('_', '-')}" for name in named)
            raise UsageError(f"%ranks start: {given} take(s) --backend slurm (a local pool runs on this machine)")
        self.pool = self._new_pool(
            args.nproc,
            device=args.device,
            gpus=args.gpus,
            name=args.name,
            nodes=args.nodes,
            backend=args.backend,
            slurm=slurm or None,
        )
        print(f"jiyu: {self.pool.describe()}: ready in {time.time() - self.pool.started:.1f} s")

    def _new_pool(self, nproc: int, **options) -> RanksPool:
        from ..jobs.job_error import JobError
        from ..jobs.ranks.pool import RanksPool

        notebook = os.environ.get(NOTEBOOK_ENV) or self.ipython.user_ns.get("__session__")
        try:
            pool = RanksPool.start(
                nproc, notebook=notebook, on_wait=lambda text: print(f"jiyu: {text}", flush=True), **options
            )
        except JobError as error:
            raise UsageError(str(error)) from None
        self.died = None
        self._watch = threading.Thread(target=self._watch_pool, args=(pool,), name="jiyu-ranks-watch", daemon=True)
        self._watch.start()
        return pool

    def _status(self, words: list[str]) -> None:
        if words:
            raise UsageError(f"%ranks status takes no arguments, got {' '.join(words)}")
        pool = self._require_pool()
        print(pool.describe())

    def _stop(self, words: list[str]) -> None:
        if words:
            raise UsageError(f"%ranks stop takes no arguments, got {' '.join(words)}")
        if self.pool is None:
            print("jiyu: no ranks pool runs in this kernel")
            return
        pool, self.pool = self.pool, None
        print(f"jiyu: {pool.shutdown() or f'ranks pool {pool.run_id} had already ended'}")

    def _require_pool(self) -> RanksPool:
        """The pool, started again when a rank died since the last cell (said in one line)."""
        if self.pool is None:
            raise UsageError("no ranks pool runs in this kernel: %ranks start N")
        if not self.pool.alive():
            why = self.died or self.pool.record_death()
            self._restart(f"it ended: {why}")
        return self.pool

    def _restart(self, reason: str) -> None:
        old = self.pool
        assert old is not None
        keep = ("device", "gpus", "name", "nodes", "backend", "slurm")
        self.pool = self._new_pool(old.nproc // old.options["nodes"], **{k: old.options[k] for k in keep})
        print(
            f"jiyu: ranks pool {old.run_id} was restarted as {self.pool.run_id} ({reason}); "
            "the ranks' state (variables, models) was lost",
            flush=True,
        )

    def _watch_pool(self, pool: RanksPool) -> None:
        """While no cell uses it: a pool whose rank died (or that ``jiyu stop`` stopped) has
        its end recorded now, not at the next cell."""
        while self.pool is pool and not pool.ended:
            time.sleep(WATCH_S)
            if not self.busy and self.pool is pool and not pool.ended and not pool.alive():
                self.died = pool.record_death()

    def _at_exit(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    # -- objects -----------------------------------------------------------------------------------
    def _push(self, words: list[str]) -> None:
        args = PUSH.parse_args(words)
        pool = self._require_pool()
        buffers = []
        for name in args.names:
            if name not in self.ipython.user_ns:
                raise UsageError(f"%ranks push: no {name!r} in the notebook")
            try:
                buffers.append(pickle.dumps(self.ipython.user_ns[name], protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as error:  # noqa: BLE001 - whatever pickle refuses, in one line
                raise UsageError(f"%ranks push: {name} cannot be pickled: {type(error).__name__}: {error}") from None
        size = sum(map(len, buffers))
        if size > PUSH_WARN_BYTES:
            print(f"jiyu: pushing {size / 2**20:.0f} MiB to each of {pool.nproc} ranks", file=sys.stderr)
        request = self._wait(pool.begin("push", {"names": args.names}, buffers=buffers))
        self._raise_first_failure(request, "%ranks push")
        print(f"jiyu: pushed {', '.join(args.names)} to {pool.nproc} rank(s)")

    def _pull(self, words: list[str]) -> None:
        args = PULL.parse_args(words)
        pool = self._require_pool()
        request = self._wait(pool.begin("pull", {"name": args.name}, ranks=[args.rank]))
        self._raise_first_failure(request, "%ranks pull")
        message = request.values[args.rank]
        value = pickle.loads(message.buffers[0])  # signed by the pool's own rank
        local = args.local or args.name
        target = self.ipython.user_ns.get(local)
        if message["form"] == "state_dict" and hasattr(target, "load_state_dict"):
            target.load_state_dict(value)
            print(f"jiyu: loaded rank {args.rank}'s {args.name} weights into the notebook's {local}")
            return
        self.ipython.user_ns[local] = value
        what = "weights (a state dict: no module of that name here)" if message["form"] == "state_dict" else "value"
        print(f"jiyu: {local} = rank {args.rank}'s {args.name} {what}")

    # -- cells -------------------------------------------------------------------------------------
    def _cell(self, line: str, cell: str) -> None:
        args = CELL.parse_args(shlex.split(line))
        pool = self._require_pool()
        ranks = _ranks(args.ranks, pool.nproc)
        echo = Echo(all_ranks=args.all_output, shown=ranks[0] if args.ranks else 0)
        request = self._wait(
            pool.begin("execute", {"code": cell}, ranks=ranks, on_message=echo.take), stall=args.stall_timeout
        )
        echo.flush()
        self._raise_first_failure(request, "%%ranks")

    def _wait(self, request: Request, stall: float | None = None) -> Request:
        """Until every rank replied: a kernel interrupt interrupts the ranks (a second one ends
        a pool whose ranks do not come back); a rank stuck after its peer failed, or a rank
        that died, restarts the pool."""
        self.busy = True
        flagged = False
        try:
            while True:
                try:
                    if request.pump():
                        break
                    if stall and not flagged and request.first_done and time.monotonic() - request.first_done > stall:
                        flagged = self._flag_stall(request, stall)
                except KeyboardInterrupt:
                    if request.released is not None and time.monotonic() - request.released > 1.0:
                        request.stuck = request.pending
                        break
                    request.interrupt()
        finally:
            self.busy = False
            if flagged:
                request.pool.lifecycle.store.mark_stalled(request.pool.run_id, None)
        pool = request.pool
        if request.stuck:
            stuck = ", ".join(map(str, request.stuck))
            pool.kill(f"rank {stuck} did not come back from an interrupt (stuck in a collective)")
            self._restart(f"rank {stuck} was stuck where an interrupt cannot reach (inside a collective)")
        elif "lost" in request.statuses.values():
            self._restart(f"it ended: {pool.record_death()}")
        return request

    def _flag_stall(self, request: Request, stall: float) -> bool:
        """Some ranks finished the cell, others not ``stall`` seconds later: say so, with every
        rank's stack (the pool run is flagged stalled while it lasts)."""
        from ..core.runs import stack_groups
        from ..jobs.stack_dump import dump_stacks

        pool = request.pool
        pool.lifecycle.store.mark_stalled(pool.run_id, request.first_done and time.time())
        folder = dump_stacks(pool.run_id)
        waiting = ", ".join(map(str, request.pending))
        print(f"jiyu: stalled: rank {waiting} has not finished {stall:g} s after another rank did", flush=True)
        if folder is not None:
            waiting_stacks = [s for s in stack_groups.read_dump(folder) if s.rank in request.pending]
            for group in stack_groups.group(waiting_stacks):
                print(f"jiyu:   {group.headline()}", flush=True)
            print(f"jiyu:   every rank's stack: jiyu stacks {pool.run_id}", flush=True)
        return True

    @staticmethod
    def _raise_first_failure(request: Request, what: str) -> None:
        failure = request.first_failure()
        if failure is not None:
            rank, error = failure
            raise RankCellError(rank, f"{error['ename']}: {error['evalue']}".rstrip(": "), error["traceback"])
        if request.refusals:
            rank = min(request.refusals)
            raise UsageError(f"{what}: {request.refusals[rank]}")


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


class Echo:
    """What a cell shows of the ranks' messages: streams as they come (each line prefixed
    with its rank when every rank's output is shown), displays of the shown rank."""

    def __init__(self, all_ranks: bool, shown: int = 0):
        self.all_ranks, self.shown = all_ranks, shown
        self.partial: dict[tuple[int, str], str] = {}

    def take(self, message: Message) -> None:
        rank = message.get("rank")
        if message.kind == "stream" and (self.all_ranks or rank == self.shown):
            self._stream(rank, message["name"], message["text"])
        elif message.kind == "display" and rank == self.shown:
            from IPython.display import publish_display_data

            publish_display_data(message["data"], message.get("metadata") or {})

    def _stream(self, rank: int, name: str, text: str) -> None:
        out = sys.stderr if name == "stderr" else sys.stdout
        if not self.all_ranks:
            out.write(text)
            out.flush()
            return
        text = self.partial.pop((rank, name), "") + text
        *lines, rest = text.split("\n")
        out.write("".join(f"[rank{rank}] {line}\n" for line in lines))
        out.flush()
        if rest:
            self.partial[(rank, name)] = rest

    def flush(self) -> None:
        for (rank, name), rest in self.partial.items():
            (sys.stderr if name == "stderr" else sys.stdout).write(f"[rank{rank}] {rest}\n")
        self.partial.clear()


MAGICS = [RanksMagics]


def pool_of(shell) -> RanksPool | None:
    """The ranks pool this kernel drives, if one runs (``%%train --nproc N`` trains on it)."""
    magics = shell.magics_manager.registry.get("RanksMagics")
    pool = getattr(magics, "pool", None)
    return pool if pool is not None and not pool.ended else None
