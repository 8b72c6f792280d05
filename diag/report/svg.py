"""What ddiag's HTML reports share: escaping, the page shell and its CSS, and the few
inline-SVG shapes they draw with. No script and no URL anywhere, so every report opens
offline and attaches to a ticket as one file. Every value is escaped, in text and in
attributes alike: hosts, file names and log lines come from the inputs."""

from __future__ import annotations

import html

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2430;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
.f{border:1px solid #ddd;border-left:6px solid #999;padding:8px 12px;margin:10px 0;border-radius:4px}
.critical{border-left-color:#c0392b}.error{border-left-color:#e67e22}.warn{border-left-color:#f1c40f}
.symptom{opacity:.75}.cat{font-weight:600;font-family:monospace}.ev{font:12px monospace;color:#555;
white-space:pre-wrap;margin:2px 0}.fix{margin-top:4px}.muted{color:#777}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 10px;border-bottom:1px solid #eee;
text-align:right}th{border-bottom:2px solid #ccc}td.l,th.l{text-align:left}
.verdict{padding:10px 14px;border-radius:4px;border-left:6px solid}td.cliff{color:#c0392b;font-weight:600}
.good{border-color:#27ae60;background:#eef9f1}.bad{border-color:#c0392b;background:#fdf0ee}
"""

SLOW, NORMAL = "#c0392b", "#5b8def"
"""Bar colours: red marks a rank behind (or slower than) the others, blue the rest."""


def esc(text) -> str:
    """Text or a quoted attribute value: every value that can come from the inputs (a
    host, a file name, a log line) goes through here, so none of it becomes markup."""
    return html.escape(str(text), quote=True)


def page(title: str, body: str) -> str:
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<style>{CSS}</style></head><body>{body}</body></html>')


def svg(width: float, height: float, body: str, label: str) -> str:
    return (f'<svg width="{width:.0f}" height="{height:.0f}" role="img" '
            f'aria-label="{esc(label)}">{body}</svg>')


def rect(x: float, y: float, width: float, height: float, fill: str, tip: str = "") -> str:
    """A bar or cell; ``tip`` shows on hover (an SVG <title>: a tooltip without script)."""
    title = f"<title>{esc(tip)}</title>" if tip else ""
    return (f'<rect x="{x:g}" y="{y:g}" width="{width:g}" height="{height:g}" '
            f'fill="{esc(fill)}">{title}</rect>')


def text(x: float, y: float, value, size: int = 11, anchor: str = "start",
         fill: str = "#1d2430", cls: str = "") -> str:
    klass = f' class="{esc(cls)}"' if cls else ""
    return (f'<text x="{x:g}" y="{y:g}" font-size="{size:g}" text-anchor="{esc(anchor)}" '
            f'fill="{esc(fill)}"{klass}>{esc(value)}</text>')


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = "#ccc",
         dash: str = "", cls: str = "") -> str:
    extra = (f' stroke-dasharray="{esc(dash)}"' if dash else "") + \
        (f' class="{esc(cls)}"' if cls else "")
    return (f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="{esc(stroke)}"'
            f'{extra}/>')


def polyline(points: list[tuple[float, float]], stroke: str, dash: str = "") -> str:
    if len(points) < 2:
        return ""
    extra = f' stroke-dasharray="{esc(dash)}"' if dash else ""
    coords = " ".join(f"{x:g},{y:g}" for x, y in points)
    return (f'<polyline points="{coords}" fill="none" stroke="{esc(stroke)}" stroke-width="2"'
            f'{extra}/>')


def dot(x: float, y: float, fill: str, tip: str, r: float = 4) -> str:
    return (f'<circle cx="{x:g}" cy="{y:g}" r="{r:g}" fill="{esc(fill)}">'
            f'<title>{esc(tip)}</title></circle>')
