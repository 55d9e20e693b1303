"""Each sweep run folder has one owner: a second runner, or a rerun while an orphaned run still
works, leaves it alone; a folder whose owner is gone is started afresh."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from identifiable_cl.aggregate import results
from identifiable_cl.sweeps.local import STATUS, Busy, claim, read_status, release, run_environment
from identifiable_cl.sweeps.search import run_sweep
from identifiable_cl.sweeps.plan import plan_runs
from identifiable_cl.sweeps.spec import load_sweep

FAKE = str(Path(__file__).with_name("fake_train.py"))
ROOT = Path(__file__).resolve().parents[2]


def write_sweep(path, seeds=(0,)):
    path.write_text(yaml.safe_dump({
        "name": "owned", "method": "grid", "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"seed": {"values": list(seeds)}, "loss.tau": {"value": 0.2}},
    }))
    return load_sweep(path)


def quiet(_line):
    pass


def test_a_folder_owned_by_a_live_process_is_left_alone(tmp_path):
    spec = write_sweep(tmp_path / "s.yaml", seeds=(0, 1))
    runs = plan_runs(spec, tmp_path / "out")
    held = claim(runs[0])
    runs[0].folder.mkdir(parents=True)
    (runs[0].folder / "being-written").write_text("by someone else")
    try:
        lines = []
        outcomes = run_sweep(spec, tmp_path / "out", echo=lines.append)
        with pytest.raises(Busy):
            claim(runs[0])
    finally:
        release(held)
    assert [o.state for o in outcomes] == ["busy", "finished"]
    assert (runs[0].folder / "being-written").exists()
    assert any("owned by a live process" in line for line in lines)
    assert "1 left to the live processes that own them" in lines[-1]
    assert [o.state for o in run_sweep(spec, tmp_path / "out", echo=quiet)] == ["finished", "skipped"]


def test_a_folder_whose_owner_is_gone_is_restarted(tmp_path):
    spec = write_sweep(tmp_path / "s.yaml")
    (run,) = plan_runs(spec, tmp_path / "out")
    run.folder.mkdir(parents=True)
    (run.folder / STATUS).write_text(json.dumps({"state": "running", "exit_code": None, "pid": 999999999}))
    lines = []
    (outcome,) = run_sweep(spec, tmp_path / "out", echo=lines.append)
    assert outcome.state == "finished"
    assert any("restarted; the process that ran it before (pid 999999999) is gone" in line for line in lines)
    status = read_status(run.folder)
    assert status["owner_pid"] == os.getpid() and isinstance(status["pid"], int) and status["pid"] != os.getpid()


@pytest.mark.integration
def test_killing_only_the_runner_leaves_the_run_owned_by_the_run(tmp_path):
    spec = write_sweep(tmp_path / "s.yaml")
    (run,) = plan_runs(spec, tmp_path / "out")
    env = {**os.environ, "FAKE_SLEEP": "4", "PYTHONPATH": str(ROOT)}
    runner = subprocess.Popen([sys.executable, "-m", "identifiable_cl.cli", "sweep", "run", str(tmp_path / "s.yaml"),
                               "--out", str(tmp_path / "out")], env=env, stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (read_status(run.folder) or {}).get("pid"):
        assert time.time() < deadline and runner.poll() is None, "the run never started"
        time.sleep(0.05)
    child = read_status(run.folder)["pid"]
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    with pytest.raises(Busy, match=f"pid {child}"):
        claim(run)  # the orphan still holds the folder
    (outcome,) = run_sweep(spec, tmp_path / "out", echo=quiet)
    assert outcome.state == "busy"
    while Path(f"/proc/{child}").exists() and time.time() < deadline:
        time.sleep(0.05)
    release(claim(run))  # the orphan is gone, and so is its hold


def test_w_and_b_ids_depend_on_the_output_folder_and_the_service_is_not_inherited(tmp_path):
    spec = write_sweep(tmp_path / "s.yaml")
    (a,) = plan_runs(spec, tmp_path / "a")
    (b,) = plan_runs(spec, tmp_path / "b")
    assert a.run_id == b.run_id and a.wandb_id != b.wandb_id
    env = run_environment(spec, a, None, {"WANDB_SERVICE": "2-1234-tcp-localhost-5678", "HOME": "/x"})
    assert "WANDB_SERVICE" not in env and env["WANDB_RUN_ID"] == a.wandb_id and env["HOME"] == "/x"


@pytest.mark.parametrize("name, text", [
    ("params.yaml", "- not\n- a mapping\n"),
    ("params.yaml", "seed: 3\n"),
    ("status.json", "{torn"),
])
def test_one_damaged_sweep_folder_does_not_break_the_table(tmp_path, name, text):
    spec = write_sweep(tmp_path / "s.yaml", seeds=(0, 1))
    outcomes = run_sweep(spec, tmp_path / "out", echo=quiet)
    (outcomes[0].run.folder / name).write_text(text)
    rows = json.loads(results([tmp_path / "out"], fmt="json"))
    assert sum(row["n"] for row in rows) == 1 and sum(row["failed"] for row in rows) == 1
    problems = [r["problem"] for row in rows for r in row["failed_runs"]]
    assert problems and (name in problems[0] or "no exit code" in problems[0])


def test_group_by_an_unknown_key_is_an_error(tmp_path):
    spec = write_sweep(tmp_path / "s.yaml", seeds=(0, 1))
    run_sweep(spec, tmp_path / "out", echo=quiet)
    with pytest.raises(ValueError, match="--group-by loss.tauu: not a parameter of any run found; did you mean loss.tau"):
        results([tmp_path / "out"], group_by=["loss.tauu"])


@pytest.mark.integration
@pytest.mark.parametrize("left", [
    {"state": "running", "exit_code": None},  # its runner was killed
    {"state": "failed", "exit_code": -signal.SIGUSR2},  # a stop signal arrived while its next attempt started
])
def test_an_interrupted_icl_train_run_resumes_from_its_checkpoint(tmp_path, tiny, interrupt_at, left):
    from identifiable_cl.components import load_config
    from identifiable_cl.sweeps.local import PARAMS, RUN, write_params
    from identifiable_cl.training import Interrupted, Trainer

    params = {**tiny, "seed": 3, "train.steps": 20}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "resumed", "method": "grid", "command": [sys.executable, "-m", "identifiable_cl.cli", "train", "${args}"],
        "parameters": {k: {"value": v} for k, v in params.items()},
    }))
    spec = load_sweep(path)
    (run,) = plan_runs(spec, tmp_path / "out")
    # the state an interrupted run leaves: the run's folder, its checkpoint at step 10, its status
    run.folder.mkdir(parents=True)
    write_params(run.folder / PARAMS, run.params)
    interrupt_at(13)
    with pytest.raises(Interrupted):
        Trainer.create(load_config(None, run.params), run.folder / RUN, progress=False).run()
    interrupt_at(None)
    command = [sys.executable, "-m", "identifiable_cl.cli", "train", "--run-dir", str(run.folder / RUN)]
    (run.folder / STATUS).write_text(json.dumps({**left, "pid": 999999999, "command": command}))
    lines = []
    (outcome,) = run_sweep(spec, tmp_path / "out", echo=lines.append)
    assert outcome.state == "finished", (run.folder / "stdout.log").read_text()
    assert any("resumed from its checkpoint at step 10" in line for line in lines)
    status = read_status(run.folder)
    assert status["resumed_from_step"] == 10 and "--resume" in status["command"]
    resumed = json.loads((run.folder / RUN / "summary.json").read_text())
    alone = Trainer.create(load_config(None, run.params), tmp_path / "alone", progress=False).run()
    assert resumed["steps"] == 20
    for key in ("r2_linear", "mcc_pearson", "identity_r2_linear"):
        assert resumed[key] == pytest.approx(alone[key], rel=1e-12, abs=1e-12)
    assert [o.state for o in run_sweep(spec, tmp_path / "out", echo=quiet)] == ["skipped"]


def test_a_run_with_other_parameters_in_its_folder_is_started_afresh(tmp_path):
    from identifiable_cl.sweeps.local import PARAMS, RUN, resumable_step, write_params

    spec = write_sweep(tmp_path / "s.yaml")
    (run,) = plan_runs(spec, tmp_path / "out")
    (run.folder / RUN).mkdir(parents=True)
    (run.folder / RUN / "checkpoint.pt").write_bytes(b"")
    (run.folder / STATUS).write_text(json.dumps({"state": "running", "pid": 999999999,
                                                 "command": ["icl", "train", "--run-dir", "x"]}))
    write_params(run.folder / PARAMS, {**run.params, "loss.tau": 0.3})
    assert resumable_step(spec, run) is None  # other parameters
    write_params(run.folder / PARAMS, run.params)
    assert resumable_step(spec, run) is None  # an unreadable checkpoint
    (run.folder / STATUS).write_text(json.dumps({"state": "running", "pid": 999999999,
                                                 "command": [sys.executable, FAKE, "train"]}))
    assert resumable_step(spec, run) is None  # not icl train


def test_the_runner_writes_a_heartbeat_while_its_run_lives(tmp_path, monkeypatch):
    from identifiable_cl.sweeps import local

    monkeypatch.setattr(local, "HEARTBEAT_EVERY", 0.1)
    calls = []
    fd = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT)
    try:
        code, stopped = local._launch([sys.executable, "-c", "import time; time.sleep(1.5)"], dict(os.environ),
                                      tmp_path / "log", fd, calls.append)
    finally:
        os.close(fd)
    assert (code, stopped) == (0, False)
    assert isinstance(calls[0], int) and len(calls) >= 4 and set(calls[1:]) == {None}


def test_a_running_status_without_a_recent_heartbeat_is_lost_and_shown_so(tmp_path):
    from identifiable_cl.sweeps.local import LOST_AFTER, TIME_FORMAT, lost

    def beat(seconds_ago):
        return time.strftime(TIME_FORMAT, time.localtime(time.time() - seconds_ago))

    assert lost({"state": "running", "heartbeat": beat(LOST_AFTER + 5)})
    assert not lost({"state": "running", "heartbeat": beat(1)})
    assert not lost({"state": "failed", "exit_code": 130, "heartbeat": beat(LOST_AFTER + 5)})
    assert not lost({"state": "running"}) and not lost({"state": "running", "heartbeat": "yesterday"})
    spec = write_sweep(tmp_path / "s.yaml", seeds=(0, 1))
    assert [o.state for o in run_sweep(spec, tmp_path / "out", echo=quiet)] == ["finished", "finished"]
    run = plan_runs(spec, tmp_path / "out")[1]
    status = {**read_status(run.folder), "state": "running", "exit_code": None, "heartbeat": beat(LOST_AFTER + 60)}
    (run.folder / STATUS).write_text(json.dumps(status))
    (row,) = json.loads(results([tmp_path / "out"], fmt="json"))
    assert row["failed"] == 1
    assert row["failed_runs"][0]["problem"].startswith("lost: its runner stopped reporting (last heartbeat ")


def test_each_resumption_is_recorded_in_the_status(tmp_path):
    from identifiable_cl.sweeps.local import _start

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "again", "method": "grid", "command": [sys.executable, "-m", "identifiable_cl.cli", "train", "${args}"],
        "parameters": {"seed": {"value": 0}},
    }))
    spec = load_sweep(path)
    (run,) = plan_runs(spec, tmp_path / "out")
    _start(spec, run, None, 1)
    assert "resumed_from_steps" not in read_status(run.folder)
    for step, history in ((10, [10]), (25, [10, 25])):
        argv, _, status = _start(spec, run, None, 1, resumed=step)
        assert read_status(run.folder) == status and "--resume" in argv
        assert (status["resumed_from_step"], status["resumed_from_steps"]) == (step, history)


def test_the_runs_of_a_sweep_share_one_identity_baseline_folder(tmp_path):
    from identifiable_cl.rundir import IDENTITY_CACHE

    spec = write_sweep(tmp_path / "s.yaml", seeds=(0, 1))
    runs = plan_runs(spec, tmp_path / "out")
    shared = {run_environment(spec, run, None, {})[IDENTITY_CACHE] for run in runs}
    assert shared == {str((tmp_path / "out" / "owned" / ".identity").resolve())}
    assert run_environment(spec, runs[0], None, {IDENTITY_CACHE: "/elsewhere"})[IDENTITY_CACHE] == "/elsewhere"


def test_a_run_that_exits_0_without_a_summary_failed(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "echoed", "method": "grid", "command": ["echo", "${args}"],
                                    "parameters": {"seed": {"values": [0]}}}))
    spec = load_sweep(path)
    (outcome,) = run_sweep(spec, tmp_path / "out", echo=quiet)
    status = read_status(outcome.run.folder)
    assert (outcome.state, status["state"], status["exit_code"]) == ("failed", "failed", 0)
    assert status["problem"].startswith("exit 0 but no run/summary.json")
    assert [o.state for o in run_sweep(spec, tmp_path / "out", echo=quiet)] == ["failed"]  # tried again, not skipped
