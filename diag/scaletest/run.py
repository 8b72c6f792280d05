"""The staged scale test: run every stage, measure it, find the cliff and explain it."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from diag.format import schema
from diag.format.events import read_run_events
from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.measure import (PROBE_NORMALISED, RAW, HostReading, StageMetrics,
                                    as_json, efficiencies, efficiency_basis, falls,
                                    normalised_efficiencies, stage_metrics, work_efficiency)
from diag.scaletest import progress, throughput, workdir
from diag.scaletest.stage import (StageRun, StageStatus, StepOutcome, ddiag_cmd, launch_args,
                                  run_tool, run_trainer, sampled_findings)
from diag.analyze.busywait import BusyTally
from diag.verdict import Severity, Status


@dataclass
class ScaleTestResult:
    config: ScaleTestConfig
    stages: list[StageRun] = field(default_factory=list)
    metrics: list[StageMetrics | None] = field(default_factory=list)
    efficiency: list[float | None] = field(default_factory=list)
    """Raw efficiency per stage (measure.efficiencies)."""
    cliff_stage: int | None = None
    findings: dict = field(default_factory=dict)  # stage -> top findings (JSON)
    verdict: str = ""
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        """Every stage passed, no cliff, and no finding above info anywhere."""
        return (all(r.status is StageStatus.OK for r in self.stages)
                and self.cliff_stage is None and not self.interrupted
                and not any(_problem(f) for fs in self.findings.values() for f in fs))

    @property
    def compute_tflops(self) -> list[float | None]:
        """Per stage, the compute probe's median per-rank matmul rate (TFLOP/s)."""
        return [_median_tflops(run) for run in self.stages]

    @property
    def host_readings(self) -> list[HostReading]:
        return [HostReading(_median_tflops(run), small_all_reduce_us(run))
                for run in self.stages]

    @property
    def efficiency_normalised(self) -> list[float | None]:
        """Against what each stage's host allows (measure.normalised_efficiencies);
        weak scaling only, as the model keeps each rank's work fixed."""
        if self.config.strong or not self.metrics:
            return [None] * len(self.stages)
        return normalised_efficiencies(self.efficiency, self.metrics[0], self.host_readings)

    @property
    def efficiency_basis(self) -> str:
        return efficiency_basis(self.efficiency, self.efficiency_normalised)

    @property
    def throughput_sources(self) -> list[str]:
        """The sources the measured stages' throughput came from, in stage order, once
        each (events, metric, wall: diag.scaletest.throughput)."""
        found = [m.source for m in self.metrics if m is not None]
        return list(dict.fromkeys(found))

    @property
    def assumption(self) -> str | None:
        """What the numbers rest on, when a stage's came from its wall time."""
        return throughput.WEAK_ASSUMPTION if throughput.WALL in self.throughput_sources \
            and not self.config.strong else None

    @property
    def throughput_notes(self) -> list[str]:
        """How each source in use made its numbers (the reports' legend)."""
        cfg = self.config
        return [throughput.describe(s, cfg.metric, cfg.steps, cfg.strong)
                for s in self.throughput_sources]

    @property
    def first_source(self) -> str | None:
        """The source of the first measured stage's number: what efficiency is against."""
        return next((m.source for m in self.metrics if m is not None), None)

    @property
    def steps_meaning(self) -> str | None:
        """What --steps and one unit of efficiency mean for a command (None: the trainer,
        whose --steps are its own and whose efficiency is per sample)."""
        cfg = self.config
        return progress.steps_meaning(self.first_source, cfg.steps, cfg.strong) \
            if cfg.command else None

    @property
    def file_notes(self) -> tuple[list[str], list[str]]:
        """What each stage of a command wrote, in sentences; and the warnings: a change
        to the user's directory, or files a later stage could see."""
        said, warn = [], []
        for run in self.stages:
            if run.files is not None:
                s, w = workdir.notes(run.stage, run.files)
                said, warn = said + s, warn + w
        return said, warn

    @property
    def warnings(self) -> list[str]:
        """What the reader must know to trust the numbers, in sentences."""
        steps = progress.step_count_warning([r.stage for r in self.stages], self.metrics)
        return ([steps] if steps else []) + self.file_notes[1]

    @property
    def isolation(self) -> dict | None:
        cfg = self.config
        return workdir.isolation(cfg.cwd.resolve(), cfg.out.resolve(), cfg.shared_cwd) \
            if cfg.command else None

    def to_json(self) -> dict:
        cfg = self.config
        return {
            **schema.stamp(schema.SCALE_TEST), "run_dir": str(cfg.out),
            "mode": None if cfg.command else cfg.mode,
            "command": list(cfg.command) or None, "metric": cfg.metric,
            "throughput_sources": self.throughput_sources, "assumption": self.assumption,
            "throughput_notes": self.throughput_notes, "isolation": self.isolation,
            "efficiency_per": progress.efficiency_per(self.first_source, cfg.strong)
            if cfg.command else "sample",
            "steps_meaning": self.steps_meaning, "warnings": self.warnings,
            "launcher": cfg.launcher, "slurm_job_id": cfg.slurm_job_id,
            "stages": list(cfg.stages), "steps": cfg.steps,
            "scaling": "strong" if cfg.strong else "weak", "verdict": self.verdict,
            "trainer_args": list(cfg.trainer_args),
            "efficiency_basis": self.efficiency_basis,
            "cliff_stage": self.cliff_stage, "interrupted": self.interrupted,
            "healthy": self.healthy,
            "seconds": round(self.seconds, 1),
            "results": [_stage_json(run, m, e, n, self.findings.get(run.stage))
                        for run, m, e, n in zip(self.stages, self.metrics, self.efficiency,
                                                self.efficiency_normalised)],
        }


def _stage_json(run: StageRun, m: StageMetrics | None, eff: float | None,
                normalised: float | None, findings) -> dict:
    return {"stage": run.stage, "world_size": run.world_size, "run_dir": str(run.run_dir),
            "status": run.status.value, "reason": run.reason, "efficiency": eff,
            "efficiency_normalised": normalised, "compute_tflops": _median_tflops(run),
            "small_all_reduce_us": small_all_reduce_us(run),
            "metrics": as_json(m), "findings": findings or [],
            "throughput_source": m.source if m else None,
            "steps": [{"name": s.name, "ok": s.ok, "seconds": round(s.seconds, 1),
                       "detail": s.detail} for s in run.steps],
            "busbw_GBps": peak_busbw(run), "hang": run.hang,
            "busiest_node": dict(zip(("node", "ranks", "cores"), run.busiest))
            if run.busiest else None,
            "files": run.files.to_json() if run.files else None}


def peak_busbw(run: StageRun) -> float | None:
    """Peak all_reduce busbw from the collectives probe, in the probe's unit (GB/s)."""
    rows = [r for r in (_probes(run).get("collectives") or {}).get("rows", [])
            if r.get("op") == "all_reduce"]
    values = [r.get("busbw") for r in rows if isinstance(r.get("busbw"), (int, float))]
    return round(max(values), 4) if values else None


def scale_test(cfg: ScaleTestConfig, status: Callable[[str], None]) -> ScaleTestResult:
    result = ScaleTestResult(cfg)
    start = time.monotonic()
    try:
        for stage in cfg.stages:
            run = run_stage(cfg, stage, status)
            result.stages.append(run)
            result.metrics.append(_measure(run, cfg, stage))
            if result.metrics[-1] is None and cfg.metric and run.status is StageStatus.OK:
                run.status, run.reason = StageStatus.NO_METRIC, _no_metric(run, cfg)
            _check_trained(result)
            if run.status is not StageStatus.OK and not cfg.keep_going:
                status(f"stage {stage}: {run.status.value} ({run.reason}); stopping (--keep-going "
                       "runs the later stages anyway)")
                break
    except KeyboardInterrupt:
        result.interrupted = True
        status("interrupted: keeping what was collected")
    result.seconds = time.monotonic() - start
    conclude(result, status)
    return result


def run_stage(cfg: ScaleTestConfig, stage: int, status: Callable[[str], None]) -> StageRun:
    run = StageRun(stage, cfg.world_size(stage), cfg.out / f"stage-{stage}")
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for name, cmd in preflight(cfg, stage, run.run_dir):
        status(f"stage {stage}: {name}")
        step = run_tool(name, cmd, cfg.stage_timeout_s, run.run_dir / "logs")
        run.steps.append(step)
        if name == "check-env" and not step.ok:
            run.status, run.reason = StageStatus.CHECK_ENV_FAILED, _failed_checks(step)
            return run
    run.busiest = busiest_node(run.run_dir / "env")
    what = "running the command" if cfg.command else f"training {cfg.mode}"
    status(f"stage {stage}: {what} on {run.world_size} rank(s)")
    # a command's ranks on this host are sampled; on Slurm they run on other nodes
    # a command without the decorator is watched by its stacks, here or on the job's nodes
    sampled = cfg.command and (cfg.launcher == "local" or cfg.slurm_job_id)
    tally = BusyTally() if sampled else None
    outcome, hang = _run_job(cfg, run, status, tally)
    run.steps.append(outcome)
    if tally is not None:
        run.findings = sampled_findings(run.run_dir, tally)
    run.trainer, run.hang = outcome.doc, hang
    if not outcome.ok:
        run.status = StageStatus.HANG if hang else StageStatus.FAILED
        run.reason = outcome.detail
    return run


def _run_job(cfg: ScaleTestConfig, run: StageRun, status: Callable[[str], None],
             tally: BusyTally | None) -> tuple[StepOutcome, dict | None]:
    """The trainer, or the command where no earlier stage's outputs are (unless
    --shared-cwd), what it writes there noticed: a checkpoint it would resume from, say."""
    if not cfg.command:
        return run_trainer(cfg, run.stage, run.run_dir, status, tally)
    try:
        cwd = workdir.prepare(cfg.cwd, cfg.out, run.stage, cfg.shared_cwd)
    except OSError as exc:
        return StepOutcome("command", False, 0.0, f"its working directory could not be made "
                           f"({exc}); --shared-cwd runs it in yours"), None
    outcome, hang = run_trainer(cfg, run.stage, run.run_dir, status, tally)
    run.files = cwd.finish()
    return outcome, hang


def preflight(cfg: ScaleTestConfig, stage: int, run_dir: Path) -> list[tuple[str, list[str]]]:
    """The ddiag tools that run before a stage's trainer, by name, with their commands."""
    launch = launch_args(cfg, stage)
    out = ["--out", str(run_dir), "--json"]
    steps = []
    if cfg.check_env:
        steps.append(("check-env", ddiag_cmd("check-env", "--all-ranks", *launch, *out)))
    if cfg.probes and cfg.world_size(stage) > 1:
        # one launch: links (multi-node stages), collectives and compute share a start-up
        steps.append(("probes", ddiag_cmd("probe", "all", *launch, *out)))
    return steps


def busiest_node(env_dir: Path) -> tuple[str, int, int] | None:
    """(node, ranks, cores) of the node whose ranks have the fewest cores each, from the
    stage's check-env snapshots (cores: the ranks' CPU affinity)."""
    from diag.checkenv.snapshot import read_snapshots

    snaps, _ = read_snapshots(env_dir)
    nodes: dict[str, tuple[int, int]] = {}
    for snap in snaps:
        ranks, cores = nodes.get(snap.node, (0, snap.facts.cpus))
        nodes[snap.node] = (ranks + 1, max(cores, snap.facts.cpus))
    if not nodes:
        return None
    node = max(nodes, key=lambda n: nodes[n][0] / max(1, nodes[n][1]))
    return (node, *nodes[node])


def _failed_checks(step: StepOutcome) -> str:
    results = (step.doc or {}).get("results", [])
    failed = [f"{r.get('check')}: {r.get('summary')}" for r in results
              if r.get("status") == Status.FAIL.value]
    return "; ".join(failed)[:600] or step.detail


def _measure(run: StageRun, cfg: ScaleTestConfig, stage: int) -> StageMetrics | None:
    logs, _ = read_run_events(run.run_dir)
    if cfg.command:
        return _measure_command(run, cfg, logs)
    if not logs:
        return None
    global_batch = cfg.per_rank_batch(stage) * run.world_size
    if cfg.mode == "pipeline":
        global_batch //= 2  # two stages share one micro-batch stream
    return stage_metrics(logs, run.world_size, global_batch)


def _measure_command(run: StageRun, cfg: ScaleTestConfig, logs) -> StageMetrics | None:
    """The command's throughput from its best source: the decorator's event logs, else
    --metric over its output, else its wall time (only when it ended well: the time of
    a hang or a crash measures nothing)."""
    if logs:
        return throughput.from_events(logs, run.world_size)
    if cfg.metric:
        values = throughput.metric_values(_command_output(run),
                                          throughput.compile_metric(cfg.metric))
        return throughput.from_metric(values, run.world_size) if values else None
    ran = next((s for s in run.steps if s.name == "command" and s.ok), None)
    if ran is None:
        return None
    work = cfg.world_size(cfg.stages[0]) if cfg.strong else run.world_size
    return throughput.from_wall(run.world_size, cfg.steps, ran.seconds, work)


def _check_trained(result: ScaleTestResult) -> None:
    """The last stage of a command, when it exited 0 but did less work than the previous
    stage that trained: its number is no speed-up (progress.trained_nothing)."""
    cfg, run = result.config, result.stages[-1]
    if not cfg.command or run.status is not StageStatus.OK:
        return
    works = [_work(r, m) for r, m in zip(result.stages, result.metrics)]
    before = next((w for r, w in zip(result.stages[-2::-1], works[-2::-1])
                   if r.status is StageStatus.OK and w.metrics is not None), None)
    why = progress.trained_nothing(works[-1], before, cfg.strong, _visible(result))
    if why:
        run.status, run.reason = StageStatus.TRAINED_NOTHING, why


def _work(run: StageRun, m: StageMetrics | None) -> progress.StageWork:
    ran = next((s for s in run.steps if s.name == "command" and s.ok), None)
    return progress.StageWork(run.stage, run.world_size, ran.seconds if ran else None, m)


def _visible(result: ScaleTestResult) -> list[str]:
    """Files the earlier stages wrote in the directory the last one ran in: only with
    --shared-cwd do the stages run in one."""
    if not result.config.shared_cwd:
        return []
    wrote = [p for r in result.stages[:-1] if r.files is not None
             for p in (*r.files.wrote.created, *r.files.wrote.modified)]
    return list(dict.fromkeys(wrote))


def _command_output(run: StageRun) -> str:
    logs = run.run_dir / "logs"
    return "\n".join(p.read_text(errors="replace") for p in
                     (logs / "command.out", logs / "command.err") if p.is_file())


def _no_metric(run: StageRun, cfg: ScaleTestConfig) -> str:
    return (f"--metric {shlex.quote(cfg.metric)} matched no number in the command's output "
            f"({run.run_dir / 'logs' / 'command.out'} and command.err): check that the "
            "job prints its rate, and the regex against one of its lines")


def conclude(result: ScaleTestResult, status: Callable[[str], None]) -> None:
    """Efficiencies, ``analyze`` on every stage, then the cliff (a stage's findings
    decide whether a fall the host predicts is still a cliff) and the verdict."""
    from diag.analyze import analyze

    cfg = result.config
    result.efficiency = efficiencies([  # a stage that trained nothing measures nothing
        None if r.status is StageStatus.TRAINED_NOTHING else m
        for r, m in zip(result.stages, result.metrics)])
    for run in result.stages:  # small run dirs: seconds each, and a straggler or slow
        status(f"stage {run.stage}: analyzing")  # link shows before any cliff does
        found = analyze(run.run_dir)
        result.findings[run.stage] = [f.to_json() for f in
                                      _merge(run.findings, found.findings)[:3]]
    result.cliff_stage = locate_cliff(result)
    result.verdict = verdict(result)
    (cfg.out / "scale-test.json").write_text(json.dumps(result.to_json(), indent=2, default=str))


def _merge(sampled: list, found: list) -> list:
    """The stage's stack-sample findings among analyze's, by severity (stable: analyze's
    own order is kept among equals, after the samples')."""
    return sorted([*sampled, *found], key=lambda f: -f.severity) if sampled else list(found)


SHARED_KEEP = 0.5
"""On ranks that share processors, a stage whose efficiency against the host keeps at
least this fraction of the previous stage's fell as the host did. The OS scheduler's
interleaving of the ranks sets their step time there, and no probe predicts it closely:
on the 4-node lab (8 ranks on 2 cores), healthy runs measured 0.59-2.20 against the host
at the same stage (docs/scale-test.md), where a host whose ranks each keep a processor
stays within 0.2."""


def locate_cliff(result: ScaleTestResult) -> int | None:
    """The first stage whose efficiency fell by more than the threshold from the previous
    measured stage, unless the host's probes predict the fall and no finding points at a
    fault there. On ranks that share processors, efficiency falls with the host; that is
    no cliff of the job's."""
    for j, i in _falls(result):
        if _top(result, result.stages[i].stage) or not _host_predicts(result, j, i):
            return result.stages[i].stage
    return None


def _falls(result: ScaleTestResult) -> list[tuple[int, int]]:
    return falls(result.efficiency, result.config.cliff_drop)


def _host_predicts(result: ScaleTestResult, j: int, i: int) -> bool:
    """The fall from stage j to stage i is within what the host's probes predict: by at
    most the threshold against the host, or, where the ranks share processors, to no
    less than ``SHARED_KEEP`` of the previous stage's efficiency against the host. From
    one rank to the first stage whose ranks communicate, the collectives' time is new:
    the fall is that time alone when the rest of the step kept its rate."""
    if _starts_communicating(result, j, i):
        kept = _work_kept(result, j, i)
        return kept is not None and kept >= _least_kept(result, j, i)
    norm = result.efficiency_normalised
    if result.efficiency_basis != PROBE_NORMALISED:
        return False
    if _came_to_share(result, j, i):
        return norm[i] >= SHARED_KEEP * norm[j]
    return not falls([norm[j], norm[i]], result.config.cliff_drop)


def _starts_communicating(result: ScaleTestResult, j: int, i: int) -> bool:
    """Stage j ran a single rank, stage i several: the first stage with collectives. A
    single rank has no one to meet, so weak scaling from it adds their whole time."""
    return result.stages[j].world_size == 1 < result.stages[i].world_size


def _came_to_share(result: ScaleTestResult, j: int, i: int) -> str | None:
    """Why the ranks of stage i share processors where stage j's did not, or None."""
    before, after = result.stages[j], result.stages[i]
    filled = None if _fills_cores(before) else _fills_cores(after)
    return _compute_fell(before, after) or filled


def _fills_cores(run: StageRun) -> str | None:
    """The ranks on a node take every core its ranks may run on: their own helper threads
    (communication, logging, data loading) and the OS then take turns with them, which a
    matmul probe on idle ranks does not show."""
    if run.busiest is None or run.busiest[1] < run.busiest[2]:
        return None
    node, ranks, cores = run.busiest
    return f"{ranks} ranks fill {node}'s {cores} cores"


def _least_kept(result: ScaleTestResult, j: int, i: int) -> float:
    """How much of its rate the ranks' own work must keep from stage j to stage i."""
    shared = _came_to_share(result, j, i)
    return SHARED_KEEP if shared else 1 - result.config.cliff_drop


def _work_kept(result: ScaleTestResult, j: int, i: int) -> float | None:
    """Stage i's efficiency without communication, against stage j's: the share of the
    ranks' own work rate (compute, data) that stage i kept."""
    before, after = (work_efficiency(result.efficiency[k], result.metrics[k]) for k in (j, i))
    return round(after / before, 4) if before and after is not None else None


def verdict(result: ScaleTestResult) -> str:
    failed = [r for r in result.stages if r.status is not StageStatus.OK]
    if failed:
        r = failed[0]
        own = r.status is StageStatus.TRAINED_NOTHING  # its reason is why it has no number
        return f"stage {r.stage} {r.status.value}: " + (
            r.reason if own else _top(result, r.stage) or r.reason)
    if result.cliff_stage is None:
        return _no_cliff(result)
    return _at_cliff(result)


def _no_cliff(result: ScaleTestResult) -> str:
    effs = [e for e in result.efficiency if e is not None]
    found = next(((r.stage, t) for r in result.stages if (t := _top(result, r.stage))), None)
    if not effs:
        base = "no stage was measured"
    elif _falls(result):  # each one predicted by the host, or there would be a cliff
        j, i = _falls(result)[0]
        base = "no cliff: " + (_communication_fall(result, j, i)
                               if _starts_communicating(result, j, i) else _host_fall(result))
    else:
        base = (f"no cliff: efficiency stays at or above {min(effs):.2f} up to "
                f"{result.stages[-1].world_size} ranks")
    return base + (f"; but stage {found[0]}: {found[1]}" if found else "")


def _host_fall(result: ScaleTestResult) -> str:
    """Efficiency that fell as the host's probes predict: information, not a problem of
    the job."""
    measured = [i for i, e in enumerate(result.efficiency) if e is not None]
    first, last = measured[0], measured[-1]
    (a, b), effs = (result.host_readings[k] for k in (first, last)), result.efficiency
    norm = [n for n in result.efficiency_normalised if n is not None]
    meet = (f", a small all_reduce {a.latency_us:.0f} -> {b.latency_us:.0f} us"
            if a.latency_us and b.latency_us else "")
    upto = f"{min(norm):.2f} up to {result.stages[last].world_size} ranks"
    norms = result.efficiency_normalised
    if any(falls([norms[j], norms[i]], result.config.cliff_drop) for j, i in _falls(result)):
        return (f"efficiency fell {effs[first]:.2f} -> {effs[last]:.2f} as the ranks came to "
                f"share processors (per-rank compute {a.tflops:.3f} -> {b.tflops:.3f} "
                f"TFLOP/s{meet}); against what the host allows, efficiency stays at or above "
                f"{upto}: at least {SHARED_KEEP:.0%} of each previous stage's, within what "
                "the OS scheduler makes of step time on shared processors, and no finding "
                "above info")
    return (f"efficiency fell {effs[first]:.2f} -> {effs[last]:.2f} as the host's probes "
            f"predict (per-rank compute {a.tflops:.3f} -> {b.tflops:.3f} TFLOP/s{meet}): the "
            f"ranks share processors; against what the host allows, efficiency stays at or "
            f"above {upto}")


def _communication_fall(result: ScaleTestResult, j: int, i: int) -> str:
    """A fall from one rank to the first stage that communicates, with the rest of the
    step at its rate: the price of the collectives on this host and model. A single-rank
    stage runs no probes, so this is the only fall judged without them. (A raw basis
    excuses no other fall, so this is the only one when there is no cliff.)"""
    effs, (a, b) = result.efficiency, (result.metrics[k] for k in (j, i))
    shared = _came_to_share(result, j, i)
    least = (f" (at least {SHARED_KEEP:.0%} where ranks share processors: {shared})"
             if shared else "")
    return (f"efficiency fell {effs[j]:.2f} -> {effs[i]:.2f} from 1 rank to "
            f"{result.stages[i].world_size}, where the ranks start to communicate: "
            f"collectives took {b.comm_share:.0%} of the step ({a.comm_share:.0%} on 1 rank), "
            f"and the rest of the step kept {_work_kept(result, j, i):.2f} of 1 rank's "
            f"rate{least}; no finding above info")


def _at_cliff(result: ScaleTestResult) -> str:
    effs, stages = result.efficiency, [r.stage for r in result.stages]
    i = stages.index(result.cliff_stage)
    j = max(k for k in range(i) if effs[k] is not None)  # the previous measured stage
    norm = result.efficiency_normalised
    host = (f" (against what the host allows: {norm[j]:.2f} -> {norm[i]:.2f})"
            if norm[j] is not None and norm[i] is not None else "")
    fell = (_compute_fell(result.stages[j], result.stages[i])
            if result.efficiency_basis == RAW else None)
    why = _top(result, result.cliff_stage) or fell or "no finding explains it" + (
        _work_fell(result, j, i) if _starts_communicating(result, j, i) else "")
    later = next(((r.stage, t) for r in result.stages[i + 1:] if (t := _top(result, r.stage))),
                 None)
    return (f"efficiency {effs[j]:.2f} -> {effs[i]:.2f}{host} between stages {stages[j]} "
            f"and {result.cliff_stage}: {why}"
            + (f"; and stage {later[0]}: {later[1]}" if later else ""))


def _work_fell(result: ScaleTestResult, j: int, i: int) -> str:
    kept = _work_kept(result, j, i)
    if kept is None:
        return ""
    return (f"; besides the collectives ({result.metrics[i].comm_share:.0%} of the step), "
            f"the rest of the step kept only {kept:.2f} of 1 rank's rate")


def _compute_fell(before: StageRun, after: StageRun, ratio: float = 0.75) -> str | None:
    """Weak scaling assumes each rank keeps its own processor. When the compute probe's
    per-rank matmul rate falls as ranks are added, they share one (oversubscribed
    cores, two jobs on one GPU), and the efficiency falls with it, not with the job."""
    rate = [_median_tflops(run) for run in (before, after)]
    if None in rate or rate[1] >= ratio * rate[0]:
        return None
    return (f"per-rank compute fell {rate[0]:.3f} -> {rate[1]:.3f} TFLOP/s (probe compute): "
            "the ranks share processors, so each does less work per second as more are "
            "added")


SMALL_BYTES = 64 << 10
"""all_reduce sizes up to this move next to nothing: their time is the ranks meeting."""


def small_all_reduce_us(run: StageRun) -> float | None:
    """The collective probe's median time over its small all_reduces (microseconds)."""
    rows = (_probes(run).get("collectives") or {}).get("rows", [])
    times = sorted(r["time_us"] for r in rows if r.get("op") == "all_reduce"
                   and isinstance(r.get("time_us"), (int, float))
                   and r.get("size", SMALL_BYTES + 1) <= SMALL_BYTES)
    return times[len(times) // 2] if times else None


def _probes(run: StageRun) -> dict:
    doc = next((s.doc for s in run.steps if s.name == "probes" and s.doc), None) or {}
    return doc.get("probes", {})


def _median_tflops(run: StageRun) -> float | None:
    ranks = (_probes(run).get("compute") or {}).get("ranks", [])
    rates = sorted(r["tflops"] for r in ranks if isinstance(r.get("tflops"), (int, float)))
    return rates[len(rates) // 2] if rates else None


def _top(result: ScaleTestResult, stage: int) -> str | None:
    findings = [f for f in result.findings.get(stage, []) if _problem(f)]
    return findings[0]["title"] if findings else None


def _problem(finding: dict) -> bool:
    """A finding (as Finding.to_json wrote it) above info: a problem, not a note."""
    return finding.get("severity") != Severity.INFO.name.lower()
