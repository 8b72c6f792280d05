"""Logs as pasted (colour codes, a terminal's wrapping: diag/analyze/paste.py) and the
``unexplained`` finding that replaces "no findings" on a log that shows errors
(diag/analyze/unexplained.py). Every log here is written for the test."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from diag.analyze import Outcome, analyze, paste
from diag.cli import main
from diag.verdict import Category, Severity

WATCHDOG = ("[rank{r}]:[E1203 10:15:0{r}.123456 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=4117, OpType=ALLREDUCE, "
            "NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600021 milliseconds "
            "before timing out.")


def _write(tmp_path: Path, text: str, name: str = "job.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _wrapped(lines: list[str], width: int) -> str:
    # what copying out of a terminal `width` columns wide gives
    out = []
    for line in lines:
        out += [line[i:i + width] for i in range(0, max(len(line), 1), width)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# colour codes


def test_colour_codes_with_and_without_their_escape_byte_are_removed() -> None:
    assert paste.clean("\x1b[1;31mRuntimeError\x1b[0m: boom") == "RuntimeError: boom"
    assert paste.clean("[32m2026-12-03 10:00:01[0m | [1mERROR[0m | boom") == \
        "2026-12-03 10:00:01 | ERROR | boom"
    assert paste.clean("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"


def test_bare_brackets_are_left_alone_in_a_text_without_a_bare_reset() -> None:
    assert paste.clean("waited [5m] for rank 3") == "waited [5m] for rank 3"


def test_a_coloured_watchdog_line_reads_as_the_plain_one(tmp_path: Path) -> None:
    plain = analyze(_write(tmp_path, "\n".join(WATCHDOG.format(r=r) for r in (1, 2, 3)), "a.log"))
    coloured = "\n".join("\x1b[31m" + WATCHDOG.format(r=r) + "\x1b[0m" for r in (1, 2, 3))
    got = analyze(_write(tmp_path, coloured, "b.log"))
    assert plain.findings and got.findings
    assert (got.findings[0].category, got.findings[0].culprit.ranks) == \
        (plain.findings[0].category, plain.findings[0].culprit.ranks)


# ---------------------------------------------------------------------------------------
# terminal wrapping


def test_a_log_copied_from_an_80_column_terminal_is_rejoined(tmp_path: Path) -> None:
    lines = [WATCHDOG.format(r=r) for r in (1, 2, 3)]
    text = _wrapped(lines, 80)
    assert paste.wrap_width(text.splitlines()) == 80
    rejoined = [line for line in paste.unwrap(text.splitlines()) if line]
    assert rejoined == lines
    result = analyze(_write(tmp_path, text))
    plain = analyze(_write(tmp_path, "\n".join(lines), "plain.log"))
    assert [(f.category, f.culprit.ranks) for f in result.findings] == \
        [(f.category, f.culprit.ranks) for f in plain.findings]


def test_rejoined_lines_keep_the_line_numbers_of_the_file() -> None:
    lines = _wrapped([WATCHDOG.format(r=r) for r in (1, 2, 3)], 80).splitlines()
    out = paste.unwrap(lines)
    assert len(out) == len(lines)
    assert out[0].startswith("[rank1]") and out[1] == ""
    second = next(i for i, line in enumerate(lines) if line.startswith("[rank2]"))
    assert out[second].startswith("[rank2]") and out[second].endswith("timing out.")


def test_equal_length_records_of_several_ranks_are_not_a_wrap() -> None:
    # every line the longest and equally long, each a record of its own
    lines = [WATCHDOG.format(r=r) for r in range(1, 8)]
    assert paste.wrap_width(lines) is None
    assert paste.unwrap(lines) is lines


def test_a_traceback_after_a_full_width_line_is_not_glued_to_it() -> None:
    lines = _wrapped([WATCHDOG.format(r=r) for r in (1, 2, 3)], 90).splitlines()
    lines += ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>']
    out = paste.unwrap(lines)
    assert out[-2:] == lines[-2:]


# ---------------------------------------------------------------------------------------
# unexplained: never "no findings" on a log that shows errors


def test_an_error_no_signature_knows_is_reported_unexplained_with_exit_1(tmp_path: Path) -> None:
    log = _write(tmp_path, "\n".join([
        "epoch 3 step 120 loss 2.113",
        "[rank2]: Traceback (most recent call last):",
        '[rank2]:   File "/work/train.py", line 88, in <module>',
        "[rank2]:     frobnicate(batch)",
        "[rank2]: zlib.error: Error -3 while decompressing data: invalid block type",
        "[rank0]: FATAL: shard 17 checksum mismatch, aborting",
    ]))
    result = analyze(log)
    assert result.outcome is Outcome.FINDINGS and result.outcome.exit_code == 1
    top = result.findings[0]
    assert top.detector == "unexplained" and top.category is Category.OTHER
    assert top.severity is Severity.ERROR and top.confidence <= 0.3
    assert top.culprit.ranks == ()  # the first to print is often a victim: no culprit named
    quoted = [e.line for e in top.evidence]
    assert 2 in quoted and 6 in quoted  # each rank's earliest error line


def test_cli_exit_code_and_json_of_an_unexplained_log(tmp_path: Path) -> None:
    log = _write(tmp_path, "something odd happened\nFATAL: the frobnicator failed\n")
    run = CliRunner().invoke(main, ["analyze", str(log), "--json"])
    assert run.exit_code == 1, run.output
    doc = json.loads(run.output)
    assert doc["outcome"] == "findings"
    assert doc["findings"][0]["details"]["unexplained"] is True


def test_warnings_and_clean_summaries_are_not_errors(tmp_path: Path) -> None:
    log = _write(tmp_path, "\n".join([
        "export TORCHELASTIC_ERROR_FILE=/tmp/err.json",
        "[W socket.cpp:663] [c10d] The IPv6 network addresses of (localhost, 29500) cannot be "
        "retrieved (gai error: -2 - Name or service not known).",
        "/usr/lib/python3/site-packages/torch/utils/data.py:12: UserWarning: This DataLoader "
        "will create 8 worker processes, which failed a check",
        "W1203 10:00:00.000 123 torch/distributed/run.py:793] Setting OMP_NUM_THREADS to 1",
        "  error_file: <N/A>",
        "Epoch 1: 100%|##########| 250/250 [00:40<00:00,  6.11it/s, loss=0.121]",
        "0 errors, 0 failed",
    ]))
    result = analyze(log)
    assert result.outcome is Outcome.CLEAN and not result.findings


def test_an_explained_log_gets_no_unexplained_finding(tmp_path: Path) -> None:
    log = _write(tmp_path, "\n".join(WATCHDOG.format(r=r) for r in (1, 2, 3)))
    result = analyze(log)
    assert result.findings
    assert all(f.detector != "unexplained" for f in result.findings)


def test_equal_length_nccl_lines_behind_a_quoters_file_prefix_are_not_a_wrap() -> None:
    # grep over per-rank files prefixes each line with its file name
    lines = [f"LOG.{r}.txt:gpu{r}:{1000 + r}:{1000 + r} [{r}] NCCL INFO AllReduce: opCount 1f "
             f"sendbuff 0x7f{r}0 recvbuff 0x7f{r}0 count 4096 datatype 7 op 0 root 0 comm "
             f"0x55{r}0 [nranks=4] stream 0x56{r}0" for r in range(4)]
    assert paste.unwrap(lines) is lines


def test_equal_width_records_behind_srun_labels_are_not_a_wrap() -> None:
    # Megatron's iteration lines are fixed-width; srun --label puts "7: " before each
    lines = [f"7: [2026-12-03 10:0{i}:00] iteration {100 * i:>8}/  500000 | consumed samples: "
             f"{51200 * i:>12} | elapsed time per iteration (ms): 1234.5 | lm loss: 2.31E+00 |"
             for i in range(1, 7)]
    assert len({len(line) for line in lines}) == 1
    assert paste.unwrap(lines) is lines
