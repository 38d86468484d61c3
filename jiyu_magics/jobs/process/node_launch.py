"""Every node of a multi-node job starts here, then becomes torchrun::

    python -m jiyu_magics.jobs.process.node_launch --rdzv HOST:PORT --join-timeout S -- TORCHRUN ARGS...

What breaks multi-node torchrun in the field breaks before training, and torchrun says it late
or never: a node that cannot resolve the first node's name, or resolves it to itself (the head's
name mapped to 127.0.0.1, or to the node's own address, in its /etc/hosts), waits alone for a
rendezvous nobody else joins; a node that reaches a different machine at that name (a login
node) waits there; its TCPStore client gives up after 60 s, or the first node waits out torch's
10-minute join timeout. So each node checks first, on the node, in the job's own environment:

- the rendezvous host resolves here (within ``--resolve-timeout``: a Kubernetes pod's name
  appears in the cluster's DNS a moment after the pod);
- on every node but the first, to no address of this node itself (those of ``localhost`` and of
  its own hostname): the check tells a wrong /etc/hosts from nodes that are legitimately on
  loopback addresses of their own, as the test cluster's are;
- where the addresses differ from those the first node resolved its own name to (its record,
  on the shared run folder), the node says so in the log: a multi-homed first node may be
  reachable at both, but when the rendezvous then fails, that difference is why
  (``node_records.error_line``).

The checks take milliseconds: no node waits for another here, so every node imports torch at
the same time. Waiting is torchrun's, bounded by the join timeout the job script gives it (its
store client's ``read_timeout`` too, so a node whose first node starts late waits as long as the
first node waits for it).

It records itself (``node_records``) and ``exec``s torchrun, so signals from Slurm or the kubelet
reach torchrun as before, with torchrun's own failure going to the node's error file. A failed
check ends the node with ``CHECK_FAILED_EXIT`` and its one line, printed and recorded. The node
rank is read here, on the node (``SLURM_NODEID``, Kubeflow's ``PET_NODE_RANK``), never expanded
into a command line by a script that runs on one node only.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Mapping

from ...core.runs.files import RUN_ID_ENV
from . import node_records as nodes
from .node_records import NodeRecord

CHECK_FAILED_EXIT = 78  # sysexits' EX_CONFIG: the cluster's configuration, not the training, failed
RETRY_S = 0.5
FIRST_RECORD_WAIT_S = 2.0  # a shared folder may show a file written on another node a moment late
NODE_RANK_VARIABLES = ("SLURM_NODEID", "PET_NODE_RANK", "GROUP_RANK")
NNODES_VARIABLES = ("SLURM_NNODES", "PET_NNODES")


class CheckFailed(Exception):
    """A check failed: the message is the node's one line."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    torchrun = args.torchrun[1:] if args.torchrun[:1] == ["--"] else args.torchrun
    if not torchrun:
        print("node_launch: nothing to run after --", file=sys.stderr)
        return 2
    env = dict(os.environ)  # the node's entry point: its environment, read once here
    run_id = env.get(RUN_ID_ENV)
    record = NodeRecord(
        node=env.get("SLURMD_NODENAME") or socket.gethostname(),
        host=socket.gethostname(),
        node_rank=_first_int(env, NODE_RANK_VARIABLES, 0),
        nnodes=_first_int(env, NNODES_VARIABLES, 1),
        attempt=int(env.get("SLURM_RESTART_COUNT") or 0),
        rdzv=args.rdzv,
        join_timeout=args.join_timeout,
        started=time.time(),
        allocation=env.get("SLURM_JOB_NODELIST") if _first_int(env, NODE_RANK_VARIABLES, 0) == 0 else None,
    )
    try:
        record.addresses = check(record, args.resolve_timeout, run_id)
    except CheckFailed as failed:
        record.error = str(failed)
        if run_id:
            nodes.write(run_id, record)
        print(f"[jiyu] {time.strftime('%H:%M:%S')} {failed}", file=sys.stderr, flush=True)
        return CHECK_FAILED_EXIT
    print(
        f"[jiyu] {time.strftime('%H:%M:%S')} node {record.node} ({record.host}, node rank {record.node_rank} "
        f"of {record.nnodes}): rendezvous at {record.rdzv} ({', '.join(record.addresses)})",
        flush=True,
    )
    record.pid = os.getpid()  # exec keeps it: torchrun's
    if run_id:
        nodes.write(run_id, record)
        error_file = nodes.error_file(run_id, record.node)
        error_file.unlink(missing_ok=True)  # a requeued attempt's torchrun writes its own
        os.environ["TORCHELASTIC_ERROR_FILE"] = str(error_file)
    sys.stdout.flush()
    os.execvp(torchrun[0], torchrun)
    return 0  # not reached


def check(record: NodeRecord, resolve_timeout: float, run_id: str | None) -> list[str]:
    """The checks of this node before torchrun; the addresses the rendezvous host resolved to."""
    host, _, port = record.rdzv.rpartition(":")
    if not host or not port.isdigit():
        raise CheckFailed(
            f"node {record.node}: the rendezvous endpoint {record.rdzv!r} has no host: every node would "
            "rendezvous with itself (the job script could not name the first node)"
        )
    addresses = _resolve(host, record, resolve_timeout)
    if record.node_rank == 0:
        return addresses
    own = sorted(set(addresses) & own_addresses())
    if own:
        raise CheckFailed(
            f"node {record.node}: the rendezvous host {host} resolves to {', '.join(own)} there, an address of "
            f"{record.node} itself, not of the first node: this node would wait alone for a rendezvous "
            f"(fix {host}'s entry in DNS or /etc/hosts on {record.node})"
        )
    first = _first_node_record(run_id, record) if run_id else None
    said = nodes.disagreement(first, NodeRecord(**{**record.__dict__, "addresses": addresses})) if first else None
    if said:
        print(f"[jiyu] {time.strftime('%H:%M:%S')} warning: {said}", file=sys.stderr, flush=True)
    return addresses


def own_addresses() -> set[str]:
    """The addresses this node answers to by name: ``localhost``'s, its hostname's, and the
    loopback addresses themselves."""
    found = {"127.0.0.1", "::1"}
    for name in ("localhost", socket.gethostname()):
        try:
            found |= {str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
        except OSError:
            continue
    return found


def _resolve(host: str, record: NodeRecord, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            return sorted({str(info[4][0]) for info in infos}, key=_ipv4_first)
        except OSError as error:
            if time.monotonic() >= deadline:
                why = getattr(error, "strerror", None) or str(error)
                raise CheckFailed(
                    f"node {record.node}: cannot resolve the rendezvous host {host} ({why}): the first node's "
                    f"name must resolve on every node (DNS or /etc/hosts on {record.node})"
                ) from None
            time.sleep(RETRY_S)


def _first_node_record(run_id: str, me: NodeRecord) -> NodeRecord | None:
    """The first node's record of this attempt, once it appears on the shared folder (it is
    written before that node's agent listens); None if it does not appear: no comparison."""
    deadline = time.monotonic() + FIRST_RECORD_WAIT_S
    while True:
        for record in nodes.read_all(run_id):
            if record.node_rank == 0 and record.attempt == me.attempt and record.node != me.node:
                return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(RETRY_S)


def _first_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def _ipv4_first(address: str) -> tuple[int, str]:
    return (ipaddress.ip_address(address.split("%")[0]).version, address)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jiyu_magics.jobs.process.node_launch")
    p.add_argument("--rdzv", required=True, metavar="HOST:PORT", help="the first node's rendezvous endpoint")
    p.add_argument("--join-timeout", type=float, required=True, metavar="S", help="as torchrun was given it (recorded)")
    p.add_argument("--resolve-timeout", type=float, default=0.0, metavar="S")
    p.add_argument("torchrun", nargs=argparse.REMAINDER, help="-- then torchrun's command line")
    return p


if __name__ == "__main__":
    sys.exit(main())
