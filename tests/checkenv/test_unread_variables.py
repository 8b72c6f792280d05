"""The variable inventory (diag/checkenv/envvars.tsv) and the checks built on it: names no
supported version reads, typos of any name read, and the readers' own value parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.checkenv import envvars
from diag.checkenv.catalog import CATALOG
from diag.checkenv.checks_vars import (
    check_typos, check_unread, check_values, check_variables, in_unread_family, typo_of,
)
from diag.checkenv.facts import Versions
from diag.verdict import Status
from tests.checkenv.factories import facts, launch_env

CENSUS = Path(__file__).resolve().parents[3] / "shared/emitters/envvars.tsv"


def with_env(versions: Versions | None = None, **extra: str):
    over = {"versions": versions} if versions else {}
    return facts(env=launch_env(**extra), **over)


def test_inventory_holds_every_census_variable_with_where_it_is_read():
    if not CENSUS.exists():
        pytest.skip("no ../shared/emitters/envvars.tsv in this checkout")
    rows = [ln.split("\t") for ln in CENSUS.read_text().splitlines()[1:] if ln]
    have = {(r.owner, r.name) for reads in envvars.inventory().values() for r in reads}
    assert {(r[0], r[1]) for r in rows} <= have


def test_flight_recorder_names_by_version():
    # torch 2.8's FlightRecorder.hpp: getCvarInt({"TORCH_FR_BUFFER_SIZE",
    # "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 0): both read, the old one with a deprecation warning.
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        assert envvars.read_at(name, {"torch": (2, 8)}) is True
    assert CATALOG["TORCH_NCCL_TRACE_BUFFER_SIZE"].replaced_by == "TORCH_FR_BUFFER_SIZE"


def test_every_catalog_name_of_the_families_is_read_or_marked_replaced():
    stale = [n for n, v in CATALOG.items() if in_unread_family(n) and not v.replaced_by
             and not envvars.supported(n)]
    assert stale == []


def test_inventory_file_rejects_another_major_version_naming_file_and_fix():
    with pytest.raises(ValueError, match=r"x\.tsv: first line '# ddiag.envvars 2'.*regenerate"):
        envvars.parse("# ddiag.envvars 2\nowner\tname\n", "x.tsv")


def test_inventory_parses_version_spans():
    [read] = envvars.parse("# ddiag.envvars 1\nowner\tname\tread_by\twhere\tversions\n"
                           "nccl\tNCCL_X\tNCCL_PARAM\tsrc/a.cc:1\tnccl 2.20-2.22,2.25\n")["NCCL_X"]
    assert read.spans == (((2, 20), (2, 22)), ((2, 25), (2, 25)))
    assert read.reads_at("nccl", (2, 21)) and not read.reads_at("nccl", (2, 23))
    assert read.versions_text() == "NCCL 2.20-2.22,2.25" and read.supported()


@pytest.mark.parametrize("name", ["NCCL_SOMETHING_NEW", "NCCL_CHECKS_DISABLE",
                                  "TORCH_NCCL_NOT_A_KNOB", "GLOO_NOT_A_KNOB",
                                  "TORCH_DISTRIBUTED_NOT_A_KNOB"])
def test_a_family_name_nothing_reads_warns(name):
    [res] = check_unread(with_env(**{name: "1"}))
    assert res.status is Status.WARN and res.check == "vars.unread"
    assert res.culprit.env_var == name and "not read by NCCL 2.20-2.28 / torch 2.8-2.13" in (
        res.summary)
    [only] = check_variables(with_env(**{name: "1"}))
    assert only.check == "vars.unread"


@pytest.mark.parametrize("name", ["NCCL_HOME", "NCCL_VERSION", "NCCL_ROOT", "TORCH_HOME",
                                  "MASTER_SOMETHING", "NCCL_IB_HCA", "NCCL_CUMEM_ENABLE"])
def test_names_read_or_not_ours_do_not_warn(name):
    assert check_unread(with_env(**{name: "1"})) == []


def test_a_name_only_newer_nccl_reads_warns_unless_this_rank_has_that_nccl():
    name = "NCCL_GIN_EXCLUSIVE_CONTEXTS"  # NCCL 2.29 only
    [res] = check_unread(with_env(Versions("3.11", "2.13.0", "12.8", "2.21.5"), **{name: "1"}))
    assert "this rank's NCCL 2.21.5" in res.summary and "only NCCL 2.29 read it" in res.summary
    assert check_unread(with_env(Versions("3.11", "2.13.0", "12.8", "2.29.7"),
                                 **{name: "1"})) == []


def test_a_name_only_newer_torch_reads_warns_on_an_older_torch():
    name = "TORCH_DISTRIBUTED_USE_TORCHCOMMS"  # torch 2.11+
    [res] = check_unread(with_env(Versions("3.11", "2.8.0", "12.8", "2.27.3"), **{name: "1"}))
    assert "torch 2.8.0" in res.summary and "torch 2.11-2.13" in res.summary
    assert check_unread(with_env(Versions("3.11", "2.13.0", "12.8", "2.27.3"),
                                 **{name: "1"})) == []


@pytest.mark.parametrize("typo,known", [
    ("NCCL_GIN_TYP", "NCCL_GIN_TYPE"), ("NCCL_IB_QPS_PER_CONNECTIONS",
                                         "NCCL_IB_QPS_PER_CONNECTION"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUTS", "TORCH_NCCL_DUMP_ON_TIMEOUT"),
])
def test_typos_of_any_name_a_supported_version_reads(typo, known):
    assert typo_of(typo) == known
    [res] = check_typos(facts(env_names=(typo,)))
    assert known in res.summary
    assert check_unread(with_env(**{typo: "1"})) == []  # the typo row says it better


@pytest.mark.parametrize("name,value,status", [
    ("NCCL_GIN_TYPE", "abc", Status.FAIL),          # strtoll: reads as 0
    ("TORCH_NCCL_BLOCKING_WAIT", "maybe", Status.FAIL),  # getCvarBool raises
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "yes", Status.WARN),  # check_env ignores it
    ("NCCL_DEBUG_SUBSYS", "INIT,FOO", Status.WARN),  # NCCL skips unknown subsystems
    ("NCCL_SOCKET_FAMILY", "af_inet", Status.FAIL),  # strcmp: the case matters
    ("NCCL_PROTO", "allreduce:LL,Fast", Status.FAIL),
])
def test_values_the_reader_does_not_accept(name, value, status):
    [res] = check_values(with_env(**{name: value}))
    assert res.status is status and res.culprit.env_var == name and "expected" in res.summary


@pytest.mark.parametrize("name,value", [
    ("NCCL_GIN_TYPE", "0x2"), ("NCCL_GIN_TYPE", "-1"), ("TORCH_NCCL_BLOCKING_WAIT", "true"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "Y"), ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
    ("NCCL_DEBUG_SUBSYS", "^INIT,NET,ras"), ("NCCL_SOCKET_FAMILY", "AF_INET6"),
    ("NCCL_PROTO", "allreduce:LL128;broadcast:Simple"), ("NCCL_PROTO", "^LL128"),
    ("TORCH_FR_BUFFER_SIZE", "2000"),
])
def test_values_the_reader_accepts(name, value):
    assert check_values(with_env(**{name: value})) == []
