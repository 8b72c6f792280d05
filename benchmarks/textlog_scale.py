"""Generate a folder of per-rank text logs the size of a real job's, for timing
``ddiag analyze`` on text alone (``ab.py`` runs two versions on it side by side).

Each rank's log holds what a torchrun job with NCCL_DEBUG=INFO prints: the init chatter,
per-collective COLL trace lines (``--coll-share`` of the lines), training lines and a
tqdm bar. Rank 5 of 8 per node runs out of memory near the end and the others then
time out in the watchdog, so the verdict (oom, rank 5) is checked as well as timed.

    python benchmarks/textlog_scale.py --keep /tmp/texts [--ranks 16] [--lines 20000]
    python benchmarks/ab.py --base /tmp/base --runs 3 -- analyze /tmp/texts --json
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

OOM_RANK = 5


def rank_log(rank: int, ranks: int, lines: int, coll_share: float) -> str:
    rng = random.Random(rank)
    host, pid, dev = f"node{rank // 8:03d}", 20000 + rank, rank % 8
    pre = f"{host}:{pid}:{pid}"
    out = [f"[rank{rank}]: {pre} [{dev}] NCCL INFO Bootstrap : Using eth0:10.0.0.{rank // 8}<0>",
           f"[rank{rank}]: {pre} [{dev}] NCCL INFO NET/IB : No device found.",
           f"[rank{rank}]: {pre} [{dev}] NCCL INFO ncclCommInitRank comm 0x55eb22a04a50 rank "
           f"{rank} nranks {ranks} cudaDev {dev} nvmlDev {dev} busId {dev}0 commId "
           "0x2ef13c5ed0553a05 - Init COMPLETE"]
    op = 0
    for i in range(lines):
        r = rng.random()
        if r < coll_share:
            out.append(f"[rank{rank}]: {pre} [{dev}] NCCL INFO AllReduce: opCount {op:x} sendbuff "
                       f"0x7f3a5c000000 recvbuff 0x7f3a5c000000 count 6553600 datatype 7 op 0 "
                       f"root 0 comm 0x55eb22a04a50 [nranks={ranks}] stream 0x55eb22b0c110")
            op += 1
        elif r < coll_share + 0.2:
            out.append(f"[rank{rank}]: {pre} [{dev}] NCCL INFO Channel {i % 32:02d}/0 : "
                       f"{rank}[{dev}] -> {(rank + 1) % ranks}[{(dev + 1) % 8}] via P2P/IPC")
        elif r < coll_share + 0.5:
            out.append(f"[rank{rank}]: step {i} loss {2.5 - i * 1e-5:.4f} lr 1.0e-04 "
                       f"grad_norm {1 + rng.random():.3f}")
        else:
            out.append(f" {i * 100 // lines:2d}%|####      | {i}/{lines} "
                       f"[01:23<01:42,  5.37it/s]")
    if rank == OOM_RANK:
        out += [f"[rank{rank}]: Traceback (most recent call last):",
                f'[rank{rank}]:   File "train.py", line 88, in <module>',
                f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                "2.00 GiB. GPU 5 has a total capacity of 79.15 GiB of which 1.02 GiB is free."]
    else:
        out.append(f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
                   f"collective operation timeout: WorkNCCL(SeqNum={op + 1}, "
                   "OpType=ALLREDUCE, NumelIn=6553600, NumelOut=6553600, Timeout(ms)=600000) "
                   "ran for 600123 milliseconds before timing out.")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", type=Path, required=True, help="the folder to write")
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--lines", type=int, default=20_000, help="lines per rank")
    p.add_argument("--coll-share", type=float, default=0.4)
    args = p.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    for rank in range(args.ranks):
        (args.keep / f"rank{rank}.log").write_text(
            rank_log(rank, args.ranks, args.lines, args.coll_share))
    size = sum(f.stat().st_size for f in args.keep.iterdir()) / 2**20
    print(f"{args.ranks} logs, {args.ranks * args.lines} lines, {size:.0f} MB in {args.keep}")


if __name__ == "__main__":
    main()
