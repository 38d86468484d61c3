"""``kubectl`` as jiyu uses it: apply a run's manifest, read its job's status as JSON, delete
it. Every call uses kubectl's current context and namespace, as the user's own kubectl would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from ...job_error import JobError
from ...rank_placement import SchedulerUnreachable

TIMEOUT_S = 60.0
RESOURCES = {"TrainJob": "trainjobs.trainer.kubeflow.org", "PyTorchJob": "pytorchjobs.kubeflow.org"}


class KubectlUnavailable(SchedulerUnreachable):
    """kubectl is not installed here, has no cluster configured, or the cluster does not answer."""


def check_configured() -> None:
    if shutil.which("kubectl") is None:
        raise KubectlUnavailable("kubectl is not installed here")
    done = _run("config", "current-context")
    if done.returncode:
        raise KubectlUnavailable(f"kubectl has no cluster configured here ({_last_line(done)})")


def apply(manifest: Path) -> str:
    """``kubectl apply -f``: kubectl's answer, or ``JobError`` in its words when the cluster refuses."""
    check_configured()
    done = _run("apply", "-f", str(manifest))
    if done.returncode:
        raise JobError(f"kubectl apply refused the job: {_last_line(done)} (the manifest is {manifest})")
    return " ".join(done.stdout.split())


def get(kind: str, name: str) -> dict | None:
    """The job object as JSON; None when the cluster has no such job (deleted, or never applied)."""
    check_configured()
    done = _run("get", RESOURCES[kind], name, "-o", "json")
    if done.returncode:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return None
        raise KubectlUnavailable(f"kubectl get {name}: {_last_line(done)}")
    job: dict = json.loads(done.stdout)
    return job


def delete(manifest: Path) -> str | None:
    """``kubectl delete -f`` without waiting (the pods get SIGTERM and their grace period);
    kubectl's complaint, if any."""
    done = _run("delete", "-f", str(manifest), "--ignore-not-found", "--wait=false")
    return _last_line(done) if done.returncode else None


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def _run(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["kubectl", *args], capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(["kubectl"], 127, "", "kubectl: not installed here")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["kubectl"], 124, "", f"kubectl: no answer within {TIMEOUT_S:.0f} s")
