"""The box's rules, as data in one file its admin owns (``policy.yaml`` beside the book).

The keeper reads it again whenever it changes. A file that anyone but its owner can write, or
that is not owned by the keeper's user, is not trusted: the keeper keeps the rules it had and
says why (``jiyu box status``). A value of the wrong kind is refused in one line that names
the key, and the previous rules stay.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

TEMPLATE = """\
# The GPU box's policy, read by jiyu's book keeper whenever it changes (only its owner may write it).
# members of this Unix group may lease the box's GPUs (absent: every user of the machine)
{group_line}
# GPUs one user may hold at once (absent or 0: no limit)
max_gpus_per_user: 0
# fair share: among waiting runs, the user with fewer GPU-hours in this many recent hours goes first
fair_share_hours: 24
# users whose `jiyu queue --top` moves their run ahead of other users' runs
may_jump_queue: []
# besides root: may list every user's idle kernels, reclaim them, and read the whole change log
admins: []
# a run waiting this many minutes may preempt other users' --preemptible runs (absent: never)
# preempt_after_minutes: 30
# kernels idle this many minutes while holding GPU memory are warned, and an admin may reclaim them
idle_kernel_minutes: 30
"""


class PolicyError(ValueError):
    """The policy file cannot be used; ``str()`` is one line naming the key or the problem."""


@dataclass(frozen=True)
class Policy:
    group: str | None = None
    max_gpus_per_user: int = 0
    fair_share_hours: float = 24.0
    may_jump_queue: tuple[str, ...] = ()
    admins: tuple[str, ...] = ()
    preempt_after_minutes: float | None = None
    idle_kernel_minutes: float = 30.0
    problem: str | None = field(default=None, compare=False)  # why the file on disk is not in force

    @property
    def preempt_after_s(self) -> float | None:
        return None if self.preempt_after_minutes is None else self.preempt_after_minutes * 60.0

    @property
    def idle_kernel_s(self) -> float:
        return self.idle_kernel_minutes * 60.0

    def cap(self) -> int | None:
        return self.max_gpus_per_user or None

    def is_admin(self, uid: int, user: str) -> bool:
        return uid == 0 or user in self.admins

    def may_jump(self, uid: int, user: str) -> bool:
        return self.is_admin(uid, user) or user in self.may_jump_queue

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_KINDS: dict[str, type | tuple[type, ...]] = {
    "group": (str, type(None)),
    "max_gpus_per_user": int,
    "fair_share_hours": (int, float),
    "may_jump_queue": list,
    "admins": list,
    "preempt_after_minutes": (int, float, type(None)),
    "idle_kernel_minutes": (int, float),
}


def parse(text: str) -> Policy:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise PolicyError(f"not YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PolicyError("expected a mapping of settings")
    values = {}
    for key, value in data.items():
        kinds = _KINDS.get(key)
        if kinds is None:
            raise PolicyError(f"unknown setting {key!r} (known: {', '.join(_KINDS)})")
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise PolicyError(f"{key}: {value!r} is not a {_describe(key)}")
        if isinstance(value, (int, float)) and value < 0:
            raise PolicyError(f"{key}: {value!r} is below 0")
        if isinstance(value, list):
            if not all(isinstance(name, str) for name in value):
                raise PolicyError(f"{key}: expected a list of user names")
            value = tuple(value)
        values[key] = value
    return Policy(**values)


def _describe(key: str) -> str:
    return {"may_jump_queue": "list of user names", "admins": "list of user names", "group": "group name"}.get(
        key, "number"
    )


def load(path: Path, keeper_uid: int, previous: Policy | None = None) -> Policy:
    """The policy in ``path``; when it cannot be trusted or read, ``previous`` (or the
    defaults) with ``problem`` saying why."""
    fallback = previous or Policy()
    try:
        info = os.stat(path)
        text = path.read_text()
    except FileNotFoundError:
        return Policy()
    except OSError as error:
        return _keeping(fallback, f"{path} cannot be read ({error.strerror or error})")
    if info.st_uid not in (0, keeper_uid):
        return _keeping(fallback, f"{path} is owned by uid {info.st_uid}, not by the box's admin")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _keeping(fallback, f"{path} may be written by others (mode {stat.S_IMODE(info.st_mode):04o})")
    try:
        return parse(text)
    except PolicyError as error:
        return _keeping(fallback, f"{path}: {error}")


def _keeping(policy: Policy, problem: str) -> Policy:
    values = policy.to_dict()
    values["problem"] = f"{problem}; the previous rules stay in force"
    return Policy(**values)


def template(group: str | None) -> str:
    return TEMPLATE.format(group_line=f"group: {group}" if group else "# group: gpu-users")
