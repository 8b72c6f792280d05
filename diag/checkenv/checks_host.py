"""Host checks: /dev/shm, open-file and locked-memory limits, InfiniBand and libibverbs."""

from __future__ import annotations

from diag import fixes
from diag.checkenv.facts import UNLIMITED, RankFacts
from diag.checkenv.types import CheckResult, fail, ok, skip, warn

GiB = 2**30
MiB = 2**20
SHM_MIN = 1 * GiB       # Docker's default is 64 MiB; NCCL's SHM transport and DataLoader
SHM_FAIL = 128 * MiB    # workers then die with "No space left on device" / bus errors.
NOFILE_MIN = 4096       # gloo holds a socket per peer, DataLoader an fd per shared tensor.


def _size(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def check_shm(facts: RankFacts) -> list[CheckResult]:
    size = facts.shm_bytes
    if size is None:
        return [fail("host.shm", "/dev/shm is missing", "mount a tmpfs on /dev/shm "
                     "(docker: --shm-size=16g or --ipc=host)")]
    if size < SHM_MIN:
        status = fail if size < SHM_FAIL else warn
        return [status("host.shm", f"/dev/shm is {_size(size)}: NCCL's shared-memory "
                       "transport and DataLoader workers need more", fixes.SHM)]
    return [ok("host.shm", f"/dev/shm is {_size(size)}")]


def check_nofile(facts: RankFacts) -> list[CheckResult]:
    lim = facts.limits
    if lim is None:
        return [skip("host.nofile", "limits not read")]
    soft, hard = lim.nofile_soft, lim.nofile_hard
    if soft != UNLIMITED and soft < NOFILE_MIN:
        to = "unlimited" if hard == UNLIMITED else max(hard, NOFILE_MIN)
        return [warn("host.nofile", f"ulimit -n is {soft} (hard {hard}): large jobs run out "
                     "of file descriptors ('Too many open files')",
                     f"raise it: ulimit -n {to} in the job script (above the hard limit: "
                     "limits.conf or LimitNOFILE)")]
    return [ok("host.nofile", f"ulimit -n is {soft} (hard {hard})")]


def ib_in_use(facts: RankFacts) -> bool:
    """NCCL will try InfiniBand: devices present and NCCL_IB_DISABLE not 1."""
    return bool(facts.ib_devices) and facts.env.get("NCCL_IB_DISABLE", "0").strip() != "1"


def check_memlock(facts: RankFacts) -> list[CheckResult]:
    lim = facts.limits
    if lim is None or not ib_in_use(facts):
        return [skip("host.memlock", "no InfiniBand in use: locked memory does not matter")]
    if lim.memlock_soft != UNLIMITED:
        return [fail("host.memlock", f"ulimit -l is {lim.memlock_soft // 1024} KiB with "
                     "InfiniBand in use: verbs cannot pin NCCL's buffers",
                     "set 'ulimit -l unlimited' (limits.conf memlock, or docker "
                     "--ulimit memlock=-1)")]
    return [ok("host.memlock", "ulimit -l is unlimited")]


def check_infiniband(facts: RankFacts) -> list[CheckResult]:
    devs, var = facts.ib_devices, "NCCL_IB_DISABLE"
    ib_vars = sorted(k for k in facts.env if k.startswith("NCCL_IB_") and k != var)
    if not devs:
        if ib_vars and facts.env.get(var, "0").strip() != "1":
            return [warn("host.infiniband", f"no InfiniBand devices in /sys/class/infiniband "
                         f"but {', '.join(ib_vars)} set: NCCL will log 'NET/IB : No device "
                         "found' and fall back to TCP sockets",
                         f"{fixes.EXPOSE_IB}, or drop the NCCL_IB_* settings",
                         env_var=ib_vars[0])]
        return [skip("host.infiniband", "no InfiniBand devices")]
    return [_ib_present(facts, devs)]


def _ib_present(facts: RankFacts, devs: tuple[str, ...]) -> CheckResult:
    var, names = "NCCL_IB_DISABLE", ", ".join(devs)
    if not ib_in_use(facts):
        return warn("host.infiniband", f"InfiniBand present ({names}) but NCCL_IB_DISABLE=1: "
                    "inter-node traffic goes over TCP sockets", "unset NCCL_IB_DISABLE to use it",
                    env_var=var)
    if not facts.dev_infiniband:
        return fail("host.infiniband", f"InfiniBand present ({names}) but /dev/infiniband is "
                    "missing: verbs cannot open the devices, NCCL falls back to sockets",
                    fixes.EXPOSE_IB)
    if facts.libibverbs_error:
        return fail("host.infiniband", f"InfiniBand present ({names}) but libibverbs does not "
                    f"load ({facts.libibverbs_error}): NCCL falls back to sockets",
                    fixes.LIBIBVERBS)
    return ok("host.infiniband", f"InfiniBand {names}: devices, /dev/infiniband and "
              "libibverbs present")


def check_libibverbs(facts: RankFacts) -> list[CheckResult]:
    if facts.libibverbs_error is None:
        return [ok("host.libibverbs", "libibverbs.so.1 loads")]
    if facts.ib_devices:
        return []  # check_infiniband reports it, with the devices that need it
    return [skip("host.libibverbs", f"libibverbs not loadable ({facts.libibverbs_error}); "
                 "not needed without InfiniBand")]


CHECKS = (check_shm, check_nofile, check_memlock, check_infiniband, check_libibverbs)
