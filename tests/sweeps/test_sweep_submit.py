"""``icl sweep submit`` through submitit's debug and local executors (offline runs and online agents)."""

import stat
import sys
from pathlib import Path

import pytest
import yaml

from identifiable_cl.cli import main
from identifiable_cl.sweeps.local import read_status
from identifiable_cl.sweeps.spec import load_sweep
from identifiable_cl.sweeps.submit import make_executor, submit_offline, submit_online

FAKE = str(Path(__file__).with_name("fake_train.py"))


def write_sweep(path: Path, seeds=(0, 13)) -> Path:
    config = {
        "name": "fake",
        "method": "grid",
        "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"seed": {"values": list(seeds)}, "loss.tau": {"value": 0.5}},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_debug_executor_offline_jobs_record_status_and_resume(tmp_path):
    spec = load_sweep(write_sweep(tmp_path / "fake.yaml"))
    out = tmp_path / "out"
    executor = make_executor(tmp_path / "submitit", "debug", name="test")
    runs, jobs = submit_offline(spec, out, executor)
    assert [job.result() for job in jobs] == [0, 3]
    assert [read_status(r.folder)["state"] for r in runs] == ["finished", "failed"]
    assert (runs[0].folder / "run" / "summary.json").is_file()
    again, jobs = submit_offline(spec, out, executor)
    assert [r.params["seed"] for r in again] == [13] and [job.result() for job in jobs] == [3]


def test_debug_executor_online_agents(tmp_path):
    record = tmp_path / "calls.txt"
    fake_wandb = tmp_path / "wandb"
    fake_wandb.write_text(f"#!/bin/sh\necho \"$@\" >> {record}\n")
    fake_wandb.chmod(fake_wandb.stat().st_mode | stat.S_IEXEC)
    executor = make_executor(tmp_path / "submitit", "debug", name="agents")
    jobs = submit_online("ent/proj/abc123", executor, count=3, executable=str(fake_wandb))
    assert [job.result() for job in jobs] == [0, 0, 0]
    assert record.read_text().splitlines() == ["agent --count 1 ent/proj/abc123"] * 3
    with pytest.raises(ValueError, match="--count 0"):
        submit_online("abc", executor, count=0)


def test_executor_settings_and_bad_cluster(tmp_path):
    executor = make_executor(tmp_path / "s", "local", name="x", gpus_per_node=0, timeout_min=30)
    assert executor._executor.parameters["timeout_min"] == 30
    with pytest.raises(ValueError, match="^--parallelism: Slurm settings, which --cluster local would ignore"):
        make_executor(tmp_path / "s", "local", name="x", parallelism=2)  # submitit's local executor starts every job
    with pytest.raises(ValueError, match="--cluster 'k8s'"):
        make_executor(tmp_path / "s", "k8s", name="x")
    # Slurm warns up to a minute early: a limit that leaves no time to start before the warning is refused
    with pytest.raises(ValueError, match=r"^--timeout-min 2: Slurm warns a job 90 s before .* give at least 3$"):
        make_executor(tmp_path / "s", "slurm", name="x", timeout_min=2)
    assert make_executor(tmp_path / "s", "slurm", name="x", timeout_min=2, warn_s=30)._executor.parameters["signal_delay_s"] == 30


def test_cli_submit_debug(tmp_path, capsys):
    path = write_sweep(tmp_path / "fake.yaml")
    assert main(["sweep", "submit", str(path), "--cluster", "debug", "--out", str(tmp_path / "out")]) == 1
    assert "1 finished, 1 failed" in capsys.readouterr().out
    out = tmp_path / "online"
    assert main(["sweep", "submit", str(path), "--cluster", "debug", "--sweep-id", "abc", "--out", str(out)]) == 2
    assert "--count: required with --sweep-id" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_local_executor_runs_jobs_as_subprocesses(tmp_path):
    spec = load_sweep(write_sweep(tmp_path / "fake.yaml", seeds=(0, 1)))
    executor = make_executor(tmp_path / "submitit", "local", name="local", timeout_min=5)
    runs, jobs = submit_offline(spec, tmp_path / "out", executor)
    assert [job.result() for job in jobs] == [0, 0]
    assert all(read_status(r.folder)["exit_code"] == 0 for r in runs)
