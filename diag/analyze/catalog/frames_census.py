"""Which functions of a torch tree issue a collective or wait on one, read from their source.

Why: ``collective_frames.tsv`` says which Python frames mean "this thread is in a
collective". Its torch rows must follow torch's code, not anyone's memory of it, so this
census reads the code (``ast``, nothing imported) and names every function that calls into
a process group itself: a c10d collective, a ``ProcessGroup``/``Backend`` method, a work's or
handle's ``wait()``, a blocking store call, a functional collective op, DDP's C++ broadcast
and bucket rebuild. In distributed_c10d, the functional collectives and the elastic store
utilities (torch's own collective APIs) a function that calls such a function of the same
module counts too. The test suite checks every function found here against the catalog;
run it on a new torch to see what to add:

    python -m diag.analyze.catalog.frames_census [TORCH_DIR]   # default: the installed torch
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

C10D = "torch/distributed/distributed_c10d.py"
FUNCOL = "torch/distributed/_functional_collectives.py"
# torch's collective APIs: a function calling another issuing function of the same file issues
TRANSITIVE = (C10D, FUNCOL, "torch/distributed/_functional_collectives_impl.py",
              "torch/distributed/elastic/utils/store.py")
# the users of those APIs whose own calls are read: DDP, FSDP (2 and 1), pipelining, store
# rendezvous, DDP's default comm hooks and join
DIRECT = ("torch/nn/parallel/distributed.py", "torch/distributed/utils.py",
          "torch/distributed/rendezvous.py", "torch/distributed/fsdp/_fully_shard/",
          "torch/distributed/fsdp/_flat_param.py", "torch/distributed/fsdp/_runtime_utils.py",
          "torch/distributed/fsdp/fully_sharded_data_parallel.py",
          "torch/distributed/pipelining/schedules.py", "torch/distributed/pipelining/stage.py",
          "torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py",
          "torch/distributed/algorithms/join.py")
# ProcessGroup and Backend methods (torch 2.13 dir()) that communicate; the test checks
# that every method of the installed classes is here or in LOCAL_METHODS
COMM_METHODS = frozenset({
    "allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced",
    "allgather_into_tensor_coalesced", "all_gather_single", "all_gather_single_coalesced",
    "_allgather_base", "broadcast", "reduce", "reduce_scatter", "reduce_scatter_single",
    "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced", "_reduce_scatter_base",
    "alltoall", "alltoall_base", "all_to_all_single", "barrier", "monitored_barrier", "send",
    "recv", "recv_anysource", "gather", "scatter", "split_group", "merge_remote_group", "shrink",
    "eager_connect_single_device", "perform_nocolor_split", "_set_sequence_number_for_group",
    "_end_coalescing", "_wait_for_pending_works"})
LOCAL_METHODS = frozenset({
    "BackendType", "CUSTOM", "GLOO", "MPI", "NCCL", "UCC", "UNDEFINED", "XCCL", "Options",
    "_backend_id", "_device_types", "_enable_collectives_timing", "_get_backend",
    "_get_backend_name", "_get_sequence_number_for_group", "_has_hooks", "_id",
    "_pybind11_conduit_v1_", "_register_backend", "_register_on_completion_hook",
    "_set_default_backend", "_set_group_desc", "_set_group_name", "_start_coalescing", "abort",
    "allocate_tensor", "bound_device_id", "boxed", "get_group_store", "group_desc", "group_name",
    "mem_allocator", "memory_stats", "name", "rank", "resume", "setUsePgForSymmMemRendezvous",
    "set_timeout", "shutdown", "size", "supports_coalescing", "supports_shrinking",
    "supports_splitting", "supports_tensor_alloc", "supports_time_estimate", "suspend", "unbox",
    "use_pg_for_symm_mem_rendezvous"})
# blocking Store calls: they return when another rank has set the key
STORE_WAITS = frozenset({"get", "wait", "multi_get", "queue_pop"})
# C++ entry points reached through ``dist.`` or the DDP reducer
CPP_CALLS = frozenset({"_broadcast_coalesced", "_verify_params_across_processes",
                       "_rebuild_buckets"})
# a TCPStore client waits in its constructor for the server, the server for the clients
STORE_CONNECT = "TCPStore"
_NOT_WORK = ("event", "stream", "lock", "cond", "thread", "proc")  # .wait() on these is local
_PG_NAMES = ("group", "pg", "backend")


@dataclass(frozen=True)
class Found:
    """A function whose code issues a collective (``calls``: what it calls, as written)."""

    path: str  # "torch/distributed/distributed_c10d.py"
    function: str  # qualified: "DistributedDataParallel._sync_buffers", "f.<locals>.g"
    calls: tuple[str, ...]


def torch_root(given: str | None = None) -> Path:
    """The folder that holds ``torch/``: the given one, or the installed torch's."""
    if given:
        return Path(given)
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise SystemExit("torch is not installed here: give the folder that holds torch/")
    return Path(spec.origin).parent.parent


def census(root: Path) -> list[Found]:
    """Every issuing function of the TRANSITIVE and DIRECT files under ``root``."""
    apis = {rel: _issuing(_parse(root / rel), rel, transitive=True)
            for rel in TRANSITIVE if (root / rel).is_file()}
    found = [f for by_name in apis.values() for f in by_name.values()]
    for rel in _files(root, DIRECT):
        found += _issuing(_parse(root / rel), rel, transitive=False, apis=apis).values()
    return found


def _files(root: Path, paths: tuple[str, ...]) -> Iterator[str]:
    for rel in paths:
        if rel.endswith("/"):
            yield from sorted(p.relative_to(root).as_posix() for p in (root / rel).glob("*.py"))
        elif (root / rel).is_file():
            yield rel


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _issuing(tree: ast.Module, rel: str, transitive: bool,
             apis: dict[str, dict[str, Found]] | None = None) -> dict[str, Found]:
    aliases = _api_aliases(tree, apis or {})
    direct = {q: _direct_calls(fn, aliases) for q, fn in _functions(tree)}
    found = {q: Found(rel, q, tuple(sorted(c))) for q, c in direct.items() if c}
    return _with_callers(tree, rel, found) if transitive else found


def _with_callers(tree: ast.Module, rel: str, found: dict[str, Found]) -> dict[str, Found]:
    """Adds the functions that call an issuing function of the same file, until none is new."""
    calls = {q: _local_calls(fn, q) for q, fn in _functions(tree)}
    while more := {q: Found(rel, q, tuple(sorted(names & found.keys())))
                   for q, names in calls.items() if q not in found and names & found.keys()}:
        found.update(more)
    return found


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and method, as ``__qualname__`` spells it."""
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def _own_calls(fn: ast.AST) -> Iterator[ast.Call]:
    """The calls in a function's own body (not in the functions it defines)."""
    stack = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _local_calls(fn: ast.AST, qualname: str) -> set[str]:
    """Same-file functions it calls: ``f(...)``, and ``self.m(...)`` as ``Class.m``."""
    cls = qualname.rsplit(".", 1)[0] + "." if "." in qualname else ""
    out = set()
    for call in _own_calls(fn):
        if isinstance(call.func, ast.Name):
            out.add(call.func.id)
        elif isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "self":
            out.add(cls + call.func.attr)
    return out


def _api_aliases(tree: ast.Module, apis: dict[str, dict[str, Found]]) -> dict[str, set[str]]:
    """Local name -> the issuing functions it reaches: ``dist`` -> c10d's, ``fcol`` -> the
    functional collectives', a name imported from those files -> itself."""
    modules = {rel[:-3].replace("/", "."): set(by_name) for rel, by_name in apis.items()}
    modules["torch.distributed"] = modules.get(C10D[:-3].replace("/", "."), set())
    out: dict[str, set[str]] = {"torch.distributed": modules["torch.distributed"]}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules and a.asname:
                    out[a.asname] = modules[a.name]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in modules:
                    out[a.asname or a.name] = modules[full]
                elif a.name in modules.get(node.module, ()):
                    out[a.asname or a.name] = {a.name}
    return out


def _direct_calls(fn: ast.AST, aliases: dict[str, set[str]]) -> set[str]:
    return {text for call in _own_calls(fn) if (text := _comm_call(call.func, aliases))}


def _comm_call(func: ast.expr, aliases: dict[str, set[str]]) -> str | None:
    """The call as written, when it reaches a process group, a work or the store."""
    if isinstance(func, ast.Name):
        return func.id if func.id in aliases.get(func.id, ()) or func.id == STORE_CONNECT else None
    if not isinstance(func, ast.Attribute):
        return None
    base, attr = ast.unparse(func.value), func.attr
    low = base.rsplit(".", 1)[-1].lower()
    issuing = (attr in aliases.get(base, ()) or attr in CPP_CALLS or attr == STORE_CONNECT
               or base.startswith("torch.ops._c10d_functional")
               or (attr in COMM_METHODS and any(n in low for n in _PG_NAMES))
               or (attr == "wait" and not any(n in low for n in _NOT_WORK))
               or (attr in STORE_WAITS and "store" in low))
    return f"{base}.{attr}" if issuing else None


def main(argv: list[str] | None = None) -> int:
    """Print, as rows to fill in, the issuing functions the catalog lacks; exit 1 if any."""
    from diag.analyze.catalog import collective_frames

    parser = argparse.ArgumentParser(prog="python -m diag.analyze.catalog.frames_census",
                                     description="torch functions that issue a collective "
                                                 "and are not in collective_frames.tsv")
    parser.add_argument("root", nargs="?", help="the folder holding torch/ (default: installed)")
    root = torch_root(parser.parse_args(argv).root)
    missing = [f for f in census(root) if not collective_frames.lookup(f.path, f.function)]
    for f in missing:
        print(f"torch\t{f.path}\t{f.function}\t?\tcalls {', '.join(f.calls)}\t?")
    print(f"{len(missing)} issuing function(s) under {root / 'torch'} not in "
          f"{collective_frames.PATH.name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
