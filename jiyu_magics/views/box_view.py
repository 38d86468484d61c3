"""``jiyu box`` as text: who holds the box's GPUs, who waits, the change log, idle kernels.
Other users' entries say the user, the kind of run and times; their runs' names, notebooks and
paths are never in the book."""

from __future__ import annotations

import time

from ..core.box.identity import span
from .format import NA, human_bytes, text_table


def render_status(status: dict, location) -> str:
    me, policy = status["me"], status["policy"]
    out = [f"Box {location.root} · you are {me['user']}" + (" (admin)" if me["admin"] else "")]
    out.append(policy_line(policy))
    if policy.get("problem"):
        out.append(f"policy problem: {policy['problem']}")
    now = time.time()
    if status["leases"]:
        rows = [
            [str(lease["index"]), lease["user"], lease["kind"] or NA, lease["run_id"], span(now - lease["since"])]
            + (["shared"] if lease["shared"] else [""])
            for lease in status["leases"]
        ]
        out += ["", "Leased GPUs:", text_table(["GPU", "user", "kind", "run", "held", ""], rows, right={0})]
    else:
        out += ["", "No GPU is leased."]
    if status["queue"]:
        out += ["", "Queue:", queue_table(status["queue"], now)]
    else:
        out += ["", "Nobody waits for GPUs."]
    return "\n".join(out)


def policy_line(policy: dict) -> str:
    cap = policy.get("max_gpus_per_user") or "no limit"
    preempt = policy.get("preempt_after_minutes")
    parts = [
        f"GPUs per user: {cap}",
        f"fair share over {policy.get('fair_share_hours', 24):g} h",
        f"may jump the queue: {', '.join(policy.get('may_jump_queue') or []) or 'admins only'}",
        f"preemption after {preempt:g} min" if preempt is not None else "no preemption",
        f"idle kernels warned after {policy.get('idle_kernel_minutes', 30):g} min",
    ]
    return "Policy: " + "; ".join(parts)


def queue_table(queue: list[dict], now: float) -> str:
    rows = [
        [
            str(w["position"]),
            w["user"],
            w["kind"],
            w["run_id"],
            f"{w['gpus']} GPU(s)",
            span(now - w["queued"]),
            w.get("waiting_reason") or "",
        ]
        for w in queue
    ]
    return text_table(["#", "user", "kind", "run", "wants", "waiting", "why"], rows, right={0})


def render_changes(changes: list[dict]) -> str:
    if not changes:
        return "No changes to the book yet."
    rows = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["at"])),
            c["by"] + (f" (pid {c['pid']})" if c.get("pid") else ""),
            c["action"],
            c.get("owner") or "",
            c.get("run_id") or "",
            c.get("detail") or "",
        ]
        for c in changes
    ]
    return text_table(["when", "by", "change", "whose", "run", "detail"], rows)


def render_idle(idle: dict) -> str:
    kernels = idle["kernels"]
    limit = idle["limit_s"] / 60
    if not kernels:
        return f"No kernel holds GPU memory (kernels idle over {limit:g} min are listed here)."
    rows = [
        [
            k["user"],
            k["kernel_id"][:8],
            ",".join(map(str, k["gpus"])),
            human_bytes(k["memory"]),
            "running a cell" if k["busy"] else span(k["idle_s"] or 0),
            "over the limit" if k["over_limit"] else "",
            "asked" if k["reclaim_asked"] else "",
        ]
        for k in kernels
    ]
    table = text_table(["user", "kernel", "GPUs", "memory", "idle", f"over {limit:g} min", "reclaim"], rows)
    return table + "\n`jiyu box reclaim USER KERNEL` (admins) asks that user's Jupyter server to shut one down."
