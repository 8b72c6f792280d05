"""Per-rank Prometheus metrics, fed from the event log on the writer thread.

Turned on with ``diag.init(metrics=True)`` or ``DDIAG_METRICS=1``. Every record the
decorator writes also updates the metrics here, off the training thread, so exporting
costs the training step nothing. Two ways out:

- an HTTP endpoint on 127.0.0.1 (``DDIAG_METRICS_ADDR`` to change), port
  ``DDIAG_METRICS_PORT`` (default 9400) + local rank, for Prometheus to scrape;
- ``DDIAG_METRICS_TEXTFILE_DIR``: a ``ddiag_rank{R}.prom`` file rewritten every second,
  for node-exporter's textfile collector.

GPU utilisation and memory (``gpustats``): NVML (nvidia-ml-py) or torch for the
device, torch's allocator counters for the rank; none of them waits for the device, and a
CPU rank exports them as NaN.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from diag.runtime.gpustats import GpuReader

DEFAULT_PORT = 9400
LABELS = ("rank", "local_rank", "host", "job")


class RankMetrics:
    """The metric families of one rank, registered in their own registry."""

    def __init__(self, rank: int, local_rank: int, host: str, job: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"rank": str(rank), "local_rank": str(local_rank), "host": host, "job": job}
        g = lambda name, doc, extra=(): Gauge(name, doc, LABELS + extra, registry=self.registry)  # noqa: E731
        c = lambda name, doc, extra=(): Counter(name, doc, LABELS + extra, registry=self.registry)  # noqa: E731
        self.step = g("ddiag_step_seconds", "Duration of the last training step")
        self.steps = c("ddiag_steps", "Training steps completed")
        self.step_index = g("ddiag_step", "Index of the last completed step")
        self.phase = g("ddiag_phase_seconds", "Last step's time per phase", ("phase",))
        self.loss = g("ddiag_loss", "Loss of the last step")
        self.grad_norm = g("ddiag_grad_norm", "Gradient norm of the last step")
        self.nonfinite = c("ddiag_nonfinite_steps", "Steps with a NaN/Inf loss or gradient")
        self.coll_time = c("ddiag_collective_seconds", "Time in collective calls", ("op",))
        self.coll_bytes = c("ddiag_collective_bytes", "Input bytes of collectives", ("op",))
        self.colls = c("ddiag_collectives", "Collectives issued", ("op",))
        self.rss = g("ddiag_host_rss_bytes", "Resident memory of the rank's process")
        self.heartbeat_age = g("ddiag_heartbeat_age_seconds",
                               "Seconds since this rank last made progress (a step or a collective)")
        self.gpu_mem = g("ddiag_gpu_memory_used_bytes", "GPU memory in use on the rank's device")
        self.gpu_util = g("ddiag_gpu_utilization_ratio", "GPU utilisation of the rank's device, 0..1")
        self.gpu_alloc = g("ddiag_gpu_memory_allocated_bytes",
                           "GPU memory held by this rank's tensors")
        self.gpu_max_reserved = g("ddiag_gpu_memory_max_reserved_bytes",
                                  "Peak GPU memory this rank's caching allocator reserved")
        for counter in (self.steps, self.nonfinite):  # exported at 0 before the first event
            counter.labels(**self.labels)
        self.last_progress = time.time()
        self.heartbeat_age.labels(**self.labels).set_function(
            lambda: time.time() - self.last_progress)
        self._gpu = GpuReader(local_rank)
        for gauge in self._gpu_gauges().values():  # NaN until read: dashboards still resolve
            gauge.set(float("nan"))

    def observe(self, record: dict) -> None:
        kind = record.get("kind")
        if kind == "step":
            self._on_step(record)
        elif kind == "collective":
            self._on_collective(record)

    def _on_step(self, r: dict) -> None:
        lab = self.labels
        self.last_progress = time.time()
        self.steps.labels(**lab).inc()
        _set(self.step.labels(**lab), r.get("dur_s"))
        _set(self.step_index.labels(**lab), r.get("step"))
        _set(self.loss.labels(**lab), r.get("loss"))
        _set(self.grad_norm.labels(**lab), r.get("grad_norm"))
        for phase, seconds in (r.get("phases") or {}).items():
            _set(self.phase.labels(**lab, phase=phase), seconds)
        if r.get("nonfinite") or r.get("loss") in ("nan", "inf", "-inf"):
            self.nonfinite.labels(**lab).inc()

    def _on_collective(self, r: dict) -> None:
        lab = {**self.labels, "op": str(r.get("op"))}
        self.last_progress = time.time()
        self.colls.labels(**lab).inc()
        if isinstance(r.get("dur_s"), (int, float)):
            self.coll_time.labels(**lab).inc(r["dur_s"])
        if isinstance(r.get("in_bytes"), int):
            self.coll_bytes.labels(**lab).inc(r["in_bytes"])

    def tick(self, _record: dict) -> None:
        """About once a second: host and GPU gauges."""
        self.rss.labels(**self.labels).set(_rss_bytes())
        sample = self._gpu.sample()
        if sample is None:
            return
        for field, gauge in self._gpu_gauges().items():
            _set(gauge, getattr(sample, field))

    def _gpu_gauges(self) -> dict:
        """GpuSample field -> this rank's gauge."""
        lab = self.labels
        return {"utilization": self.gpu_util.labels(**lab),
                "memory_used": self.gpu_mem.labels(**lab),
                "memory_allocated": self.gpu_alloc.labels(**lab),
                "max_memory_reserved": self.gpu_max_reserved.labels(**lab)}


def _set(gauge, value) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        gauge.set(value)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def port_for(local_rank: int) -> int:
    """``DDIAG_METRICS_PORT`` (default 9400) + local rank: one port per rank on a host."""
    value = os.environ.get("DDIAG_METRICS_PORT")
    try:
        port = (DEFAULT_PORT if value is None else int(value)) + local_rank
    except ValueError:
        raise ValueError(f"{_port_setting()}: not an integer; set it to the first of free "
                         f"ports for this host's ranks (default {DEFAULT_PORT})") from None
    if not 0 < port < 65536:
        raise ValueError(f"{_port_setting()} + local rank {local_rank} = {port}: not a TCP "
                         f"port; set it so that it stays within 1-65535")
    return port


def _port_setting() -> str:
    value = os.environ.get("DDIAG_METRICS_PORT")
    return (f"DDIAG_METRICS_PORT={value}" if value is not None
            else f"DDIAG_METRICS_PORT unset (default {DEFAULT_PORT})")


def _serve(metrics: RankMetrics, local_rank: int) -> None:
    from prometheus_client import start_http_server

    addr = os.environ.get("DDIAG_METRICS_ADDR", "127.0.0.1")
    port = port_for(local_rank)
    try:
        start_http_server(port, addr=addr, registry=metrics.registry)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {addr}:{port} ({_port_setting()} + local "
                      f"rank {local_rank}): {exc.strerror}; another process (another job's "
                      "ranks?) may hold it: set DDIAG_METRICS_PORT to a free base port (each "
                      "rank takes base + its local rank), or DDIAG_METRICS_TEXTFILE_DIR to "
                      "write .prom files instead") from exc


def start(writer, rank: int, local_rank: int, host: str, job: str) -> RankMetrics:
    """Hook metrics onto an event writer and open the configured outputs. Raises
    (OSError, ValueError) with the setting to change when the port cannot be used."""
    metrics = RankMetrics(rank, local_rank, host, job)
    metrics.tick({})  # host gauges have values from the first scrape on
    textfile_dir = os.environ.get("DDIAG_METRICS_TEXTFILE_DIR")
    if not textfile_dir:
        _serve(metrics, local_rank)  # first: a port in use leaves nothing hooked
    writer.add_observer(metrics.observe)
    writer.add_tick(metrics.tick)
    if textfile_dir:
        writer.add_tick(lambda _r: _write_textfile(metrics, Path(textfile_dir), rank))
    return metrics


def _write_textfile(metrics: RankMetrics, directory: Path, rank: int) -> None:
    from prometheus_client import write_to_textfile

    directory.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(directory / f"ddiag_rank{rank}.prom"), metrics.registry)
