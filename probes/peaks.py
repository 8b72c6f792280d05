"""The datasheet peak of a GPU for a matmul's math, found by the name torch gives the device.

Loads ``peaks.tsv`` (beside this module): one row per device model with a regular
expression over ``torch.cuda.get_device_name()``, its dense peak TFLOP/s per math (fp32,
tf32, bf16, fp16, fp8) and the NVIDIA datasheet each figure comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).with_name("peaks.tsv")
SCHEMA = "ddiag.gpu_peaks"
MAJOR = 1
MATHS = ("fp32", "tf32", "bf16", "fp16", "fp8")
COLUMNS = ("device", "names", "examples", *MATHS, "source", "note")


@dataclass(frozen=True)
class DevicePeak:
    """One device model's dense (no sparsity) peaks, TFLOP/s, as its datasheet gives them."""

    device: str
    names: re.Pattern
    examples: tuple[str, ...]
    """Real ``get_device_name()`` strings this row must match (checked by its tests)."""
    tflops: dict[str, float]
    """Peak per math; a math the device lacks (Volta's bf16) is absent."""
    source: str
    note: str = ""


def parse(text: str, source: str = str(PATH)) -> tuple[DevicePeak, ...]:
    """Rows of a peaks table; raises ValueError naming the line on a bad header or row."""
    lines = text.splitlines()
    _check_header(lines[0] if lines else "", source)
    body = [(i, line) for i, line in enumerate(lines, 1) if line and not line.startswith("#")]
    if not body or tuple(body[0][1].split("\t")) != COLUMNS:
        raise ValueError(f"{source}: the column line must be {' '.join(COLUMNS)}")
    return tuple(_row(line, f"{source}:{i}") for i, line in body[1:])


def _check_header(first: str, source: str) -> None:
    m = re.fullmatch(rf"# {re.escape(SCHEMA)} (\d+)", first.strip())
    if not m:
        raise ValueError(f"{source}: first line must be '# {SCHEMA} {MAJOR}', got {first!r}")
    if int(m.group(1)) > MAJOR:
        raise ValueError(f"{source}: {SCHEMA} {m.group(1)} is newer than this ddiag reads "
                         f"({MAJOR}); upgrade ddiag")


def _row(line: str, where: str) -> DevicePeak:
    cells = line.split("\t")
    if len(cells) != len(COLUMNS):
        raise ValueError(f"{where}: {len(cells)} cells, expected {len(COLUMNS)}")
    row = dict(zip(COLUMNS, cells))
    if not row["source"].startswith("https://"):
        raise ValueError(f"{where}: {row['device']}: source must be an https URL, "
                         f"got {row['source']!r}")
    try:
        tflops = {m: float(row[m]) for m in MATHS if row[m].strip()}
    except ValueError as err:
        raise ValueError(f"{where}: {row['device']}: a peak is not a number ({err})") from None
    return DevicePeak(row["device"], re.compile(row["names"], re.IGNORECASE),
                      tuple(x for x in row["examples"].split(";") if x), tflops,
                      row["source"], row["note"])


@lru_cache(maxsize=1)
def table() -> tuple[DevicePeak, ...]:
    return parse(PATH.read_text())


def match(device_name: str, rows: tuple[DevicePeak, ...] | None = None) -> DevicePeak | None:
    """The row whose names match ``device_name`` whole, or None for a device not in the
    table. Whole-name matching keeps "NVIDIA A10" from matching "NVIDIA A100-SXM4-80GB"."""
    name = " ".join(device_name.split())
    found = [r for r in (table() if rows is None else rows) if r.names.fullmatch(name)]
    return found[0] if len(found) == 1 else None


def math_of(dtype: str, allow_tf32: bool = False) -> str:
    """The matmul math a dtype runs in: float32 runs as tf32 when torch allows it
    (``torch.backends.cuda.matmul.allow_tf32``), and its peak is tf32's, not fp32's."""
    if dtype == "float32":
        return "tf32" if allow_tf32 else "fp32"
    return {"bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
