"""Recovery of per-dimension concentrations Λ (R24's AnInfoNCE learns a diagonal Λ̂)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.mcc import pearson_matrix, rank_columns


def _pairs(matching: Any, n_true: int, n_learned: int) -> list[tuple[int, int]]:
    try:
        pairs = [(int(i), int(j)) for i, j in matching]
    except (TypeError, ValueError):
        raise ValueError(
            f"matching={matching!r} is invalid: expected pairs (latent dim, representation dim), as MCCResult.matching"
        ) from None
    if not pairs:
        raise ValueError("matching is empty: at least one (latent dim, representation dim) pair is needed")
    for i, j in pairs:
        if not (0 <= i < n_true and 0 <= j < n_learned):
            raise ValueError(
                f"matching contains ({i}, {j}): latent indices must lie in [0, {n_true - 1}] and "
                f"representation indices in [0, {n_learned - 1}]"
            )
    for side, name in ((0, "latent"), (1, "representation")):
        seen = [p[side] for p in pairs]
        if len(set(seen)) != len(seen):
            raise ValueError(f"matching uses a {name} dimension twice: {pairs}; it must be one-to-one")
    return pairs


def lambda_recovery(lambda_learned: Any, lambda_true: Any, matching: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Compare learned Λ̂ (d,) with true Λ (n,) on the pairs (i, j) of ``matching`` (Λ_i vs Λ̂_j).

    ``matching`` is the MCC matching of latent i to representation dimension j (``mcc_matching``
    of the evaluation, or ``MCCResult.matching``). Λ̂ is identified only up to a global scale (it
    trades off against the scale of the representation), so the scale s minimising
    Σ_(i,j) (s·Λ̂_j/Λ_i − 1)² is applied first: s = Σ r / Σ r² with r = Λ̂_j / Λ_i.

    Returns a dict: ``relative_error`` (root mean square of the relative errors
    |s·Λ̂_j/Λ_i − 1|), ``max_relative_error``, ``relative_error_per_dim`` (in matching order),
    ``scale`` (s), ``rank_correlation`` (Spearman's ρ of the matched Λ̂ and Λ; None where it is
    undefined because either side is constant) and ``pairs``.
    """
    learned = _inputs.vector("lambda_learned", lambda_learned, torch.device("cpu"))
    true = _inputs.vector("lambda_true", lambda_true, torch.device("cpu"))
    if bool((true <= 0).any()):
        raise ValueError(f"lambda_true={true.tolist()} is invalid: concentrations must be > 0")
    pairs = _pairs(matching, true.shape[0], learned.shape[0])
    t = true[[i for i, _ in pairs]]
    lam = learned[[j for _, j in pairs]]
    ratio = lam / t
    denom = float(ratio.pow(2).sum())
    if denom == 0.0:
        raise ValueError("lambda_learned is 0 on every matched dimension: no scale can be fitted")
    scale = float(ratio.sum()) / denom
    errors = (scale * ratio - 1.0).abs()
    rank = None
    if len(pairs) > 1 and bool((t != t[0]).any()) and bool((lam != lam[0]).any()):
        ranks = rank_columns(torch.stack([t, lam], dim=1))
        rank = float(pearson_matrix(ranks[:, :1], ranks[:, 1:])[0, 0])
    return {
        "relative_error": math.sqrt(float(errors.pow(2).mean())),
        "max_relative_error": float(errors.max()),
        "relative_error_per_dim": errors.tolist(),
        "scale": scale,
        "rank_correlation": rank,
        "pairs": [[i, j] for i, j in pairs],
    }
