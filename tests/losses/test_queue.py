"""MoCo's queue: InfoNCE over the batch's keys and the queued ones against a plain loop, the queue's FIFO and
momentum rule against hand-written ones, and a trained run's queue checkpointed, resumed and packed exactly."""

from __future__ import annotations

import math
from collections import deque

import pytest
import torch
from torch import nn

from identifiable_cl.components import build
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.base import REDUCTIONS
from identifiable_cl.losses.infonce import InfoNCE
from identifiable_cl.losses.queue import KeyQueue, QueueOptions
from identifiable_cl.solvers.packed import StackedPack
from identifiable_cl.evaluation.information import information_metrics
from identifiable_cl.training import Trainer, run_packed
from tests.tiny import tiny_config

QUEUED = {"loss.negatives": "queue", "loss.queue.size": 48, "loss.queue.momentum": 0.9, "train.batch_size": 16}


def plain_similarity(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "cosine":
        return torch.dot(a, b) / (a.norm() * b.norm())
    if kind == "dot":
        return torch.dot(a, b)
    return -((a - b).abs() ** int(kind[1])).sum()


def plain_queue_loss(h, keys, queued, kind, tau, reduction):
    """Mean over anchors i of -l(h_i, k_i) + log of the sum (or mean) of exp l over k_i, the other keys k_j and the
    queued keys (the positive left out for a decoupled reduction), one anchor at a time."""
    rows = []
    for i in range(h.shape[0]):
        pos = plain_similarity(h[i], keys[i], kind) / tau
        negatives = [keys[j] for j in range(h.shape[0]) if j != i] + list(queued)
        logits = [plain_similarity(h[i], k, kind) / tau for k in negatives]
        if not reduction.startswith("decoupled"):
            logits.append(pos)
        total = torch.logsumexp(torch.stack(logits), 0)
        if reduction.endswith("logmeanexp"):
            total = total - math.log(len(logits))
        rows.append(total - pos)
    return torch.stack(rows).mean()


def views(B: int, M: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, 3, generator=g, dtype=torch.float64)
    keys = h + 0.4 * torch.randn(B, 3, generator=g, dtype=torch.float64)
    return h, keys, torch.randn(M, 3, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["cosine", "dot", "l1", "l2", "l3"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("B,M", [(2, 0), (2, 5), (5, 1), (7, 9)])
def test_values_and_gradients_match_the_loop(kind, reduction, B, M):
    loss = InfoNCE(dim=3, similarity=kind, tau=0.6, negatives="queue", reduction=reduction, queue={"size": 16})
    h, keys, queued = views(B, M, seed=B * 10 + M)
    ours = [x.clone().requires_grad_() for x in (h, keys, queued)]
    theirs = [x.clone().requires_grad_() for x in (h, keys, queued)]
    got = loss(*ours)
    want = plain_queue_loss(*theirs, kind, 0.6, reduction)
    assert got.item() == pytest.approx(want.item(), rel=1e-10, abs=1e-12)
    got.backward()
    want.backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12)
    terms = loss.terms(h, keys, queued)
    assert terms.n_neg == B - 1 + M and terms.neg.shape == (B, B + M)


def test_an_empty_queue_is_the_one_sided_loss_and_none_is_empty():
    h, keys, _ = views(5, 0, seed=3)
    queued = InfoNCE(dim=3, negatives="queue", queue={})
    one_sided = InfoNCE(dim=3, negatives="one_sided")
    assert queued(h, keys, None).item() == one_sided(h, keys).item()
    assert queued(h, keys, h.new_zeros(0, 3)).item() == one_sided(h, keys).item()


def test_a_batch_of_one_is_refused_with_the_key():
    h, keys, queued = views(1, 4, seed=2)
    with pytest.raises(ValueError, match=r"loss\.negatives='queue' draws negatives from the batch and needs at least 2"):
        InfoNCE(dim=3, negatives="queue", queue={})(h, keys, queued)


def test_gradcheck_with_a_learnt_temperature():
    loss = InfoNCE(dim=3, similarity="l2", tau=0.7, learn_tau=True, negatives="queue", queue={}).double()
    inputs = [x.requires_grad_() for x in views(4, 3, seed=7)]
    assert torch.autograd.gradcheck(lambda a, b, c: loss(a, b, c), inputs)


def test_the_bound_counts_batch_and_queue():
    loss = InfoNCE(dim=3, negatives="queue", queue={"size": 100})
    assert loss.mi_bound(1.5, 16, 100) == (116, math.log(116) - 1.5)
    assert loss.mi_bound(1.5, 16, None) == (16, math.log(16) - 1.5)
    assert InfoNCE(dim=3, negatives="queue", reduction="decoupled_logsumexp", queue={}).mi_bound(1.5, 16, 4) is None


@pytest.mark.parametrize("options,key", [
    ({"negatives": "queue", "queue": {"size": 0}}, "loss.queue.size"),
    ({"negatives": "queue", "queue": {"size": 2.5}}, "loss.queue.size"),
    ({"negatives": "queue", "queue": {"momentum": 1.5}}, "loss.queue.momentum"),
    ({"negatives": "queue", "queue": {"lenght": 4}}, "loss.queue.lenght"),
    ({"negatives": "queue", "queue": [4]}, "loss.queue"),
    ({"negatives": "symmetric", "queue": {"size": 4}}, "loss.queue"),
    ({"negatives": "queue", "similarity": "cosine", "queue": {"size": True}}, "loss.queue.size"),
])
def test_invalid_queue_options_name_their_key(options, key):
    with pytest.raises(ValueError) as caught:
        LOSSES.build({"name": "infonce", **options}, key="loss", dim=3)
    assert str(caught.value).startswith(key + "=")


def test_defaults_and_ensembles():
    assert InfoNCE(dim=3, negatives="queue").queue == QueueOptions(4096, 0.999)
    member = {"name": "infonce", "negatives": "queue"}
    with pytest.raises(ValueError, match=r"^loss\.members\[0\]\.negatives='queue' is invalid"):
        LOSSES.build({"name": "ensemble", "members": [member]}, key="loss", dim=3)


def test_the_queue_is_first_in_first_out():
    encoder = nn.Linear(2, 3)
    queue = KeyQueue(encoder, QueueOptions(size=5, momentum=0.5), dim=3)
    plain: deque = deque(maxlen=5)
    assert queue.negatives().shape == (0, 3)
    for n in (2, 2, 3, 1, 7, 4):
        keys = torch.randn(n, 3)
        queue.push(keys)
        plain.extend(keys)
        got = queue.negatives()
        assert got.shape == (len(plain), 3)
        # the same keys, whatever the order they sit in
        assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, torch.stack(list(plain)).tolist()))
    newest = torch.randn(1, 3)
    oldest = plain[0]
    queue.push(newest)
    assert not any(torch.equal(row, oldest) for row in queue.negatives())


def test_a_loaded_queue_continues_where_its_state_left_off():
    encoder = nn.Linear(2, 3)
    queue = KeyQueue(encoder, QueueOptions(size=5, momentum=0.5), dim=3)
    queue.push(torch.randn(3, 3))
    queue.push(torch.randn(4, 3))  # wrapped: pointer 2, all 5 rows filled
    resumed = KeyQueue(encoder, QueueOptions(size=5, momentum=0.5), dim=3)
    assert resumed.negatives().shape == (0, 3)
    resumed.load_state_dict(queue.state_dict())
    assert torch.equal(resumed.negatives(), queue.negatives())
    keys = torch.randn(2, 3)
    queue.push(keys)
    resumed.push(keys)
    assert torch.equal(resumed.negatives(), queue.negatives())
    assert (int(resumed.filled), int(resumed.pointer)) == (5, 4)


@pytest.mark.parametrize("m", [0.0, 0.9, 1.0])
def test_the_momentum_encoder_follows_the_encoder(m):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 3))
    queue = KeyQueue(encoder, QueueOptions(size=4, momentum=m), dim=3)
    assert all(not p.requires_grad for p in queue.encoder.parameters())
    start = [p.detach().clone() for p in queue.encoder.parameters()]
    with torch.no_grad():
        for p in encoder.parameters():
            p.add_(torch.randn_like(p))
    queue.follow(encoder)
    for before, now, target in zip(start, queue.encoder.parameters(), encoder.parameters()):
        torch.testing.assert_close(now, m * before + (1 - m) * target, rtol=0, atol=1e-7)
    x = torch.randn(6, 2)
    assert not queue.encode(x).requires_grad


def test_a_training_step_fills_the_queue_with_the_momentum_keys():
    c = build(tiny_config(**QUEUED))
    assert c.queue is not None and c.queue.keys.shape == (48, c.encoder.output_dim)
    for step in range(4):
        c.step()
        assert int(c.queue.filled) == min(16 * (step + 1), 48)
    assert all(p.requires_grad for p in c.encoder.parameters())
    changed = [not torch.equal(a, b) for a, b in zip(c.encoder.parameters(), c.queue.encoder.parameters())]
    assert all(changed)  # m = 0.9: the keys' encoder lags behind
    state = c.state_dict()
    assert set(state["queue"]) >= {"keys", "filled", "pointer"}


def test_the_bound_is_measured_with_a_full_queue_of_fresh_keys():
    c = build(tiny_config(**QUEUED))
    c.step()
    got = information_metrics(c)
    assert got["log_k"] == pytest.approx(math.log(16 + 48))
    assert got["mi_infonce_bound"] <= got["log_k"]


def test_a_resumed_run_continues_its_queue_exactly(tmp_path):
    config = {**QUEUED, "dgp.dtype": "float64", "train.steps": 30, "train.log_every": 1,
              "train.checkpoint_every": 15, "train.eval_every": 15}
    full = Trainer.create(tiny_config(**config), tmp_path / "full", progress=False).run()
    Trainer.create(tiny_config(**{**config, "train.steps": 15}), tmp_path / "half", progress=False).run()
    trainer = Trainer.resume(tmp_path / "half", {"train.steps": 30}, progress=False)
    resumed = trainer.run()
    assert resumed["r2_linear"] == full["r2_linear"]
    assert resumed["mi_infonce_bound"] == full["mi_infonce_bound"]


@pytest.mark.integration
def test_queued_runs_pack_and_step_in_turn(tmp_path):
    cfgs = [tiny_config(**{**QUEUED, "train.steps": 10, "seed": s}) for s in (0, 1)]
    alone = [Trainer.create(c, tmp_path / f"alone{i}", progress=False).run() for i, c in enumerate(cfgs)]
    packed = run_packed([Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)])
    assert [p["r2_linear"] for p in packed] == [a["r2_linear"] for a in alone]
    with pytest.raises(ValueError, match="take their steps in turn"):
        StackedPack([build(c) for c in cfgs])
