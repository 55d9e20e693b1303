"""The population check of ``icl reproduce``: expected losses without training, checked against
independent computations, the ``population`` entry's parsing, and its section of results.md."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import dgp
from dgp.negatives import effective_sample_size
from identifiable_cl.reproduce import population, report, runner
from identifiable_cl.reproduce.experiment import load_experiment, parse_experiment

KAPPA = 5.0
K = 4  # DGP negatives per anchor
B, BATCHES, SEED = 64, 8, 3  # the check's anchors per batch, batches and seed


def _dgp_run(beta: float) -> dict:
    return {
        "dgp.negatives.name": "tilted", "dgp.negatives.beta": beta, "dgp.negatives.num": K,
        "loss.name": "infonce", "loss.similarity": "cosine", "loss.negatives": "independent",
        "loss.tau": 0.25, "loss.learn_tau": True,
    }


def _loss_run(beta: float) -> dict:
    return {
        "dgp.negatives.name": "none", "loss.name": "hard_negative", "loss.similarity": "cosine",
        "loss.negatives": "symmetric", "loss.tau": 0.2, "loss.beta": beta,
    }


def _raw(**population_changes) -> dict:
    """S^2, vMF(κ = 5) positives: three DGP-side runs (β = 0, 2, 6) and two loss-side runs (β = 0, 1)."""
    entry = {
        "series": [
            {"label": "dgp", "runs": ["dgp0", "dgp2", "dgp6"], "tau": "optimal"},
            {"label": "loss", "runs": ["loss0", "loss1"]},
        ],
        "epsilons": [0.3, 1.0],
        "batches": BATCHES,
        "batch_size": B,
        "seed": SEED,
    }
    entry.update(population_changes)
    return {
        "name": "pop",
        "title": "population toy",
        "paper": "nobody",
        "reference_source": "none",
        "base": {
            "dgp.dim": 3, "dgp.space.name": "sphere", "dgp.marginal.name": "uniform",
            "dgp.conditional.name": "vmf", "dgp.conditional.kappa": KAPPA, "dgp.mixing.name": "linear",
            "encoder.normalize": "sphere", "encoder.widths": [8],
            "dgp.sampler": 1,  # the smoke-size margins below were checked on the draws of this sampler's streams
        },
        "scales": {"paper": {"train.batch_size": 64}, "smoke": {"train.batch_size": 32}},
        "runs": [
            {"label": "dgp0", "description": "DGP β = 0", "overrides": _dgp_run(0.0)},
            {"label": "dgp2", "description": "DGP β = 2", "overrides": _dgp_run(2.0)},
            {"label": "dgp6", "description": "DGP β = 6 > κ", "overrides": _dgp_run(6.0)},
            {"label": "loss0", "description": "loss β = 0", "overrides": _loss_run(0.0)},
            {"label": "loss1", "description": "loss β = 1", "overrides": _loss_run(1.0)},
        ],
        "metrics": ["r2_linear"],
        "population": entry,
    }


def _experiment(**population_changes):
    return parse_experiment(_raw(**population_changes), Path("."), "pop.yaml")


@pytest.fixture(scope="module")
def checked():
    return population.run_check(_experiment(), "smoke")


def _samples(experiment, label: str, batch_size: int, batches: int, seed: int):
    """The check's batches of run ``label``, from a process built here from the run's config."""
    config = copy.deepcopy(experiment.config(label, "smoke"))
    config["dgp"]["mixing"] = {"name": "identity"}
    process = dgp.build_process(config["dgp"], seed=config["seed"])
    return [(b.z.double().numpy(), b.z_pos.double().numpy(), None if b.z_neg is None else b.z_neg.double().numpy())
            for b in population.draws(process, seed, batch_size, batches)]


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def test_expected_infonce_loss_of_the_true_inverse_matches_a_plain_loop(checked):
    experiment = _experiment()
    run = checked.runs["dgp0"]
    assert run.tau == pytest.approx(1.0 / KAPPA)  # β = 0: the optimal τ is 1/κ
    per_batch = []
    for z, z_pos, z_neg in _samples(experiment, "dgp0", B, BATCHES, SEED):
        rows = []
        for i in range(z.shape[0]):
            pos = float(_unit(z[i]) @ _unit(z_pos[i])) / run.tau
            negs = [float(_unit(z[i]) @ _unit(z_neg[i, k])) / run.tau for k in range(K)]
            rows.append(-pos + math.log(math.exp(pos) + sum(math.exp(v) for v in negs)))
        per_batch.append(sum(rows) / len(rows))
    assert run.loss_identity.mean == pytest.approx(float(np.mean(per_batch)), abs=1e-5)
    assert run.loss_identity.se == pytest.approx(float(np.std(per_batch, ddof=1) / math.sqrt(BATCHES)), rel=1e-3)


def test_the_constant_encoder_has_the_closed_form_loss(checked):
    # every logit equal: log(K + 1) for the DGP's K negatives, log(2B − 1) for 2B − 2 in-batch ones
    for label, negatives in (("dgp0", K), ("dgp6", K), ("loss0", 2 * B - 2), ("loss1", 2 * B - 2)):
        run = checked.runs[label]
        assert run.loss_identity.mean + run.margins[population.CONSTANT].mean == pytest.approx(
            math.log(negatives + 1), abs=1e-5)


def test_rotation_margin_vanishes_and_strong_distortions_lose(checked):
    for run in checked.runs.values():
        rotation = run.margins[population.ROTATION]
        assert abs(rotation.mean) <= 3 * rotation.se + 1e-6
        assert run.ratios[population.ROTATION] is None
    for label in ("dgp0", "dgp2", "loss0"):
        stretch, warp = checked.runs[label].margins["stretch 1"], checked.runs[label].margins["warp 1"]
        assert stretch.mean > 3 * stretch.se > 0, (label, stretch)
        assert warp.mean > warp.se > 0, (label, warp)
    # β = 6 > κ = 5: positives and negatives are no longer told apart, collapse beats the true inverse
    assert checked.runs["dgp6"].margins[population.CONSTANT].mean < 0
    assert checked.runs["dgp0"].margins[population.CONSTANT].mean > 0


def test_temperatures_follow_the_series_rule(checked):
    assert checked.runs["dgp2"].tau == pytest.approx(1.0 / (KAPPA - 2.0))
    assert checked.runs["dgp2"].tau_rule.startswith("optimal")
    assert checked.runs["dgp6"].tau == pytest.approx(0.25)  # β ≥ κ: the run's own loss.tau
    assert "no optimal" in checked.runs["dgp6"].tau_rule
    assert checked.runs["loss1"].tau == pytest.approx(0.2)
    assert checked.runs["dgp2"].tilt_over_kappa == pytest.approx(2.0 / KAPPA)
    assert checked.runs["loss1"].tilt_over_kappa == pytest.approx(1.0 / 0.2 / KAPPA)


def test_ratios_are_margins_over_the_series_reference(checked):
    ref, run = checked.runs["dgp0"], checked.runs["dgp2"]
    taken = 0
    for name in population.distortions(checked.spec):
        reference = ref.margins[name]
        if reference.mean > 2 * reference.se:
            taken += 1
            assert run.ratios[name].mean == pytest.approx(run.margins[name].mean / reference.mean)
            assert ref.ratios[name].mean == pytest.approx(1.0)
        else:  # no ratio to a reference margin indistinguishable from 0
            assert run.ratios[name] is None
    assert taken >= 2
    assert run.pooled_ratio is not None and ref.pooled_ratio is None


def test_kish_ess_closed_forms():
    assert float(population.kish_ess(torch.zeros(7))) == pytest.approx(7.0)
    assert float(population.kish_ess(torch.tensor([0.0, -50.0, -50.0, -50.0]))) == pytest.approx(1.0, abs=1e-12)
    # -inf entries carry no weight: three equal weights among five entries
    assert float(population.kish_ess(torch.tensor([1.0, -math.inf, 1.0, 1.0, -math.inf]))) == pytest.approx(3.0)
    w = torch.tensor([[0.5, 1.0, 2.0, 4.0], [3.0, 3.0, 1.0, 0.1]], dtype=torch.float64)
    expected = w.sum(1) ** 2 / (w**2).sum(1)
    torch.testing.assert_close(population.kish_ess(w.log()), expected)
    torch.testing.assert_close(population.kish_ess(w.log()), effective_sample_size(w))
    # large log-weights do not overflow
    assert float(population.kish_ess(torch.tensor([1000.0, 1000.0]))) == pytest.approx(2.0)


def test_loss_side_ess_matches_a_plain_loop(checked):
    experiment = _experiment()
    assert checked.runs["loss0"].weights_ess.mean == pytest.approx(2 * B - 2)
    assert checked.runs["loss0"].weights_ess.min == pytest.approx(2 * B - 2)
    run = checked.runs["loss1"]
    assert run.weights_ess.out_of == 2 * B - 2
    values = []
    for z, z_pos, _ in _samples(experiment, "loss1", B, BATCHES, SEED):
        both = _unit(np.concatenate([z, z_pos]))
        size = z.shape[0]
        for i in range(2 * size):
            partner = (i + size) % (2 * size)
            w = [math.exp(1.0 * float(both[i] @ both[j]) / 0.2) for j in range(2 * size) if j not in (i, partner)]
            values.append(sum(w) ** 2 / sum(v * v for v in w))
    assert run.weights_ess.mean == pytest.approx(float(np.mean(values)), rel=1e-4)
    assert run.weights_ess.min == pytest.approx(float(np.min(values)), rel=1e-4)
    assert 1.0 < run.weights_ess.mean < 2 * B - 2
    assert checked.runs["dgp2"].weights_ess is None and checked.runs["dgp2"].sampler == "exact"


def test_section_and_json_report_every_run(checked):
    text = population.section(checked)
    assert text.startswith("## Population check (no training)")
    for label in ("dgp0", "dgp2", "dgp6", "loss0", "loss1"):
        assert f"| {label} |" in text
    assert "stretch 0.3" in text and "warp 1" in text and "rotation" in text
    assert "The collapsed (constant) encoder beats the true inverse at dgp6" in text
    data = json.loads(json.dumps(checked.to_json()))
    assert set(data["runs"]) == {"dgp0", "dgp2", "dgp6", "loss0", "loss1"}
    assert data["runs"]["loss1"]["weights_ess"]["out_of"] == 2 * B - 2
    assert data["runs"]["dgp2"]["ratio_to_reference"]["stretch 1"]["mean"] == pytest.approx(
        checked.runs["dgp2"].ratios["stretch 1"].mean)


def test_markdown_has_the_section_only_with_a_population_entry(checked, tmp_path):
    results = {r.label: report.RunResults(r.label) for r in _experiment().runs}
    args = (_experiment(), "smoke", 1, results, [], {}, "icl reproduce pop", tmp_path, 1.0)
    assert "## Population check (no training)" in report.markdown(*args, population=checked)
    assert "Population check" not in report.markdown(*args)


def test_reproduce_writes_the_check_into_results(tmp_path, monkeypatch):
    folder = tmp_path / "pop"
    folder.mkdir()
    raw = _raw(batches=2, batch_size=8)
    raw["runs"] = [r for r in raw["runs"] if r["label"] in ("dgp0", "dgp2")]
    raw["population"]["series"] = [{"label": "dgp", "runs": ["dgp0", "dgp2"], "tau": "optimal"}]
    (folder / "experiment.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    monkeypatch.setattr(runner, "run_all", lambda *args, **kwargs: [])  # no training: the check alone
    lines: list[str] = []
    result = runner.reproduce(folder, "tiny", out=tmp_path / "out", echo=lines.append)
    assert any(line.startswith("population check (no training): 2 runs") for line in lines)
    assert "## Population check (no training)" in result.markdown.read_text()
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["population"]["scale"] == "tiny" and set(data["population"]["runs"]) == {"dgp0", "dgp2"}
    assert data["population"]["runs"]["dgp0"]["batches"] == 4  # tiny: TINY_POPULATION, whatever the entry says


def test_experiments_without_the_entry_have_none():
    assert load_experiment("zimmermann2021").population is None
    assert population.run_check(load_experiment("zimmermann2021"), "smoke") is None


def test_hard_negatives_entry_at_tiny_scale():
    experiment = load_experiment("hard_negatives")
    spec = experiment.population
    assert spec.labels() == tuple(r.label for r in experiment.runs)
    assert spec.batches_at("smoke") == 32 and spec.batch_size_at("smoke", spec.series[0]) == 1024
    assert spec.batch_size_at("smoke", spec.series[1]) is None  # in-batch negatives: the run's batch size
    check = population.run_check(experiment, "tiny")
    assert check.runs["tilted_beta5"].tau == pytest.approx(0.2)  # 1/(κ − β) with κ = 10, β = 5
    assert check.runs["tilted_beta20"].tau == pytest.approx(0.1)
    assert check.runs["loss_beta0"].weights_ess.out_of == 2 * 64 - 2  # tiny: 64 anchors, both views


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"series": []}, r"population\.series"),
        ({"series": [{"label": "x", "runs": ["nope"]}]}, r"population\.series\[0\]\.runs.*nope"),
        ({"series": [{"label": "x", "runs": ["dgp0"], "tau": "best"}]}, r"population\.series\[0\]\.tau"),
        ({"series": [{"label": "x", "runs": ["dgp0"], "colour": 1}]}, r"population\.series\[0\].*colour"),
        ({"series": [{"runs": ["dgp0"]}]}, r"population\.series\[0\]\.label"),
        ({"series": [{"label": "x", "runs": ["dgp0"]}, {"label": "y", "runs": ["dgp0"]}]},
         r"population\.series\[1\]\.runs.*earlier"),
        ({"series": [{"label": "x", "runs": ["dgp0"], "batch_size": 1}]}, r"population\.series\[0\]\.batch_size"),
        ({"epsilons": [0.1, -1.0]}, r"population\.epsilons"),
        ({"epsilons": []}, r"population\.epsilons"),
        ({"distortions": ["shear"]}, r"population\.distortions"),
        ({"batches": 1}, r"population\.batches"),
        ({"batches": {"huge": 3}}, r"population\.batches"),
        ({"batch_size": 1}, r"population\.batch_size"),
        ({"batch_size": {"smoke": 0}}, r"population\.batch_size\.smoke"),
        ({"seed": True}, r"population\.seed"),
        ({"samples": 3}, r"population: unknown entries \['samples'\]"),
    ],
)
def test_bad_population_entries_name_the_entry(changes, message):
    with pytest.raises(ValueError, match=message):
        _experiment(**changes)


def test_population_must_be_a_mapping():
    raw = _raw()
    raw["population"] = [1, 2]
    with pytest.raises(ValueError, match=r"pop\.yaml\.population"):
        parse_experiment(raw, Path("."), "pop.yaml")


def test_optimal_tau_needs_the_vmf_tilted_setting():
    with pytest.raises(ValueError, match=r"population\.series\[0\]\.tau=optimal: run loss1.*hard_negative"):
        _experiment(series=[{"label": "loss", "runs": ["loss1"], "tau": "optimal"}])  # refused when loaded


def test_a_loss_without_temperature_is_refused_when_loaded():
    raw = _raw(series=[{"label": "an", "runs": ["an"]}])
    raw["runs"].append({"label": "an", "description": "AnInfoNCE", "overrides": {"loss.name": "aninfonce"}})
    with pytest.raises(ValueError, match=r"pop\.yaml\.population\.series\[0\]: run an has loss.name='aninfonce'; the "
                                         r"population check scores losses with a temperature τ: infonce, hard_negative"):
        parse_experiment(raw, Path("."), "pop.yaml")
