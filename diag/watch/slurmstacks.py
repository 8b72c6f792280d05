"""Every rank's Python stack in a Slurm job: ``ddiag stacks --slurm-job JOBID``.

On each node of the job one step, ``srun --overlap --jobid JOBID -N1 --nodelist NODE``,
runs this module there (``python -m diag.watch.slurmstacks JOBID``): it asks the node's
slurmd which processes belong to the job (``scontrol listpids JOBID``), takes the ranks
among them (diag.watch.discover: a launcher's RANK/LOCAL_RANK/WORLD_SIZE, forks left out),
dumps each with ``py-spy dump --json`` and prints one JSON document. Only processes Slurm
itself names as the job's are ever traced. The caller writes the dumps into
RUN_DIR/stacks/rankNNNNN.json, as ``ddiag stacks --pid`` does, and groups them.
Assumes ddiag at the same Python path on the nodes, as the ranks' own ddiag does.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from diag.format.rundir import RunDir
from diag.launch import expand_nodelist
from diag.watch import discover
from diag.watch.capture import PYSPY_TIMEOUT_S, pyspy_dump, write_replacing
from diag.watch.stacks import StackCapture, write_record

JOB_ID = re.compile(r"\d{1,12}(?:_\d{1,9})?")
NODE_STEP_TIMEOUT_S = 2 * PYSPY_TIMEOUT_S + 30
MAX_NODES_AT_ONCE = 16
_RANKS_APPEAR_S = 120.0  # a job's ranks may take this long to start on a node


class SlurmJobError(Exception):
    pass


def job_nodes(job_id: str) -> list[str]:
    """The nodes a running job holds (``scontrol show job``)."""
    if not JOB_ID.fullmatch(job_id):
        raise SlurmJobError(f"--slurm-job {job_id!r}: a Slurm job id is digits (or "
                            "<job>_<task> for an array task)")
    try:
        res = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmJobError(f"scontrol show job {job_id}: {exc}") from exc
    state = re.search(r"\bJobState=(\S+)", res.stdout)
    nodes = re.search(r"\bNodeList=(\S+)", res.stdout)
    if res.returncode != 0 or not state:
        raise SlurmJobError(f"Slurm knows no job {job_id}: {res.stderr.strip()[:200]}")
    if state.group(1) != "RUNNING" or not nodes or nodes.group(1) == "(null)":
        raise SlurmJobError(f"job {job_id} is {state.group(1)}, not RUNNING: no stacks to take")
    return expand_nodelist(nodes.group(1))


def capture_job(job_id: str, run_dir: Path) -> list[StackCapture]:
    """Every rank on every node of the job, dumped there, written here."""
    nodes = job_nodes(job_id)
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_NODES_AT_ONCE, len(nodes)))) as pool:
        per_node = list(pool.map(lambda n: _on_node(job_id, n), nodes))
    out = [_keep(run_dir, rank) for ranks in per_node for rank in ranks]
    write_record(run_dir, out)
    return sorted(out, key=lambda c: (c.process.rank, c.process.host))


def _on_node(job_id: str, node: str) -> list[dict]:
    cmd = ["srun", "--overlap", f"--jobid={job_id}", "-N1", "-n1", f"--nodelist={node}",
           sys.executable, "-m", "diag.watch.slurmstacks", job_id]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=NODE_STEP_TIMEOUT_S)
        doc = json.loads(res.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return [{"rank": None, "host": node, "error": f"srun on {node}: {exc}"}]
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    return [{**r, "host": node} for r in ranks if isinstance(r, dict)] if ranks else []


def _keep(run_dir: Path, found: dict) -> StackCapture:
    proc = discover.RankProcess(found.get("pid") or 0, found.get("rank"),
                                found.get("local_rank"), found.get("world_size"),
                                str(found.get("started")), found["host"],
                                str(found.get("cmdline", ""))[:4096])
    dump = found.get("dump")
    if type(proc.rank) is not int or proc.rank < 0 or dump is None:
        return StackCapture(proc, None, found.get("error") or "no dump")
    path = RunDir(run_dir).path("stacks", proc.rank, ".json")
    write_replacing(path, json.dumps(dump))
    return StackCapture(proc, path, None)


# ---------------------------------------------------------------------------------------
# On the node


def job_pids(job_id: str) -> set[int]:
    """The pids slurmd tracks for the job on this node (``scontrol listpids``)."""
    res = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True,
                         timeout=30)
    return {int(line.split()[0]) for line in res.stdout.splitlines()[1:]
            if line.split() and line.split()[0].isdigit()}


def _dump(proc: discover.RankProcess) -> dict:
    row = proc.to_json()
    if not discover.still_rank(proc):
        return {**row, "dump": None, "error": f"pid {proc.pid} is no longer rank {proc.rank}"}
    dump, why = pyspy_dump(proc.pid)
    try:
        return {**row, "dump": json.loads(dump)} if dump is not None else \
            {**row, "dump": None, "error": why}
    except ValueError as exc:
        return {**row, "dump": None, "error": f"py-spy: {exc}"}


def sample_forever(job_id: str, sample_s: float) -> None:
    """``--sample``: one JSON line a second with every rank's CPU seconds, and its main
    stack (py-spy --nonblocking, without stopping it) every ``sample_s``; until the job
    has no process on this node, or the watcher ends this step."""
    from diag.watch.sampled import cpu_seconds, sample_stack

    frames: dict[int, list] = {}
    next_stack, gone_since, seen = 0.0, time.monotonic(), False
    while True:
        ranks = discover.ranks_in(job_pids(job_id))
        now = time.monotonic()
        seen = seen or bool(ranks)
        if ranks:
            gone_since = now
        elif now - gone_since > (10 if seen else _RANKS_APPEAR_S):
            return  # the ranks ended (or never started)
        if ranks and now >= next_stack:
            stacks = {p.rank: sample_stack(p)[0] for p in ranks}
            frames = {r: [[f.func, f.file, f.line] for f in st.frames] if st else None
                      for r, st in stacks.items()}
            next_stack = now + sample_s
        rows = [{**p.to_json(), "cpu_s": cpu_seconds(p.pid), "frames": frames.get(p.rank)}
                for p in ranks]
        print(json.dumps({"host": socket.gethostname(), "t": time.time(), "ranks": rows}),
              flush=True)
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--sample" and JOB_ID.fullmatch(argv[1]):
        sample_forever(argv[1], max(1.0, float(argv[2])))
        return 0
    if len(argv) != 1 or not JOB_ID.fullmatch(argv[0]):
        print(json.dumps({"error": "usage: python -m diag.watch.slurmstacks [--sample] JOBID "
                                   "[SECONDS]"}))
        return 2
    ranks = discover.ranks_in(job_pids(argv[0]))
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(ranks)))) as pool:
        rows = list(pool.map(_dump, ranks))
    print(json.dumps({"host": socket.gethostname(), "ranks": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
