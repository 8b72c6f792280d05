"""Across-rank checks: the same versions and variables everywhere, every rank present
once, no GPU shared within a node, clocks, MTUs and GPUs that agree between nodes, a group
that forms."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Callable, Hashable, Sequence

from diag import fixes
from diag.format.ranks import as_ranges
from diag.checkenv.catalog import Scope, lookup
from diag.checkenv.checks_gpu import HARDWARE, answered
from diag.checkenv.checks_launch import geometry
from diag.checkenv.checks_net import gloo_ifnames
from diag.checkenv.gpurules import fix as gpu_fix
from diag.checkenv.snapshot import Snapshot
from diag.checkenv.types import CheckResult, fail, ok, skip, warn
from diag.verdict import Category, Status

CLOCK_WARN_S = 1.0      # per-rank logs stop lining up; ddiag's cross-rank timing drifts
CLOCK_FAIL_S = 300.0    # munge and TLS credentials are rejected past five minutes
COMPONENTS = ("python", "torch", "cuda", "nccl", "driver")
TIMEOUT = re.compile(r"time[d ]?\s?out", re.IGNORECASE)


def span(ranks: Sequence[int]) -> str:
    """Ranks as compact ranges: 0-3,6,7."""
    return ",".join(str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}"
                    for a, b in as_ranges(ranks))


def groups_by(snaps: Sequence[Snapshot], key: Callable[[Snapshot], Hashable]
              ) -> list[tuple[Hashable, list[Snapshot]]]:
    """Snapshots grouped by value, the reference group first: the largest, and on a tie
    the one holding the lowest rank (rank 0's view is the job's intended one)."""
    groups: dict[Hashable, list[Snapshot]] = defaultdict(list)
    for s in sorted(snaps, key=lambda s: s.rank):
        groups[key(s)].append(s)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0].rank))


def where(snaps: Sequence[Snapshot]) -> str:
    nodes = sorted({s.node for s in snaps})
    return f"{', '.join(nodes)} (ranks {span([s.rank for s in snaps])})"


def culprits(groups: list[tuple[Hashable, list[Snapshot]]]) -> dict:
    odd = [s for _, members in groups[1:] for s in members]
    return {"ranks": tuple(sorted(s.rank for s in odd)),
            "nodes": tuple(sorted({s.node for s in odd}))}


# --- versions ------------------------------------------------------------------------

def check_versions(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    out = []
    for comp in COMPONENTS:
        groups = groups_by(snaps, lambda s, c=comp: getattr(s.facts.versions, c))
        if len(groups) > 1:
            shown = "; ".join(f"{v or 'none'} on {where(m)}" for v, m in groups)
            out.append(fail("cross.versions", f"{comp} differs across ranks: {shown}",
                            fixes.versions(comp), category=Category.VERSION_MISMATCH,
                            **culprits(groups)))
    if out:
        return out
    v = snaps[0].facts.versions
    same = ", ".join(f"{c} {getattr(v, c)}" for c in COMPONENTS if getattr(v, c))
    return [ok("cross.versions", f"identical on all {len(snaps)} ranks: {same}",
               category=Category.VERSION_MISMATCH)]


# --- variables -----------------------------------------------------------------------

def compared(name: str) -> Scope | None:
    """The scope a variable is compared under; None for those never compared."""
    if name.startswith("SLURM") or name == "NVIDIA_VISIBLE_DEVICES":
        return None  # node- and task-specific by design
    spec = lookup(name)
    scope = spec.scope if spec else Scope.JOB
    return None if scope in (Scope.RANK, Scope.FREE) else scope


def check_env_consistency(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    names = sorted({n for s in snaps for n in s.facts.env if compared(n)})
    out = [r for n in names for r in [_compare_var(snaps, n)] if r]
    return out or [ok("cross.env", f"{len(names)} distributed variables agree on all "
                      f"{len(snaps)} ranks")]


def _compare_var(snaps: Sequence[Snapshot], name: str) -> CheckResult | None:
    groups = groups_by(snaps, lambda s: s.facts.env.get(name))
    if len(groups) < 2:
        return None
    shown = "; ".join(f"{'unset' if v is None else repr(v)} on {where(m)}" for v, m in groups)
    summary = f"{name} differs across ranks: {shown}"
    scope, known = compared(name), lookup(name) is not None
    within_node = any(len(groups_by(m, lambda s: s.facts.env.get(name))) > 1
                      for _, m in groups_by(snaps, lambda s: s.node))
    fix = fixes.env_skew(name)
    if scope is Scope.NODE and not within_node:
        return warn("cross.env", summary, f"fine only if the nodes differ in hardware; else "
                    f"{fix}", env_var=name, **culprits(groups))
    make = fail if known else warn
    return make("cross.env", summary, fix, env_var=name, **culprits(groups))


# --- ranks, local ranks and devices ---------------------------------------------------

def check_ranks(snaps: Sequence[Snapshot], world_size: int | None) -> list[CheckResult]:
    out = []
    sizes = groups_by(snaps, lambda s: s.world_size)
    if len(sizes) > 1:
        out.append(fail("cross.ranks", "WORLD_SIZE differs: " + "; ".join(
            f"{v} on {where(m)}" for v, m in sizes), "launch every node with the same "
            "--nnodes and --nproc-per-node", env_var="WORLD_SIZE", **culprits(sizes)))
    seen = [s.rank for s in snaps]
    dups = sorted({r for r in seen if seen.count(r) > 1})
    if dups:
        out.append(fail("cross.ranks", f"rank(s) {span(dups)} reported twice", "give each "
                        "node its own --node-rank", env_var="RANK", ranks=tuple(dups)))
    missing = sorted(set(range(world_size or 0)) - set(seen))
    if missing:
        out.append(fail("cross.ranks", f"no snapshot from rank(s) {span(missing)} of "
                        f"{world_size}: they did not start or died before checking",
                        "look at those ranks' launcher output (srun/torchrun stderr)",
                        ranks=tuple(missing)))
    return out or [ok("cross.ranks", f"all {len(snaps)} ranks reported, once each")]


def check_local_ranks(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    out = []
    for node, members in groups_by(snaps, lambda s: s.node):
        g = [geometry(s.facts.env) for s in members]
        local = [x["LOCAL_RANK"] for x in g if x["LOCAL_RANK"] is not None]
        declared = {x["LOCAL_WORLD_SIZE"] for x in g} - {None}
        if len(local) != len(set(local)):
            out.append(fail("cross.local_ranks", f"LOCAL_RANK repeats on {node}: {sorted(local)}",
                            "one torchrun per node (srun --ntasks-per-node=1)",
                            nodes=(node,), ranks=tuple(s.rank for s in members),
                            env_var="LOCAL_RANK"))
        elif declared and declared != {len(members)}:
            out.append(fail("cross.local_ranks", f"{node} runs {len(members)} ranks but "
                            f"LOCAL_WORLD_SIZE={sorted(declared)}", "check --nproc-per-node "
                            "and Slurm's tasks per node agree", nodes=(node,),
                            env_var="LOCAL_WORLD_SIZE"))
    return out or [ok("cross.local_ranks", "LOCAL_RANK unique and complete on every node")]


def device_of(s: Snapshot) -> str | None:
    """The GPU a rank will use: cuda:LOCAL_RANK, or its only visible GPU."""
    uuids, lrank = s.facts.gpu_uuids, geometry(s.facts.env)["LOCAL_RANK"] or 0
    return uuids[lrank] if lrank < len(uuids) else (uuids[0] if len(uuids) == 1 else None)


def check_devices(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    if not any(s.facts.gpu_uuids for s in snaps):
        return [skip("cross.devices", "no GPUs: nothing to share")]
    out = []
    for node, members in groups_by(snaps, lambda s: s.node):
        for dev, users in groups_by(members, device_of):
            if dev and len(users) > 1:
                out.append(fail("cross.devices", f"ranks {span([u.rank for u in users])} on "
                                f"{node} all use GPU {dev}", fixes.SHARED_GPU,
                                ranks=tuple(u.rank for u in users), nodes=(node,),
                                env_var="CUDA_VISIBLE_DEVICES"))
    return out or [ok("cross.devices", "every rank has a GPU of its own")]


# --- clocks, MTU, the group -----------------------------------------------------------

def check_clock(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    t = {s.rank: s.group.t_sync for s in snaps if s.group and s.group.t_sync is not None}
    if 0 not in t or len(t) < 2:
        return [skip("cross.clock", "no synchronised timestamps (the group did not form)")]
    skew = {r: v - t[0] for r, v in t.items()}
    worst = max(skew, key=lambda r: abs(skew[r]))
    bad = [s for s in snaps if abs(skew.get(s.rank, 0.0)) > CLOCK_WARN_S]
    summary = f"max clock skew against rank 0: {skew[worst]:+.3f} s (rank {worst})"
    if not bad:
        return [ok("cross.clock", summary)]
    make = fail if abs(skew[worst]) > CLOCK_FAIL_S else warn
    return [make("cross.clock", f"{summary}; off by > {CLOCK_WARN_S:g} s on {where(bad)}",
                 "run NTP/chrony on every node", ranks=tuple(s.rank for s in bad),
                 nodes=tuple(sorted({s.node for s in bad})))]


def _mtu(s: Snapshot) -> tuple[str, int] | None:
    names = gloo_ifnames(s.facts)
    iface = s.facts.iface(names[0]) if names else None
    return (iface.name, iface.mtu) if iface else None


def check_mtu(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    per_node = {s.node: _mtu(s) for s in snaps if _mtu(s)}
    if len(per_node) < 2:
        return [skip("cross.mtu", "fewer than two nodes: nothing to compare",
                     category=Category.WRONG_INTERFACE)]
    by_mtu = groups_by([s for s in snaps if s.node in per_node], lambda s: per_node[s.node][1])
    shown = "; ".join(f"{v} on {', '.join(sorted({s.node for s in m}))}" for v, m in by_mtu)
    if len(by_mtu) > 1:
        return [fail("cross.mtu", f"MTU of the job's interface differs: {shown}", "set "
                     "one MTU on the whole fabric: large frames are dropped silently and "
                     "collectives hang", category=Category.WRONG_INTERFACE, **culprits(by_mtu))]
    return [ok("cross.mtu", f"MTU {shown}", category=Category.WRONG_INTERFACE)]


def check_group(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    tried = [s for s in snaps if s.group is not None]
    if not tried:
        return [skip("cross.group", "no process group was attempted")]
    failed = [s for s in tried if not s.group.ok]
    if not failed:
        secs = max(s.group.seconds for s in tried)
        return [ok("cross.group", f"gloo group of {len(tried)} ranks formed and gathered "
                   f"in {secs:.1f} s")]
    # A rank that timed out was waiting for another; the others failed on their own.
    own = [s for s in failed if not TIMEOUT.search(s.group.error or "")] or failed
    waited = len(failed) - len(own)
    return [fail("cross.group", f"the gloo group did not form: {where(own)} failed with: "
                 f"{own[0].group.error}" + (f"; {waited} other rank(s) timed out waiting"
                                            if waited else ""),
                 "fix what the failing ranks' other checks report (interface, MASTER_ADDR, "
                 "firewall)", ranks=tuple(s.rank for s in own),
                 nodes=tuple(sorted({s.node for s in own})),
                 category=Category.NETWORK_UNREACHABLE)]


# --- GPUs across nodes --------------------------------------------------------------------

HEALTH_CHECKS = ("gpu.ecc", "gpu.remap", "gpu.xid")


def gpu_trouble(s: Snapshot) -> str:
    """The node's GPU health in one value: its failing memory and Xid checks, or healthy."""
    bad = sorted({r.check for r in s.results if r.check in HEALTH_CHECKS
                  and r.status is Status.FAIL})
    return " + ".join(bad) or "healthy"


def _model(s: Snapshot) -> str:
    devices = answered(s.facts).devices
    return f"{len(devices)} x {'/'.join(sorted({d.name for d in devices})) or '?'}"


def _narrowest_link(s: Snapshot) -> str:
    return f"x{min(d.pcie_width or 0 for d in answered(s.facts).devices)}"


# (what, the node's value, make, the good value: when set, only nodes without it are odd)
GPU_ASPECTS: tuple[tuple[str, Callable[[Snapshot], Hashable], Callable, str | None], ...] = (
    ("NVIDIA driver", lambda s: answered(s.facts).driver, fail, None),
    ("GPU model and count", _model, fail, None),
    ("GPU health", gpu_trouble, fail, "healthy"),
    ("narrowest GPU PCIe link", _narrowest_link, warn, None),
    ("NVLinks up", lambda s: sum(d.nvlinks_up for d in answered(s.facts).devices), warn, None),
)


def check_gpu_nodes(snaps: Sequence[Snapshot]) -> list[CheckResult]:
    """One rank per node speaks for its GPUs (every rank of a node sees the same)."""
    reps = list({s.node: s for s in sorted(snaps, key=lambda s: -s.rank)
                 if answered(s.facts)}.values())
    if len(reps) < 2:
        return [skip("cross.gpu", "fewer than two nodes with NVML's answers: nothing to "
                     "compare", category=HARDWARE)]
    out = [r for aspect in GPU_ASPECTS if (r := _compare_nodes(snaps, reps, *aspect))]
    return out or [ok("cross.gpu", f"GPU driver, model, count, health, PCIe width and "
                      f"NVLinks alike on all {len(reps)} nodes", category=HARDWARE)]


def _compare_nodes(snaps: Sequence[Snapshot], reps: list[Snapshot], what: str,
                   key: Callable[[Snapshot], Hashable], make: Callable, good: str | None
                   ) -> CheckResult | None:
    groups = groups_by(reps, key)
    if len(groups) < 2:
        return None
    shown = "; ".join(f"{v} on {', '.join(sorted(s.node for s in m))}" for v, m in groups)
    odd = {s.node for v, m in groups if (v != good if good else m is not groups[0][1])
           for s in m}
    return make("cross.gpu", f"{what} differs across nodes: {shown}", gpu_fix("cross.gpu"),
                nodes=tuple(sorted(odd)), category=HARDWARE,
                ranks=tuple(sorted(s.rank for s in snaps if s.node in odd)))


def run_cross(snaps: Sequence[Snapshot], world_size: int | None) -> list[CheckResult]:
    if not snaps:
        return [fail("cross.ranks", "no rank wrote a snapshot", "the ranks died before "
                     "their first write: the launcher's stderr says why (launch.start, when "
                     "check-env started them)")]
    return (check_ranks(snaps, world_size) + check_versions(snaps) +
            check_env_consistency(snaps) + check_local_ranks(snaps) + check_devices(snaps) +
            check_clock(snaps) + check_mtu(snaps) + check_gpu_nodes(snaps) +
            check_group(snaps))
