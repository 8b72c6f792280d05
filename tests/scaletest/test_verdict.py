"""The cliff and the verdict sentence, from stage results built by hand (no trainer runs).
A fall in efficiency is a cliff unless the host's probes predict it (per-rank compute
rate, small all_reduce time) and no finding points at a fault on that stage. The verdict
sentence is checked for the numbers and words it must carry, not for its wording."""

from __future__ import annotations

import dataclasses
import json

import pytest

from diag.scaletest.run import verdict
from diag.scaletest.stage import StageStatus
from tests.scaletest.factories import SHARED, SLOW_LINK, local_result, result


def missing(text: str, *parts: str) -> list[str]:
    """The parts (figures, stages, the finding's title, key words) that ``text`` lacks."""
    return [p for p in parts if p not in text]


def test_ranks_sharing_processors_are_no_cliff_and_the_verdict_says_why():
    r = result([1.0, 0.59, 0.32], SHARED[0], small_us=SHARED[1])
    # stage 2: 0.59 x (0.05 + 0.8 x 0.052/0.035 + 0.15 x 3); stage 4 likewise
    assert r.efficiency_normalised == pytest.approx([1.0, 0.9963, 0.9091], abs=1e-4)
    assert r.cliff_stage is None and r.healthy
    assert not missing(verdict(r), "no cliff", "1.00 -> 0.32", "0.052 -> 0.022 TFLOP/s",
                       "1000 -> 6000 us", "share processors", "0.91", "8 ranks")
    doc = r.to_json()
    assert doc["efficiency_basis"] == "probe-normalised" and doc["cliff_stage"] is None
    assert [(s["compute_tflops"], s["small_all_reduce_us"]) for s in doc["results"]] == [
        (0.052, 1000.0), (0.035, 3000.0), (0.022, 6000.0)]


def test_on_shared_processors_a_stage_keeping_half_of_its_host_efficiency_is_no_cliff():
    # stage 2: 0.36 x (0.05 + 0.8 x 0.052/0.035 + 0.15 x 3) = 0.61 against the host, a fall
    # of 0.39: beyond the 0.2 threshold, but the ranks came to share processors
    r = result([1.0, 0.36, 0.2], SHARED[0], small_us=SHARED[1])
    assert r.efficiency_normalised == pytest.approx([1.0, 0.6079, 0.5682], abs=1e-4)
    assert r.cliff_stage is None and r.healthy
    assert not missing(verdict(r), "no cliff", "1.00 -> 0.20", "share processors",
                       "0.052 -> 0.022 TFLOP/s", "1000 -> 6000 us", "0.57", "8 ranks", "50%")
    # the same fall where each rank keeps its processor is a cliff
    steady = result([1.0, 0.36, 0.2], [0.05] * 3, small_us=[1000.0, 3000.0, 6000.0])
    assert steady.cliff_stage == 2


def test_a_fall_beyond_what_the_host_predicts_is_a_cliff_and_its_finding_the_reason():
    r = result([1.0, 0.59, 0.12], SHARED[0], findings=SLOW_LINK, small_us=SHARED[1])
    assert r.cliff_stage == 4 and not r.healthy
    text = verdict(r)
    assert not missing(text, "0.59 -> 0.12", "1.00 -> 0.34", "stages 2 and 4",
                       "every link of node4 is slow")
    assert "no cliff" not in text


def test_without_a_finding_an_unpredicted_fall_is_still_a_cliff():
    text = verdict(result([1.0, 0.59, 0.12], SHARED[0], small_us=SHARED[1]))
    assert not missing(text, "0.59 -> 0.12", "stages 2 and 4", "no finding explains it")
    assert "no cliff" not in text
    assert "share processors" not in text


def test_a_predicted_fall_on_a_stage_with_a_finding_is_a_cliff_blamed_on_it():
    r = result([1.0, 0.59, 0.32], SHARED[0], findings=SLOW_LINK,
               small_us=SHARED[1])  # the host predicts 0.91
    assert r.cliff_stage == 4  # stage 2's fall is the host's, stage 4 has a fault
    assert not missing(verdict(r), "1.00 -> 0.91", "stages 2 and 4",
                       "every link of node4 is slow")


def test_a_stage_without_a_probe_reading_judges_raw_and_names_the_compute_fall():
    r = result([1.0, 0.59, 0.32], [0.052, 0.035, None], small_us=[1000.0, 3000.0, None])
    assert r.efficiency_normalised[2] is None and r.efficiency_basis == "raw"
    assert r.cliff_stage == 2  # nothing to check the fall against
    text = verdict(r)
    assert not missing(text, "1.00 -> 0.59", "1.00 -> 1.00", "stages 1 and 2",
                       "compute fell 0.052 -> 0.035 TFLOP/s", "share processors")
    assert "no cliff" not in text


def test_communication_needs_the_collective_reading_and_compute_alone_does_not():
    no_latency = result([1.0, 0.59, 0.32], SHARED[0])
    assert no_latency.efficiency_normalised == [None] * 3  # 15% comm, nothing to scale it
    assert no_latency.efficiency_basis == "raw" and no_latency.cliff_stage == 2


def test_no_probes_at_all_is_raw():
    r = result([1.0, 0.95, 0.9], [None, None, None])
    assert r.efficiency_normalised == [None] * 3 and r.efficiency_basis == "raw"
    text = verdict(r)
    assert not missing(text, "no cliff", "0.90", "8 ranks")
    assert "fell" not in text and "stage" not in text  # no fall to explain, no finding


def test_strong_scaling_is_judged_raw():
    r = result([1.0, 0.59, 0.32], SHARED[0], small_us=SHARED[1], strong=True)
    assert r.efficiency_normalised == [None] * 3 and r.cliff_stage == 2


def test_steady_host_and_a_later_finding_is_named():
    r = result([1.0, 0.6, 0.3], [0.05, 0.05, 0.05], SLOW_LINK, small_us=[1000.0] * 3)
    assert r.efficiency_normalised == r.efficiency and r.cliff_stage == 2
    text = verdict(r)
    assert not missing(text, "1.00 -> 0.60", "stages 1 and 2", "no finding explains it",
                       "stage 4", "every link of node4 is slow")
    assert text.index("stage 4") < text.index("every link of node4")  # named with its stage


def test_conclude_looks_for_the_cliff_after_analyzing_every_stage(monkeypatch, tmp_path):
    import diag.analyze
    from diag.scaletest.run import conclude

    class Finding:
        def to_json(self):
            return {"severity": "error", "title": "every link of node4 is slow"}

    def analyze(run_dir):  # what ddiag analyze finds on each stage of a throttled node4
        found = [Finding()] if str(run_dir).endswith("stage-4") else []
        return type("Analysis", (), {"findings": found})()

    monkeypatch.setattr(diag.analyze, "analyze", analyze)
    r = result([1.0, 0.59, 0.32], SHARED[0], small_us=SHARED[1])  # the host predicts both
    r.config, r.findings = dataclasses.replace(r.config, out=tmp_path), {}
    conclude(r, status=lambda line: None)
    assert r.cliff_stage == 4 and "every link of node4 is slow" in r.verdict


def test_from_one_rank_a_fall_that_is_the_collectives_time_is_no_cliff():
    # the local demo on 2 cores measured 1.00 -> 0.66 with 28% of the 2-rank step in
    # collectives: without them, 0.66 / 0.72 = 0.92 against 1 / 0.95 = 1.05, so 0.87 kept
    r = local_result([1.0, 0.66], [0.05, 0.28])
    assert r.efficiency_basis == "raw" and r.cliff_stage is None and r.healthy
    assert not missing(verdict(r), "no cliff", "1.00 -> 0.66", "communicate", "28%", "5%",
                       "0.87")


def test_from_one_rank_to_ranks_that_fill_the_cores_the_rest_may_keep_half():
    # the local demo on 2 cores also measured 1.00 -> 0.59 with 29% in collectives: the
    # rest kept 0.79, as the 2 ranks' helper threads and the OS took turns on their cores
    r = local_result([1.0, 0.59], [0.05, 0.29], cores=2)
    assert r.cliff_stage is None and r.healthy
    assert not missing(verdict(r), "no cliff", "1.00 -> 0.59", "communicate", "29%", "5%",
                       "0.79", "50%", "2 cores")
    assert local_result([1.0, 0.59], [0.05, 0.29]).cliff_stage == 2  # on 8 cores: a cliff
    assert local_result([1.0, 0.3], [0.05, 0.29], cores=2).cliff_stage == 2  # 0.40 kept


def test_from_one_rank_a_fall_beyond_the_collectives_time_is_a_cliff():
    r = local_result([1.0, 0.5], [0.05, 0.10])  # (0.5 / 0.9) / (1 / 0.95) = 0.53 kept
    assert r.cliff_stage == 2 and not r.healthy
    text = verdict(r)
    assert not missing(text, "1.00 -> 0.50", "stages 1 and 2", "no finding explains it",
                       "10%", "0.53")
    assert "no cliff" not in text


def test_from_one_rank_a_finding_makes_even_the_collectives_fall_a_cliff():
    r = local_result([1.0, 0.66], [0.05, 0.28],
                     findings={2: [{"severity": "error", "title": "rank 1 is a straggler"}]})
    assert r.cliff_stage == 2
    assert not missing(verdict(r), "stages 1 and 2", "rank 1 is a straggler")


def test_a_stage_that_hung_is_the_verdict_and_its_status_is_written_as_before():
    r = result([1.0, 0.59, 0.32], SHARED[0], small_us=SHARED[1])
    r.stages[1].status, r.stages[1].reason = StageStatus.HANG, "hang detected by the watcher"
    assert not r.healthy
    assert not missing(verdict(r), "stage 2", "hang", "hang detected by the watcher")
    doc = json.loads(json.dumps(r.to_json(), default=str))
    assert [s["status"] for s in doc["results"]] == ["ok", "hang", "ok"]
    assert [s.value for s in StageStatus] == ["ok", "hang", "failed", "check-env failed",
                                              "no metric", "trained nothing"]


def test_only_findings_above_info_are_problems_of_a_stage():
    info = {2: [{"severity": "info", "title": "NCCL uses sockets"}]}
    r = result([1.0, 0.59, 0.32], SHARED[0], info, small_us=SHARED[1])
    assert r.healthy and "NCCL uses sockets" not in verdict(r)
    r.findings[2] = [{"severity": "warn", "title": "rank 1 is a straggler"}]
    assert not r.healthy and "rank 1 is a straggler" in verdict(r)
