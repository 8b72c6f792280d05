"""GPU health checks on NVML answers replayed from recordings (tests/checkenv/data/gpu/),
the Xid parser on a kernel log, and the no-GPU case on this machine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from diag.checkenv import gpufacts, xid
from diag.checkenv.checks_cross import check_gpu_nodes
from diag.checkenv.checks_gpu import CHECKS, check_xid
from diag.checkenv.facts import GpuFacts, facts_from_json
from diag.checkenv.nvmlrecord import Recording, Replay
from diag.checkenv.report import run_local
from diag.checkenv.snapshot import Snapshot
from diag.format.schema import SchemaError
from diag.verdict import Status
from tests.checkenv.factories import facts, launch_env

DATA = Path(__file__).parent / "data" / "gpu"


def record(case: str) -> dict:
    return json.loads((DATA / case / "nvml.json").read_text())


def nvml(case: str) -> GpuFacts:
    return gpufacts.nvml_facts(Replay(record(case), case))


def node_facts(case: str, node: str = "node1", *, local_world: int = 8, gpu=None, **kw):
    env = launch_env(world=16, local_world=local_world)
    return facts(node, env=env, gpu=gpu or nvml(case), host_gpus=8, **kw)


def gpu_results(f) -> dict[str, list]:
    out: dict[str, list] = {}
    for check in CHECKS:
        for r in check(f):
            out.setdefault(r.check, []).append(r)
    return out


def status(f, check: str) -> Status:
    [r] = gpu_results(f)[check]
    return r.status


# --- the recordings, replayed -----------------------------------------------------------

def test_healthy_8xh100_is_ok_everywhere():
    results = gpu_results(node_facts("healthy_8xh100"))
    assert {c: [r.status for r in rs] for c, rs in results.items()} == {
        "gpu.nvml": [Status.OK], "gpu.ecc": [Status.OK], "gpu.remap": [Status.OK],
        "gpu.throttle": [Status.OK], "gpu.pcie": [Status.OK], "gpu.nvlink": [Status.OK],
        "gpu.compute_mode": [Status.OK], "gpu.mig": [Status.OK],
        "gpu.persistence": [Status.OK], "gpu.count": [Status.OK],
        "gpu.cuda_driver": [Status.OK], "gpu.xid": [Status.SKIP]}  # no kernel log given
    assert "8 GPU(s) (NVIDIA H100 80GB HBM3), driver 550.54.15, CUDA 12.4" in \
        results["gpu.nvml"][0].summary


def test_replayed_facts_read_every_answer():
    g = nvml("healthy_8xh100")
    d = g.devices[4]
    assert (d.bus_id, d.pcie_width, d.nvlinks_up, d.nvlinks_down) == ("0000:9d:00", 16, 18, ())
    assert d.unanswered == ("nvmlDeviceGetRetiredPagesPendingStatus",)  # H100 remaps rows


def test_uncorrected_ecc_and_pending_row_remap_fail_naming_the_gpu():
    results = gpu_results(node_facts("ecc_uncorrected_remap_pending"))
    [ecc], [remap] = results["gpu.ecc"], results["gpu.remap"]
    assert ecc.status is Status.FAIL and remap.status is Status.FAIL
    assert ecc.summary == "GPU 5 (0000:c3:00): 2 uncorrected ECC error(s) since the driver loaded"
    assert "GPU 5 (0000:c3:00): a row remap is pending" in remap.summary
    assert "reset the GPU" in ecc.fix


def test_lifetime_ecc_alone_warns():
    g = nvml("healthy_8xh100")
    old = dataclasses.replace(g.devices[0], ecc_aggregate=3)
    f = node_facts("", gpu=dataclasses.replace(g, devices=(old,) + g.devices[1:]))
    assert status(f, "gpu.ecc") is Status.WARN


def test_hw_slowdown_warns_on_the_throttled_gpu_only():
    [r] = gpu_results(node_facts("hw_slowdown"))["gpu.throttle"]
    assert r.status is Status.WARN
    assert r.summary == "GPU 2 (0000:52:00): clocks held down by HW slowdown"


def test_pcie_x8_of_x16_warns():
    [r] = gpu_results(node_facts("pcie_x8"))["gpu.pcie"]
    assert r.status is Status.WARN and "GPU 6 (0000:d1:00): PCIe link x8 of x16" in r.summary


def test_nvlink_down_compute_mode_mig_and_persistence():
    g = nvml("healthy_8xh100")
    d = dataclasses.replace(g.devices[1], nvlinks_up=16, nvlinks_down=(3, 7), compute_mode=2,
                            mig_mode=1, persistence=0)
    f = node_facts("", gpu=dataclasses.replace(g, devices=(g.devices[0], d) + g.devices[2:]))
    assert status(f, "gpu.nvlink") is Status.WARN
    assert "NVLink 3,7 down (16 of 18 up)" in gpu_results(f)["gpu.nvlink"][0].summary
    assert status(f, "gpu.compute_mode") is Status.FAIL  # Prohibited
    assert status(f, "gpu.mig") is Status.WARN and status(f, "gpu.persistence") is Status.WARN


@pytest.mark.parametrize("local_world,expected", [(8, Status.OK), (16, Status.FAIL),
                                                  (4, Status.WARN)])
def test_gpus_on_the_node_against_ranks_per_node(local_world, expected):
    assert status(node_facts("healthy_8xh100", local_world=local_world),
                  "gpu.count") is expected


@pytest.mark.parametrize("torch_cuda,expected", [("12.4", Status.OK), ("12.1", Status.OK),
                                                 ("12.8", Status.WARN), ("13.0", Status.FAIL)])
def test_driver_cuda_against_torch_cuda(torch_cuda, expected):
    f = node_facts("healthy_8xh100")
    f = dataclasses.replace(f, versions=dataclasses.replace(f.versions, cuda=torch_cuda))
    assert status(f, "gpu.cuda_driver") is expected


# --- Xids ---------------------------------------------------------------------------------

def xid_facts(uptime_s: float = 86000.0) -> GpuFacts:
    text = (DATA / "xid_79_48" / "kernel.log").read_text()
    return dataclasses.replace(nvml("xid_79_48"), xids=xid.parse_log(text, uptime_s),
                               kernel_log="dmesg", kernel_log_read=True)


def test_kernel_log_xid_lines_parse_with_gpu_and_age():
    events = xid_facts().xids
    assert [(e.xid, e.bus_id) for e in events] == [
        (48, "0000:9d:00"), (63, "0000:9d:00"), (79, "0000:c3:00"), (79, "0000:c3:00")]
    assert events[2].text == "pid=812345, name=python, GPU has fallen off the bus."
    assert events[0].age_s == pytest.approx(86000.0 - 85210.118264)


def test_xid_79_and_48_fail_with_meaning_action_and_evidence():
    [r] = check_xid(node_facts("", gpu=xid_facts()))
    assert r.status is Status.FAIL
    assert "Xid 48 x1 on GPU 4 (0000:9d:00): Double-bit ECC error" in r.summary
    assert "Xid 79 x2 on GPU 5 (0000:c3:00): GPU has fallen off the bus" in r.summary
    assert "Xid 79: drain the node and reboot it" in r.fix
    assert str(r.evidence[-1]).startswith("kernel log: NVRM: Xid (PCI:0000:c3:00): 79, ")


def test_xids_older_than_a_day_are_history():
    [r] = check_xid(node_facts("", gpu=xid_facts(uptime_s=85210.0 + 2 * 86400)))
    assert r.status is Status.OK and "4 older" in r.summary


def test_an_app_xid_alone_warns_and_an_unknown_one_is_named():
    g = dataclasses.replace(xid_facts(), xids=xid.parse_log(
        "[10.0] NVRM: Xid (PCI:0000:1b:00): 31, pid=7, Ch 00000008, MMU Fault\n"
        "[11.0] NVRM: Xid (PCI:0000:1b:00): 999, pid=7, something new\n", 20.0))
    [r] = check_xid(node_facts("", gpu=g))
    assert r.status is Status.WARN and "Xid 999 x1 on GPU 0 (0000:1b:00): not in" in r.summary


def test_unreadable_kernel_log_skips_xid_cleanly():
    g = dataclasses.replace(nvml("healthy_8xh100"), kernel_log="not read: dmesg: read kernel "
                            "buffer failed: Operation not permitted; journalctl: not installed")
    [r] = check_xid(node_facts("", gpu=g))
    assert r.status is Status.SKIP and "Operation not permitted" in r.summary


def test_kernel_log_falls_back_to_journalctl_and_says_why(monkeypatch):
    monkeypatch.setattr(gpufacts.shutil, "which", lambda name: f"/usr/bin/{name}")

    def run(cmd, **kw):
        if cmd[0] == "dmesg":
            return _Done(1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")
        return _Done(0, "[ 5.0] host kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1, x\n", "")
    text, where, read = gpufacts.kernel_log(run)
    assert read and where == "journalctl -k" and "Xid" in text

    text, where, read = gpufacts.kernel_log(lambda cmd, **kw: _Done(1, "", "denied\n"))
    assert not read and where == "not read: dmesg: denied; journalctl: denied"


@dataclasses.dataclass
class _Done:
    returncode: int
    stdout: str
    stderr: str


def test_xid_table_covers_the_common_xids_and_names_its_source():
    table = xid.table()
    wanted = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 121,
              140, 143, 154} | set(range(144, 151))
    assert wanted <= set(table)
    assert {r.status for r in table.values()} == {"fail", "warn"}
    assert {r.source for r in table.values()} == {xid.CATALOG_URL}


def test_xid_table_of_another_major_is_rejected():
    with pytest.raises(ValueError, match="is not '# ddiag.xid 1'"):
        xid.parse_table("# ddiag.xid 2\nxid\tstatus\tmeaning\taction\tsource\n", "xid.tsv")


# --- across nodes -------------------------------------------------------------------------

def snaps_of(*cases: str) -> list[Snapshot]:
    out = []
    for n, case in enumerate(cases):
        f = node_facts(case, f"node{n + 1}")
        out.append(Snapshot(n * 8, 16, f, run_local(f)))
    return out


def test_alike_nodes_are_ok_across():
    [r] = check_gpu_nodes(snaps_of("healthy_8xh100", "healthy_8xh100"))
    assert r.status is Status.OK


def test_the_one_node_with_ecc_trouble_is_the_culprit():
    rows = check_gpu_nodes(snaps_of("healthy_8xh100", "healthy_8xh100",
                                    "ecc_uncorrected_remap_pending"))
    [r] = [r for r in rows if "health" in r.summary]
    assert r.status is Status.FAIL and r.culprit.hosts == ("node3",)
    assert "gpu.ecc + gpu.remap on node3" in r.summary


def test_a_node_with_a_narrower_pcie_link_is_named():
    [r] = check_gpu_nodes(snaps_of("healthy_8xh100", "pcie_x8", "healthy_8xh100"))
    assert r.status is Status.WARN and r.culprit.hosts == ("node2",)
    assert r.culprit.ranks == (8,)


def test_a_node_with_another_driver_fails():
    snaps = snaps_of("healthy_8xh100", "healthy_8xh100", "healthy_8xh100")
    f = snaps[1].facts
    snaps[1] = dataclasses.replace(snaps[1], facts=dataclasses.replace(
        f, gpu=dataclasses.replace(f.gpu, driver="535.161.08")))
    [r] = check_gpu_nodes(snaps)
    assert r.status is Status.FAIL and r.culprit.hosts == ("node2",)


# --- recording and replay -----------------------------------------------------------------

def test_a_recording_replays_to_the_same_facts():
    rec = Recording(Replay(record("ecc_uncorrected_remap_pending")))
    first = gpufacts.nvml_facts(rec)
    assert gpufacts.nvml_facts(Replay(rec.to_json())) == first


def test_a_newer_recording_is_rejected():
    with pytest.raises(SchemaError, match="newer than this ddiag reads"):
        Replay({**record("healthy_8xh100"), "schema": 2})


def test_gpu_facts_survive_the_snapshot_json():
    f = node_facts("", gpu=xid_facts())
    assert facts_from_json(json.loads(json.dumps(f.to_json()))) == f


# --- no GPU -------------------------------------------------------------------------------

def test_without_nvml_only_one_skip_row():
    f = facts(gpu=GpuFacts(nvml_error="nvmlInit failed: NVML Shared Library Not Found"),
              host_gpus=0)
    assert {c: [r.status for r in rs] for c, rs in gpu_results(f).items()} == {
        "gpu.nvml": [Status.SKIP]}


def test_a_gpu_node_whose_nvml_fails_warns():
    f = facts(gpu=GpuFacts(nvml_error="nvmlInit failed: GPU is lost"), host_gpus=8)
    assert status(f, "gpu.nvml") is Status.WARN


def test_pynvml_missing_is_said(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    assert "pynvml is not installed" in gpufacts.nvml_facts().nvml_error


def test_this_machine_without_a_gpu_skips_the_gpu_checks(tmp_path):
    here = gpufacts.nvml_facts()
    if here.nvml_error is None:
        pytest.skip("this machine has a GPU NVML answers for")
    from diag.checkenv.run import check_local

    report = check_local(tmp_path)
    gpu = [r for r in report.results if r.check.startswith("gpu.")]
    assert report.status is not Status.FAIL
    assert [(r.check, r.status) for r in gpu] == [("gpu.nvml", Status.SKIP)]


def test_the_docs_table_is_the_rules_catalog():
    from diag.checkenv.gpurules import markdown
    from tests.util import REPO

    doc = (REPO / "docs" / "check-env.md").read_text()
    between = doc.split("<!-- gpu-rules:start -->\n", 1)[1].split("<!-- gpu-rules:end -->")[0]
    assert between == markdown(), "regenerate the table with gpurules.markdown()"


def test_every_gpu_check_id_is_in_the_catalog():
    from diag.checkenv.gpurules import BY_ID

    f = node_facts("ecc_uncorrected_remap_pending", gpu=xid_facts())
    assert set(gpu_results(f)) <= set(BY_ID)
