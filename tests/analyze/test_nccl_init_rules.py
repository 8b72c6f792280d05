"""The rules over NCCL's init-time facts and Gloo's connect errors: a topology/graph XML
that does not fit the node, the IPoIB bootstrap auto-pick, NVLS bind failures, config
values that fingerprint a header/library skew, an NCCL too old for its torch, and loopback
peers. Each test writes a small log (no corpus text) and reads the top finding."""

from __future__ import annotations

from pathlib import Path

from diag.analyze import analyze
from diag.verdict import Basis, Category


def _findings(tmp_path: Path, text: str) -> list:
    log = tmp_path / "job.log"
    log.write_text(text.strip("\n") + "\n")
    result = analyze(log)
    assert not result.detector_errors
    return result.findings


def _top(tmp_path: Path, text: str):
    found = _findings(tmp_path, text)
    assert found, "no findings"
    return found[0]


def _categories(tmp_path: Path, text: str) -> set:
    return {f.category for f in _findings(tmp_path, text)}


# ---------------------------------------------------------------------------------------
# Topology / graph XML


def test_a_topo_file_of_another_version_is_the_environments_doing(tmp_path: Path) -> None:
    top = _top(tmp_path, """
g5:71:90 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /etc/nccl/topo-v1.xml

g5:71:90 [0] graph/xml.cc:394 NCCL WARN XML Topology has wrong version 1, 2 needed
g5:71:90 [0] NCCL INFO graph/topo.cc:688 -> 5
""")
    assert top.category is Category.ENV_MISCONFIG and top.basis is Basis.SETTING
    assert top.culprit.env_var == "NCCL_TOPO_FILE"


def test_without_the_env_line_the_xml_failure_is_less_sure(tmp_path: Path) -> None:
    # the file may come from the image's default location (Azure's virtualTopology.xml)
    top = _top(tmp_path, "g5:71:90 [0] graph/search.cc:919 (ncclTopoGetChannelFromXml) NCCL "
                         "WARN XML Import Channel : dev 3 not found.")
    assert top.category is Category.ENV_MISCONFIG and top.basis is Basis.LINE


def test_an_env_line_alone_is_no_finding(tmp_path: Path) -> None:
    assert not _findings(tmp_path, """
g5:71:90 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl/graph.xml
g5:71:90 [0] NCCL INFO XML Parse : Ignoring extra attributes (max 16)
g5:71:90 [0] NCCL INFO Search 0 : 8 channels loaded from XML graph
""")


# ---------------------------------------------------------------------------------------
# Bootstrap: error chains and the interface NCCL picked


_IPOIB = """
n1:10:10 [0] NCCL INFO Bootstrap : Using ib0:10.3.1.5<0>
n2:20:20 [0] NCCL INFO Bootstrap : Using ib0:10.3.1.6<0>
n2:20:31 [0] NCCL INFO misc/socket.cc:540 -> 2
n2:20:31 [0] NCCL INFO bootstrap.cc:260 -> 2
n2:20:31 [0] NCCL INFO init.cc:1390 -> 2
"""


def test_ipoib_auto_pick_on_one_subnet_is_less_sure(tmp_path: Path) -> None:
    top = _top(tmp_path, _IPOIB)
    assert top.category is Category.WRONG_INTERFACE and top.basis is Basis.LINE
    assert top.culprit.env_var == "NCCL_SOCKET_IFNAME"


def test_an_ipoib_interface_the_user_chose_is_not_an_auto_pick(tmp_path: Path) -> None:
    text = "n1:10:10 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n" + _IPOIB
    assert Category.WRONG_INTERFACE not in _categories(tmp_path, text)


def test_ipoib_bootstrap_on_one_node_with_no_error_is_fine(tmp_path: Path) -> None:
    assert not _findings(tmp_path, """
n1:10:10 [0] NCCL INFO Bootstrap : Using ib0:10.3.1.5<0>
n1:11:11 [1] NCCL INFO Bootstrap : Using ib0:10.3.1.5<0>
n1:10:40 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
""")


def test_a_socket_chain_that_does_not_pass_bootstrap_is_not_a_bootstrap_failure(
        tmp_path: Path) -> None:
    # the proxy's local sockets use misc/socket.cc too
    found = _findings(tmp_path, """
n1:10:10 [0] NCCL INFO Bootstrap : Using ib0:10.3.1.5<0>
n2:20:20 [0] NCCL INFO Bootstrap : Using ib0:10.3.2.6<0>
n2:20:31 [0] NCCL INFO misc/socket.cc:540 -> 2
n2:20:31 [0] NCCL INFO proxy.cc:1021 -> 2
""")
    assert not [f for f in found if f.category in (Category.WRONG_INTERFACE,
                                                   Category.NETWORK_UNREACHABLE)]


def test_chains_are_told_apart_by_thread(tmp_path: Path) -> None:
    # thread 31's chain starts in the graph search; thread 32's own starts in its socket
    top = _top(tmp_path, """
n1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.3.1.5<0>
n2:20:20 [0] NCCL INFO Bootstrap : Using eth0:10.3.1.6<0>
n2:20:31 [0] NCCL INFO graph/search.cc:733 -> 2
n2:20:32 [0] NCCL INFO misc/socket.cc:540 -> 2
n2:20:32 [0] NCCL INFO bootstrap.cc:260 -> 2
""")
    assert top.category is Category.NETWORK_UNREACHABLE and top.basis is Basis.LINE


# ---------------------------------------------------------------------------------------
# NVLS, config values, versions


def test_the_older_nvls_cuda_failure_keeps_its_own_reading(tmp_path: Path) -> None:
    # before 2.27 the same call failed with CUCHECK's generic WARN: a state NCCL does not
    # attribute (the fabric manager restarted under held resources), so not env_misconfig
    top = _top(tmp_path, "h9:1:1 [3] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid "
                         "argument'")
    assert top.category is Category.OTHER


def test_the_nvls_hint_line_alone_is_not_the_bind_failure(tmp_path: Path) -> None:
    assert Category.ENV_MISCONFIG not in _categories(tmp_path, """
This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.
""")


def test_int_min_in_a_newer_attribute_is_the_same_skew(tmp_path: Path) -> None:
    top = _top(tmp_path, "n1:3:3 [0] init.cc:1311 NCCL WARN Invalid config cgaClusterSize "
                         "attribute value -2147483648")
    assert top.category is Category.VERSION_MISMATCH and top.basis is Basis.EMITTER


def test_an_old_nccl_under_a_new_torch_is_a_version_mismatch(tmp_path: Path) -> None:
    top = _top(tmp_path, """
PyTorch version: 2.4.1+cu121
h3:501:501 [0] NCCL INFO NCCL version 2.12.12+cuda11.6

h3:501:501 [0] enqueue.cc:336 NCCL WARN Cuda failure 'invalid resource handle'
h3:501:501 [0] NCCL INFO enqueue.cc:1382 -> 1
""")
    assert top.category is Category.VERSION_MISMATCH and "2.12.12" in top.title


def test_an_old_nccl_under_an_old_torch_is_not(tmp_path: Path) -> None:
    assert Category.VERSION_MISMATCH not in _categories(tmp_path, """
PyTorch version: 1.12.1+cu113
h3:501:501 [0] NCCL INFO NCCL version 2.10.3+cuda11.3

h3:501:501 [0] enqueue.cc:336 NCCL WARN Cuda failure 'invalid resource handle'
""")


# ---------------------------------------------------------------------------------------
# Gloo peers on loopback


def test_a_store_client_on_loopback_is_not_gloos_interface(tmp_path: Path) -> None:
    # TCPStore's own client message names an address too: not a Gloo pair
    found = _findings(tmp_path, """
[W socket.cpp:663] [c10d] The client socket has failed to connect to [127.0.0.1]:29500 (errno: 111 - Connection refused).
""")
    assert not [f for f in found if f.culprit.env_var == "GLOO_SOCKET_IFNAME"]


def test_a_read_error_from_a_loopback_peer_is_not_an_interface(tmp_path: Path) -> None:
    # the connection was up: a loopback peer that reset it died, it was reachable
    found = _findings(tmp_path, """
node1: [rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:40122: Connection reset by peer
node2: [rank2]: world_size=4
""")
    assert Category.WRONG_INTERFACE not in {f.category for f in found}


def test_no_route_to_a_routable_gloo_peer_is_the_network(tmp_path: Path) -> None:
    top = _top(tmp_path, "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] "
                         "connect [10.4.1.7]:39211: No route to host")
    assert top.category is Category.NETWORK_UNREACHABLE and top.basis is Basis.LINE


def test_a_refused_connect_over_ipoib_reached_the_peer(tmp_path: Path) -> None:
    # a refusal comes back from the peer's host: the IPoIB address routes, its process is gone
    found = _findings(tmp_path, """
n1:10:10 [0] NCCL INFO Bootstrap : Using ib0:10.3.1.5<0>
n2:20:20 [0] NCCL INFO Bootstrap : Using ib0:10.3.2.6<0>

n2:20:31 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.3.1.5<40001> failed : Connection refused
""")
    assert Category.WRONG_INTERFACE not in {f.category for f in found}
