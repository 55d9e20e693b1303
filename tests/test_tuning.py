"""Tuning in ``icl reproduce``: the experiment file's ``tuning`` and ``tune`` entries, the bayes sweep a tuned run
becomes, and a tiny end-to-end reproduction whose seeds run with the best tuning run's values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from identifiable_cl import rundir
from identifiable_cl.reproduce import reproduce
from identifiable_cl.reproduce.experiment import TUNING_AT_TINY, check_experiment, load_experiment, parse_experiment
from identifiable_cl.reproduce.tuning import BEST, TUNING, read_best
from identifiable_cl.sweeps.local import PARAMS, RUN, read_params
from identifiable_cl.sweeps.spec import parse_sweep

TAU = {"distribution": "log_uniform_values", "min": 0.05, "max": 1.0}
LR = {"distribution": "log_uniform_values", "min": 0.0003, "max": 0.003}


def raw_experiment(**changes):
    raw = {
        "name": "toy_tuned",
        "title": "toy",
        "paper": "nobody",
        "reference_source": "none",
        "base": {"loss.name": "infonce", "loss.similarity": "l1", "dgp.conditional.name": "laplace"},
        "scales": {"paper": {"train.steps": 1000}, "smoke": {"train.steps": 100, "train.eval_every": 50}},
        "tuning": {"runs": 3, "seed": 7, "metric": "r2_linear", "steps": {"smoke": 20}, "overrides": {"eval.mi": False}},
        "runs": [
            {"label": "tuned", "description": "t", "tune": {"loss.tau": TAU, "optim.lr": LR}, "tune_metric": "mcc_pearson"},
            {"label": "fixed", "description": "f", "overrides": {"loss.tau": 0.3}},
        ],
        "metrics": ["r2_linear", "mcc_pearson"],
    }
    raw.update(changes)
    return raw


def experiment(**changes):
    return parse_experiment(raw_experiment(**changes), Path("."), "toy.yaml")


def test_a_tuned_run_becomes_a_bayes_sweep_over_its_own_keys():
    e = experiment()
    sweep = e.tuning_sweep("tuned", "smoke")
    assert sweep["method"] == "bayes" and sweep["run_cap"] == 3
    assert sweep["metric"] == {"name": "mcc_pearson", "goal": "maximize"}
    p = sweep["parameters"]
    assert p["loss.tau"] == TAU and p["optim.lr"] == LR
    assert p["seed"] == {"value": 7} and p["train.steps"] == {"value": 20}
    assert p["train.eval_every"] == {"value": 20}  # never beyond the tuning run's steps
    assert p["eval.mi"] == {"value": False} and p["loss.similarity"] == {"value": "l1"}
    parse_sweep(sweep, "toy")
    tiny = e.tuning_sweep("tuned", "tiny")
    assert tiny["run_cap"] == TUNING_AT_TINY and tiny["parameters"]["train.steps"] == {"value": 4}
    assert e.tuning_sweep("tuned", "paper")["parameters"]["train.steps"] == {"value": 1000}  # no steps: the run's
    with pytest.raises(ValueError, match="run 'fixed' is not tuned"):
        e.tuning_sweep("fixed", "smoke")


def test_the_seeds_take_the_tuned_values():
    e = experiment()
    sweep = e.sweep("tuned", "smoke", 3, {"loss.tau": 0.17, "optim.lr": 0.001})
    assert sweep["parameters"]["loss.tau"] == {"value": 0.17} and sweep["parameters"]["optim.lr"] == {"value": 0.001}
    assert sweep["parameters"]["seed"] == {"values": [0, 1, 2]}


@pytest.mark.parametrize("changes,message", [
    ({"tuning": None}, r"runs\[0\]\.tune: a tuned run needs the experiment's tuning entry"),
    ({"tuning": {"runs": 0}}, r"tuning\.runs=0 is invalid"),
    ({"tuning": {"seed": -1}}, r"tuning\.seed=-1 is invalid"),
    ({"tuning": {"steps": {"huge": 5}}}, r"tuning\.steps=.* is invalid"),
    ({"tuning": {"steps": {"smoke": 0}}}, r"tuning\.steps=.* is invalid"),
    ({"tuning": {"colour": 1}}, "colour"),
    ({"tuning": {"overrides": {"loss.tauu": 1}}}, r"tuning of run tuned, scale smoke \(the run's keys with tuning\.overrides\): loss\.tauu"),
    ({"runs": [{"label": "t", "description": "t", "tune": {"loss.tau": 0.1}}]}, r"runs\[0\]\.tune\.loss\.tau=0\.1 is invalid"),
    ({"runs": [{"label": "t", "description": "t", "tune": {"seed": {"values": [1, 2]}}}]}, r"runs\[0\]\.tune\.seed"),
    ({"runs": [{"label": "t", "description": "t", "tune": {}}]}, r"runs\[0\]\.tune=\{\} is invalid"),
    ({"runs": [{"label": "t", "description": "t", "tune_metric": "r2_linear"}]}, r"runs\[0\]\.tune_metric='r2_linear' is invalid"),
])
def test_bad_tuning_entries_name_the_entry(changes, message):
    with pytest.raises(ValueError, match=message):
        check_experiment(experiment(**changes), ("smoke",))


def test_the_packaged_experiment_tunes_every_run_with_the_same_budget():
    e = load_experiment("contrastive_losses")
    assert all(run.tune for run in e.runs) and e.tuning.runs == 8
    sizes = {len(e.tuning_sweep(run.label, "smoke")["parameters"]) for run in e.runs}
    assert all(e.tuning_sweep(run.label, "smoke")["run_cap"] == 8 for run in e.runs) and sizes


@pytest.mark.integration
def test_tiny_reproduction_tunes_then_runs_the_seeds_with_the_best_values(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    folder = tmp_path / "toy_tuned"
    folder.mkdir()
    (folder / "experiment.yaml").write_text(yaml.safe_dump(raw_experiment()))
    out = tmp_path / "out"
    result = reproduce(folder, "tiny", seeds=1, workers=2, out=out, echo=lambda _: None)
    assert all(r.ok for res in result.results.values() for r in res.runs)
    (sweep_dir,) = (out / TUNING).glob("*-tuned-tuning")
    tried = []
    for run in sorted(p.parent for p in sweep_dir.glob(f"*/{PARAMS}")):
        params = read_params(run / PARAMS)
        tried.append((rundir.read_json(run / RUN / rundir.SUMMARY)["mcc_pearson"], params))
    assert len(tried) == TUNING_AT_TINY
    best_mcc, best_params = max(tried, key=lambda pair: pair[0])
    saved = read_best(out)["tuned"]
    assert saved["metric"] == best_mcc and saved["values"] == {k: best_params[k] for k in ("loss.tau", "optim.lr")}
    (seed_run,) = result.results["tuned"].runs
    assert seed_run.params["loss.tau"] == best_params["loss.tau"] and seed_run.params["optim.lr"] == best_params["optim.lr"]
    config = rundir.read_config(seed_run.path / RUN)
    assert config["loss"]["tau"] == best_params["loss.tau"] and config["optim"]["lr"] == best_params["optim.lr"]
    text = result.markdown.read_text()
    assert "## Tuning" in text and "| tuned | loss.tau, optim.lr |" in text
    assert json.loads((out / "results.json").read_text())["tuning"]["tuned"]["values"] == saved["values"]
    again = reproduce(folder, "tiny", seeds=1, workers=1, out=out, report_only=True, echo=lambda _: None)
    assert again.results["tuned"].means() == result.results["tuned"].means()
    (out / TUNING / BEST).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable tuning results"):
        read_best(out)
