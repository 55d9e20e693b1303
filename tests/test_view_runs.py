"""Runs of a process with views: an encoder per view, the loss over every pair of views, evaluation of every
block from every view, and the run machinery (resume, packs, bf16, evaluate, results) unchanged."""

import json
import math

import pytest
import torch

from identifiable_cl import rundir
from identifiable_cl.aggregate import results
from identifiable_cl.cli import main
from identifiable_cl.components import build, load_config
from identifiable_cl.encoders import ViewEncoders
from identifiable_cl.evaluation.views import ViewSample, evaluate_views
from identifiable_cl.losses import LOSSES
from identifiable_cl.solvers.packed import StackedPack
from identifiable_cl.solvers.views import pair_loss, view_encodings
from identifiable_cl.training import Trainer, run_packed
from tests.tiny import TINY
from tests.dgp.test_multimodal import MULTIMODAL, multimodal

VIEWS = {
    "dgp.dim": 20,
    "dgp.space.name": "euclidean",
    "dgp.marginal": MULTIMODAL["marginal"],
    "dgp.conditional": MULTIMODAL["conditional"],
    "dgp.views": MULTIMODAL["views"],
    "dgp.negatives.name": "marginal",
    "encoder.output_dim": 5,
    "encoder.shared": False,
    "loss.similarity": "l2",
    "loss.tau": 1.0,
    "loss.negatives": "independent",
    "loss.reduction": "logmeanexp",
}


def views_config(**extra):
    return load_config(None, {**TINY, **VIEWS, **extra})


def lp_simclr(anchor, positive, negatives):
    """The multimodal study's LpSimCLRLoss (p = 2, τ = 1, α = ½, the positive in the denominator), written out:
    mean_i ‖a_i − p_i‖² + log mean_{j ∪ +} exp(−d_ij), d_ij = ‖a_i − n_j‖², d_i+ = ‖a_i − p_i‖²."""
    pos = ((anchor - positive) ** 2).sum(-1)
    neg = ((anchor[:, None, :] - negatives[None, :, :]) ** 2).sum(-1)
    scores = torch.cat([-neg, -pos[:, None]], dim=1)
    return (pos + torch.logsumexp(scores, 1) - math.log(scores.shape[1])).mean()


def test_pair_loss_is_the_symmetrised_loss_of_the_reference():
    g = torch.Generator().manual_seed(0)
    h1, h2, n1, n2 = (torch.randn(12, 5, generator=g, dtype=torch.float64) for _ in range(4))
    loss = LOSSES.build({"name": "infonce", "similarity": "l2", "tau": 1.0, "negatives": "independent",
                         "reduction": "logmeanexp"}, key="loss", dim=5).double()
    want = 0.5 * (lp_simclr(h1, h2, n1) + lp_simclr(h2, h1, n2))
    torch.testing.assert_close(pair_loss(loss, [h1, h2], [n1, n2]), want, rtol=1e-12, atol=1e-12)
    three = pair_loss(loss, [h1, h2, n2], [n1, n2, n1])
    pairs = [(0, 1, n1), (0, 2, n1), (1, 0, n2), (1, 2, n2), (2, 0, n1), (2, 1, n1)]
    hs = [h1, h2, n2]
    torch.testing.assert_close(three, sum(lp_simclr(hs[i], hs[j], n) for i, j, n in pairs) / 6, rtol=1e-12, atol=1e-12)


def test_an_encoder_per_view_or_one_shared():
    own = build(views_config())
    assert isinstance(own.encoder, ViewEncoders) and len(own.encoder.encoders) == 2
    first, second = (dict(e.named_parameters()) for e in own.encoder.encoders)
    assert not torch.equal(first["net.0.weight"], second["net.0.weight"])
    assert own.encoder.encoders[0].net[0].in_features == 15
    shared = build(views_config(**{"encoder.shared": True}))
    assert not isinstance(shared.encoder, ViewEncoders)
    # view 1's encoder is the first drawn from the model stream either way
    assert torch.equal(dict(shared.encoder.named_parameters())["net.0.weight"], first["net.0.weight"])
    batch = own.process.sample(8, own.batches)
    hs, negs = view_encodings(own.encoder, batch)
    torch.testing.assert_close(hs[1], own.encoder.encoders[1](batch.x_pos))
    torch.testing.assert_close(negs[0], own.encoder.encoders[0](batch.x_neg))


@pytest.mark.parametrize("extra, key, message", [
    ({"dgp.views": {"name": "subsets", "latents": [["content", "m1"], ["content", "style", "m2"]]},
      "encoder.shared": True}, "encoder.shared", "10, 15 dimensions"),
    ({"loss.negatives": "queue", "dgp.negatives.name": "none"}, "loss.negatives", "2 views"),
    ({"encoder.shared": "both"}, "encoder.shared", ""),
])
def test_bad_view_runs_name_the_key(extra, key, message):
    with pytest.raises(ValueError, match=key) as error:
        views_config(**extra)
    assert message in str(error.value)


def test_evaluation_of_identity_views_is_analytic():
    """With identity mixings and h = x, view 1 sees (c, s, m_1) exactly: R² 1 for them, 0 for m_2, and ½ for the
    perturbed style s̃ = s + ε (var s = var ε = 1); view 2 the mirror image; the permuted control reads no
    content and all of the permuted one."""
    process = multimodal(mixing="identity")
    out = evaluate_views([lambda x: x, lambda x: x], process, process.make_generator(0), control=True,
                         n_fit=4000, n_test=4000, nonlinear=False)
    want = {"content": 1.0, "style": 1.0, "m1": 1.0, "m2": 0.0, "style_view2": 0.5}
    mirrored = {"content": 1.0, "style": 0.5, "m1": 0.0, "m2": 1.0, "style_view2": 1.0}
    for block in want:
        assert out[f"r2_linear_{block}"] == pytest.approx(want[block], abs=0.03), block
        assert out[f"view2_r2_linear_{block}"] == pytest.approx(mirrored[block], abs=0.03), block
    for prefix in ("permuted_", "view2_permuted_"):
        assert out[f"{prefix}r2_linear_content"] == pytest.approx(0.0, abs=0.03)
        assert out[f"{prefix}r2_linear_content_permuted"] == pytest.approx(1.0, abs=1e-9)
    sample = ViewSample(process, 1, permuted=True)
    assert sample.dim == 30 and sample.blocks["style_view2"] == list(range(20, 25))


def test_view_run_trains_evaluates_and_reports(tmp_path, capsys):
    summary = Trainer.create(views_config(**{"train.steps": 20, "eval.nonlinear": True}), tmp_path / "run",
                             progress=False).run()
    for key in ("r2_linear_content", "r2_nonlinear_style_view2", "view2_r2_linear_m2", "view2_r2_nonlinear_content",
                "permuted_r2_linear_content", "view2_permuted_r2_nonlinear_content_permuted", "identity_r2_linear_m1",
                "identity_view2_r2_linear_m2", "identity_r2_linear_style_view2"):
        assert isinstance(summary[key], float) and -1.5 <= summary[key] <= 1.0, key
    assert main(["evaluate", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "R² of each block" in out and "content, permuted control" in out and "view 2 nonlinear" in out
    again = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert again["view2_r2_linear_content"] == pytest.approx(summary["view2_r2_linear_content"], abs=1e-6)
    table = results([tmp_path])
    assert "view2_r2_nonlinear_m2" in table and "permuted_r2_nonlinear_content" in table


def test_view_run_resumes_exactly(tmp_path):
    full = Trainer.create(views_config(**{"train.steps": 100}), tmp_path / "full", progress=False).run()
    Trainer.create(views_config(**{"train.steps": 50}), tmp_path / "half", progress=False).run()
    resumed = Trainer.resume(tmp_path / "half", {"train.steps": 100}, progress=False).run()
    for key in ("r2_linear", "view2_r2_linear_content", "permuted_r2_linear_content", "dgp_fingerprint"):
        assert resumed[key] == full[key], key
    a = rundir.load_torch(tmp_path / "full" / rundir.CHECKPOINT)
    b = rundir.load_torch(tmp_path / "half" / rundir.CHECKPOINT)
    assert all(torch.equal(a["encoder"][k], b["encoder"][k]) for k in a["encoder"])


@pytest.mark.integration
def test_views_pack_in_turn_and_refuse_the_batched_step(tmp_path):
    cfgs = [views_config(**{"train.steps": 20, "train.log_every": 1, "seed": s}) for s in (0, 1)]
    alone = [Trainer.create(c, tmp_path / f"alone{i}", progress=False).run() for i, c in enumerate(cfgs)]
    packed = run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)])
    for i, (a, p) in enumerate(zip(alone, packed)):
        assert [r["loss"] for r in rundir.read_metrics(tmp_path / f"packed{i}")] == \
            [r["loss"] for r in rundir.read_metrics(tmp_path / f"alone{i}")]
        assert p["view2_r2_linear_content"] == a["view2_r2_linear_content"]
    with pytest.raises(ValueError, match="take their steps in turn"):
        StackedPack([build(c) for c in cfgs])


@pytest.mark.parametrize("loss", ["infonce", "nce", "triplet", "margin"])
def test_other_losses_and_bf16_train_with_views(tmp_path, loss):
    plain = {k: v for k, v in VIEWS.items() if not k.startswith("loss.")}
    config = load_config(None, {**TINY, **plain, "dgp.negatives.name": "none", "loss.name": loss, "encoder.normalize": "sphere",
                                "train.steps": 10, "train.precision": "bf16"})
    summary = Trainer.create(config, tmp_path / "run", progress=False).run()
    assert math.isfinite(summary["view2_r2_linear_content"])


def test_daunhawer2023_paper_scale_is_the_official_simulation():
    """main_mlp.py's defaults: 5 + 5 + 5 + 5 latents, encoders 15·[10, 50, 50, 50, 50, 10] → 5, batch 6144, Adam
    1e-4, 300,001 steps, gradient norm clipped at 2.0, 3-layer mixings with condition ratio 0.001, and the
    multi-view row with one mixing and one encoder."""
    from identifiable_cl.reproduce.experiment import load_experiment

    experiment = load_experiment("daunhawer2023")
    for label in ("multimodal", "multimodal_dependent", "multiview"):
        config = experiment.config(label, "paper")
        assert config["encoder"]["widths"] == [15 * w for w in (10, 50, 50, 50, 50, 10)]
        assert config["encoder"]["output_dim"] == 5 and config["train"]["batch_size"] == 6144
        assert config["optim"]["lr"] == 1e-4 and config["train"]["steps"] == 300001 and config["optim"]["grad_clip"] == 2.0
        assert config["dgp"]["mixing"]["layers"] == 3 and config["dgp"]["mixing"]["cond_ratio"] == 0.001
        assert config["dgp"]["conditional"]["p_change"] == 1.0 and config["dgp"]["marginal"]["modality_dim"] == 5
    shared = experiment.config("multiview", "paper")
    assert shared["dgp"]["views"]["shared_mixing"] is True and shared["encoder"]["shared"] is True
    assert experiment.config("multimodal", "paper")["encoder"]["shared"] is False


def test_the_evaluation_sizes_are_checked_against_every_view_s_columns_before_anything_runs():
    from identifiable_cl.components import check

    config = views_config()
    process_columns = 30  # 20 latents, each further view's changed style block (5), the permuted content (5)
    config["eval"]["final_n_test"] = process_columns
    with pytest.raises(ValueError, match=rf"eval.final_n_test={process_columns} is invalid: must be >= "
                                         rf"{process_columns + 1}: correlating {process_columns} scored latent"):
        check(config)
    config["eval"]["final_n_test"] = process_columns + 1
    check(config)
