"""JupyterLab's status bar says "Busy" for the whole of a ``%%train`` cell: the kernel's
subshell messages (ipykernel 7, kernel protocol 5.5, sent on the control channel with a
busy/idle pair of their own when the widget manager asks for a subshell) are listed as
untracked in the page config the real JupyterLab reads, so their ``idle`` does not flip the
status while the cell still runs (``jiyu_magics.server.kernel_status``)."""

from __future__ import annotations

import json
import re

import pytest

from .server_fixtures import server_config

SUBSHELL_MESSAGES = {"create_subshell_request", "create_subshell_reply", "list_subshell_request"}


def lab_config():
    config = server_config()
    config.ServerApp.jpserver_extensions = {**config.ServerApp.jpserver_extensions, "jupyterlab": True}
    return config


@pytest.mark.parametrize("jp_server_config", [lab_config()])
async def test_the_lab_page_config_leaves_subshell_messages_out_of_the_kernel_status(jp_serverapp, jp_fetch):
    page = (await jp_fetch("lab", method="GET")).body.decode()
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    assert found, "JupyterLab's page config"
    untracked = set(json.loads(found.group(1))["untracked_message_types"])
    assert SUBSHELL_MESSAGES <= untracked
    assert "execute_request" not in untracked, "a cell's own busy/idle still sets the status"
    assert SUBSHELL_MESSAGES <= set(jp_serverapp.kernel_manager.untracked_message_types)
