"""Mean correlation coefficient (MCC) between true latents z and a representation h.

corr(z, h) is the (n × d) Pearson or Spearman correlation matrix; the dimensions are matched
one-to-one by linear assignment on −|corr| (scipy's ``linear_sum_assignment``), and the MCC is
the mean |corr| of the matched pairs, averaged over the n true latents. When h has more
dimensions than z the extra ones stay unmatched; when it has fewer, the latents left without a
partner count as 0, so a representation that drops latents cannot reach MCC = 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.records import MCCResult

METHODS = ("pearson", "spearman")


def rank_columns(x: Tensor) -> Tensor:
    """Ranks 1..N of each column of x (N, d), ties given their average rank (as scipy's rankdata)."""
    n = x.shape[0]
    values, order = torch.sort(x, dim=0)
    pos = torch.arange(n, device=x.device, dtype=torch.float64)[:, None].expand_as(values)
    starts = torch.ones_like(values, dtype=torch.bool)
    starts[1:] = values[1:] != values[:-1]
    ends = torch.ones_like(starts)
    ends[:-1] = starts[1:]
    first = torch.where(starts, pos, torch.zeros_like(pos)).cummax(dim=0).values
    last = torch.where(ends, pos, torch.full_like(pos, n)).flip(0).cummin(dim=0).values.flip(0)
    ranks = torch.empty(values.shape, dtype=torch.float64, device=x.device)
    return ranks.scatter_(0, order, (first + last) / 2.0 + 1.0)


def pearson_matrix(a: Tensor, b: Tensor) -> Tensor:
    """Pearson correlations (p, q) between the columns of a (N, p) and b (N, q).

    A constant column has correlation 0 with everything (no linear association can be seen).
    """
    sa = _inputs.standardise(a)[0]
    sb = _inputs.standardise(b)[0]
    return (sa.T @ sb / a.shape[0]).clamp(-1.0, 1.0)


def checked_pair(z: Any, h: Any) -> tuple[Tensor, Tensor]:
    """z (N, n) and h (N, d) checked and converted for correlations, on the device of h (else of z)."""
    device = _inputs.device_of(h, z)
    zt = _inputs.matrix("z", z, device)
    ht = _inputs.matrix("h", h, device)
    _inputs.paired("z", zt, "h", ht)
    _inputs.enough_samples("z", zt, max(zt.shape[1], ht.shape[1]) + 1, "correlations need more samples than dimensions")
    _inputs.varying("z", zt)
    return zt, ht


def correlation_matrix(z: Any, h: Any, *, method: str = "pearson") -> Tensor:
    """Correlation matrix (n, d) between true latents z (N, n) and representation h (N, d).

    ``method`` is "pearson" or "spearman" (Pearson correlation of average ranks, as scipy's
    ``spearmanr``). Computed in float64 on the device of h; constant columns of h correlate 0.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is invalid: allowed {', '.join(map(repr, METHODS))}")
    zt, ht = checked_pair(z, h)
    if method == "spearman":
        zt, ht = rank_columns(zt), rank_columns(ht)
    return pearson_matrix(zt, ht)


def match(corr: Tensor) -> list[tuple[int, int]]:
    """Pairs (latent dim, representation dim) maximising Σ|corr| over one-to-one matchings."""
    from scipy.optimize import linear_sum_assignment  # here, not at import: a run's start does not need it
    rows, cols = linear_sum_assignment(-corr.abs().cpu().numpy())
    return [(int(i), int(j)) for i, j in zip(rows, cols)]


def matched_scores(corr: Tensor, matching: list[tuple[int, int]]) -> list[float]:
    """|corr| of each latent's partner under ``matching`` (0.0 for an unmatched latent), length n."""
    per_dim = [0.0] * corr.shape[0]
    values = corr.abs().cpu()
    for i, j in matching:
        per_dim[i] = float(values[i, j])
    return per_dim


def mcc(z: Any, h: Any, *, method: str = "pearson") -> MCCResult:
    """MCC of true latents z (N, n) and representation h (N, d) under the optimal matching.

    Returns the mean over the n latents, the per-latent matched |corr| and the matching.
    """
    corr = correlation_matrix(z, h, method=method)
    matching = match(corr)
    per_dim = matched_scores(corr, matching)
    return MCCResult(mean=sum(per_dim) / len(per_dim), per_dim=per_dim, matching=matching)
