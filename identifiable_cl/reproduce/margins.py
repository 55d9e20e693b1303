"""Monte-Carlo margins of a contrastive objective: the expected loss of encoders applied to the latents,
against the true inverse's, without training. Any process and any registered loss.

The family of encoders (:func:`encoders`), with π the projection onto the latent sphere of radius r
(the identity for latents elsewhere):

- ``identity``: the true inverse, φ(z) = z;
- ``rotation``: φ(z) = R z with a Haar-random orthogonal R (:func:`haar_rotation`). A loss that depends
  on the encodings through their inner products only keeps its value under a rotation, so its margin
  must vanish up to rounding: a sanity row, not a distortion;
- ``constant``: φ(z) = r e_1, the collapsed encoder: all its logits are equal;
- ``stretch ε``: φ(z) = π(z + ε D z), D = diag(1, …, 1, 0, …, 0) with ones on the first ⌈n/2⌉
  coordinates: a smooth bijection of the sphere that is not an isometry (it changes distances
  unevenly), so identifiability theory says the true inverse must beat it;
- ``warp ε``: φ(z) = π(z + (ε/ω) sin(ω S z)), S the cyclic shift of coordinates ((S z)_i = z_{i+1}),
  ω = π√n / r (so that ω z_i, with z_i of order r/√n, covers the sine's curvature): a nonlinear,
  coordinate-mixing deformation whose perturbation has Lipschitz constant ε (so z ↦ z + perturbation
  is injective on R^n for ε < 1).

Every encoder sees the same batches (common random numbers), so the margin L(φ) − L(id), a mean of
per-batch differences, has a far smaller standard error than the losses themselves; the standard
errors are those over batches (:class:`Estimate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor

import dgp
from dgp.seeding import stream_seed
from identifiable_cl.solvers.base import observations, split_encodings

IDENTITY, ROTATION, CONSTANT = "identity", "rotation", "constant"
SIGNIFICANT = 2.0
"""A margin counts as nonzero when it is at least this many standard errors from 0."""

Encoder = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo mean with its standard error over batches."""

    mean: float
    se: float

    @classmethod
    def of(cls, values: Tensor) -> "Estimate":
        values = values.double()
        se = float(values.std(unbiased=True)) / math.sqrt(values.numel()) if values.numel() > 1 else math.nan
        return cls(float(values.mean()), se)

    def significant(self) -> bool:
        return abs(self.mean) >= SIGNIFICANT * self.se


def encoder_name(distortion: str, epsilon: float) -> str:
    return f"{distortion} {epsilon:g}"


def haar_rotation(n: int, seed: int) -> Tensor:
    """A Haar-random ``(n, n)`` orthogonal matrix (float64): Q of the QR of a Gaussian matrix, with the
    signs of R's diagonal moved into Q (without that step Q is not Haar-distributed)."""
    g = torch.Generator().manual_seed(stream_seed(seed, "population.rotation"))
    q, r = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def encoders(process: dgp.Process, seed: int, distortions: Iterable[str], epsilons: Sequence[float],
             radius: float, project: Callable[[Tensor], Tensor]) -> dict[str, Encoder]:
    """The family of the module docstring for ``process``'s latents (on a sphere of ``radius``, put back
    by ``project``), identity first."""
    n = process.dim
    rotation = haar_rotation(n, seed).to(device=process.device, dtype=process.dtype)
    stretch = torch.zeros(n, device=process.device, dtype=process.dtype)
    stretch[: math.ceil(n / 2)] = 1.0
    omega = math.pi * math.sqrt(n) / radius

    def stretched(eps: float) -> Encoder:
        return lambda z: project(z + eps * stretch * z)

    def warped(eps: float) -> Encoder:
        return lambda z: project(z + (eps / omega) * torch.sin(omega * torch.roll(z, -1, dims=-1)))

    def constant(z: Tensor) -> Tensor:
        out = torch.zeros_like(z)
        out[..., 0] = radius
        return out

    family: dict[str, Encoder] = {IDENTITY: lambda z: z, ROTATION: lambda z: z @ rotation.T, CONSTANT: constant}
    make = {"stretch": stretched, "warp": warped}
    return family | {encoder_name(d, eps): make[d](eps) for d in distortions for eps in epsilons}


def draws(process: dgp.Process, seed: int, batch_size: int, batches: int) -> Iterator[dgp.Batch]:
    """Fresh batches of ``process`` drawn from ``seed``, each with its latents in place of its
    observations (the encoders read the latents). Processes that differ only in their negatives share
    their anchors and positives."""
    generator = process.make_generator(stream_seed(seed, "population.batches"))
    for _ in range(batches):
        drawn = process.sample(batch_size, generator)
        yield dgp.Batch(drawn.z, drawn.z_pos, drawn.z_neg, drawn.z, drawn.z_pos, drawn.z_neg)


def expected_losses(process: dgp.Process, loss: torch.nn.Module, family: dict[str, Encoder],
                    batches: Iterable[dgp.Batch],
                    at_identity: Callable[[Tensor, Tensor, Tensor | None], None] | None = None) -> Tensor:
    """``(batches, encoders)`` float64: the loss of every encoder of ``family`` on every batch (no
    gradients); ``at_identity(h, h_pos, h_neg)`` sees the true inverse's encodings of each batch."""
    rows: list[list[float]] = []
    with torch.no_grad():
        for latents in batches:
            x = observations(latents, process.dim)
            row = []
            for name, phi in family.items():
                h, h_pos, h_neg = split_encodings(phi(x), latents)
                row.append(float(loss(h, h_pos, h_neg)))
                if name == IDENTITY and at_identity is not None:
                    at_identity(h, h_pos, h_neg)
            rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def margins(values: Tensor, names: list[str]) -> dict[str, Estimate]:
    """L(φ) − L(id) of every encoder but the first (the identity), over the batches of ``values``."""
    return {name: Estimate.of(values[:, j] - values[:, 0]) for j, name in enumerate(names) if j > 0}


def ratio(margin: Estimate, reference: Estimate) -> Estimate | None:
    """margin / reference with a first-order standard error (the two taken as independent); None when the
    reference margin is not significantly positive."""
    if not (reference.mean > 0 and reference.significant()):
        return None
    r = margin.mean / reference.mean
    se = math.hypot(margin.se / reference.mean, r * reference.se / reference.mean)
    return Estimate(r, se)


def pooled(ratios: list[Estimate]) -> Estimate | None:
    """The inverse-variance weighted mean of ``ratios`` and its standard error as if they were independent
    (they share batches, so the true one is larger); None without a finite, positive standard error."""
    usable = [r for r in ratios if math.isfinite(r.se) and r.se > 0]
    if not usable:
        return None
    weights = [1.0 / r.se**2 for r in usable]
    mean = sum(w * r.mean for w, r in zip(weights, usable)) / sum(weights)
    return Estimate(mean, 1.0 / math.sqrt(sum(weights)))


def kish_ess(log_weights: Tensor) -> Tensor:
    """Kish's effective sample size (Σ_j w_j)²/Σ_j w_j² along the last dimension, from log-weights
    (``-inf`` = weight 0, an excluded entry), in float64: n for n equal weights, 1 when one weight
    carries everything (L. Kish, Survey Sampling, 1965)."""
    log_w = log_weights.double()
    return torch.exp(2.0 * torch.logsumexp(log_w, dim=-1) - torch.logsumexp(2.0 * log_w, dim=-1))
