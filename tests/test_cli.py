"""The ddiag CLI: JSON on stdout, errors that name the input and the fix."""

from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from diag.format import schema
from diag.cli import main
from diag.runtime.eventlog import encode


def write_rank(run_dir, rank: int, world: int, steps: int, torn: bool = False) -> None:
    path = run_dir / "events" / f"rank{rank:05d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [encode({"kind": "header", **schema.stamp(schema.EVENTS), "rank": rank,
                     "world_size": world, "host": f"node{rank}", "pid": 100 + rank})]
    for s in range(steps):
        lines.append(encode({"kind": "collective", "rank": rank, "step": s, "op": "all_reduce",
                             "group": "0", "seq": s + 1}))
        lines.append(encode({"kind": "step", "rank": rank, "step": s, "dur_s": 0.01 * (s + 1),
                             "loss": 1.0 / (s + 1), "grad_norm": 2.0}))
    path.write_bytes(b"".join(lines) + (b'{"kind": "ste' if torn else b""))


def test_summary_json_reports_ranks_missing_ranks_and_torn_lines(tmp_path):
    write_rank(tmp_path, 0, world=3, steps=4)
    write_rank(tmp_path, 2, world=3, steps=2, torn=True)
    res = CliRunner().invoke(main, ["summary", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == 1 and doc["world_size"] == 3
    assert doc["missing_ranks"] == [1]
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert by_rank[0]["steps"] == 4 and by_rank[0]["last_seq"] == {"0": 4}
    assert by_rank[2]["last_seq"] == {"0": 2} and by_rank[2]["host"] == "node2"
    assert by_rank[0]["step_p50_s"] == 0.025
    (problem,) = doc["problems"]
    assert problem["file"].endswith("rank00002.jsonl") and problem["line"] == 6


def test_summary_of_a_non_run_dir_names_it_and_the_fix(tmp_path):
    res = CliRunner().invoke(main, ["summary", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "nope" in res.stderr and "no events/ folder" in res.stderr


def test_version():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and "ddiag" in res.output


def test_tables_off_a_terminal_are_not_folded_to_80_columns(monkeypatch):
    from diag.report.terminal import stdout_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert stdout_console().width == 120  # pytest captures stdout: not a terminal
    monkeypatch.setenv("COLUMNS", "90")
    assert stdout_console().width == 90  # the user's say wins


def _commands(group, path=()):
    for name, cmd in sorted(group.commands.items()):
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))


def test_every_command_help_shows_an_example():
    runner = CliRunner()
    missing = [" ".join(path) for path, _ in _commands(main)
               if "Examples:" not in runner.invoke(main, [*path, "--help"]).output]
    assert missing == []


@pytest.mark.parametrize("args", [
    ["scale-test", "--stall", "nan"], ["scale-test", "--stage-timeout", "0"],
    ["scale-test", "--steps", "0"], ["scale-test", "--batch", "-1"],
    ["scale-test", "--nproc-per-node", "0"], ["scale-test", "--master-port", "70000"],
])
def test_bad_scale_test_options_are_usage_errors_before_anything_runs(tmp_path, args):
    out = tmp_path / "st"
    res = CliRunner().invoke(main, [*args, "--dry-run", "--out", str(out)])
    assert res.exit_code == 2 and args[1] in res.output, res.output
    assert not out.exists()
