"""A setting printed in the log, and a failure in the subsystem that setting governs.

NCCL prints the variables it reads ("NCCL_SOCKET_IFNAME set by environment to ib0"), and
launch scripts echo their exports and command lines (``export GLOO_SOCKET_IFNAME=eth1``,
``mpirun -x NCCL_IB_GID_INDEX=0``). When the code that reads a setting is the code that
then fails (NCCL's socket layer cannot connect, its IB transport gets error completions,
gloo cannot connect its pairs), the setting is the first thing to check: the user chose
it, and it decides which interface, device or GID that subsystem uses. This is one
principle over a small table, not a rule per message: which variables govern which
subsystem (by the source file of the failing message's template, catalog/emitted.py's
``SUBSYSTEMS``, or by the signals the hand-written catalog gives those failures), the
category a wrong value is, and the fix for that setting.

A failure that is itself a consequence (a peer reset the connection, a remote process
exited) is not one the setting explains: only initiating failures count.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.analyze.catalog.emitted import by_id, subsystem
from diag.analyze.detectors.common import SignalIndex, earliest, index, make
from diag.analyze.signals import Signal
from diag.verdict import Basis, Category, Finding

DETECTOR = "settings"


@dataclass(frozen=True)
class Governs:
    """``var`` decides what ``subsystems`` use; a wrong value is ``category``."""

    var: str
    subsystems: tuple[str, ...]  # catalog/emitted.py SUBSYSTEMS names
    signals: tuple[tuple[str, str | None], ...]  # (kind, its "what" field or None: any)
    category: Category
    fix: str
    source: str  # where the emitter reads the variable


_SOCKET_FAILS = (("nccl_connect_failed", None), ("nccl_no_interface", None),
                 ("nccl_socket_family", None))
_GLOO_FAILS = tuple((("gloo_error", w) for w in ("refused", "unreachable", "connect_timeout",
                                                  "no_iface", "connect_full_mesh")))
_IB_FAILS = (("nccl_ib_error", None),)

GOVERNS = (
    Governs("NCCL_SOCKET_IFNAME", ("socket", "bootstrap"), _SOCKET_FAILS,
            Category.WRONG_INTERFACE,
            "NCCL_SOCKET_IFNAME={value} picks the interface NCCL's bootstrap and socket "
            "transport use, and connections over it fail: set it on every host to an "
            "interface that reaches the other nodes (`ip -br addr`; the same subnet on every "
            "host, not a docker bridge, IPoIB only if every node has it), or unset it to let "
            "NCCL choose; if it is right, check the firewall and routes between the hosts.",
            "NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces; src/bootstrap.cc "
            "bootstrapNetInit"),
    Governs("NCCL_SOCKET_FAMILY", ("socket", "bootstrap"), _SOCKET_FAILS,
            Category.WRONG_INTERFACE,
            "NCCL_SOCKET_FAMILY={value} restricts NCCL to one address family, and its "
            "sockets fail: unset it, or make sure every host has an address of that family "
            "on the interface NCCL picks.",
            "NVIDIA/nccl src/misc/socket.cc ncclEnvSocketFamily"),
    Governs("GLOO_SOCKET_IFNAME", ("gloo", "ProcessGroupGloo"), _GLOO_FAILS,
            Category.WRONG_INTERFACE,
            "GLOO_SOCKET_IFNAME={value} picks the interface gloo binds and advertises, and "
            "its pairs cannot connect: set it on every host to an interface that reaches the "
            "other nodes (`ip -br addr`), or unset it; if it is right, check the firewall "
            "between the hosts (gloo uses ephemeral ports).",
            "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp "
            "createDeviceForInterface"),
    Governs("NCCL_IB_GID_INDEX", ("IB/net",), _IB_FAILS, Category.ENV_MISCONFIG,
            "NCCL_IB_GID_INDEX={value} selects the GID NCCL's IB transport addresses peers "
            "with, and its transfers fail: on RoCE use the RoCE v2 GID of the port's IPv4 "
            "address (`show_gids`, usually 3), the same on every node.",
            "NVIDIA/nccl src/transport/net_ib/init.cc ncclIbGetGidIndex"),
    Governs("NCCL_IB_HCA", ("IB/net",), _IB_FAILS + (("nccl_ib_no_device", None),),
            Category.ENV_MISCONFIG,
            "NCCL_IB_HCA={value} chooses the HCAs (and ports) NCCL's IB transport uses, and "
            "that transport fails: list the active devices with `ibv_devinfo` / `ibstat` and "
            "name them exactly (prefix match unless '=' is given; ':port' selects a port).",
            "NVIDIA/nccl src/transport/net_ib/init.cc ncclIbInitDevices"),
    Governs("NCCL_IB_TC", ("IB/net",), _IB_FAILS, Category.ENV_MISCONFIG,
            "NCCL_IB_TC={value} sets the traffic class of NCCL's IB packets, and its "
            "transfers fail: use the class the fabric's lossless (PFC) queue expects, or "
            "unset it.",
            "NVIDIA/nccl src/transport/net_ib/connect.cc ncclIbInitCommDevBase"),
    Governs("NCCL_IB_SL", ("IB/net",), _IB_FAILS, Category.ENV_MISCONFIG,
            "NCCL_IB_SL={value} sets the service level of NCCL's IB queue pairs, and its "
            "transfers fail: use a level the subnet manager routes, or unset it.",
            "NVIDIA/nccl src/transport/net_ib/connect.cc ncclIbRtrQp"),
)


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    set_vars = _settings(idx)
    out = []
    for rule in GOVERNS:
        settings = set_vars.get(rule.var)
        failures = _failures(idx, rule) if settings else []
        if failures:
            out.append(_finding(rule, settings, failures))
    return out


def _settings(idx: SignalIndex) -> dict[str, list[Signal]]:
    found: dict[str, list[Signal]] = {}
    for s in idx.of("env"):
        if s.fields.get("value"):
            found.setdefault(s.fields.get("var"), []).append(s)
    return found


def _failures(idx: SignalIndex, rule: Governs) -> list[Signal]:
    known = by_id()
    out = [s for kind, what in rule.signals for s in idx.of(kind)
           if what is None or s.fields.get("what") == what]
    for s in idx.of("emitted"):
        t = known.get(s.fields.get("template"))
        if t is not None and t.role == "initiating" and \
                subsystem(t.file, t.emitter) in rule.subsystems:
            out.append(s)
    return out


def _finding(rule: Governs, settings: list[Signal], failures: list[Signal]) -> Finding:
    values = sorted({str(s.fields.get("value")) for s in settings})
    value = ",".join(values)[:80]
    first = earliest(failures)
    title = (f"{rule.var}={value} is set, and the {rule.subsystems[0]} layer it configures "
             f"fails: {first.text.strip()[:120]}")
    return make(rule.category, title, rule.fix.replace("{value}", value), DETECTOR, Basis.SETTING,
                settings[:2] + sorted(failures, key=lambda s: (s.file, s.line))[:3],
                hosts=[s.host for s in settings], env_var=rule.var,  # where it is set
                details={"principle": "setting_governs_failure", "source": rule.source})
