"""Experiment scales beyond paper and smoke, per-scale references, ``within`` claims, ``--runs`` and ``--report-only``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from identifiable_cl.cli import main
from identifiable_cl.reproduce import reproduce
from identifiable_cl.reproduce.claims import FAILS, HOLDS, NO_DATA, Claim, check
from identifiable_cl.aggregate import Run
from identifiable_cl.reproduce.experiment import SCALES, load_experiment, parse_experiment
from identifiable_cl.reproduce.report import RunResults, table


def _experiment(**changes):
    raw = {
        "name": "toy",
        "title": "toy",
        "paper": "nobody",
        "reference_source": "none",
        "base": {"loss.name": "infonce", "train.steps": 10},
        "scales": {"paper": {"train.steps": 1000}, "smoke": {"train.steps": 100}},
        "runs": [{"label": "a", "description": "a", "reference": {"r2_linear": {"paper": 0.99, "medium": 0.9},
                                                                     "mcc_pearson": "≈ 0.7"}}],
        "metrics": ["r2_linear"],
    }
    raw.update(changes)
    return parse_experiment(raw, Path("."), "toy.yaml")


def test_medium_exists_only_where_the_experiment_defines_it():
    plain = _experiment()
    assert plain.scale_names() == ("paper", "smoke", "tiny")
    with pytest.raises(ValueError, match="has the scales paper, smoke, tiny"):
        plain.overrides("a", "medium")
    medium = _experiment(scales={"paper": {"train.steps": 1000}, "medium": {"train.steps": 300},
                                 "smoke": {"train.steps": 100}})
    assert medium.scale_names() == SCALES
    assert medium.overrides("a", "medium")["train.steps"] == 300


def test_references_may_depend_on_the_scale():
    run = _experiment().run("a")
    assert run.reference_at("r2_linear", "paper") == 0.99
    assert run.reference_at("r2_linear", "medium") == 0.9
    assert run.reference_at("r2_linear", "smoke") is None
    assert run.reference_at("mcc_pearson", "tiny") == "≈ 0.7"
    with pytest.raises(ValueError, match=r"reference.r2_linear.*scales"):
        _experiment(runs=[{"label": "a", "description": "a", "reference": {"r2_linear": {"huge": 1.0}}}])


def test_the_report_table_shows_the_reference_of_its_scale(tmp_path):
    results = {"a": RunResults("a", [Run(tmp_path, {}, (), {"r2_linear": 0.91})])}
    assert "| a | r2_linear | 0.910 (n=1) | 0.900 |" in table(_experiment(), results, "medium")
    assert "| a | r2_linear | 0.910 (n=1) | 0.990 |" in table(_experiment(), results, "paper")
    assert "| a | r2_linear | 0.910 (n=1) | — |" in table(_experiment(), results, "smoke")


def _within(**raw):
    base = {"claim": "c", "left": {"run": "x", "metric": "m"}, "op": "within", "right": 0.9, "tolerance": 0.02}
    return Claim.parse("claims[0]", {**base, **raw}, SCALES)


def test_within_claims_hold_inside_the_tolerance_on_both_sides():
    assert check(_within(), {"x": {"m": 0.915}}, "medium").state == HOLDS
    assert check(_within(), {"x": {"m": 0.885}}, "medium").state == HOLDS
    above, below = check(_within(), {"x": {"m": 0.93}}, "medium"), check(_within(), {"x": {"m": 0.87}}, "medium")
    assert above.state == FAILS and below.state == FAILS
    assert "is not within ±0.020 of 0.900 (off by +0.030)" in above.detail
    assert "(off by -0.030)" in below.detail
    per_scale = _within(tolerance={"medium": 0.05})
    assert check(per_scale, {"x": {"m": 0.94}}, "medium").state == HOLDS
    assert check(per_scale, {"x": {"m": 0.94}}, "paper").state == NO_DATA


def test_within_needs_a_tolerance_and_only_within_takes_one():
    with pytest.raises(ValueError, match="tolerance"):
        Claim.parse("claims[0]", {"claim": "c", "left": {"run": "x", "metric": "m"}, "op": "within", "right": 1}, SCALES)
    with pytest.raises(ValueError, match="tolerance"):
        _within(op=">=")


def test_medium_falls_back_to_smoke_thresholds():
    claim = Claim.parse("claims[0]", {"claim": "c", "left": {"run": "x", "metric": "m"}, "op": ">=",
                                      "right": {"paper": 0.95, "smoke": 0.8}}, SCALES)
    assert check(claim, {"x": {"m": 0.85}}, "medium").state == HOLDS
    assert check(claim, {"x": {"m": 0.85}}, "paper").state == FAILS


def test_r24_medium_is_the_official_setting_for_10k_steps_scored_in_sample():
    experiment = load_experiment("rusak2024")
    paper = experiment.config("aninfonce_bimodal", "paper")
    medium = experiment.config("aninfonce_bimodal", "medium")
    assert medium["train"]["steps"] == 10000
    for section, key in [("train", "batch_size"), ("optim", "lr"), ("optim", "loss_lr"), ("encoder", "widths"),
                         ("loss", "negatives"), ("dgp", "conditional")]:
        assert medium[section][key] == paper[section][key], (section, key)
    assert medium["eval"]["in_sample_n"] == 4096
    within = [c for c in experiment.claims if c.tolerance is not None]
    assert len(within) == 8 and all(c.scales == ("medium",) for c in within)


@pytest.mark.parametrize("name", ["zimmermann2021", "vonkugelgen2021"])
def test_z21_and_vk21_medium_is_smoke_with_a_larger_batch_and_more_steps(name):
    experiment = load_experiment(name)
    for run in experiment.runs:
        smoke, medium = experiment.config(run.label, "smoke"), experiment.config(run.label, "medium")
        assert medium["train"]["batch_size"] == 2 * smoke["train"]["batch_size"]
        assert medium["train"]["steps"] >= 4 * smoke["train"]["steps"]
        assert medium["eval"]["final_n_fit"] == smoke["eval"]["final_n_fit"]
        for section in ("dgp", "loss", "encoder", "optim"):
            assert medium[section] == smoke[section], (run.label, section)


def test_runs_selects_labels_and_rejects_unknown_ones(tmp_path, capsys):
    with pytest.raises(ValueError, match="allowed: run labels of rusak2024.*aninfonce_linear"):
        reproduce("rusak2024", "tiny", runs=["aninfonce_lineer"], out=tmp_path / "out", echo=lambda _: None)
    assert not (tmp_path / "out").exists()
    assert main(["reproduce", "ensembles", "--scale", "medium"]) == 2
    assert "has the scales paper, smoke, tiny" in capsys.readouterr().err


@pytest.mark.integration
def test_runs_restricts_the_planned_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    lines: list[str] = []
    result = reproduce("rusak2024", "tiny", runs=["aninfonce_linear"], out=tmp_path / "out", echo=lines.append)
    assert lines[0].startswith("1 runs, 0 finished before, 1 to run")
    assert [r.ok for r in result.results["aninfonce_linear"].runs] == [True]
    assert all(not result.results[label].runs for label in result.results if label != "aninfonce_linear")
    assert sorted(p.name for p in (tmp_path / "out" / "sweeps").iterdir()) == ["rusak2024-tiny-aninfonce_linear"]
    missing = sum(v.state == NO_DATA for v in result.verdicts)
    assert missing and f", {missing} without data" in lines[-1]
    assert f", {missing} without data)" in result.markdown.read_text()


@pytest.mark.integration
def test_report_only_reports_the_finished_runs_and_starts_none(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="--report-only: no finished run of rusak2024 at scale tiny"):
        reproduce("rusak2024", "tiny", runs=["aninfonce_linear"], out=out, report_only=True, echo=lambda _: None)
    assert not out.exists()
    reproduce("rusak2024", "tiny", runs=["aninfonce_linear"], out=out, echo=lambda _: None)
    before = sorted(p.relative_to(out) for p in (out / "sweeps").rglob("*"))
    lines: list[str] = []
    result = reproduce("rusak2024", "tiny", seeds=2, runs=["aninfonce_linear", "infonce_linear"], out=out,
                       report_only=True, echo=lines.append)
    assert sorted(p.relative_to(out) for p in (out / "sweeps").rglob("*")) == before
    assert len(result.results["aninfonce_linear"].runs) == 1 and not result.results["infonce_linear"].runs
    pending = "infonce_linear seed 0, infonce_linear seed 1, aninfonce_linear seed 1"
    assert lines[-2] == f"report only: 1 finished runs; not finished: {pending}"
    assert f"Not finished when this report was written, so left out: {pending}." in result.markdown.read_text()
    assert json.loads((out / "results.json").read_text())["not_finished"] == pending.split(", ")
