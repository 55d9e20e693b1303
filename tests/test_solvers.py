"""The training step as an object: the variant a config chooses, and the plain step against one written out here."""

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
