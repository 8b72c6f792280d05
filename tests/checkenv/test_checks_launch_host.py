"""Launch-geometry and host checks on constructed facts."""

from __future__ import annotations

import pytest

from diag.checkenv.checks_host import (
    check_infiniband, check_libibverbs, check_memlock, check_nofile, check_shm,
)
from diag.checkenv.checks_launch import check_geometry, check_threads, check_visible_devices
from diag.checkenv.facts import Limits
from diag.verdict import Status
from tests.checkenv.factories import facts, launch_env

GPUS = tuple(f"GPU-{i}" for i in range(8))


@pytest.mark.parametrize("override,message", [
    ({"RANK": "9", "WORLD_SIZE": "8"}, "RANK must be in [0, 8), got: 9"),
    ({"LOCAL_RANK": "2"}, "LOCAL_RANK must be in [0, 2), got: 2"),
    ({"LOCAL_WORLD_SIZE": "16"}, "LOCAL_WORLD_SIZE (16) is larger than WORLD_SIZE (4)"),
    ({"WORLD_SIZE": "four"}, "WORLD_SIZE='four' is not an integer"),
])
def test_inconsistent_geometry_fails_with_field_value_and_range(override, message):
    [res] = check_geometry(facts(env={**launch_env(), **override}))
    assert res.status is Status.FAIL and message in res.summary


def test_consistent_geometry_is_one_rank_independent_row():
    a = check_geometry(facts(env=launch_env(rank=0)))[0]
    b = check_geometry(facts(env=launch_env(rank=3)))[0]
    assert a.status is Status.OK and a.summary == b.summary


def test_no_launcher_skips_geometry():
    assert check_geometry(facts(env={}))[0].status is Status.SKIP


def test_fewer_visible_gpus_than_local_ranks_fails():
    env = launch_env(rank=3, local_world=4, CUDA_VISIBLE_DEVICES="0,1")
    [res] = check_visible_devices(facts(env=env, gpu_uuids=GPUS[:2]))
    assert res.status is Status.FAIL and res.culprit.env_var == "CUDA_VISIBLE_DEVICES"
    assert "2 GPUs visible for LOCAL_RANK=3 of LOCAL_WORLD_SIZE=4" in res.summary


def test_one_visible_gpu_per_rank_warns_about_set_device_local_rank():
    env = launch_env(rank=1, CUDA_VISIBLE_DEVICES="1")
    [res] = check_visible_devices(facts(env=env, gpu_uuids=GPUS[1:2]))
    assert res.status is Status.WARN and "invalid device ordinal" in res.summary


def test_visible_devices_ok_and_cpu_skip():
    assert check_visible_devices(facts(gpu_uuids=GPUS[:2]))[0].status is Status.OK
    assert check_visible_devices(facts())[0].status is Status.SKIP


def test_threads_times_local_ranks_over_cores_warns_with_the_number_to_use():
    env = launch_env(local_world=4, OMP_NUM_THREADS="4")
    [res] = check_threads(facts(env=env, cpus=8))
    assert res.status is Status.WARN and "16 threads on 8 cores" in res.summary
    assert "OMP_NUM_THREADS to 2" in res.fix


def test_threads_unset_means_every_core_per_rank():
    env = {k: v for k, v in launch_env().items() if k != "OMP_NUM_THREADS"}
    [res] = check_threads(facts(env=env, cpus=8))
    assert res.status is Status.WARN and "16 threads on 8 cores" in res.summary
    assert check_threads(facts(cpus=8))[0].status is Status.OK


@pytest.mark.parametrize("size,status", [(None, Status.FAIL), (64 << 20, Status.FAIL),
                                         (512 << 20, Status.WARN), (16 << 30, Status.OK)])
def test_shm_size(size, status):
    [res] = check_shm(facts(shm_bytes=size))
    assert res.status is status
    if status is not Status.OK:
        assert "--shm-size" in res.fix


def test_nofile_limit():
    low = facts(limits=Limits(1024, 4096, -1, -1))
    [res] = check_nofile(low)
    assert res.status is Status.WARN and "ulimit -n is 1024 (hard 4096)" in res.summary
    assert check_nofile(facts())[0].status is Status.OK


def test_infiniband_present_but_disabled_warns():
    f = facts(env=launch_env(NCCL_IB_DISABLE="1"), ib_devices=("mlx5_0",), dev_infiniband=True,
              libibverbs_error=None)
    [res] = check_infiniband(f)
    assert res.status is Status.WARN and res.culprit.env_var == "NCCL_IB_DISABLE"


def test_infiniband_without_dev_or_libibverbs_fails():
    no_dev = facts(ib_devices=("mlx5_0",), dev_infiniband=False, libibverbs_error=None)
    no_lib = facts(ib_devices=("mlx5_0",), dev_infiniband=True,
                   libibverbs_error="libibverbs.so.1: cannot open shared object file")
    assert "/dev/infiniband is missing" in check_infiniband(no_dev)[0].summary
    assert "libibverbs does not load" in check_infiniband(no_lib)[0].summary
    assert check_libibverbs(no_lib) == []  # reported once, by check_infiniband


def test_ib_settings_without_devices_warn_about_socket_fallback():
    """The container case: NCCL_IB_* set but no devices mapped in."""
    f = facts(env=launch_env(NCCL_IB_HCA="mlx5_0"))
    [res] = check_infiniband(f)
    assert res.status is Status.WARN and "NET/IB : No device found" in res.summary


def test_infiniband_usable_and_memlock():
    good = facts(ib_devices=("mlx5_0",), dev_infiniband=True, libibverbs_error=None)
    assert check_infiniband(good)[0].status is Status.OK
    assert check_memlock(good)[0].status is Status.OK
    locked = facts(ib_devices=("mlx5_0",), dev_infiniband=True, libibverbs_error=None,
                   limits=Limits(65536, 65536, 64 << 10, 64 << 10))
    [res] = check_memlock(locked)
    assert res.status is Status.FAIL and "ulimit -l is 64 KiB" in res.summary
    assert check_memlock(facts())[0].status is Status.SKIP
