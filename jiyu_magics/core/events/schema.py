"""What one line of a run's event log is: a JSON object whose ``kind`` is an ``EventKind``, with
the fields that kind carries, each of a known type.

The table below is the one declaration of those fields: the readers in ``event_log`` check
every line against it (a line that is not an event object is skipped and counted, never
passed on to crash a view), ``run_state`` folds what it declares, and the REST schema the
panel's TypeScript is checked against is generated from it.

Fields by kind, as the training engine (``jiyu_magics.train``) writes them, at its log interval
only; every event has ``t`` (unix time) and ``kind``; ``null`` stands for "not known" (a
non-finite number is written as ``null``, the reason goes into a message); fields not declared
here are allowed and passed on unchecked:

- ``start`` (one per ``fit`` call; a run may hold several): ``run_id``, ``name``, ``total_steps``
  (None when unknown), ``epochs``, ``steps_per_epoch``, ``nproc``, ``batch_size`` (per process and
  micro-batch), ``accum``, ``amp`` (bf16|fp16|off), ``device``, ``params`` (parameter count),
  ``strategy`` (single|ddp|fsdp), ``backend`` (the process group's), ``data`` (how batches are
  made), ``start_step`` (> 0 when resumed), ``resumed_from`` (checkpoint path), ``from_notebook``
  (which optional objects ``%%train`` took from the notebook rather than its cell, e.g.
  ``from the notebook: val_loader (In [7])``; None when none), ``stall_timeout`` (seconds the
  step may stand still before the run's owner flags it stalled; None: the default rule, 0: off),
  ``track`` (the trackers the call asked for, a comma list: ``tensorboard:/abs/dir``,
  ``mlflow:URI``; the run's owner follows them: ``jiyu_magics.trackers``);
  what a tracker records of the call (``train.run_facts``): ``model`` and ``optimizer`` (class
  names), ``optimizer_groups`` (a list: per parameter group its ``lr``, ``weight_decay``,
  ``betas``, ``momentum``, ``eps``... as set when the call starts), ``scheduler`` (class name),
  ``config`` (an object: the values of the notebook's ``parameters`` cell, or ``fit(config=)``),
  ``options`` (an object: every ``fit`` option of the call); and its lineage when resumed:
  ``parent_run`` (the run that wrote the checkpoint) and ``parent_step`` (its step).
- ``step``: ``step`` (optimizer steps so far), ``epoch`` (1-based), ``loss`` (mean since the last
  log, over ranks), ``lr``, ``samples_per_s`` (all ranks), ``mem_alloc``/``mem_reserved``/
  ``mem_peak`` (bytes, CUDA only), ``data_wait`` (share 0..1 of wall time waiting for batches),
  ``grad_norm`` (before clipping, when clipping), ``elapsed`` and ``eta`` (seconds).
- ``val``: ``step``, ``epoch``, ``loss``, ``accuracy`` (None when not a classification).
- ``val_progress`` (while a validation pass runs, at the log interval): ``step`` (the training
  step it validates), ``batch`` (validation batches done on rank 0). Progress for the stall watch:
  a long validation is not a stall.
- ``ckpt``: ``step``, ``path``.  ``advice``: ``step``, ``message``.  ``gpu``: reserved.
- ``stall`` (written by the run's owner, not a rank, when the step stood still for ``timeout``
  seconds while the ranks lived): ``step`` (the last one logged), ``since`` (its time),
  ``timeout``, ``stacks`` (the folder holding every rank's stack dumped then). When the step
  moves again the owner writes a second one with ``cleared`` (the time it moved) and
  ``lasted`` (seconds it stood still).
- ``end``: ``status`` (succeeded|stopped|failed), ``step``, ``message``, ``elapsed``,
  ``samples_per_s`` (the call's samples, all ranks, over its training loop's wall time: the rate
  its views end on, not the last step event's); a run's launcher (a job's supervisor) may add
  its own after it, with ``exit_code`` and ``source``.
- ``error``: ``message``, ``step``, ``rank`` (the failing rank writes it: the one exception to
  "rank 0 writes"); a launcher's own has ``source`` instead of a rank.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from ..runs.model import EventKind, RunStatus

COMMON: dict[str, type] = {"t": float}
FIELDS: dict[EventKind, dict[str, type]] = {
    EventKind.START: {
        "run_id": str,
        "name": str,
        "total_steps": int,
        "epochs": int,
        "steps_per_epoch": int,
        "nproc": int,
        "batch_size": int,
        "accum": int,
        "amp": str,
        "device": str,
        "params": int,
        "strategy": str,
        "backend": str,
        "data": str,
        "start_step": int,
        "resumed_from": str,
        "from_notebook": str,
        "stall_timeout": float,
        "track": str,
        "model": str,
        "optimizer": str,
        "optimizer_groups": list,
        "scheduler": str,
        "config": dict,
        "options": dict,
        "parent_run": str,
        "parent_step": int,
    },
    EventKind.STEP: {
        "step": int,
        "epoch": int,
        "loss": float,
        "lr": float,
        "samples_per_s": float,
        "mem_alloc": float,
        "mem_reserved": float,
        "mem_peak": float,
        "data_wait": float,
        "grad_norm": float,
        "elapsed": float,
        "eta": float,
    },
    EventKind.VAL: {"step": int, "epoch": int, "loss": float, "accuracy": float},
    EventKind.VAL_PROGRESS: {"step": int, "batch": int},
    EventKind.CKPT: {"step": int, "path": str},
    EventKind.GPU: {},
    EventKind.ADVICE: {"step": int, "message": str},
    EventKind.STALL: {
        "step": int,
        "since": float,
        "timeout": float,
        "stacks": str,
        "cleared": float,
        "lasted": float,
    },
    EventKind.END: {
        "status": RunStatus,
        "step": int,
        "message": str,
        "elapsed": float,
        "samples_per_s": float,
        "exit_code": int,
        "source": str,
    },
    EventKind.ERROR: {"message": str, "step": int, "rank": int, "source": str},
}
KINDS = EventKind.values()


def _json_types(declared: type) -> frozenset:
    """The Python types ``json.loads`` gives for a declared type: a number may come as an int
    or a float (a step written as 3.0 harms nobody; a bool or a string would), a list or an
    object comes as itself, and ``None`` (``null``) is always "not known"."""
    if declared in (int, float):
        return frozenset({int, float, type(None)})
    return frozenset({declared if declared in (list, dict) else str, type(None)})


_TYPES = {
    kind: {key: _json_types(declared) for key, declared in {**COMMON, **fields}.items()}
    for kind, fields in FIELDS.items()
}
_VALUES = {
    kind: {
        key: {*(member.value for member in declared), None}
        for key, declared in fields.items()
        if issubclass(declared, Enum)  # the string-valued ones of runs.model
    }
    for kind, fields in FIELDS.items()
}


def is_event(value: Any) -> bool:
    """Whether a parsed line is an event object: a dict of a known kind whose declared fields
    have their declared types. ``42``, ``[1, 2]``, ``"x"`` or ``{"kind": "nope"}`` are not.
    Exact type checks, not ``isinstance``: every line of a log goes through here."""
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str) or value["kind"] not in _TYPES:
        return False
    types = _TYPES[value["kind"]]
    for key, item in value.items():
        allowed = types.get(key)
        if allowed is not None and type(item) not in allowed:
            return False
    return all(value.get(key) in allowed for key, allowed in _VALUES[value["kind"]].items())
