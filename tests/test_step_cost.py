"""A step's kernel launches and bytes as a GPU runs them, counted on the CPU: analytic cases, and a run's step split
into parts that add up."""

from __future__ import annotations

import pytest
import torch

from identifiable_cl.benchmarks.step_cost import PARTS, Tally, counted, launches, step_cost
from identifiable_cl.components import build
from identifiable_cl.losses import blocked
from tests.tiny import tiny_config


def test_a_matrix_product_is_one_launch_reading_both_factors_and_writing_the_product():
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert counted(lambda: a @ b).total() == Tally(1, 4 * (15 + 35 + 21))


def test_views_and_allocations_launch_nothing_and_in_place_updates_read_and_write():
    x = torch.randn(4, 6, dtype=torch.float64)
    assert counted(lambda: (x.view(6, 4), x.t(), x[1:], x.unsqueeze(0), x.detach(), torch.empty(9))).total() == Tally()
    assert counted(lambda: x.add_(1.0)).total() == Tally(1, 2 * 8 * 24)
    assert counted(lambda: x.clone()).total() == Tally(1, 2 * 8 * 24)
    assert launches(torch.ops.aten.mm.default) and not launches(torch.ops.aten.view.default)


def test_a_step_splits_into_parts_that_add_up_and_counts_as_on_cuda(monkeypatch):
    """The parts sum to the step; the floor is the encoder's forward and backward plus its Adam step; the loss runs
    its eager kernels with blocks sized for CUDA (no CPU cap); the optimizer's foreach setting is restored."""
    sizes = []
    original = blocked.block_rows

    def recorded(rows, columns, device=None, buffers=1, itemsize=4):
        sizes.append(original(rows, columns, device, buffers, itemsize))
        return sizes[-1]

    monkeypatch.setattr(blocked, "block_rows", recorded)
    monkeypatch.setattr(blocked, "BLOCK_ENTRIES", 64)  # a CPU would cut the blocks to one row
    c = build(tiny_config(**{"train.batch_size": 64}))
    before = [g.get("foreach") for g in c.optimizer.param_groups]
    cost = step_cost(c, warmup=1, kernels="eager")
    assert list(cost) == [*PARTS, "step", "floor"]
    assert sum((cost[p] for p in PARTS), Tally()) == cost["step"]
    assert all(cost[p].launches > 0 and cost[p].bytes > 0 for p in PARTS)
    assert cost["floor"].launches > cost["encoder"].launches and cost["step"].bytes > cost["floor"].bytes
    assert sizes and max(sizes) > 1 and blocked.kernels() == "auto"
    assert [g.get("foreach") for g in c.optimizer.param_groups] == before
    assert c.steps_done == 2
    fused = step_cost(c, warmup=0)  # the default: the fused operations, as a CUDA run with Triton
    assert fused["loss"].bytes < cost["loss"].bytes and fused["encoder"] == cost["encoder"]


def test_foreach_adam_launches_fewer_kernels_than_the_loop_over_parameters():
    c = build(tiny_config())
    c.step()
    loop = counted(c.optimizer.step).total()
    for group in c.optimizer.param_groups:
        group["foreach"] = True
    assert counted(c.optimizer.step).total().launches < loop.launches


def test_sizing_for_cuda_is_checked():
    with pytest.raises(ValueError, match="sized_for='tpu' is invalid: allowed: cpu, cuda"):
        with blocked.use_kernels(sized_for="tpu"):
            pass
