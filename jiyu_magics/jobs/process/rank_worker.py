"""The entry point of every rank: ``python -m jiyu_magics.jobs.process.rank_worker SCRIPT [ARGS...]``.

It runs the script as ``__main__`` (as ``python SCRIPT`` would) and records the rank's start,
exit code and one-line error in the run folder (``jobs.ranks``). An uncaught error is also
written to torch elastic's error file (``TORCHELASTIC_ERROR_FILE``, the format of torch's
``@record``), so torchrun's own failure summary names the root cause. Signals keep their
default meaning: a rank blocked in a collective must still die at once on SIGTERM.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback

from ...core.run_files import RUN_ID_ENV
from ...core.run_store import process_start_time
from . import rank_records as ranks
from .error_line import one_line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m jiyu_magics.jobs.process.rank_worker SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = os.path.abspath(argv[0])
    run_id = os.environ.get(RUN_ID_ENV)
    record = _start_record() if run_id else None
    if record:
        ranks.write(run_id, record)
    code, error = _run(script, argv)
    if record:
        record.ended, record.exit_code, record.error = time.time(), code, error
        ranks.write(run_id, record)
    return code


def _run(script: str, argv: list[str]) -> tuple[int, str | None]:
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        return _exit_status(exit.code)
    except BaseException as error:  # noqa: BLE001 - every uncaught error ends the rank, recorded
        _print_user_traceback(error, script)
        _write_elastic_error_file(error)
        return (130 if isinstance(error, KeyboardInterrupt) else 1), one_line(error)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0, None


def _exit_status(code) -> tuple[int, str | None]:
    """``sys.exit`` semantics: None is 0, a number is itself, anything else is printed, 1."""
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, (f"exited with code {code}" if code else None)
    print(code, file=sys.stderr)
    return 1, str(code).splitlines()[0] if str(code) else "exited with code 1"


def _start_record() -> ranks.RankRecord:
    env = os.environ
    rank = int(env.get("RANK", "0"))
    return ranks.RankRecord(rank=rank, local_rank=int(env.get("LOCAL_RANK", rank)), pid=os.getpid(),
                            restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
                            started=process_start_time(os.getpid()) or time.time(),
                            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"))


def _print_user_traceback(error: BaseException, script: str) -> None:
    """The traceback from the script's first frame on: runpy's and our frames are noise."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def _write_elastic_error_file(error: BaseException) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return  # no torchrun, or the script's own @record already wrote it
    data = {"message": {"message": f"{type(error).__name__}: {error}",
                        "extraInfo": {"py_callstack": traceback.format_exc(),
                                      "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
