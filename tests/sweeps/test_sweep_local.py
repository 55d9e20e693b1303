"""The local runner end to end: parallel workers, agent environment, failures, resume, results."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from identifiable_cl.cli import main
from identifiable_cl.aggregate import results
from identifiable_cl.sweeps.local import LOG, PARAMS, RUN, STATUS, read_status
from identifiable_cl.sweeps.search import run_sweep
from identifiable_cl.sweeps.plan import plan_runs, train_arguments
from identifiable_cl.sweeps.spec import load_sweep

FAKE = str(Path(__file__).with_name("fake_train.py"))


def write_sweep(path: Path, seeds=(0, 1, 13), **extra) -> Path:
    config = {
        "name": "fake",
        "method": "grid",
        "metric": {"name": "r2_linear", "goal": "maximize"},
        "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"loss.tau": {"values": [0.1, 0.5]}, "seed": {"values": list(seeds)}, "train.steps": {"value": 5}},
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def quiet(_line):
    pass


def test_two_workers_agent_environment_failures_and_devices(tmp_path, monkeypatch):
    from wandb.sdk.lib.config_util import dict_from_config_file

    monkeypatch.setenv("FAKE_SLEEP", "0.4")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_SWEEP_ID", "left-over")
    for name in ("WANDB_PROJECT", "WANDB_RUN_GROUP", "WANDB_NAME"):
        monkeypatch.delenv(name, raising=False)
    spec = load_sweep(write_sweep(tmp_path / "fake.yaml", project="sweep-project"))
    outcomes = run_sweep(spec, tmp_path / "out", workers=2, devices=["0", "1"], echo=quiet)

    assert [o.run.params["seed"] for o in outcomes] == [0, 1, 13, 0, 1, 13]
    assert [o.state for o in outcomes] == ["finished", "finished", "failed"] * 2
    spans, devices = [], set()
    for o in outcomes:
        folder = o.run.folder
        assert folder == tmp_path / "out" / "fake" / o.run.run_id
        status = read_status(folder)
        assert status["exit_code"] == o.exit_code and status["state"] == o.state
        # the parameter file is exactly what wandb.init reads from WANDB_SWEEP_PARAM_PATH
        assert dict_from_config_file(str(folder / PARAMS)) == o.run.params
        if o.state == "failed":
            assert o.exit_code == 3 and "deliberate failure" in (folder / LOG).read_text()
            continue
        seen = json.loads((folder / RUN / "env.json").read_text())
        env = seen["env"]
        assert env["WANDB_SWEEP_ID"] is None and env["WANDB_RUN_ID"] == o.run.wandb_id != o.run.run_id
        assert env["WANDB_SWEEP_PARAM_PATH"] == str((folder / PARAMS).resolve())
        assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(folder.resolve())
        assert env["WANDB_RUN_GROUP"] == "fake" and env["WANDB_PROJECT"] == "sweep-project"
        assert env["WANDB_NAME"] == f"loss.tau={o.run.params['loss.tau']} seed={o.run.params['seed']}"
        assert seen["argv"][-2:] == ["--run-dir", str((folder / RUN).resolve())]
        assert f"--loss.tau={o.run.params['loss.tau']}" in seen["argv"]
        devices.add(env["CUDA_VISIBLE_DEVICES"])
        spans.append((seen["started"], seen["ended"]))
    assert devices == {"0", "1"}
    spans.sort()
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "two runs overlapped in time"
    assert len({o.run.run_id for o in outcomes}) == 6


def test_rerun_skips_finished_runs_and_retries_failed_ones(tmp_path):
    out = tmp_path / "out"
    spec = load_sweep(write_sweep(tmp_path / "fake.yaml"))
    first = run_sweep(spec, out, workers=2, echo=quiet)
    again = run_sweep(spec, out, workers=2, echo=quiet)
    assert [o.state for o in again] == ["skipped", "skipped", "failed"] * 2
    assert [o.run.run_id for o in again] == [o.run.run_id for o in first]

    (first[0].run.folder / STATUS).unlink()
    wider = load_sweep(write_sweep(tmp_path / "fake.yaml", seeds=(0, 1, 2, 13)))
    third = run_sweep(wider, out, workers=2, count=7, echo=quiet)
    by_seed = [(o.run.params["loss.tau"], o.run.params["seed"], o.state) for o in third]
    assert by_seed == [
        (0.1, 0, "finished"),  # its status was removed: started afresh
        (0.1, 1, "skipped"),
        (0.1, 2, "finished"),  # a new seed: a new run, the old ones keep their ids
        (0.1, 13, "failed"),
        (0.5, 0, "skipped"),
        (0.5, 1, "skipped"),
        (0.5, 2, "finished"),
    ]


def test_results_after_a_sweep_count_failures(tmp_path):
    out = tmp_path / "out"
    run_sweep(load_sweep(write_sweep(tmp_path / "fake.yaml")), out, workers=2, echo=quiet)
    rows = json.loads(results([out], fmt="json"))
    assert [row["group"] for row in rows] == [{"loss.tau": 0.1}, {"loss.tau": 0.5}]
    for row, tau in zip(rows, (0.1, 0.5)):
        assert row["n"] == 2 and row["failed"] == 1 and sorted(row["seeds"]) == [0, 1]
        assert row["metrics"]["mcc_pearson"]["mean"] == pytest.approx(tau + 0.05)
        assert row["metrics"]["mcc_pearson"]["std"] == pytest.approx(0.1 / 2**0.5)
        assert row["metrics"]["r2_linear"]["mean"] == pytest.approx(0.905)
        assert "exit 3" in row["failed_runs"][0]["problem"]


@pytest.mark.parametrize(
    "parameters, fragment",
    [
        ({"loss.beta": {"values": [0.5]}}, "loss.beta"),
        ({"train.stpes": {"values": [5]}}, "did you mean train.steps"),
        ({"loss.tau": {"values": []}}, "parameters.loss.tau: 'values' is empty"),
        ({"loss": {"parameters": {"tau": {"values": [0.1]}}}}, "write flat dotted names instead (loss.tau)"),
        ({"loss.tau": {"min": 0.1, "max": 1.0}}, "distribution 'uniform' cannot be used with method grid"),
        ({"train.steps": {"values": ["many"]}}, "train.steps"),
    ],
)
def test_bad_sweep_files_are_rejected_before_any_run(tmp_path, parameters, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"method": "grid", "command": [sys.executable, FAKE, "train", "${args}"], "parameters": parameters}))
    with pytest.raises(ValueError) as info:
        run_sweep(load_sweep(path), tmp_path / "out", echo=quiet)
    assert fragment in str(info.value) and "rejected before any run started" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_config_file_and_fixed_overrides_in_the_command_are_used(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"loss": {"name": "aninfonce"}, "encoder": {"normalize": "sphere"}}))
    command = ["${env}", "icl", "train", str(base), "--train.steps=5", "--out=elsewhere", "${args}"]
    assert train_arguments(command) == (str(base), ["--train.steps=5"])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"method": "grid", "command": command, "parameters": {"loss.tau": {"values": [0.1]}}}))
    with pytest.raises(ValueError, match="loss.tau"):
        plan_runs(load_sweep(path), tmp_path / "out")  # AnInfoNCE, named in the config file, has no tau
    path.write_text(yaml.safe_dump({"method": "grid", "command": command, "parameters": {"loss.factor": {"values": [0.5]}}}))
    assert [r.params for r in plan_runs(load_sweep(path), tmp_path / "out")] == [{"loss.factor": 0.5}]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"method": "sobol"}, "method: invalid value 'sobol'"),
        ({"method": "bayes", "metric": {"name": "r2_linear", "goal": "upward"}}, "metric.goal"),
    ],
)
def test_unknown_methods_and_bad_metrics(tmp_path, extra, fragment):
    path = write_sweep(tmp_path / "s.yaml", **extra)
    with pytest.raises(ValueError, match=fragment):
        load_sweep(path)


def test_cli_run_then_results(tmp_path, capsys):
    path = write_sweep(tmp_path / "fake.yaml", seeds=(0, 1))
    out = str(tmp_path / "out")
    assert main(["sweep", "run", str(path), "--out", out, "--dry-run"]) == 0
    assert capsys.readouterr().out.count("--seed=") == 4 and not Path(out, "fake").exists()
    assert main(["sweep", "run", str(path), "--out", out, "--workers", "2"]) == 0
    assert "4 finished, 0 failed" in capsys.readouterr().out
    assert main(["results", out, "--metrics", "r2_linear"]) == 0
    table = capsys.readouterr().out
    assert "| loss.tau | r2_linear | n | failed |" in table and "| 0.1 | 0.905 ± 0.007 | 2 | 0 |" in table
    assert main(["sweep", "check", str(path)]) == 0
    assert "ok, method grid, 4 runs" in capsys.readouterr().out
    assert main(["sweep", "run", str(tmp_path / "missing.yaml")]) == 2


def test_parallel_workers_share_the_cores(tmp_path, monkeypatch):
    import os

    from identifiable_cl.sweeps.local import run_environment

    spec = load_sweep(write_sweep(tmp_path / "fake.yaml"))
    run = plan_runs(spec, tmp_path / "out")[0]
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)  # all 8 given
    monkeypatch.setattr("identifiable_cl.devices.CGROUP_CPU_MAX", tmp_path / "no-quota")
    assert run_environment(spec, run, None, {}, workers=4)["OMP_NUM_THREADS"] == "2"
    assert run_environment(spec, run, None, {}, workers=16)["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in run_environment(spec, run, None, {}, workers=1)
    assert run_environment(spec, run, None, {"OMP_NUM_THREADS": "3"}, workers=4)["OMP_NUM_THREADS"] == "3"


def test_run_names_from_swept_parameters_and_seed(tmp_path):
    from identifiable_cl.sweeps.local import run_environment

    spec = load_sweep(write_sweep(tmp_path / "fake.yaml", seeds=(2,)))
    runs = plan_runs(spec, tmp_path / "out")
    # train.steps (one value) and seed are not swept; the seed is named anyway
    names = [run_environment(spec, run, None, {})["WANDB_NAME"] for run in runs]
    assert names == ["loss.tau=0.1 seed=2", "loss.tau=0.5 seed=2"]
    assert names == [run_environment(spec, run, None, {})["WANDB_NAME"] for run in plan_runs(spec, tmp_path / "out")]
    assert run_environment(spec, runs[0], None, {"WANDB_NAME": "mine"})["WANDB_NAME"] == "mine"

    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump({
        "method": "grid", "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"wandb.name": {"value": "chosen"}, "optim.lr": {"values": [0.001, 0.0003]}},
    }))
    named = load_sweep(path)
    run = plan_runs(named, tmp_path / "out")[0]
    assert "WANDB_NAME" not in run_environment(named, run, None, {})

    path.write_text(yaml.safe_dump({
        "method": "grid", "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"optim.lr": {"values": [0.001, 1 / 3]}, "encoder.widths": {"values": [[32, 32], [64]]},
                       "train.steps": {"value": 5}},
    }))
    spec = load_sweep(path)
    names = [run_environment(spec, run, None, {})["WANDB_NAME"] for run in plan_runs(spec, tmp_path / "out")]
    assert sorted(names) == sorted(["encoder.widths=[32,32] optim.lr=0.001", "encoder.widths=[32,32] optim.lr=0.3333",
                                    "encoder.widths=[64] optim.lr=0.001", "encoder.widths=[64] optim.lr=0.3333"])


def test_a_run_stopped_by_a_signal_is_reported_as_interrupted_not_failed(tmp_path):
    out = tmp_path / "out"
    spec = load_sweep(write_sweep(tmp_path / "fake.yaml", seeds=(0, 13, 130)))
    lines = []
    outcomes = run_sweep(spec, out, echo=lines.append)
    assert [(o.state, o.exit_code, o.shown) for o in outcomes[:3]] == [
        ("finished", 0, "finished"), ("failed", 3, "failed"), ("failed", 130, "interrupted")]
    assert read_status(outcomes[2].run.folder)["state"] == "failed"  # the record keeps the process's end
    progress = [line for line in lines if line.startswith("[")]
    assert " interrupted (exit 130" in progress[2] and " failed (exit 3" in progress[1]
    assert any("2 finished, 2 failed, 2 interrupted (run the sweep again to continue them)" in line for line in lines)
    assert any(line.startswith("  interrupted: ") and "exit 130" in line for line in lines)
    rows = json.loads(results([out], fmt="json"))
    problems = [r["problem"] for row in rows for r in row["failed_runs"]]
    assert sorted(p.split(",")[0].split(" (")[0] for p in problems) == ["exit 3"] * 2 + ["interrupted"] * 2


def test_a_sweep_run_folder_is_read_by_one_rule_everywhere(tmp_path):
    """Missing files are None; a damaged one makes the folder damaged, which results and the search
    both take for a failed run; a damaged status alone makes the runner run it again."""
    from identifiable_cl.aggregate import sweep_run
    from identifiable_cl.rundir import read_json
    from identifiable_cl.sweeps.local import RunFolder, is_finished, write_params
    from identifiable_cl.sweeps.search import read_runs

    folder = tmp_path / "sweep" / "r0"
    (folder / RUN).mkdir(parents=True)
    write_params(folder / PARAMS, {"loss.tau": 0.5})
    (folder / STATUS).write_text(json.dumps({"state": "finished", "exit_code": 0, "index": 0}))
    fresh = RunFolder.read(folder)
    assert (fresh.params, fresh.summary, fresh.damaged) == ({"loss.tau": 0.5}, None, None)
    assert read_json(folder / RUN / "summary.json", missing_ok=True) is None
    with pytest.raises(ValueError, match="summary.json: cannot be read as JSON"):
        read_json(folder / RUN / "summary.json")
    (folder / RUN / "summary.json").write_text("{not json")
    damaged = RunFolder.read(folder)
    assert damaged.damaged.startswith(f"{folder / RUN / 'summary.json'}: cannot be read as JSON")
    assert sweep_run(folder).problem == f"unreadable: {damaged.damaged}"
    [(_, _, record)] = read_runs(tmp_path / "sweep")
    assert (record.state, record.summary) == ("failed", {})
    (folder / STATUS).write_text("[1, 2]")
    assert RunFolder.read(folder).damaged == f"{folder / STATUS}: expected a JSON object, found list"
    assert read_status(folder) is None and not is_finished(folder)


def test_a_bare_icl_runs_with_the_interpreter_that_planned_it():
    from identifiable_cl.sweeps.local import this_interpreter

    assert this_interpreter(["/usr/bin/env", "icl", "train", "--x=1"]) == [
        "/usr/bin/env", sys.executable, "-m", "identifiable_cl.cli", "train", "--x=1"]
    assert this_interpreter(["/opt/venv/bin/icl", "train"]) == ["/opt/venv/bin/icl", "train"]  # a path is kept


@pytest.mark.integration
def test_sigterm_to_the_runner_reaches_its_runs_which_stop_resumable_and_none_starts(tmp_path):
    """``icl sweep run --workers 2`` sent SIGTERM: both running ``icl train`` runs get it and stop with their
    checkpoints (resumable: a rerun of the sweep continues them), the third never starts, the runner waits for them
    and exits 130 naming them; no run is left training on as an orphan."""
    import os
    import signal
    import subprocess
    import time

    from tests.tiny import TINY

    fixed = {**TINY, "train.steps": 10 ** 6, "train.checkpoint_every": 5, "train.eval_every": 10 ** 6,
             "train.figures": False}
    sweep = {"name": "long", "method": "grid", "command": ["icl", "train", "${args}"],
             "parameters": {**{k: {"value": v} for k, v in fixed.items()}, "seed": {"values": [0, 1, 2]}}}
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "identifiable_cl.cli", "sweep", "run", str(tmp_path / "long.yaml"), "--out",
            str(out), "--workers", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    runner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while sum(1 for _ in out.glob("long/*/run/checkpoint.pt")) < 2:
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
            time.sleep(0.5)
        pids = [read_status(folder)["pid"] for folder in sorted(out.glob("long/*")) if (folder / RUN).is_dir()]
        runner.send_signal(signal.SIGTERM)
        said, err = runner.communicate(timeout=180)
    finally:
        runner.kill()
    assert runner.returncode == 130, err
    assert "stopped by SIGTERM: 2 running runs stopped with their checkpoints and no other started" in err, err
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    folders = [folder for folder in sorted(out.glob("long/*")) if (folder / RUN).is_dir()]
    assert len(folders) == 2  # the third run never started
    assert sorted(read_status(folder)["exit_code"] for folder in folders) == [130, 130]
    assert all((folder / RUN / "checkpoint.pt").is_file() for folder in folders)


@pytest.mark.integration
def test_a_sweep_run_interrupted_and_continued_by_a_rerun_is_one_wandb_run(tmp_path):
    """Offline W&B: the run's pieces before and after the rerun of its sweep share the run's one W&B id, the id
    the runner gave it (its status) and the one its meta.json keeps."""
    import os
    import signal
    import subprocess
    import time

    from identifiable_cl import rundir
    from identifiable_cl.tracking.wandb import piece_of
    from tests.tiny import TINY

    fixed = {**TINY, "train.steps": 4000, "train.checkpoint_every": 5, "train.eval_every": 4000, "train.figures": False}
    sweep = {"name": "one", "method": "grid", "command": ["icl", "train", "${args}"],
             "parameters": {**{k: {"value": v} for k, v in fixed.items()}, "seed": {"values": [0]}}}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "identifiable_cl.cli", "sweep", "run", str(tmp_path / "one.yaml"), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HOME": str(tmp_path / "home")}
    env.pop("WANDB_API_KEY", None)
    runner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("one/*/run/checkpoint.pt")):
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
            time.sleep(0.2)
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=180)
    finally:
        runner.kill()
    assert runner.returncode == 130
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    [folder] = [f for f in out.glob("one/*") if (f / RUN).is_dir()]
    run_id = rundir.read_meta(folder / RUN)["wandb_id"]
    assert read_status(folder)["wandb_id"] == run_id
    pieces = sorted(p.name for p in (folder / RUN / "wandb").glob("offline-run-*"))
    assert len(pieces) == 2 and all(piece_of(p, run_id) for p in pieces), pieces
