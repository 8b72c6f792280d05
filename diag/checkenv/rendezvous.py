"""Rendezvous pre-flight: can every node reach MASTER_ADDR:MASTER_PORT before torchrun?

torchrun's agents meet at the first node's store before any worker starts, so a port
that a firewall drops leaves every agent waiting for minutes and no rank ever runs to
report why. This runs one small task per node in the same allocation (srun, no torch):
node 0 listens on the port, the others connect to it by the name torchrun will use. Each
task prints one JSON line; ``check_rendezvous`` turns them into check results.

    python -m diag.checkenv.rendezvous --port P [--timeout S]   (inside srun)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from diag.format import schema
from diag.checkenv.collect import probe_port, resolve
from diag.checkenv.types import CheckResult, fail, ok
from diag.verdict import Category, Status

CONNECT_TIMEOUT_S = 5.0
CHECK = "net.rendezvous"


# --- one task per node ------------------------------------------------------------------

def _master(env=os.environ) -> str:
    from diag.launch import expand_nodelist

    nodes = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
    return nodes[0] if nodes else "127.0.0.1"


def serve(port: int, clients: int, deadline: float) -> dict:
    """Node 0: listen where torchrun's store will, take the others' connects, close."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError as exc:
        sock.close()
        return {"role": "master", "outcome": "bind_failed", "error": str(exc)}
    sock.listen(max(clients, 1))
    accepted = 0
    while accepted < clients and time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = sock.accept()
        except OSError:
            break
        conn.recv(1)  # wait for the client to close first: TIME_WAIT stays on its side
        conn.close()
        accepted += 1
    sock.close()
    return {"role": "master", "outcome": "listening", "accepted": accepted}


def connect(master: str, port: int, deadline: float) -> dict:
    """Other nodes: connect by name as torchrun will; retry while the listener starts."""
    res = resolve(master)
    if not res.addrs:
        return {"role": "client", "outcome": "resolve_failed", "error": res.error}
    while True:
        left = deadline - time.monotonic()
        probe = probe_port(res.addrs[0], port, timeout=max(0.2, min(CONNECT_TIMEOUT_S, left)))
        if probe.outcome != "refused" or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # refused: the master's listener is not up yet
    return {"role": "client", "outcome": probe.outcome, "error": probe.error,
            "addr": res.addrs[0], "seconds": round(probe.seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diag.checkenv.rendezvous")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=CONNECT_TIMEOUT_S + 3)
    args = parser.parse_args(argv)
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    node_id = int(os.environ.get("SLURM_NODEID", "0"))
    master, deadline = _master(), time.monotonic() + args.timeout
    row = (serve(args.port, nodes - 1, deadline + 1) if node_id == 0
           else connect(master, args.port, deadline))
    row.update(node=os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
               node_id=node_id, master=master, port=args.port)
    print(json.dumps(row), flush=True)
    return 0


# --- the launcher's side ------------------------------------------------------------------

def preflight(nodes: int, port: int, out: Path, timeout_s: float = 60.0) -> dict:
    """srun one task per node; the rows they printed, saved to RUN_DIR/env/."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            sys.executable, "-m", "diag.checkenv.rendezvous", "--port", str(port)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        rows, error = _rows(done.stdout), (done.stderr.strip()[-500:] if done.returncode else None)
    except subprocess.TimeoutExpired:
        rows, error = [], f"srun did not finish in {timeout_s:.0f} s"
    doc = {**schema.stamp(schema.RENDEZVOUS), "port": port, "nodes": nodes, "rows": rows,
           "error": error}
    (out / "env").mkdir(parents=True, exist_ok=True)
    (out / "env" / "rendezvous.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _rows(stdout: str) -> list[dict]:
    rows = []
    for line in stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "outcome" in row:
            rows.append(row)
    return sorted(rows, key=lambda r: r.get("node_id", 0))


_WHY = {
    "timeout": "connect timed out: packets to the port are dropped (a firewall rule on "
               "the master node, or a down link)",
    "refused": "connection refused: nothing listened there",
    "unreachable": "no route to the master node",
    "resolve_failed": "the master node's name does not resolve",
}


def check_rendezvous(doc: dict) -> list[CheckResult]:
    """Pure: the pre-flight rows as check results, one per outcome, naming the nodes."""
    rows, port = doc.get("rows", []), doc.get("port")
    master = next((r for r in rows if r.get("role") == "master"), None)
    results: list[CheckResult] = []
    if master and master.get("outcome") == "bind_failed":
        results.append(fail(CHECK, f"MASTER_PORT {port} cannot be bound on the master node: "
                            f"{master.get('error')}", "pick a free MASTER_PORT for this job "
                            "(see `ss -ltnp` on that node)", nodes=(master["node"],),
                            env_var="MASTER_PORT", category=Category.ENV_MISCONFIG))
    bad: dict[str, list[str]] = {}
    for row in rows:
        if row.get("role") == "client" and row.get("outcome") != "open":
            bad.setdefault(row.get("outcome", "error"), []).append(row.get("node", "?"))
    where = f"{master['master']}:{port}" if master else f"port {port}"
    for outcome, nodes in bad.items():
        results.append(fail(CHECK, f"{where} (MASTER_ADDR:MASTER_PORT) is not reachable from "
                            f"the other nodes: {_WHY.get(outcome, outcome)}",
                            f"open TCP port {port} on {master['node'] if master else 'the master'}"
                            " to the cluster network (firewall), or pick a MASTER_PORT that "
                            "is open between the nodes", nodes=tuple(sorted(nodes)),
                            env_var="MASTER_PORT", category=Category.NETWORK_UNREACHABLE))
    if not results and master:
        results.append(ok(CHECK, f"every node reached {where} before launch",
                          env_var="MASTER_PORT"))
    return results


def blocking(doc: dict) -> bool:
    """Launching torchrun now would only wait at the rendezvous."""
    return any(r.status is Status.FAIL for r in check_rendezvous(doc))


if __name__ == "__main__":
    sys.exit(main())
