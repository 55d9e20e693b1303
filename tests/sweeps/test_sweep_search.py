"""Bayes search and hyperband stopping offline with W&B's engine, and sweep files that stay finite
when a W&B server sends integral floats as ints."""

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from identifiable_cl.aggregate import results
from identifiable_cl.cli import main
from identifiable_cl.packaged import SWEEPS_DIR
from identifiable_cl.sweeps import engine
from identifiable_cl.sweeps.expand import expand
from identifiable_cl.sweeps.local import read_status
from identifiable_cl.sweeps.search import read_runs, run_search, run_sweep
from tests.conftest import engine_or_skip
from tests.tiny import TINY
from identifiable_cl.sweeps.spec import load_sweep

FAKE = str(Path(__file__).with_name("fake_train.py"))
PACKAGED = sorted(SWEEPS_DIR.glob("*.yaml"))


def quiet(_line):
    pass


def integral_floats_inside(value, top=True):
    """Integral floats nested in a list or mapping value (a W&B server sends them as ints)."""
    if isinstance(value, float) and value.is_integer() and not top:
        return [value]
    if isinstance(value, list):
        return [f for v in value for f in integral_floats_inside(v, False)]
    if isinstance(value, dict):
        return [f for v in value.values() for f in integral_floats_inside(v, False)]
    return []


@pytest.mark.parametrize("path", PACKAGED, ids=lambda p: p.name)
def test_packaged_sweeps_hold_no_nested_integral_float(path):
    for name, spec in yaml.safe_load(path.read_text())["parameters"].items():
        for value in spec.get("values", [spec.get("value")]):
            assert not integral_floats_inside(value), f"{path.name}: {name} holds {value!r}"


def as_a_server_sends(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [as_a_server_sends(v) for v in value]
    if isinstance(value, dict):
        return {k: as_a_server_sends(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("path", [p for p in PACKAGED if yaml.safe_load(p.read_text())["method"] == "grid"],
                         ids=lambda p: p.name)
def test_packaged_grids_end_on_w_and_b_engine_with_int_coercion(path):
    sweeps = engine_or_skip()
    raw = yaml.safe_load(path.read_text())
    expected = len(expand(load_sweep(path, local=False)))
    runs = []
    for i in range(expected + 2):
        proposal = sweeps.next_run(raw, runs)
        if proposal is None:
            break
        runs.append(sweeps.SweepRun(name=f"r{i}", state="finished", config=as_a_server_sends(proposal.config)))
    assert proposal is None and len(runs) == expected


def bayes_sweep(path, **extra):
    path.write_text(yaml.safe_dump({
        "name": "search", "method": "bayes", "metric": {"name": "mcc_pearson", "goal": "maximize"},
        "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"loss.tau": {"min": 0.0, "max": 1.0}, "seed": {"values": [0, 1]}, "train.steps": {"value": 5}},
        **extra,
    }))
    return load_sweep(path)


def test_categorical_values_travel_as_tokens_and_come_back_exactly(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "method": "bayes", "metric": {"name": "m", "goal": "maximize"},
        "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"eval.nonlinear": {"values": [False, True]}, "seed": {"values": [0, 1, 2]}},
    }))
    spec = load_sweep(path)
    config = engine.engine_config(spec)
    assert config["parameters"]["seed"]["values"] == ["v0", "v1", "v2"]
    for params in ({"eval.nonlinear": False, "seed": 0}, {"eval.nonlinear": True, "seed": 2}):
        assert engine.decode(spec, engine._encode(spec, params)) == params


def test_proposals_are_repeatable_and_leave_the_global_generators_alone(tmp_path):
    engine_or_skip()
    spec = bayes_sweep(tmp_path / "s.yaml")
    runs = [engine.SearchRun(f"r{i}", {"loss.tau": t, "seed": s, "train.steps": 5}, "finished", {"mcc_pearson": t})
            for i, (t, s) in enumerate([(0.1, 0), (0.5, 1), (0.9, 0), (0.3, 1), (0.7, 0), (0.2, 1)])]
    random.seed(123)
    np.random.seed(123)
    before = random.random(), np.random.random()
    random.seed(123)
    np.random.seed(123)
    first = engine.propose(spec, runs, seed=4, position=6)
    assert (random.random(), np.random.random()) == before
    assert engine.propose(spec, runs, seed=4, position=6) == first
    assert set(first) == {"loss.tau", "seed", "train.steps"} and 0.0 <= first["loss.tau"] <= 1.0
    assert type(first["loss.tau"]) is float and first["seed"] in (0, 1)


def test_without_the_engine_bayes_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sweeps", None)
    bayes_sweep(tmp_path / "s.yaml")
    assert main(["sweep", "run", str(tmp_path / "s.yaml"), "--count", "2", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "pip install --no-deps 'sweeps>=0.3,<0.4'" in err and not (tmp_path / "out").exists()


def test_a_bayes_search_runs_offline_in_parallel_and_a_rerun_resumes_it(tmp_path):
    engine_or_skip()
    spec = bayes_sweep(tmp_path / "s.yaml")
    out = tmp_path / "out"
    first = run_search(spec, out, workers=2, count=6, seed=1, echo=quiet)
    assert [o.state for o in first] == ["finished"] * 6
    found = read_runs(out / "search")
    assert [index for index, _, _ in found] == list(range(6))
    assert all(record.summary["mcc_pearson"] == pytest.approx(record.params["loss.tau"] + 0.1 * record.params["seed"])
               for _, _, record in found)
    assert len({json.dumps(record.params, sort_keys=True) for _, _, record in found}) == 6
    again = run_search(spec, out, workers=1, count=8, seed=1, echo=quiet)
    assert len(again) == 2 and [index for index, _, _ in read_runs(out / "search")] == list(range(8))
    assert run_search(spec, out, workers=1, count=8, seed=1, echo=quiet) == []


def test_a_bayes_search_with_one_worker_is_repeatable(tmp_path):
    engine_or_skip()
    spec = bayes_sweep(tmp_path / "s.yaml")
    params = []
    for out in ("a", "b"):
        run_search(spec, tmp_path / out, workers=1, count=7, seed=3, echo=quiet)
        params.append([record.params for _, _, record in read_runs(tmp_path / out / "search")])
    assert params[0] == params[1]


def test_icl_sweep_check_and_dry_run_of_a_bayes_file_check_its_space(tmp_path, capsys):
    spec_path = tmp_path / "s.yaml"
    bayes_sweep(spec_path)
    assert main(["sweep", "check", str(spec_path)]) == 0
    assert "ok, method bayes, 20 random points of its space checked" in capsys.readouterr().out
    bayes_sweep(spec_path, parameters={"loss.tau": {"min": -1.0, "max": 1.0}})
    assert main(["sweep", "check", str(spec_path)]) == 1
    assert "loss.tau=" in capsys.readouterr().err
    assert main(["sweep", "check", str(SWEEPS_DIR / "r24_bayes.yaml")]) == 0


@pytest.mark.integration
def test_hyperband_stops_a_poor_run_and_records_it(tmp_path, monkeypatch):
    engine_or_skip()
    monkeypatch.setenv("FAKE_EVALS", "12")
    monkeypatch.setenv("FAKE_EVAL_S", "0.5")
    monkeypatch.setattr("identifiable_cl.sweeps.local.WATCH_EVERY", 0.3)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "hb", "method": "grid", "metric": {"name": "mcc_pearson", "goal": "maximize"},
        "early_terminate": {"type": "hyperband", "min_iter": 1, "eta": 2},
        "command": [sys.executable, FAKE, "train", "${args}"],
        "parameters": {"loss.tau": {"values": [0.9, 0.8, 0.05]}},
    }))
    outcomes = run_sweep(load_sweep(path), tmp_path / "out", workers=1, echo=quiet)
    assert [o.state for o in outcomes] == ["finished", "finished", "stopped"]
    status = read_status(outcomes[2].run.folder)
    assert status["state"] == "stopped" and status["stopped_by"] == "hyperband"
    from identifiable_cl import rundir

    assert status["last_metrics"] == rundir.read_metrics(outcomes[2].run.folder / "run")[-1]
    assert status["last_metrics"]["mcc_pearson"] < 0.1
    assert [o.state for o in run_sweep(load_sweep(path), tmp_path / "out", echo=quiet)] == ["skipped"] * 3
    rows = json.loads(results([tmp_path / "out"], fmt="json"))
    assert any("stopped early by hyperband" in r["problem"] for row in rows for r in row["failed_runs"])




@pytest.mark.integration
def test_a_bayes_search_of_real_icl_train_runs_with_hyperband_then_reports(tmp_path, capsys):
    engine_or_skip()
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump({
        "name": "real", "method": "bayes", "metric": {"name": "r2_linear", "goal": "maximize"},
        "early_terminate": {"type": "hyperband", "min_iter": 2, "eta": 3},
        "command": ["${env}", sys.executable, "-m", "identifiable_cl.cli", "train", "--quiet", "${args}"],
        "parameters": {"optim.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 1e-2},
                       **{k: {"value": v} for k, v in TINY.items()}},
    }))
    out = tmp_path / "out"
    assert main(["sweep", "run", str(path), "--count", "3", "--out", str(out)]) == 0
    runs = read_runs(out / "real")
    assert len(runs) == 3 and all(record.state in ("finished", "stopped") for _, _, record in runs)
    assert all(len([r for r in record.history if "r2_linear" in r]) >= 1 for _, _, record in runs)
    capsys.readouterr()
    assert main(["results", str(out / "real")]) == 0
    assert "r2_linear" in capsys.readouterr().out


def test_check_says_a_search_needs_the_engine_when_it_is_absent(monkeypatch, capsys):
    """Also where `import sweeps` finds this repository's sweeps/ folder, a namespace package without next_run."""
    import types

    monkeypatch.setitem(sys.modules, "sweeps", types.ModuleType("sweeps"))
    assert main(["sweep", "check", str(SWEEPS_DIR / "r24_bayes.yaml")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{SWEEPS_DIR / 'r24_bayes.yaml'}: method bayes and early_terminate need W&B's sweep engine")
    assert "pip install --no-deps 'sweeps>=0.3,<0.4'" in err

