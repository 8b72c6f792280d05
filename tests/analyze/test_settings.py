"""The settings principle: a setting printed in the log and a failure in the subsystem it
governs name the setting; a failure that is a consequence does not."""

from __future__ import annotations

from diag.analyze import analyze
from diag.analyze.detectors.settings import GOVERNS
from diag.analyze.catalog.emitted import SUBSYSTEMS
from diag.analyze.inputs import load
from diag.analyze.detectors.common import index

PEER_RESET = """n7:901:901 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
n7:901:901 [0] NCCL INFO Bootstrap : Using eth0:10.4.0.7<0>
n7:901:901 [0] NCCL INFO comm 0x55d1 rank 4 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0
[rank4]:[E1203 11:02:19.331 ProcessGroupNCCL.cpp:1536] [PG ID 0 PG GUID 0(default_pg) Rank 4] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5
[rank4]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
[rank4]: Last error:
[rank4]: socketProgress: Connection closed by remote peer n3<57022>
"""


def test_a_peer_that_closed_the_connection_does_not_blame_the_interface_setting(tmp_path) -> None:
    log = tmp_path / "log.txt"
    log.write_text(PEER_RESET)
    result = analyze(log)
    assert result.findings and not [f for f in result.findings if f.detector == "settings"]


def test_every_rule_names_subsystems_the_catalog_knows() -> None:
    # a typo in a subsystem name would make a rule that never fires
    known = {name for _, name in SUBSYSTEMS} | {"gloo"}
    assert all(set(rule.subsystems) <= known for rule in GOVERNS)
    assert len({rule.var for rule in GOVERNS}) == len(GOVERNS)


def test_settings_are_read_from_command_lines_and_shell_traces(tmp_path) -> None:
    log = tmp_path / "log.txt"
    log.write_text(
        "+ export GLOO_SOCKET_IFNAME=eth1\n"
        "$ mpirun -np 2 -x NCCL_IB_HCA=mlx5_0:1 -x NCCL_DEBUG=INFO ./a.out\n"
        "srun --export=ALL,NCCL_SOCKET_IFNAME=bond0 python train.py\n"
        "NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 8 train.py\n"
        "I tried setting NCCL_IB_DISABLE=1 but it did not help\n")
    found = {(s.fields["var"], s.fields["value"]) for s in index(load(log)).of("env")}
    assert found == {("GLOO_SOCKET_IFNAME", "eth1"), ("NCCL_IB_HCA", "mlx5_0:1"),
                     ("NCCL_DEBUG", "INFO"), ("NCCL_SOCKET_IFNAME", "bond0"),
                     ("NCCL_P2P_DISABLE", "1")}
