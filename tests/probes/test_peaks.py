"""The peak table (probes/peaks.tsv) and the device-name matcher."""

from __future__ import annotations

import pytest

from probes import peaks

# What torch.cuda.get_device_name() prints on these machines, and the row it belongs to.
REAL_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB/80GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 40GB/80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB/80GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 40GB/80GB",
    "NVIDIA L40S": "L40S",
    "NVIDIA L4": "L4",
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": "A10",
    "Tesla V100-SXM2-16GB": "V100 SXM2/SXM3",
    "Tesla V100-SXM2-32GB": "V100 SXM2/SXM3",
    "Tesla V100-PCIE-32GB": "V100 PCIe",
    "Tesla V100S-PCIE-32GB": "V100S PCIe",
}
# Near misses: a prefix or a sibling of a row's device must not borrow its peak.
NOT_IN_TABLE = ["NVIDIA L40", "NVIDIA A40", "NVIDIA GeForce RTX 4090", "Tesla T4",
                "NVIDIA GH200 480GB", "NVIDIA B200", "NVIDIA RTX A6000", "AMD Instinct MI300X",
                "NVIDIA A100X", "cpu", ""]


def test_the_table_parses_and_every_row_has_a_source_and_a_peak():
    rows = peaks.table()
    assert {"H100 SXM", "H100 PCIe", "H200 SXM", "A100 SXM4 40GB/80GB", "A100 PCIe 40GB/80GB",
            "L40S", "L4", "A10G", "V100 SXM2/SXM3"} <= {r.device for r in rows}
    for r in rows:
        assert r.source.startswith("https://") and r.tflops and r.examples, r.device
        assert all(0 < v < 5000 for v in r.tflops.values()), r.device
        # dense tensor math is never slower than plain fp32 on these parts
        assert all(v >= r.tflops["fp32"] for v in r.tflops.values()), r.device


@pytest.mark.parametrize("name, device", REAL_NAMES.items())
def test_real_device_names_find_their_row(name, device):
    assert peaks.match(name).device == device


@pytest.mark.parametrize("name", NOT_IN_TABLE)
def test_other_devices_find_none(name):
    assert peaks.match(name) is None


def test_each_rows_examples_match_that_row_only():
    for row in peaks.table():
        for example in row.examples:
            assert [r.device for r in peaks.table() if r.names.fullmatch(example)] == [row.device]


def test_matching_ignores_case_and_extra_spaces():
    assert peaks.match("nvidia  h200 ").device == "H200 SXM"


def test_h200_bf16_peak_is_the_dense_figure():
    assert peaks.match("NVIDIA H200").tflops["bf16"] == pytest.approx(989.5)
    assert "bf16" not in peaks.match("Tesla V100-SXM2-16GB").tflops


def test_the_math_of_a_dtype_follows_tf32():
    assert peaks.math_of("float32") == "fp32" and peaks.math_of("float32", True) == "tf32"
    assert peaks.math_of("bfloat16", True) == "bf16" and peaks.math_of("float16") == "fp16"


@pytest.mark.parametrize("text, error", [
    ("device\tnames\n", "first line must be"),
    ("# ddiag.gpu_peaks 9\n", "newer than this ddiag reads"),
    ("# ddiag.gpu_peaks 1\nname\tpeak\n", "column line must be"),
    ("# ddiag.gpu_peaks 1\n" + "\t".join(peaks.COLUMNS) + "\nX\tX\tX\t1\t\t\t\t\t\t\n",
     "source must be an https URL"),
    ("# ddiag.gpu_peaks 1\n" + "\t".join(peaks.COLUMNS) + "\nX\tX\tX\tfast\t\t\t\t\thttps://x\t\n",
     "not a number"),
])
def test_a_broken_table_is_named_with_its_line(text, error):
    with pytest.raises(ValueError, match=error):
        peaks.parse(text, "peaks.tsv")
