"""Latents for partial observability (Yao, Xu, Lachapelle, Magliacane, Taslakian, Martius, von Kügelgen &
Locatello, ICLR 2024, "Multi-View Causal Representation Learning with Partial Observability", Sec. 5.1; code
CausalLearningAI/multiview-crl, ``main_numerical.py``).

The marginal ``gaussian_blocks`` names a block per latent coordinate (``z0``, ``z1`` ...), or blocks of chosen
sizes, so that views (:mod:`dgp.views`) can see any subsets of them: z ~ N(0, Σ) on R^n with Σ = I, or, with
``dependent_dims`` k > 0, Σ = diag(W, I_{n-k}) with W ~ Wishart(df = k, I_k) drawn once at construction (E W =
k I_k): the first k coordinates are dependent, as the code's ``--n_dependent_dims``. The conditional ``keep``
keeps every latent, z+ = z: every view observes the same latent, and what distinguishes the views is which
blocks each sees, x_v = f_v(z[S_v]).

The paper's numerical setting: n = 6, one block per coordinate, four views seeing {0,1,2,3,4}, {0,1,2,4,5},
{0,1,2,3,5}, {0,1,3,4,5}, each through its own invertible 3-layer MLP.

Difference from the official code: W is drawn from the process's named stream ``dgp.marginal`` (the code draws
it with scipy's global NumPy state); the law is the same, XᵀX with X a (k, k) standard normal matrix.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dgp import checks
from dgp.base import Conditional, Marginal, Space
from dgp.conditionals import CONDITIONALS
from dgp.content_style import gaussian, wishart_identity
from dgp.information import Information
from dgp.marginals import MARGINALS
from dgp.spaces import Euclidean


def block_sizes(space: Space, sizes: Any) -> list[int]:
    """``sizes`` checked: null (one block per coordinate) or a list of positive integers summing to n."""
    if not isinstance(space, Euclidean):
        checks.fail("dgp.space.name", type(space).__name__.lower(), "gaussian_blocks is defined on R^n only: use "
                    "'euclidean'")
    if sizes is None:
        return [1] * space.dim
    if not isinstance(sizes, list) or not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                                                        for s in sizes):
        checks.fail("sizes", sizes, "null (one block per latent coordinate) or a list of block sizes, integers >= 1")
    if sum(sizes) != space.dim:
        checks.fail("sizes", sizes, f"the block sizes must add up to dgp.dim={space.dim} (they add up to {sum(sizes)})")
    return list(sizes)


@MARGINALS.register("gaussian_blocks")
class GaussianBlocks(Marginal):
    """z ~ N(0, Σ) on R^n in named blocks ``z0``, ``z1`` ... of sizes ``sizes`` (default: one per coordinate);
    ``sample(batch, generator) -> (batch, n)``.

    Σ = I_n, or with ``dependent_dims`` k in 1..n, Σ = diag(W, I_{n-k}), W ~ Wishart(df = k, I_k). Buffers:
    ``sigma`` (Σ, (n, n)) and ``chol`` (its Cholesky factor).
    """

    OPTION_DOCS = {
        "sizes": "null: one block per latent coordinate (z0, z1, ...); or a list of block sizes adding up to dgp.dim",
        "dependent_dims": "(0..n) the first k coordinates dependent through Σ_k ~ Wishart(df = k, I_k) drawn once "
                          "(the official --n_dependent_dims); 0: independent N(0, 1) coordinates",
    }

    def __init__(self, space: Space, rng: torch.Generator, *, sizes: Any = None, dependent_dims: int = 0):
        super().__init__()
        self.space = space
        self.sizes = block_sizes(space, sizes)
        n = space.dim
        self.dependent_dims = checks.integer("dependent_dims", dependent_dims, minimum=0)
        if self.dependent_dims > n:
            checks.fail("dependent_dims", dependent_dims, f"must lie in 0..{n} (dgp.dim={n})")
        sigma = torch.eye(n, dtype=torch.float64)
        k = self.dependent_dims
        if k:
            sigma[:k, :k] = wishart_identity(k, rng)
        self.register_buffer("sigma", sigma)
        self.register_buffer("chol", torch.linalg.cholesky(sigma))

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        return gaussian(batch, self.chol, generator)

    def blocks(self) -> dict[str, list[int]]:
        """``z<i>``: the latent indices of block i, in order."""
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        return {f"z{i}": list(range(start, start + size)) for i, (start, size) in enumerate(zip(starts, self.sizes))}

    def covariance(self) -> Tensor:
        """Σ, ``(n, n)``, in the buffers' dtype."""
        return self.sigma

    def describe(self) -> str:
        per = "one per coordinate" if set(self.sizes) == {1} else f"of sizes {', '.join(map(str, self.sizes))}"
        law = (f"the first {self.dependent_dims} dependent through a Wishart-drawn covariance" if self.dependent_dims
               else "independent N(0, 1) coordinates")
        return f"Gaussian latents in {len(self.sizes)} named blocks ({per}), {law}"


@CONDITIONALS.register("keep")
class Keep(Conditional):
    """z+ = z: every latent kept (``sample(z (batch, n), generator)`` returns ``z`` itself). With views every view
    observes the same latent through its own mixing of the blocks it sees (Yao et al. 2024)."""

    def __init__(self, space: Space, rng: torch.Generator | None = None):
        super().__init__()
        self.space = space

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        return z

    def changed_blocks(self) -> list[str]:
        """None: no block of a positive differs from its anchor's."""
        return []

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) = ∞ for a continuous z: z+ = z."""
        return Information(math.inf, None, "closed form", "infinite: the positive is the anchor itself (z+ = z)")

    def describe(self) -> str:
        return "every latent kept (z+ = z)"
