"""The variable catalog and its checks: invalid values, deprecated names, typos."""

from __future__ import annotations

import pytest

from diag.checkenv.catalog import CATALOG, Scope, in_family
from diag.checkenv.checks_vars import (
    check_deprecated, check_typos, check_values, check_variables, edit_distance, typo_of,
)
from diag.verdict import Status
from tests.checkenv.factories import facts, launch_env


def with_env(**extra: str):
    return facts(env=launch_env(**extra))


def test_healthy_launch_env_is_one_ok_row():
    [res] = check_variables(facts())
    assert res.status is Status.OK and "all valid" in res.summary


@pytest.mark.parametrize("name,value", [
    ("NCCL_IB_DISABLE", "yes"), ("MASTER_PORT", "70000"),
    ("MASTER_PORT", "abc"), ("TORCH_DISTRIBUTED_DEBUG", "VERBOSE"), ("WORLD_SIZE", "0"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "4"), ("NCCL_PROTO", "LL,Fast"),
    ("NCCL_ALGO", "Ring,Star"), ("CUDA_VISIBLE_DEVICES", "0,gpu1"), ("OMP_NUM_THREADS", "0"),
    ("NCCL_SOCKET_FAMILY", "AF_UNIX"), ("NCCL_P2P_LEVEL", "FAR"),
])
def test_invalid_values_fail_naming_variable_value_and_valid_values(name, value):
    [res] = check_values(with_env(**{name: value}))
    assert res.status is Status.FAIL and res.culprit.env_var == name
    assert f"{name}={value!r}" in res.summary and "expected" in res.summary
    assert CATALOG[name].values.text in res.fix


@pytest.mark.parametrize("name,value", [
    ("NCCL_IB_DISABLE", "1"), ("NCCL_DEBUG", "info"), ("NCCL_PROTO", "^LL128"),
    ("NCCL_ALGO", "allreduce:tree,ring;broadcast:ring"), ("NCCL_ALGO", "Ring,Tree"),
    ("CUDA_VISIBLE_DEVICES", "0,1,GPU-8a5f0b2c-1d2e-3f4a-5b6c-7d8e9f0a1b2c"),
    ("CUDA_VISIBLE_DEVICES", ""), ("NCCL_P2P_LEVEL", "NVL"), ("NCCL_NET_GDR_LEVEL", "2"),
    ("TORCH_DISTRIBUTED_DEBUG", "detail"), ("NCCL_SOCKET_IFNAME", "^docker,lo"),
])
def test_valid_values_pass(name, value):
    assert check_values(with_env(**{name: value})) == []


@pytest.mark.parametrize("old,new", [
    ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
    ("NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"),
    ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"),
    ("NCCL_IB_CUDA_SUPPORT", "NCCL_NET_GDR_LEVEL"),
])
def test_deprecated_names_warn_with_replacement(old, new):
    [res] = check_deprecated(with_env(**{old: "1"}))
    assert res.status is Status.WARN and res.culprit.env_var == old and new in res.fix


def test_deprecated_name_says_when_the_new_one_is_also_set_and_wins():
    [res] = check_deprecated(with_env(NCCL_ASYNC_ERROR_HANDLING="1",
                                      TORCH_NCCL_ASYNC_ERROR_HANDLING="3"))
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=3 is set too and wins" in res.summary


@pytest.mark.parametrize("typo,known", [
    ("NCCL_SOCKET_IFNAM", "NCCL_SOCKET_IFNAME"), ("NCLL_DEBUG", "NCCL_DEBUG"),
    ("MASTER_ADRR", "MASTER_ADDR"), ("GLOO_SOCKET_IFNAMES", "GLOO_SOCKET_IFNAME"),
    ("TORCH_NCCL_BLOCKING_WAITS", "TORCH_NCCL_BLOCKING_WAIT"), ("WORLDSIZE", "WORLD_SIZE"),
    ("CUDA_VISIBLE_DEVICE", "CUDA_VISIBLE_DEVICES"), ("nccl_ib_disable", "NCCL_IB_DISABLE"),
])
def test_typos_name_the_variable_meant(typo, known):
    assert typo_of(typo) == known
    [res] = check_typos(facts(env_names=(typo, "PATH")))
    assert res.status is Status.WARN and res.culprit.env_var == typo and known in res.summary


@pytest.mark.parametrize("name", [
    "NCCL_IB_TC", "NCCL_IB_SL", "PATH", "HOME", "CUDA_HOME", "NCCL_VERSION", "CUDA_VERSION",
    "SLURM_NTASKS", "MKL_NUM_THREADS", "LANG", "TORCH_HOME", "PYTHONPATH", "HOSTNAME",
])
def test_real_names_are_not_typos(name):
    assert typo_of(name) is None


def test_edit_distance_stops_at_its_limit():
    assert edit_distance("NCCL_DEBUG", "NCCL_DEBUG", 2) == 0
    assert edit_distance("NCLL_DEBUG", "NCCL_DEBUG", 2) == 1
    assert edit_distance("NLCC_DEBUG", "NCCL_DEBUG", 2) == 2
    assert edit_distance("A" * 20, "B" * 20, 2) == 3


def test_unknown_family_variable_is_noted_not_failed():
    # NCCL_*/TORCH_NCCL_*/GLOO_* names no supported version reads warn: test_unread_variables.py
    [res] = check_variables(with_env(TORCHELASTIC_SOMETHING_NEW="1"))
    assert res.status is Status.OK and "TORCHELASTIC_SOMETHING_NEW" in res.summary


def test_catalog_scopes_and_families():
    assert CATALOG["RANK"].scope is Scope.RANK and CATALOG["NCCL_DEBUG"].scope is Scope.FREE
    assert CATALOG["GLOO_SOCKET_IFNAME"].scope is Scope.NODE
    assert CATALOG["NCCL_ALGO"].scope is Scope.JOB
    assert in_family("NCCL_ALGO") and in_family("RANK") and not in_family("PATH")
    assert all(v.meaning and v.values.text for v in CATALOG.values())
    assert all(v.replaced_by in CATALOG or v.replaced_by is None for v in CATALOG.values())
