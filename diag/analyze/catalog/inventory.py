"""Rebuild the emitter inventory: one row per message template the stack can print.

Why: the catalog keys its knowledge rows on the exact format string that NCCL, c10d,
torch.distributed, elastic, DDP, gloo and the CUDA runtime print.  Those strings change
between releases (NCCL 2.26 moved the socket code to ``src/os/linux.cc`` and reworded it),
so the list of templates must be rebuilt from the sources, not typed by hand.

How: each emitter has a small extractor that reads a source tree and yields ``Row`` s.

* NCCL (``--nccl``, a git directory): ``WARN(...)``/``INFO(flags, ...)`` format strings and the
  ``ncclGetErrorString`` texts, at ``HEAD`` (current wording) and at each ``--nccl-ref`` tag
  (default: the newest patch of every minor from 2.20 on).  ``versions`` is the compact range
  of minors that print a template; a template that only older releases print gets a
  ``variant_of`` naming the current template of the same function that replaced it.
* c10d C++ and c10/cuda (``--torch``): TORCH_CHECK*, C10_THROW_ERROR, TORCH_INTERNAL_ASSERT,
  ``throw std::...``, LOG(ERROR|WARNING) streams, TORCH_WARN, ``c10::str`` messages; streamed
  values become ``<X>``.  torch Python: ``raise X(...)``, ``logger.error/warning/exception``
  and ``warnings.warn`` with ``<X>`` for f-string, ``%`` and ``{}`` values.
* gloo (``--gloo``, a git directory or tree): GLOO_ENFORCE*, GLOO_ERROR(_MSG), GLOO_INFO,
  GLOO_THROW_*, ``throw std::...`` in ``gloo/transport/tcp``.
* CUDA (``--cudart``): the cudaGetErrorString texts, found as ``strings`` would in libcudart.

With ``--census`` the rows of ``shared/emitters/templates.tsv`` are matched by (emitter, file,
template): their ``failure`` and ``rendered`` are kept, and census rows no source reproduces
are copied as they are.  Nothing here touches the network.

    python -m diag.analyze.catalog.inventory --nccl DIR --gloo DIR --torch DIR \
        --cudart LIB --census templates.tsv --out inventory.tsv
"""
from __future__ import annotations

import argparse
import ast
import csv
import difflib
import io
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

SCHEMA = "# ddiag.emitter_inventory 1"
COLUMNS = ("id", "emitter", "file", "line", "function", "level", "failure", "versions",
           "template", "variant_of", "rendered")
X = "<X>"


@dataclass(frozen=True)
class Row:
    """One message template at one source location."""

    emitter: str
    file: str
    line: int
    function: str
    level: str  # WARN, INFO, ERROR, EXCEPTION, ENFORCE, MSG, WARNING, ASSERT, ERROR_STRING
    template: str
    failure: int = -1  # -1: not decided yet
    versions: str = ""
    variant_of: str = ""
    rendered: str = ""
    id: int = -1


# ---------------------------------------------------------------- C/C++ lexing

_C_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_C_LIT = re.compile(r'(?:u8|L|u|U)?"((?:\\.|[^"\\\n])*)"')
_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "defined", "do",
             "else", "case", "decltype", "static_assert", "alignof", "new", "delete"}


def blank_comments(text: str) -> str:
    """Replace C comments by spaces (keeping newlines) so offsets and lines stay valid."""
    def sub(m: re.Match) -> str:
        s = m.group(0)
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    return _C_TOKEN.sub(sub, text)


def call_args(text: str, open_paren: int) -> tuple[list[str], int] | None:
    """Split the argument list that starts at ``text[open_paren] == '('`` at top-level commas."""
    depth, args, start, i = 0, [], open_paren + 1, open_paren
    while i < len(text):
        c = text[i]
        if c in "\"'":
            m = _C_TOKEN.match(text, i)
            i = m.end() if m else i + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return [a for a in args if a or len(args) > 1], i
        elif c == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return None


def split_top(expr: str, ops: tuple[str, ...]) -> list[str]:
    """Split ``expr`` at top-level binary operators (``+``, ``<<``), outside strings and parens."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'":
            m = _C_TOKEN.match(expr, i)
            i = m.end() if m else i + 1
            continue
        depth += c in "([{<" and not expr.startswith("<<", i) and c != "<"
        depth -= c in ")]}"
        op = next((o for o in ops if depth == 0 and expr.startswith(o, i)), None)
        if op and not (op == "+" and expr[i + 1:i + 2] in "+="):
            parts.append(expr[start:i].strip())
            start = i = i + len(op)
            continue
        i += 1
    parts.append(expr[start:].strip())
    return [p for p in parts if p]


def literal(expr: str) -> str | None:
    """The text of ``expr`` if it is adjacent string literals (maybe wrapped), else None.

    As the census does, a ``PRIu64``-style macro between literals becomes ``%lu`` and any
    other identifier there (a macro parameter) becomes ``%s``."""
    e = re.sub(r"^(?:std::string|c10::str|std::string_view)\s*\((.*)\)$", r"\1", expr.strip(), flags=re.S)
    if not _C_LIT.match(e):
        return None
    out, pos = [], 0
    for m in _C_LIT.finditer(e):
        gap = e[pos:m.start()].strip()
        if gap and not re.fullmatch(r"[A-Za-z_]\w*", gap):
            return None
        if gap:
            pri = re.fullmatch(r"PRI([diuxX])(8|16|32|64|PTR)", gap)
            out.append(("l" if pri.group(2) in ("64", "PTR") else "") + pri.group(1) if pri else "%s")
        out.append(m.group(1))
        pos = m.end()
    if e[pos:].strip():
        return None
    return re.sub(r"\s+", " ", "".join(out).replace('\\"', '"').replace("\\n", " \\n "))


def template_of(args: Iterable[str], ops: tuple[str, ...] = ("+", "<<")) -> str:
    """Join message arguments: literals as they are, any other value as ``<X>``."""
    return re.sub(r"\s+", " ", "".join(pieces(args, ops))).strip()


def pieces(args: Iterable[str], ops: tuple[str, ...]) -> Iterator[str]:
    """Literal text or ``<X>`` for each part of each argument; ``c10::str(...)`` is opened."""
    for arg in args:
        for part in split_top(arg, ops):
            lit, inner = literal(part), re.match(r"(?:c10::str|std::string)\s*\(", part)
            got = call_args(part, inner.end() - 1) if inner and lit is None else None
            if got and got[1] == len(part) - 1:
                yield from pieces(got[0], ops)
            else:
                yield X if lit is None else lit


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


_HEAD_PREFIX = re.compile(r"^[\w\s:<>\*&,~]*$")
_HEAD_NAME = re.compile(r"([A-Za-z_~][\w~]*(?:::[~\w]+)*)\s*$")


def function_heads(lines: list[str]) -> list[tuple[int, int, str]]:
    """``[(index, indent, name)]`` of the lines that open a C/C++ function definition."""
    heads = []
    for i, line in enumerate(lines):
        paren, body = line.find("("), line.lstrip()
        if paren <= 0 or body.startswith(("#", "}", "//", "*")) or not _HEAD_PREFIX.match(line[:paren]):
            continue
        m = _HEAD_NAME.search(line[:paren])
        prefix = line[:m.start()].strip() if m else ""
        if not m or not (prefix or "::" in m.group(1)) or prefix in ("return", "else", "case", "new"):
            continue
        name = m.group(1)
        if name.split("::")[-1] in _KEYWORDS or name.isupper():
            continue
        head = " ".join(lines[i:i + 12])
        brace, semi = head.find("{"), head.find(";")
        if brace >= 0 and (semi < 0 or brace < semi):
            heads.append((i, len(line) - len(body), name))
    return heads


def c_function(heads: list[tuple[int, int, str]], lines: list[str], index: int) -> str:
    """Name of the function enclosing ``lines[index]``: the nearest head above, less indented."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for i, ind, name in reversed(heads):
        if i <= index and ind < indent:
            return name
    return ""


# ---------------------------------------------------------------- NCCL

_NCCL_CALL = re.compile(r"(?<![\w])(WARN|INFO|INFO_LOC)\s*\(")
_NCCL_ERRSTR = re.compile(r'case\s+(nccl\w+)\s*:\s*return\s+"([^"]*)"')
NCCL_INFO_WORDS = re.compile(
    r"fail|error|invalid|unable|cannot|can't|could not|couldn't|not supported|unsupported|ignor|"
    r"mismatch|timeout|timed out|abort|retry|exceed|warning|disabl|fall(ing)? ?back|set by environment|"
    r"set to|NCCL_\w+|using|reset|skip|not found|no .*found|missing|recover|unexpected|too |wrong|discard", re.I)


def calls(raw: str, pattern: re.Pattern) -> Iterator[tuple[re.Match, list[str], int, str]]:
    """(match, arguments, line, enclosing function) of each call of ``pattern`` (which ends
    at the call's open parenthesis) in one C/C++ file, comments blanked; a macro's own
    ``#define`` and a call whose arguments do not parse are left out."""
    text, lines = blank_comments(raw), raw.split("\n")
    heads = function_heads(lines)
    for m in pattern.finditer(text):
        got = call_args(text, m.end() - 1)
        first = text[text.rfind("\n", 0, m.start()) + 1:m.start()].lstrip()
        if got and not first.startswith("#define"):
            n = line_of(text, m.start())
            yield m, got[0], n, c_function(heads, lines, n - 1)


def nccl_templates(src: dict[str, str]) -> Iterator[Row]:
    """WARN/INFO templates and error strings of one NCCL tree (``{path: text}``)."""
    for path, raw in sorted(src.items()):
        for m, args, n, function in calls(raw, _NCCL_CALL):
            skip = 0 if m.group(1) == "WARN" else 1
            fmt = (literal(args[skip]) or "").strip() if len(args) > skip else ""
            if fmt:
                yield Row("nccl", path, n, function, m.group(1)[:4], fmt)
        text = blank_comments(raw)
        for m in _NCCL_ERRSTR.finditer(text):
            if m.group(1) not in ("ncclSuccess",) and "ncclGetErrorString" in raw:
                n = line_of(text, m.start())
                yield Row("nccl", path, n, "ncclGetErrorString", "ERROR_STRING", m.group(2))


def nccl_failure(row: Row) -> int:
    if row.level == "ERROR_STRING":
        return 1
    return int(row.level == "WARN" and "/windows" not in row.file)


def nccl_keep(row: Row) -> bool:
    """INFO lines are kept when they report a setting or a failure (as the census does)."""
    return row.level != "INFO" or bool(NCCL_INFO_WORDS.search(row.template))


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def tree_at(repo: Path, ref: str, under: str, suffixes: tuple[str, ...]) -> dict[str, str]:
    """``{path: text}`` of the files under ``under`` at ``ref`` (``None`` ref: the work tree)."""
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        return {str(p.relative_to(repo)): p.read_text(errors="replace")
                for p in sorted((repo / under).rglob("*")) if p.suffix in suffixes}
    tar = tarfile.open(fileobj=io.BytesIO(git(repo, "archive", ref, under)))
    return {m.name: tar.extractfile(m).read().decode("utf-8", "replace")
            for m in tar.getmembers() if m.isfile() and m.name.endswith(suffixes)}


def nccl_release_tags(repo: Path, first_minor: int = 20) -> list[tuple[str, str]]:
    """``[(minor, tag)]``: the newest ``vMAJOR.MINOR.PATCH-N`` tag of each minor >= first_minor."""
    best: dict[tuple[int, int], tuple[int, str]] = {}
    for tag in git(repo, "tag").decode().split():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-\d+", tag)
        if m and int(m.group(1)) == 2 and int(m.group(2)) >= first_minor:
            key = (int(m.group(1)), int(m.group(2)))
            best[key] = max(best.get(key, (-1, "")), (int(m.group(3)), tag))
    return [(f"{k[0]}.{k[1]}", best[k][1]) for k in sorted(best)]


def compact(minors: list[str], order: list[str]) -> str:
    """``['2.20', '2.21', '2.23']`` over ``order`` -> ``'2.20-2.21,2.23'``."""
    runs: list[list[str]] = []
    for v in order:
        if v in minors:
            if runs and order.index(runs[-1][-1]) == order.index(v) - 1:
                runs[-1].append(v)
            else:
                runs.append([v])
    return ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def nccl_rows(repo: Path, refs: list[tuple[str, str]]) -> list[Row]:
    """Current NCCL rows (HEAD) with versions, plus rows for wordings only older refs print."""
    order, suffixes = [v for v, _ in refs], (".cc", ".h", ".cu", ".cpp")
    current = list(nccl_templates(tree_at(repo, "HEAD", "src", suffixes)))
    now = {r.template for r in current}
    seen: dict[str, list[str]] = {}
    older: dict[tuple[str, str], Row] = {}
    for version, tag in refs:
        for r in nccl_templates(tree_at(repo, tag, "src", suffixes)):
            seen.setdefault(r.template, []).append(version)
            if r.template not in now:
                older[(r.template, r.level)] = r  # refs go oldest first: the newest place wins
    rows = [replace(r, versions=compact(seen.get(r.template, []), order) or "master") for r in current]
    return rows + [replace(r, versions=compact(seen[r.template], order), variant_of=variant_of(r, current))
                   for r in older.values()]


NCCL_VARIANTS = {  # function renamed by the 2.26 move of src/misc/socket.cc to src/os/linux.cc
    "socketProgressOpt": "ncclOsSocketProgressOpt", "socketTryAccept": "ncclOsSocketTryAccept",
    "socketPollConnect": "ncclOsSocketPollConnect",
}
RETRY_EXCEEDED = "%s: connect to %s returned %s, exceeded error retry count after %d attempts"
WRONG_TYPE = ("socketFinalizeAccept from %s: wrong socket type (peer %d != expected %d -- peer connected to wrong "
              "NCCL socket), discarding peer connection")
VARIANT_OVERRIDES = {  # older wording -> its successor where likeness alone picks wrong ("" = none)
    "Call to connect returned %s, retrying":
        "%s: connect to %s returned %s, retrying (%d/%ld) after sleep for %u msec",
    "Failed to open libibverbs.so[.1]": "",
    "GIN-capable device type mismatch.": "",
    "RAS link %d: opening new fallback connection %d with %s": "",
    "RAS link %d: calculated existing fallback connection %d with %s": "",
    "commReclaim: comm %p (rank = %d) destroys proxy resource error %d": "",
    "socketPollConnect poll() failed with error %s": "ncclOsSocketPollConnect to %s failed with error %s",
    "NCCL_COLLNET_ENABLE set by environment to %s.": "NCCL_COLLNET_ENABLE set by environment to %d.",
    "ncclSocketListen: file descriptor is -1": "ncclSocketListen: socket is invalid",
    "ncclSocketConnect: file descriptor is -1": "ncclSocketConnect: socket is invalid",
    "Error: failed to extend %s to %ld bytes": "Error: failed to extend %s to %ld bytes, error: %s (%d)",
    "Could not map %s size %zi, error: %s": "Error: Could not map %s size %zu, error: %s (%d)",
    # src/misc/socket.cc before 2.24/2.27 -> src/misc/socket.cc and src/os/linux.cc of 2.30
    "socketStartConnect: Connect to %s failed : %s": "%s: connect to %s failed : %s",
    "socketPollConnect: Connect to %s returned %d(%s) errno %d(%s)": "%s: connect to %s failed : %s",
    "socketPollConnect poll() returned %d%s": "ncclOsSocketPollConnect to %s failed with error %s",
    "socketStartConnect: exceeded retries (%d)": RETRY_EXCEEDED,
    "socketStartConnect: exceeded timeouts (%d)": RETRY_EXCEEDED,
    "socketPollConnect: exceeded retries (%d)": RETRY_EXCEEDED,
    "socketPollConnect: exceeded timeouts (%d)": RETRY_EXCEEDED,
    "socketFinalizeAccept: wrong magic %lx != %lx": "socketFinalizeAccept from %s: socket magic mismatch "
        "(peer 0x%016llx != expected 0x%016llx), discarding peer connection",
    "socketFinalizeAccept: wrong type %d != %d": WRONG_TYPE,
    "socketFinalizeAccept from %s: wrong type %d != %d": WRONG_TYPE,
}


def variant_of(old: Row, current: list[Row]) -> str:
    """The current template that replaced ``old``: the most alike one (by words) of the same
    level, needing less likeness in the same function (or the function's successor)."""
    if old.template in VARIANT_OVERRIDES:
        return VARIANT_OVERRIDES[old.template]
    fn, words = NCCL_VARIANTS.get(old.function, old.function), tokens(old.template)
    best, best_score = "", 0.0
    for r in current:
        if r.level != old.level:
            continue
        same_fn = r.function.split("::")[-1] in (fn, old.function) if old.function else r.file == old.file
        sim = (similarity(words, tokens(r.template)) + similarity(old.template, r.template)) / 2
        if sim >= (0.6 if same_fn else 0.8) and sim + 0.1 * same_fn > best_score:
            best, best_score = r.template, sim + 0.1 * same_fn
    return best


def tokens(template: str) -> list[str]:
    return re.findall(r"%[-+ #0]*\d*(?:\.\d+)?[hlzjt]*[a-zA-Z]|\w+|[^\w\s]", template)


def similarity(a: list[str] | str, b: list[str] | str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()



# ---------------------------------------------------------------- gloo

_GLOO_CALL = re.compile(
    r"(?<![\w])(GLOO_ENFORCE(?:_(?:EQ|NE|LE|LT|GE|GT))?|GLOO_ERROR_MSG|GLOO_ERROR|GLOO_INFO|GLOO_WARN|"
    r"GLOO_DEBUG|GLOO_THROW\w*|throw\s+(?:std|::gloo)::\w+)\s*\(")


def gloo_rows(tree: dict[str, str]) -> Iterator[Row]:
    """GLOO_ENFORCE*/GLOO_ERROR*/GLOO_INFO/GLOO_THROW*/``throw std::x(...)`` messages."""
    for path, raw in sorted(tree.items()):
        for m, args, n, function in calls(raw, _GLOO_CALL):
            if args[:1] == ["..."]:
                continue
            level, tpl = gloo_template(m.group(1), args)
            if tpl and re.search(r"[A-Za-z]{2,}", tpl.replace("[enforce fail at gloo/<FILE>] <X> vs <X>.", "")):
                yield Row("gloo", path, n, function, level, tpl, int(level != "INFO"))


def gloo_template(macro: str, args: list[str]) -> tuple[str, str]:
    """(level, template); an ENFORCE message made of values only is left out, as the census does."""
    if macro.startswith("GLOO_ENFORCE"):
        n = 1 if macro == "GLOO_ENFORCE" else 2
        args = args[:n] + (args[n:] if any(_C_LIT.search(a) for a in args[n:]) else [])
    if macro == "GLOO_ENFORCE":
        cond = re.sub(r"\s+", " ", args[0]) if args else ""
        return "ENFORCE", f"[enforce fail at gloo/<FILE>] {cond}. {template_of(args[1:], ('<<',))}".rstrip()
    if macro.startswith("GLOO_ENFORCE_"):
        return "ENFORCE", f"[enforce fail at gloo/<FILE>] {X} vs {X}. {template_of(args[2:], ('<<',))}".rstrip()
    if macro.startswith(("throw", "GLOO_THROW")) and args and not any(_C_LIT.search(a) for a in args):
        return "ERROR", ""
    level = {"GLOO_INFO": "INFO", "GLOO_WARN": "WARN", "GLOO_DEBUG": "DEBUG"}.get(macro, "ERROR")
    return level, template_of(args, ("<<", "+")) if level != "DEBUG" else ""


# ---------------------------------------------------------------- c10d C++ and c10/cuda

_TORCH_CALL = re.compile(
    r"(?<![\w])(TORCH_CHECK(?:_\w+)?|C10_THROW_ERROR|TORCH_INTERNAL_ASSERT(?:_DEBUG_ONLY)?|"
    r"TORCH_WARN(?:_ONCE|_DEPRECATION)?|throw\s+(?:std|c10)::\w+|c10::str|fmt::format|"
    r"LOG\s*\(\s*(?:ERROR|WARNING)\s*\)|C10_LOG_(?:EVERY_N|FIRST_N)\s*\(\s*(?:ERROR|WARNING)\s*,[^)]*\))\s*[(<]")


def torch_cpp_rows(tree: dict[str, str], emitter: str, version: str) -> Iterator[Row]:
    """Messages that c10d / c10/cuda C++ throws, warns or logs."""
    for path, raw in sorted(tree.items()):
        text, lines = blank_comments(raw), raw.split("\n")
        heads, inside = function_heads(lines), -1
        for m in _TORCH_CALL.finditer(text):
            first = text[text.rfind("\n", 0, m.start()) + 1:m.start()].lstrip()
            if first.startswith("#define") or m.start() < inside:
                continue  # a macro's own definition, or inside a call already taken
            span = call_args(text, m.end() - 1) if m.group(0).endswith("(") else None
            inside = span[1] if span else inside
            got = torch_cpp_message(text, m)
            if got and got[1] and got[1] != X and literal_words(got[1]):
                n = line_of(text, m.start())
                yield Row(emitter, path, n, c_function(heads, lines, n - 1), got[0], got[1], versions=version)


def torch_cpp_message(text: str, m: re.Match) -> tuple[str, str] | None:
    """(level, template) of one match of ``_TORCH_CALL``."""
    macro = re.sub(r"\s+", "", m.group(1))
    if macro.startswith(("LOG(", "C10_LOG")):
        end = text.find(";", m.end())
        parts = split_top(text[m.end() - 1:end].lstrip("<").strip(), ("<<",))
        return ("ERROR" if "ERROR" in macro else "WARNING"), template_of(parts, ("<<",))
    got = call_args(text, m.end() - 1)
    if not got or (got[0] and got[0][0] == "..."):
        return None
    args = got[0]
    if macro.startswith(("TORCH_CHECK", "TORCH_INTERNAL_ASSERT")):
        skip = 2 if macro in ("TORCH_CHECK_WITH", "TORCH_CHECK_EQ", "TORCH_CHECK_NE", "TORCH_CHECK_LE",
                              "TORCH_CHECK_LT", "TORCH_CHECK_GE", "TORCH_CHECK_GT") else 1
        level = "ASSERT" if "ASSERT" in macro else "EXCEPTION"
        return level, template_of(args[skip:])
    if macro == "C10_THROW_ERROR":
        level = "ASSERT" if args and args[0] == "NotImplementedError" else "EXCEPTION"
        return level, template_of(args[1:])
    if macro.startswith("TORCH_WARN"):
        return "WARNING", template_of(args)
    if macro in ("c10::str", "fmt::format"):
        return "MSG", template_of(args if macro == "c10::str" else args[:1])
    return "EXCEPTION", template_of(args)


def literal_words(tpl: str) -> bool:
    """True when the literal text has at least two words (else it says nothing on its own)."""
    return len(re.findall(r"[A-Za-z]{2,}", tpl.replace(X, ""))) >= 2


def torch_cpp_failure(row: Row) -> int:
    if row.level in ("ASSERT", "INFO"):
        return 0
    if row.level == "WARNING":
        return int(bool(ERROR_WORDS.search(row.template)))
    return 1


ERROR_WORDS = re.compile(r"error|fail|timeout|timed out|abort|exception|invalid|not |cannot|can't|unable|"
                         r"mismatch|leak|hang|crash", re.I)


# ---------------------------------------------------------------- torch Python

_PY_LEVEL = {"error": "ERROR", "exception": "ERROR", "critical": "ERROR", "warning": "WARNING",
             "warn": "WARNING"}


def python_rows(tree: dict[str, str], emitter_of, version: str) -> Iterator[Row]:
    """``raise X("...")``, ``logger.error/warning(...)`` and ``warnings.warn(...)`` messages."""
    for path, src in sorted(tree.items()):
        emitter = emitter_of(path)
        if not emitter:
            continue
        tree_ = ast.parse(src)
        for fn, node in walk_with_function(tree_, ""):
            got = python_message(node)
            if got and got[1] and got[1] != X:
                yield Row(emitter, path, node.lineno, fn, got[0], got[1], versions=version,
                          failure=int(got[0] != "WARNING"))


def walk_with_function(node: ast.AST, fn: str) -> Iterator[tuple[str, ast.AST]]:
    for child in ast.iter_child_nodes(node):
        name = fn
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = child.name
        yield name, child
        yield from walk_with_function(child, name)


def python_message(node: ast.AST) -> tuple[str, str] | None:
    """(level, template) for a raise/log/warn node, or None."""
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
        return "EXCEPTION", py_template(node.exc.args[0])
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
        return None
    owner, meth = node.func.value, node.func.attr
    owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
    if meth == "warn" and owner_name == "warnings":
        return "WARNING", py_template(node.args[0])
    if meth in _PY_LEVEL and meth != "warn" and re.search(r"log", owner_name, re.I):
        return _PY_LEVEL[meth], py_template(node.args[0], printf=True)
    return None


def py_template(expr: ast.AST, printf: bool = False) -> str:
    """The literal text of a message expression with ``<X>`` for every value put in."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        text = expr.value
        if printf:
            text = re.sub(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrifgxXe]", X, text)
    elif isinstance(expr, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else X for v in expr.values)
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        text = py_template(expr.left, printf) + py_template(expr.right, printf)
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return py_template(expr.left, printf=True)
    elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
          and expr.func.attr == "format"):
        return re.sub(r"\{[^{}]*\}", X, py_template(expr.func.value))
    else:
        return X
    return re.sub(r" +", " ", text.replace("\n", " \\n ")).strip()


def torch_emitter(path: str) -> str:
    if path.startswith("torch/distributed/elastic/") or path == "torch/distributed/run.py":
        return "torch_elastic"
    if path in ("torch/distributed/distributed_c10d.py", "torch/distributed/rendezvous.py"):
        return "torch_c10d_py"
    return "torch_ddp_py" if path == "torch/nn/parallel/distributed.py" else ""


def torch_version(root: Path) -> str:
    v = root / "torch" / "version.py"
    m = re.search(r"__version__\s*=\s*'(\d+\.\d+)", v.read_text()) if v.exists() else None
    return f"torch {m.group(1)}" if m else "torch"


def torch_rows(root: Path) -> list[Row]:
    version = torch_version(root)
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    read = {k: p.read_text(errors="replace") for k, p in files.items()}
    c10d = {k: v for k, v in read.items() if k.startswith("torch/csrc/distributed/c10d/")
            and k.endswith((".cpp", ".hpp", ".h", ".cu")) and "/" not in k[len("torch/csrc/distributed/c10d/"):]}
    cuda = {k: v for k, v in read.items() if k.startswith("c10/cuda/") and k.endswith((".cpp", ".h"))}
    py = {k: v for k, v in read.items() if k.endswith(".py") and torch_emitter(k)}
    rows = [*torch_cpp_rows(c10d, "torch_c10d", version), *torch_cpp_rows(cuda, "cuda", version)]
    rows = [replace(r, failure=torch_cpp_failure(r)) for r in rows]
    return rows + list(python_rows(py, torch_emitter, version))


# ---------------------------------------------------------------- CUDA runtime strings

def cudart_rows(lib: Path, label: str) -> list[Row]:
    """cudaGetErrorString texts: the strings between ``cudaSuccess`` and the last enum's text."""
    strings = [m.group(0).decode("ascii") for m in re.finditer(rb"[\x20-\x7e\t]{4,}", lib.read_bytes())]
    start = strings.index("cudaSuccess")
    names = [i for i in range(start, len(strings)) if strings[i].startswith("cudaError")]
    block = range(start + 1, max(i for i in names if i - names[0] < 600) + 2)
    return [Row("cuda", label, i + 1, "cudaGetErrorString", "ERROR_STRING", strings[i], 1, label.split(":")[0])
            for i in block if not re.fullmatch(r"cuda(Error\w*|Success)|no error", strings[i])]


# ---------------------------------------------------------------- rendering

VALUES = [  # (words just before the placeholder, value)
    (r"(if|interface|ifname|iface|nic)\W*$", "eth0"),
    (r"(address|addr|host|hostname|peer|remote|with|from|to|connect\w*|listen\w*|ip)\W*$", "10.0.0.7:29500"),
    (r"(err|error|errno|reason|failed|because|:)\W*$", "Connection refused"),
    (r"port\W*$", "29500"), (r"(rank|peer|root)\W*$", "3"), (r"(nranks|size|count|bytes)\W*$", "8"),
    (r"(path|file|dir)\W*$", "/dev/shm/nccl-3f2a1b"), (r"(busid|bus ?id)\W*$", "0000:07:00.0"),
    (r"(dev|device|gpu|cudadev)\W*$", "3"), (r"(timeout|ms)\W*$", "600000"),
]
_PH = re.compile(r"%%|%[-+ #0]*\d*(?:\.\d+|\.\*)?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspn]|\{(?::[^{}]*)?\}|<[A-Z]+>")


def fill(template: str) -> str:
    """The template with each placeholder replaced by a plausible value for its context."""
    def value(m: re.Match) -> str:
        ph, before = m.group(0), template[max(0, m.start() - 24):m.start()].lower()
        if ph == "%%":
            return "%"
        if ph[-1] in "xX":
            return "1f"
        if ph[-1] == "p":
            return "0x7f3a2c000000"
        if ph[-1] in "eEfgG":
            return "0.50"
        for pattern, val in VALUES:
            if re.search(pattern, before) and (ph[-1] in "sX}" or val.isdigit()):
                return val
        return "3" if ph[-1] in "diouc" else "x"
    return _PH.sub(value, template)


def render(row: Row) -> str:
    """One log line as the emitter prints it, with plausible values (C's \\n and \\t as
    the spaces they become on one line)."""
    text = " ".join(fill(row.template).replace("\\n", " ").replace("\\t", " ").split())
    if row.emitter == "nccl" and row.level == "ERROR_STRING":
        return ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                f"ProcessGroupNCCL.cpp:1970, {text}, NCCL version 2.21.5")
    if row.emitter == "nccl":
        return f"node07:1234:1250 [3] NCCL {row.level} {text}"
    if row.emitter == "cuda" and row.level == "ERROR_STRING":
        return f"RuntimeError: CUDA error: {text}"
    if row.emitter == "gloo":
        where = f"/pytorch/third_party/gloo/{row.file}:{row.line}"
        return f"RuntimeError: {text.replace('gloo/<FILE>', where[1:])}" if row.level == "ENFORCE" else (
            f"[{row.level} {where}] {text}" if row.level == "INFO" else f"RuntimeError: [{where}] {text}")
    base = row.file.rsplit("/", 1)[-1]
    if row.level in ("ERROR", "WARNING") and row.file.endswith(".py"):
        return f"{row.level[0]}1204 10:00:00.000000 1234 {row.file}:{row.line}] {text}"
    if row.level in ("ERROR", "WARNING", "MSG"):
        # a MSG is text c10d builds into an error it logs: glog's E level, not a letter "M"
        level = "E" if row.level == "MSG" else row.level[0]
        return f"[rank3]:[{level}1204 10:00:00.000000 1234 {base}:{row.line}] {text}"
    return f"RuntimeError: {text}"


# ---------------------------------------------------------------- census and output

def merge_census(rows: list[Row], census: Path | None, copied_version: dict[str, str]) -> tuple[list[Row], int]:
    """Keep census ids/failure/rendered for reproduced rows; copy census rows not reproduced."""
    if census is None:
        return rows, 0
    known = {(r["emitter"], r["file"], r["template"]): r for r in read_tsv(census)}
    by_key: dict[tuple[str, str, str], Row] = {}
    for r in rows:
        by_key.setdefault((r.emitter, r.file, r.template), r)
    at_line = {(r.emitter, r.file, r.line): key for key, r in by_key.items()}
    out, copied = [], 0
    for key, c in known.items():
        r = by_key.pop(key, None)
        near = at_line.get((c["emitter"], c["file"], int(c["line"])))
        if r is None and near in by_key and similarity(by_key[near].template, c["template"]) >= 0.6:
            r = replace(by_key.pop(near), template=c["template"])  # the census wording is the key
        if r is None:
            copied += 1
            r = Row(c["emitter"], c["file"], int(c["line"]), "", c["level"], c["template"],
                    versions=copied_version.get(c["emitter"], ""))
        out.append(replace(r, id=int(c["id"]), failure=int(c["failure"]), rendered=c["rendered"]))
    return out + list(by_key.values()), copied


def read_tsv(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text(encoding="utf-8").split("\n") if ln and not ln.startswith("# ")]
    return list(csv.DictReader(lines, delimiter="\t"))  # the census quotes cells that hold a quote


def finish(rows: list[Row]) -> list[Row]:
    """Fill failure, rendered and ids of new rows; order by emitter, variant, file, line."""
    next_id = max((r.id for r in rows), default=-1) + 1
    out = []
    for r in sorted(rows, key=lambda r: (r.id < 0, r.id, r.emitter, r.variant_of != "", r.file, r.line)):
        if r.failure < 0:
            r = replace(r, failure=nccl_failure(r) if r.emitter == "nccl" else 1)
        if not r.rendered:
            r = replace(r, rendered=render(r))
        if r.id < 0:
            r, next_id = replace(r, id=next_id), next_id + 1
        out.append(r)
    return out


def write(rows: list[Row], out: Path) -> None:
    clean = lambda v: str(v).replace("\t", " ").replace("\n", " ")
    with out.open("w", encoding="utf-8") as f:
        f.write(SCHEMA + "\n" + "\t".join(COLUMNS) + "\n")
        for r in rows:
            f.write("\t".join(clean(getattr(r, c)) for c in COLUMNS) + "\n")


def dedupe(rows: list[Row]) -> list[Row]:
    """One row per (emitter, file, template, level): the first place that prints it."""
    seen, out = set(), []
    for r in rows:
        key = (r.emitter, r.file, r.template, r.level, r.variant_of != "")
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def build(a: argparse.Namespace) -> tuple[list[Row], int]:
    rows: list[Row] = []
    if a.nccl:
        refs = [(re.sub(r"^v(\d+\.\d+).*", r"\1", t), t) for t in a.nccl_ref] or nccl_release_tags(a.nccl)
        rows += nccl_rows(a.nccl, refs)
    if a.gloo:
        tree = tree_at(a.gloo, "HEAD", "gloo/transport/tcp", (".cc", ".h"))
        rows += [replace(r, versions="gloo " + a.gloo_label) for r in gloo_rows(tree)]
    if a.torch:
        rows += torch_rows(a.torch)
    if a.cudart:
        rows += cudart_rows(a.cudart, a.cudart_label)
    copied_version = {"torch_c10d": "torch 2.7", "cuda": "torch 2.7"}
    rows, copied = merge_census(dedupe(rows), a.census, copied_version)
    return [r for r in rows if r.id >= 0 or r.emitter != "nccl" or nccl_keep(r)], copied


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nccl", type=Path, help="NVIDIA/nccl git directory")
    ap.add_argument("--nccl-ref", action="append", default=[], help="release tag (default: newest of each minor >= 2.20)")
    ap.add_argument("--gloo", type=Path, help="pytorch/gloo git directory or source tree")
    ap.add_argument("--gloo-label", default="HEAD", help="how versions names the gloo sources")
    ap.add_argument("--torch", type=Path, help="tree with torch/distributed, torch/csrc/distributed/c10d, c10/cuda")
    ap.add_argument("--cudart", type=Path, help="libcudart.so.12")
    ap.add_argument("--cudart-label", default="nvidia-cuda-runtime-cu12==12.9.79:libcudart.so.12(strings)")
    ap.add_argument("--census", type=Path, help="shared/emitters/templates.tsv to keep ids, failure, rendered")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows, copied = build(a)
    rows = finish(rows)
    write(rows, a.out)
    print(f"{len(rows)} rows ({copied} copied from the census) -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
