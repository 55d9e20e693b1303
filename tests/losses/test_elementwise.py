"""The row-blocked core of NCE, NWJ, SCL, the margin and the triplet loss: any split into row blocks gives the
one-block values and gradients, ties are broken in the dense matrix's order, and no loss builds the dense matrix
for negatives the anchors share."""

from __future__ import annotations

import pytest
import torch

from identifiable_cl.losses import LOSSES, base
from identifiable_cl.losses.blocked import Pairing, use_kernels
from identifiable_cl.losses.elementwise import blocked_sum, nearest

LOSSES_UNDER_TEST = [
    {"name": "nce", "similarity": "l2", "tau": 0.7},
    {"name": "nwj", "similarity": "dot", "tau": 2.0},
    {"name": "scl"},
    {"name": "margin", "margin": 1.5},
    {"name": "triplet", "mining": "all", "normalize": False, "margin": 0.5},
    {"name": "triplet", "mining": "hardest", "normalize": False, "margin": 0.5},
    {"name": "triplet", "mining": "semihard", "normalize": False, "margin": 0.5},
]
SHARED = ["symmetric", "r24", "one_sided", "first_view_others", "independent"]


def views(B: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, 3, generator=g, dtype=torch.float64)
    return h, h + 0.5 * torch.randn(B, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g, dtype=torch.float64)


def value_and_grads(loss, inputs):
    leaves = [x.clone().requires_grad_() for x in inputs]
    value = loss(*leaves)
    value.backward()
    return value.detach(), [x.grad for x in leaves], [p.grad.clone() for p in loss.parameters() if p.grad is not None]


@pytest.mark.parametrize("options", LOSSES_UNDER_TEST, ids=lambda o: "-".join(str(v) for v in o.values()))
@pytest.mark.parametrize("negatives", SHARED)
def test_row_blocks_of_any_size_give_the_one_block_result(options, negatives):
    loss = LOSSES.build({**options, "negatives": negatives}, key="loss", dim=3).double()
    inputs = views(7, seed=len(negatives))
    whole, grads, params = value_and_grads(loss, inputs)
    for rows in (1, 2, 3):
        for p in loss.parameters():
            p.grad = None
        with use_kernels(block_rows=rows):
            split, split_grads, split_params = value_and_grads(loss, inputs)
        assert split.item() == pytest.approx(whole.item(), rel=1e-12, abs=1e-14)
        for a, b in zip(grads + params, split_grads + split_params):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("options", LOSSES_UNDER_TEST, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_shared_negatives_never_build_the_dense_matrix(options, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("assemble was called")

    monkeypatch.setattr(base, "assemble", refuse)
    for negatives in SHARED:
        loss = LOSSES.build({**options, "negatives": negatives}, key="loss", dim=3).double()
        h, hp, hn = views(6, seed=1)
        assert torch.isfinite(loss(h, hp, hn))


def test_the_blocked_sum_is_the_masked_sum_of_the_dense_matrix():
    h, hp, _ = views(6, seed=4)
    offset = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    both = torch.cat([h, hp]).requires_grad_()
    pos = torch.randn(12, dtype=torch.float64, requires_grad=True)

    def phi(sim, extra, c):
        return torch.sin(sim * extra + c)

    with use_kernels(block_rows=5):
        got = blocked_sum("l1", [Pairing(0, 0, "views")], [2.0], [both], pos, [offset], phi)
    sim = -torch.cdist(both, both, p=1)
    kept = ~(torch.eye(12, dtype=torch.bool) | torch.eye(12, dtype=torch.bool).roll(6, 1))
    want = 2.0 * torch.where(kept, phi(sim, pos[:, None], offset), torch.zeros_like(sim)).sum()
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    grads = torch.autograd.grad(got, [both, pos, offset])
    wanted = torch.autograd.grad(want, [both, pos, offset])
    for a, b in zip(grads, wanted):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_ties_go_to_the_first_pairing_then_the_first_column():
    a = torch.zeros(2, 2, dtype=torch.float64)
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)  # columns 0 and 2 tie
    pairings = [Pairing(0, 1), Pairing(0, 2)]
    with use_kernels(block_rows=1):
        choice = nearest("l2", pairings, [a, c, c.flip(0)], None)
    assert choice.tolist() == [[0, 0], [0, 0]]
    bound = torch.tensor([-0.5, -2.0], dtype=torch.float64)  # every negative (-1) is below -0.5, none below -2
    choice = nearest("l2", pairings, [a, c, c.flip(0)], bound)
    assert choice.tolist() == [[0, 0], [0, 0]]
