"""Packed runs follow their stand-alone trajectories and write the run directories they would write alone."""

import json

import pytest
import torch

from identifiable_cl import rundir
from identifiable_cl.cli import main
from identifiable_cl.solvers.packed import check_packable, pack_key
from identifiable_cl.components import build
from identifiable_cl.training import Interrupted, NonFiniteLoss, Trainer, run_packed
from tests.tiny import TINY, tiny_config

@pytest.fixture(autouse=True)
def _no_figures(monkeypatch):
    """Figures are tested in test_plots; drawing them would take most of these tests' time."""
    import identifiable_cl.training as training

    monkeypatch.setattr(training, "draw_figures_if_possible", lambda run_dir: {})


F64 = {"dgp.dtype": "float64", "train.steps": 40, "train.log_every": 1, "train.eval_every": 20, "train.checkpoint_every": 20}


def configs(extra, seeds=(0, 1, 2, 3)):
    varied = [{"optim.lr": 1e-3}, {"loss.tau": 0.2}, {"dgp.conditional.scale": 0.05}, {}]
    return [tiny_config(**{**F64, **extra, "seed": s, **varied[i % 4]}) for i, s in enumerate(seeds)]


def losses(run_dir):
    return [r["loss"] for r in rundir.read_metrics(run_dir)]


@pytest.mark.parametrize("extra", [{}, {"loss.similarity": "l2", "loss.negatives": "r24"}])
def test_four_packed_runs_equal_four_separate_runs_in_float64(tmp_path, extra):
    cfgs = configs(extra)
    alone = [Trainer.create(c, tmp_path / f"alone{i}", progress=False).run() for i, c in enumerate(cfgs)]
    packed = run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)],
                        batched=True)
    for i, (a, p) in enumerate(zip(alone, packed)):
        want, got = losses(tmp_path / f"alone{i}"), losses(tmp_path / f"packed{i}")
        assert len(got) == len(want) == 40
        assert got == pytest.approx(want, rel=1e-6)
        for key in ("r2_linear", "mcc_pearson", "mcc_spearman"):
            assert p[key] == pytest.approx(a[key], rel=1e-6), key
        assert p["dgp_fingerprint"] == a["dgp_fingerprint"] and p["seed"] == a["seed"]
        names = sorted(f.name for f in (tmp_path / f"packed{i}").iterdir())
        assert names == sorted(f.name for f in (tmp_path / f"alone{i}").iterdir())
    assert len({round(x, 6) for x in (losses(tmp_path / f"packed{i}")[-1] for i in range(4))}) == 4


def test_float32_first_steps_agree(tmp_path):
    cfgs = [tiny_config(**{"train.steps": 20, "train.log_every": 1, "optim.lr": 1e-4, "seed": s}) for s in (0, 1)]
    for i, c in enumerate(cfgs):
        Trainer.create(c, tmp_path / f"alone{i}", progress=False).run()
    run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)], batched=True)
    for i in range(2):
        assert losses(tmp_path / f"packed{i}") == pytest.approx(losses(tmp_path / f"alone{i}"), rel=1e-4)


def test_on_a_cpu_packed_runs_step_in_turn_exactly_as_alone(tmp_path):
    cfgs = [tiny_config(**{"train.steps": 30, "train.log_every": 1, "optim.lr": 1e-3, "seed": s}) for s in (0, 1, 2)]
    alone = [Trainer.create(c, tmp_path / f"alone{i}", progress=False).run() for i, c in enumerate(cfgs)]
    packed = run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)])
    for i, (a, p) in enumerate(zip(alone, packed)):
        assert losses(tmp_path / f"packed{i}") == losses(tmp_path / f"alone{i}")  # float32, bit for bit
        assert p["r2_linear"] == a["r2_linear"] and p["mcc_pearson"] == a["mcc_pearson"]


def test_packed_run_resumes_alone(tmp_path):
    cfgs = configs({}, seeds=(5, 6))
    full = Trainer.create(cfgs[0], tmp_path / "full", progress=False).run()
    half = [tiny_config(**{**F64, "seed": s, "train.steps": 20, **v}) for s, v in ((5, {"optim.lr": 1e-3}), (6, {"loss.tau": 0.2}))]
    run_packed([Trainer.create(c, tmp_path / f"half{i}", progress=False) for i, c in enumerate(half)])
    resumed = Trainer.resume(tmp_path / "half0", {"train.steps": 40}, progress=False).run()
    assert resumed["r2_linear"] == pytest.approx(full["r2_linear"], rel=1e-6)


def test_incompatible_runs_are_refused():
    a, b = tiny_config(), tiny_config(**{"train.batch_size": 48, "seed": 1})
    assert pack_key(a) != pack_key(b)
    with pytest.raises(ValueError, match="cannot be packed together.*seed 0 and seed 1"):
        check_packable([build(a), build(b)])


def test_a_failing_run_leaves_the_pack(tmp_path):
    good = tiny_config(**{"train.steps": 20, "seed": 0})
    bad = tiny_config(**{"train.steps": 20, "seed": 1, "optim.lr": 1e30})
    results = run_packed([Trainer.create(c, tmp_path / f"r{i}", progress=False) for i, c in enumerate((good, bad))])
    assert isinstance(results[1], NonFiniteLoss) and isinstance(results[0], dict)
    assert (tmp_path / "r0" / rundir.SUMMARY).exists() and not (tmp_path / "r1" / rundir.SUMMARY).exists()


def test_an_interrupted_pack_says_what_each_run_kept(tmp_path, interrupt_at):
    interrupt_at(12)
    cfgs = [tiny_config(**{"train.steps": 20, "train.checkpoint_every": 10, "seed": s}) for s in (0, 1)]
    with pytest.raises(Interrupted) as caught:
        run_packed([Trainer.create(c, tmp_path / f"r{i}", progress=False) for i, c in enumerate(cfgs)])
    # the first run is stopped before its step 13, the second has not taken it either
    assert str(caught.value) == "; ".join(
        f"interrupted at step 12 of 20; the checkpoint of step 10 is kept in {tmp_path / f'r{i}'}; "
        f"continue with: icl train --resume {tmp_path / f'r{i}'}" for i in range(2))
    interrupt_at(None)
    resumed = Trainer.resume(tmp_path / "r1", progress=False).run()
    alone = Trainer.create(cfgs[1], tmp_path / "alone", progress=False).run()
    assert resumed["r2_linear"] == alone["r2_linear"]


def test_cli_pack_seeds(tmp_path, capsys):
    overrides = [f"--{k}={v}" for k, v in {**TINY, "train.steps": 10}.items()]
    assert main(["train", "--pack-seeds", "3-4", "--out", str(tmp_path), "--quiet", *overrides]) == 0
    dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert [json.loads((d / rundir.SUMMARY).read_text())["seed"] for d in dirs] == [3, 4]
    out = capsys.readouterr().out
    assert out.count("linear R²") == 2
    assert main(["train", "--pack-seeds", "x", "--out", str(tmp_path)]) == 2
    assert "--pack-seeds" in capsys.readouterr().err


def test_each_packed_run_has_its_own_wandb_run(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfgs = [tiny_config(**{"train.steps": 10, "seed": s}) for s in (0, 1)]
    results = run_packed([Trainer.create(c, tmp_path / f"r{i}", progress=False) for i, c in enumerate(cfgs)])
    wandb.teardown()  # the next test's W&B settings are read afresh
    assert all(isinstance(r, dict) for r in results)
    for i in range(2):
        assert len(list((tmp_path / f"r{i}" / "wandb").glob("offline-run-*"))) == 1
        assert (tmp_path / f"r{i}" / rundir.SUMMARY).exists()


@pytest.mark.integration
def test_sweep_runs_in_packs_with_a_status_each(tmp_path):
    import yaml

    from identifiable_cl.sweeps.local import PACK, STATUS, train_position
    from identifiable_cl.sweeps.search import run_sweep
    from identifiable_cl.sweeps.spec import load_sweep

    params = {k: {"value": v} for k, v in {**TINY, "train.steps": 10}.items()}
    sweep = {
        "name": "packed", "method": "grid", "metric": {"name": "r2_linear", "goal": "maximize"},
        "command": ["${env}", "icl", "train", "${args}"],
        "parameters": {**params, "seed": {"values": [0, 1]}, "optim.lr": {"values": [1e-3, 1e30]}},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    outcomes = run_sweep(load_sweep(path), tmp_path / "out", pack=3, echo=lambda line: None)
    by_lr = {}
    for o in outcomes:
        by_lr.setdefault(o.run.params["optim.lr"], []).append(o.state)
    assert by_lr == {1e-3: ["finished"] * 2, 1e30: ["failed"] * 2}
    folders = [o.run.folder for o in outcomes]
    statuses = [json.loads((f / STATUS).read_text()) for f in folders]
    assert [len(s.get("packed_with", [])) for s in statuses] == [3, 3, 3, 0]  # plan order; a pack of one runs alone
    assert [(f / PACK).exists() for f in folders] == [True, False, False, False]
    assert len({s["run_id"] for s in statuses}) == 4 and statuses[2]["exit_code"] == 1
    assert all((f / "run" / "config.yaml").exists() for f in folders)
    with pytest.raises(ValueError, match="must run `icl train"):
        train_position(["python", "other.py", "train", "--x=1"])
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**sweep, "name": "other", "command": ["python", "other.py", "train", "${args}"]}))
    with pytest.raises(ValueError, match="must run `icl train"):
        run_sweep(load_sweep(other), tmp_path / "other", pack=2, echo=lambda line: None)
    assert not (tmp_path / "other").exists()
    rerun = run_sweep(load_sweep(path), tmp_path / "out", pack=3, echo=lambda line: None)
    assert [o.state for o in rerun].count("skipped") == 2


def test_a_pack_whose_runs_end_apart_follows_each_run_alone_to_its_last_step(tmp_path, monkeypatch):
    """Runs of 10, 20 and 40 steps in one pack, batched while two or more run (as on a GPU) and the last left
    alone: each run's losses, Adam step count and weights are its stand-alone run's (float64)."""
    import identifiable_cl.solvers.packed as packed

    monkeypatch.setattr(packed, "batched_by_default", lambda cs: len(cs) > 1)
    cfgs = [{**c, "train": {**c["train"], "steps": steps, "checkpoint_every": steps}}
            for c, steps in zip(configs({}, seeds=(0, 1, 2)), (10, 20, 40))]
    for i, c in enumerate(cfgs):
        Trainer.create(c, tmp_path / f"alone{i}", progress=False).run()
    run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)])
    for i, steps in enumerate((10, 20, 40)):
        assert losses(tmp_path / f"packed{i}") == pytest.approx(losses(tmp_path / f"alone{i}"), rel=1e-6)
        want = rundir.load_torch(tmp_path / f"alone{i}" / rundir.CHECKPOINT)
        got = rundir.load_torch(tmp_path / f"packed{i}" / rundir.CHECKPOINT)
        counts = {float(s["step"]) for s in got["optimizer"]["state"].values()}
        assert counts == {float(s["step"]) for s in want["optimizer"]["state"].values()} == {float(steps)}
        for name, weight in want["encoder"].items():
            assert torch.allclose(got["encoder"][name], weight, rtol=1e-6, atol=1e-9), name


@pytest.mark.parametrize("kernels,loss", [
    ("fused", {"loss.name": "aninfonce", "loss.negatives": "r24"}),
    pytest.param("auto", {"loss.name": "aninfonce", "loss.negatives": "r24"}, marks=pytest.mark.integration),
    pytest.param("fused", {"loss.learn_tau": True, "loss.similarity": "l1"}, marks=pytest.mark.integration),
    pytest.param("auto", {"loss.learn_tau": True, "loss.similarity": "l1"}, marks=pytest.mark.integration)])
def test_runs_whose_losses_are_alike_compute_them_in_one_call(tmp_path, kernels, loss):
    """Runs that differ in seed and learning rate only: their losses (learnt Λ̂ or τ stacked) are one vmap call,
    and with the fused operations each pairing one call for all runs; every run follows its stand-alone run
    (float64)."""
    from identifiable_cl.losses.blocked import use_kernels
    from identifiable_cl.solvers.packed import StackedPack

    cfgs = [tiny_config(**{**F64, **loss, "train.steps": 20, "seed": s, "optim.lr": lr})
            for s, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-3))]
    for i, c in enumerate(cfgs):
        Trainer.create(c, tmp_path / f"alone{i}", progress=False).run()
    calls = []
    original = StackedPack._work

    def recorded(self):
        calls.append(self.loss_axis)
        return original(self)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(StackedPack, "_work", recorded)
    try:
        with use_kernels(kernels):
            run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)],
                       batched=True)
    finally:
        monkeypatch.undo()
    assert calls and all(calls)
    for i in range(3):
        assert losses(tmp_path / f"packed{i}") == pytest.approx(losses(tmp_path / f"alone{i}"), rel=1e-6)
        want = rundir.load_torch(tmp_path / f"alone{i}" / rundir.CHECKPOINT)["loss"]
        got = rundir.load_torch(tmp_path / f"packed{i}" / rundir.CHECKPOINT)["loss"]
        for name, value in want.items():
            assert torch.allclose(got[name], value, rtol=1e-6, atol=1e-9), name


def test_a_pack_of_runs_alike_launches_its_loss_kernels_once_for_all_runs():
    """Counted as on CUDA (fused operations): 4 runs of R24's loss launch as many pair_lse kernels as one run, and
    the encoder, losses and glue about as many launches (each run still draws its own batch)."""
    from identifiable_cl.benchmarks.step_cost import pack_cost

    def cfgs(runs):
        return [tiny_config(**{"loss.name": "aninfonce", "loss.negatives": "r24", "seed": s}) for s in range(runs)]

    one, four = pack_cost([build(c) for c in cfgs(1)]), pack_cost([build(c) for c in cfgs(4)])
    assert one["calls"]["icl.pair_lse"] == four["calls"]["icl.pair_lse"] == 3  # r24: three pairings
    assert four["model"].launches < 1.1 * one["model"].launches
    assert four["sampling"].launches > 3 * one["sampling"].launches
