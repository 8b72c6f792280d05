"""probe compute: device-clock timing (CUDA faked) and the verdicts on recorded per-rank
results, against the other ranks and against the device's datasheet peak."""

from __future__ import annotations

import pytest
import torch

from probes import compute
from probes.compute import RankCompute, Verdict

N = 8192


def rank_at(rank: int, rate: float, name: str = "NVIDIA H100 80GB HBM3", n: int = N,
            math: str = "bf16", per_node: int = 4, device: str | None = None) -> RankCompute:
    """A rank's record whose matmuls ran at exactly ``rate`` TFLOP/s."""
    iters = 100
    seconds = 2 * n**3 * iters / (rate * 1e12)
    return RankCompute(rank, f"node{rank // per_node}", device or f"cuda:{rank % per_node}",
                       n, iters, seconds, name, math, "cuda_events")


def test_a_throttled_gpu_is_named_against_its_peers_and_its_peak():
    ranks = [rank_at(r, 300.0 if r == 5 else 700.0) for r in range(8)]
    report = compute.analyze(ranks, dtype="bfloat16")
    assert report.slow_ranks == (5,) and report.below_peak_ranks == (5,)
    doc = report.to_json()
    assert doc["format"] == "ddiag.probe_compute" and doc["schema"] == 2
    r0, r5 = doc["ranks"][0], doc["ranks"][5]
    assert r0["fraction_of_peak"] == pytest.approx(700 / 989.5)
    assert r0["peak_device"] == "H100 SXM" and not r0["below_peak"]
    assert r5["fraction_of_peak"] == pytest.approx(300 / 989.5) and r5["below_peak"]
    kinds = {(f.verdict, f.ranks) for f in report.findings}
    assert kinds == {(Verdict.SLOW_VS_PEERS, (5,)), (Verdict.BELOW_PEAK, (5,))}
    below = next(f for f in report.findings if f.verdict is Verdict.BELOW_PEAK)
    assert "rank 5 (node1" in below.message and "30% of the H100 SXM" in below.message
    assert "nvidia-smi -q -d PERFORMANCE" in below.fix


def test_every_gpu_slow_alike_is_below_peak_though_no_peer_stands_out():
    """All ranks at 40% of peak: the median hides it, the peak does not."""
    report = compute.analyze([rank_at(r, 400.0) for r in range(4)])
    assert report.slow_ranks == () and report.below_peak_ranks == (0, 1, 2, 3)


def test_a_healthy_h200_at_its_measured_rate_is_not_flagged():
    """788 TFLOP/s bf16 at 8192^3, what CUDA events show on an H200: 80% of peak."""
    report = compute.analyze([rank_at(0, 788.0, "NVIDIA H200")])
    assert report.findings == () and report.peaks[0].fraction == pytest.approx(788 / 989.5)


def test_an_unknown_device_gets_no_fraction_and_says_so():
    ranks = [rank_at(r, 80.0, "NVIDIA GeForce RTX 4090") for r in range(2)]
    report = compute.analyze(ranks)
    assert [p.fraction for p in report.peaks] == [None, None] and report.below_peak_ranks == ()
    (f,) = report.findings
    assert f.verdict is Verdict.PEAK_UNKNOWN and f.severity == "info" and f.ranks == (0, 1)
    assert "not in ddiag's peak table" in f.message and "peaks.tsv" in f.fix
    assert report.to_json()["ranks"][0]["fraction_of_peak"] is None


def test_a_slower_model_among_faster_ones_is_named_as_such():
    ranks = [rank_at(r, 700.0) for r in range(3)] + [rank_at(3, 100.0, "NVIDIA L4")]
    slow = next(f for f in compute.analyze(ranks).findings if f.verdict is Verdict.SLOW_VS_PEERS)
    assert slow.ranks == (3,) and "its GPU is a NVIDIA L4, most ranks' a NVIDIA H100" in slow.message


def test_a_known_device_without_that_math_says_which_math():
    (f,) = compute.analyze([rank_at(0, 20.0, "Tesla V100-SXM2-16GB")]).findings
    assert f.verdict is Verdict.PEAK_UNKNOWN and "no bf16 peak" in f.message


def test_a_small_matmul_shows_its_fraction_but_is_not_flagged():
    report = compute.analyze([rank_at(r, 100.0, n=1024) for r in range(2)])
    assert report.below_peak_ranks == () and report.peaks[0].fraction == pytest.approx(100 / 989.5)
    assert [f.verdict for f in report.findings] == [Verdict.TOO_SMALL_FOR_PEAK]


def test_cpu_ranks_are_judged_against_their_peers_only():
    ranks = [RankCompute(r, f"node{r // 2}", "cpu", 1000, 10, 0.02 * (3 if r == 5 else 1),
                         "cpu", "fp32") for r in range(8)]
    report = compute.analyze(ranks)
    assert report.slow_ranks == (5,) and all(p.fraction is None for p in report.peaks)
    assert [f.verdict for f in report.findings] == [Verdict.SLOW_VS_PEERS]
    assert "top" in report.findings[0].fix


def test_a_schema_1_record_without_device_name_still_analyses():
    """Ranks of an older ddiag send no device_name, math or timer: no peak, no crash."""
    report = compute.analyze([RankCompute(0, "a", "cuda:0", N, 10, 1.0)])
    assert report.peaks[0].fraction is None


class FakeCuda:
    """torch.cuda's events as the timing path uses them, recording every call in order;
    each event pair spans ``ms_per_matmul`` per matmul recorded between them."""

    def __init__(self, log: list, ms_per_matmul: float = 2.0) -> None:
        self.log, self.ms, self.created = log, ms_per_matmul, []

    def Event(self, enable_timing: bool = False):  # noqa: N802 - torch's name
        assert enable_timing, "an event without enable_timing has no elapsed_time"
        event = FakeEvent(self, len(self.created))
        self.created.append(event)
        return event

    def synchronize(self, device=None) -> None:
        self.log.append("device.synchronize")


class FakeEvent:
    def __init__(self, cuda: FakeCuda, index: int) -> None:
        self.cuda, self.index, self.at = cuda, index, None

    def record(self, stream=None) -> None:
        self.at = len(self.cuda.log)
        self.cuda.log.append(f"record{self.index}")

    def synchronize(self) -> None:
        self.cuda.log.append("event.synchronize")

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert "event.synchronize" in self.cuda.log[end.at:], "read before the event completed"
        return self.cuda.ms * self.cuda.log[self.at:end.at].count("mm")


@pytest.fixture
def fake_cuda(monkeypatch):
    log: list = []
    fake = FakeCuda(log)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    return fake


def test_cuda_timing_uses_events_and_waits_once_per_measurement(fake_cuda):
    log = fake_cuda.log
    iters, seconds = compute.measure(lambda: log.append("mm"), 0.1, on_cuda=True,
                                     barrier=lambda: log.append("barrier"))
    assert iters == 50 and seconds == pytest.approx(0.1)  # 2 ms a matmul, by the events
    waits = [x for x in log if x.endswith("synchronize")]
    assert waits == ["event.synchronize"] * 2  # the pilot and the run: never per iteration
    assert log[:compute.WARMUP] == ["mm"] * compute.WARMUP  # warm-up: untimed, no wait
    run = log[log.index("barrier") + 1:]
    assert run == ["record2", *["mm"] * 50, "record3", "event.synchronize"]


def test_cuda_seconds_converts_the_events_milliseconds(fake_cuda):
    log = fake_cuda.log
    assert compute.cuda_seconds(lambda: log.append("mm"), 7) == pytest.approx(0.014)
    assert log.count("event.synchronize") == 1


def test_cpu_timing_uses_the_host_clock_and_no_cuda(fake_cuda):
    calls = []
    iters, seconds = compute.measure(lambda: calls.append(1), 0.01, on_cuda=False)
    assert fake_cuda.created == [] and fake_cuda.log == []
    assert iters >= 1 and seconds >= 0 and len(calls) == compute.WARMUP + 1 + iters


def test_the_cuda_path_times_a_real_matmul_with_fake_events(fake_cuda):
    """The operands and matmul are real (on CPU); only torch.cuda is faked."""
    mm = compute._operands(64, "cpu", "float32")
    log = fake_cuda.log
    iters, _ = compute.measure(lambda: (log.append("mm"), mm()), 0.02, on_cuda=True)
    assert iters == 10 and log.count("event.synchronize") == 2


def test_the_cli_exits_1_when_every_gpu_is_below_its_peak(capsys):
    """No rank stands out from the others, yet all run at 40% of peak: flagged."""
    import json

    from diag.cli.probe import show

    doc = compute.analyze([rank_at(r, 400.0) for r in range(2)]).to_json()
    with pytest.raises(SystemExit) as done:
        show("compute", doc, as_json=True)
    assert done.value.code == 1
    assert json.loads(capsys.readouterr().out)["below_peak_ranks"] == [0, 1]
