"""Launch-geometry checks on one rank: RANK/WORLD_SIZE/LOCAL_* consistent, the GPUs this
rank sees agree with the local world size, CPU threads fit the cores."""

from __future__ import annotations

from diag import fixes
from diag.checkenv.facts import RankFacts
from diag.checkenv.types import CheckResult, fail, ok, skip, warn
from diag.verdict import Status

GEOMETRY = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def geometry(env: dict[str, str]) -> dict[str, int | None]:
    """The four launch variables as ints; None when unset or not an integer."""
    return {k: int(env[k]) if env.get(k, "").strip().isdigit() else None for k in GEOMETRY}


def geometry_problems(g: dict[str, int | None]) -> list[str]:
    rank, world, lrank, lworld = (g[k] for k in GEOMETRY)
    out = []
    if world is not None and world < 1:
        out.append(f"WORLD_SIZE must be >= 1, got: {world}")
    if rank is not None and world and not 0 <= rank < world:
        out.append(f"RANK must be in [0, {world}), got: {rank}")
    if lworld is not None and lworld < 1:
        out.append(f"LOCAL_WORLD_SIZE must be >= 1, got: {lworld}")
    if lrank is not None and lworld and not 0 <= lrank < lworld:
        out.append(f"LOCAL_RANK must be in [0, {lworld}), got: {lrank}")
    if lworld and world and lworld > world:
        out.append(f"LOCAL_WORLD_SIZE ({lworld}) is larger than WORLD_SIZE ({world})")
    return out


def check_geometry(facts: RankFacts) -> list[CheckResult]:
    g = geometry(facts.env)
    set_ = [k for k in GEOMETRY if facts.env.get(k)]
    if not set_:
        return [skip("launch.geometry", "RANK/WORLD_SIZE/LOCAL_RANK unset: not launched by "
                     "torchrun (srun tasks get them from SLURM_PROCID/SLURM_NTASKS)")]
    bad = [f"{k}={facts.env[k]!r} is not an integer" for k in set_ if g[k] is None]
    bad += geometry_problems(g)
    if bad:
        return [fail("launch.geometry", "; ".join(bad), "launch with torchrun (or pass "
                     "consistent --nnodes/--nproc-per-node); do not export RANK/WORLD_SIZE "
                     "by hand in the job script", env_var=_first_var(bad))]
    # Rank-independent wording, so that every rank's result merges into one row.
    sizes = ", ".join(f"{k}={facts.env[k]}" for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE")
                      if k in set_)
    return [ok("launch.geometry", f"{', '.join(set_)} consistent ({sizes})")]


def _first_var(problems: list[str]) -> str | None:
    return next((k for k in GEOMETRY if any(p.startswith(k) for p in problems)), None)


def check_visible_devices(facts: RankFacts) -> list[CheckResult]:
    [result] = _devices_per_rank(facts)
    host = facts.host_gpus
    if host is not None and host < len(facts.gpu_uuids):
        host = None  # the driver's list missed GPUs CUDA found: not a count to judge by
    missing = missing_devices(facts.env.get("CUDA_VISIBLE_DEVICES"), host)
    if missing and result.status is not Status.FAIL:
        return [warn("launch.devices", missing, "list GPUs this node has in "
                     "CUDA_VISIBLE_DEVICES (ordinals 0..N-1 or GPU- UUIDs), or leave it to "
                     "the launcher (Slurm's --gpus-per-task sets it)",
                     env_var="CUDA_VISIBLE_DEVICES")]
    return [result]


def missing_devices(cvd: str | None, host_gpus: int | None) -> str | None:
    """CUDA_VISIBLE_DEVICES names an ordinal the node does not have. CUDA stops reading
    the list at the first such entry, so the ranks silently lose the GPUs from there on
    (with none left, torch runs on the CPU). Empty or -1 hides every GPU on purpose."""
    items = [i.strip() for i in (cvd or "").split(",")]
    if host_gpus is None or not items[0] or items[0] == "-1":
        return None
    absent = [i for i in items if i.isdigit() and int(i) >= host_gpus]
    if not absent:
        return None
    kept = items[:items.index(absent[0])]
    return (f"CUDA_VISIBLE_DEVICES={cvd} names GPU {', '.join(absent)} but this node has "
            f"{host_gpus} GPU(s); CUDA ignores the list from {absent[0]} on, so the rank sees "
            + (f"{len(kept)} GPU(s) ({','.join(kept)})" if kept else "no GPU"))


def _devices_per_rank(facts: RankFacts) -> list[CheckResult]:
    g, cvd = geometry(facts.env), facts.env.get("CUDA_VISIBLE_DEVICES")
    visible, lrank, lworld = len(facts.gpu_uuids), g["LOCAL_RANK"], g["LOCAL_WORLD_SIZE"]
    var = "CUDA_VISIBLE_DEVICES"
    if not visible:
        return [skip("launch.devices", "no GPUs visible: CPU ranks" +
                     (f" ({var}={cvd!r})" if cvd is not None else ""), env_var=var)]
    shown = f"{var}={cvd}" if cvd is not None else f"{var} unset"
    if lrank is None:
        return [ok("launch.devices", f"{visible} GPU(s) visible ({shown})", env_var=var)]
    if visible == 1 and lrank > 0:
        return [warn("launch.devices", f"{shown}: this rank sees 1 GPU but LOCAL_RANK={lrank}; "
                     f"torch.cuda.set_device(LOCAL_RANK) fails with 'invalid device ordinal'",
                     "with per-rank masks use cuda:0 in the code, or let every local rank "
                     "see all GPUs and pick by LOCAL_RANK", env_var=var)]
    if visible > 1 and lrank >= visible:
        return [fail("launch.devices", f"{shown}: {visible} GPUs visible for LOCAL_RANK={lrank} "
                     f"of LOCAL_WORLD_SIZE={lworld}", fixes.too_few_gpus(lworld, visible),
                     env_var=var)]
    return [ok("launch.devices", f"{shown}: {visible} GPU(s) visible, one per local rank",
               env_var=var)]


def check_threads(facts: RankFacts) -> list[CheckResult]:
    lworld = geometry(facts.env)["LOCAL_WORLD_SIZE"] or 1
    omp = facts.env.get("OMP_NUM_THREADS", "").strip()
    var = "OMP_NUM_THREADS"
    # Unset, each rank's intra-op pool takes every core: ranks x cores threads in all.
    threads = int(omp) if omp.isdigit() and int(omp) > 0 else facts.cpus
    total = threads * lworld
    shown = f"{var}={omp}" if omp else f"{var} unset ({facts.cpus} threads per rank)"
    if total > facts.cpus and lworld > 1:
        return [warn("launch.threads", f"{shown} x {lworld} local ranks = {total} threads on "
                     f"{facts.cpus} cores: oversubscribed, ranks slow each other down",
                     f"set {var} to {max(1, facts.cpus // lworld)} (cores / local ranks)",
                     env_var=var)]
    return [ok("launch.threads", f"{shown} x {lworld} local rank(s) on {facts.cpus} cores",
               env_var=var)]


CHECKS = (check_geometry, check_visible_devices, check_threads)
