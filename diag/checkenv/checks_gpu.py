"""GPU health checks on one rank's facts: NVML's view of the node's GPUs (ECC, row remaps,
throttling, PCIe, NVLink, modes, count, driver CUDA) and the Xids in its kernel log.

Without NVML's answers (no GPU, pynvml not installed) ``gpu.nvml`` says why in one row and
the NVML checks say nothing; ``gpu.xid`` needs only the kernel log.
"""

from __future__ import annotations

from typing import Callable

from diag.checkenv import xid
from diag.checkenv.checks_launch import geometry
from diag.checkenv.envvars import minor_of
from diag.checkenv.facts import GpuDevice, GpuFacts, RankFacts
from diag.checkenv.gpurules import fix
from diag.checkenv.types import CheckResult, fail, ok, result, skip, warn
from diag.verdict import Category, Evidence, Status

XID_WINDOW_S = 24 * 3600.0
"""Xids older than this are history, not the node's state (the log holds the whole boot)."""
# nvml.h's clock event reasons that mean the hardware or the driver cut the clocks; the
# others (idle, application clocks, power cap under load, sync boost) are normal.
THROTTLE = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake",
            0x20: "SW thermal slowdown"}
COMPUTE_MODES = {1: "Exclusive Thread", 2: "Prohibited", 3: "Exclusive Process"}
HARDWARE = Category.OTHER  # analyze's words have no hardware category; OTHER until they do


def answered(facts: RankFacts) -> GpuFacts | None:
    """The GPU facts when NVML answered with at least one GPU, else None."""
    g = facts.gpu
    return g if g is not None and g.nvml_error is None and g.devices else None


def has_gpus(facts: RankFacts) -> bool:
    """The node has NVIDIA GPUs by any account: NVML, the driver's /proc, or CUDA."""
    return bool((facts.gpu and facts.gpu.devices) or facts.host_gpus or facts.gpu_uuids)


def gpu_name(d: GpuDevice) -> str:
    return f"GPU {d.index} ({d.bus_id})" if d.bus_id else f"GPU {d.index}"


def per_device(facts: RankFacts, check: str, flag: Callable[[GpuDevice], str | None],
               make: Callable[..., CheckResult], clean: str, **kw) -> list[CheckResult]:
    """One row for the node: the GPUs ``flag`` finds something on, or ``clean``."""
    g = answered(facts)
    if g is None:
        return []
    found = [f"{gpu_name(d)}: {said}" for d in g.devices if (said := flag(d))]
    if found:
        return [make(check, "; ".join(found), fix(check), **kw)]
    return [ok(check, f"{clean} on all {len(g.devices)} GPUs", **kw)]


# --- NVML itself ----------------------------------------------------------------------

def check_nvml(facts: RankFacts) -> list[CheckResult]:
    g = facts.gpu
    if g is None:
        return [skip("gpu.nvml", "GPU facts not collected")]
    if g.nvml_error is None and g.devices:
        models = ", ".join(sorted({d.name for d in g.devices if d.name})) or "unnamed"
        return [ok("gpu.nvml", f"NVML: {len(g.devices)} GPU(s) ({models}), driver "
                   f"{g.driver or '?'}, CUDA {g.cuda_driver or '?'}")]
    if g.nvml_error is None:
        return [skip("gpu.nvml", "NVML answered but lists no GPU")]
    if has_gpus(facts) and "not installed" not in g.nvml_error:
        return [warn("gpu.nvml", f"the node has GPUs but NVML gave no answers "
                     f"({g.nvml_error}): their health is not checked", fix("gpu.nvml"))]
    return [result("gpu.nvml", Status.SKIP, f"no GPU health checks: {g.nvml_error}",
                   "pip install 'ddiag[gpu]'" if has_gpus(facts) else "")]


# --- memory: ECC, row remapping, page retirement ----------------------------------------

def _ecc(d: GpuDevice) -> str | None:
    return (f"{d.ecc_volatile} uncorrected ECC error(s) since the driver loaded"
            if d.ecc_volatile else None)


def _ecc_lifetime(d: GpuDevice) -> str | None:
    return (f"{d.ecc_aggregate} uncorrected ECC error(s) over its life"
            if d.ecc_aggregate and not d.ecc_volatile else None)


def check_ecc(facts: RankFacts) -> list[CheckResult]:
    now = per_device(facts, "gpu.ecc", _ecc, fail, "no uncorrected ECC error",
                     category=HARDWARE)
    if not now or now[0].status is Status.FAIL:
        return now
    return per_device(facts, "gpu.ecc", _ecc_lifetime, warn, "no uncorrected ECC error",
                      category=HARDWARE)


def _remap(d: GpuDevice) -> str | None:
    said = ["row remapping failed (no spare rows left)"] if d.remap_failed else []
    said += ["a row remap is pending (takes effect at the next reset)"] if d.remap_pending else []
    said += ["a page retirement is pending"] if d.retired_pending else []
    return ", ".join(said) or None


def check_remap(facts: RankFacts) -> list[CheckResult]:
    return per_device(facts, "gpu.remap", _remap, fail, "no pending or failed row remap",
                      category=HARDWARE)


# --- clocks, links ----------------------------------------------------------------------

def _throttle(d: GpuDevice) -> str | None:
    reasons = [name for bit, name in THROTTLE.items() if (d.clock_reasons or 0) & bit]
    return f"clocks held down by {', '.join(reasons)}" if reasons else None


def check_throttle(facts: RankFacts) -> list[CheckResult]:
    return per_device(facts, "gpu.throttle", _throttle, warn, "no hardware or thermal "
                      "clock slowdown", category=Category.STRAGGLER)


def _pcie(d: GpuDevice) -> str | None:
    if d.pcie_width and d.pcie_width_max and d.pcie_width < d.pcie_width_max:
        return (f"PCIe link x{d.pcie_width} of x{d.pcie_width_max} "
                f"(gen {d.pcie_gen or '?'} of {d.pcie_gen_max or '?'})")
    return None


def check_pcie(facts: RankFacts) -> list[CheckResult]:
    g = answered(facts)
    widths = sorted({(d.pcie_width, d.pcie_gen) for d in g.devices}) if g else []
    shown = ", ".join(f"x{w or '?'} gen {gen or '?'}" for w, gen in widths)
    return per_device(facts, "gpu.pcie", _pcie, warn, f"PCIe links at full width ({shown}; "
                      "a lower generation at idle is power saving)",
                      category=Category.SLOW_LINK)


def _nvlink(d: GpuDevice) -> str | None:
    if not d.nvlinks_down:
        return None
    return (f"NVLink {','.join(map(str, d.nvlinks_down))} down "
            f"({d.nvlinks_up} of {d.nvlinks_up + len(d.nvlinks_down)} up)")


def check_nvlink(facts: RankFacts) -> list[CheckResult]:
    g = answered(facts)
    if g is not None and not any(d.nvlinks_up or d.nvlinks_down for d in g.devices):
        return [skip("gpu.nvlink", "no NVLink on these GPUs")]
    return per_device(facts, "gpu.nvlink", _nvlink, warn, "every NVLink up",
                      category=Category.SLOW_LINK)


# --- modes --------------------------------------------------------------------------------

def check_compute_mode(facts: RankFacts) -> list[CheckResult]:
    def flag(d: GpuDevice) -> str | None:
        mode = COMPUTE_MODES.get(d.compute_mode or 0)
        return f"compute mode {mode}" if mode else None
    g = answered(facts)
    prohibited = g is not None and any(d.compute_mode == 2 for d in g.devices)
    return per_device(facts, "gpu.compute_mode", flag, fail if prohibited else warn,
                      "compute mode Default")


def check_mig(facts: RankFacts) -> list[CheckResult]:
    return per_device(facts, "gpu.mig", lambda d: "MIG enabled" if d.mig_mode else None,
                      warn, "MIG off")


def check_persistence(facts: RankFacts) -> list[CheckResult]:
    return per_device(facts, "gpu.persistence", lambda d: "persistence mode off"
                      if d.persistence == 0 else None, warn, "persistence mode on")


# --- count, driver --------------------------------------------------------------------------

def check_count(facts: RankFacts) -> list[CheckResult]:
    g, local = answered(facts), geometry(facts.env)["LOCAL_WORLD_SIZE"]
    if g is None:
        return []
    n = len(g.devices)
    if local is None:
        return [skip("gpu.count", f"{n} GPU(s); LOCAL_WORLD_SIZE unset: no ranks to count")]
    summary = f"{n} GPU(s) on the node for LOCAL_WORLD_SIZE={local} rank(s)"
    if n < local:
        return [fail("gpu.count", f"{summary}: ranks would share GPUs", fix("gpu.count"),
                     env_var="LOCAL_WORLD_SIZE")]
    if n > local and "CUDA_VISIBLE_DEVICES" not in facts.env:
        return [warn("gpu.count", f"{summary}: {n - local} GPU(s) idle", fix("gpu.count"),
                     env_var="LOCAL_WORLD_SIZE")]
    return [ok("gpu.count", summary)]


def check_cuda_driver(facts: RankFacts) -> list[CheckResult]:
    g = answered(facts)
    if g is None:
        return []
    driver, built = minor_of(g.cuda_driver), minor_of(facts.versions.cuda)
    if driver is None or built is None:
        return [skip("gpu.cuda_driver", f"CUDA of the driver {g.cuda_driver or '?'}, of "
                     f"torch {facts.versions.cuda or 'none (a CPU build)'}")]
    summary = f"the driver supports CUDA {g.cuda_driver}, torch is built for {facts.versions.cuda}"
    if driver[0] < built[0]:
        return [fail("gpu.cuda_driver", f"{summary}: torch cannot use the GPUs",
                     fix("gpu.cuda_driver"), category=Category.VERSION_MISMATCH)]
    if driver < built:
        return [warn("gpu.cuda_driver", f"{summary}: runs by CUDA's minor-version "
                     "compatibility; PTX JIT needs a newer driver", fix("gpu.cuda_driver"),
                     category=Category.VERSION_MISMATCH)]
    return [ok("gpu.cuda_driver", summary, category=Category.VERSION_MISMATCH)]


# --- Xids ---------------------------------------------------------------------------------

def check_xid(facts: RankFacts) -> list[CheckResult]:
    g = facts.gpu
    if g is None or not has_gpus(facts):
        return []
    if not g.kernel_log_read:
        return [skip("gpu.xid", f"kernel log {g.kernel_log}", category=HARDWARE)]
    recent = [e for e in g.xids if e.age_s is None or e.age_s <= XID_WINDOW_S]
    older = len(g.xids) - len(recent)
    if not recent:
        return [ok("gpu.xid", f"no Xid in the last 24 h ({g.kernel_log}"
                   + (f"; {older} older" if older else "") + ")", category=HARDWARE)]
    return [_xid_result(recent, g, older)]


def _xid_result(events: list, g: GpuFacts, older: int) -> CheckResult:
    gpus = {d.bus_id: gpu_name(d) for d in g.devices}
    parts, fixes, worst = [], [], warn
    for number in sorted({e.xid for e in events}):
        these = [e for e in events if e.xid == number]
        info = xid.lookup(number)
        where = ", ".join(sorted({gpus.get(e.bus_id, e.bus_id) for e in these}))
        meaning = info.meaning if info else f"not in ddiag's table ({xid.CATALOG_URL})"
        parts.append(f"Xid {number} x{len(these)} on {where}: {meaning}")
        fixes.append(f"Xid {number}: {info.action}" if info else "")
        worst = fail if info and info.status == "fail" else worst
    evidence = tuple(Evidence("kernel log", None, f"NVRM: Xid (PCI:{e.bus_id}): {e.xid}, "
                              f"{e.text}") for e in events[-5:])
    return worst("gpu.xid", f"{len(events)} Xid line(s) in the last 24 h ({g.kernel_log}): "
                 + "; ".join(parts), "; ".join(f for f in fixes if f) or fix("gpu.xid"),
                 category=HARDWARE, evidence=evidence)


CHECKS = (check_nvml, check_ecc, check_remap, check_throttle, check_pcie, check_nvlink,
          check_compute_mode, check_mig, check_persistence, check_count, check_cuda_driver,
          check_xid)
