"""NVML's answers written down on a GPU machine (``Recording``) and played back where there
is none (``Replay``), so the GPU checks are tested on real answers without a GPU.

A recording (format ``ddiag.nvml_record``) keys each answer by the call and its arguments,
the device handle replaced by the GPU's index: ``{"system": {"nvmlDeviceGetCount": 8},
"devices": [{"nvmlDeviceGetUUID": "GPU-...", "nvmlDeviceGetNvLinkState(0)": 1}, ...]}``.
An NVML error is kept as ``{"nvml_error": "Not Supported"}`` and raised again on replay.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any, Callable

from diag.format import schema


def key(name: str, args: tuple) -> str:
    return f"{name}({','.join(map(str, args))})" if args else name


def jsonable(value: Any) -> Any:
    """An NVML answer as JSON: bytes as text, ctypes structures as dicts of their fields."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, ctypes.Structure):
        return {f[0]: jsonable(getattr(value, f[0])) for f in value._fields_}
    if isinstance(value, ctypes.Array):
        return None  # raw buffers (reserved fields) say nothing a check reads
    return value


class _Handle:
    """A device handle that remembers its GPU's index, so answers can be keyed by it."""

    def __init__(self, index: int, real: Any) -> None:
        self.index, self.real = index, real


class Recording:
    """Wraps pynvml: every ``nvml*`` call answers as the real one and is written down."""

    def __init__(self, nvml: Any) -> None:
        self._nvml, self.NVMLError = nvml, nvml.NVMLError
        self.system: dict[str, Any] = {}
        self.devices: dict[int, dict[str, Any]] = {}

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802 - NVML's name
        return _Handle(index, self._nvml.nvmlDeviceGetHandleByIndex(index))

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(real)):
            return real  # constants and error classes pass through
        return lambda *args: self._call(name, real, args)

    def _call(self, name: str, real: Callable[..., Any], args: tuple) -> Any:
        handle = args[0] if args and isinstance(args[0], _Handle) else None
        rest = args[1:] if handle else args
        book = self.devices.setdefault(handle.index, {}) if handle else self.system
        try:
            answer = real(*((handle.real,) + rest if handle else args))
        except self.NVMLError as exc:
            book[key(name, rest)] = {"nvml_error": str(exc)}
            raise
        book[key(name, rest)] = jsonable(answer)
        return answer

    def to_json(self, **extra: Any) -> dict:
        return {**schema.stamp(schema.NVML_RECORD), **extra, "system": self.system,
                "devices": [self.devices[i] for i in sorted(self.devices)]}


class ReplayError(Exception):
    """Raised where the recording holds an NVML error (pynvml's NVMLError stands in)."""


class Replay:
    """A stand-in for the pynvml module that answers from a recording. A call the
    recording lacks raises "Not Supported", as NVML does for what a GPU cannot say."""

    NVMLError = ReplayError

    def __init__(self, doc: dict, source: str = "nvml recording") -> None:
        schema.check(doc, schema.NVML_RECORD, source)
        self.system, self.devices = doc.get("system", {}), doc.get("devices", [])

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's name
        if "nvmlInit" in self.system:  # a recording made where nvmlInit failed fails again
            self._answer("nvmlInit", ())

    def nvmlShutdown(self) -> None:  # noqa: N802 - NVML's name
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - NVML's name
        if not 0 <= index < len(self.devices):
            raise ReplayError("Invalid Argument")
        return index

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        return lambda *args: self._answer(name, args)

    def _answer(self, name: str, args: tuple) -> Any:
        device = name.startswith("nvmlDevice") and args and isinstance(args[0], int)
        book = self.devices[args[0]] if device else self.system
        answer = book.get(key(name, args[1:] if device else args),
                          {"nvml_error": "Not Supported"})
        if isinstance(answer, dict) and set(answer) == {"nvml_error"}:
            raise ReplayError(answer["nvml_error"])
        return SimpleNamespace(**answer) if isinstance(answer, dict) else answer


__all__ = ["Recording", "Replay", "ReplayError", "jsonable", "key"]
