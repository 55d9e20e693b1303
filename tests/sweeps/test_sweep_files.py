"""Every file in sweeps/: accepted by W&B's schema, every planned run a valid ``icl train`` config that builds,
and the smoke sweep run end to end with the real ``icl train``."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from identifiable_cl.config import preset_names

from identifiable_cl.sweeps import schema
from identifiable_cl.sweeps.plan import plan_runs, train_arguments
from identifiable_cl.sweeps.render import render_args
from identifiable_cl.sweeps.spec import load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "sweeps").glob("*.yaml"))
LOCAL = [f for f in FILES if yaml.safe_load(f.read_text())["method"] in ("grid", "random")]


def test_the_required_sweeps_exist():
    names = {f.stem for f in FILES}
    assert {"smoke", "z21", "vk21", "r24", "hard_negatives", "hard_negative_loss", "ensemble"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_wandb_accepts_the_file(path):
    raw = yaml.safe_load(path.read_text())
    assert schema.violations(raw) == []
    spec = parse_sweep(raw, str(path))
    command = [str(c) for c in spec.command]
    assert command[:3] == ["${env}", "icl", "train"] and command[-1] == "${args}"
    assert command[3:-1] == [] or (len(command) == 5 and command[3] in preset_names())
    assert spec.raw["metric"]["name"] in ("r2_linear", "mcc_block_aware")


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_every_planned_run_is_a_valid_config_over_several_seeds(path, tmp_path):
    spec = load_sweep(path)
    runs = plan_runs(spec, tmp_path)
    seeds = {r.params["seed"] for r in runs}
    assert len(seeds) >= (2 if spec.name == "smoke" else 3)
    assert len({r.run_id for r in runs}) == len(runs)
    config, fixed = train_arguments(spec.command)
    assert fixed == [] and config in preset_names()


def test_the_bayes_file_runs_locally():
    spec = load_sweep(ROOT / "sweeps" / "r24_bayes.yaml")
    assert spec.method == "bayes" and spec.raw["early_terminate"]["type"] == "hyperband"


def test_icl_sweep_check_accepts_every_file(tmp_path, capsys):
    from identifiable_cl.cli import main

    assert main(["sweep", "check", *map(str, FILES), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "r24_bayes.yaml: ok, method bayes, 20 random points of its space checked" in out
    assert "z21.yaml: ok, method grid, 54 runs" in out and "tau_random.yaml: ok, method random, 20 runs" in out


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_every_distinct_run_builds(path, tmp_path):
    """Process, encoder and loss fit together for each distinct choice of the categorical parameters
    (continuous draws change no structure; a short mixing search and a small encoder keep it fast)."""
    from identifiable_cl.config import parse_overrides
    from identifiable_cl.components import load_config
    from identifiable_cl.components import build

    spec = load_sweep(path)
    structural = {p.name for p in spec.parameters if p.kind in ("constant", "categorical") and p.name != "seed"}
    seen = set()
    for run in plan_runs(spec, tmp_path):
        overrides = parse_overrides(render_args(run.params))
        key = json.dumps({k: v for k, v in overrides.items() if k in structural}, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        small = {"dgp.mixing.cond_draws": 2, "dgp.mixing.cond_ratio": 0.5, "dgp.mixing.layers": 1, "encoder.widths": [16],
                 "device": "cpu"}
        base, _ = train_arguments(spec.command)
        build(load_config(base, {**small, **{k: v for k, v in overrides.items() if k not in small}}))


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_icl_train_receives_every_rendered_argument(path, tmp_path, monkeypatch):
    """The agent's ``${args}`` (lists render with spaces, e.g. ``--encoder.widths=[64, 64]``) reach
    ``icl train`` as overrides, never as its CONFIG argument."""
    from identifiable_cl import cli
    from identifiable_cl.cli import train

    received = []
    monkeypatch.setattr(train, "run", lambda args: received.append(args) or 0)
    for run in plan_runs(load_sweep(path), tmp_path)[:3]:
        argv = ["train", *render_args(run.params), "--run-dir", str(tmp_path / run.run_id)]
        assert cli.main(argv) == 0
        args = received.pop()
        assert args.config is None and args.run_dir == str(tmp_path / run.run_id)
        assert args.overrides == render_args(run.params)


def icl_on_path(tmp_path, monkeypatch):
    """An ``icl`` executable for this source tree (the package need not be installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    icl = bin_dir / "icl"
    icl.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m identifiable_cl.cli "$@"\n')
    icl.chmod(icl.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.mark.slow
def test_smoke_sweep_end_to_end_then_results(tmp_path, monkeypatch, capsys):
    from identifiable_cl.cli import main

    icl_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "out"
    assert main(["sweep", "run", str(ROOT / "sweeps" / "smoke.yaml"), "--out", str(out), "--workers", "2"]) == 0
    assert "4 finished, 0 failed" in capsys.readouterr().out
    folders = [p.parent for p in (out / "smoke").glob("*/status.json")]
    assert len(folders) == 4
    for folder in folders:
        assert (folder / "run" / "summary.json").is_file()
        assert list((folder / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert main(["results", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| loss.name | r2_linear |") and "| infonce |" in table and "| aninfonce |" in table
    assert main(["sweep", "run", str(ROOT / "sweeps" / "smoke.yaml"), "--out", str(out)]) == 0
    assert "4 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("field, value", [("heartbeat", 5), ("heartbeat", "yesterday"), ("state", "done"),
                                          ("exit_code", True), ("pid", -3), ("run_dir", "")])
def test_a_status_field_that_is_not_what_the_runner_writes_makes_the_run_unfinished_and_damaged(tmp_path, field, value):
    from identifiable_cl.aggregate import sweep_run
    from identifiable_cl.sweeps.local import STATUS, is_finished, now, read_status_file

    status = {"state": "finished", "exit_code": 0, "started": now(), "heartbeat": now(), "pid": 12, "run_dir": "run"}
    (tmp_path / STATUS).write_text(json.dumps(status))
    assert read_status_file(tmp_path / STATUS) == status and is_finished(tmp_path)
    (tmp_path / STATUS).write_text(json.dumps({**status, field: value}))
    with pytest.raises(ValueError, match=f"{STATUS}: {field}={value!r} is not what the runner writes there"):
        read_status_file(tmp_path / STATUS)
    assert not is_finished(tmp_path)  # it runs again
    assert f"{field}={value!r}" in sweep_run(tmp_path).problem
