"""What each node of a multi-node job reports before its torchrun starts: ``runs/<id>/nodes/``.

A node's launcher (``node_launch``) writes ``<node>.json``: its name and hostname, its node rank,
the job's attempt, the rendezvous endpoint and the addresses its host name resolved to *on this
node*, torchrun's pid, and the one line of a check that failed. torchrun writes its own failure
(a rendezvous that timed out, a worker that failed) into ``<node>.error.json``, torch elastic's
error file. The run's owner reads both when the job ended without a rank to blame
(``error_line``): the ranks never started, or started on some nodes only.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...core.runs.files import RunFiles

ERROR_SUFFIX = ".error.json"


@dataclass
class NodeRecord:
    node: str  # the scheduler's name for it (SLURMD_NODENAME), else its hostname
    host: str  # its hostname
    node_rank: int  # 0: the first node, which hosts the rendezvous
    nnodes: int
    attempt: int = 0  # the job's attempt (a requeued Slurm job's SLURM_RESTART_COUNT)
    rdzv: str = ""  # HOST:PORT, as every node was told
    join_timeout: float | None = None  # seconds torchrun waits for the other nodes (and its store client)
    addresses: list[str] = field(default_factory=list)  # what the rendezvous host resolved to here
    started: float = 0.0
    pid: int | None = None  # torchrun's, once the checks passed
    error: str | None = None  # a check that failed: the node's one line
    allocation: str | None = None  # the first node's record: the job's nodes, as the scheduler lists them

    @property
    def rdzv_host(self) -> str:
        return self.rdzv.rpartition(":")[0]


def path_of(run_id: str, node: str) -> Path:
    return RunFiles.of(run_id).nodes / f"{node}.json"


def error_file(run_id: str, node: str) -> Path:
    return RunFiles.of(run_id).nodes / f"{node}{ERROR_SUFFIX}"


def write(run_id: str, record: NodeRecord) -> None:
    """Whole-file replace, so a reader on another node never sees half a record."""
    path = path_of(run_id, record.node)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{record.node}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, path)


def read(run_id: str, node: str) -> NodeRecord | None:
    try:
        return NodeRecord(**json.loads(path_of(run_id, node).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def read_all(run_id: str) -> list[NodeRecord]:
    """The records of the job's latest attempt, first node first."""
    records = []
    for path in RunFiles.of(run_id).nodes.glob("*.json"):
        if path.name.endswith(ERROR_SUFFIX):
            continue
        found = read(run_id, path.stem)
        if found is not None:
            records.append(found)
    latest = max((r.attempt for r in records), default=0)
    return sorted((r for r in records if r.attempt == latest), key=lambda r: (r.node_rank, r.node))


def torchrun_error(run_id: str, node: str) -> str | None:
    """torchrun's own failure on that node, in one line, from its error file."""
    try:
        data = json.loads(error_file(run_id, node).read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    return " ".join(str(message).split()) if message else None


def disagreement(first: NodeRecord, other: NodeRecord) -> str | None:
    """The line for two nodes that resolve the rendezvous host to different addresses: they
    never meet (the other node waits at an address where the first node's agent is not)."""
    if not first.addresses or not other.addresses or set(first.addresses) & set(other.addresses):
        return None
    return (
        f"node {other.node}: the rendezvous host {first.rdzv_host} resolves to {', '.join(other.addresses)} there "
        f"but to {', '.join(first.addresses)} on {first.node}, which hosts the rendezvous: the nodes cannot meet "
        f"(fix {first.rdzv_host}'s entry in DNS or /etc/hosts on {other.node})"
    )


def error_line(run_id: str) -> str | None:
    """Why the nodes never trained together, in one line naming the node, or None: a check
    that failed on a node (the earliest); else, when torchrun failed on a node, the nodes that
    resolved the rendezvous host differently from the first node, the nodes that never came to
    a rendezvous that timed out, or torchrun's own line."""
    records = read_all(run_id)
    failed = sorted((r for r in records if r.error), key=lambda r: r.started)
    if failed:
        return failed[0].error
    said = {r.node: torchrun_error(run_id, r.node) for r in records}
    if not any(said.values()):
        return None
    first = next((r for r in records if r.node_rank == 0), None)
    for other in records:
        line = disagreement(first, other) if first is not None and other is not first else None
        if line:
            return line
    for record in records:
        text = said[record.node]
        if text and record.node_rank == 0 and ("RendezvousTimeoutError" in text or "timed out" in text.lower()):
            return _rendezvous_timed_out(record, records)
    for record in records:
        text = said[record.node]
        if text and record.node_rank > 0 and "RendezvousConnectionError" in text:
            return (
                f"node {record.node}: could not reach the rendezvous at {record.rdzv} ({', '.join(record.addresses)})"
                f"{_within(record)}: the first node's agent never listened there"
            )
    node, text = next((node, text) for node, text in said.items() if text)
    return f"node {node}: torchrun: {text}"


def _rendezvous_timed_out(record: NodeRecord, records: list[NodeRecord]) -> str:
    started = [r.node for r in records]
    allocation = next((r.allocation for r in records if r.allocation), None)
    missing = f" of {allocation}" if allocation else ""
    return (
        f"node {record.node}: the rendezvous at {record.rdzv} timed out{_within(record)}: {len(records)} of "
        f"{record.nnodes} nodes came ({', '.join(started)}); the other node(s){missing} never started their "
        "launcher (a node that hangs before the job's first line: its log says nothing)"
    )


def _within(record: NodeRecord) -> str:
    return f" after {record.join_timeout:.0f} s (the join timeout)" if record.join_timeout else ""
