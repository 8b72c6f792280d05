"""check-env's options and defaults on hostile input (issue 18): refused with a usage
error naming the option, the value and what is allowed; no stray folders; GPU masks and
log levels judged by what their readers really do."""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner

from diag.checkenv.checks_launch import check_visible_devices
from diag.checkenv.checks_vars import check_values
from diag.checkenv.collect import host_gpus
from diag.verdict import Status
from diag.cli import main
from tests.checkenv.factories import facts, launch_env
from tests.util import quiet_env, run


@pytest.mark.parametrize("option,value,allowed", [
    ("--timeout", "-5", "x>0"),
    ("--group-timeout", "0", "x>0"),
    ("--group-timeout", "nan", "finite"),
    ("--timeout", "inf", "finite"),
    ("--master-port", "70000", "1<=x<=65535"),
    ("--env-on", "garbage", "NODE:VAR=VALUE"),
])
def test_bad_launch_options_are_usage_errors(option, value, allowed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were it to run, its run directory lands here
    res = CliRunner().invoke(main, ["check-env", option, value])
    assert res.exit_code == 2, res.output
    assert option in res.output and value in res.output and allowed in res.output
    assert "Traceback" not in res.output


def test_default_run_dir_is_under_runs_not_the_working_directory(tmp_path):
    env = {k: v for k, v in quiet_env().items() if k != "DDIAG_RUN_DIR"}
    res = run([sys.executable, "-m", "diag.cli", "check-env", "--json"], timeout=60,
              cwd=tmp_path, env=env)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    run_dir = json.loads(res.stdout)["run_dir"]
    assert os.listdir(tmp_path) == ["runs"]
    [made] = os.listdir(tmp_path / "runs")
    assert made.startswith("check-env-") and run_dir.endswith(f"runs/{made}")
    assert (tmp_path / "runs" / made / "check_env.json").is_file()


@pytest.mark.parametrize("value", ["verbose", "LOUD"])
def test_an_unknown_nccl_debug_level_warns_because_nccl_ignores_it(value):
    [res] = check_values(facts(env=launch_env(NCCL_DEBUG=value)))
    assert res.status is Status.WARN and res.culprit.env_var == "NCCL_DEBUG"
    assert "ignore" in res.summary
    assert all(level in res.summary for level in ("VERSION", "WARN", "INFO", "TRACE"))


def test_cuda_visible_devices_naming_gpus_the_host_lacks_warns():
    env = launch_env(CUDA_VISIBLE_DEVICES="7")
    [res] = check_visible_devices(facts(env=env, host_gpus=0))
    assert res.status is Status.WARN and res.culprit.env_var == "CUDA_VISIBLE_DEVICES"
    assert "7" in res.summary and "0 GPU" in res.summary
    # CUDA stops at the first ordinal that does not exist: 0,7,1 on 4 GPUs is GPU 0 only.
    env = launch_env(CUDA_VISIBLE_DEVICES="0,7,1")
    [res] = check_visible_devices(facts(env=env, host_gpus=4, gpu_uuids=("GPU-a",)))
    assert res.status is Status.WARN and "4 GPU" in res.summary


@pytest.mark.parametrize("cvd,host_gpus", [("7", None), ("", 0), ("-1", 0), ("0,1", 2)])
def test_cuda_visible_devices_that_fit_or_hide_gpus_on_purpose_do_not_warn(cvd, host_gpus):
    env = launch_env(CUDA_VISIBLE_DEVICES=cvd)
    [res] = check_visible_devices(facts(env=env, host_gpus=host_gpus))
    assert res.status is not Status.WARN


def test_check_env_counts_this_hosts_gpus(tmp_path):
    res = run([sys.executable, "-m", "diag.cli", "check-env", "--out", str(tmp_path / "r"),
               "--json"], timeout=60, env=quiet_env(CUDA_VISIBLE_DEVICES="7"))
    doc = json.loads(res.stdout)
    [dev] = [r for r in doc["results"] if r["check"] == "launch.devices"]
    snap = json.loads((tmp_path / "r" / "env" / "rank00000.json").read_text())
    host_gpus = snap["facts"]["host_gpus"]  # 0 here: no NVIDIA driver on this machine
    if host_gpus is not None and host_gpus <= 7:
        assert dev["status"] == "warn" and f"{host_gpus} GPU" in dev["summary"]


def test_host_gpus_counts_the_drivers_gpu_folders(tmp_path):
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (tmp_path / bus).mkdir()
    assert host_gpus(str(tmp_path)) == 2
    missing = host_gpus(str(tmp_path / "nope"))
    assert missing == (None if os.path.exists("/dev/nvidiactl") else 0)


def test_a_driver_count_below_what_cuda_found_is_not_trusted():
    env = launch_env(CUDA_VISIBLE_DEVICES="1")
    [res] = check_visible_devices(facts(env=env, host_gpus=0, gpu_uuids=("GPU-a",)))
    assert res.status is not Status.WARN
