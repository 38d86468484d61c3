"""``jiyu box``: one GPU book for every user of a machine. ``init`` and ``serve`` are the
admin's; ``status``, ``log`` and ``idle`` every member's; ``reclaim`` an admin's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.box.client import BoxClient


def add_commands(commands) -> None:
    p = commands.add_parser(
        "box",
        help="a GPU box shared by several Unix users: one book of leases and one queue for all of them",
        description="On a machine several people use, one book keeper holds every user's GPU leases and "
        "the queue: `jiyu box init` (an admin, once) sets it up; every user's jiyu then finds it at "
        "/var/lib/jiyu/box (or JIYU_BOX=DIR) and leases through it. Who asks is the operating "
        "system's word (the socket's peer credentials), never an argument.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    p.set_defaults(handler=run_status, json=False)

    init = actions.add_parser("init", help="set the box up (as root): the folder, the policy, the keeper")
    init.add_argument("--path", type=Path, help="the box's folder (default /var/lib/jiyu/box)")
    init.add_argument("--group", help="only this Unix group's members may use the box")
    init.set_defaults(handler=run_init)

    serve = actions.add_parser("serve", help="run the book keeper in the foreground (init starts it detached)")
    serve.add_argument("--path", type=Path, help="the box's folder (default /var/lib/jiyu/box)")
    serve.set_defaults(handler=run_serve)

    stop = actions.add_parser("stop", help="stop the book keeper (its admin)")
    stop.add_argument("--path", type=Path, help="the box's folder (default /var/lib/jiyu/box)")
    stop.set_defaults(handler=run_stop)

    status = actions.add_parser("status", help="who you are here, the policy, every lease and the queue")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    status.set_defaults(handler=run_status)

    log = actions.add_parser("log", help="changes to the book, each with the user who made it")
    log.add_argument("--limit", type=int, default=50, help="the newest N changes (default 50)")
    log.add_argument("--json", action="store_true", help="print them as JSON")
    log.set_defaults(handler=run_log)

    idle = actions.add_parser("idle", help="kernels holding GPU memory while idle (an admin sees everyone's)")
    idle.add_argument("--json", action="store_true", help="print them as JSON")
    idle.set_defaults(handler=run_idle)

    reclaim = actions.add_parser(
        "reclaim", help="ask a user's Jupyter server to shut down a kernel idle past the policy's limit (admins)"
    )
    reclaim.add_argument("user", help="the kernel's user")
    reclaim.add_argument("kernel", help="the kernel id or a unique prefix (jiyu box idle lists them)")
    reclaim.set_defaults(handler=run_reclaim)


def _location(path: Path | None):
    from ..core.box.location import DEFAULT_PATH, BoxLocation, find
    from . import CliError

    if path is not None:
        return BoxLocation(path.expanduser().absolute())
    found = find()
    if found is None:
        raise CliError(f"this machine has no box ({DEFAULT_PATH} does not exist and JIYU_BOX is unset)")
    return found


def _client() -> BoxClient:
    from ..core.box.client import BoxClient

    return BoxClient(_location(None))


def _ask(op: str, **fields) -> dict:
    from ..core.box.client import BoxRefused
    from . import CliError

    try:
        return _client().call(op, **fields)
    except BoxRefused as refused:
        raise CliError(str(refused)) from None


def run_init(args: argparse.Namespace) -> int:
    from ..core.box import admin
    from ..core.box.location import DEFAULT_PATH
    from . import CliError

    try:
        started = admin.init(args.path or DEFAULT_PATH, args.group)
    except admin.BoxSetupError as error:
        raise CliError(str(error)) from None
    where = started.location
    state = "already answers" if started.already else "started"
    who = f"members of group {args.group}" if args.group else "every user of this machine"
    print(f"The box's book keeper {state} (pid {started.pid}) on {where.socket}.")
    print(f"Its policy is {where.policy}; {who} lease its GPUs through it.")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from ..core.box.keeper import serve

    return serve(_location(args.path))


def run_stop(args: argparse.Namespace) -> int:
    from ..core.box import admin
    from . import CliError

    try:
        pid = admin.stop(_location(args.path).root)
    except admin.BoxSetupError as error:
        raise CliError(str(error)) from None
    print("No book keeper was running." if pid is None else f"Stopped the book keeper (pid {pid}).")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from ..views import box_view as view
    from . import print_json

    status = _ask("status")
    if args.json:
        print_json(status)
    else:
        print(view.render_status(status, _location(None)))
    return 0


def run_log(args: argparse.Namespace) -> int:
    from ..views import box_view as view
    from . import print_json

    changes = _ask("changes", limit=max(1, args.limit))["changes"]
    if args.json:
        print_json(changes)
    else:
        print(view.render_changes(changes))
    return 0


def run_idle(args: argparse.Namespace) -> int:
    from ..views import box_view as view
    from . import print_json

    idle = _ask("idle")
    if args.json:
        print_json(idle)
    else:
        print(view.render_idle(idle))
    return 0


def run_reclaim(args: argparse.Namespace) -> int:
    answer = _ask("reclaim", owner=args.user, kernel=args.kernel)
    print(
        f"Asked {args.user}'s Jupyter server to shut down kernel {answer['kernel_id'][:8]} "
        "(it does at its next upkeep, unless a cell runs there by then)."
    )
    return 0
