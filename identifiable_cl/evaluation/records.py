"""Small immutable result records returned by the metric functions (plain Python numbers and lists)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class R2Result:
    """Coefficient of determination of each true latent dimension and their uniform average."""

    mean: float
    per_dim: list[float]


@dataclass(frozen=True)
class KernelR2Result(R2Result):
    """Nonlinear R² with the hyper-parameters chosen for each true latent dimension.

    ``bandwidth[i]`` is the RBF length-scale (in units of the standardised representation),
    ``ridge[i]`` the ridge strength per fitted sample (α = ridge · number of fitted samples) and
    ``linear_part[i]`` whether the kernel part models the residual of a linear fit (else of the mean).
    """

    bandwidth: list[float]
    ridge: list[float]
    linear_part: list[bool]


@dataclass(frozen=True)
class MCCResult:
    """Mean correlation coefficient under the optimal one-to-one matching.

    ``per_dim[i]`` is |corr| between true latent i and its matched representation dimension
    (0.0 for a latent left unmatched because the representation has fewer dimensions);
    ``matching`` lists the pairs (latent dim, representation dim); ``mean`` averages ``per_dim``.
    """

    mean: float
    per_dim: list[float]
    matching: list[tuple[int, int]]


@dataclass(frozen=True)
class BlockMCCResult:
    """MCC after an optimal orthogonal alignment inside each group of latent dimensions.

    ``per_dim[i]`` is the correlation between true latent i and the aligned representation
    coordinate; ``assignment[k]`` lists the representation dimensions given to group k.
    """

    mean: float
    per_dim: list[float]
    assignment: list[list[int]]


@dataclass(frozen=True)
class SpectrumResult:
    """Singular values (descending) of the centred, optionally standardised representation over sqrt(N)."""

    singular_values: list[float]
    effective_rank: float


@dataclass(frozen=True)
class OrthogonalR2Result(R2Result):
    """R² of z predicted by the best scaled orthogonal map of h (``orthogonal_r2``).

    ``scale`` is the fitted global factor s of ẑ = s (h − mean h) R + mean z (0.0 when the
    centred fit representation is identically zero).
    """

    scale: float


@dataclass(frozen=True)
class DCIScores:
    """Disentanglement and completeness of an importance matrix (``dci_scores``).

    ``disentanglement_per_dim[i]`` is D_i of representation dimension i and ``dim_weights[i]`` its
    share ρ_i of the total importance (a dimension with no importance has D_i = 0.0 and weight 0.0);
    ``disentanglement`` is Σ_i ρ_i D_i. ``completeness_per_factor[j]`` is C_j of true latent j
    (0.0 for a latent no dimension is important for) and ``completeness`` their uniform mean.
    """

    disentanglement: float
    completeness: float
    disentanglement_per_dim: list[float]
    dim_weights: list[float]
    completeness_per_factor: list[float]


@dataclass(frozen=True)
class DCIResult(DCIScores):
    """DCI scores (Eastwood & Williams 2018) of a representation, with what they were computed from.

    ``informativeness_per_factor[j]`` is the R² of the regressor's prediction of latent j and
    ``informativeness`` their uniform mean; ``importance[i][j]`` is the importance of representation
    dimension i for latent j (d lists of n numbers); ``regressor`` names the regressor ("lasso" or "gbt").
    """

    informativeness: float
    informativeness_per_factor: list[float]
    importance: list[list[float]]
    regressor: str
