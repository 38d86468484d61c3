"""A real single-node Slurm cluster for the tests: Debian's ``slurm-wlm`` (slurmctld + slurmd)
and ``munge``, started as root on this machine with a generated ``slurm.conf`` under a
temporary folder, and stopped and removed afterwards.

What it takes to run Slurm here (no systemd, no cgroups, no accounting database):

- munged needs ``/run/munge`` owned by ``munge`` and a key in ``/etc/munge/munge.key``; one
  munged serves every cluster on the machine, so it is started only when none runs, and only
  the one started here is ended here.
- ``SlurmUser=root`` and ``SlurmdUser=root``: the daemons run as the test's user, which must be
  root (slurmd starts job steps as the submitting user).
- ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``: no cgroup hierarchy in a
  container. ``AccountingStorageType=accounting_storage/none``: without slurmdbd ``sacct``
  answers "accounting storage is disabled", so jobs are followed with ``scontrol show job``
  (kept ``MinJobAge`` seconds after their end) and the job-completion log.
- Its own ports (free ones) and state, spool, log and pid files under the temporary folder, so
  it never meets a site's Slurm or another test run's.
- ``AuthInfo=cred_expire=10``: a requeued job waits this long before it may start again (120 s
  by default); ``SchedulerParameters=sched_interval=2``: pending jobs are looked at every 2 s.
  Both only make the time-limit test quicker.

``python -m tests.slurm_cluster`` starts one and prints its ``SLURM_CONF`` for trying things
by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .ports import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
MUNGE_PID = MUNGE_RUN / "munged.pid"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
INSTALL_HINT = "install it with `make test-system-deps` (apt-get install slurm-wlm munge)"


def unavailable() -> str | None:
    """Why a test cluster cannot run here, or None when it can."""
    missing = [p for p in PROGRAMS if shutil.which(p, path=_sbin_path()) is None]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs slurmctld/slurmd as root (SlurmUser=root); run the tests as root"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _program(name: str) -> str:
    return shutil.which(name, path=_sbin_path()) or name


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    cpus: int
    daemons: list[subprocess.Popen] = field(default_factory=list)
    munged_pid: int | None = None  # the munged started here (None: one was already running)
    started_in: float = 0.0  # seconds from nothing to an idle node

    @classmethod
    def start(cls, timeout: float = START_TIMEOUT_S) -> SlurmCluster:
        began = time.monotonic()
        root = Path(tempfile.mkdtemp(prefix="jiyu-slurm-"))
        node, cpus = socket.gethostname().split(".")[0], os.cpu_count() or 1
        cluster = cls(root, root / "slurm.conf", node, cpus)
        try:
            cluster.munged_pid = _ensure_munged()
            cluster._write_conf()
            cluster._start_daemons()
            cluster._wait_idle(timeout)
        except BaseException:
            cluster.stop()
            raise
        cluster.started_in = time.monotonic() - began
        return cluster

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(
            list(cmd), env={**os.environ, **self.env}, capture_output=True, text=True, check=check, timeout=timeout
        )

    def jobs(self) -> list[str]:
        """Ids of the jobs this cluster still has pending or running."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def cancel_all(self, timeout: float = 20.0) -> None:
        """Cancels every job and waits until the queue is empty: each test starts on an idle node."""
        if self.jobs():
            self.run("scancel", "--user", "root")
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        if self.daemons:
            self.cancel_all()
            self.run("scontrol", "shutdown")
        for proc in self.daemons:
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.munged_pid is not None:
            _end(self.munged_pid)
        shutil.rmtree(self.root, ignore_errors=True)

    def _write_conf(self) -> None:
        for folder in ("state", "spool", "log"):
            (self.root / folder).mkdir()
        memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
        r = self.root
        self.conf.write_text(f"""\
ClusterName=jiyutest
SlurmctldHost={self.node}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
MinJobAge=300
KillWait=5
NodeName={self.node} CPUs={self.cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _start_daemons(self) -> None:
        env = {**os.environ, **self.env}
        for daemon in ("slurmctld", "slurmd"):
            with open(self.root / "log" / f"{daemon}.out", "wb") as out:
                self.daemons.append(
                    subprocess.Popen(
                        [_program(daemon), "-D", "-f", str(self.conf)],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.daemons if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited at start-up: {self._log_tail()}")
            if self.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle":
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Slurm node was not idle after {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        lines = []
        for log in sorted((self.root / "log").glob("*")):
            lines += [f"{log.name}: {line}" for line in log.read_text(errors="replace").splitlines()[-5:]]
        return " | ".join(lines) or "no log"


def _ensure_munged() -> int | None:
    """munged for Slurm's authentication; the pid of the one started here, None if one runs."""
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
        return None
    MUNGE_RUN.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN, "munge", "munge")
    if not MUNGE_KEY.exists():
        MUNGE_KEY.write_bytes(secrets.token_bytes(1024))
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    subprocess.run([_program("munged"), "--force"], check=True, capture_output=True, timeout=30)
    return int(MUNGE_PID.read_text().split()[0])


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main() -> int:
    reason = unavailable()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    cluster = SlurmCluster.start()
    print(f"Slurm is up in {cluster.started_in:.1f} s: export SLURM_CONF={cluster.conf}  (Ctrl-C stops it)", flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
