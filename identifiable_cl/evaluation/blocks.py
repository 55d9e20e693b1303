"""Metrics for named blocks of latent dimensions.

Block R² (vK21): the R² of each block of z (e.g. content and style) regressed from the whole
representation. Both regressions of ``regression`` fit every latent dimension independently
from the whole h (the nonlinear one also selects its hyper-parameters per dimension), so the R²
of a block, uniformly averaged over its dimensions as scikit-learn's ``r2_score`` does, is the
mean of the per-dimension scores of one regression of all of z.

Block-aware MCC (R24): with an anisotropic conditional, latents that share a concentration Λ are
identified only up to an orthogonal map inside their group, which caps plain MCC below 1. Each
representation dimension is given to one group by linear assignment on its multiple correlation
with the group (one slot per latent of the group), then the standardised representation
coordinates of a group are rotated onto the standardised latents by orthogonal Procrustes
(R = U Vᵀ from the SVD of their cross-covariance), and the correlation of each latent with its
aligned coordinate is reported. With single-dimension groups this is the plain Pearson MCC.

Its chance level is not 0: the orthogonal map it may choose inside each group recovers part of
any rotation, so even h = z R with R a Haar-random orthogonal matrix of all n dimensions (which
mixes latents across groups) scores well above 0: about 0.78 for two groups of 5 in n = 10 (one
rotation's score spreads by about 0.04 around that), while a single group of all dimensions
forgives every rotation (1.0). ``random_rotation_reference`` measures that level on a given
latent sample; a block-aware MCC means something only by how far it exceeds it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from dgp import checks
from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.lstsq import GRAM_CUTOFF, symmetric_eig
from identifiable_cl.evaluation.mcc import checked_pair, pearson_matrix
from identifiable_cl.evaluation.regression import linear_r2, nonlinear_r2
from identifiable_cl.evaluation.records import BlockMCCResult, R2Result


def check_blocks(blocks: Mapping[str, Sequence[int]], dim: int, key: str = "blocks") -> dict[str, list[int]]:
    """``blocks`` (name -> latent indices) validated as a partition of range(dim) with usable names."""
    if not isinstance(blocks, Mapping):
        raise ValueError(f"{key}={blocks!r} is invalid: expected a dict mapping block names to lists of latent indices")
    for name in blocks:
        if not isinstance(name, str) or not name or name == "per_dim":
            raise ValueError(f"{key} has a block named {name!r}: names must be non-empty strings other than 'per_dim'")
    if not blocks:
        return {}
    return dict(zip(blocks, _inputs.partition(key, blocks, dim)))


def split_by_block(result: R2Result, blocks: Mapping[str, Sequence[int]]) -> dict[str, R2Result]:
    """Per-block R² from a per-dimension result: each block's scores and their mean."""
    out = {}
    for name, dims in check_blocks(blocks, len(result.per_dim)).items():
        scores = [result.per_dim[i] for i in dims]
        out[name] = R2Result(mean=sum(scores) / len(scores), per_dim=scores)
    return out


def block_r2(
    z_fit: Any,
    h_fit: Any,
    z_test: Any = None,
    h_test: Any = None,
    *,
    blocks: Mapping[str, Sequence[int]],
    nonlinear: bool = False,
    in_sample: bool = False,
    generator: torch.Generator | None = None,
) -> dict[str, R2Result]:
    """R² of each block of z (N, n) regressed from the whole representation h (N, d).

    ``blocks`` maps names to latent indices and must partition range(n). The regression is
    ``linear_r2`` or, with ``nonlinear=True``, ``nonlinear_r2`` (seeded by ``generator``), held-out
    unless ``in_sample=True``.
    """
    dim = _inputs.matrix("z_fit", z_fit, _inputs.device_of(z_fit)).shape[1]
    check_blocks(blocks, dim)
    if not isinstance(nonlinear, bool):
        raise ValueError(f"nonlinear={nonlinear!r} is invalid: expected True or False")
    if nonlinear:
        result = nonlinear_r2(z_fit, h_fit, z_test, h_test, in_sample=in_sample, generator=generator)
    else:
        result = linear_r2(z_fit, h_fit, z_test, h_test, in_sample=in_sample)
    return split_by_block(result, blocks)


def _paired_correlation(a: Tensor, b: Tensor) -> Tensor:
    """Pearson correlation of column i of a (N, k) with column i of b (N, k); constant columns give 0."""
    return (_inputs.standardise(a)[0] * _inputs.standardise(b)[0]).mean(dim=0).clamp(-1.0, 1.0)


def _multiple_correlation(corr_zh: Tensor, corr_zz: Tensor) -> Tensor:
    """sqrt(R²) of each representation dimension regressed on a group of latents, shape (d,).

    corr_zh (k, d) holds the correlations of the k group latents with the d representation
    dimensions and corr_zz (k, k) those among the group latents: R² = cᵀ corr_zz⁺ c.
    """
    w, v = symmetric_eig(corr_zz)
    keep = w > GRAM_CUTOFF * w.max()
    projected = v[:, keep].T @ corr_zh
    r2 = (projected.pow(2) / w[keep][:, None]).sum(dim=0)
    return r2.clamp(0.0, 1.0).sqrt()


def block_aware_mcc(z: Any, h: Any, groups: Sequence[Sequence[int]]) -> BlockMCCResult:
    """MCC of z (N, n) and h (N, d) after optimal orthogonal alignment inside each latent group.

    ``groups`` lists groups of latent indices (e.g. dimensions sharing a Λ value) and must
    partition range(n). Returns the mean over the n latents of the aligned correlations, the
    per-latent values (0.0 for the latents of a group that received no representation dimension,
    which happens when h has fewer dimensions than z) and the representation dimensions given to
    each group.
    """
    from scipy.optimize import linear_sum_assignment  # here, not at import: a run's start does not need it
    zt, ht = checked_pair(z, h)
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise ValueError(f"groups={groups!r} is invalid: expected a list of lists of latent indices")
    members = _inputs.partition("groups", groups, zt.shape[1])

    corr = pearson_matrix(zt, ht)
    slots, slot_group = [], []
    for k, dims in enumerate(members):
        rho = _multiple_correlation(corr[dims], pearson_matrix(zt[:, dims], zt[:, dims]))
        slots.extend([rho] * len(dims))
        slot_group.extend([k] * len(dims))
    rows, cols = linear_sum_assignment(-torch.stack(slots, dim=1).cpu().numpy())
    assignment: list[list[int]] = [[] for _ in members]
    for j, slot in sorted(zip(rows.tolist(), cols.tolist())):
        assignment[slot_group[slot]].append(int(j))

    zs = _inputs.standardise(zt)[0]
    hs = _inputs.standardise(ht)[0]
    per_dim = [0.0] * zt.shape[1]
    for dims, chosen in zip(members, assignment):
        if not chosen:
            continue
        cross = hs[:, chosen].T @ zs[:, dims] / zt.shape[0]
        u, _, vh = torch.linalg.svd(cross, full_matrices=False)
        aligned = hs[:, chosen] @ (u @ vh)
        for i, c in zip(dims, _paired_correlation(aligned, zs[:, dims]).tolist()):
            per_dim[i] = c
    return BlockMCCResult(mean=sum(per_dim) / len(per_dim), per_dim=per_dim, assignment=assignment)


ROTATION_DRAWS = 16
"""Haar-random rotations averaged by ``random_rotation_reference`` unless told otherwise."""


@dataclass(frozen=True)
class RotationReference:
    """Block-aware MCC of h = z R over Haar-random orthogonal R: the chance level of ``block_aware_mcc``.

    ``values[k]`` is the score of the k-th rotation, ``mean`` their mean and ``std`` their sample
    standard deviation (0.0 for a single draw), the spread of one rotation's score around the mean.
    """

    mean: float
    std: float
    values: list[float]


def haar_orthogonal(dim: int, generator: torch.Generator) -> Tensor:
    """A Haar-random orthogonal matrix (dim, dim), float64 on the generator's device.

    Q of the QR decomposition of a standard Gaussian matrix, each column multiplied by the sign of
    the matching diagonal entry of R: without that correction Q is not uniformly distributed.
    """
    gauss = torch.randn(dim, dim, generator=generator, dtype=torch.float64, device=generator.device)
    q, r = torch.linalg.qr(gauss)
    signs = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(q)
    return q * signs


def random_rotation_reference(
    z: Any, groups: Sequence[Sequence[int]], generator: torch.Generator, *, draws: int = ROTATION_DRAWS
) -> RotationReference:
    """Block-aware MCC of z (N, n) against h = z R for ``draws`` Haar-random orthogonal R (n, n).

    The R are drawn one after another from ``generator`` (on its device) and mix all n latents,
    across the ``groups`` as well as inside them; ``groups`` is the partition of range(n) that
    ``block_aware_mcc`` is given. Score it on the sample the representation is scored on: the
    result is what a representation that identifies z only up to an arbitrary rotation gets, so
    a block-aware MCC is informative only by how far it exceeds ``mean``. The score depends on z
    only through its sample, not on any representation.
    """
    draws = checks.integer("draws", draws, minimum=1)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator={generator!r} is invalid: expected a torch.Generator")
    zt = _inputs.matrix("z", z, _inputs.device_of(z))
    values = []
    for _ in range(draws):
        rotation = haar_orthogonal(zt.shape[1], generator).to(zt.device)
        values.append(block_aware_mcc(zt, zt @ rotation, groups).mean)
    spread = statistics.stdev(values) if draws > 1 else 0.0
    return RotationReference(mean=statistics.fmean(values), std=spread, values=values)
