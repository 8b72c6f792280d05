"""diag.runtime.flight_recorder: enabling, atomic dumps, and dumps on signals that chain on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from diag.runtime import flight_recorder
from tests.util import quiet_env


def test_importing_it_does_not_import_torch():
    code = "import sys, diag.runtime.flight_recorder; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_enable_keeps_the_users_choice(monkeypatch):
    monkeypatch.delenv(flight_recorder.BUFFER_ENV, raising=False)
    monkeypatch.delenv(flight_recorder.LEGACY_BUFFER_ENV, raising=False)
    assert flight_recorder.enable(123) == 123
    assert os.environ[flight_recorder.BUFFER_ENV] == "123"
    monkeypatch.setenv(flight_recorder.BUFFER_ENV, "7")
    assert flight_recorder.enable() == 7
    monkeypatch.delenv(flight_recorder.BUFFER_ENV)
    monkeypatch.setenv(flight_recorder.LEGACY_BUFFER_ENV, "9")
    assert flight_recorder.enable() == 9
    assert flight_recorder.BUFFER_ENV not in os.environ


def test_write_atomic_leaves_the_whole_file_and_no_temporaries(tmp_path):
    path = tmp_path / "fr" / "rank00003.json"
    flight_recorder.write_atomic(path, b'{"version": "2.10"}')
    flight_recorder.write_atomic(path, '{"version": "2.11"}')
    assert json.loads(path.read_text()) == {"version": "2.11"}
    assert [p.name for p in path.parent.iterdir()] == ["rank00003.json"]
    assert flight_recorder.dump_path(tmp_path, 3) == path


# A one-rank gloo group: three all_reduces, a SIGUSR1 (dump, chain to the handler that
# was there before, keep running), one more all_reduce, then SIGTERM (dump, then die of
# it). Prints what the chained handler saw.
SIGNALLED_RANK = """
import os, signal, sys, time
import torch, torch.distributed as dist
from diag.runtime import flight_recorder
out = sys.argv[1]
flight_recorder.enable()
dist.init_process_group("gloo", init_method="file://" + out + "/store", rank=0, world_size=1)
seen = []
signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
assert not flight_recorder.installed()
assert flight_recorder.install(flight_recorder.dump_path(out, 0))
assert flight_recorder.installed()
for _ in range(3):
    dist.all_reduce(torch.ones(4))
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.5)
print("chained", seen, flush=True)
os.rename(flight_recorder.dump_path(out, 0), out + "/after_usr1.json")
dist.all_reduce(torch.ones(5))
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("survived SIGTERM", flush=True)
"""


def test_signals_dump_then_chain(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SIGNALLED_RANK, str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=quiet_env())
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-3000:]
    assert f"chained [{int(signal.SIGUSR1)}]" in proc.stdout
    assert "survived" not in proc.stdout
    after_usr1 = json.loads((tmp_path / "after_usr1.json").read_text())
    at_exit = json.loads(flight_recorder.dump_path(tmp_path, 0).read_text())
    assert {"version", "pg_config", "pg_status", "entries"} <= set(after_usr1)
    sizes = [e["input_sizes"] for e in at_exit["entries"] if e["profiling_name"] == "gloo:all_reduce"]
    assert sizes == [[[4]]] * 3 + [[[5]]]
    assert len(after_usr1["entries"]) == len(at_exit["entries"]) - 1
