"""Adam along a run axis: the parameters of K runs stacked (K, ...), one update for all, each run its own.

For run k, a stacked parameter P (K, ...) with gradient G, the run's learning rate η_k, weight decay λ_k and
step count t_k (each a (K,) tensor on the parameters' device), the update is torch.optim.Adam's (no amsgrad):

    g = G[k] + λ_k P[k],   m[k] ← β1 m[k] + (1 − β1) g,   v[k] ← β2 v[k] + (1 − β2) g²,   t_k ← t_k + 1,
    P[k] ← P[k] − η_k / (1 − β1^t_k) · m[k] / (sqrt(v[k]) / sqrt(1 − β2^t_k) + ε).

Every quantity stays on the device: a step reads nothing back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Slot:
    """One stacked parameter ``param`` (K, ...) (a leaf whose ``grad`` the step reads) with its runs' learning
    rates and weight decays (K,) and its Adam moments ``exp_avg``, ``exp_avg_sq`` (K, ...)."""

    param: Tensor
    lr: Tensor
    weight_decay: Tensor
    exp_avg: Tensor
    exp_avg_sq: Tensor

    def along_runs(self, values: Tensor) -> Tensor:
        """``values`` (K,) shaped to broadcast over the run axis of ``param``."""
        return values.view(-1, *([1] * (self.param.dim() - 1)))


class StackedAdam:
    """Adam over ``slots`` (module docstring); ``steps`` (K,): each run's steps taken so far (float32, as
    torch.optim.Adam keeps them)."""

    def __init__(self, slots: list[Slot], steps: Tensor, betas: tuple[float, float], eps: float):
        self.slots, self.steps, self.betas, self.eps = slots, steps, betas, eps
        self.decay = any(bool((slot.weight_decay != 0).any()) for slot in slots)  # known once, on the host

    def zero_grad(self) -> None:
        for slot in self.slots:
            slot.param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every run; a slot whose parameter received no gradient is left alone."""
        beta1, beta2 = self.betas
        self.steps += 1
        steps = self.steps.to(torch.float64)
        step_size = 1.0 / (1.0 - beta1 ** steps)
        root = torch.sqrt(1.0 - beta2 ** steps)
        for slot in self.slots:
            grad = slot.param.grad
            if grad is None:
                continue
            dtype = slot.param.dtype
            if self.decay:
                grad = grad + slot.along_runs(slot.weight_decay) * slot.param
            slot.exp_avg.lerp_(grad, 1.0 - beta1)
            slot.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denom = (slot.exp_avg_sq.sqrt() / slot.along_runs(root.to(dtype))).add_(self.eps)
            slot.param.sub_(slot.along_runs((slot.lr * step_size).to(dtype)) * slot.exp_avg / denom)
