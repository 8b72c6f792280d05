"""Small lookups several detectors share: exceptions per rank, stack dumps per rank."""

from __future__ import annotations

import re

from diag.analyze.inputs import RANK_IN_NAME, Inputs
from diag.verdict import Evidence


def exception_ranks(inputs: Inputs) -> set[int]:
    return {rank for rank, log in inputs.events.items() if log.of_kind("exception")}


def closed_ranks(inputs: Inputs) -> set[int]:
    """Ranks whose event log ends with a clean shutdown."""
    return {rank for rank, log in inputs.events.items() if log.of_kind("close")}


def pids_by_rank(inputs: Inputs) -> dict[int, int]:
    return {rank: log.header.get("pid") for rank, log in inputs.events.items() if log.header}


def stack_evidence(inputs: Inputs, rank: int, frames: int = 4) -> list[Evidence]:
    """The innermost frames of the rank's main thread, from a py-spy JSON dump whose
    file name or pid says it is that rank's."""
    found = main_stack(inputs, rank)
    if found is None:
        return []
    path, stack = found
    shown = stack[:frames]
    user = next((f for f in stack if _is_user_code(f)), None)
    if user is not None and user not in shown:
        shown.append(user)
    return [Evidence(path, None, _frame_text(f)) for f in shown]


def main_stack(inputs: Inputs, rank: int) -> tuple[str, list[dict]] | None:
    """(dump file, the main thread's frames innermost first) of the rank, if dumped."""
    pid = pids_by_rank(inputs).get(rank)
    for doc in inputs.docs_of("pyspy"):
        threads = doc.doc if isinstance(doc.doc, list) else [doc.doc]
        match = RANK_IN_NAME.search(doc.path.rsplit("/", 1)[-1])
        if not ((match and int(match.group(1)) == rank) or
                (pid is not None and any(t.get("pid") == pid for t in threads))):
            continue
        main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0])
        return doc.path, [f for f in main.get("frames", []) if isinstance(f, dict)]
    return None


def comm_wait_frame(inputs: Inputs, rank: int) -> str | None:
    """The frame a rank is blocked in when that is torch.distributed's own code (a
    collective, a p2p wait, a store get): it waits on another rank. None otherwise."""
    found = main_stack(inputs, rank)
    if not found or not found[1]:
        return None
    inner = found[1][0]
    path = str(inner.get("filename", "")).replace("\\", "/")
    return _frame_text(inner) if "torch/distributed/" in path else None


def blocking_frame(evidence: list[Evidence]) -> Evidence | None:
    """The innermost frame of the user's own code: where *their* program is stuck
    (the frames above it are the library or stdlib call it is blocked in)."""
    return next((e for e in evidence if _USER_MARK in e.text), evidence[0] if evidence else None)


_LIBRARY_PATHS = ("/lib/python", "site-packages", "dist-packages", "<frozen")
_USER_MARK = " <- user code"


# ddiag's own wrappers sit between the user's call and torch's; they are not where the
# user's program is stuck, wherever ddiag is installed from.
_OWN_FRAMES = re.compile(r"[/\\]diag[/\\](collectives|instrument|eventlog|flight_recorder|"
                         r"metrics)\.py$")


def _is_user_code(frame: dict) -> bool:
    filename = str(frame.get("filename", ""))
    return bool(filename) and not any(p in filename for p in _LIBRARY_PATHS) \
        and not _OWN_FRAMES.search(filename)


def _frame_text(frame: dict) -> str:
    where = frame.get("short_filename") or frame.get("filename")
    mark = _USER_MARK if _is_user_code(frame) else ""
    return f"{frame.get('name')} ({where}:{frame.get('line')}){mark}"
