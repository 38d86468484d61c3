"""A real Slurm cluster for the tests: Debian's ``slurm-wlm`` (slurmctld + slurmd) and
``munge``, started as root on this machine with a generated ``slurm.conf`` under a temporary
folder, and stopped and removed afterwards. One node (the machine itself), or several
(``SlurmCluster.start(nodes=2)``, below).

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

Several nodes on this one machine (Debian's build has ``MULTIPLE_SLURMD = Yes``): node ``nI``
is a ``slurmd -N nI`` with its own port and its own loopback address ``127.0.1.I``
(``NodeAddr``; all of 127/8 is loopback), started under ``unshare --uts --mount`` with its own
hostname ``nI`` and its own ``/etc/hosts`` bind-mounted over the machine's. Job steps inherit
both, so torchrun's rendezvous and gloo on node ``nI`` see a machine called ``nI`` at
``127.0.1.I``, and a test can give one node a hosts file of its own (``set_hosts``: the head
node's name resolving wrongly there, as on a misconfigured cluster). Their spool, log and pid
files carry the node's name (``%n``). ``SlurmdTimeout`` is short, so a node whose slurmd died
is declared down within seconds, not Slurm's five minutes.

``python -m tests.slurm_cluster [NODES]`` starts one and prints its ``SLURM_CONF`` for trying
things by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
MUNGE_PID = MUNGE_RUN / "munged.pid"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
INSTALL_HINT = "install it with `make test-system-deps` (apt-get install slurm-wlm munge)"


def unavailable(nodes: int = 1) -> str | None:
    """Why a test cluster of ``nodes`` nodes cannot run here, or None when it can."""
    missing = [p for p in PROGRAMS if shutil.which(p, path=_sbin_path()) is None]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs slurmctld/slurmd as root (SlurmUser=root); run the tests as root"
    if nodes > 1:
        if shutil.which("nsenter") is None:
            return "several Slurm nodes need nsenter (util-linux) to act inside one node"
        try:
            done = subprocess.run(
                [
                    _program("unshare"),
                    "--uts",
                    "--mount",
                    "sh",
                    "-c",
                    "hostname n1 && mount --bind /etc/hosts /etc/hosts",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError as error:
            return f"several Slurm nodes need unshare (util-linux): {error}"
        if done.returncode:
            return f"several Slurm nodes need a UTS and mount namespace of their own: {done.stderr.strip()}"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _program(name: str) -> str:
    return shutil.which(name, path=_sbin_path()) or name


NODE_ADDRESS = "127.0.1.{}"  # node nI's loopback address
# several nodes: one whose slurmd stops answering is down after this (Slurm's default: 300 s)
SLURMD_TIMEOUT_S = 5
MESSAGE_TIMEOUT_S = 5  # the ping of a dead slurmd gives up after this


@dataclass
class SlurmNode:
    name: str  # its Slurm node name, and its hostname inside its namespaces (several nodes)
    address: str  # where slurmctld reaches its slurmd (NodeAddr)
    port: int
    hosts: Path | None = None  # its own /etc/hosts (several nodes)
    daemon: subprocess.Popen | None = None  # its slurmd


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: list[SlurmNode]
    cpus: int
    controller: subprocess.Popen | None = None
    munged_pid: int | None = None  # the munged started here (None: one was already running)
    started_in: float = 0.0  # seconds from nothing to idle nodes

    @classmethod
    def start(cls, nodes: int = 1, timeout: float = START_TIMEOUT_S) -> SlurmCluster:
        """One node (the machine itself, under its own hostname), or ``nodes`` nodes n1..nN."""
        began = time.monotonic()
        root = Path(tempfile.mkdtemp(prefix="jiyu-slurm-"))
        cpus = os.cpu_count() or 1
        if nodes == 1:
            members = [SlurmNode(socket.gethostname().split(".")[0], "", free_port())]
        else:
            members = [
                SlurmNode(f"n{i}", NODE_ADDRESS.format(i), free_port(), root / f"hosts.n{i}")
                for i in range(1, nodes + 1)
            ]
        cluster = cls(root, root / "slurm.conf", members, cpus)
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
    def node(self) -> str:
        """The first node's name (a one-node cluster's only node)."""
        return self.nodes[0].name

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

    def node_states(self) -> dict[str, str]:
        """Each node's state as ``sinfo`` says it (idle, allocated, down*...)."""
        rows = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
        return dict(row.split() for row in rows if len(row.split()) == 2)

    def cancel_all(self, timeout: float = 20.0) -> None:
        """Cancels every job and waits until the queue is empty: each test starts on idle nodes."""
        if self.jobs():
            self.run("scancel", "--user", "root")
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        if self.controller is not None:
            self.cancel_all()
            self.run("scontrol", "shutdown")
        for proc in [n.daemon for n in self.nodes] + [self.controller]:
            if proc is None:
                continue
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.end_orphaned_steps()
        if self.munged_pid is not None:
            _end(self.munged_pid)
        shutil.rmtree(self.root, ignore_errors=True)

    def orphaned_steps(self) -> list[int]:
        """Pids of this cluster's ``slurmstepd``s whose slurmd is gone (killed by a test): a
        step daemon outlives its slurmd, as on a real node, and is known by the log file of
        its node it holds open."""
        import psutil

        found = []
        for proc in psutil.process_iter(["name"]):
            if not (proc.info["name"] or "").startswith("slurmstepd"):
                continue
            try:
                if any(f.path.startswith(str(self.root)) for f in proc.open_files()):
                    found.append(proc.pid)
            except psutil.Error:
                continue
        return found

    def end_orphaned_steps(self) -> None:
        """SIGKILL to each orphaned step daemon and what it started (they ignore SIGTERM)."""
        import psutil

        for pid in self.orphaned_steps():
            try:
                step = psutil.Process(pid)
                tree = [step, *step.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(tree, timeout=STOP_TIMEOUT_S)

    # -- several nodes -------------------------------------------------------------------------
    def hosts_text(self, overrides: dict[str, str] | None = None) -> str:
        """An ``/etc/hosts`` naming this machine and every node at its address, with
        ``overrides`` (name → address; None drops the name: it does not resolve)."""
        names = {"localhost": "127.0.0.1", socket.gethostname(): "127.0.0.1"}
        names.update({n.name: n.address for n in self.nodes})
        names.update(overrides or {})
        return "".join(f"{address} {name}\n" for name, address in names.items() if address)

    def set_hosts(self, node: str, overrides: dict[str, str] | None = None) -> None:
        """What ``node`` resolves from now on (its bind-mounted hosts file is rewritten in
        place: the mount follows the file, not a new one)."""
        path = self._node(node).hosts
        with open(path, "r+") as hosts:
            hosts.truncate(0)
            hosts.write(self.hosts_text(overrides))

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL to the node's slurmd alone: its job steps (slurmstepd) live on, as on a
        node whose daemon crashed; Slurm declares it down after ``SlurmdTimeout``."""
        member = self._node(node)
        os.kill(member.daemon.pid, signal.SIGKILL)
        member.daemon.wait()

    def restart_slurmd(self, node: str, timeout: float = START_TIMEOUT_S) -> None:
        """The node's slurmd again, until the node is back in service (``ReturnToService=2``)."""
        member = self._node(node)
        if member.daemon is not None and member.daemon.poll() is None:
            return
        self._start_slurmd(member)
        self._wait_idle(timeout)

    @contextlib.contextmanager
    def hanging(self, node: str, program: str):
        """On ``node`` only, ``program`` hangs instead of running (a script that sleeps is
        bind-mounted over it in that node's mount namespace): a node whose software never
        starts, as with a stale shared mount. Undone, and what hung ended by its pid, after."""
        member = self._node(node)
        target = os.path.realpath(program)
        pids = self.root / f"hung-{node}.pids"
        hang = self.root / f"hang-{node}.sh"
        hang.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 3600\n")
        hang.chmod(0o755)
        self._on_node(member, "mount", "--bind", str(hang), target)
        try:
            yield
        finally:
            self._on_node(member, "umount", target)
            for pid in pids.read_text().split() if pids.exists() else ():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            pids.unlink(missing_ok=True)

    def _on_node(self, member: SlurmNode, *cmd: str) -> None:
        """A command inside the node's namespaces (those of its slurmd)."""
        subprocess.run(
            [_program("nsenter"), "--target", str(member.daemon.pid), "--mount", "--uts", *cmd],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def _node(self, name: str) -> SlurmNode:
        return next(n for n in self.nodes if n.name == name)

    # -- start-up ------------------------------------------------------------------------------
    def _write_conf(self) -> None:
        for folder in ("state", "spool", "log"):
            (self.root / folder).mkdir()
        several = len(self.nodes) > 1
        total_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
        memory_mb = total_mb // len(self.nodes)
        r, per_node = self.root, "-%n" if several else ""
        nodes = []
        for n in self.nodes:
            where = f"NodeAddr={n.address} NodeHostname={n.name} Port={n.port} " if several else ""
            nodes.append(f"NodeName={n.name} {where}CPUs={self.cpus} RealMemory={memory_mb} State=UNKNOWN")
            if n.hosts is not None:
                n.hosts.write_text(self.hosts_text())
        controller = socket.gethostname().split(".")[0]
        node_timeouts = f"SlurmdTimeout={SLURMD_TIMEOUT_S}\nMessageTimeout={MESSAGE_TIMEOUT_S}" if several else ""
        self.conf.write_text(f"""\
ClusterName={"jiyunodes" if several else "jiyutest"}
SlurmctldHost={controller}{"(127.0.0.1)" if several else ""}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={self.nodes[0].port}
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/slurmd{per_node}
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd{per_node}.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd{per_node}.log
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
{node_timeouts}
MinJobAge=300
KillWait=5
{chr(10).join(nodes)}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _start_daemons(self) -> None:
        self.controller = self._daemon("slurmctld", [_program("slurmctld"), "-D", "-f", str(self.conf)])
        for member in self.nodes:
            self._start_slurmd(member)

    def _start_slurmd(self, member: SlurmNode) -> None:
        slurmd = [_program("slurmd"), "-D", "-f", str(self.conf)]
        if member.hosts is None:
            member.daemon = self._daemon("slurmd", slurmd)
            return
        # its own hostname and /etc/hosts, inherited by every job step it starts; the shell
        # execs slurmd, so the pid recorded is slurmd's
        inside = (
            f"hostname {member.name} && mount --bind {member.hosts} /etc/hosts && "
            f"exec {' '.join(slurmd)} -N {member.name}"
        )
        member.daemon = self._daemon(
            f"slurmd-{member.name}", [_program("unshare"), "--uts", "--mount", "sh", "-c", inside]
        )

    def _daemon(self, name: str, cmd: list[str]) -> subprocess.Popen:
        with open(self.root / "log" / f"{name}.out", "ab") as out:
            return subprocess.Popen(
                cmd,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in [self.controller] + [n.daemon for n in self.nodes]):
                raise RuntimeError(f"a Slurm daemon exited at start-up: {self._log_tail()}")
            states = self.node_states()
            if len(states) == len(self.nodes) and set(states.values()) == {"idle"}:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Slurm nodes were not idle after {timeout:.0f} s: {self._log_tail()}")

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
    cluster = SlurmCluster.start(nodes=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
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
