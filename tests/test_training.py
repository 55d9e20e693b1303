import json
import math

import pytest
import torch

from identifiable_cl import rundir
from identifiable_cl.cli import main
from identifiable_cl.components import load_config
from identifiable_cl.solvers import Solver
from identifiable_cl.training import NonFiniteLoss, Trainer
from tests.tiny import TINY, tiny_config



def test_run_directory_contents(tmp_path):
    summary = Trainer.create(tiny_config(**{"train.steps": 20, "eval.nonlinear": True}), tmp_path / "run", progress=False).run()
    run = tmp_path / "run"
    for name in (rundir.CONFIG, rundir.META, rundir.DGP, rundir.CHECKPOINT, rundir.METRICS, rundir.SUMMARY, rundir.READOUT):
        assert (run / name).is_file(), name
    saved = json.loads((run / rundir.SUMMARY).read_text())
    for key in ("r2_linear", "r2_nonlinear", "mcc_pearson", "mcc_spearman", "r2_linear_per_dim", "identity_r2_linear",
                "identity_mcc_pearson", "steps", "wall_s", "steps_per_s", "seed", "dgp_fingerprint", "version"):
        assert key in saved, key
    assert saved["steps"] == 20 and saved == json.loads(json.dumps(summary))
    meta = json.loads((run / rundir.META).read_text())
    assert {"version", "git_revision", "command", "device"} <= set(meta)
    records = rundir.read_metrics(run)
    assert [r["step"] for r in records] == [10, 20] and "r2_linear" in records[-1]


def test_resume_equals_uninterrupted(tmp_path):
    """100 steps, then resume for 100 more, gives exactly the 200-step run."""
    full = Trainer.create(tiny_config(**{"train.steps": 200}), tmp_path / "full", progress=False).run()
    Trainer.create(tiny_config(**{"train.steps": 100}), tmp_path / "half", progress=False).run()
    resumed = Trainer.resume(tmp_path / "half", {"train.steps": 200}, progress=False).run()
    for key in ("r2_linear", "mcc_pearson", "mcc_spearman", "r2_linear_per_dim", "steps", "dgp_fingerprint"):
        assert resumed[key] == full[key], key
    a = rundir.load_torch(tmp_path / "full" / rundir.CHECKPOINT)
    b = rundir.load_torch(tmp_path / "half" / rundir.CHECKPOINT)
    assert all(torch.equal(a["encoder"][k], b["encoder"][k]) for k in a["encoder"])
    assert [r["step"] for r in rundir.read_metrics(tmp_path / "half")] == [r["step"] for r in rundir.read_metrics(tmp_path / "full")]


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    real = Solver.step

    def poisoned(c):
        loss = real(c)
        return loss * float("nan") if c.steps_done > 55 else loss

    monkeypatch.setattr(Solver, "step", poisoned)
    trainer = Trainer.create(tiny_config(**{"train.steps": 100}), tmp_path / "run", progress=False)
    with pytest.raises(NonFiniteLoss, match="NaN, inf or larger in magnitude than train.loss_limit"):
        trainer.run()
    state = rundir.load_torch(tmp_path / "run" / rundir.CHECKPOINT)
    assert state["step"] == 50
    assert all(torch.isfinite(v).all() for v in state["encoder"].values())
    assert not (tmp_path / "run" / rundir.SUMMARY).exists()


@pytest.mark.parametrize(
    "args, key",
    [
        (["--loss.tau=0"], "loss.tau"),
        (["--train.batchsize=3"], "train.batchsize"),
        (["--loss.similarity=cosine", "--encoder.normalize=none"], "encoder.normalize"),
        (["--loss.negatives=independent"], "dgp.negatives.name"),
        (["--train.steps=abc"], "train.steps"),
    ],
)
def test_bad_input_stops_before_anything_is_written(tmp_path, capsys, args, key):
    bounded = ["--train.steps=2", "--eval.final_n_fit=256", "--eval.final_n_test=256", "--eval.nonlinear=False"]
    code = main(["train", "--run-dir", str(tmp_path / "run"), "--quiet", *bounded, *args])
    assert code == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_resume_from_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_cli_train_and_evaluate(tmp_path, capsys):
    args = [f"--{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in TINY.items()]
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--quiet", "--train.steps=10", *args]) == 0
    out = capsys.readouterr().out
    assert "linear R²" in out and "identity" in out
    trained = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    assert main(["evaluate", str(tmp_path / "run")]) == 0
    again = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert again["r2_linear"] == pytest.approx(trained["r2_linear"], abs=1e-6)


def test_in_sample_scores_are_fitted_and_scored_on_the_same_fresh_samples(run):
    import numpy as np

    from dgp.seeding import stream_seed
    from identifiable_cl.components import load_run
    from identifiable_cl.training import evaluate_run

    summary = evaluate_run(run, {"eval.in_sample_n": 300})
    c = load_run(run)
    assert {"r2_linear_in_sample", "mcc_pearson_in_sample", "identity_r2_linear_in_sample"} <= set(summary)
    assert not any(k.endswith("_in_sample") and isinstance(v, list) for k, v in summary.items())

    def in_sample_r2(stream, encode):
        z = c.process.sample_latents(300, c.process.make_generator(stream_seed(c.config["seed"], stream)))
        with torch.no_grad():
            h = encode(c.process.mix(z)).double().numpy()
        z = z.double().numpy()
        design = np.hstack([h, np.ones((len(h), 1))])
        residual = z - design @ np.linalg.lstsq(design, z, rcond=None)[0]
        return float(np.mean(1 - (residual**2).sum(0) / ((z - z.mean(0)) ** 2).sum(0)))

    assert summary["r2_linear_in_sample"] == pytest.approx(in_sample_r2(f"eval.{c.steps_done}.in_sample", c.encoder), abs=1e-6)
    assert summary["identity_r2_linear_in_sample"] == pytest.approx(in_sample_r2("eval.identity.in_sample", lambda x: x), abs=1e-6)
    assert "r2_linear_in_sample" not in evaluate_run(run)


def test_periodic_and_final_evaluations_use_their_own_centres(tmp_path, evaluation_calls):
    seen = evaluation_calls("n_fit", "n_centres")
    config = tiny_config(**{"train.steps": 100, "eval.nonlinear": True, "eval.n_centres": 30, "eval.final_n_centres": 60})
    summary = Trainer.create(config, tmp_path / "run", progress=False).run()
    assert ("evaluate", 64, 30) in seen and seen.count(("evaluate", 128, 60)) == 1
    assert ("identity_baseline", 128, 60) in seen
    assert "r2_nonlinear" in summary


def test_runs_of_one_process_and_evaluation_measure_the_identity_baseline_once(tmp_path, tiny, monkeypatch):
    from identifiable_cl import protocol

    calls = []
    measure = protocol.measure_identity
    monkeypatch.setattr(protocol, "measure_identity", lambda c: calls.append(c.config["seed"]) or measure(c))
    monkeypatch.setenv(rundir.IDENTITY_CACHE, str(tmp_path / "shared"))

    def train(name, **overrides):  # each run its own pack, as if it were its own process
        summary = Trainer.create(load_config(None, {**tiny, **overrides}), tmp_path / name, progress=False).run()
        return {k: v for k, v in summary.items() if k.startswith("identity_")}

    first = train("a", seed=2)
    assert train("b", seed=2, **{"loss.tau": 0.3}) == first  # same process and evaluation: read, not measured
    assert train("c", seed=3) != first
    assert calls == [2, 3] and len(list((tmp_path / "shared").iterdir())) == 2
    (damaged,) = [p for p in (tmp_path / "shared").iterdir() if json.loads(p.read_text()) == first]
    damaged.write_text("{")
    assert train("d", seed=2) == first and calls == [2, 3, 2]
    monkeypatch.delenv(rundir.IDENTITY_CACHE)
    assert train("e", seed=2) == first and calls == [2, 3, 2, 2]  # measured alone, the same numbers


def test_train_figures_false_draws_none(tmp_path, tiny):
    pytest.importorskip("matplotlib")
    drawn = Trainer.create(load_config(None, {**tiny, "train.figures": True}), tmp_path / "drawn", progress=False)
    drawn.run()
    bare = Trainer.create(load_config(None, {**tiny, "train.figures": False}), tmp_path / "bare", progress=False)
    bare.run()
    assert list((tmp_path / "drawn").rglob("*.png")) and not list((tmp_path / "bare").rglob("*.png"))
    assert (tmp_path / "bare" / rundir.SUMMARY).is_file()


def test_threads_follow_the_cpus_a_run_was_given(tmp_path, monkeypatch, capsys):
    from identifiable_cl import components, devices

    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(devices, "CGROUP_CPU_MAX", tmp_path / "none")
    assert devices.available_cpus({}) == 6
    assert devices.available_cpus({"SLURM_CPUS_PER_TASK": "2"}) == 2
    assert devices.available_cpus({"SLURM_CPUS_PER_TASK": "64"}) == 6
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    monkeypatch.setattr(devices, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    assert devices.available_cpus({}) == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert devices.available_cpus({}) == 6
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
        devices.use_threads()
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        devices.use_threads()  # the user's choice stands
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
        components.build(load_config(None, {"train.threads": 2}))  # a run's own key wins
        assert torch.get_num_threads() == 2 and capsys.readouterr().err == ""
        components.build(load_config(None, {"train.threads": 10000}))  # within the CPUs this process may use
        assert torch.get_num_threads() == 4
        assert capsys.readouterr().err == ("train.threads=10000 is more than the 4 CPUs this process may use (its "
                                           "affinity, cgroup quota, SLURM_CPUS_PER_TASK); using 4\n")
    finally:
        torch.set_num_threads(before)


def test_a_training_batch_is_drawn_on_one_thread_with_the_same_draws(tiny):
    from identifiable_cl.components import build

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        c, plain = build(load_config(None, tiny)), build(load_config(None, tiny))
        seen = []
        sample = c.process.sample
        c.process.sample = lambda *a: seen.append(torch.get_num_threads()) or sample(*a)
        ours, theirs = c.batch(), plain.process.sample(tiny["train.batch_size"], plain.batches)
        assert seen == [1] and torch.get_num_threads() == 2
        for name in ("z", "x", "z_pos", "x_pos"):
            assert torch.equal(getattr(ours, name), getattr(theirs, name))
    finally:
        torch.set_num_threads(before)


def test_dgp_seed_fixes_the_process_while_the_training_seed_varies(tiny):
    from identifiable_cl.components import build

    fixed = [build(load_config(None, {**tiny, "seed": s, "dgp.seed": 7})) for s in (1, 2)]
    own = build(load_config(None, {**tiny, "seed": 7}))
    assert fixed[0].process.fingerprint() == fixed[1].process.fingerprint() == own.process.fingerprint()
    assert not torch.equal(fixed[0].encoder.state_dict()["net.0.weight"], fixed[1].encoder.state_dict()["net.0.weight"])
    assert build(load_config(None, {**tiny, "seed": 1})).process.fingerprint() != own.process.fingerprint()


def test_a_run_reports_the_information_it_bounds(tmp_path, tiny):
    summary = Trainer.create(load_config(None, tiny), tmp_path / "with", progress=False).run()
    assert summary["log_k"] == pytest.approx(math.log(2 * tiny["train.batch_size"] - 1))
    assert summary["mi_true"] == pytest.approx(8.401254829, abs=1e-6)  # 10 × 0.840125: box, Laplace(0.1)
    assert summary["mi_infonce_bound"] < summary["log_k"] and summary["mi_true_critic_bound"] < summary["log_k"]
    assert summary["mi_loo_upper"] > summary["mi_true_critic_bound"]
    records = [r for r in rundir.read_metrics(tmp_path / "with") if "mi_infonce_bound" in r]
    assert [r["step"] for r in records] == [10, 20] and len({r["mi_true_critic_bound"] for r in records}) == 1
    off = Trainer.create(load_config(None, {**tiny, "eval.mi": False}), tmp_path / "without", progress=False).run()
    assert not any(k.startswith("mi_") or k == "log_k" for k in off)
    for key in ("r2_linear", "r2_orthogonal", "mcc_pearson", "identity_r2_linear"):
        assert off[key] == summary[key]  # measuring it changes nothing else


@pytest.mark.parametrize("beta, bounded", [(0.0, True), (2.0, False)])
def test_only_negatives_drawn_from_the_marginal_give_a_bound(tmp_path, tiny, beta, bounded):
    config = load_config(None, {**tiny, "train.steps": 10, "dgp.negatives.name": "tilted", "dgp.negatives.beta": beta,
                                "loss.negatives": "independent"})
    trainer = Trainer.create(config, tmp_path / "run", progress=False)
    summary = trainer.run()
    assert ("mi_infonce_bound" in summary) == bounded
    if bounded:  # K = an anchor's separate negatives + its positive
        negatives = trainer.c.process.sample(4, trainer.c.process.make_generator(0)).z_neg.shape[-2]
        assert summary["log_k"] == pytest.approx(math.log(negatives + 1))


def test_rows_a_block_sampler_left_short_are_logged(tmp_path, monkeypatch, tiny):
    import dgp

    monkeypatch.setattr(dgp.Process, "shortfalls", lambda self: 2)
    Trainer.create(load_config(None, tiny), tmp_path / "run", progress=False).run()
    assert [r["sampler_shortfalls"] for r in rundir.read_metrics(tmp_path / "run")] == [2, 2]


def test_a_run_without_shortfalls_logs_none(run):
    assert not any("sampler_shortfalls" in r for r in rundir.read_metrics(run))


def test_a_divergence_names_the_loss_options_in_play(tmp_path, monkeypatch, tiny):
    real = Solver.step
    monkeypatch.setattr(Solver, "step", lambda c: real(c) * float("nan"))
    with pytest.raises(NonFiniteLoss, match=r"try a lower optim.lr or optim.grad_clip, or other loss options than "
                                            r"loss.tau=0.3\)"):
        Trainer.create(load_config(None, {**tiny, "loss.tau": 0.3}), tmp_path / "run", progress=False).run()


def test_the_bound_on_mutual_information_is_named_for_what_it_holds(tmp_path, tiny):
    nwj = Trainer.create(load_config(None, {**tiny, "loss.name": "nwj"}), tmp_path / "nwj", progress=False).run()
    infonce = Trainer.create(load_config(None, tiny), tmp_path / "infonce", progress=False).run()
    assert "mi_nwj_bound" in nwj and "mi_infonce_bound" not in nwj
    assert "mi_infonce_bound" in infonce and "mi_nwj_bound" not in infonce
    assert math.isfinite(nwj["mi_nwj_bound"]) and nwj["mi_nwj_bound"] != infonce["mi_infonce_bound"]


def test_tf32_runs_the_whole_step_with_cuda_tensor_float32_products_and_a_cpu_step_as_fp32():
    """train.precision: tf32 turns CUDA's TensorFloat-32 products on for the step's forward and backward passes
    and restores the flags after; a CPU computes float32 either way, so the run equals its fp32 twin."""
    from identifiable_cl.components import build

    seen = []
    runs = {}
    for precision in ("fp32", "tf32"):
        c = build(tiny_config(**{"train.precision": precision, "seed": 3}))
        c.encoder.register_forward_hook(lambda *_: seen.append(torch.backends.cuda.matmul.allow_tf32))
        c.encoder.register_full_backward_hook(lambda *_: seen.append(torch.backends.cudnn.allow_tf32 and
                                                                     torch.backends.cuda.matmul.allow_tf32))
        runs[precision] = [c.step().item() for _ in range(3)]
        assert (precision == "tf32") == all(seen) and (precision == "fp32") == (not any(seen))
        seen.clear()
    assert not torch.backends.cuda.matmul.allow_tf32
    assert runs["tf32"] == runs["fp32"]
