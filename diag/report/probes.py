"""Probe results as tables for people; the probes' JSON documents are the input."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from diag.report.terminal import quote


def _cell(rate: float, median: float, slow: bool) -> str:
    style = "bold red" if slow else ("yellow" if rate < 0.8 * median else "green")
    return f"[{style}]{rate:.2f}[/]"


def links_table(doc: dict) -> Table:
    """The matrix, heat-map style: row = sender, column = receiver, Gbit/s."""
    rates = {(x["src"], x["dst"]): x for x in doc["links"]}
    t = Table(title="link bandwidth, Gbit/s (row sends to column)")
    t.add_column("src \\ dst", no_wrap=True)
    for node in doc["nodes"]:
        t.add_column(quote(node), justify="right")
    for src in doc["nodes"]:
        t.add_row(quote(src),
                  *(_cell(rates[(src, dst)]["gbit_per_s"], doc["median_gbit_per_s"],
                          rates[(src, dst)]["slow"]) if (src, dst) in rates else "-"
                    for dst in doc["nodes"]))
    return t


def latency_table(doc: dict) -> Table:
    t = Table(title="latency, microseconds (one way, median)")
    t.add_column("src \\ dst", no_wrap=True)
    lat = {(x["src"], x["dst"]): x["latency_us"] for x in doc["links"]}
    for node in doc["nodes"]:
        t.add_column(quote(node), justify="right")
    for src in doc["nodes"]:
        t.add_row(quote(src), *(f"{lat[(src, d)]:.0f}" if (src, d) in lat else "-"
                                for d in doc["nodes"]))
    return t


def render_links(doc: dict, console: Console) -> None:
    if not doc["links"]:
        console.print(f"nodes: {quote(', '.join(doc['nodes']))}: fewer than two, "
                      "no links to measure")
        return
    console.print(links_table(doc))
    console.print(latency_table(doc))
    slow = quote(", ".join(f"{a}->{b}" for a, b in doc["slow_links"]) or "none")
    console.print(f"median {doc['median_gbit_per_s']:.2f} Gbit/s; slow (< "
                  f"{doc['slow_ratio']:g} x median): {slow}")
    if doc["slow_nodes"]:
        slow_nodes = quote(", ".join(doc["slow_nodes"]))
        console.print(f"[bold red]every link of {slow_nodes} is slow: "
                      "check that node's NIC, cable, switch port or traffic shaping[/]")
    console.print(f"{len(doc['links'])} links over {quote(doc['backend'])} "
                  f"in {doc['seconds']:.1f} s")


def render_collectives(doc: dict, console: Console) -> None:
    t = Table(title=f"collectives, {quote(doc['world_size'])} ranks, {quote(doc['backend'])}")
    for name in ("op", "size", "count", "iters", "time_us", "algbw GB/s", "busbw GB/s"):
        t.add_column(name, justify="left" if name == "op" else "right")
    for r in doc["rows"]:
        t.add_row(quote(r["op"]), str(r["size"]), str(r["count"]), str(r["iters"]),
                  f"{r['time_us']:.1f}", f"{r['algbw']:.3f}", f"{r['busbw']:.3f}")
    console.print(t)


def _fraction(r: dict) -> str:
    fraction = r.get("fraction_of_peak")
    if fraction is None:
        return "-"
    style = "bold red" if r.get("below_peak") else "green"
    return f"[{style}]{fraction:.0%}[/] of {r['peak_tflops']:g}"


def render_compute(doc: dict, console: Console) -> None:
    """Schema 1 documents (no peaks, no findings) render too: those columns show '-'."""
    t = Table(title=f"matmul throughput, {quote(doc['dtype'])}")
    for name in ("rank", "node", "device", "n", "TFLOP/s", "of peak", ""):
        t.add_column(name, justify="right")
    for r in doc["ranks"]:
        flags = [w for w, on in (("slow", r["slow"]), ("below peak", r.get("below_peak")))
                 if on]
        t.add_row(str(r["rank"]), quote(r["node"]), quote(r.get("device_name") or r["device"]),
                  str(r["n"]), f"{r['tflops']:.3f}", _fraction(r),
                  f"[bold red]{', '.join(flags)}[/]" if flags else "")
    console.print(t)
    console.print(f"median {doc['median_tflops']:.3f} TFLOP/s; slow (< {doc['slow_ratio']:g} x "
                  f"median): {quote(', '.join(map(str, doc['slow_ranks'])) or 'none')}")
    for f in doc.get("findings", []):
        style = "bold red" if f["severity"] == "warn" else "dim"
        console.print(f"[{style}]{quote(f['message'])}[/]\n  fix: {quote(f['fix'])}")


RENDERERS = {"links": render_links, "collectives": render_collectives,
             "compute": render_compute}


def render(name: str, doc: dict, console: Console | None = None) -> None:
    RENDERERS[name](doc, console or Console())
