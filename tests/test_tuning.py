"""Tuning in ``icl reproduce``: the experiment file's ``tuning`` and ``tune`` entries, the bayes sweep a tuned run
becomes, and a tiny end-to-end reproduction whose seeds run with the best tuning run's values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from identifiable_cl import rundir
from identifiable_cl.cli import main
from identifiable_cl.reproduce import reproduce, tuning
from identifiable_cl.reproduce.experiment import (
    TUNING_AT_TINY,
    check_experiment,
    experiment_names,
    load_experiment,
    parse_experiment,
)
from identifiable_cl.reproduce.tuning import (
    BEST,
    SHIPPED,
    SHIPPED_SOURCE,
    TUNED_SOURCE,
    TUNING,
    choose,
    edge,
    edges,
    read_best,
    read_shipped,
    section,
    summary_line,
)
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


SHIPPED_VALUES = {"smoke": {"tuned": {"loss.tau": 0.17, "optim.lr": 0.001}}}


def shipped_experiment(folder: Path, shipped=SHIPPED_VALUES, **changes) -> Path:
    """The toy experiment in ``folder`` with ``shipped`` as its tuned.yaml (none when None)."""
    folder.mkdir()
    (folder / "experiment.yaml").write_text(yaml.safe_dump(raw_experiment(**changes)))
    if shipped is not None:
        (folder / SHIPPED).write_text(yaml.safe_dump(shipped))
    return folder


def test_every_experiments_shipped_values_are_valid_and_the_recorded_edges_are_flagged():
    for name in experiment_names():
        read_shipped(load_experiment(name))
    e = load_experiment("contrastive_losses")
    shipped = read_shipped(e)
    assert set(shipped["smoke"]) == {run.label for run in e.runs}  # every table row of RESULTS.md
    assert shipped["smoke"]["sphere_nce"] == {"loss.tau": 0.295, "optim.lr": 0.002165}
    assert shipped["medium"]["sphere_infonce_one_sided"]["loss.tau"] == 0.0302
    assert edges(e, "sphere_infonce_one_sided", shipped["medium"]["sphere_infonce_one_sided"]) == {"loss.tau": "lower"}
    assert edges(e, "sphere_infonce", shipped["smoke"]["sphere_infonce"]) == {}


@pytest.mark.parametrize("shipped,message", [
    ({"mediun": {"tuned": {"loss.tau": 0.2, "optim.lr": 0.001}}}, r": 'mediun' is not a scale of experiment toy_tuned; "
                                                                  r"the file maps its scales \(paper, smoke\)"),
    ({"tuned": {"loss.tau": 0.2, "optim.lr": 0.001}}, r": 'tuned' is not a scale of experiment toy_tuned"),  # no scale
    ({"smoke": {"tunned": {"loss.tau": 0.2}}}, r": smoke\.tunned: not a run of experiment toy_tuned; runs: tuned, fixed"),
    ({"smoke": {"fixed": {"loss.tau": 0.2}}}, r": smoke\.fixed: run fixed is not tuned"),
    ({"smoke": {"tuned": {"loss.tau": 0.2, "optim.lr": 0.001, "loss.margin": 1.0}}},
     r": smoke\.tuned\.loss\.margin=1\.0: run tuned does not tune loss\.margin; it tunes loss\.tau, optim\.lr"),
    ({"smoke": {"tuned": {"loss.tau": 5.0, "optim.lr": 0.001}}},
     r": smoke\.tuned\.loss\.tau=5\.0 is outside the range its run searches: 0\.05 to 1"),
    ({"smoke": {"tuned": {"loss.tau": "3e-1", "optim.lr": 0.001}}}, r": smoke\.tuned\.loss\.tau='3e-1' is invalid: a number"),
    ({"smoke": {"tuned": {"loss.tau": 0.2}}}, r": smoke\.tuned: no value for optim\.lr \(run tuned tunes loss\.tau, optim\.lr\)"),
    ({"smoke": None}, r": smoke=None is invalid: a mapping of tuned run labels"),
])
def test_bad_shipped_values_are_one_line_naming_the_file_entry_and_value(tmp_path, capsys, shipped, message):
    folder = shipped_experiment(tmp_path / "toy_tuned", shipped)
    with pytest.raises(ValueError, match=re.escape(str(folder / SHIPPED)) + message):
        read_shipped(load_experiment(folder))
    assert main(["reproduce", str(folder), "--scale", "tiny", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(folder / SHIPPED) in err
    assert not (tmp_path / "out").exists()  # checked before anything runs


def test_a_value_on_the_edge_of_its_range_is_flagged():
    assert edge(TAU, 0.05) == "lower" and edge(TAU, 0.0502) == "lower" and edge(TAU, 0.98) == "upper"
    assert edge(TAU, 0.2) is None and edge(TAU, 0.06) is None  # 0.06 is 6% of the log range from 0.05
    linear = {"distribution": "uniform", "min": 0.0, "max": 10.0}
    assert edge(linear, 0.1) == "lower" and edge(linear, 0.3) is None and edge(linear, 9.9) == "upper"
    assert edge({"values": [0.1, 0.3, 1.0]}, 0.1) == "lower" and edge({"values": [0.1, 0.3, 1.0]}, 0.3) is None
    assert edge({"values": [0.1, 1.0]}, 1.0) is None  # two choices: every choice is an end
    assert edge({"values": ["cosine", "l2", "l1"]}, "l1") is None


def test_shipped_values_skip_tuning_and_retune_tunes_every_run(tmp_path, monkeypatch):
    e = load_experiment(shipped_experiment(tmp_path / "toy_tuned", {"smoke": {"tuned": {"loss.tau": 0.0505,
                                                                                         "optim.lr": 0.001}}}))
    tuned_afresh = []

    def fake_tune(experiment, scale, out, labels, workers, echo):
        tuned_afresh.append(list(labels))
        return {label: {"values": {"loss.tau": 0.3, "optim.lr": 0.002}, "metric": 0.5, "metric_name": "mcc_pearson",
                        "runs": 2, "source": TUNED_SOURCE} for label in labels}

    monkeypatch.setattr(tuning, "tune", fake_tune)
    lines: list[str] = []
    chosen = choose(e, "tiny", tmp_path / "out", read_shipped(e), echo=lines.append)
    assert tuned_afresh == [[]]
    assert chosen == {"tuned": {"values": {"loss.tau": 0.0505, "optim.lr": 0.001}, "source": SHIPPED_SOURCE,
                                "edges": {"loss.tau": "lower"}}}
    assert read_best(tmp_path / "out") == chosen
    assert lines[0].endswith("for 1 tuned run(s): their tuning is skipped (--retune tunes afresh)")
    assert lines[-1] == "tuned: loss.tau = 0.0505 lies on the lower edge of the range it was tuned in"
    text = section(e, chosen, "tiny")
    assert "| tuned | loss.tau, optim.lr | loss.tau = 0.0505, optim.lr = 0.001 | shipped (tuned.yaml) | — |" in text
    assert "- tuned: loss.tau = 0.0505, at the lower end of 0.05 to 1 (log scale)" in text
    assert "Runs marked tuned" not in text
    assert summary_line(e, chosen) == ("Tuned runs: 1 from `tuned.yaml` shipped with the experiment (tuning skipped); "
                                       "see Tuning (1 with a value on the edge of its range).")
    again = choose(e, "tiny", tmp_path / "out", read_shipped(e), retune=True, echo=lines.append)
    assert tuned_afresh[-1] == ["tuned"] and again["tuned"]["source"] == TUNED_SOURCE
    assert again["tuned"]["values"] == {"loss.tau": 0.3, "optim.lr": 0.002} and again["tuned"]["edges"] == {}
    assert "| tuned: mcc_pearson 0.500 | 2 |" in section(e, again, "tiny")
    choose(e, "paper", tmp_path / "paper", read_shipped(e), echo=lines.append)
    assert tuned_afresh[-1] == ["tuned"]  # no shipped values at this scale: tuned afresh


def test_retune_and_report_only_exclude_each_other(tmp_path):
    with pytest.raises(ValueError, match="--retune tunes runs and --report-only starts none"):
        reproduce(shipped_experiment(tmp_path / "toy_tuned"), "tiny", out=tmp_path / "out", report_only=True,
                  retune=True, echo=lambda _: None)


@pytest.mark.integration
def test_tiny_reproduction_trains_the_shipped_values_without_tuning_and_retunes_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    folder = shipped_experiment(tmp_path / "toy_tuned")
    out = tmp_path / "out"
    result = reproduce(folder, "tiny", seeds=1, workers=2, out=out, echo=lambda _: None)
    assert all(r.ok for res in result.results.values() for r in res.runs)
    assert not list((out / TUNING).glob("*-tuning"))  # nothing tuned
    (seed_run,) = result.results["tuned"].runs
    config = rundir.read_config(seed_run.path / RUN)
    assert config["loss"]["tau"] == 0.17 and config["optim"]["lr"] == 0.001
    text = result.markdown.read_text()
    assert "Tuned runs: 1 from `tuned.yaml` shipped with the experiment (tuning skipped)" in text
    assert "| tuned | loss.tau, optim.lr | loss.tau = 0.17, optim.lr = 0.001 | shipped (tuned.yaml) | — |" in text
    assert json.loads((out / "results.json").read_text())["tuning"]["tuned"]["source"] == SHIPPED_SOURCE
    retuned = reproduce(folder, "tiny", seeds=1, workers=2, out=tmp_path / "retuned", retune=True, echo=lambda _: None)
    (sweep_dir,) = (tmp_path / "retuned" / TUNING).glob("*-tuned-tuning")
    assert len(list(sweep_dir.glob(f"*/{PARAMS}"))) == TUNING_AT_TINY
    best = read_best(tmp_path / "retuned")["tuned"]
    assert best["source"] == TUNED_SOURCE and best["values"] != SHIPPED_VALUES["smoke"]["tuned"]
    (seed_run,) = retuned.results["tuned"].runs
    assert rundir.read_config(seed_run.path / RUN)["loss"]["tau"] == best["values"]["loss.tau"]
