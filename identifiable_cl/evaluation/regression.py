"""Linear and nonlinear R² of the true latents z regressed from a representation h.

Both scores are held-out by default: the regression is fitted on (z_fit, h_fit) and scored on a
separate (z_test, h_test), R²_i = 1 − Σ(z_i − ẑ_i)² / Σ(z_i − mean(z_i))² over the test rows (the
definition of scikit-learn's ``r2_score``), with the uniform average over dimensions as ``mean``.
``in_sample=True`` scores on the fit sample instead; that is what the reference codes report
(Z21/R24 fit and score on the same 4096 samples) and it is optimistic.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from identifiable_cl.evaluation import _inputs
from identifiable_cl.evaluation.kernel_ridge import NystromRidge
from identifiable_cl.evaluation.lstsq import least_squares
from identifiable_cl.evaluation.records import KernelR2Result, R2Result

RIDGES = tuple(10.0 ** (-k / 2) for k in range(-2, 21))
BANDWIDTH_FACTORS = (0.5, 1.0, 2.0)
VALIDATION_FRACTION = 0.2


def r2_scores(z: Tensor, z_hat: Tensor) -> Tensor:
    """Per-dimension R² (p,) of predictions z_hat (N, p) for targets z (N, p)."""
    sse = (z - z_hat).pow(2).sum(dim=0)
    sst = (z - z.mean(dim=0)).pow(2).sum(dim=0)
    return 1.0 - sse / sst


class LinearMap:
    """Affine regression z ≈ ((h − μ_h) / σ_h) B + μ_z fitted by least squares on a fit sample."""

    def __init__(self, z: Tensor, h: Tensor):
        x, self.h_mean, self.h_scale = _inputs.standardise(h)
        self.z_mean = z.mean(dim=0)
        self.coef = least_squares(x, z - self.z_mean)

    def standardise(self, h: Tensor) -> Tensor:
        return _inputs.standardise(h, self.h_mean, self.h_scale)[0]

    def predict(self, h: Tensor) -> Tensor:
        return self.standardise(h) @ self.coef + self.z_mean


def prepare(z_fit: Any, h_fit: Any, z_test: Any, h_test: Any, in_sample: Any,
            minimum_fit: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validate and convert the four arrays; with ``in_sample`` the test pair is the fit pair."""
    if not isinstance(in_sample, bool):
        raise ValueError(f"in_sample={in_sample!r} is invalid: expected True or False")
    given = (z_test is not None, h_test is not None)
    if in_sample and any(given):
        raise ValueError("in_sample=True scores on the fit sample: do not pass z_test or h_test as well")
    if not in_sample and not all(given):
        raise ValueError(
            "held-out scoring needs both z_test and h_test; pass in_sample=True to score on the fit sample "
            "(optimistic: it is what the reference codes report)"
        )
    device = _inputs.device_of(h_fit, h_test, z_fit, z_test)
    zf = _inputs.matrix("z_fit", z_fit, device)
    hf = _inputs.matrix("h_fit", h_fit, device)
    _inputs.paired("z_fit", zf, "h_fit", hf)
    _inputs.enough_samples(
        "h_fit", hf, max(minimum_fit, hf.shape[1] + 2),
        f"the fit needs more samples than the {hf.shape[1]} representation dimensions plus an intercept",
    )
    if in_sample:
        zt, ht = zf, hf
        _inputs.varying("z_fit", zt)
    else:
        zt = _inputs.matrix("z_test", z_test, device)
        ht = _inputs.matrix("h_test", h_test, device)
        _inputs.paired("z_test", zt, "h_test", ht)
        _inputs.same_dims("z_fit", zf, "z_test", zt)
        _inputs.same_dims("h_fit", hf, "h_test", ht)
        _inputs.enough_samples("z_test", zt, 2, "R² compares the residuals with the spread of z_test")
        _inputs.varying("z_test", zt)
    return zf, hf, zt, ht


def linear_r2(z_fit: Any, h_fit: Any, z_test: Any = None, h_test: Any = None, *, in_sample: bool = False) -> R2Result:
    """Linear R² of z (N, n) regressed from h (N, d) with an intercept.

    h is standardised with the fit sample's mean and standard deviation (constant columns carry no
    weight), the coefficients are the least-squares solution on the fit sample, and R² is scored
    on (z_test, h_test) — or on the fit sample when ``in_sample=True``. Returns per-dimension
    scores and their mean.
    """
    zf, hf, zt, ht = prepare(z_fit, h_fit, z_test, h_test, in_sample, minimum_fit=3)
    scores = r2_scores(zt, LinearMap(zf, hf).predict(ht))
    return R2Result(mean=float(scores.mean()), per_dim=scores.tolist())


def _positive_numbers(key: str, values: Any) -> list[float]:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        out = []
    if not out or any(not (v > 0.0 and v < float("inf")) for v in out):
        raise ValueError(f"{key}={values!r} is invalid: expected a non-empty list of positive numbers")
    return out


def nonlinear_r2(
    z_fit: Any,
    h_fit: Any,
    z_test: Any = None,
    h_test: Any = None,
    *,
    in_sample: bool = False,
    generator: torch.Generator | None = None,
    n_centres: int = 1000,
    bandwidth_factors: Sequence[float] = BANDWIDTH_FACTORS,
    ridges: Sequence[float] = RIDGES,
    validation_fraction: float = VALIDATION_FRACTION,
) -> KernelR2Result:
    """Nonlinear R² of z (N, n) regressed from h (N, d) by RBF Nyström kernel ridge regression.

    Replaces vK21's RBF KernelRidge with a 3-fold grid search over α ∈ {1, .1, .01, .001},
    γ ∈ {0.01, 0.215, 4.64, 100} (O(N²) memory, O(N³) time). h is standardised with the fit
    sample's statistics; each latent dimension i is modelled as ẑ_i = [1, h̃] B_i + Σ_c β_ic k(h̃, h̃_c)
    over min(``n_centres``, training rows) Nyström centres, where B_i is either the mean alone
    (plain kernel ridge) or the linear least-squares fit (the kernel part then models the residual
    of ``linear_r2``).

    Hyper-parameters are chosen on the fit sample only, separately for each latent dimension:
    a random ``validation_fraction`` of the fit rows is held out, and over the length-scales
    ``bandwidth_factors`` × (median pairwise distance of the standardised representation), the
    ridges ``ridges`` (α = ridge · rows fitted; 10 … 1e-10 in half decades) and the two affine
    parts, the combination with the lowest validation error is refitted on the whole fit sample
    (see ``kernel_ridge``). The shuffle and the centres are drawn from ``generator`` (a fresh CPU
    generator seeded with 0 when None), so the result is deterministic given the generator state.
    """
    zf, hf, zt, ht = prepare(z_fit, h_fit, z_test, h_test, in_sample, minimum_fit=10)
    if isinstance(n_centres, bool) or not isinstance(n_centres, int) or n_centres < 1:
        raise ValueError(f"n_centres={n_centres!r} is invalid: expected an integer >= 1")
    factors = _positive_numbers("bandwidth_factors", bandwidth_factors)
    ridge_grid = _positive_numbers("ridges", ridges)
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, (int, float)) or not (
        0.0 < validation_fraction < 1.0
    ):
        raise ValueError(f"validation_fraction={validation_fraction!r} is invalid: must lie strictly between 0 and 1")
    if generator is None:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(0)

    x_fit, mean, scale = _inputs.standardise(hf)
    model = NystromRidge(
        n_centres=n_centres, bandwidth_factors=factors, ridges=ridge_grid, validation_fraction=validation_fraction
    ).fit(x_fit, zf, generator)
    scores = r2_scores(zt, model.predict(_inputs.standardise(ht, mean, scale)[0]))
    return KernelR2Result(mean=float(scores.mean()), per_dim=scores.tolist(), bandwidth=model.bandwidth,
                          ridge=model.ridge, linear_part=model.linear_part)
