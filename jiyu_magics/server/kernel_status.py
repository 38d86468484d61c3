"""The kernel's "Busy" stays in JupyterLab's status bar while a ``%%train`` cell runs.

JupyterLab sets the kernel's status from every ``status`` message on IOPub except those whose
parent's type the server lists as untracked (``MappingKernelManager.untracked_message_types``,
passed to the page config): the list should hold every message type sent on a channel other
than the shell's. ipykernel 7 answers the subshell requests of the kernel protocol 5.5 on the
control channel, with a busy/idle pair of its own, and jupyter_server 2.x does not list them:
the ipywidgets manager asks for a subshell as the training dashboard first renders, the
control thread's ``idle`` arrives while the main shell is still busy, and the status bar says
"Idle" until the cell ends. Listing them (as control messages, not user activity: a kernel
is no more or less idle for them) keeps the status bar right.
"""

from __future__ import annotations

from typing import Any

CONTROL_MESSAGES = (
    "create_subshell_request",
    "create_subshell_reply",
    "delete_subshell_request",
    "delete_subshell_reply",
    "list_subshell_request",
    "list_subshell_reply",
)


def untrack_control_messages(serverapp: Any) -> list[str]:
    """Adds the subshell messages to the server's untracked types, and to the page config
    JupyterLab already built from them when its extension loaded before this one; returns
    what was added."""
    manager = getattr(serverapp, "kernel_manager", None)
    listed = getattr(manager, "untracked_message_types", None)
    if manager is None or listed is None:
        return []
    added = [kind for kind in CONTROL_MESSAGES if kind not in listed]
    if added:
        manager.untracked_message_types = [*listed, *added]
    page = getattr(serverapp, "web_app", None)
    config = page.settings.get("page_config_data") if page is not None else None
    if isinstance(config, dict) and isinstance(config.get("untracked_message_types"), list):
        shown = config["untracked_message_types"]
        shown += [kind for kind in CONTROL_MESSAGES if kind not in shown]
    return added
