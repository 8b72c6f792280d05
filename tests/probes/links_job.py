"""probe links on real gloo ranks of one host, each rank pretending to be its own node.

Rank 0 prints the report as one JSON line.
"""

import dataclasses
import json
import os

from probes import links
from probes.dist import close_group, form_group
from diag.launch import job_env


def main() -> None:
    job = job_env()
    group = form_group(job, timeout_s=30)
    group = dataclasses.replace(group, nodes=tuple(f"n{r}" for r in range(job.world_size)))
    # LINKS_SLOW_RATIO above 1 makes every link a suspect, so each is measured again
    ratio = float(os.environ.get("LINKS_SLOW_RATIO", "0.5"))
    report = links.run(group, target_s=0.05, max_bytes=4 << 20, slow_ratio=ratio)
    close_group()
    if report is not None:
        print(json.dumps(report.to_json()), flush=True)


if __name__ == "__main__":
    main()
