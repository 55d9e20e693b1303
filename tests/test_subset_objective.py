"""Yao et al. 2024's objective: every contrasted subset of views on the coordinates of its shared block, with the
ground-truth, Gumbel and concatenated selections; checked against references written here, for reproducibility
from the seed and an exact resume; and the runs' records of every shared block."""

import itertools
import json
import math

import pytest
import torch

from identifiable_cl import rundir
from identifiable_cl.benchmarks.syncs import host_syncs, host_uploads
from identifiable_cl.cli import main
from identifiable_cl.components import build, load_config
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.base import SIMILARITIES
from identifiable_cl.solvers import SubsetSolver, ViewSolver
from identifiable_cl.solvers.subsets import Selection, joint_loss, subset_loss
from identifiable_cl.training import Trainer
from tests.dgp.test_partial import PAPER_VIEWS, partial
from tests.tiny import TINY

YAO = {
    "dgp.dim": 6,
    "dgp.space.name": "euclidean",
    "dgp.marginal.name": "gaussian_blocks",
    "dgp.conditional.name": "keep",
    "dgp.negatives.name": "marginal",
    "dgp.views": {"name": "subsets", "latents": PAPER_VIEWS, "contrast": "all"},
    "encoder.output_dim": 5,
    "encoder.shared": False,
    "loss.similarity": "l2",
    "loss.tau": 1.0,
    "loss.negatives": "independent",
    "loss.reduction": "logmeanexp",
}
SEEN = [[int(name[1:]) for name in view] for view in PAPER_VIEWS]


def yao_config(**extra):
    return load_config(None, {**TINY, **YAO, **extra})


def contrasted(selection="ground_truth", contrast="all"):
    return partial(views={"name": "subsets", "latents": PAPER_VIEWS, "contrast": contrast, "selection": selection},
                   mixing="identity").views


def lp_simclr(anchor, positive, negatives):
    """LpSimCLRLoss (p = 2, τ = 1, the positive in the denominator) written out: mean_i ‖a_i − p_i‖² +
    log mean_{j ∪ +} exp(−d_ij), d_ij = ‖a_i − n_j‖², d_i+ = ‖a_i − p_i‖²."""
    pos = ((anchor - positive) ** 2).sum(-1)
    neg = ((anchor[:, None, :] - negatives[None, :, :]) ** 2).sum(-1)
    scores = torch.cat([-neg, -pos[:, None]], dim=1)
    return (pos + torch.logsumexp(scores, 1) - math.log(scores.shape[1])).mean()


def test_the_objective_is_the_mean_over_subsets_of_the_pair_losses_on_the_shared_coordinates():
    """The paper's 11 subsets of 4 views, ground-truth coordinates picked by hand from the latents each view sees:
    mean over subsets of the mean over ordered pairs (i, j) of LpSimCLR(h_i[c_i], h_j[c_j], h⁻_i[c_i])."""
    g = torch.Generator().manual_seed(0)
    hs = [torch.randn(12, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    negs = [torch.randn(12, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    loss = LOSSES.build({"name": "infonce", "similarity": "l2", "tau": 1.0, "negatives": "independent",
                         "reduction": "logmeanexp"}, key="loss", dim=5).double()
    terms = []
    for r in (2, 3, 4):
        for subset in itertools.combinations(range(4), r):
            shared = sorted(set.intersection(*(set(SEEN[v]) for v in subset)))
            cols = {v: [SEEN[v].index(i) for i in shared] for v in subset}
            pairs = [(i, j) for i in subset for j in subset if i != j]
            terms.append(sum(lp_simclr(hs[i][:, cols[i]], hs[j][:, cols[j]], negs[i][:, cols[i]])
                             for i, j in pairs) / len(pairs))
    want = sum(terms) / len(terms)
    selection = Selection(contrasted(), 5)
    got = subset_loss(loss, selection.subsets, selection.coordinates(hs), hs, negs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


def official_subset_term(views, fresh):
    """One subset's term of the official UnifiedCLLoss over LpSimCLRLoss (p = 2, τ = 1, α = ½, the positive in a
    log-mean denominator), for its views' selected encodings ``views`` and those of a fresh batch ``fresh``:
    pos[a] = Σ_{i<l} ‖h_i(a) − h_{i+1}(a)‖², neg[a, b] = Σ_i ‖h_i(a) − h3_i(b)‖²,
    2·(½·pos + ½·logmeanexp([−neg[a, :], −pos[a]])), averaged over the batch."""
    size = views[0].shape[0]
    pos = torch.zeros(size, dtype=torch.float64)
    for i in range(len(views) - 1):
        for a in range(size):
            pos[a] += ((views[i][a] - views[i + 1][a]) ** 2).sum()
    neg = torch.zeros(size, size, dtype=torch.float64)
    for i in range(len(views)):
        for a in range(size):
            for b in range(size):
                neg[a, b] += ((views[i][a] - fresh[i][b]) ** 2).sum()
    scores = torch.cat([-neg, -pos[:, None]], dim=1)
    per_sample = 2 * (0.5 * pos + 0.5 * (torch.logsumexp(scores, 1) - math.log(size + 1)))
    return per_sample.mean()


def test_the_joint_objective_is_the_official_loss_summed_over_subsets():
    """Random float64 encodings of 4 views (7 coordinates) and a fresh batch, random coordinates for every view of
    every subset: the sum over the 11 subsets of the official term, to a relative 1e-12."""
    g = torch.Generator().manual_seed(3)
    hs = [torch.randn(9, 7, generator=g, dtype=torch.float64) for _ in range(4)]
    negs = [torch.randn(9, 7, generator=g, dtype=torch.float64) for _ in range(4)]
    views = contrasted()
    subsets = [s for s, _ in views.contrasted]
    chosen = [[torch.randperm(7, generator=g)[: len(shared)] for _ in s] for s, shared in views.contrasted]
    want = sum(official_subset_term([hs[v][:, c] for v, c in zip(s, cols)], [negs[v][:, c] for v, c in zip(s, cols)])
               for s, cols in zip(subsets, chosen))
    loss = LOSSES.build({"name": "infonce", "similarity": "l2", "tau": 1.0, "negatives": "independent",
                         "reduction": "logmeanexp"}, key="loss", dim=7).double()
    got = joint_loss(loss, subsets, chosen, hs, negs)
    assert abs(float(got) - float(want)) <= 1e-12 * abs(float(want))


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("reduction", ["logsumexp", "decoupled_logmeanexp"])
def test_the_joint_objective_takes_the_loss_s_similarity_temperature_and_reduction(similarity, reduction):
    """Positive Σ_{i<l} sim(h_i, h_{i+1}) / τ, negatives Σ_i sim(h_i(a), h⁻_i(b)) / τ over M = 6 shared negatives,
    then the reduction: written out per anchor (cosine: each view's selected coordinates unit-normalised)."""
    g = torch.Generator().manual_seed(4)
    hs = [torch.randn(5, 6, generator=g, dtype=torch.float64) for _ in range(3)]
    negs = [torch.randn(6, 6, generator=g, dtype=torch.float64) for _ in range(3)]
    subsets = [(0, 1), (0, 1, 2)]
    chosen = [[torch.tensor([4, 1]), torch.tensor([0, 5])], [torch.tensor([2, 3, 0])] * 3]

    def sim(a, b):
        if similarity == "cosine":
            return float(a @ b / (a.norm() * b.norm()))
        return float(a @ b) if similarity == "dot" else -float(((a - b).abs() ** int(similarity[1])).sum())

    want = 0.0
    for subset, cols in zip(subsets, chosen):
        for a in range(5):
            pos = sum(sim(hs[v][a, c], hs[w][a, d]) for (v, c), (w, d) in
                      zip(zip(subset, cols), zip(subset[1:], cols[1:]))) / 0.5
            neg = [sum(sim(hs[v][a, c], negs[v][b, c]) for v, c in zip(subset, cols)) / 0.5 for b in range(6)]
            if reduction == "logsumexp":
                want += (-pos + math.log(math.exp(pos) + sum(math.exp(n) for n in neg))) / 5
            else:
                want += (-pos + math.log(sum(math.exp(n) for n in neg) / 6)) / 5
    loss = LOSSES.build({"name": "infonce", "similarity": similarity, "tau": 0.5, "negatives": "independent",
                         "reduction": reduction}, key="loss", dim=6).double()
    assert float(joint_loss(loss, subsets, chosen, hs, negs)) == pytest.approx(want, rel=1e-12)


def test_the_pairs_objective_is_the_mean_of_the_pair_losses_unchanged():
    """``objective: pairs`` steps with subset_loss (the tests above) on the coordinates of the same noise; the
    default ``joint`` with joint_loss."""
    g = torch.Generator().manual_seed(5)
    hs = [torch.randn(8, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    negs = [torch.randn(8, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    loss = LOSSES.build({"name": "infonce", "similarity": "l2", "tau": 1.0, "negatives": "independent",
                         "reduction": "logmeanexp"}, key="loss", dim=5).double()
    for objective, function in (("pairs", subset_loss), ("joint", joint_loss), (None, joint_loss)):
        views = partial(views={"name": "subsets", "latents": PAPER_VIEWS, "contrast": "all", "selection": "gumbel",
                               **({"objective": objective} if objective else {})}, mixing="identity").views
        selection = Selection(views, 5)
        got = selection.objective(loss, hs, negs, torch.Generator().manual_seed(6))
        noise = selection.noise(torch.Generator().manual_seed(6), hs[0])
        assert torch.equal(got, function(loss, selection.subsets, selection.coordinates(hs, noise), hs, negs))


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("negatives", ["symmetric", "independent", "first_view"])
def test_every_similarity_sees_only_the_selected_coordinates(similarity, negatives):
    """The loss on the selected coordinates zero-padded to d equals the loss built for those k coordinates."""
    g = torch.Generator().manual_seed(1)
    hs = [torch.randn(10, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    negs = [torch.randn(7, 5, generator=g, dtype=torch.float64) for _ in range(4)]
    spec = {"name": "infonce", "similarity": similarity, "tau": 0.5, "negatives": negatives}
    selection = Selection(contrasted(contrast=[[1, 2], [2, 3, 4]]), 5)
    chosen = selection.coordinates(hs)
    got = subset_loss(LOSSES.build(spec, key="loss", dim=5).double(), selection.subsets, chosen, hs, negs)
    terms = []
    for subset, cols in zip(selection.subsets, chosen):
        narrow = LOSSES.build(spec, key="loss", dim=len(cols[0])).double()
        picked = {v: (hs[v][:, c], negs[v][:, c]) for v, c in zip(subset, cols)}
        pairs = [(i, j) for i in subset for j in subset if i != j]
        terms.append(sum(narrow(picked[i][0], picked[j][0], picked[i][1]) for i, j in pairs) / len(pairs))
    torch.testing.assert_close(got, sum(terms) / len(terms), rtol=1e-12, atol=0)


def test_ground_truth_and_concat_pick_the_coordinates_of_the_code():
    views = contrasted()
    assert [s for s, _ in views.contrasted][:2] == [(0, 1), (0, 2)] and views.contrasted[-1] == ((0, 1, 2, 3), [0, 1])
    truth = Selection(views, 5)
    picked = {s: [c.tolist() for c in cols] for s, cols in zip(truth.subsets, truth.coordinates([torch.zeros(1, 5)]))}
    assert picked[(0, 1)] == [[0, 1, 2, 4], [0, 1, 2, 3]]  # z0 z1 z2 z4 in (z0..z4) and in (z0 z1 z2 z4 z5)
    assert picked[(1, 3)] == [[0, 1, 3, 4], [0, 1, 3, 4]]  # z0 z1 z4 z5
    assert picked[(0, 1, 2, 3)] == [[0, 1]] * 4
    concat = Selection(contrasted("concat"), 20)
    runs = [cols[0].tolist() for cols in concat.coordinates([torch.zeros(1, 20)])]
    assert runs == [[2 * i, 2 * i + 1] for i in range(9)] + [[18], [19]]  # np.array_split(range(20), 11)
    assert all(len(cols) == len(s) for cols, s in zip(concat.coordinates([torch.zeros(1, 20)]), concat.subsets))


def relaxed_top_k(logits, k):
    """The official topk_gumbel_softmax's indices (τ = 1, hard): k rounds of softmax over logits each round
    lowered by log(1 − the last round's weights), the k largest of their sum, ascending."""
    tiny = torch.finfo(torch.float32).tiny
    onehot, khot = torch.zeros_like(logits), torch.zeros_like(logits)
    for _ in range(k):
        logits = logits + torch.log(torch.clamp(1.0 - onehot, min=tiny))
        onehot = torch.softmax(logits, dim=-1)
        khot = khot + onehot
    return sorted(torch.topk(khot, k).indices.tolist())


def test_gumbel_picks_the_top_k_of_the_code_s_relaxed_k_hot():
    selection = Selection(contrasted("gumbel"), 5)
    g = torch.Generator().manual_seed(2)
    for _ in range(50):
        hs = [torch.randn(8, 5, generator=g) * 3 for _ in range(4)]
        noise = selection.noise(g, hs[0])
        chosen = selection.coordinates(hs, noise)
        for row, (i, v) in enumerate(selection.pairs):
            position = selection.subsets[i].index(v)
            logits = hs[v].mean(0) + noise[row]
            assert chosen[i][position].tolist() == relaxed_top_k(logits, selection.sizes[i])
    mode = selection.coordinates(hs)
    assert mode[-1][0].tolist() == sorted(torch.topk(hs[0].mean(0), 2).indices.tolist())


def test_the_solver_follows_the_views():
    assert type(build(yao_config())) is SubsetSolver
    plain = yao_config(**{"dgp.views": {"name": "subsets", "latents": PAPER_VIEWS}})
    assert type(build(plain)) is ViewSolver


def test_gumbel_draws_come_from_the_seed():
    def losses(seed):
        c = build(yao_config(**{"dgp.views.selection": "gumbel", "seed": seed, "dgp.seed": 0}))
        return [float(c.step()) for _ in range(3)], c.selections.get_state()

    a, b, other = losses(0), losses(0), losses(1)
    assert a[0] == b[0] and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], other[1])


@pytest.mark.integration
@pytest.mark.parametrize("selection, width", [("gumbel", 5), ("concat", 12)])
def test_runs_resume_exactly(tmp_path, selection, width):
    extra = {"dgp.views.selection": selection, "encoder.output_dim": width}
    full = Trainer.create(yao_config(**extra, **{"train.steps": 20}), tmp_path / "full", progress=False).run()
    Trainer.create(yao_config(**extra, **{"train.steps": 10}), tmp_path / "half", progress=False).run()
    resumed = Trainer.resume(tmp_path / "half", {"train.steps": 20}, progress=False).run()
    assert resumed["r2_linear"] == full["r2_linear"]
    a = rundir.load_torch(tmp_path / "full" / rundir.CHECKPOINT)
    b = rundir.load_torch(tmp_path / "half" / rundir.CHECKPOINT)
    assert all(torch.equal(a["encoder"][k], b["encoder"][k]) for k in a["encoder"])
    assert torch.equal(a["rng"]["selection"], b["rng"]["selection"])
    assert [r["loss"] for r in rundir.read_metrics(tmp_path / "full")] == \
        [r["loss"] for r in rundir.read_metrics(tmp_path / "half")]


@pytest.mark.parametrize("extra, message", [
    ({"encoder.output_dim": 4}, "encoder.output_dim=4 is invalid: ground_truth selection of 11 contrasted subsets "
     "(dgp.views.contrast) needs encodings of at least 5 coordinates"),
    ({"dgp.views.selection": "concat"}, "encoder.output_dim=5 is invalid: concat selection of 11"),
    ({"loss": {"name": "nwj", "similarity": "l2", "negatives": "independent"}},
     "loss.name='nwj' is invalid: the objective over contrasted subsets"),
    ({"dgp.views.objective": "both"}, "dgp.views.objective='both' is invalid: allowed: 'joint', 'pairs'"),
    ({"dgp.views": {"name": "subsets", "latents": PAPER_VIEWS, "objective": "pairs"}},
     "dgp.views.objective='pairs' is invalid: contrasts the views of contrasted subsets: set contrast too"),
    ({"loss.negatives": "symmetric", "dgp.negatives.name": "none"}, "loss.negatives='symmetric' is invalid: the "
     "joint objective over contrasted subsets of views (dgp.views.objective) contrasts each anchor with fresh "
     "samples seen by every view of the subset: use independent (with a dgp.negatives sampler), or "
     "dgp.views.objective: pairs"),
])
def test_bad_input_is_one_line_naming_the_key(extra, message):
    base = {k: v for k, v in YAO.items() if not ("loss" in extra and k.startswith("loss."))}
    with pytest.raises(ValueError) as error:
        build(load_config(None, {**TINY, **base, **extra}))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("extra, line", [
    ({"encoder.output_dim": 4}, "encoder.output_dim=4 is invalid: ground_truth selection of 11 contrasted subsets "
     "(dgp.views.contrast) needs encodings of at least 5 coordinates"),
    ({"dgp.views.selection": "concat", "encoder.output_dim": 10}, "encoder.output_dim=10 is invalid: concat "
     "selection of 11 contrasted subsets (dgp.views.contrast) needs encodings of at least 11 coordinates"),
    ({"loss": {"name": "nwj", "similarity": "l2", "negatives": "independent"}},
     "loss.name='nwj' is invalid: the objective over contrasted subsets of views (dgp.views.contrast) applies "
     "InfoNCE to each subset's selected coordinates: use infonce"),
    ({"loss.negatives": "first_view", "dgp.negatives.name": "none"}, "loss.negatives='first_view' is invalid: the "
     "joint objective over contrasted subsets of views (dgp.views.objective)"),
])
def test_icl_config_refuses_what_the_objective_over_subsets_cannot_run(extra, line, capsys, tmp_path, monkeypatch):
    """The refusals come from the check every planned run goes through (``icl config``, ``icl sweep check``,
    ``icl train`` before its folder), not from building the run: exit 2, one line naming the key, nothing written."""
    monkeypatch.chdir(tmp_path)
    base = {k: v for k, v in YAO.items() if not ("loss" in extra and k.startswith("loss."))}
    flat = {}
    for key, value in {**TINY, **base, **extra}.items():
        flat.update({f"{key}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {key: value})
    args = [f"--{k}={v}".replace(" ", "").replace("'", "") for k, v in flat.items()]
    assert main(["config", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (message,) = captured.err.strip().splitlines()
    assert line in message
    assert main(["train", "--out", str(tmp_path / "runs"), *args]) == 2
    assert line in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_icl_train_records_and_prints_every_shared_block_beside_the_identity_baseline(tmp_path, capsys):
    args = [f"--{k}={v}".replace(" ", "") for k, v in {**TINY, **YAO, "train.steps": 10}.items()]
    assert main(["train", "--out", str(tmp_path / "run"), *args]) == 0
    printed = capsys.readouterr().out
    (found,) = (tmp_path / "run").glob(f"*/{rundir.SUMMARY}")
    summary = json.loads(found.read_text())
    for key in ("r2_linear_shared_1_2", "r2_linear_unshared_1_2", "view4_r2_linear_shared_1_2_3_4",
                "view3_r2_linear_shared_2_3_4", "identity_r2_linear_shared_1_2", "identity_view2_r2_linear_unshared_2_3"):
        assert isinstance(summary[key], float) and -1.5 <= summary[key] <= 1.0, key
    assert summary["identity_view4_r2_linear_shared_1_2_3_4"] < 1.0  # the mixed observations' coordinates
    assert "linear R² [shared_1_2]" in printed and "R² of each block" in printed


@pytest.mark.parametrize("objective", ["joint", "pairs"])
@pytest.mark.parametrize("selection, width", [("ground_truth", 5), ("gumbel", 5), ("concat", 12), (None, 5)])
def test_a_steady_state_step_makes_no_host_synchronisation_and_no_upload(selection, width, objective, monkeypatch):
    """Each selection and objective, and the views' pair loss without contrasted subsets (None)."""
    monkeypatch.setenv("ICL_KERNELS", "eager")
    contrast = {"contrast": "all", "selection": selection, "objective": objective} if selection else {}
    views = {"name": "subsets", "latents": PAPER_VIEWS, **contrast}
    c = build(yao_config(**{"dgp.views": views, "encoder.output_dim": width}))
    for _ in range(3):
        c.step()
    assert host_syncs(c.step) == {}
    assert host_uploads(c.step) == {}
