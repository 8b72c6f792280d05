"""The emitters' own templates as catalog entries: one per message that NCCL, PyTorch,
gloo or CUDA prints, keyed by its format string.

Two kinds of data file, under ``templates/``:

- ``inventory.tsv`` (``ddiag.emitter_inventory 1``): every template the sources print, with
  file, line, function, level and the versions whose wording it is; rebuilt from the
  sources by ``python -m diag.analyze.catalog.inventory``.
- ``knowledge/*.tsv`` (``ddiag.template_knowledge 1``): what a template means, read in the
  code around it: its role in an incident, the category, the culprit among its fields, a
  title that says what it says, a fix for that message; or a waiver with its reason.

A knowledge row is joined to the inventory by (emitter, file, format); an older wording
(``variant_of``) takes the knowledge of the wording it became. Each joined template is a
``Signature`` whose regex is compiled from the format string (fmt.py) and whose signal,
``emitted``, carries the template's id and its named fields; ``detectors/emitted.py`` turns
the matches into findings.
"""

from __future__ import annotations

import csv
import functools
import os
import re
from dataclasses import dataclass

from diag.analyze.catalog import fmt
from diag.analyze.catalog.spec import Example, Implies, Signature, Source, const, group
from diag.verdict import Basis, Category

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
INVENTORY_SCHEMA = "# ddiag.emitter_inventory 1"
KNOWLEDGE_SCHEMA = "# ddiag.template_knowledge 1"
ROLES = ("initiating", "cascade", "teardown", "configuration", "progress", "diagnostic")

REPOS = {"nccl": "NVIDIA/nccl", "gloo": "pytorch/gloo", "torch_c10d": "pytorch/pytorch",
         "torch_c10d_py": "pytorch/pytorch", "torch_ddp_py": "pytorch/pytorch",
         "torch_elastic": "pytorch/pytorch", "cuda": "pytorch/pytorch"}
CUDART = "NVIDIA CUDA runtime (libcudart cudaGetErrorString)"

# The basis of a template's own finding, by the message's role: an initiating failure
# says what failed (one line, read alone); a cascade, a setting or a diagnostic only
# points at a cause; teardown and progress are what follows one. No template sets its
# own number: rules that read the lines around a message know more than it does.
BASIS = {"initiating": Basis.LINE, "cascade": Basis.HEURISTIC,
         "configuration": Basis.HEURISTIC, "diagnostic": Basis.HEURISTIC,
         "teardown": Basis.FALLBACK, "progress": Basis.FALLBACK}


# The subsystem of a template, by the first prefix of its file that matches: what a
# setting governs (detectors/settings.py) and how coverage is broken down.
SUBSYSTEMS = (
    ("src/bootstrap", "bootstrap"), ("src/misc/socket", "socket"), ("src/os/", "socket"),
    ("src/transport/net", "IB/net"), ("src/misc/ibv", "IB/net"), ("src/plugin/net", "IB/net"),
    ("src/transport/coll_net", "IB/net"), ("src/transport/shm", "shm"),
    ("src/misc/shm", "shm"), ("src/transport/p2p", "p2p/NVLink"), ("src/transport/nvls", "p2p/NVLink"),
    ("src/init", "init"), ("src/graph", "topology"), ("src/proxy", "proxy"),
    ("src/enqueue", "enqueue"), ("src/", "NCCL other"),
    ("torch/csrc/distributed/c10d/ProcessGroupNCCL", "ProcessGroupNCCL"),
    ("torch/csrc/distributed/c10d/NCCLUtils", "ProcessGroupNCCL"),
    ("torch/csrc/distributed/c10d/TCPStore", "TCPStore"),
    ("torch/csrc/distributed/c10d/socket", "TCPStore"),
    ("torch/csrc/distributed/c10d/reducer", "reducer"),
    ("torch/nn/parallel", "reducer"),
    ("torch/csrc/distributed/c10d/ProcessGroupGloo", "ProcessGroupGloo"),
    ("torch/csrc/distributed/c10d/", "c10d other"), ("torch/distributed/elastic", "elastic"),
    ("torch/distributed/run", "elastic"), ("torch/distributed/", "torch.distributed"),
    ("gloo/", "gloo"), ("c10/cuda", "CUDA"), ("nvidia-cuda", "CUDA"))


def subsystem(file: str, emitter: str) -> str:
    return next((name for prefix, name in SUBSYSTEMS if file.startswith(prefix)), emitter)


@dataclass(frozen=True)
class Template:
    """One message template and what it means (a knowledge row joined to the inventory)."""

    id: str  # "nccl:src/misc/socket.cc:123"
    emitter: str
    file: str
    line: int
    function: str
    versions: str
    level: str
    format: str
    names: tuple[str, ...]  # one per placeholder ("_": not read)
    role: str
    category: Category | None
    culprit: str  # "", "line", a field name, "host:FIELD", "var:NAME"
    title: str
    fix: str
    waiver: str
    example: str  # the rendered line: a log line as the emitter prints it
    failure: bool = True  # the inventory's word: does the message report a failure?

    @property
    def implies(self) -> Implies | None:
        """The finding the message makes on its own; none for one that reports no failure
        (NCCL's INFO about a plugin it did not find is in every healthy log)."""
        if not self.failure or self.waiver or self.role not in BASIS \
                or self.category is None:
            return None
        return Implies(self.category, BASIS[self.role], self.fix)


def _rows(path: str, schema: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        head = f.readline().rstrip("\n")
        if not head.startswith(schema):
            raise ValueError(f"{path}: first line must be {schema!r}, got {head[:80]!r}")
        lines = [line for line in f if line.strip() and not line.startswith("#")]
    csv.field_size_limit(1 << 24)
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def inventory(path: str | None = None) -> list[dict]:
    return _rows(path or os.path.join(HERE, "inventory.tsv"), INVENTORY_SCHEMA)


def knowledge(folder: str | None = None) -> dict[tuple, dict]:
    """Knowledge rows by (emitter, file, format), from every file of the folder."""
    folder = folder or os.path.join(HERE, "knowledge")
    out: dict[tuple, dict] = {}
    where: dict[tuple, str] = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.endswith(".tsv"):
            for row in _rows(os.path.join(folder, name), KNOWLEDGE_SCHEMA):
                key = (row["emitter"], row["file"], row["format"])
                if key in out:  # two meanings for one message: which one holds is luck
                    raise ValueError(f"{name}: {key[1]} {key[2][:60]!r} already has a row in "
                                     f"{where[key]}; keep one")
                out[key], where[key] = row, name
    return out


def _template(tid: str, inv: dict, row: dict) -> Template:
    names = tuple(n.strip() for n in row["fields"].split(",")) if row["fields"] else ()
    title, culprit = row.get("title") or "", row.get("culprit") or ""
    if row["format"] != inv["template"]:  # an older wording with its successor's knowledge
        names, title, culprit = _reworded(inv["template"], row["format"], names, title,
                                          culprit)
    category = Category(row["category"]) if row.get("category") else None
    return Template(tid, inv["emitter"], inv["file"], int(inv["line"] or 0),
                    inv.get("function") or "", inv.get("versions") or "", inv["level"],
                    inv["template"], names, row.get("role") or "", category, culprit, title,
                    row.get("fix") or "", row.get("waiver") or "", inv.get("rendered") or "",
                    inv.get("failure") == "1")


def _reworded(old: str, successor: str, names: tuple, title: str, culprit: str) -> tuple:
    """An older wording takes its successor's field names where it prints the same value:
    as many placeholders, or a placeholder after the same word ("Connect to %s failed : %s"
    and "%s: connect to %s failed : %s" both print the address after "to"). The title and
    culprit keep what they can name; an unnamed value reads as an ellipsis."""
    count = len(fmt.placeholders(old))
    if count == len(names):
        return names, title, culprit
    before = dict(zip(_words_before(successor), names))
    mapped = tuple(before.get(word, "_") for word in _words_before(old))
    mapped = tuple(n if mapped.count(n) == 1 else "_" for n in mapped)  # unique names only
    title = re.sub(r"\{(\w+)\}", lambda m: m.group(0) if m.group(1) in mapped else "…", title)
    kind, _, ref = culprit.partition(":")
    keep = culprit == "line" or (ref or kind) in mapped or (kind == "var" and ref in old)
    return mapped, title, culprit if keep else ""


def _words_before(text: str) -> list[str]:
    """The literal word before each placeholder (lowercased; "" when none)."""
    parts = fmt.PLACEHOLDER.split(text)
    return [(parts[i].split() or [""])[-1].lower().strip(":") for i, conv in
            enumerate(fmt.PLACEHOLDER.findall(text)) if conv != "%%"]


def join(inv: list[dict], know: dict[tuple, dict]) -> list[Template]:
    """Inventory rows with knowledge, older wordings through ``variant_of``."""
    current = {(e, f): k for (e, _, f), k in know.items()}  # a successor, wherever it lives
    out, ids = [], set()
    for row in inv:
        found = know.get((row["emitter"], row["file"], row["template"]))
        if found is None and row.get("variant_of"):
            found = current.get((row["emitter"], row["variant_of"]))
        if found is not None:
            out.append(_template(_unique_id(row, ids), row, found))
    return out


def _unique_id(row: dict, taken: set) -> str:
    # file and line name a template, except where two releases print different text there
    tid = f"{row['emitter']}:{row['file']}:{row['line']}"
    if tid in taken:
        tid = f"{tid}@{row.get('versions') or row.get('id')}"
    taken.add(tid)
    return tid


@functools.lru_cache(maxsize=1)
def templates() -> tuple[Template, ...]:
    path = os.path.join(HERE, "inventory.tsv")
    if not os.path.exists(path):
        return ()
    return tuple(join(inventory(path), knowledge()))


# ---------------------------------------------------------------------------------------
# Templates into signatures


def scope_of(t: Template, compiled: fmt.Compiled) -> str:
    """Where a template is tried: a long message anywhere; a short one only in its
    emitter's context (an NCCL line, a gloo line, a CUDA error, an error line), since its
    few words occur in other programs' lines too."""
    if t.level == "ERROR_STRING":
        return "nccl" if t.emitter == "nccl" else "cuda"
    if t.emitter == "nccl" and t.level == "INFO":  # NCCL's INFO chatter reaches only these
        return "nccl"
    if compiled.literal >= DISTINCT_LITERAL:
        return "any"
    return {"nccl": "nccl", "gloo": "gloo"}.get(t.emitter, "error")


DISTINCT_LITERAL = 30  # literal characters that make a message its own context


def signature(t: Template) -> Signature | None:
    """The engine's entry for a template; None when it is too short to match alone."""
    compiled = fmt.compile_format(t.format)
    if compiled.literal < fmt.MIN_LITERAL or len(compiled.needle) < 3:
        return None
    pattern = compiled.pattern
    if t.level == "ERROR_STRING":  # a whole error string, not words inside another message
        pattern = rf"(?<![\w]){pattern}(?![\w])"
    values = _fields(t, compiled)
    word = fmt.whole_word(fmt.message_of(t.format)[0])
    word = word if word and len(word) >= 4 else None  # shorter words are in every line
    return Signature(
        id=t.id, signal="emitted", pattern=pattern, prefilter=(word or compiled.needle,),
        word=word,
        source=_source(t), examples=(Example(t.example),) if t.example else (),
        fields={"template": const(t.id)}, scope=scope_of(t, compiled),
        parse=functools.partial(_emit, t.id, values), implies=t.implies)


def _emit(tid: str, values: dict, ex, line, m) -> None:
    # the template's fields in a dict of their own: a field may be called "rank" or "line"
    ex.emit("emitted", line, template=tid,
            values={name: conv(m) for name, conv in values.items()})


def _source(t: Template) -> Source:
    repo = CUDART if t.level == "ERROR_STRING" and t.emitter == "cuda" else REPOS[t.emitter]
    note = f"{t.level} at line {t.line}" + (f"; {t.versions}" if t.versions else "")
    return Source(repo, t.file, t.function or "?", note)



def _fields(t: Template, compiled: fmt.Compiled) -> dict:
    """Field name -> reader of its group, for the named placeholders of the matched piece."""
    out: dict = {}
    convs = fmt.placeholders(fmt.message_of(t.format)[0])
    for i, conv in enumerate(convs):
        n = compiled.offset + i
        name = t.names[n] if n < len(t.names) else "_"
        if name == "_" or not name.isidentifier() or name in out:
            continue
        numeric = conv.startswith("%") and conv[-1] in "diu"
        out[name] = group(f"f{n}", _int_or_text if numeric else str)
    return out


def _int_or_text(value: str):
    try:
        return int(value)
    except ValueError:
        return value


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Signature, ...]:
    """Every template that has knowledge and can match alone, as catalog entries; one per
    distinct message (releases print the same text at other lines: one finding, not two)."""
    seen, out = set(), []
    for t in templates():
        sig = signature(t) if (t.emitter, t.format) not in seen else None
        if sig is not None:
            seen.add((t.emitter, t.format))
            out.append(sig)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def by_id() -> dict[str, Template]:
    return {t.id: t for t in templates()}
