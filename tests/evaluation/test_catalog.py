"""The metric catalog: one declaration per metric, from which evaluation, tables and labels follow."""

import pytest
import torch

from identifiable_cl.evaluation import METRICS, Metric, linear_r2, metrics, mcc
from identifiable_cl.evaluation.catalog import (
    RunScoring, Scoring, block_prefixes, compute, labels, ordered, references, switches,
)
from identifiable_cl.evaluation.dci import dci
from identifiable_cl.evaluation.orthogonal import orthogonal_r2


def pairs(seed=0, n=4, fit=600, test=900):
    g = torch.Generator().manual_seed(seed)
    z = torch.rand(fit + test, n, generator=g, dtype=torch.float64)
    a = torch.randn(n, n, generator=g, dtype=torch.float64) + 2 * torch.eye(n, dtype=torch.float64)
    h = torch.tanh(z @ a) + 0.05 * torch.randn(fit + test, n, generator=g, dtype=torch.float64)
    return z[:fit], h[:fit], z[fit:], h[fit:]


def test_every_metric_is_declared_once_in_rank_order_with_what_it_tests():
    catalog = ordered()
    keys = [m.key for m in catalog]
    assert keys == ["r2_linear", "r2_nonlinear", "r2_orthogonal", "mcc_pearson", "mcc_spearman", "mcc_ica_pearson",
                    "mcc_ica_spearman", "mcc_ica_abs_pearson", "mcc_ica_abs_spearman", "mcc_block_aware",
                    "effective_rank", "dci", "lambda_relative_error", "mi_true"]
    assert [m.key for m in catalog if m.of_run] == ["lambda_relative_error", "mi_true"]
    assert all(m.label and m.tests for m in catalog)
    assert references() == {"mcc_block_aware": "mcc_block_aware_random_rotation"}
    assert block_prefixes() == ("r2_linear_", "r2_nonlinear_")
    assert list(labels()) == ["r2_linear", "r2_nonlinear", "r2_orthogonal", "mcc_pearson", "mcc_spearman",
                              "mcc_ica_pearson", "mcc_ica_spearman", "mcc_ica_abs_pearson", "mcc_ica_abs_spearman",
                              "mcc_block_aware", "mcc_block_aware_random_rotation", "dci_disentanglement",
                              "dci_completeness", "dci_informativeness"]


def test_metrics_are_the_catalog_entries_computed_by_their_own_functions():
    z_fit, h_fit, z_test, h_test = pairs()
    out = metrics(z_fit, h_fit, z_test, h_test, nonlinear=False, enabled={"eval.dci": True})
    assert out["r2_linear"] == linear_r2(z_fit, h_fit, z_test, h_test).mean
    assert out["r2_orthogonal"] == orthogonal_r2(z_fit, h_fit, z_test, h_test).mean
    assert out["mcc_spearman"] == mcc(z_test, h_test, method="spearman").mean
    plain = dci(z_fit, h_fit, z_test, h_test)
    assert (out["dci_disentanglement"], out["dci_completeness"], out["dci_informativeness"]) == (
        plain.disentanglement, plain.completeness, plain.informativeness)
    assert "r2_nonlinear" not in out and "mcc_block_aware" not in out  # switched off; no Λ groups
    assert not any(k.startswith("dci") for k in metrics(z_fit, h_fit, z_test, h_test, nonlinear=False))


def test_a_registered_metric_is_computed_where_it_applies(monkeypatch):
    class MeanAbs(Metric):
        label, tests = "mean |h|", "nothing"

        def applies(self, s):
            return s.lambda_groups is None

        def __call__(self, s):
            return {self.key: float(s.h_score.abs().mean())}

    monkeypatch.setattr(METRICS, "_entries", dict(METRICS._entries))  # registered for this test only
    METRICS.register("mean_abs")(MeanAbs)
    z_fit, h_fit, z_test, h_test = pairs()
    out = compute(Scoring(z_fit, h_fit, z_test, h_test), {})
    assert out["mean_abs"] == pytest.approx(float(h_test.abs().mean()))
    assert list(out).index("mean_abs") > list(out).index("effective_rank")  # rank 100: after the built-ins
    assert "mean_abs" in labels()
    assert "mean_abs" not in compute(Scoring(z_fit, h_fit, z_test, h_test, lambda_groups=[[0, 1], [2, 3]]), {})


class Shrinkage(Metric):
    """A plugin's metric with a switch of its own: the ratio of h's spread to z's, on with ``eval.shrinkage``."""

    label, tests, enabled_by, switch = "spread ratio", "nothing", "eval.shrinkage", "also measure std(h) / std(z)"

    def __call__(self, s):
        return {self.key: float(s.h_score.std() / s.z_score.std())}


@pytest.fixture
def shrinkage(monkeypatch):
    monkeypatch.setattr(METRICS, "_entries", dict(METRICS._entries))  # registered for this test only
    METRICS.register("shrinkage")(Shrinkage)


def test_a_metric_plugin_declares_its_own_eval_switch(shrinkage):
    from identifiable_cl import check, load_config

    assert switches()["eval.shrinkage"] == (False, "also measure std(h) / std(z)")
    z_fit, h_fit, z_test, h_test = pairs()
    scoring = Scoring(z_fit, h_fit, z_test, h_test)
    assert "shrinkage" not in compute(scoring, {})  # its default: off
    assert compute(scoring, {"eval.shrinkage": True})["shrinkage"] == pytest.approx(float(h_test.std() / z_test.std()))
    from identifiable_cl.cli.config import key_table

    assert [line.split()[:3] for line in key_table().splitlines() if "eval.shrinkage" in line] == [
        ["eval.shrinkage", "bool", "false"]]
    config = load_config(overrides={"eval.shrinkage": True})
    assert config["eval"]["shrinkage"] is True
    check(config)
    with pytest.raises(ValueError, match=r"eval.shrinkage=3 is invalid: expected bool: a metric's switch"):
        check(load_config(overrides={"eval.shrinkage": 3}))
    with pytest.raises(ValueError, match=r"eval.shrinkag=True is invalid: unknown config key .*did you mean"):
        load_config(overrides={"eval.shrinkag": True})
    with pytest.raises(ValueError, match=r"eval.shrinkag=True is invalid: unknown config key"):
        check({**config, "eval": {**config["eval"], "shrinkag": True}})


def test_a_switch_metrics_declare_is_refused_without_the_metric():
    from identifiable_cl import load_config

    with pytest.raises(ValueError, match=r"eval.shrinkage=True is invalid: unknown config key"):
        load_config(overrides={"eval.shrinkage": True})


def test_metrics_of_the_run_are_computed_from_the_run_only():
    z_fit, h_fit, z_test, h_test = pairs()
    pair_keys = compute(Scoring(z_fit, h_fit, z_test, h_test), {"eval.mi": True})
    assert not any(k.startswith(("lambda_", "mi_")) for k in pair_keys)

    class Run:  # a solver as far as Λ recovery reads it
        process = type("P", (), {"lambda_true": torch.tensor([1.0, 2.0, 4.0])})()
        loss = None

    found = {"lambda_learned": [2.0, 4.0, 8.0], "mcc_matching": [[0, 0], [1, 1], [2, 2]]}
    out = compute(RunScoring(Run(), found), {"eval.mi": False})
    assert list(out) == ["lambda_relative_error", "lambda_max_relative_error", "lambda_relative_error_per_dim",
                         "lambda_scale", "lambda_rank_correlation", "lambda_pairs"]
    assert out["lambda_scale"] == pytest.approx(0.5) and out["lambda_relative_error"] == pytest.approx(0.0, abs=1e-12)
    assert compute(RunScoring(Run(), {"lambda_learned": [2.0, 4.0]}), {"eval.mi": False}) == {}  # no matching, no Λ


def test_orthogonal_r2_tells_a_rotation_from_another_linear_map():
    z_fit, _, z_test, _ = pairs(n=3)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    stretch = torch.diag(torch.tensor([1.0, 5.0, 0.2], dtype=torch.float64))
    rotated = metrics(z_fit, 2 * z_fit @ q, z_test, 2 * z_test @ q, nonlinear=False)
    stretched = metrics(z_fit, z_fit @ stretch, z_test, z_test @ stretch, nonlinear=False)
    assert rotated["r2_orthogonal"] == pytest.approx(1.0, abs=1e-12)
    assert stretched["r2_linear"] == pytest.approx(1.0, abs=1e-12) and stretched["r2_orthogonal"] < 0.9
