"""The training step as an object: the variant a config chooses, and the plain step against one written out here."""

import pytest
import torch

from identifiable_cl.components import build
from identifiable_cl.solvers import QueueSolver, Solver, ViewSolver
from tests.test_view_runs import views_config
from tests.tiny import tiny_config


def test_the_config_chooses_the_step():
    assert type(build(tiny_config())) is Solver
    assert type(build(tiny_config(**{"loss.negatives": "queue", "loss.queue.size": 64}))) is QueueSolver
    assert type(build(views_config())) is ViewSolver


def test_the_plain_step_is_a_batch_an_encoder_pass_the_loss_and_adam():
    config = tiny_config(**{"optim.grad_clip": 0.5})
    solver, plain = build(config), build(config)
    for _ in range(3):
        batch = plain.process.sample(config["train"]["batch_size"], plain.batches)
        size = batch.x.shape[0]
        h = plain.encoder(torch.cat([batch.x, batch.x_pos]))
        want = plain.loss(h[:size], h[size:], None)
        plain.optimizer.zero_grad()
        want.backward()
        torch.nn.utils.clip_grad_norm_(list(plain.encoder.parameters()) + list(plain.loss.parameters()), 0.5)
        plain.optimizer.step()
        assert torch.equal(solver.step(), want.detach())
    assert solver.steps_done == 3
    for mine, theirs in zip(solver.encoder.parameters(), plain.encoder.parameters()):
        assert torch.equal(mine, theirs)


def test_a_solver_loaded_from_its_state_takes_the_same_next_step():
    config = tiny_config()
    solver, again = build(config), build(config)
    for _ in range(4):
        solver.step()
    again.load_state_dict(solver.state_dict())
    assert again.steps_done == 4 and torch.equal(again.step(), solver.step())


def test_the_loss_takes_blocks_within_its_memory_budget_and_the_same_step(monkeypatch):
    from identifiable_cl.losses import blocked

    sizes = []
    real = blocked.block_rows
    monkeypatch.setattr(blocked, "block_rows", lambda *a, **k: sizes.append(real(*a, **k)) or sizes[-1])
    config = {"train.batch_size": 512, "dgp.dtype": "float64"}
    whole, small = build(tiny_config(**config)), build(tiny_config(**config, **{"train.loss_memory": 1}))
    sizes.clear()
    torch.testing.assert_close(small.step(), whole.step(), rtol=1e-12, atol=0)
    assert sizes == [(1 << 20) // (1024 * 3 * 8), 1024]  # 2B rows against 2B candidates, 3 buffers of float64
    for mine, theirs in zip(small.encoder.parameters(), whole.encoder.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-9)  # Adam scales g by 1/|g| on its first step


LEARNT = {
    "learnt τ": [{"loss.learn_tau": True, "loss.tau": 0.5}, {"loss.learn_tau": True},
                 {"loss.learn_tau": True, "loss.tau": 2.0, "loss.lr": 2e-2}],
    "AnInfoNCE's Λ̂": [{"loss.name": "aninfonce"}, {"loss.name": "aninfonce"}, {"loss.name": "aninfonce", "loss.lr": 2e-2}],
}
"""Losses that learn parameters, per run of :func:`stacked_configs`."""


def stacked_configs(loss):
    """Three float64 runs that differ in seed, learning rates, weight decay, clipping and ``loss``'s options."""
    varied = [{"optim.lr": 1e-3, "optim.grad_clip": 0.3}, {"optim.weight_decay": 0.01, "optim.loss_lr": 3e-3},
              {"optim.grad_clip": 5.0}]
    return [tiny_config(**{"dgp.dtype": "float64", "seed": seed, **v, **own})
            for seed, (v, own) in enumerate(zip(varied, LEARNT[loss]))]


def assert_same_state(got, want):
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)  # rounding, through Adam's g / sqrt(v)
        assert got.untyped_storage().nbytes() == got.numel() * got.element_size()  # no stacked storage carried
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_same_state(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want) and all(assert_same_state(g, w) is None for g, w in zip(got, want))
    else:
        assert got == want


@pytest.mark.parametrize("loss, capture", [(loss, "eager") for loss in LEARNT] + [("learnt τ", "graph")])
def test_runs_stacked_along_a_run_axis_follow_their_own_trajectories(loss, capture):
    from identifiable_cl.solvers.packed import StackedPack

    configs = stacked_configs(loss)
    for config in configs:
        config["train"]["capture"] = capture  # recorded on CUDA only: the same steps here
    alone, packed = [build(c) for c in configs], [build(c) for c in configs]
    for c in alone:
        c.step()  # one step before the pack: the Adam state it starts from is each run's own
    for c in packed:
        c.step()
    pack = StackedPack(packed)
    for _ in range(6):
        want = [c.step() for c in alone]
        for got, w in zip(pack.step(), want):
            torch.testing.assert_close(got, w, rtol=1e-10, atol=0)
    for mine, theirs in zip(packed, alone):
        assert mine.steps_done == theirs.steps_done == 7
        assert_same_state({k: v for k, v in mine.state_dict().items() if k != "rng"},
                          {k: v for k, v in theirs.state_dict().items() if k != "rng"})
    pack.release()
    for mine, theirs in zip(packed, alone):  # released, each run goes on alone
        torch.testing.assert_close(mine.step(), theirs.step(), rtol=1e-10, atol=0)


def test_a_stacked_pack_step_makes_no_host_synchronisation(monkeypatch):
    from identifiable_cl.benchmarks.syncs import host_syncs
    from identifiable_cl.solvers.packed import StackedPack

    monkeypatch.setenv("ICL_KERNELS", "eager")
    pack = StackedPack([build(c) for c in stacked_configs("learnt τ")])
    assert not pack.graph.recording  # train.capture: eager
    for _ in range(2):
        pack.step()
    assert host_syncs(pack.step) == {}


def test_a_captured_solver_on_a_cpu_takes_the_eager_steps():
    from identifiable_cl.solvers import CapturedSolver

    captured, eager = build(tiny_config(**{"train.capture": "graph"})), build(tiny_config())
    assert type(captured) is CapturedSolver and not captured.graph.recording
    for _ in range(5):
        assert torch.equal(captured.step(), eager.step())
    assert captured.steps_done == 5
    for mine, theirs in zip(captured.encoder.parameters(), eager.encoder.parameters()):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("overrides, why", [
    ({"loss.negatives": "queue", "loss.queue.size": 64}, "MoCo's queue keeps its counters on the host"),
    (None, "views take a pass each")])
def test_steps_with_host_state_are_not_captured(overrides, why):
    from identifiable_cl.components import check

    config = views_config() if overrides is None else tiny_config(**overrides)
    config["train"]["capture"] = "graph"
    with pytest.raises(ValueError, match=f"train.capture=.graph.*{why}"):
        check(config)


def test_a_stacked_pack_mixes_its_runs_in_one_pass_and_draws_what_each_run_draws_alone():
    from identifiable_cl.solvers.packed import StackedPack

    configs = [tiny_config(**{"dgp.dtype": "float64", "seed": seed}) for seed in (0, 1, 2)]
    alone, pack = [build(c) for c in configs], StackedPack([build(c) for c in configs])
    assert pack.mixings is not None
    for _ in range(2):
        for got, want in zip(pack.batches(), [c.batch() for c in alone]):
            assert torch.equal(got.z, want.z) and torch.equal(got.z_pos, want.z_pos)
            torch.testing.assert_close(got.x, want.x, rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(got.x_pos, want.x_pos, rtol=1e-12, atol=1e-14)
    other = tiny_config(**{"dgp.dtype": "float64", "seed": 3, "dgp.mixing.slope": 0.3})
    assert StackedPack([build(configs[0]), build(other)]).mixings is None  # two networks: each run mixes its own
