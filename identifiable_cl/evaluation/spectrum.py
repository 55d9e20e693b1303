"""Collapse diagnostics: singular-value spectrum and effective rank of a representation."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.records import SpectrumResult


def effective_rank(singular_values: Sequence[float]) -> float:
    """exp(H(p)) with p_i = σ_i / Σσ_j (Roy & Vetterli 2007); 0.0 when every σ_i is 0.

    It equals k for k equal non-zero singular values and falls towards 1 as the spectrum
    concentrates on one direction.
    """
    values = [float(s) for s in singular_values]
    if any(not math.isfinite(s) or s < 0.0 for s in values):
        raise ValueError(f"singular_values={values!r} is invalid: expected finite non-negative numbers")
    total = sum(values)
    if total == 0.0:
        return 0.0
    entropy = -sum(s / total * math.log(s / total) for s in values if s > 0.0)
    return math.exp(entropy)


def spectrum(h: Any, *, standardise: bool = True) -> SpectrumResult:
    """Singular values of the representation h (N, d) and their effective rank.

    The columns of h are centred and, with ``standardise=True``, scaled to unit variance (constant
    columns become 0); the singular values of that matrix / sqrt(N) are returned in descending
    order, so their squares are the eigenvalues of the correlation (or covariance) matrix.
    """
    if not isinstance(standardise, bool):
        raise ValueError(f"standardise={standardise!r} is invalid: expected True or False")
    ht = _inputs.matrix("h", h, _inputs.device_of(h))
    _inputs.enough_samples("h", ht, ht.shape[1] + 1, "the spectrum needs more samples than dimensions")
    centred = _inputs.standardise(ht)[0] if standardise else ht - ht.mean(dim=0)
    values = torch.linalg.svdvals(centred / math.sqrt(ht.shape[0])).tolist()
    return SpectrumResult(singular_values=values, effective_rank=effective_rank(values))
