"""The one line of a scheduler's job that failed, named where it happened.

Its ranks run on nodes this process may not be on, so the blame reads what they left in the
shared run folder: the rank that failed first (a rank killed by a signal, as its node's torchrun
reported it in the job's log, before the errors of the ranks it left behind: "rank 1 on n2:
killed by SIGKILL"), else why the nodes never trained together (``node_records``: a check that
failed on a node, a rendezvous that timed out). The scheduler's own line comes first where it
knows the cause better (a node failed, out of memory): its placement says so.
"""

from __future__ import annotations

from pathlib import Path

from . import node_records, rank_records, torchrun_report


def ranks_or_nodes(run_id: str, log: Path | None = None) -> str | None:
    """The failing rank's line, else the nodes' line, else None."""
    records = rank_records.read_all(run_id)
    if log is not None:
        records = rank_records.with_signals(records, torchrun_report.signals(log))
    failed = rank_records.first_failure(records)
    if failed is not None and (failed.killed_by_signal or failed.exited_with_error):
        return failed.describe()
    return node_records.error_line(run_id)
