"""A small TCP throughput tool for the lab's links, bounded in time and bytes.

    python -m diag.lab.throughput server --bind 10.201.X.14 [--port 5201]
    python -m diag.lab.throughput client --to 10.201.X.14 [--seconds 2]

The server takes one connection and reports, as one JSON line, what it received from the
first byte to EOF (the receiver's view: what the link delivered, not what the sender
queued). Both sides refuse addresses outside the lab range (10.201.0.0/16).
``measure()`` runs the pair inside two nodes' namespaces and returns the result.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from diag.lab.spec import LAB_NETWORK, Layout, LabError

DEFAULT_PORT = 5201
CHUNK = 256 * 1024
MAX_SECONDS = 30.0
MAX_BYTES = 4 * 1024**3


@dataclass(frozen=True)
class Throughput:
    """One measurement, as the receiver saw it."""

    src: str
    dst: str
    bytes: int
    seconds: float
    """First byte received to EOF."""

    @property
    def mbit_per_s(self) -> float:
        """Payload rate in Mbit/s (10^6 bits); TCP/IP headers not counted."""
        return rate_mbit(self.bytes, self.seconds)


def rate_mbit(nbytes: int, seconds: float) -> float:
    return nbytes * 8 / seconds / 1e6 if seconds > 0 else 0.0


def check_lab_addr(addr: str) -> str:
    """Only lab addresses: this tool must never send traffic anywhere else."""
    try:
        inside = ipaddress.IPv4Address(addr) in LAB_NETWORK
    except ValueError:
        inside = False
    if not inside:
        raise ValueError(f"address {addr!r} is not a lab address; give a node's address "
                         f"in {LAB_NETWORK} (see 'ddiag lab status --json')")
    return addr


def receive(conn: socket.socket, deadline: float) -> tuple[int, float]:
    """Bytes received and seconds from the first byte to EOF (or the deadline)."""
    total, first = 0, None
    buf = bytearray(CHUNK)
    while time.monotonic() < deadline:
        n = conn.recv_into(buf)
        if n == 0:
            break
        first = first or time.monotonic()
        total += n
    return total, (time.monotonic() - first) if first else 0.0


def serve(bind: str, port: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    with socket.create_server((check_lab_addr(bind), port), reuse_port=False) as srv:
        srv.settimeout(timeout)
        print(json.dumps({"event": "listening", "addr": bind, "port": port}), flush=True)
        conn, peer = srv.accept()
        with conn:
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            nbytes, seconds = receive(conn, deadline)
    return {"event": "result", "peer": peer[0], "bytes": nbytes, "seconds": seconds,
            "mbit_per_s": rate_mbit(nbytes, seconds)}


def send(to: str, port: int, seconds: float, max_bytes: int) -> dict:
    payload = b"\0" * CHUNK
    sent, start = 0, time.monotonic()
    with socket.create_connection((check_lab_addr(to), port), timeout=5) as conn:
        while time.monotonic() - start < seconds and sent < max_bytes:
            conn.sendall(payload)
            sent += len(payload)
    return {"event": "sent", "bytes": sent, "seconds": time.monotonic() - start}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m diag.lab.throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role", required=True)
    server = sub.add_parser("server", help="receive one connection, print the rate")
    server.add_argument("--bind", required=True)
    server.add_argument("--timeout", type=float, default=20.0)
    client = sub.add_parser("client", help="send to a server for --seconds")
    client.add_argument("--to", required=True)
    client.add_argument("--seconds", type=float, default=2.0)
    client.add_argument("--max-bytes", type=int, default=1024**3)
    for p in (server, client):
        p.add_argument("--port", type=int, default=DEFAULT_PORT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.role == "server":
            result = serve(args.bind, args.port, min(args.timeout, MAX_SECONDS * 2))
        else:
            result = send(args.to, args.port, min(args.seconds, MAX_SECONDS),
                          min(args.max_bytes, MAX_BYTES))
    except (OSError, ValueError) as err:
        print(f"throughput {args.role}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


def in_node(layout: Layout, node: str, argv: list[str]) -> list[str]:
    """``argv`` run in the node's network namespace (nsenter, like the lab's slurmd)."""
    return ["nsenter", f"--net=/run/netns/{layout.node(node).netns}", "--", *argv]


def start_server(layout: Layout, node: str, port: int, timeout: float) -> subprocess.Popen:
    """The server in ``node``, returned once it listens (so the client cannot race it)."""
    argv = [sys.executable, "-m", "diag.lab.throughput", "server",
            "--bind", layout.node(node).addr, "--port", str(port), "--timeout", str(timeout)]
    server = subprocess.Popen(in_node(layout, node, argv), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    if '"listening"' not in server.stdout.readline():
        server.kill()
        raise LabError(f"throughput server on {node} did not start: "
                       f"{server.communicate(timeout=5)[1].strip()}")
    return server


def run_client(layout: Layout, src: str, dst: str, port: int, seconds: float) -> None:
    argv = [sys.executable, "-m", "diag.lab.throughput", "client",
            "--to", layout.node(dst).addr, "--port", str(port), "--seconds", str(seconds)]
    done = subprocess.run(in_node(layout, src, argv), capture_output=True, text=True,
                          timeout=seconds + 15)
    if done.returncode != 0:
        raise LabError(f"throughput client {src} -> {dst}: {done.stderr.strip()}")


def measure(layout: Layout, src: str, dst: str, seconds: float = 2.0,
            port: int = DEFAULT_PORT) -> Throughput:
    """Send from node ``src`` to node ``dst`` over the fabric for ``seconds``."""
    server = start_server(layout, dst, port, seconds + 15)
    try:
        run_client(layout, src, dst, port, seconds)
        out, _ = server.communicate(timeout=15)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    result = json.loads(out.strip().splitlines()[-1])
    return Throughput(src=src, dst=dst, bytes=result["bytes"], seconds=result["seconds"])


if __name__ == "__main__":
    sys.exit(main())
