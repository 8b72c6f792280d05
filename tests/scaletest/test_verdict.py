"""The cliff and the verdict sentence, from stage results built by hand (no trainer runs):
efficiency normalised by the compute probe's per-rank rate, and raw where a stage has no
probe reading."""

from __future__ import annotations

from diag.scaletest.run import verdict
from tests.scaletest.factories import SLOW_LINK, result


def test_ranks_sharing_processors_are_no_cliff_and_the_verdict_says_why():
    r = result([1.0, 0.59, 0.32], [0.052, 0.035, 0.022])
    assert r.efficiency_normalised == [1.0, 0.8766, 0.7564]
    assert r.cliff_stage is None and r.healthy
    assert verdict(r) == (
        "no cliff: raw efficiency 1.00 -> 0.32, but per-rank compute fell 0.052 -> 0.022 "
        "TFLOP/s (probe compute): the ranks share processors, so each does less work per "
        "second as more are added; compute-normalised efficiency stays at or above 0.76 "
        "up to 8 ranks")
    doc = r.to_json()
    assert doc["efficiency_basis"] == "compute-normalised" and doc["cliff_stage"] is None
    assert [(s["efficiency"], s["efficiency_normalised"], s["compute_tflops"])
            for s in doc["results"]] == [(1.0, 1.0, 0.052), (0.59, 0.8766, 0.035),
                                         (0.32, 0.7564, 0.022)]


def test_a_slow_link_is_a_cliff_after_normalising_and_its_finding_the_reason():
    r = result([1.0, 0.8, 0.2], [0.05, 0.035, 0.022], SLOW_LINK)
    assert r.efficiency_normalised == [1.0, 1.1429, 0.4545]  # above 1.0 kept as measured
    assert r.cliff_stage == 4 and not r.healthy
    assert verdict(r) == ("compute-normalised efficiency 1.14 -> 0.45 (raw 0.80 -> 0.20) "
                          "between stages 2 and 4: every link of node4 is slow")


def test_a_normalised_cliff_is_not_put_down_to_shared_processors():
    text = verdict(result([1.0, 0.8, 0.2], [0.05, 0.035, 0.022]))
    assert text.endswith(": no finding explains it") and "share processors" not in text


def test_a_stage_without_a_probe_reading_judges_every_stage_raw():
    r = result([1.0, 0.59, 0.32], [0.052, 0.035, None])
    assert r.efficiency_normalised == [1.0, 0.8766, None]
    assert r.efficiency_basis == "raw" and r.to_json()["efficiency_basis"] == "raw"
    assert r.cliff_stage == 2  # raw: 1.00 -> 0.59
    assert verdict(r) == ("efficiency 1.00 -> 0.59 between stages 1 and 2: per-rank compute "
                          "fell 0.052 -> 0.035 TFLOP/s (probe compute): the ranks share "
                          "processors, so each does less work per second as more are added")


def test_no_probes_at_all_is_raw():
    r = result([1.0, 0.95, 0.9], [None, None, None])
    assert r.efficiency_normalised == [None] * 3 and r.efficiency_basis == "raw"
    assert verdict(r) == "no cliff: efficiency stays at or above 0.90 up to 8 ranks"


def test_steady_compute_normalises_to_raw_and_a_later_finding_is_named():
    r = result([1.0, 0.6, 0.3], [0.05, 0.05, 0.05], SLOW_LINK)
    assert r.efficiency_normalised == r.efficiency and r.cliff_stage == 2
    assert verdict(r) == ("compute-normalised efficiency 1.00 -> 0.60 between stages 1 and "
                          "2: no finding explains it; and stage 4: every link of node4 is slow")
