"""The scale-test HTML report: the verdict, the per-stage table, the scaling curve with
its cliff, and each stage's per-rank step times and time split. Inline SVG and CSS only
(diag.report.svg): it opens offline and attaches to a ticket as one file."""

from __future__ import annotations

from diag.report.svg import NORMAL, SLOW, dot, esc, line, page, polyline, rect, svg, text
from diag.scaletest.run import ScaleTestResult, peak_busbw
from diag.scaletest.stage import StageStatus

THROUGHPUT = "#27ae60"
NORMALISED = "#16a2b8"
"""Efficiency against what the host allows; raw efficiency is drawn in NORMAL blue."""
SHARES = (("compute", "#5b8def"), ("comm", "#e67e22"), ("data", "#8e44ad"))


def _num(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def _title(result: ScaleTestResult) -> str:
    cfg = result.config
    return (f"ddiag scale-test: {cfg.job}, {cfg.launcher} launcher, "
            f"{'strong' if cfg.strong else 'weak'} scaling")


def _header(result: ScaleTestResult) -> str:
    cfg = result.config
    job = f"; Slurm job {esc(cfg.slurm_job_id)}" if cfg.slurm_job_id else ""
    verdict_class = "good" if result.healthy else "bad"
    steps = (f"command <code>{esc(' '.join(cfg.command))}</code>" if cfg.command else
             f"{esc(cfg.steps)} steps per stage, the first 5 not measured")
    return (f"<h1>{esc(_title(result))}</h1>"
            f'<p class="muted">run directory {esc(cfg.out)}; stages '
            f'{esc(",".join(map(str, cfg.stages)))}; {steps}; {result.seconds:.0f} s{job}'
            + "".join(f"<br>rate from {esc(n)}" for n in result.throughput_notes
                      if cfg.command) + _command_notes(result) +
            "</p>"
            f'{"; interrupted" if result.interrupted else ""}</p>'
            f'<div class="verdict {verdict_class}"><b>verdict:</b> {esc(result.verdict)}</div>')


def _command_notes(result: ScaleTestResult) -> str:
    """How a command's stages were kept apart, what --steps meant, what each stage
    wrote, and the warnings that bear on the numbers."""
    if not result.config.command:
        return ""
    lines = [f"working directory: {result.isolation['how']}"]
    lines += [f"steps: {result.steps_meaning}"] if result.steps_meaning else []
    lines += result.file_notes[0] + [f"warning: {w}" for w in result.warnings]
    return "".join(f"<br>{esc(line)}" for line in lines)


def stage_table(result: ScaleTestResult) -> str:
    own = bool(result.config.command)
    head = ("<tr><th>stage</th><th>ranks</th><th class=l>status</th>"
            + ("<th class=l>source</th><th>rate</th>" if own else "<th>samples/s</th>") +
            "<th>efficiency (raw)</th><th>per-rank TFLOP/s</th>"
            "<th>against the host</th><th>step p50 ms</th><th>step p95 ms</th>"
            "<th>compute</th><th>comm</th><th>data</th><th>busbw GB/s</th></tr>")
    rows = []
    for run, m, eff, tflops, norm in zip(result.stages, result.metrics, result.efficiency,
                                         result.compute_tflops, result.efficiency_normalised):
        cliff = run.stage == result.cliff_stage
        status = esc(run.status.value) + (" &larr; cliff" if cliff else "")
        source = [esc(m.source if m else "-")] if own else []
        cells = [*source, _num(m and m.samples_per_s, ".1f"), _num(eff, ".2f"),
                 _num(tflops, ".3f"),
                 _num(norm, ".2f"),
                 _num(m and m.step_p50_s, ".1f", 1000), _num(m and m.step_p95_s, ".1f", 1000),
                 *(_num(m and getattr(m, f"{name}_share"), ".0%") for name, _ in SHARES),
                 _num(peak_busbw(run), ".3f")]
        rows.append(f"<tr><td>{esc(run.stage)}</td><td>{esc(run.world_size)}</td>"
                    f'<td class="l{" cliff" if cliff else ""}">{status}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f"<table>{head}{''.join(rows)}</table>"
            '<p class="muted">per-rank TFLOP/s: the compute probe\'s median rank; '
            "against the host: efficiency x the slowdown the probes predict (compute share "
            "by the per-rank TFLOP/s, communication share by a small all_reduce's time), "
            "so ranks that share processors do not look like a job that scales badly. A "
            "fall in efficiency is a cliff unless the host predicts it and no finding "
            "points at a fault.</p>")


LEFT, TOP, PLOT_W, PLOT_H = 60, 20, 580, 190
"""Where the scaling curve's plot area sits in its SVG (pixels)."""


def _y(value: float, axis_top: float) -> float:
    return TOP + PLOT_H * (1 - value / axis_top)


def scaling_curve_svg(result: ScaleTestResult) -> str:
    """Raw efficiency and efficiency against the host (left axis) and samples/s (right axis;
    dashed: linear from the first stage) over the stages, evenly spaced as they usually
    double; the cliff in red on the raw efficiency."""
    n = len(result.stages)
    if not any(e is not None for e in result.efficiency):
        return '<p class="muted">no stage was measured</p>'
    xs = [LEFT + (PLOT_W * i / (n - 1) if n > 1 else PLOT_W / 2) for i in range(n)]
    effs = [e for e in result.efficiency + result.efficiency_normalised if e is not None]
    eff_top = max(1.2, *effs) * 1.05
    ideal = _ideal_throughput(result)
    tp_top = max([m.samples_per_s for m in result.metrics if m and m.samples_per_s]
                 + [t for t in ideal if t]) * 1.1
    body = (_axes(result, xs, eff_top, tp_top) + _series(result, xs, eff_top, tp_top, ideal)
            + _cliff_marker(result, xs))
    return ('<p class="muted">blue: efficiency, raw (left axis, 1.0 = perfect scaling); '
            f'teal: efficiency against the host ({_normalised_legend(result)}); green: '
            f'throughput, {esc(_unit(result))} (right axis), dashed: linear scaling from the '
            'first stage</p>'
            + svg(LEFT + PLOT_W + 80, TOP + PLOT_H + 50, body,
                  "scaling curve: efficiency and throughput per stage"))


def _ideal_throughput(result: ScaleTestResult) -> list[float | None]:
    base = result.metrics[0] if result.metrics else None
    if base is None or not base.samples_per_s:
        return [None] * len(result.stages)
    return [base.samples_per_s * run.world_size / base.world_size for run in result.stages]


def _axes(result: ScaleTestResult, xs: list[float], eff_top: float, tp_top: float) -> str:
    bottom, right, one = TOP + PLOT_H, LEFT + PLOT_W, _y(1.0, eff_top)
    parts = [line(LEFT, bottom, right, bottom, "#999"), line(LEFT, TOP, LEFT, bottom, "#999"),
             line(right, TOP, right, bottom, "#999"), line(LEFT, one, right, one, "#bbb", "4 3"),
             text(LEFT - 6, one + 4, "1.0", anchor="end"),
             text(LEFT - 6, TOP + 10, f"{eff_top:.2f}", anchor="end"),
             text(LEFT - 6, bottom, "0", anchor="end"), text(right + 6, bottom, "0"),
             text(right + 6, TOP + 10, f"{tp_top:.0f} {_unit(result)}"),
             text(LEFT + PLOT_W / 2, bottom + 36, "ranks (world size) per stage",
                  anchor="middle")]
    for x, run in zip(xs, result.stages):
        color = "#1d2430" if run.status is StageStatus.OK else SLOW
        parts.append(text(x, bottom + 16, run.world_size, anchor="middle", fill=color))
    return "".join(parts)


def _unit(result: ScaleTestResult) -> str:
    units = {m.unit for m in result.metrics if m is not None}
    return units.pop() if len(units) == 1 else "per s"


def _normalised_legend(result: ScaleTestResult) -> str:
    if not any(e is not None for e in result.efficiency_normalised):
        return "none: a stage has no probe reading"
    return "efficiency x the slowdown the host's probes predict"


def _series(result: ScaleTestResult, xs: list[float], eff_top: float, tp_top: float,
            ideal: list[float | None]) -> str:
    # a stage that trained nothing has a rate that is no throughput: it is not drawn
    tp = [(x, m.samples_per_s) for x, m, run in zip(xs, result.metrics, result.stages)
          if m and m.samples_per_s and run.status is not StageStatus.TRAINED_NOTHING]
    parts = [polyline([(x, _y(t, tp_top)) for x, t in zip(xs, ideal) if t], THROUGHPUT, "5 4"),
             polyline([(x, _y(t, tp_top)) for x, t in tp], THROUGHPUT),
             _efficiency_line(result, xs, eff_top, result.efficiency, NORMAL,
                              "efficiency (raw)", True),
             _efficiency_line(result, xs, eff_top, result.efficiency_normalised, NORMALISED,
                              "efficiency against the host", False)]
    parts += [dot(x, _y(t, tp_top), THROUGHPUT, f"{t:.1f} {_unit(result)}", r=3)
              for x, t in tp]
    return "".join(parts)


def _efficiency_line(result: ScaleTestResult, xs: list[float], eff_top: float,
                     values: list[float | None], color: str, name: str, judged: bool) -> str:
    """One efficiency series; on the one the cliff was judged on, the cliff point is red."""
    points = [(x, run, e) for x, run, e in zip(xs, result.stages, values) if e is not None]
    dots = [dot(x, _y(e, eff_top),
                SLOW if judged and run.stage == result.cliff_stage else color,
                f"stage {run.stage} ({run.world_size} ranks): {name} {e:.2f}")
            for x, run, e in points]
    return polyline([(x, _y(e, eff_top)) for x, _, e in points], color) + "".join(dots)


def _cliff_marker(result: ScaleTestResult, xs: list[float]) -> str:
    stages = [run.stage for run in result.stages]
    if result.cliff_stage not in stages:
        return ""
    x = xs[stages.index(result.cliff_stage)]
    return (line(x, TOP, x, TOP + PLOT_H, SLOW, "6 4", cls="cliff")
            + text(x - 4, TOP + 12, f"cliff: stage {result.cliff_stage}", anchor="end",
                   fill=SLOW, cls="cliff"))


def rank_times_svg(m) -> str:
    """Each rank's step time p50 (solid) over its p95 (pale); red where the p50 is more
    than 20% over the stage's median rank."""
    p50, p95 = m.per_rank_p50_s, m.per_rank_p95_s or {}
    if not p50:
        return '<p class="muted">no measured steps</p>'
    ranks = sorted(p50, key=_rank_order)
    median = sorted(p50.values())[len(p50) // 2]
    top = max([*p50.values(), *p95.values()]) or 1.0
    bh = max(2, min(14, 400 // len(ranks)))
    parts = []
    for i, r in enumerate(ranks):
        slow = p50[r] > 1.2 * median
        tip = (f"rank {r}: p50 {p50[r] * 1000:.1f} ms"
               + (f", p95 {p95[r] * 1000:.1f} ms" if r in p95 else ""))
        if r in p95:
            parts.append(rect(60, i * bh, max(1, 700 * p95[r] / top), bh - 1, "#d6def0", tip))
        parts.append(rect(60, i * bh, max(1, 700 * p50[r] / top), bh - 1,
                          SLOW if slow else NORMAL, tip))
    labels = "".join(text(55, i * bh + bh - 1, r, min(bh, 11), "end")
                     for i, r in enumerate(ranks) if i % max(1, 12 // bh) == 0)
    return (f'<p class="muted">step time per rank: p50 solid, p95 pale, up to '
            f'{top * 1000:.1f} ms; red = p50 over 1.2x the median rank</p>'
            + svg(800, len(ranks) * bh + 4, labels + "".join(parts), "step time per rank"))


def _rank_order(rank) -> tuple:
    """Ranks are JSON keys ("10" after "9"); a key that is not a number sorts last."""
    text = str(rank)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def shares_svg(m) -> str:
    """Compute, communication and data loading as parts of the median step."""
    shares = [(name, color, getattr(m, f"{name}_share") or 0.0) for name, color in SHARES]
    x, parts = 60.0, []
    for name, color, share in shares:
        width = 700 * share
        parts.append(rect(x, 0, max(width, 0), 22, color, f"{name}: {share:.0%} of the step"))
        if width > 60:
            parts.append(text(x + 4, 15, f"{name} {share:.0%}", fill="#fff"))
        x += width
    legend = ", ".join(f"{name} {share:.0%}" for name, _, share in shares)
    return (f'<p class="muted">median step split: {legend}</p>'
            + svg(800, 26, "".join(parts), "time split of the median step"))


def _stage_section(result: ScaleTestResult, i: int) -> str:
    run, m = result.stages[i], result.metrics[i]
    cliff = " (cliff)" if run.stage == result.cliff_stage else ""
    ranks = f"{run.world_size} rank{'s' if run.world_size > 1 else ''}"
    head = f"<h2>Stage {esc(run.stage)}: {esc(ranks)}, {esc(run.status.value)}{cliff}</h2>"
    reason = f'<div class="ev">{esc(run.reason)}</div>' if run.reason else ""
    findings = "".join(
        f'<div class="f {esc(f.get("severity", ""))}"><span class="cat">'
        f'{esc(f.get("category", ""))}</span> {esc(f.get("title", ""))}'
        f'<div class="fix"><b>fix:</b> {esc(f.get("fix", ""))}</div></div>'
        for f in result.findings.get(run.stage, []))
    plots = (rank_times_svg(m) + shares_svg(m)) if m and m.source == "events" else \
        '<p class="muted">no event logs from this stage: no per-rank step times</p>'
    return head + reason + plots + findings


def render_scale_test_html(result: ScaleTestResult) -> str:
    stages = "".join(_stage_section(result, i) for i in range(len(result.stages)))
    return page(_title(result), _header(result)
                + f"<h2>Stages</h2>{stage_table(result)}"
                + f"<h2>Scaling curve</h2>{scaling_curve_svg(result)}" + stages)
