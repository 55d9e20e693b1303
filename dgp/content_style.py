"""The content-style latent model of vK21 (von Kügelgen et al. 2021, Sec. 5.1) on R^n.

Latents ``z = (c, s)``: the first ``content_dim`` coordinates are content, the
rest style. The marginal draws ``c ~ N(0, Σ_c)`` and ``s ~ N(0, Σ_s)`` (identity
covariances unless ``dependence``), and optionally shifts the style by a fixed
affine function of the content, ``s <- s + B c + a``. The positive keeps the
content exactly and perturbs a random subset of the style coordinates,
``s+ = s + m ⊙ ε`` with ``m_i ~ Bernoulli(p_change)`` and ``ε ~ N(0, σ² I)`` or
``N(0, Σ_a)``.

Multimodal latents (Daunhawer et al., ICLR 2023, Sec. 5.1): with ``modality_dim`` k > 0 the latent is
``z = (c, s, m_1, ..., m_M)``, ``M = modalities`` modality-specific blocks of k dimensions after the style,
each ``m_i ~ N(0, Σ_{m_i})`` (Wishart-drawn under ``dependence``) and kept exactly by the conditional; a
process's views (:mod:`dgp.views`) then let each observation see its own blocks, e.g. ``x_1 = f_1(c, s, m_1)``
and ``x_2 = f_2(c, s̃, m_2)``. With k = 0 (the default) nothing is drawn for them and every number is that
of the plain content-style model.

Every covariance is ``Σ = XᵀX`` with ``X`` a ``(k, k)`` standard normal matrix,
i.e. Wishart(df = k, I_k) with ``k`` the block size, as in the official code.

Differences from the official code (ysharma1126/ssl_identifiability):

- Σ_c, Σ_s, Σ_a, B and a are drawn once, at construction, from the process's
  generator and kept as buffers; the official ``spaces.NRealSpace.normal`` and
  ``ProductLatentSpace.sample_marginal`` re-draw them on every call, so anchors,
  negatives and every batch saw different parameters and the dependence
  averaged away.
- The official marginal scale ``--m-param`` (default 1, ignored under
  statistical dependence) is fixed to 1 here.
- The official code ignores ``--c-param`` (σ) under statistical dependence; here
  ``sigma`` other than 1 together with ``dependence`` is rejected instead.
- Content and style blocks are built without closures, so no block can pick up
  another block's covariance.
- Under ``dependence`` the multimodal code (imantdaunhawer/multimodal-contrastive-learning, ``main_mlp.py``)
  draws Σ_c, Σ_s, Σ_a, Σ_{m_1} and Σ_{m_2} with one and the same ``random_state``, so all five are the same
  matrix when the blocks have one size; here each is a draw of its own.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dgp import checks
from dgp.base import Conditional, Marginal, Space
from dgp.conditionals import CONDITIONALS
from dgp.information import Information, gaussian_covariance, gaussian_information
from dgp.marginals import MARGINALS
from dgp.spaces import Euclidean


def wishart_identity(k: int, rng: torch.Generator) -> Tensor:
    """A ``(k, k)`` float64 draw from Wishart(df = k, I_k): ``XᵀX``, ``X`` ``(k, k)`` standard normal."""
    x = torch.randn(k, k, generator=rng, dtype=torch.float64)
    return x.T @ x


def gaussian(batch: int, chol: Tensor, generator: torch.Generator) -> Tensor:
    """``(batch, k)`` draws from N(0, L Lᵀ) for the ``(k, k)`` Cholesky factor ``chol``."""
    eps = torch.randn(batch, chol.shape[0], generator=generator, device=generator.device, dtype=chol.dtype)
    return eps @ chol.to(generator.device).T


def split_dims(space: Space, content_dim: int | None, section: str, n: int | None = None) -> int:
    """The number of content dimensions (default ``n // 2``) among the ``n`` of content and style (all of the
    space's unless given), checked (option ``content_dim`` of the component in config ``section``)."""
    if not isinstance(space, Euclidean):
        checks.fail(
            "dgp.space.name", type(space).__name__.lower(),
            f"the content_style model ({section}) is defined on R^n only: use 'euclidean'",
        )
    n = space.dim if n is None else n
    if n < 2:
        checks.fail("dgp.dim", n, "content_style needs at least 2 dimensions (content and style)")
    if content_dim is None:
        return n // 2
    k = checks.integer("content_dim", content_dim, minimum=1)
    if k > n - 1:
        where = f"dgp.dim={n}" if n == space.dim else f"{n} content and style dimensions"
        checks.fail("content_dim", content_dim, f"must lie in 1..{n - 1} ({where})")
    return k


def modality_layout(space: Space, modality_dim: int, modalities: int) -> tuple[int, int]:
    """``(modality_dim, modalities)`` checked: k >= 0 dimensions per modality-specific block and M >= 1 blocks,
    leaving at least 2 dimensions (content and style) of the space."""
    k = checks.integer("modality_dim", modality_dim, minimum=0)
    count = checks.integer("modalities", modalities, minimum=1)
    if k and space.dim - k * count < 2:
        checks.fail("modality_dim", modality_dim, f"{count} modality-specific blocks of {k} dimensions leave fewer than "
                    f"2 of the {space.dim} latent dimensions (dgp.dim) for content and style")
    return k, count


def shared_dims(space: Space, modality_dim: int, modalities: int) -> int:
    """The dimensions of content and style together: n minus the modality-specific blocks."""
    k, count = modality_layout(space, modality_dim, modalities)
    return space.dim - k * count


def content_style_blocks(content_dim: int, n: int, modality_dim: int = 0, modalities: int = 0) -> dict[str, list[int]]:
    """``content`` and ``style`` over the first ``n`` dimensions, then ``m1``, ``m2`` ... of ``modality_dim`` each."""
    blocks = {"content": list(range(content_dim)), "style": list(range(content_dim, n))}
    if modality_dim:
        for i in range(modalities):
            blocks[f"m{i + 1}"] = list(range(n + i * modality_dim, n + (i + 1) * modality_dim))
    return blocks


@MARGINALS.register("content_style")
class ContentStyleMarginal(Marginal):
    """z = (c, s), c ~ N(0, Σ_c), s ~ N(0, Σ_s) [+ B c + a]; samples ``(batch, n)``.

    Options: ``content_dim`` (1..n-1, default n // 2); ``dependence``: Σ_c, Σ_s ~
    Wishart(df = block size, I), else identity; ``content_dependent_style``: add
    ``B c + a`` with ``B`` ``(n - content_dim, content_dim)`` and ``a``
    ``(n - content_dim,)`` of i.i.d. N(0, 1) entries; ``modality_dim`` k and ``modalities`` M: M
    modality-specific blocks ``m_i ~ N(0, Σ_{m_i})`` of k dimensions after the style (then n counts them
    too: style has n - content_dim - k·M dimensions).
    Buffers: ``sigma_content``, ``chol_content``, ``sigma_style``, ``chol_style``,
    ``style_weight`` (B), ``style_offset`` (a) when content-dependent, ``sigma_m<i>``, ``chol_m<i>`` per
    modality-specific block.
    """

    OPTION_DOCS = {
        'content_dim': 'content dimensions, 1..n-1 (default n // 2)',
        'dependence': 'Σ_c, Σ_s ~ Wishart(df = block size, I), else identity',
        'content_dependent_style': 'add B c + a to the style, with B (n - content_dim, content_dim) and a (n - content_dim,) of i.i.d. N(0, 1) entries',
        'modality_dim': '(>= 0) dimensions of each modality-specific block m1, m2 ... after the style (0: none)',
        'modalities': '(>= 1) number of modality-specific blocks when modality_dim > 0',
    }

    def __init__(
        self,
        space: Space,
        rng: torch.Generator,
        *,
        content_dim: int | None = None,
        dependence: bool = False,
        content_dependent_style: bool = False,
        modality_dim: int = 0,
        modalities: int = 2,
    ):
        super().__init__()
        self.space = space
        self.modality_dim, self.modalities = modality_layout(space, modality_dim, modalities)
        self.shared_dim = shared_dims(space, modality_dim, modalities)
        self.content_dim = split_dims(space, content_dim, "dgp.marginal", self.shared_dim)
        self.dependence = checks.boolean("dependence", dependence)
        self.content_dependent_style = checks.boolean("content_dependent_style", content_dependent_style)
        kc, ks = self.content_dim, self.shared_dim - self.content_dim
        for name, k in (("content", kc), ("style", ks)):
            self._covariance(name, k, rng)
        shift = self.content_dependent_style
        self.register_buffer("style_weight", torch.randn(ks, kc, generator=rng, dtype=torch.float64) if shift else None)
        self.register_buffer("style_offset", torch.randn(ks, generator=rng, dtype=torch.float64) if shift else None)
        self.specific = [f"m{i + 1}" for i in range(self.modalities)] if self.modality_dim else []
        for name in self.specific:
            self._covariance(name, self.modality_dim, rng)

    def _covariance(self, name: str, k: int, rng: torch.Generator) -> None:
        """Buffers ``sigma_<name>`` (Wishart-drawn under ``dependence``, else I_k) and its Cholesky factor ``chol_<name>``."""
        sigma = wishart_identity(k, rng) if self.dependence else torch.eye(k, dtype=torch.float64)
        self.register_buffer(f"sigma_{name}", sigma)
        self.register_buffer(f"chol_{name}", torch.linalg.cholesky(sigma))

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        c = gaussian(batch, self.chol_content, generator)
        s = gaussian(batch, self.chol_style, generator)
        if self.content_dependent_style:
            s = s + c @ self.style_weight.to(c).T + self.style_offset.to(c)
        specific = [gaussian(batch, getattr(self, f"chol_{name}"), generator) for name in self.specific]
        return torch.cat([c, s, *specific], dim=-1)

    def blocks(self) -> dict[str, list[int]]:
        return content_style_blocks(self.content_dim, self.shared_dim, self.modality_dim, self.modalities)

    def covariance(self) -> Tensor:
        """The ``(n, n)`` covariance of z = (c, s), [[Σ_c, Σ_c Bᵀ], [B Σ_c, Σ_s + B Σ_c Bᵀ]] (B = 0 unless
        ``content_dependent_style``), in the buffers' dtype."""
        cov_c, cov_s = self.sigma_content, self.sigma_style
        specific = [getattr(self, f"sigma_{name}") for name in self.specific]
        if not self.content_dependent_style:
            return torch.block_diag(cov_c, cov_s, *specific)
        cross = self.style_weight @ cov_c
        top = torch.cat([cov_c, cross.T], dim=1)
        shared = torch.cat([top, torch.cat([cross, cov_s + cross @ self.style_weight.T], dim=1)])
        return torch.block_diag(shared, *specific)

    def describe(self) -> str:
        law = "Wishart-drawn covariances Σ_c, Σ_s" if self.dependence else "identity covariances"
        shift = ", style shifted by B c + a" if self.content_dependent_style else ""
        style_dim = self.shared_dim - self.content_dim
        specific = f" + {self.modalities} modality-specific blocks of {self.modality_dim}" if self.specific else ""
        return f"content-style normals ({self.content_dim} content + {style_dim} style dims{specific}, {law}{shift})"


@CONDITIONALS.register("content_style")
class ContentStyleConditional(Conditional):
    """c+ = c exactly; s+ = s + m ⊙ ε, m_i ~ Bernoulli(p_change), ε ~ N(0, σ² I) or N(0, Σ_a).

    ``sample(z (batch, n), generator) -> (batch, n)``. Options: ``content_dim``
    (1..n-1, default n // 2), ``p_change`` in [0, 1] (default 1.0), ``sigma`` > 0
    (default 1.0; must stay 1.0 with ``dependence``), ``dependence``: Σ_a ~
    Wishart(df = style size, I); ``modality_dim`` and ``modalities`` as the marginal's: the
    modality-specific blocks after the style are kept exactly (m+ = m). Buffers: ``sigma_change``
    (covariance of ε) and ``chol_change``.
    """

    OPTION_DOCS = {
        'content_dim': 'content dimensions, 1..n-1 (default n // 2)',
        'p_change': 'probability in [0, 1] that a style coordinate changes',
        'sigma': '> 0, scale of a style change (must stay 1.0 with dependence)',
        'dependence': 'style changes ε ~ N(0, Σ_a), Σ_a ~ Wishart(df = style size, I), else N(0, I)',
        'modality_dim': '(>= 0) dimensions of each modality-specific block after the style, kept exactly (0: none)',
        'modalities': '(>= 1) number of modality-specific blocks when modality_dim > 0',
    }

    def __init__(
        self,
        space: Space,
        rng: torch.Generator,
        *,
        content_dim: int | None = None,
        p_change: float = 1.0,
        sigma: float = 1.0,
        dependence: bool = False,
        modality_dim: int = 0,
        modalities: int = 2,
    ):
        super().__init__()
        self.space = space
        self.modality_dim, self.modalities = modality_layout(space, modality_dim, modalities)
        self.shared_dim = shared_dims(space, modality_dim, modalities)
        self.content_dim = split_dims(space, content_dim, "dgp.conditional", self.shared_dim)
        self.p_change = checks.probability("p_change", p_change)
        self.sigma = checks.latent_scale("sigma", sigma)
        self.dependence = checks.boolean("dependence", dependence)
        if self.dependence and self.sigma != 1.0:
            checks.fail(
                "sigma", sigma,
                "has no effect with dgp.conditional.dependence=true (ε ~ N(0, Σ_a)); leave it at 1.0",
            )
        ks = self.shared_dim - self.content_dim
        cov = wishart_identity(ks, rng) if self.dependence else self.sigma**2 * torch.eye(ks, dtype=torch.float64)
        self.register_buffer("sigma_change", cov)
        self.register_buffer("chol_change", torch.linalg.cholesky(cov))

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        c, s, kept = z[:, : self.content_dim], z[:, self.content_dim : self.shared_dim], z[:, self.shared_dim :]
        changed = torch.rand(s.shape, generator=generator, device=z.device, dtype=z.dtype) < self.p_change
        eps = gaussian(z.shape[0], self.chol_change.to(z.dtype), generator)
        return torch.cat([c, torch.where(changed, s + eps, s), kept], dim=-1)

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) = ∞: the content is kept exactly, c+ = c, and I(z; z+) >= I(c; c) = ∞ for continuous c.

        ``parts["style"]`` is the style block's own information I(s; s+ | c): ∞ when ``p_change`` < 1 (each
        style coordinate is kept exactly with probability 1 - p_change); for ``p_change`` = 1 and a Gaussian
        marginal, ½ log det(I + Σ_{s|c} Σ_ε⁻¹) with Σ_{s|c} = Σ_ss - Σ_sc Σ_cc⁻¹ Σ_cs the style covariance given
        the content and Σ_ε that of the change; not available for other marginals. ``options`` are not used.
        """
        style = self._style_information(marginal)
        note = (f"infinite: the {self.content_dim} content dimensions are kept exactly (c+ = c); the style block "
                f"alone carries I(s; s+ | c) = {style.nats:.6g} nats ({style.method}: {style.note})")
        return Information(math.inf, None, "closed form", note, parts={"style": style})

    def _style_information(self, marginal: Marginal) -> Information:
        """I(s; s+ | c) (see :meth:`mutual_information`)."""
        if self.p_change < 1.0:
            return Information(math.inf, None, "closed form", f"each style coordinate is kept exactly with "
                               f"probability 1 - p_change = {1.0 - self.p_change:g}")
        cov = gaussian_covariance(marginal)
        if cov is None:
            return Information.unavailable("the style given the content is Gaussian only for a Gaussian marginal")
        k, n = self.content_dim, self.shared_dim
        cov = cov[:n, :n]  # the modality-specific blocks are independent of content and style
        style_given_content = cov[k:, k:] - cov[k:, :k] @ torch.linalg.solve(cov[:k, :k], cov[:k, k:])
        note = "½ log det(I + Σ_{s|c} Σ_ε⁻¹), Σ_{s|c} the style covariance given the content"
        nats = gaussian_information(style_given_content, self.sigma_change.cpu())
        return Information(nats, None, "closed form", note)

    def blocks(self) -> dict[str, list[int]]:
        return content_style_blocks(self.content_dim, self.shared_dim, self.modality_dim, self.modalities)

    def changed_blocks(self) -> list[str]:
        """The blocks a positive may change (the style); every other block is kept exactly."""
        return ["style"]

    def describe(self) -> str:
        noise = "N(0, Σ_a), Σ_a Wishart-drawn" if self.dependence else f"N(0, {self.sigma:g}² I)"
        kept = f"content kept ({self.content_dim} dims)"
        return f"{kept}, each style dim changed with probability {self.p_change:g} by {noise}"
