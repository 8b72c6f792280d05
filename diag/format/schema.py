"""Schema versions of every file ddiag writes, and the check every reader applies.

A file names its format and an integer major version. Minor changes only add optional
fields, so a reader accepts any version up to the major it knows and rejects newer ones.
"""

from __future__ import annotations

EVENTS = "ddiag.events"
HEARTBEAT = "ddiag.heartbeat"
RUN = "ddiag.run"
LAB = "ddiag.lab"
WATCH = "ddiag.watch"
SCALE_TEST = "ddiag.scale_test"
STACKS = "ddiag.stacks"
SCALE_TEST_PLAN = "ddiag.scale_test_plan"
ENV_SNAPSHOT = "ddiag.env_snapshot"
CHECK_ENV = "ddiag.check_env"
RENDEZVOUS = "ddiag.rendezvous"
PROBE_LINKS = "ddiag.probe_links"
PROBE_COLLECTIVES = "ddiag.probe_collectives"
PROBE_COMPUTE = "ddiag.probe_compute"
PROBES = "ddiag.probes"
FAULT_MATRIX = "ddiag.fault_matrix"
OVERHEAD_RAW = "ddiag.overhead_raw"
STACK_SAMPLES = "ddiag.stack_samples"
NVML_RECORD = "ddiag.nvml_record"
WATCH_KILL = "ddiag.watch_kill"

# The major version each format is written at (and the newest a reader understands).
VERSIONS: dict[str, int] = {
    EVENTS: 1,
    HEARTBEAT: 1,
    RUN: 1,
    LAB: 1,
    WATCH: 1,
    SCALE_TEST: 2,  # 2: a stage's status may be "trained nothing" (its efficiency null)
    SCALE_TEST_PLAN: 1,
    ENV_SNAPSHOT: 1,
    CHECK_ENV: 1,
    RENDEZVOUS: 1,
    PROBE_LINKS: 1,
    PROBE_COLLECTIVES: 1,
    PROBE_COMPUTE: 2,
    PROBES: 1,
    FAULT_MATRIX: 1,
    OVERHEAD_RAW: 1,
    STACK_SAMPLES: 1,
    NVML_RECORD: 1,
    WATCH_KILL: 1,
}


# The largest world size any reader accepts. Readers keep per-rank state (missing ranks,
# per-rank tables), so a header claiming 10**12 ranks must not size them; 2**20 ranks is
# far past any job run today.
MAX_WORLD_SIZE = 1 << 20


class SchemaError(ValueError):
    """A file's format or version is not one this ddiag can read. ``reason`` is the
    message without the file, for readers that report the file beside it."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source, self.reason = source, reason


def stamp(fmt: str) -> dict:
    """The two fields that open every document of format ``fmt``."""
    return {"format": fmt, "schema": VERSIONS[fmt]}


def check(doc: dict, fmt: str, source: str) -> int:
    """Return the document's schema version, or raise naming the file and the fix."""
    if doc.get("format") != fmt:
        raise SchemaError(source, f"expected format {fmt!r}, got {doc.get('format')!r}")
    version = doc.get("schema")
    if not isinstance(version, int) or version < 1:
        raise SchemaError(source, f"schema must be a positive integer, got {version!r}")
    if version > VERSIONS[fmt]:
        raise SchemaError(
            source, f"{fmt} schema {version} is newer than this ddiag reads "
            f"({VERSIONS[fmt]}); upgrade ddiag (pip install -U ddiag)"
        )
    return version
