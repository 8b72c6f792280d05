"""Gloo (torch's CPU backend, vendored as third_party/gloo): its transport errors reach the
log inside torch's exception, ``[.../gloo/transport/tcp/pair.cc:598] Connection closed by
peer [10.0.0.2]:5432``, with gloo's file and line in the brackets.

One ``gloo_error`` per line: the first kind whose words it holds (in this file's order),
with the peer, interface and sizes wherever the line puts them.
"""

from __future__ import annotations

import re

from diag.analyze.catalog.spec import (Example, Signature, Source, compute, const, has,
                                       search)

GLOO = "facebookincubator/gloo"
PAIR = "gloo/transport/tcp/pair.cc"

# Address::str (gloo/transport/tcp/address.cc): "[ip]:port", "[ip]:port$seq"; gloo's own
# connect log holds "local=[...]" first, so "remote=[...]" wins where it is
_PEER = re.compile(r"(?:remote=)?\[(?P<addr>[\d.:a-fA-F]+)\]:(?P<port>\d+)")
_REMOTE = re.compile(r"remote=\[(?P<addr>[\d.:a-fA-F]+)\]:(?P<port>\d+)")
_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\.? (?P<a>\d+) vs (?P<b>\d+)")


def _peer(part: str):
    def read(m: re.Match):
        found = _REMOTE.search(m.string) or _PEER.search(m.string)
        if found is None:
            return None
        return found.group("addr") if part == "addr" else int(found.group("port"))
    return compute(read)


def _sizes(m: re.Match) -> list[int] | None:
    found = _SIZES.search(m.string)
    return [int(found.group("a")), int(found.group("b"))] if found else None


def _fields(what: str) -> dict:
    return {"what": const(what), "named": has("gloo", "Gloo"), "peer": _peer("addr"),
            "port": _peer("port"), "iface": search(r"Unable to find address for:?\s*([\w.:-]+)"),
            "sizes": compute(_sizes)}


def _kind(what: str, needle: str | tuple, source: Source, example: str, expect: dict,
          near_miss: str, also: tuple = (), more: tuple = ()) -> Signature:
    needles = needle if isinstance(needle, tuple) else (needle,)
    return Signature(
        id=f"gloo.{what}", signal="gloo_error", scope="gloo", oneof="gloo", prefilter=(needles,),
        pattern="|".join(map(re.escape, needles)), fields=_fields(what), source=source,
        also=also, examples=(Example(example, {"what": what, **expect}),) + more,
        near_misses=(near_miss,))


ENTRIES = (
    Signature(
        id="gloo.connected_peers", signal="world_size", prefilter=("[Gloo]",),
        pattern=r"\[Gloo\] Rank (?P<rank>\d+) is connected to (?P<peers>\d+) peer ranks",
        fields={"rank": int, "n": compute(lambda m: int(m.group("peers")) + 1),
                "source": const("gloo")},
        source=Source(GLOO, "gloo/transport/tcp/context.cc", "Context::printConnectivityInfo"),
        examples=(Example("[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of "
                          "connected peer ranks is : 3", {"rank": 1, "n": 4}),),
        near_misses=("[Gloo] Rank 1 is NOT connected to: [2]",)),
    _kind("connect_full_mesh", "connectFullMesh",
          Source("pytorch/pytorch", "torch/csrc/distributed/c10d/ProcessGroupGloo.cpp",
                 "ProcessGroupGloo::ProcessGroupGloo", "wraps gloo's Context::connectFullMesh"),
          "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
          "pair.cc:144] no error", {"named": True}, "connectFullMesh done"),
    _kind("closed_by_peer", "closed by peer", Source(GLOO, PAIR, "Pair::read"),
          "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed "
          "by peer [10.0.0.2]:5432", {"peer": "10.0.0.2", "port": 5432},
          "gloo: the peer has not closed"),
    _kind("reset_by_peer", "reset by peer", Source(GLOO, PAIR, "Pair::read"),
          "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:575] Read error "
          "[10.0.0.3]:26741: Connection reset by peer", {"peer": "10.0.0.3"},
          "gloo reset the counters"),
    _kind("refused", "Connection refused",
          Source(GLOO, PAIR, "Pair::handleConnecting",
                 "to 2023: 'connect [ip]:port: <strerror>'"),
          "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
          "[127.0.1.1]:45767: Connection refused", {"peer": "127.0.1.1", "port": 45767},
          "gloo: connection accepted",
          also=(Source(GLOO, "gloo/transport/tcp/helpers.h", "ConnectOperation::handleEvents",
                       "2025+: 'timed out connecting: ' + SystemError::what (error.cc), "
                       "'SO_ERROR: <strerror>, remote=[ip]:port'"),
                Source(GLOO, "gloo/transport/tcp/debug_logger.cc", "DebugLogger::log",
                       "2025+, each failed try: 'failed to connect, ... local=[..], "
                       "remote=[..], error=...'")),
          more=(Example("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
                        "timed out connecting: SO_ERROR: Connection refused, "
                        "remote=[10.2.0.8]:41773", {"peer": "10.2.0.8", "port": 41773}),
                Example("[/opt/pytorch/third_party/gloo/gloo/transport/tcp/debug_logger.cc:12] "
                        "ERROR failed to connect, willRetry=1, retry=2, retryLimit=3, rank=1, "
                        "size=4, local=[10.2.0.9]:50712, remote=[127.0.1.1]:29811, "
                        "error=SO_ERROR: Connection refused, remote=[127.0.1.1]:29811",
                        {"peer": "127.0.1.1", "port": 29811}))),
    _kind("unreachable", ("No route to host", "Network is unreachable"),
          Source(GLOO, PAIR, "Pair::handleConnecting",
                 "to 2023: 'connect [ip]:port: <strerror>'"),
          "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
          "[10.4.1.7]:39211: No route to host", {"peer": "10.4.1.7", "port": 39211},
          "gloo: route to host found",
          also=(Source(GLOO, "gloo/transport/tcp/helpers.h", "ConnectOperation::handleEvents",
                       "2025+: 'timed out connecting: SO_ERROR: <strerror>, remote=[ip]:port'"),),
          more=(Example("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144]"
                        " timed out connecting: SO_ERROR: Network is unreachable, "
                        "remote=[fd00::12]:40001", {"peer": "fd00::12"}),)),
    _kind("timeout", "Timed out waiting",
          Source(GLOO, "gloo/transport/tcp/unbound_buffer.cc", "UnboundBuffer::waitRecv",
                 "and waitSend"),
          "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
          "waiting 1800000ms for recv operation to complete", {"named": True},
          "gloo: waiting for peers"),
    _kind("no_iface", "Unable to find address",
          Source(GLOO, "gloo/transport/tcp/device.cc", "lookupAddrForIface",
                 "and lookupAddrForHostname"),
          "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] "
          "ifa != nullptr. Unable to find address for: eth9", {"iface": "eth9"},
          "gloo: found address for eth0"),
    _kind("size_mismatch", "op.preamble.length", Source(GLOO, PAIR, "Pair::prepareRead"),
          "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
          "op.preamble.length <= op.nbytes. 8 vs 4", {"sizes": [8, 4]},
          "gloo: op.nbytes checked"),
    _kind("connect_timeout", ("Connection timed out", "Connect timeout", "timed out connecting"),
          Source(GLOO, PAIR, "Pair::handleConnecting"),
          "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
          "[10.1.2.3]:33907: Connection timed out", {"peer": "10.1.2.3"},
          "gloo: connection up",
          also=(Source(GLOO, "gloo/transport/tcp/pair.h", "Pair::waitUntil",
                       "'Connect timeout [ip]:port' when the peer never connects back"),),
          more=(Example("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.h:311]"
                        " Connect timeout [10.1.2.4]:51234", {"peer": "10.1.2.4",
                                                              "port": 51234}),)),
    Signature(
        id="gloo.other", signal="gloo_error", scope="gloo", oneof="gloo",
        prefilter=(("gloo/transport", "Gloo"),), pattern=r"gloo/transport|Gloo",
        fields=_fields("other"),
        source=Source(GLOO, "gloo/common/logging.cc", "EnforceNotMet::EnforceNotMet",
                      "any GLOO_ENFORCE failure: '[enforce fail at <gloo file>:<line>] ...'"),
        examples=(Example("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/"
                          "pair.cc:446] something else", {"what": "other", "named": True}),),
        near_misses=("using gloo for the CPU group",)),
)
