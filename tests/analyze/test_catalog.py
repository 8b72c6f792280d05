"""The signature catalog (diag/analyze/catalog): every entry's examples match with the
fields they state, its near-misses do not match, it names the code that prints it, and
the table in docs/analyze.md is the generated one. Each entry is run alone through the
real engine and line parser, one line at a time; no files, no processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diag.analyze.catalog import BY_ID, CATALOG, HAND, Example, Signature, Source, implied
from diag.analyze.catalog import engine
from diag.analyze.catalog.spec import SCOPES
from diag.analyze.catalog.table import markdown, section_of
from diag.analyze.textlog import Extractor, parse_line
from diag.verdict import CONFIDENCE

DOC = Path(__file__).resolve().parents[2] / "docs" / "analyze.md"
# "owner/name", a path with a file name, a function (or macro) name
_REPO = re.compile(r"^[\w.-]+/[\w.-]+$")
_PATH = re.compile(r"^[\w./+-]+\.\w+$|^[\w.-]+$")
_FUNCTION = re.compile(r"^[A-Za-z_~][\w:.~]*$")


def run_alone(entry: Signature, text: str) -> list:
    """The signals ``entry`` emits for a one-line log holding ``text``."""
    ex = Extractor("example.log", [text])
    engine.scan(ex, parse_line(1, text), (entry,))
    return [s for s in ex.signals if s.kind == entry.signal]


def source_problems(source: object) -> list[str]:
    if not isinstance(source, Source):
        return [f"source is {source!r}, not a Source"]
    return [f"{what} {value!r} is not a {what}" for what, value, form in (
        ("repo", source.repo, _REPO), ("path", source.path, _PATH),
        ("function", source.function, _FUNCTION)) if not form.match(value or "")]


def _examples() -> list:
    return [pytest.param(e, x, id=f"{e.id}:{i}") for e in HAND
            for i, x in enumerate(e.examples)]


def _near_misses() -> list:
    return [pytest.param(e, text, id=f"{e.id}:{i}") for e in HAND
            for i, text in enumerate(e.near_misses)]


@pytest.mark.parametrize(("entry", "example"), _examples())
def test_example_matches_with_its_fields(entry: Signature, example: Example) -> None:
    signals = run_alone(entry, example.line)
    assert len(signals) == 1, f"{entry.id} must match: {example.line!r}"
    got = {**signals[0].fields, "rank": signals[0].rank}
    wrong = {k: (got.get(k, "<absent>"), v) for k, v in example.fields.items() if got.get(k) != v}
    assert not wrong, f"{entry.id}: (got, expected) {wrong}"


@pytest.mark.parametrize(("entry", "text"), _near_misses())
def test_near_miss_does_not_match(entry: Signature, text: str) -> None:
    assert run_alone(entry, text) == [], f"{entry.id} must not match: {text!r}"


# The hand-written entries; the emitter templates have their own tests (test_emitted.py)
@pytest.mark.parametrize("entry", [pytest.param(e, id=e.id) for e in HAND])
def test_entry_is_complete(entry: Signature) -> None:
    assert not source_problems(entry.source), (entry.id, source_problems(entry.source))
    assert all(not source_problems(s) for s in entry.also), entry.id
    assert entry.examples and entry.near_misses, f"{entry.id}: needs examples and near-misses"
    assert entry.scope in SCOPES
    assert re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", entry.id), entry.id
    named = set(entry.regex.groupindex)
    plain = {k for k, v in entry.fields.items() if not callable(getattr(v, "read", None))}
    assert plain <= named, f"{entry.id}: fields {plain - named} name no group of the pattern"


def test_an_entry_without_a_source_fails_the_check() -> None:
    # the completeness test above must be able to fail
    assert source_problems(None)
    assert source_problems(Source("nccl", "src/init.cc", "showVersion"))  # no owner
    assert source_problems(Source("NVIDIA/nccl", "", "showVersion"))
    assert source_problems(Source("NVIDIA/nccl", "src/init.cc", ""))
    assert not source_problems(Source("NVIDIA/nccl", "src/init.cc", "showVersion"))


def test_ids_are_unique_and_no_oneof_group_is_alone() -> None:
    # a group of one entry is a misspelt group name
    assert len(BY_ID) == len(CATALOG)
    groups = [e.oneof for e in CATALOG if e.oneof]
    assert not [g for g in set(groups) if groups.count(g) < 2]


def test_a_oneof_group_emits_once_per_line() -> None:
    # "Connect to ... returned" and "connect returned" both hold; only the first entry emits
    text = ("n1:1:1 [0] misc/socket.cc:535 NCCL WARN socketPollConnect: Connect to "
            "10.0.0.4<56849> returned 113(No route to host), connect returned No route to host")
    ex = Extractor("x.log", [text])
    engine.scan(ex, parse_line(1, text), CATALOG)
    assert [s.fields["errno"] for s in ex.signals if s.kind == "nccl_connect_failed"] == [113]


def test_a_prefilter_is_required() -> None:
    with pytest.raises(ValueError, match="prefilter"):
        Signature(id="x.y", signal="s", pattern="a", prefilter=(), examples=(),
                  source=Source("a/b", "c.py", "f"))


def test_nccl_chatter_reaches_only_nccls_entries() -> None:
    line = parse_line(1, "n1:5:5 [0] NCCL INFO Killed")
    assert engine.scopes(line) == {"nccl_any", "nccl"}
    assert "any" in engine.scopes(parse_line(1, "Killed"))


def test_the_docs_table_is_the_generated_one() -> None:
    doc = DOC.read_text()
    assert section_of(doc) == markdown(), (
        "docs/analyze.md's catalog table is stale: run "
        "`python -m diag.analyze.catalog --write docs/analyze.md`")


def _implying() -> list:
    return [pytest.param(e, id=e.id) for e in HAND if e.implies is not None]


@pytest.mark.parametrize("entry", _implying())
def test_what_an_entry_implies_is_what_analyze_finds(entry: Signature, tmp_path: Path) -> None:
    from diag.analyze import analyze

    log = tmp_path / "job.log"
    log.write_text(entry.examples[0].line + "\n")
    found = {(f.category, f.confidence, f.fix) for f in analyze(log).findings}
    imp = entry.implies
    assert (imp.category, CONFIDENCE[imp.basis], imp.fix) in found, found
    assert implied(entry.signal) == imp  # every entry of the signal kind agrees
