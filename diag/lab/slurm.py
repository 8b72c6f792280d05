"""The lab's Slurm cluster: munge and slurm.conf in the state dir, and the daemons.

Nothing global is used: the munge key, socket, pid, seed and log files, slurm.conf, the
controller's state and every spool/pid/log file live in the lab's state dir, and clients
find them through ``SLURM_CONF`` (slurm.conf's ``AuthInfo=socket=`` names munge's socket).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

from diag.lab.netns import NETNS_DIR
from diag.lab.spec import CTLD_PORT_BASE, Layout, LabError, Node
from diag.lab.state import LabPaths

MUNGE_USER = "munge"
PARTITION = "debug"
NEEDED_COMMANDS = ("slurmctld", "slurmd", "sinfo", "srun", "munged", "ip", "tc",
                   "nsenter", "unshare", "runuser")


def missing_commands() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [cmd for cmd in NEEDED_COMMANDS if shutil.which(cmd, path=path) is None]


def render_slurm_conf(layout: Layout, paths: LabPaths, hostname: str, cpus: int,
                      real_memory_mb: int) -> str:
    """slurm.conf for the lab (pure). Settings are the minimal ones known to work here."""
    lines = [
        f"ClusterName={layout.name}",
        # Must be this host's own hostname, or slurmctld refuses to be the controller.
        f"SlurmctldHost={hostname}({layout.host_mgmt_addr})",
        f"SlurmctldPort={layout.ctld_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={paths.munge_socket}",
        f"StateSaveLocation={paths.ctld_state}",
        f"SlurmctldPidFile={paths.ctld_pid}",
        f"SlurmctldLogFile={paths.log_dir / 'slurmctld.log'}",
        f"SlurmdSpoolDir={paths.spool}/%n",
        f"SlurmdPidFile={paths.spool}/slurmd-%n.pid",
        f"SlurmdLogFile={paths.log_dir}/slurmd-%n.log",
        # No cgroups: each node is only a network namespace sharing the host's cgroups.
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "ReturnToService=2", "MpiDefault=none", "KillWait=5", "SlurmdTimeout=60",
    ]
    lines += [f"NodeName={n.name} NodeAddr={n.mgmt_addr} CPUs={cpus} "
              f"RealMemory={real_memory_mb}" for n in layout.nodes]
    nodes = ",".join(n.name for n in layout.nodes)
    lines.append(f"PartitionName={PARTITION} Nodes={nodes} Default=YES State=UP "
                 "OverSubscribe=FORCE")
    return "\n".join(lines) + "\n"


def render_hosts(layout: Layout) -> str:
    """/etc/hosts inside the nodes: every node's name resolves to its fabric address.

    The ``::ffff:`` lines are for reverse lookups: c10d's TCPStore listens dual-stack, sees
    peers as v4-mapped addresses, and without them logs "The hostname of the client socket
    cannot be retrieved. err=-3" (glibc falls through to DNS, unreachable from a node).
    """
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{n.addr} {n.name}" for n in layout.nodes]
    lines += [f"::ffff:{n.addr} {n.name}" for n in layout.nodes]
    lines.append(f"{layout.host_mgmt_addr} {layout.name}-host")
    return "\n".join(lines) + "\n"


def machine_memory_mb() -> int:
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return kib // 1024


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def pick_ctld_port(octet: int) -> int:
    """slurmctld listens in the root namespace, so two labs need distinct ports."""
    for port in range(CTLD_PORT_BASE + octet, CTLD_PORT_BASE + octet + 64):
        if port_free(port):
            return port
    raise LabError(f"no free TCP port in [{CTLD_PORT_BASE + octet}, "
                   f"{CTLD_PORT_BASE + octet + 64}) for slurmctld; free one, or use --name")


def write_config(layout: Layout, paths: LabPaths) -> None:
    for d in (paths.ctld_state, paths.spool, paths.log_dir):
        d.mkdir(parents=True, exist_ok=True)
    cpus = os.cpu_count() or 1
    memory = max(1, machine_memory_mb() // len(layout.nodes))
    paths.slurm_conf.write_text(
        render_slurm_conf(layout, paths, socket.gethostname(), cpus, memory))
    paths.hosts.write_text(render_hosts(layout))


def daemon_env(paths: LabPaths) -> dict[str, str]:
    env = dict(os.environ, SLURM_CONF=str(paths.slurm_conf))
    env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/sbin"
    return env


def start_daemon(argv: list[str], paths: LabPaths, label: str, pid_file: Path) -> int:
    """Start a daemon that forks itself into the background; return the pid it writes.
    Its stdio goes to a file: a daemon holding our pipe open would hang the caller."""
    out = paths.log_dir / f"{label}.out"
    with open(out, "ab") as sink:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                              env=daemon_env(paths), timeout=30)
    if done.returncode != 0:
        raise LabError(f"{label} failed to start (exit {done.returncode}): "
                       f"{tail(out, 5) or 'no output'}; command: {' '.join(argv)}")
    return read_pid(pid_file, label)


def read_pid(pid_file: Path, label: str, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(pid_file.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise LabError(f"{label} started but wrote no pid to {pid_file} within {timeout:.0f}s")


def start_munged(paths: LabPaths) -> int:
    """munged as the munge user, with its own key and socket (0755: munged insists)."""
    user = pwd.getpwnam(MUNGE_USER)
    paths.munge_dir.mkdir(parents=True, exist_ok=True)
    paths.munge_dir.chmod(0o755)
    key = paths.munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for p in (paths.munge_dir, key):
        os.chown(p, user.pw_uid, user.pw_gid)
    d = paths.munge_dir
    return start_daemon([
        "runuser", "-u", MUNGE_USER, "--", "munged", f"--socket={paths.munge_socket}",
        f"--key-file={key}", f"--pid-file={d / 'munged.pid'}",
        f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}",
    ], paths, "munged", d / "munged.pid")


def start_slurmctld(paths: LabPaths) -> int:
    # -i: ignore saved state; every lab starts empty.
    return start_daemon(["slurmctld", "-i", "-f", str(paths.slurm_conf)], paths,
                        "slurmctld", paths.ctld_pid)


def slurmd_argv(node: Node, paths: LabPaths) -> list[str]:
    """slurmd in the node's network namespace, with its own hostname and /etc/hosts.

    nsenter, not ``ip netns exec``: the latter remounts /sys and hides /sys/fs/cgroup. The
    node's UTS and mount namespaces are new (unshare), so ``hostname`` is nodeI and its
    /etc/hosts (bind-mounted) resolves every node -- the host's own files are untouched.
    """
    script = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
    return ["nsenter", f"--net={NETNS_DIR / node.netns}", "--",
            "unshare", "--uts", "--mount", "--propagation", "private", "--",
            "sh", "-c", script, "sh", node.name, str(paths.hosts),
            "slurmd", "-N", node.name, "-f", str(paths.slurm_conf)]


def start_slurmd(node: Node, paths: LabPaths) -> int:
    return start_daemon(slurmd_argv(node, paths), paths, f"slurmd-{node.name}",
                        paths.slurmd_pid(node.name))


def node_states(paths: LabPaths) -> dict[str, str]:
    """Node -> Slurm state (``idle``, ``down*``...) as sinfo reports; {} if unreachable."""
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                              text=True, env=daemon_env(paths), timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    pairs = (line.split() for line in done.stdout.splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2} if done.returncode == 0 else {}


def wait_idle(layout: Layout, paths: LabPaths, timeout: float) -> float:
    """Seconds until sinfo shows every node idle; on timeout an error with the log tails."""
    start = time.monotonic()
    while True:
        states = node_states(paths)
        if all(states.get(n.name) == "idle" for n in layout.nodes):
            return time.monotonic() - start
        if time.monotonic() - start >= timeout:
            break
        time.sleep(0.2)
    shown = ", ".join(f"{n.name}={states.get(n.name, '?')}" for n in layout.nodes)
    raise LabError(f"not every node became idle within {timeout:.0f}s (sinfo: {shown}); "
                   f"log tails:\n{log_tails(layout, paths)}")


def log_tails(layout: Layout, paths: LabPaths, lines: int = 8) -> str:
    logs = [paths.log_dir / "slurmctld.log", paths.munge_dir / "munged.log"]
    logs += [paths.slurmd_log(n.name) for n in layout.nodes]
    return "\n".join(f"== {p}\n{tail(p, lines) or '(empty or missing)'}" for p in logs)


def tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
