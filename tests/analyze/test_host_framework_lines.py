"""Host evidence (Xid codes, PCIe AER, nvidia-smi, Kubernetes pod states, Slurm memory
limits) and training frameworks' own counters (fp16 loss-scale overflows, Megatron's NaN
iterations and rank-named NaN asserts): what each implies, and what must not be read as a
fault. Logs are written here from the emitters' format strings, one small file each."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.analyze.textlog import Extractor
from diag.verdict import Severity


def _signals(*lines: str) -> list:
    ex = Extractor("host.log", list(lines))
    for n, line in enumerate(lines, 1):
        ex.feed(n, line)
    return ex.finish()


def _top(tmp_path: Path, text: str):
    log = tmp_path / "job.log"
    log.write_text(text)
    result = analyze(log)
    assert not result.detector_errors
    return result.findings[0] if result.findings else None


def _faults(tmp_path: Path, text: str) -> list:
    log = tmp_path / "job.log"
    log.write_text(text)
    result = analyze(log)
    assert not result.detector_errors
    return [f for f in result.findings if f.root_cause and f.severity > Severity.INFO]


# ---------------------------------------------------------------------------------------
# Xid: the GPU's faults versus the application's


@pytest.mark.parametrize(("code", "kind", "what"), [
    (79, "xid", "fell_off_bus"), (48, "xid", "ecc"), (64, "xid", "row_remap"),
    (74, "xid", "nvlink_error"), (95, "xid", "ecc"), (119, "xid", "gsp"), (109, "xid", "xid"),
    (13, "cuda_error", None), (31, "cuda_error", None),
    (43, "xid_app_stopped", None), (45, "xid_app_stopped", None)])
def test_an_xid_code_says_whose_fault_it_is(code: int, kind: str, what: str | None) -> None:
    line = f"[Mon Mar  3 11:02:40 2025] NVRM: Xid (PCI:0000:41:00): {code}, pid=7731, name=python"
    got = [s for s in _signals(line) if s.kind in ("xid", "cuda_error", "xid_app_stopped")]
    assert [s.kind for s in got] == [kind]
    assert got[0].fields["code"] == code
    if what:
        assert got[0].fields["what"] == what


def test_an_application_fault_xid_is_a_cuda_error_not_a_hardware_finding(tmp_path) -> None:
    top = _top(tmp_path, "NVRM: Xid (PCI:0000:41:00): 13, pid=7731, name=python, Graphics SM "
                         "Warp Exception on (GPC 2, TPC 0, SM 1): Out Of Range Address\n")
    assert top.category.value == "other" and "Xid 13" in top.title
    assert "hardware" not in top.title


# ---------------------------------------------------------------------------------------
# PCIe AER, nvidia-smi


def test_corrected_pcie_errors_are_routine(tmp_path) -> None:
    text = ("pcieport 0000:00:1c.5: AER: Corrected error message received from 0000:03:00.0\n"
            "nvidia 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
            "(Receiver ID)\n"
            "nvidia 0000:03:00.0:   device [10de:2330] error status/mask=00000001/0000e000\n")
    # the generic "unexplained error lines" fallback may quote them; no rule reads them
    assert [f for f in _faults(tmp_path, text) if f.detector != "unexplained"] == []


def test_a_fatal_pcie_error_is_hardware(tmp_path) -> None:
    top = _top(tmp_path, "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                         "type=Transaction Layer, (Requester ID)\n")
    assert top.category.value == "other"


def test_nvml_driver_library_mismatch_is_a_version_mismatch(tmp_path) -> None:
    top = _top(tmp_path, "$ nvidia-smi\nFailed to initialize NVML: Driver/library version "
                         "mismatch\nNVML library version: 560.35\n")
    assert top.category.value == "version_mismatch"


def test_the_kernel_modules_api_mismatch_is_a_version_mismatch(tmp_path) -> None:
    top = _top(tmp_path, "[ 88.120443] NVRM: API mismatch: the client has the version 570.86.15, "
                         "but\n[ 88.120447] NVRM: this kernel module has the version 565.57.01.  "
                         "Please\n")
    assert top.category.value == "version_mismatch"


def test_a_gpu_the_driver_cannot_bring_up_is_hardware(tmp_path) -> None:
    top = _top(tmp_path, "NVRM: GPU 0000:62:00.0: RmInitAdapter failed! (0x22:0x56:894)\n"
                         "NVRM: GPU 0000:62:00.0: rm_init_adapter failed, device minor number 0\n"
                         "RuntimeError: No CUDA GPUs are available\n")
    assert top.category.value == "other" and "GPU" in top.title


# ---------------------------------------------------------------------------------------
# Kubernetes and Slurm memory limits


def test_exit_code_137_alone_is_only_a_hint_of_oom(tmp_path) -> None:
    top = _top(tmp_path, "    Last State:     Terminated\n      Reason:       Error\n"
                         "      Exit Code:    137\n")
    assert top.category.value == "oom" and top.confidence <= 0.5


def test_an_eviction_for_disk_is_not_oom(tmp_path) -> None:
    text = ("Status:  Failed\nReason:  Evicted\nMessage: The node was low on resource: "
            "ephemeral-storage. Threshold quantity: 10Gi, available: 812Mi.\n")
    assert not [f for f in _faults(tmp_path, text) if f.category.value == "oom"]


def test_an_eviction_for_memory_is_host_oom(tmp_path) -> None:
    top = _top(tmp_path, "  Warning  Evicted  3m  kubelet  The node was low on resource: "
                         "memory. Threshold quantity: 500Mi, available: 212Mi.\n")
    assert top.category.value == "oom" and top.confidence >= 0.8


def test_slurm_killing_a_step_over_its_memory_limit_is_oom(tmp_path) -> None:
    top = _top(tmp_path, "slurmstepd: error: Job 4471 exceeded memory limit (33554432 > "
                         "32768000), being killed\nslurmstepd: error: *** STEP 4471.0 ON n11 "
                         "CANCELLED AT 2024-06-01T10:11:12 ***\n")
    assert top.category.value == "oom" and top.confidence >= 0.8


# ---------------------------------------------------------------------------------------
# fp16 loss scale: calibration is normal, a scale at the floor is not


def _deepspeed(scales: list[tuple[float, float]]) -> str:
    return "".join(f"[2025-01-01 00:00:{i % 60:02d},000] [INFO] [loss_scaler.py:183:update_scale] "
                   f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                   f"{int(a)}, reducing to {int(b)}\n" for i, (a, b) in enumerate(scales))


def test_calibration_overflows_are_not_a_finding(tmp_path) -> None:
    halvings = [(2.0 ** k, 2.0 ** (k - 1)) for k in range(32, 16, -1)]
    assert _faults(tmp_path, _deepspeed(halvings)) == []


def test_a_scale_driven_to_one_is_nan_inf(tmp_path) -> None:
    top = _top(tmp_path, _deepspeed([(8, 4), (4, 2), (2, 1), (1, 1), (1, 1)]))
    assert top.category.value == "nan_inf" and not top.culprit.ranks


def test_a_scale_stuck_at_its_minimum_is_nan_inf(tmp_path) -> None:
    top = _top(tmp_path, _deepspeed([(256, 128)] + [(128, 128)] * 12))
    assert top.category.value == "nan_inf"


def test_the_fatal_minimum_scale_exception_is_nan_inf(tmp_path) -> None:
    top = _top(tmp_path, "Exception: Current loss scale already at minimum - cannot decrease "
                         "scale anymore. Exiting run.\n")
    assert top.category.value == "nan_inf"


@pytest.mark.parametrize(("text", "bad"), [
    ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0\n"
     "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0\n", False),
    ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 1.0\n"
     "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.5\n", True),
    ("2024-02-01 10:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring "
     "gradient, setting loss scale to: 64.0\n", False),
    ("2024-02-01 10:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring "
     "gradient, setting loss scale to: 0.25\n", True)])
def test_other_scalers_follow_the_same_rule(tmp_path, text: str, bad: bool) -> None:
    faults = _faults(tmp_path, text)
    assert [f.category.value for f in faults] == (["nan_inf"] if bad else [])


# ---------------------------------------------------------------------------------------
# Megatron


def test_megatron_intervals_without_nan_iterations_are_healthy(tmp_path) -> None:
    text = "".join(f" iteration {it:8d}/   20000 | lm loss: {4 - it / 1e4:.6E} | loss scale: "
                   f"{2 ** (15 - k)}.0 | number of skipped iterations: {k:3d} | number of nan "
                   "iterations:   0 |\n" for k, it in enumerate(range(100, 600, 100)))
    assert _faults(tmp_path, text) == []


def test_megatron_rerun_machine_names_the_rank(tmp_path) -> None:
    text = ("[rank0]:[E0301 08:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for "
            "600000 milliseconds before timing out.\n"
            "[rank1]:[E0301 08:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for "
            "600000 milliseconds before timing out.\n"
            "RuntimeError: Rank 2, node h100-04, device 2, iteration 9: Unexpected result nan "
            "(message='found NaN in local forward loss calculation')\n")
    top = _top(tmp_path, text)
    assert top.category.value == "nan_inf" and list(top.culprit.ranks) == [2]


def test_unscaled_overflows_count_only_when_they_persist(tmp_path) -> None:
    line = "[deepspeed] OVERFLOW! Rank 0 Skipping step.\n"
    assert _faults(tmp_path, line * 2) == []
    assert _top(tmp_path, line * 12).category.value == "nan_inf"


def test_deepspeed_launcher_sigkill_is_a_hint_of_oom_naming_no_rank(tmp_path) -> None:
    # the command it quotes is the last worker's, not the killed one's
    top = _top(tmp_path, "[2025-04-02 19:12:55,804] [ERROR] [launch.py:325:sigkill_handler] "
                         "['/usr/bin/python3', '-u', 'train.py', '--local_rank=7'] exits with "
                         "return code = -9\n")
    assert top.category.value == "oom" and top.confidence <= 0.5 and not top.culprit.ranks


def test_megatron_skips_at_loss_scale_one_are_nan_inf_and_early_skips_are_not(tmp_path) -> None:
    line = (" iteration {it:8d}/  100000 | lm loss: 6.1E+00 | loss scale: {scale} | number of "
            "skipped iterations: {skips:3d} | number of nan iterations:   0 |\n")
    early = line.format(it=100, scale="65536.0", skips=14) + line.format(
        it=200, scale="32768.0", skips=1)
    assert _faults(tmp_path, early) == []
    late = early + line.format(it=9000, scale="1.0", skips=100)
    assert _top(tmp_path, late).category.value == "nan_inf"
