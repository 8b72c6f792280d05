"""The emitter templates (catalog/emitted.py): every entry's example matches in every form a
line reaches a user in, each has a near-miss that must not match, the data is whole (every
knowledge row is an inventory template, every failure template and every warning or error
in a function the catalog cites is covered or waived), and a matched template becomes the
finding its knowledge row says."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from diag.analyze import analyze, paste
from diag.analyze.catalog import BY_ID, emitted, fmt
from diag.analyze.inputs import TextLog
from diag.analyze.textlog import extract
from diag.verdict import Category

TEMPLATES = emitted.templates()
ENTRIES = emitted.entries()
CONTEXT = [  # ordinary lines of a job's log around the message
    "[2026-12-04 10:00:00,001] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS "
    "environment variable for each process to be 1 in default, to avoid your system being "
    "overloaded",
    "Epoch 3 | step 1200 | loss 2.3124 | lr 3.0e-04 | 412.5 samples/s | grad_norm 0.87",
]


def bare(entry) -> str:
    """The message alone: what the entry's regex finds in its example."""
    m = entry.regex.search(entry.examples[0].line)
    assert m, f"{entry.id}: its own example does not match"
    return m.group(0)


def wrapped(lines: list[str], width: int) -> list[str]:
    """The lines as a terminal of ``width`` columns shows them, copied out."""
    return [line[i:i + width] for line in lines for i in range(0, max(len(line), 1), width)]


def carriers(entry) -> dict[str, list[str]]:
    """The forms the example reaches a user in, as the lines of a pasted log."""
    line, msg = entry.examples[0].line, bare(entry)
    forms = {
        "as printed": [line],
        "[rankN]:": [f"[rank3]:{line}"],
        "[default3]:": [f"[default3]:{line}"],
        "srun -l": [f"3: {line}"],
        "timestamp": [f"[2026-12-04 10:00:00] {line}"],
        "wrapped at 80": wrapped([*CONTEXT, line], 80),
        "wrapped at 120": wrapped([*CONTEXT, line], 120),
    }
    unprefixed = re.sub(r"^[\w.-]+:\d+:\d+ \[\d+\] ", "", line)
    if entry.id.startswith("nccl:") and unprefixed != line and " WARN " in unprefixed:
        forms["NCCL prefix dropped"] = [unprefixed]  # a paste of the message from its file:line
    if entry.id.startswith("nccl:"):  # torch quotes NCCL's last error after its own
        forms["Last error:"] = [
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for "
            "details), NCCL version 2.21.5",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
            "or device error. ", "Last error:", msg]
        forms["Last error: (joined)"] = [f"ncclSystemError: call failed. Last error: {msg}"]
        forms["[rankN]: Last error:"] = ["[rank3]: Last error:", f"[rank3]: {msg}"]
    elif entry.scope in ("any", "error"):
        forms["inside an exception"] = [f"torch.distributed.DistBackendError: [3] failed: {msg}"]
    return forms


def matched(lines: list[str]) -> set[str]:
    log = TextLog("job.log", paste.unwrap(paste.clean("\n".join(lines)).splitlines()))
    return {s.fields["template"] for s in extract(log) if s.kind == "emitted"}


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.id) for e in ENTRIES])
def test_every_example_matches_in_every_carrier_form(entry) -> None:
    missed = [form for form, lines in carriers(entry).items() if entry.id not in matched(lines)]
    assert not missed, f"{entry.id} ({entry.examples[0].line[:100]!r}) missed as: {missed}"


def near_miss(entry) -> str:
    """The example with one letter of its rarest literal word changed."""
    line, needle = entry.examples[0].line, entry.prefilter[0]
    i = len(needle) // 2
    swap = "Q" if needle[i] != "Q" else "Z"
    return line.replace(needle, needle[:i] + swap + needle[i + 1:])


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.id) for e in ENTRIES])
def test_every_entry_has_a_near_miss_that_does_not_match(entry) -> None:
    assert entry.id not in matched([near_miss(entry)])


def test_the_generic_rule_turns_a_match_into_its_finding(tmp_path) -> None:
    entry = next(e for e in ENTRIES if e.implies is not None and e.scope == "any")
    template = emitted.by_id()[entry.id]
    log = tmp_path / "job.log"
    log.write_text(entry.examples[0].line + "\n")
    top = analyze(log).findings[0]
    assert (top.category, top.detector, top.details["template"]) == (
        template.category, "emitted", entry.id)
    assert "{" not in top.fix or "{" in template.fix.replace("{", "", 0)
    assert top.fix.split("{")[0] == template.fix.split("{")[0]


def test_a_message_printed_at_two_lines_is_one_entry_and_one_finding(tmp_path) -> None:
    # releases print the same text at other lines: the inventory lists both, the engine one
    keys = [(emitted.by_id()[e.id].emitter, emitted.by_id()[e.id].format) for e in ENTRIES]
    assert len(keys) == len(set(keys))
    log = tmp_path / "job.log"
    log.write_text("gpu-7:4411:4602 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect "
                   "to 10.0.0.2<38473> failed : Software caused connection abort\n")
    found = [f for f in analyze(log).findings if f.detector == "emitted"]
    assert len(found) == 1 and "{" not in found[0].fix and "10.0.0.2" in found[0].title


# ---------------------------------------------------------------------------------------
# The data is whole

INVENTORY = emitted.inventory()
KNOWLEDGE = emitted.knowledge()
LEVELS_TO_COVER = ("WARN", "ERROR", "EXCEPTION", "ENFORCE", "ERROR_STRING", "MSG")


def test_every_knowledge_row_is_a_template_of_the_inventory() -> None:
    keys = {(r["emitter"], r["file"], r["template"]) for r in INVENTORY}
    orphans = [k for k in KNOWLEDGE if k not in keys]
    assert not orphans, f"{len(orphans)} knowledge rows name no inventory template: {orphans[:5]}"


def test_every_failure_template_is_covered_or_waived() -> None:
    joined = {(t.emitter, t.file, t.format) for t in TEMPLATES}
    left = [r for r in INVENTORY if r["failure"] == "1" and not r.get("variant_of")
            and (r["emitter"], r["file"], r["template"]) not in joined]
    assert not left, f"{len(left)} failure templates without knowledge: " + "; ".join(
        f"{r['file']}:{r['line']} {r['template'][:60]}" for r in left[:8])


def test_every_warning_in_a_cited_function_is_covered_or_waived() -> None:
    """Function completeness: where the catalog cites a function, it knows all of that
    function's warnings and errors (a new one there is a message we have not read)."""
    cited = {(t.emitter, t.file, t.function) for t in TEMPLATES if t.function and not t.waiver}
    joined = {(t.emitter, t.file, t.format) for t in TEMPLATES}
    left = [r for r in INVENTORY if (r["emitter"], r["file"], r.get("function")) in cited
            and r["level"] in LEVELS_TO_COVER and not r.get("variant_of")
            and (r["emitter"], r["file"], r["template"]) not in joined]
    assert not left, f"{len(left)} uncovered in cited functions: " + "; ".join(
        f"{r['file']}:{r['line']} {r.get('function')}: {r['template'][:60]}" for r in left[:8])


def test_knowledge_rows_are_well_formed() -> None:
    bad = []
    for t in TEMPLATES:
        if len(t.names) != len(fmt.placeholders(t.format)):
            bad.append(f"{t.id}: {len(t.names)} field names for "
                       f"{len(fmt.placeholders(t.format))} placeholders")
        if t.waiver:
            continue
        if t.role not in emitted.ROLES or t.category is None or not t.title or not t.fix:
            bad.append(f"{t.id}: role, category, title and fix are required")
        for ref in re.findall(r"\{(\w+)\}", t.title):
            if ref not in t.names:
                bad.append(f"{t.id}: title field {ref!r} is not a field")
        kind, _, ref = t.culprit.partition(":")
        if t.culprit and t.culprit != "line" and (ref or kind) not in t.names and not (
                kind == "var" and ref in t.format):
            bad.append(f"{t.id}: culprit {t.culprit!r} is neither a field nor in the template")
    assert not bad, "\n".join(bad[:20])


def test_titles_say_what_happened_not_the_fallback() -> None:
    generic = [t.id for t in TEMPLATES if not t.waiver and any(
        g in t.title for g in ("unexplained", " on a rank", "with no detail in the log"))]
    assert not generic


def test_entry_ids_are_unique_and_in_the_catalog() -> None:
    ids = Counter(e.id for e in ENTRIES)
    assert not [i for i, n in ids.items() if n > 1]
    assert all(BY_ID[e.id] is e for e in ENTRIES)


def test_waivers_are_few() -> None:
    failure = [t for t in TEMPLATES if t.level in LEVELS_TO_COVER]
    waived = [t for t in failure if t.waiver]
    assert len(waived) <= 0.1 * len(failure), f"{len(waived)} of {len(failure)} waived"


def test_categories_come_from_the_shared_vocabulary() -> None:
    assert {t.category for t in TEMPLATES if t.category} <= set(Category)


# ---------------------------------------------------------------------------------------
# Hostile lines: what a crafted line can cost


def test_no_compiled_template_has_an_unbounded_value_but_the_last() -> None:
    # lazy groups that backtrack into each other cost polynomial time on a crafted 8 KB line;
    # every value but a message's last is bounded (fmt.VALUE_MAX, TOKEN_MAX, GLUED_MAX)
    for entry in ENTRIES:
        pattern = entry.pattern
        assert ".*?" not in pattern and "\\S*" not in pattern, entry.id
        assert pattern.count(".*") <= 1, entry.id
        if ".*" in pattern:
            assert re.search(r"\(\?P<f\d+>\.\*\)(?:\\s\*)?(?:\(\?!\\w\))?$", pattern), entry.id


def test_a_text_log_past_its_time_budget_is_cut_and_named(tmp_path) -> None:
    from diag.analyze.inputs import Limits

    log = tmp_path / "job.log"
    log.write_text("Epoch 1 | step 7 | loss 2.31 | lr 3e-4 | 412.5 samples/s\n" * 40_000)
    result = analyze(log, Limits(text_seconds=0.01))
    cut = [p for p in result.problems if "parsing stopped at line" in p.message]
    assert len(cut) == 1 and cut[0].line and cut[0].line < 40_000, result.problems


def test_the_template_with_the_most_literal_text_is_the_message(tmp_path) -> None:
    # "Failed to open libibverbs.so[.1]" is NCCL's no-IB INFO, not GDRCopy's "Failed to open %s"
    from diag.analyze import analyze

    log = tmp_path / "log.txt"
    log.write_text("gpu1:15833:15833 [0] NCCL INFO Failed to open libibverbs.so[.1]\n")
    assert not [f for f in analyze(log).findings if "GDRCopy" in f.title]


def test_nccl_tests_device_table_says_one_node_or_several(tmp_path) -> None:
    from diag.analyze import analyze
    from diag.verdict import Category

    table = "".join(f"#   Rank {r:2d} Pid  15833 on {{host{r}}} device {r:2d} [0x0{r}] GeForce\n"
                    for r in range(4))
    no_ib = ("{host0}:15833:15833 [0] NCCL INFO NET/IB : No device found.\n"
             "{host0}:15833:15833 [0] NCCL INFO NET/Socket : Using [0]eth0:10.2.3.32<0>\n")
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text((table + no_ib).format(**{f"host{r}": "gpu-a" for r in range(4)}))
    two.write_text((table + no_ib).format(**{f"host{r}": f"gpu-{'ab'[r // 2]}" for r in range(4)}))
    assert not [f for f in analyze(one).findings if f.category is Category.SLOW_LINK]
    assert [f for f in analyze(two).findings if f.category is Category.SLOW_LINK]
