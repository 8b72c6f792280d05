"""Every environment variable a fix text names is one the supported versions read.

A fix that says "set TORCH_FR_BUFFER_SIZE" on a torch that reads only
TORCH_NCCL_TRACE_BUFFER_SIZE is ignored without a word, so the fix texts (diag/fixes.py, the
Implies and fix strings of analyze's catalog and detectors, check-env's warn/fail fixes, and
the ``fix`` column of the knowledge TSVs) are checked against diag/checkenv/envvars.tsv.
"""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import pytest

from diag.checkenv import envvars
from diag.checkenv.catalog import CATALOG

ROOT = Path(__file__).resolve().parents[2]
VAR = re.compile(r"(?<![A-Za-z0-9_$])(?:NCCL|TORCH|GLOO|TORCHELASTIC|CUDA|PYTORCH|MASTER)_"
                 r"[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_(])")

# Read by something other than the sources envvars.tsv covers; each says who.
LAUNCHER_AND_RUNTIME = {
    "MASTER_ADDR": "torch.distributed.rendezvous (env://) and torchrun",
    "MASTER_PORT": "torch.distributed.rendezvous (env://) and torchrun",
    "CUDA_VISIBLE_DEVICES": "the CUDA driver; set per rank by launchers",
    "CUDA_LAUNCH_BLOCKING": "the CUDA runtime (and c10/cuda's error text)",
    "CUDA_DEVICE_MAX_CONNECTIONS": "the CUDA driver (hardware work queues)",
    "CUDA_MODULE_LOADING": "the CUDA runtime (lazy loading)",
    "TORCH_LOGS": "torch._logging, at import",
    "TORCH_LOGS_FORMAT": "torch._logging, at import",
    "TORCH_LOGS_OUT": "torch._logging, at import",
    "TORCH_SHOW_CPP_STACKTRACES": "c10 (libc10), at import",
    "TORCH_CPP_LOG_LEVEL": "c10 (libc10), at import",
    "TORCHELASTIC_RESTART_COUNT": "set by torchrun's agent for its workers",
    "TORCHELASTIC_MAX_RESTARTS": "set by torchrun's agent for its workers",
    "TORCHELASTIC_ERROR_FILE": "torch.distributed.elastic's error handler",
    "PYTORCH_CUDA_ALLOC_CONF": "c10/cuda's caching allocator",
    "CUDA_DISABLE_PTX_JIT": "the CUDA driver (JIT of PTX)",
    "TORCH_CUDA_ARCH_LIST": "torch.utils.cpp_extension and torch's build, at build time",
}
# Tokens in fix texts that are macros or error codes, not variables.
NOT_VARIABLES = re.compile(r"(TORCH_(CHECK|WARN|INTERNAL_ASSERT|CUDABLAS_CHECK)\w*|"
                           r"CUDA_ERROR_\w+|NCCL_CONFIG_\w+|GLOO_(ENFORCE|THROW)\w*|"
                           r"NCCL_\w+_INITIALIZER|NCCL_SPLIT_NOCOLOR|NCCL_GIN_CONNECTION_\w+)$")
# A fix may name a variable only newer NCCL reads when it says which NCCL that is.
NAMES_NEWER_NCCL = re.compile(r"NCCL (2\.(29|[3-9]\d)|[3-9]\.)")
DEPRECATED = {name: var.replaced_by for name, var in CATALOG.items() if var.replaced_by}

_FIX_CALLS = {"Implies", "warn", "fail", "make", "finding", "Finding", "CheckResult"}


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def _fix_nodes(tree: ast.AST) -> list[ast.AST]:
    """The expressions that hold fix text: fix=..., Implies(...), warn/fail's third
    argument, and anything assigned to a name with 'fix' in it."""
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and "fix" in node.arg.lower():
            out.append(node.value)
        elif isinstance(node, ast.Call) and _call_name(node) in _FIX_CALLS:
            out += node.args[2:] if _call_name(node) != "Implies" else node.args
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("fix" in ast.unparse(t).lower() for t in targets) and node.value:
                out.append(node.value)
        elif isinstance(node, ast.FunctionDef) and "fix" in node.name.lower():
            out += [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value]
    return out


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def python_fix_texts() -> list[tuple[str, str]]:
    """(where, text) for every fix literal in the modules that print fixes."""
    files = [ROOT / "diag/fixes.py"] + sorted(
        p for d in ("diag/analyze/catalog", "diag/analyze/detectors", "diag/checkenv")
        for p in (ROOT / d).glob("*.py"))
    out = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [tree] if path.name == "fixes.py" else _fix_nodes(tree)
        rel = path.relative_to(ROOT)
        out += [(f"{rel}:{getattr(n, 'lineno', '?')}", s) for n in nodes for s in _strings(n)]
    return out


def knowledge_fix_texts() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "diag/analyze/catalog/templates/knowledge").glob("*.tsv")):
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
                 if ln and not ln.startswith("#")]
        for n, row in enumerate(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)):
            if row.get("fix"):
                where = f"{path.relative_to(ROOT)} row {n + 1}"
                out.append((f"{where} ({row.get('format', '')[:40]!r})", row["fix"]))
    return out


def offence(token: str, text: str = "") -> str | None:
    """Why ``token`` may not appear in fix ``text``; None when it may."""
    if NOT_VARIABLES.match(token) or token in LAUNCHER_AND_RUNTIME:
        return None
    if token in DEPRECATED:
        return f"deprecated: name {DEPRECATED[token]} instead"
    if not envvars.reads(token):
        return f"no version of {envvars.SUPPORTED_TEXT} reads it"
    if not envvars.supported(token) and not NAMES_NEWER_NCCL.search(text):
        spans = ", ".join(r.versions_text() for r in envvars.reads(token))
        return (f"only {spans} read it, not {envvars.SUPPORTED_TEXT} (say so in the text, "
                f"e.g. '(NCCL 2.30+)', or name another)")
    return None


def offenders(texts: list[tuple[str, str]]) -> list[str]:
    return [f"{where}: {tok}: {why} -- in {text[:120]!r}" for where, text in texts
            for tok in dict.fromkeys(VAR.findall(text)) for why in [offence(tok, text)] if why]


def test_the_collectors_find_the_fix_texts():
    texts = [t for _, t in python_fix_texts()]
    assert len(texts) > 100
    assert any("GLOO_SOCKET_IFNAME" in t for t in texts)  # diag/fixes.py
    assert any("TORCH_NCCL" in t or "TORCH_FR" in t for t in texts)


def test_python_fix_texts_name_variables_the_supported_versions_read():
    bad = offenders(python_fix_texts())
    assert not bad, "fix texts name variables no supported version reads:\n" + "\n".join(bad)


@pytest.mark.skipif(not (ROOT / "diag/analyze/catalog/templates/knowledge").is_dir(),
                    reason="no knowledge TSVs in this checkout")
def test_knowledge_fix_columns_name_variables_the_supported_versions_read():
    bad = offenders(knowledge_fix_texts())
    assert not bad, ("knowledge/*.tsv fix columns name variables no supported version reads "
                     "(edit those rows' fix column):\n" + "\n".join(bad))


@pytest.mark.parametrize("token,ok", [
    ("TORCH_FR_BUFFER_SIZE", True), ("NCCL_DEBUG", True), ("MASTER_ADDR", True),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE", False), ("NCCL_LL_THRESHOLD", False),
    ("NCCL_SOMETHING_NEW", False), ("NCCL_GIN_EXCLUSIVE_CONTEXTS", False),
    ("TORCH_CHECK", True), ("CUDA_ERROR_ILLEGAL_ADDRESS", True),
])
def test_offence_rules(token, ok):
    assert (offence(token) is None) is ok


def test_a_newer_nccl_variable_is_fine_when_the_text_says_which_nccl():
    assert offence("NCCL_IB_OOO_RQ", "unset NCCL_IB_OOO_RQ") is not None
    assert offence("NCCL_IB_OOO_RQ", "unset NCCL_IB_OOO_RQ (NCCL 2.30+)") is None
