"""A weighted sum of registered losses, each optionally on its own projection head."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dgp import checks
from identifiable_cl.losses.base import ContrastiveLoss, check_dim, check_lr
from identifiable_cl.losses import LOSSES


def projection_head(dim: int, widths: Sequence[int]) -> nn.Sequential:
    """MLP dim -> widths[0] -> ... -> widths[-1], LeakyReLU(0.01) between layers, none after."""
    sizes = [dim, *widths]
    layers: list[nn.Module] = [nn.Linear(sizes[0], sizes[1])]
    for n_in, n_out in zip(sizes[1:-1], sizes[2:]):
        layers += [nn.LeakyReLU(0.01), nn.Linear(n_in, n_out)]
    return nn.Sequential(*layers)


def head_widths(key: str, head: Any) -> list[int] | None:
    """``head`` checked as null (None) or a non-empty list of layer widths >= 1, errors naming ``key``."""
    if head is None:
        return None
    if isinstance(head, (str, bytes)) or not isinstance(head, Sequence) or not head:
        checks.fail(key, head, "expected null or a non-empty list of layer widths, e.g. [64, 10]")
    return [checks.integer(f"{key}[{j}]", w, minimum=1) for j, w in enumerate(head)]


DEFAULT_MEMBERS: tuple[Mapping[str, Any], ...] = ({"name": "infonce", "tau": 1.0}, {"name": "infonce", "tau": 0.1})
"""The members of ``loss.name: ensemble`` when none are given: two InfoNCE heads (cosine critic) at τ = 1 and
τ = 0.1 on the same encoder, the simplest of the temperature profiles R24's extension combines."""


@LOSSES.register("ensemble")
class Ensemble(ContrastiveLoss):
    """L = sum_i w_i L_i(p_i(h), p_i(h+), p_i(h-)) over registered losses L_i on one encoder.

    p_i is member i's projection head (an MLP with LeakyReLU) or the identity. Every member
    sees all d encoder dimensions (nothing is sliced off); heads and member parameters are
    submodules, so ``parameters()`` and ``param_groups()`` hand all of them to the optimizer.

    ``requires_negatives`` if any member does (only those members receive ``h_neg``);
    ``needs_unit_norm`` if a member without a head does. ``logs()`` prefixes member i's
    entries with ``m<i>_`` and adds its last value as ``m<i>_loss``.
    """

    OPTION_DOCS = {
        'members': 'list of {"name": <loss>, "weight": 1.0, "head": null | [widths..., out], **options of that loss}; member i is built with the options keyed loss.members[i].<option> and dim = the head\'s output width (or d); members may themselves be ensembles',
        'lr': 'learning rate of the heads, and of member parameters whose loss sets no lr',
    }

    def __init__(self, *, dim: int, members: Sequence[Mapping[str, Any]] = DEFAULT_MEMBERS, lr: float | None = None):
        super().__init__()
        self.dim = check_dim(dim)
        self.lr = check_lr(lr)
        if not isinstance(members, Sequence) or isinstance(members, (str, bytes)) or not members:
            checks.fail("members", members, "expected a non-empty list of loss specs")
        self.weights: list[float] = []
        self.heads = nn.ModuleList()
        self.members = nn.ModuleList()
        for i, spec in enumerate(members):
            member_key = f"members[{i}]"
            if not isinstance(spec, Mapping) or "name" not in spec:
                checks.fail(member_key, spec, "expected a mapping with a 'name' entry")
            options = dict(spec)
            self.weights.append(checks.non_negative(f"{member_key}.weight", options.pop("weight", 1.0)))
            widths = head_widths(f"{member_key}.head", options.pop("head", None))
            self.heads.append(nn.Identity() if widths is None else projection_head(self.dim, widths))
            member = LOSSES.build(options, key=member_key, dim=self.dim if widths is None else widths[-1])
            if not isinstance(member, ContrastiveLoss):
                checks.fail(f"{member_key}.name", spec["name"], "expected a contrastive loss")
            if member.queue is not None:
                checks.fail(f"{member_key}.negatives", spec.get("negatives"), "MoCo's queue needs the momentum "
                            "encoder's keys of the whole loss; an ensemble's members take another negative set")
            self.members.append(member)
        self.requires_negatives = any(m.requires_negatives for m in self.members)
        self.needs_unit_norm = any(
            m.needs_unit_norm for m, head in zip(self.members, self.heads) if isinstance(head, nn.Identity)
        )
        self._last: list[Tensor | None] = [None] * len(self.members)

    def forward(self, h: Tensor, h_pos: Tensor, h_neg: Tensor | None = None) -> Tensor:
        """Scalar weighted sum for h, h_pos (B, d) and h_neg None | (M, d) | (B, K, d)."""
        if h.dim() != 2 or h.shape[1] != self.dim:
            raise ValueError(f"the loss was built for encodings (B, {self.dim}); got {tuple(h.shape)}")
        total = torch.zeros((), dtype=h.dtype, device=h.device)
        for i, (weight, head, member) in enumerate(zip(self.weights, self.heads, self.members)):
            neg = head(h_neg) if member.requires_negatives and h_neg is not None else None
            value = member(head(h), head(h_pos), neg)
            self._last[i] = value.detach()
            total = total + weight * value
        return total

    def logs(self) -> dict[str, float | list[float]]:
        out: dict[str, float | list[float]] = {}
        for i, member in enumerate(self.members):
            out.update({f"m{i}_{k}": v for k, v in member.logs().items()})
            if self._last[i] is not None:
                out[f"m{i}_loss"] = float(self._last[i])
        return out

    def param_groups(self) -> list[dict[str, Any]]:
        """Head parameters at ``lr``; each member's groups at its own lr, else at ``lr``."""
        groups: list[dict[str, Any]] = []
        head_params = [p for p in self.heads.parameters() if p.requires_grad]
        if head_params:
            groups.append({"params": head_params, "lr": self.lr})
        return groups + [
            {**group, "lr": self.lr if group["lr"] is None else group["lr"]}
            for member in self.members
            for group in member.param_groups()
        ]
