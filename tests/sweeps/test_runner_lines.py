"""What the local runner says: a line per ended run with the values the sweep varies, and a line every
``HEARTBEAT_S`` on the runs still training, read from their own metrics."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from identifiable_cl import rundir
from identifiable_cl.sweeps import local
from identifiable_cl.sweeps.local import Outcome, outcome_line, progress_line, run_groups
from identifiable_cl.sweeps.plan import PlannedRun
from identifiable_cl.sweeps.spec import parse_sweep

SPEC = parse_sweep({"name": "s", "method": "grid", "command": ["icl", "train", "${args}"], "parameters": {
    "loss.tau": {"values": [0.1, 0.5]}, "seed": {"values": [0, 1]}, "train.steps": {"value": 300},
    "loss.name": {"values": ["infonce"]}}})


def planned(index: int, folder: Path) -> PlannedRun:
    (folder / f"run-{index}" / "run").mkdir(parents=True, exist_ok=True)
    return PlannedRun(index, f"run-{index}", {"loss.name": "infonce", "loss.tau": 0.5, "seed": index,
                                              "train.steps": 300}, folder / f"run-{index}")


def test_an_ended_run_is_reported_with_the_values_the_sweep_varies(tmp_path):
    assert SPEC.swept == ("loss.tau", "seed")
    said = outcome_line(Outcome(planned(1, tmp_path), "finished", 0, 2.5), SPEC, 2, 4, "")
    assert said == "[2/4] run-1 finished (exit 0, 2.5 s) loss.tau=0.5 seed=1"


def test_a_training_run_is_reported_at_its_last_logged_step(tmp_path):
    first, second = planned(0, tmp_path), planned(1, tmp_path)
    rundir.append_metrics(first.folder / "run", [{"step": 100, "loss": 2.0}, {"step": 200, "loss": 1.9}])
    said = progress_line(1, 4, [(SPEC, first), (SPEC, second)])
    assert said == "[1/4] training: s run-0 (loss.tau=0.5 seed=0) at step 200, s run-1 (loss.tau=0.5 seed=1) starting"


def test_the_pool_says_how_far_its_runs_are_while_they_train(tmp_path, monkeypatch):
    """The runs themselves stand in for ``icl train`` here: each logs a step, then ends after a while."""
    monkeypatch.setattr(local, "HEARTBEAT_S", 0.05)
    release = threading.Event()

    def fake_pack(spec, runs, device, workers, echo, watch):
        for run in runs:
            rundir.append_metrics(run.folder / "run", [{"step": 10, "loss": 1.0}])
        release.wait(5)
        return [Outcome(run, "finished", 0, 0.1) for run in runs]

    monkeypatch.setattr(local, "execute_pack", fake_pack)
    groups = iter([(SPEC, [planned(0, tmp_path)]), (SPEC, [planned(1, tmp_path)])])
    lines: list[str] = []
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    outcomes = run_groups(lambda: next(groups, None), 2, workers=2, devices=None, echo=lines.append)
    assert len(outcomes) == 2 and time.monotonic() - started < 5
    beats = [line for line in lines if "training:" in line]
    assert beats and beats[0] == ("[0/2] training: s run-0 (loss.tau=0.5 seed=0) at step 10, "
                                  "s run-1 (loss.tau=0.5 seed=1) at step 10"), lines
    assert lines[-1].startswith("[2/2] run-")
