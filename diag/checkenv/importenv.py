"""The variables ``import torch`` validates and raises on, set aside before check-env (or
the torchrun it starts) imports torch, so that a bad value is a finding, not a crash.

Set aside, ``NAME=value`` travels as ``DDIAG_ASIDE_NAME=value``: torch never reads it,
torchrun and srun pass it to the ranks unchanged, and ``real_env`` turns it back into
``NAME`` for the facts a rank records. After torch is imported, ``vet_after_import``
re-runs torch's own parsers on each value, puts the valid ones back and reports the rest.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator, Mapping, MutableMapping, Sequence

from diag.checkenv.catalog import CATALOG

IMPORT_CHECKED = tuple(name for name, var in CATALOG.items() if var.import_checked)
ASIDE = "DDIAG_ASIDE_"


def set_aside(env: MutableMapping[str, str]) -> dict[str, str]:
    """Move every import-checked variable of ``env`` to its carrier; returns what moved.

    All of them move, valid or not: TORCH_LOGS names are known only to torch's registry,
    and none of them changes what check-env measures.
    """
    moved = {name: env.pop(name) for name in IMPORT_CHECKED if name in env}
    env.update({ASIDE + name: value for name, value in moved.items()})
    return moved


@contextlib.contextmanager
def aside_while(env: MutableMapping[str, str]) -> Iterator[dict[str, str]]:
    """Set aside for the block only: a launcher that never imports torch itself hands
    its ranks the carriers, and its caller gets its environment back."""
    moved = set_aside(env)
    try:
        yield moved
    finally:
        for name, value in moved.items():
            env.pop(ASIDE + name, None)
            env[name] = value


def aside_env_on(env_on: Sequence[tuple[str, str, str]]) -> tuple[tuple[str, str, str], ...]:
    """``--env-on NODE:VAR=VALUE`` with import-checked VARs renamed to their carriers."""
    return tuple((node, ASIDE + var if var in IMPORT_CHECKED else var, value)
                 for node, var, value in env_on)


def real_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment as the user set it: carriers back under their own names."""
    out = {k: v for k, v in env.items() if not k.startswith(ASIDE)}
    out.update({k[len(ASIDE):]: v for k, v in env.items()
                if k.startswith(ASIDE) and k[len(ASIDE):] in IMPORT_CHECKED})
    return out


def vet_after_import() -> dict[str, str]:
    """Once torch is imported: each set-aside value through torch's own parser. Valid
    values go back into os.environ; returns {name: torch's error} for the others."""
    errors: dict[str, str] = {}
    try:
        parsers = _torch_parsers()
    except Exception:  # noqa: BLE001 - a torch without them: the catalog alone judges
        return errors
    for name, parse in parsers.items():
        value = os.environ.get(ASIDE + name)
        if value is None:
            continue
        os.environ[name] = value
        try:
            parse(value)
        except (ValueError, OSError) as exc:
            errors[name] = _first_lines(str(exc))
            del os.environ[name]
        except Exception:  # noqa: BLE001 - a parser changed in this torch: the catalog judges
            pass
    return errors


def _torch_parsers() -> dict[str, Callable[[str], object]]:
    """What ``import torch`` runs on each variable (torch/_logging/_internal.py,
    torch/distributed/__init__.py); they read os.environ or the value given."""
    import torch.distributed as dist
    from torch._logging import _internal

    return {"TORCH_DISTRIBUTED_DEBUG": lambda v: dist.set_debug_level_from_env(),
            "TORCH_LOGS": _internal._parse_log_settings,
            "TORCH_LOGS_FORMAT": lambda v: _internal._default_formatter(),
            "TORCH_LOGS_OUT": _writable}


def _writable(path: str) -> None:
    """torch opens TORCH_LOGS_OUT for append at import; check that it could, without
    creating the file."""
    target = path if os.path.exists(path) else (os.path.dirname(os.path.abspath(path)))
    if not os.access(target, os.W_OK):
        reason = "cannot write" if os.path.exists(target) else "no such directory"
        raise OSError(f"{reason}: {target} (TORCH_LOGS_OUT={path})")


def _first_lines(message: str, limit: int = 2) -> str:
    """torch's TORCH_LOGS error ends with every registered name: keep its first lines."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    return " ".join(lines[:limit])[:400]
