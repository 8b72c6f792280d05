"""check-env on a host without iproute2, as slim containers are (issue 31): the real CLI
judges the network the same with ``ip`` on PATH as without it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from diag.checkenv.netfacts import interfaces
from tests.util import free_port, quiet_env, run

NAMED = ("net.gloo_ifname", "net.nccl_ifname", "net.master_route")


def path_without(tool: str, farm: Path) -> str:
    """A PATH with every command of this one but ``tool``: symlinks in one folder."""
    farm.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for entry in os.scandir(folder) if os.path.isdir(folder) else ():
            if entry.name != tool and not os.path.lexists(farm / entry.name):
                (farm / entry.name).symlink_to(entry.path)
    return str(farm)


def reachable_ipv4() -> tuple[str, str]:
    """An interface peers on other nodes could use, and its IPv4 address; lo if none."""
    for iface in interfaces():
        v4 = [ip for ip in iface.ips if ":" not in ip]
        if iface.up and v4 and not iface.loopback:
            return iface.name, v4[0]
    return "lo", "127.0.0.1"


def net_results(out: Path, path: str, port: int) -> list[tuple[str, str, str]]:
    """check-env's net.* results with both *_SOCKET_IFNAME naming the interface and
    MASTER_ADDR its address, so that every interface and route check has work to do."""
    name, ip = reachable_ipv4()
    env = {k: v for k, v in quiet_env().items() if k != "DDIAG_RUN_DIR"}
    env.update(PATH=path, GLOO_SOCKET_IFNAME=name, NCCL_SOCKET_IFNAME=name, MASTER_ADDR=ip,
               MASTER_PORT=str(port))
    res = run([sys.executable, "-m", "diag.cli", "check-env", "--json", "--out", str(out)],
              timeout=120, env=env)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    return sorted((r["check"], r["status"], r["summary"])
                  for r in json.loads(res.stdout)["results"] if r["check"].startswith("net."))


def test_check_env_judges_the_network_the_same_without_ip(tmp_path):
    slim = path_without("ip", tmp_path / "bin")
    assert shutil.which("ip", path=slim) is None
    port = free_port()
    without = net_results(tmp_path / "without", slim, port)
    assert {c: s for c, s, _ in without if c in NAMED} == dict.fromkeys(NAMED, "ok"), without
    if shutil.which("ip"):
        assert net_results(tmp_path / "with", os.environ["PATH"], port) == without
