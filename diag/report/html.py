"""The analyze HTML report: findings, a rank x step time heat map, per-rank collective
progress. Inline SVG and CSS only (diag.report.svg), so it opens offline and attaches to
a ticket as one file."""

from __future__ import annotations

import statistics

from diag.analyze import Analysis
from diag.analyze.inputs import Inputs
from diag.format.ranks import ranges_text
from diag.report.svg import NORMAL, SLOW, esc as _e, page, rect, svg, text
from diag.report.views import binned_matrix, collective_progress, step_times


def _culprit_text(c) -> str:
    """Plain text: hosts and links come from the inputs (a header's host, a probe's node
    names), so the caller escapes the whole of it."""
    return "; ".join(p for p in (
        f"ranks {', '.join(map(str, c.ranks))}" if c.ranks else "",
        f"hosts {', '.join(map(str, c.hosts))}" if c.hosts else "",
        f"link {c.link[0]} <-> {c.link[1]}" if c.link else "",
        f"env {c.env_var}" if c.env_var else "") if p)


def _finding_html(i: int, f) -> str:
    sev = _e(f.severity.name.lower())
    culprit = _e(_culprit_text(f.culprit))
    evidence = "".join(f'<div class="ev">{_e(ev)}</div>' for ev in f.evidence[:8])
    role = "" if f.root_cause else " symptom"
    return (f'<div class="f {sev}{role}"><div><span class="cat">{i}. {_e(f.category.value)}'
            f'</span> <span class="muted">{sev}, confidence {f.confidence:.2f}'
            f'{" (symptom)" if not f.root_cause else ""}</span></div>'
            f'<div>{_e(f.title)}</div>'
            + (f"<div><b>culprit:</b> {culprit}</div>" if culprit else "")
            + f'{evidence}<div class="fix"><b>fix:</b> {_e(f.fix)}</div></div>')


def _color(value: float | None, median: float) -> str:
    """Median steps are a light neutral; slower ones shade to red, faster to blue."""
    if value is None:
        return "#ffffff"
    ratio = min(max(value / median, 0.5), 2.0) if median > 0 else 1.0
    if ratio >= 1:
        k = ratio - 1.0
        return f"rgb({int(225 + 30 * k)},{int(232 - 180 * k)},{int(240 - 200 * k)})"
    k = (1.0 - ratio) * 2
    return f"rgb({int(225 - 160 * k)},{int(232 - 100 * k)},{int(240 + 15 * k)})"


def heatmap_svg(inputs: Inputs) -> str:
    rows, cols, grid = binned_matrix(step_times(inputs))
    if not grid:
        return '<p class="muted">no step records in this input</p>'
    values = [v for row in grid for v in row if v is not None]
    median = statistics.median(values)
    cw, ch = max(2, 900 // len(cols)), max(2, min(14, 600 // len(rows)))
    rects = "".join(rect(60 + c * cw, r * ch, cw, ch, _color(v, median),
                         f"rank {rows[r]} step {cols[c]}: {(v or 0) * 1000:.1f} ms")
                    for r, row in enumerate(grid) for c, v in enumerate(row))
    labels = "".join(text(55, r * ch + ch - 1, rows[r], min(ch, 11), "end")
                     for r in range(0, len(rows), max(1, 12 // ch)))
    h = len(rows) * ch + 20
    return (f'<p class="muted">median step {median * 1000:.1f} ms; red = slower, blue = '
            f'faster than the median; rows are ranks, columns steps {cols[0]}..{cols[-1]}</p>'
            + svg(60 + len(cols) * cw + 10, h, labels + rects, "step time heat map"))


def progress_svg(inputs: Inputs) -> str:
    progress = collective_progress(inputs)
    if not progress:
        return '<p class="muted">no collective records in this input</p>'
    parts = []
    for group, per_rank in sorted(progress.items()):
        top = max(per_rank.values()) or 1
        bh = max(2, min(14, 400 // len(per_rank)))
        bars = "".join(rect(60, i * bh, max(1, 800 * s // top), bh - 1,
                            SLOW if s < top else NORMAL, f"rank {r}: seq {s}")
                       for i, (r, s) in enumerate(sorted(per_rank.items())))
        parts.append(f'<h3>group {_e(group)}: last collective seq per rank (red = behind)</h3>'
                     + svg(880, len(per_rank) * bh + 4, bars, f"collective progress of {group}"))
    return "".join(parts)


def render_html(analysis: Analysis, inputs: Inputs) -> str:
    findings = "".join(_finding_html(i, f) for i, f in enumerate(analysis.findings, 1)) \
        or '<p>no findings</p>'
    problems = "".join(f'<div class="ev">{_e(str(p))}</div>' for p in analysis.problems[:200])
    missing = ranges_text(analysis.missing_rank_ranges) or "none"
    return page(f"ddiag: {analysis.root}", (
        f'<h1>ddiag analyze: {_e(analysis.root)}</h1>'
        f'<p class="muted">{len(analysis.findings)} finding(s); sources: '
        f'{_e(analysis.sources)}; missing ranks: {_e(missing)}</p>'
        f'<h2>Findings</h2>{findings}'
        f'<h2>Step time per rank</h2>{heatmap_svg(inputs)}'
        f'<h2>Collective progress</h2>{progress_svg(inputs)}'
        + (f"<h2>Input problems</h2>{problems}" if problems else "")))
