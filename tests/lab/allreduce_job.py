"""One gloo all_reduce across every rank torchrun started; prints one JSON line per rank.

Rank r contributes r + 1 in each of 2M float32s (8 MB), so every element of the result
must be world_size * (world_size + 1) / 2.
"""

import json
import os
import socket

import torch
import torch.distributed as dist

NUMEL = 2_000_000


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.full((NUMEL,), float(rank + 1))
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(tensor == expected))
    print(json.dumps({"rank": rank, "world_size": world, "host": socket.gethostname(),
                      "node": os.environ.get("SLURMD_NODENAME"), "value": tensor[0].item(),
                      "all_equal": ok}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
