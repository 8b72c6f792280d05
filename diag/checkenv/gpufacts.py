"""Read the node's GPU health through NVML (pynvml, imported only here and only when asked)
and the Xid lines of its kernel log. Never raises: what could not be read says why.

    python -m diag.checkenv.gpufacts --record FILE   # on a GPU node: NVML's answers, as
                                                     # the GPU checks' test fixtures hold them
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import socket
import subprocess
from functools import partial
from pathlib import Path
from typing import Any, Callable

from diag.checkenv import xid
from diag.checkenv.facts import GpuDevice, GpuFacts
from diag.checkenv.nvmlrecord import Recording

# nvml.h's values, spelled here so that a recording needs no pynvml to be replayed.
UNCORRECTED = 1             # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE, AGGREGATE = 0, 1  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
NVLINK_LINKS = 18           # links per GPU on Hopper and Blackwell; beyond, NVML says so
KERNEL_LOG_TIMEOUT_S = 5.0
KERNEL_LOG_MAX_CHARS = 8 << 20  # the newest part of a huge journal is the part that matters
KERNEL_LOGS = (("dmesg",),
               ("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"))
"""dmesg first; where the kernel restricts it to root (dmesg_restrict), the journal, in
dmesg's monotonic stamps, of this boot only."""

Ask = Callable[..., Any]


def _ask(nvml: Any, missed: list[str], name: str, *args: Any) -> Any:
    """One NVML call; None (and the call noted) where this GPU or pynvml cannot answer."""
    try:
        return getattr(nvml, name)(*args)
    except (nvml.NVMLError, AttributeError):  # Not Supported; an older pynvml lacks it
        missed.append(name)
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


def _first(ask: Ask, names: tuple[str, ...], *args: Any) -> Any:
    """The first of several spellings that answers (NVML renamed some calls)."""
    for name in names:
        answer = ask(name, *args)
        if answer is not None:
            return answer
    return None


def _nvlinks(nvml: Any, handle: Any) -> tuple[int, tuple[int, ...]]:
    """Links up, and the numbers of those down. A link the GPU lacks is an NVML error,
    not a link down: a GPU without NVLink has neither."""
    states = {}
    for link in range(NVLINK_LINKS):
        try:
            states[link] = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except (nvml.NVMLError, AttributeError):
            continue
    return sum(1 for s in states.values() if s), tuple(k for k, s in states.items() if not s)


def device(nvml: Any, index: int) -> GpuDevice:
    handle, missed = nvml.nvmlDeviceGetHandleByIndex(index), []
    ask = partial(_ask, nvml, missed)
    rows = ask("nvmlDeviceGetRemappedRows", handle)  # (corrected, uncorrected, pending, failed)
    pending = ask("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    mig, up_down = ask("nvmlDeviceGetMigMode", handle), _nvlinks(nvml, handle)
    return GpuDevice(
        index, _text(ask("nvmlDeviceGetUUID", handle)), _text(ask("nvmlDeviceGetName", handle)),
        xid.bus_id(_text(getattr(ask("nvmlDeviceGetPciInfo", handle), "busId", ""))),
        ask("nvmlDeviceGetTotalEccErrors", handle, UNCORRECTED, VOLATILE),
        ask("nvmlDeviceGetTotalEccErrors", handle, UNCORRECTED, AGGREGATE),
        bool(rows[2]) if rows else None, bool(rows[3]) if rows else None,
        None if pending is None else bool(pending),
        _first(ask, ("nvmlDeviceGetCurrentClocksEventReasons",
                     "nvmlDeviceGetCurrentClocksThrottleReasons"), handle),
        ask("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        ask("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        ask("nvmlDeviceGetCurrPcieLinkWidth", handle),
        ask("nvmlDeviceGetMaxPcieLinkWidth", handle), up_down[0], up_down[1],
        ask("nvmlDeviceGetComputeMode", handle), mig[0] if mig else None,
        ask("nvmlDeviceGetPersistenceMode", handle), tuple(dict.fromkeys(missed)))


def cuda_text(version: int | None) -> str | None:
    """NVML's 12040 -> "12.4" (major * 1000 + minor * 10)."""
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


def _read(nvml: Any) -> GpuFacts:
    missed: list[str] = []
    ask = partial(_ask, nvml, missed)
    count = ask("nvmlDeviceGetCount")
    if count is None:
        return GpuFacts(nvml_error="NVML answered nvmlInit but not nvmlDeviceGetCount")
    return GpuFacts(driver=_text(ask("nvmlSystemGetDriverVersion")) or None,
                    cuda_driver=cuda_text(ask("nvmlSystemGetCudaDriverVersion")),
                    devices=tuple(device(nvml, i) for i in range(count)))


def nvml_facts(nvml: Any = None) -> GpuFacts:
    """``nvml``: pynvml, or a stand-in (a recording being made or replayed)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return GpuFacts(nvml_error=f"pynvml is not installed ({exc}); "
                            "pip install 'ddiag[gpu]' (nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no GPU: all mean "none"
        return GpuFacts(nvml_error=f"nvmlInit failed: {_text(exc) or type(exc).__name__}")
    try:
        return _read(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the answers are in; shutting down is best effort
            pass


def kernel_log(run: Callable[..., Any] = subprocess.run) -> tuple[str, str, bool]:
    """The kernel log's text, where it came from (or why it could not be read), and
    whether it was read. Bounded: 5 s a command, the newest 8 MiB."""
    why = []
    for cmd in KERNEL_LOGS:
        if shutil.which(cmd[0]) is None:
            why.append(f"{cmd[0]}: not installed")
            continue
        try:
            done = run(list(cmd), capture_output=True, text=True, errors="replace",
                       timeout=KERNEL_LOG_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why.append(f"{cmd[0]}: {exc}")
            continue
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout[-KERNEL_LOG_MAX_CHARS:], " ".join(cmd[:2]), True
        said = (done.stderr or "").strip().splitlines()
        why.append(f"{cmd[0]}: {said[-1] if said else f'no output (exit {done.returncode})'}")
    return "", "not read: " + "; ".join(why), False


def uptime(path: str = "/proc/uptime") -> float | None:
    try:
        with open(path) as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def gpu_facts(host_gpus: int | None, nvml: Any = None,
              log: Callable[[], tuple[str, str, bool]] = kernel_log) -> GpuFacts:
    """NVML's answers, and the Xid lines when the node has an NVIDIA GPU: also when NVML
    failed, since a GPU that fell off the bus (Xid 79) can take NVML with it."""
    facts = nvml_facts(nvml)
    if not facts.devices and host_gpus == 0:
        return facts
    text, where, read = log()
    return dataclasses.replace(facts, xids=xid.parse_log(text, uptime()), kernel_log=where,
                               kernel_log_read=read)


def record(path: Path) -> dict:
    """Write this node's NVML answers and NVRM kernel-log lines to ``path``."""
    try:
        import pynvml
    except ImportError as exc:
        raise SystemExit(f"--record needs pynvml ({exc}): pip install 'ddiag[gpu]'") from None

    rec = Recording(pynvml)
    facts = nvml_facts(rec)
    text, where, _ = kernel_log()
    nvrm = [line for line in text.splitlines() if "NVRM" in line][-1000:]
    doc = rec.to_json(host=socket.gethostname(), uptime_s=uptime(), kernel_log_source=where,
                      kernel_log=nvrm, nvml_error=facts.nvml_error)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write NVML's answers (format ddiag.nvml_record) to FILE")
    args = parser.parse_args(argv)
    if args.record:
        doc = record(args.record)
        print(f"{args.record}: {len(doc['devices'])} GPU(s)"
              + (f", NVML: {doc['nvml_error']}" if doc["nvml_error"] else ""))
        return 0
    print(json.dumps(dataclasses.asdict(gpu_facts(None)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
