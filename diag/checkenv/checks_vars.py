"""Variable checks: invalid values, deprecated names, and names that look like typos."""

from __future__ import annotations

from functools import lru_cache

from diag.checkenv import envvars
from diag.checkenv.catalog import CATALOG, TYPO_FAMILIES, Var, lookup
from diag.checkenv.facts import RankFacts
from diag.checkenv.types import CheckResult, fail, ok, warn
from diag.verdict import Evidence

# Names that other launchers and images set; never typos of ours.
_FOREIGN = ("SLURM", "PMI_", "PMIX_", "OMPI_", "MPI_", "NV_", "NVIDIA_", "CUDA_HOME",
            "CUDA_PATH", "CUDA_VERSION", "NCCL_VERSION")
# Where NCCL is found at build time (torch's setup.py, CMake's FindNCCL, images): set, never
# read at run time, so not worth a warning.
_BUILD_ONLY = ("NCCL_HOME", "NCCL_ROOT", "NCCL_ROOT_DIR", "NCCL_DIR", "NCCL_LIB_DIR",
               "NCCL_INCLUDE_DIR", "NCCL_LIBRARY", "NCCL_LIBRARIES")


def in_unread_family(name: str) -> bool:
    """NCCL_*, TORCH_NCCL_*, TORCH_*DIST*, GLOO_*: names only NCCL, c10d or gloo would read."""
    upper = name.upper()
    return (upper.startswith(("NCCL_", "GLOO_", "TORCH_NCCL_"))
            or (upper.startswith("TORCH_") and "DIST" in upper))


@lru_cache(maxsize=1)
def known_names() -> tuple[str, ...]:
    """What a typo may be a typo of: the catalog, and every family name a supported version
    reads."""
    read = (n for n in envvars.inventory() if n.startswith(TYPO_FAMILIES) and envvars.supported(n))
    return tuple(dict.fromkeys([*CATALOG, *read]))


def edit_distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance, or ``limit + 1`` as soon as it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def typo_of(name: str) -> str | None:
    """The catalog name ``name`` is most likely a misspelling of, if any.

    Short names allow one edit, longer ones two: NCCL's names differ from each other by
    two letters often enough (NCCL_IB_SL, NCCL_IB_TC) that more would flag real ones.
    """
    if (name in CATALOG or envvars.reads(name) or name.startswith(_FOREIGN + _BUILD_ONLY)
            or len(name) < 6):
        return None
    best, best_d = None, 3
    for known in known_names():
        limit = 1 if len(known) <= 10 else 2
        d = edit_distance(name.upper(), known, limit)
        if d <= limit and d < best_d:
            best, best_d = known, d
    return best


def check_typos(facts: RankFacts) -> list[CheckResult]:
    out = []
    for name in facts.env_names:
        known = typo_of(name)
        if known:
            out.append(warn("vars.typo", f"{name} is not a variable torch, NCCL or gloo "
                            f"reads; did you mean {known}?",
                            f"rename {name} to {known} (its setting is ignored as spelled)",
                            env_var=name))
    return out


def check_unread(facts: RankFacts) -> list[CheckResult]:
    """NCCL/c10d/gloo names that no supported version, or not this rank's, reads."""
    out = []
    rank = {"nccl": envvars.minor_of(facts.versions.nccl),
            "torch": envvars.minor_of(facts.versions.torch)}
    for name in sorted(set(facts.env_names) | set(facts.env)):
        if not in_unread_family(name) or name.startswith(_FOREIGN + _BUILD_ONLY):
            continue
        spec = lookup(name)
        if (spec and spec.replaced_by) or typo_of(name):
            continue  # check_deprecated and check_typos say it better
        result = _unread(name, envvars.read_at(name, rank), facts)
        if result:
            out.append(result)
    return out


def _unread(name: str, read_here: bool | None, facts: RankFacts) -> CheckResult | None:
    if read_here or (read_here is None and envvars.supported(name)):
        return None
    spans = ", ".join(dict.fromkeys(r.versions_text() for r in envvars.reads(name)))
    only = f" (only {spans} read it)" if spans else ""
    if read_here is False:
        mine = " and ".join(f"{c} {v}" for c, v in (("NCCL", facts.versions.nccl),
                                                     ("torch", facts.versions.torch)) if v)
        return warn("vars.unread", f"{name} is not read by this rank's {mine}{only}: its "
                    f"setting has no effect", f"run a version that reads {name}, or unset it",
                    env_var=name)
    return warn("vars.unread", f"{name} is not read by {envvars.SUPPORTED_TEXT}{only}: its "
                f"setting has no effect", f"unset {name}, or correct its name (check-env "
                f"knows every name these versions read)", env_var=name)


def check_deprecated(facts: RankFacts) -> list[CheckResult]:
    out = []
    for name, value in sorted(facts.env.items()):
        spec = lookup(name)
        if not (spec and spec.replaced_by):
            continue
        new = spec.replaced_by
        both = f"; {new}={facts.env[new]} is set too and wins" if new in facts.env else ""
        out.append(warn("vars.deprecated", f"{name}={value} is deprecated or removed{both}",
                        f"use {new} instead ({spec.meaning})", env_var=name))
    return out


def check_values(facts: RankFacts) -> list[CheckResult]:
    out = []
    for name, value in sorted(facts.env.items()):
        spec = lookup(name) or envvars.value_spec(name)
        torch_says = facts.import_errors.get(name)
        if spec and (torch_says or not spec.values.accepts(value)):
            out.append(_invalid(spec, value, torch_says))
    return out


def _invalid(spec: Var, value: str, torch_says: str | None) -> CheckResult:
    """A fail, unless its reader merely ignores the value (then a warn saying so)."""
    name, expected = spec.name, spec.values.text
    what = f"{name}={value!r} is not valid"
    fix = f"set {name} to {expected} ({spec.meaning}), or unset it"
    evidence = (Evidence("at import", None, torch_says),) if torch_says else ()
    if spec.if_invalid and not torch_says:
        return warn("vars.value", f"{what}: {spec.if_invalid}; expected {expected}", fix,
                    env_var=name)
    crash = ("; `import torch` raises on it, so torchrun and every rank die at start"
             if spec.import_checked else "")
    return fail("vars.value", f"{what}: expected {expected}{crash}", fix, evidence=evidence,
                env_var=name)


def check_variables(facts: RankFacts) -> list[CheckResult]:
    found = (check_values(facts) + check_deprecated(facts) + check_typos(facts)
             + check_unread(facts))
    if found:
        return found
    known = sorted(n for n in facts.env if n in CATALOG or envvars.reads(n))
    unknown = sorted(n for n in facts.env if n.startswith(TYPO_FAMILIES) and n not in CATALOG
                     and not envvars.reads(n))
    note = f"; not in ddiag's catalog: {', '.join(unknown)}" if unknown else ""
    return [ok("vars.values", f"{len(known)} distributed variables set, all valid{note}")]


CHECKS = (check_variables,)
