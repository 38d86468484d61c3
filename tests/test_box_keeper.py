"""The book keeper's socket as it comes up, and a run's owner while it is down, in the process
(a real keeper's server on a real Unix socket, a real run store; real users and the whole
restart are tests/test_box_users.py's).

A job whose owner waits for a restarted keeper connects every few milliseconds. A socket file
that sits at the book's path before it has its final mode refuses a member's connection
(EACCES: "you may not use the box's book"), and that refusal ended the waiting job.
"""

from __future__ import annotations

import os
import stat
import threading

from jiyu_magics.core.box import keeper
from jiyu_magics.core.box.client import BoxClient
from jiyu_magics.core.box.location import BoxLocation
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.gpu_queue import KEEPER_OUT_POLL_S
from jiyu_magics.jobs.rank_placement import LocalProcessGroup


def test_the_socket_takes_the_books_path_only_once_its_mode_is_final(tmp_path, monkeypatch):
    location = BoxLocation(tmp_path / "box")
    location.root.mkdir()
    left = location.root / ".book.sock.99999999"  # the temporary socket of a keeper killed while it started
    left.write_text("")
    at_the_path_while_opened = []
    open_socket = keeper.open_socket

    def open_and_look(path, group):  # the real open_socket, and what a member's connect met meanwhile
        at_the_path_while_opened.append(location.socket.exists())
        open_socket(path, group)

    monkeypatch.setattr(keeper, "open_socket", open_and_look)
    server = keeper._Server(location.socket, keeper.Keeper(location), None)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    try:
        assert at_the_path_while_opened == [False], "nothing at the book's path until the socket is open to members"
        assert location.socket.is_socket() and stat.S_IMODE(location.socket.stat().st_mode) == 0o666
        assert BoxClient(location).call("whoami")["uid"] == os.getuid()
        assert [p.name for p in location.root.iterdir() if p.name.startswith(".")] == [], "no temporary socket left"
    finally:
        server.shutdown()
        server.server_close()
        serving.join(10)


def test_a_run_waiting_for_a_keeper_that_is_down_asks_again_each_second_not_at_once(tmp_path, monkeypatch):
    """The keeper holds a waiting owner's answer up to a second, so an owner asks it again at
    once; a keeper that is down holds nothing back, and at once would be 50 tries a second."""
    monkeypatch.setenv("JIYU_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JIYU_BOX", str(tmp_path / "no-box"))
    run = RunStore().create("job", "waits", gpus_requested=1, pid=os.getpid())
    placement = LocalProcessGroup()
    assert placement.reserve(run.id) is None
    every, line = placement.wait_hint(run.id)
    assert every == KEEPER_OUT_POLL_S == 1.0
    assert line.startswith("queued in line, waiting for 1 GPU(s): the box's book keeper (") and "is not running" in line
