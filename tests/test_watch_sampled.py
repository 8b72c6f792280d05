"""The sampling watcher of ``ddiag watch --pid`` (diag/watch/sampled.py: SampleWatcher)
on factory-built samples, and what it reads beside the stacks (diag/watch/pgtimeout.py);
no processes. The real-rank versions are in tests/test_watch_mistakes.py."""

from __future__ import annotations

from diag.analyze import stackgroups
from diag.verdict import Category, Severity
from diag.watch import pgtimeout
from diag.watch.sampled import Sample, SampleWatcher
from tests.analyze.test_stacks_verdicts import (BACKWARD, BARRIER_AFTER_SAVE,
                                                BUFFER_BROADCAST, DATALOADER, SAVING, TRAIN,
                                                pyspy_doc)

STALL_S = 10.0
COMPUTE = (("work", TRAIN, 70), ("train", TRAIN, 80), ("main", TRAIN, 104))


def stack(rank: int, frames: tuple, active: bool = False) -> stackgroups.Stack:
    return stackgroups.from_pyspy(pyspy_doc(frames, 4000 + rank, active), rank, "", "node1")


def feed(watcher: SampleWatcher, rounds: list[dict], start: float = 1000.0,
         every_s: float = 1.0):
    """One observation a second; each round is rank -> (frames or None, cpu seconds, active).
    Returns the first alarm and when it came."""
    for i, by_rank in enumerate(rounds):
        samples = {r: Sample(stack(r, f, a) if f is not None else None, cpu)
                   for r, (f, cpu, a) in by_rank.items()}
        alarm = watcher.observe(samples, start + i * every_s)
        if alarm is not None:
            return alarm, start + i * every_s
    return None, None


def steady(frames0, frames1, n: int, cpu=(0.0, 0.0)) -> list[dict]:
    return [{0: (frames0, cpu[0], False), 1: (frames1, cpu[1], False)}] * n


def test_a_mismatch_alarms_at_the_stall_with_the_verdict_ddiag_stacks_gives() -> None:
    alarm, at = feed(SampleWatcher(STALL_S), steady(BARRIER_AFTER_SAVE, BUFFER_BROADCAST, 15))
    assert at == 1000.0 + STALL_S
    assert alarm.finding.category is Category.COLLECTIVE_MISMATCH
    assert alarm.finding.culprit.ranks == (0,)
    snapshot = stackgroups.verdict(stackgroups.group(
        [stack(0, BARRIER_AFTER_SAVE), stack(1, BUFFER_BROADCAST)]))
    assert alarm.finding.title == snapshot.title  # one code path


def test_a_rank_whose_sample_failed_keeps_its_last_stack() -> None:
    # py-spy --nonblocking fails now and then on a loaded host: the rank must not drop out
    # of the grouping (one group left would read as "every rank at the same point")
    rounds = steady(BARRIER_AFTER_SAVE, BUFFER_BROADCAST, 2) + \
        [{0: (None, 0.0, False), 1: (BUFFER_BROADCAST, 0.0, False)}] * 13
    alarm, _ = feed(SampleWatcher(STALL_S), rounds)
    assert alarm.finding.category is Category.COLLECTIVE_MISMATCH
    assert alarm.finding.culprit.ranks == (0,)


def test_a_rank_in_its_dataloader_is_named_though_the_waiting_rank_burns_cpu() -> None:
    # gloo's wait, like NCCL's busy-wait, may spin: a waiting rank's CPU is no progress
    rounds = [{0: (BUFFER_BROADCAST, float(i), False), 1: (DATALOADER, 0.01 * i, False)}
              for i in range(15)]
    alarm, at = feed(SampleWatcher(STALL_S), rounds)
    assert at == 1000.0 + STALL_S
    assert alarm.finding.category is Category.RANK_HANG and alarm.finding.culprit.ranks == (1,)
    assert "data loading" in alarm.finding.title


def test_every_rank_in_one_collective_waits_for_the_longer_limit() -> None:
    watcher = SampleWatcher(STALL_S, same_point_s=30.0)
    alarm, at = feed(watcher, steady(BACKWARD, BACKWARD, 40))
    assert at == 1030.0 and alarm.finding.severity is Severity.INFO


def test_a_save_past_the_known_timeout_is_timeout_too_short() -> None:
    alarm, _ = feed(SampleWatcher(STALL_S, pg_timeout=(8.0, "train.py")),
                    steady(SAVING, BUFFER_BROADCAST, 15))
    assert alarm.finding.category is Category.TIMEOUT_TOO_SHORT
    assert alarm.finding.culprit.ranks == (0,) and "8 s, from train.py" in alarm.finding.title
    within, _ = feed(SampleWatcher(STALL_S, pg_timeout=(60.0, "train.py")),
                     steady(SAVING, BUFFER_BROADCAST, 15))
    assert within.finding.category is Category.RANK_HANG
    assert within.finding.details["pg_timeout_s"] == 60.0


def test_a_job_that_ends_in_a_stall_keeps_its_verdict() -> None:
    # the others' collective timed out at 8 s and the job ended before --stall
    watcher = SampleWatcher(STALL_S, pg_timeout=(8.0, "train.py"), sample_s=1.0)
    alarm, _ = feed(watcher, steady(SAVING, BUFFER_BROADCAST, 8))
    assert alarm is None
    ended = watcher.ended(1009.0)
    assert ended.finding.category is Category.TIMEOUT_TOO_SHORT
    assert watcher.ended(1007.0 + 60) is None  # a stall long gone explains nothing


def test_a_rank_slower_than_the_others_while_the_job_moves_is_a_straggler() -> None:
    watcher = SampleWatcher(STALL_S, sample_s=1.0)
    rounds = [{0: (BACKWARD if i % 3 else COMPUTE, float(i), False),
               1: (COMPUTE if i % 2 else COMPUTE[1:], float(i), True)} for i in range(12)]
    alarm, _ = feed(watcher, rounds)
    assert alarm is None
    assert watcher.straggler.category is Category.STRAGGLER
    assert watcher.straggler.culprit.ranks == (1,)


def test_a_hung_rank_is_no_straggler() -> None:
    watcher = SampleWatcher(STALL_S, sample_s=1.0)
    feed(watcher, steady(SAVING, BUFFER_BROADCAST, 9))
    assert watcher.straggler is None


def test_the_timeout_is_read_from_the_script_and_its_command_line() -> None:
    src = ("p.add_argument('--timeout-s', type=float, default=1800.0)\n"
           "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=args.timeout_s))")
    assert pgtimeout.from_source(src, ["--timeout-s", "8"]) == 8.0
    assert pgtimeout.from_source(src, ["--timeout-s=12"]) == 12.0
    assert pgtimeout.from_source(src, []) == 1800.0
    assert pgtimeout.from_source("init_process_group('nccl', timeout=timedelta(minutes=5, "
                                 "seconds=30))", []) == 330.0
    # near misses: no timeout, or one this cannot evaluate
    assert pgtimeout.from_source("dist.init_process_group('nccl')", []) is None
    assert pgtimeout.from_source("init_process_group(timeout=timedelta(seconds=f()))", []) \
        is None


def test_a_dataloader_wait_is_one_place_however_deep_its_poll_loop_was_sampled() -> None:
    # the queue get times out every 5 s and loops: the inner frames differ from sample to
    # sample while the rank stays stuck at the same line of train()
    woken = (("Queue.get", DATALOADER[2][1], 108), *DATALOADER[3:])
    rounds = [{0: (BUFFER_BROADCAST, 0.0, False), 1: (woken if i % 3 else DATALOADER, 0.0,
                                                      False)} for i in range(15)]
    alarm, at = feed(SampleWatcher(STALL_S), rounds)
    assert at == 1000.0 + STALL_S and alarm.finding.culprit.ranks == (1,)
    moving = [{0: (BUFFER_BROADCAST, 0.0, False),
               1: (DATALOADER[:5] + (("train", TRAIN, 81 + i % 2),) + DATALOADER[6:], 0.0,
                   False)} for i in range(15)]
    assert feed(SampleWatcher(STALL_S), moving)[0] is None  # a new line of train: it moved


def test_the_jobs_log_is_kept_only_while_it_is_the_file_the_job_wrote(tmp_path) -> None:
    import os
    import subprocess

    from diag.watch import joblog

    log = tmp_path / "train.log"
    with open(log, "w") as out:
        job = subprocess.Popen(["sleep", "30"], stdout=out, stderr=subprocess.STDOUT)
    try:
        found = joblog.of_processes([job.pid])
    finally:
        job.kill()
        job.wait()
    assert [f.path for f in found] == [str(log)]  # stdout and stderr: one file, once
    log.write_text("rank 0 step 3\nSignal 15 (SIGTERM) received by PID 4242\n")
    os.chmod(log, 0o600)
    kept = joblog.keep(found, tmp_path / "run")
    assert [p.read_text() for p in kept] == [log.read_text()]
    assert kept[0].stat().st_mode & 0o777 == 0o600  # a private log stays private
    # the path now names another file (a symlink planted to /etc/shadow, say): not copied
    log.unlink()
    (tmp_path / "other").write_text("secret\n")
    log.symlink_to(tmp_path / "other")
    assert joblog.keep(found, tmp_path / "run2") == []
