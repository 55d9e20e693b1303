"""R² of the true latents z predicted from a representation h by a scaled orthogonal map.

Linear R² forgives every invertible linear map; on the sphere Z21 identifies the latents up to
an orthogonal map only, h = a z Q + b with Q orthogonal and a > 0. ``orthogonal_r2`` fits that
smaller class (orthogonal Procrustes with one global scale) and scores it like ``linear_r2``, so
it is 1 for such an h and falls below 1 as soon as the map stretches some directions more than
others, where linear R² is still 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from identifiable_cl.evaluation.records import OrthogonalR2Result
from identifiable_cl.evaluation.regression import prepare, r2_scores


class OrthogonalMap:
    """ẑ = s (h − μ_h) R + μ_z with R (d, n) orthonormal and s ≥ 0, fitted by least squares.

    With centred fit arrays Z_c (N, n) and H_c (N, d) and the thin SVD H_cᵀ Z_c = U Σ Vᵀ:
    R = U Vᵀ and s = tr Σ / ‖H_c R‖²_F (s = 0 when H_c R is zero).
    """

    def __init__(self, z: Tensor, h: Tensor):
        self.z_mean = z.mean(dim=0)
        self.h_mean = h.mean(dim=0)
        zc = z - self.z_mean
        hc = h - self.h_mean
        u, sigma, vh = torch.linalg.svd(hc.T @ zc, full_matrices=False)
        self.rotation = u @ vh
        energy = float((hc @ self.rotation).pow(2).sum())
        self.scale = float(sigma.sum()) / energy if energy > 0.0 else 0.0

    def predict(self, h: Tensor) -> Tensor:
        return self.scale * (h - self.h_mean) @ self.rotation + self.z_mean


def orthogonal_r2(
    z_fit: Any, h_fit: Any, z_test: Any = None, h_test: Any = None, *, in_sample: bool = False
) -> OrthogonalR2Result:
    """R² of z (N, n) predicted from h (N, d) by the best scaled orthogonal map.

    On the fit pair, z and h are centred with their own means (nothing is standardised: scaling
    single dimensions would change which maps are orthogonal) and the scale s and the matrix R
    (d, n) solve

        min over s, R of ‖Z_c − s H_c R‖²_F,

    found from the thin SVD H_cᵀ Z_c = U Σ Vᵀ as R = U Vᵀ and s = tr Σ / ‖H_c R‖²_F. The
    prediction ẑ = s (h − mean h_fit) R + mean z_fit is scored on (z_test, h_test), or on the fit
    pair when ``in_sample=True``, with the per-dimension R² and the uniform mean of ``linear_r2``.
    Computed in float64 on the device of h.

    The shapes of R:

    * d = n: R is orthogonal (reflections included) and the solution is the joint minimum; the
      score is 1 exactly when h = a z Q + b with Q orthogonal and a > 0.
    * d > n: R has orthonormal columns, so ẑ rotates the projection of h onto an n-dimensional
      subspace; R maximises tr(Rᵀ H_cᵀ Z_c) and s is the least-squares scale given R (with
      extra dimensions this pair is not in general the joint minimum over s and R). The score is
      1 when h = a z Q + b with Q (n, d) having orthonormal rows.
    * d < n: R has orthonormal rows, ẑ lies in a d-dimensional subspace of the latent space and
      the solution is again the joint minimum; the latent directions outside that subspace are
      predicted by their mean, so the score stays below 1 unless z itself varies in only d
      directions (a latent that h leaves out entirely scores about 0, as with ``linear_r2``).

    Returns the per-dimension scores, their mean and the fitted scale s.
    """
    zf, hf, zt, ht = prepare(z_fit, h_fit, z_test, h_test, in_sample, minimum_fit=3)
    fitted = OrthogonalMap(zf, hf)
    scores = r2_scores(zt, fitted.predict(ht))
    return OrthogonalR2Result(mean=float(scores.mean()), per_dim=scores.tolist(), scale=fitted.scale)
