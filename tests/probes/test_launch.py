"""Finding the job we run in, and the torchrun/srun command lines we start."""

from __future__ import annotations

import pytest

from diag.launch import (
    LaunchError, LaunchSpec, expand_nodelist, job_env, local_command, parse_env_on,
    slurm_command,
)

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
SRUN = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_JOB_ID": "1234",
        "SLURM_TASKS_PER_NODE": "2(x4)"}


def test_torchrun_job():
    job = job_env(TORCHRUN)
    assert (job.rank, job.world_size, job.local_rank, job.local_world_size) == (3, 8, 1, 2)
    assert job.launcher == "torchrun" and job.init_method == "tcp://node1:29500"


def test_torchrun_vars_without_master_fail_with_the_fix():
    with pytest.raises(LaunchError, match="MASTER_ADDR/MASTER_PORT are not"):
        job_env({"RANK": "0", "WORLD_SIZE": "2"})


def test_srun_tasks_derive_master_and_port_alike():
    job = job_env(SRUN)
    assert (job.rank, job.world_size, job.local_rank, job.local_world_size) == (5, 8, 1, 2)
    assert job.launcher == "srun" and job.master_addr == "node1"
    assert job.master_port == 20000 + 1234 % 20000
    assert job_env({**SRUN, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}).init_method \
        == "tcp://10.0.0.1:1234"


def test_srun_uneven_tasks_per_node():
    job = job_env({**SRUN, "SLURM_TASKS_PER_NODE": "3,2(x2),1", "SLURM_NODEID": "3"})
    assert job.local_world_size == 1


def test_no_job():
    assert job_env({"PATH": "/bin"}) is None


@pytest.mark.parametrize("nodelist,hosts", [
    ("node[1-4]", ["node1", "node2", "node3", "node4"]),
    ("gpu[01-02,10],login", ["gpu01", "gpu02", "gpu10", "login"]),
    ("a1,b2", ["a1", "b2"]),
])
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("kwargs,message", [
    ({"launcher": "mpirun"}, "--launcher must be one of local, slurm, got: 'mpirun'"),
    ({"launcher": "local", "nodes": 4}, "--nodes must be 1, got: 4"),
    ({"launcher": "slurm", "nproc_per_node": 0}, "must be >= 1"),
])
def test_bad_launch_specs(kwargs, message):
    with pytest.raises(LaunchError, match=message):
        LaunchSpec(**kwargs)


def test_env_on_parsing():
    assert parse_env_on(["node3:GLOO_SOCKET_IFNAME=eth9", "n-1:X="]) == (
        ("node3", "GLOO_SOCKET_IFNAME", "eth9"), ("n-1", "X", ""))
    with pytest.raises(LaunchError, match="NODE:VAR=VALUE"):
        parse_env_on(["GLOO_SOCKET_IFNAME=eth9"])


def test_slurm_command_runs_one_torchrun_per_node_and_sets_env_on_one_node():
    spec = LaunchSpec("slurm", 4, 2, parse_env_on(["node3:GLOO_SOCKET_IFNAME=eth 9"]),
                      master_port=29600)
    argv = slurm_command(spec, "probes.rank", ["links", "--out", "/tmp/a b"])
    assert argv[:6] == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=1", "sh"]
    script = argv[-1]
    assert "torch.distributed.run --nnodes=4 --nproc-per-node=2 --master-port=29600" in script
    assert '--node-rank="$SLURM_NODEID" --master-addr="$MASTER"' in script
    assert """if [ "$SLURMD_NODENAME" = node3 ]; then export GLOO_SOCKET_IFNAME='eth 9'""" \
        in script
    assert script.endswith("-m probes.rank links --out '/tmp/a b'")


def test_local_command_applies_env_on_for_this_host_only(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "here")
    argv, env = local_command(LaunchSpec("local", 1, 2, (("here", "X", "1"),)), "m", ["a"])
    assert env["X"] == "1" and "--nproc-per-node=2" in argv and argv[-3:] == ["-m", "m", "a"]
    with pytest.raises(LaunchError, match="runs on this host only"):
        local_command(LaunchSpec("local", 1, 2, (("elsewhere", "X", "1"),)), "m", [])
