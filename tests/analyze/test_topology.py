"""The incident's topology: one answer to "how many nodes" and "whose address"."""

from __future__ import annotations

from diag.analyze.detectors.common import index
from diag.analyze.inputs import load


def _topology(tmp_path, text: str):
    log = tmp_path / "log.txt"
    log.write_text(text)
    return index(load(log)).topology


def test_a_stated_node_count_and_two_hosts(tmp_path) -> None:
    one = _topology(tmp_path, "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 "
                              "localRanks 1 localRank 0 MNNVL 0\n")
    assert one.one_node and not one.multi_node
    two = _topology(tmp_path, "a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                              "b:2:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n")
    assert two.multi_node and not two.one_node
    assert (two.host_of("10.0.0.2"), two.host_of("10.9.9.9")) == ("b", None)


def test_localhost_is_no_second_host_and_silence_is_not_one_node(tmp_path) -> None:
    t = _topology(tmp_path, "vm:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                            "  host      : localhost\n")
    assert not t.multi_node and not t.one_node  # nothing says how many nodes
    assert t.hosts == {"vm"}


def test_every_rank_initialised_on_one_host_is_one_node(tmp_path) -> None:
    lines = "".join(f"vm:{800 + r}:{800 + r} [0] NCCL INFO ncclCommInitRankConfig comm 0x{r} "
                    f"rank {r} nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x9 - Init START\n"
                    for r in range(2))
    assert _topology(tmp_path, lines).one_node
    assert not _topology(tmp_path, lines.splitlines()[0] + "\n").one_node  # rank 1 unseen
