"""The server's kernels as GPU owners: pid → kernel id, session, notebook path and idle time,
through jupyter_server's own kernel and session managers (not the process table), so a GPU
process maps to the notebook a person has open.

Read on the event loop (the session manager's SQLite connection belongs to it); the result is
plain data handed to the NVML thread.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..core.gpu.owners import KernelInfo


async def kernel_infos(serverapp: Any) -> dict[int, KernelInfo]:
    """Every running kernel with a known pid (a remote or gateway kernel has none here)."""
    manager = serverapp.kernel_manager
    sessions = await _sessions_by_kernel(serverapp.session_manager)
    now = datetime.now(timezone.utc)
    found: dict[int, KernelInfo] = {}
    for kernel_id in manager.list_kernel_ids():
        kernel = manager.get_kernel(kernel_id)
        pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
        if not isinstance(pid, int):
            continue
        session = sessions.get(kernel_id, {})
        state = getattr(kernel, "execution_state", None)
        last = getattr(kernel, "last_activity", None)
        idle = (now - last).total_seconds() if state == "idle" and isinstance(last, datetime) else None
        found[pid] = KernelInfo(
            kernel_id,
            pid,
            notebook=session.get("path"),
            session_id=session.get("id"),
            execution_state=state,
            idle_s=idle,
        )
    return found


async def _sessions_by_kernel(sessions: Any) -> dict[str, dict]:
    try:
        listed = await sessions.list_sessions()
    except Exception:  # noqa: BLE001 - a broken session store must not hide the GPUs
        return {}
    return {s["kernel"]["id"]: s for s in listed if s.get("kernel")}
