"""Interfaces of the components a process is made of.

Every component is a ``torch.nn.Module`` whose drawn parameters are *buffers*,
so ``state_dict`` holds them, ``.to(device)`` moves them and a fingerprint can
hash them. Parameters are drawn once, in ``__init__``, from the generator the
process hands over (``rng``); sampling methods take their own explicit
``generator`` and never touch torch's global RNG.

Shapes: latents are ``(batch, n)``; negatives are ``(m, n)`` when shared by all
anchors or ``(batch, k, n)`` when drawn per anchor.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from dgp.blocks import SAMPLER, Shortfalls
from dgp.information import Information, monte_carlo_information


class Space(nn.Module):
    """A latent space of dimension ``dim``."""

    dim: int

    def uniform(self, batch: int, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
        """``(batch, dim)`` uniform draws; a ValueError where no uniform law exists."""
        raise ValueError(f"space {type(self).__name__} has no uniform distribution")

    def contains(self, z: Tensor, atol: float = 1e-5) -> Tensor:
        """``(batch,)`` booleans: which rows of ``z`` lie in the space."""
        raise NotImplementedError

    def project(self, z: Tensor) -> Tensor:
        """The nearest point of the space for each row of ``z``."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class Drawing(nn.Module):
    """A component that draws: the version ``sampler`` of the rejection samplers it uses (:mod:`dgp.blocks`;
    the process sets it from ``dgp.sampler``) and the count ``shortfalls`` of rows they left short."""

    sampler: int = SAMPLER

    @property
    def shortfalls(self) -> Shortfalls:
        """This component's :class:`dgp.blocks.Shortfalls` (one per component, made on first use)."""
        found = self.__dict__.get("_shortfalls")
        if found is None:
            found = self.__dict__["_shortfalls"] = Shortfalls()
        return found


class Marginal(Drawing):
    """p(z) on a space. Constructed as ``cls(space, rng, *, **options)``."""

    space: Space
    segments: int | None = None
    """The number S of values 0..S-1 of the auxiliary variable u that a marginal drawing its latents given one
    labels them with (:meth:`sample_labelled`); None for a marginal without one."""

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` draws from p(z)."""
        raise NotImplementedError

    def sample_labelled(self, batch: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """``(z, u)``: ``(batch, n)`` draws from p(z) and the auxiliary variable ``(batch,)`` (int64, in
        0..segments-1) each was drawn given, or None for a marginal without one (the default: :meth:`sample`'s
        draws, the same random numbers)."""
        return self.sample(batch, generator), None

    def describe(self) -> str:
        raise NotImplementedError


class Conditional(Drawing):
    """p(z+ | z). Constructed as ``cls(space, rng, *, **options)``."""

    space: Space
    keeps_segment: bool = False
    """Whether each positive is a draw of its anchor's segment, z+ ~ p(z | u) with the anchor's u
    (:meth:`Marginal.sample_labelled`), so that it carries the anchor's label too."""

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` positives, one per row of ``z``."""
        raise NotImplementedError

    def sample_labelled(self, z: Tensor, u: Tensor | None, marginal: Marginal, generator: torch.Generator) -> Tensor:
        """``(batch, n)`` positives for anchors ``z`` drawn from ``marginal`` with their auxiliary variable ``u``
        (:meth:`Marginal.sample_labelled`'s, None for a marginal without one), as a batch's draw gives them; the
        default ignores ``u`` and ``marginal``: :meth:`sample`'s draws, the same random numbers."""
        return self.sample(z, generator)

    def blocks(self) -> dict[str, list[int]]:
        """Named groups of latent dimensions (e.g. content/style); empty if none."""
        return {}

    def check_marginal(self, marginal: Marginal) -> None:
        """A ValueError when this conditional cannot follow anchors of ``marginal`` (the process calls it once it
        has both); the default accepts every marginal."""

    def lambda_true(self) -> Tensor | None:
        """Per-dimension concentrations Λ for anisotropic conditionals, else None."""
        return None

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) in nats for anchors z ~ ``marginal`` and positives from this conditional.

        Conditionals with a closed form or a quadrature override this. The default estimates it by Monte
        Carlo (:func:`dgp.information.monte_carlo_information`; options ``generator``, a torch.Generator
        that is required, and the sizes ``n`` and ``m``) where the conditional has a normalised log-density
        ``log_density(z_pos, z)``, and is "not available" otherwise.
        """
        log_density = getattr(self, "log_density", None)
        if log_density is None:
            return Information.unavailable(f"{type(self).__name__} has no normalised log-density p(z+|z)")
        return monte_carlo_information(marginal.sample, self.sample, log_density, **options)

    def describe(self) -> str:
        raise NotImplementedError


class Negatives(Drawing):
    """How negatives are drawn. Constructed as ``cls(space, rng, *, **options)``."""

    def sample(self, z: Tensor, marginal: Marginal, generator: torch.Generator) -> Tensor | None:
        """Negatives for anchors ``z``: ``(m, n)`` shared, ``(batch, k, n)`` per anchor, or None."""
        raise NotImplementedError

    def from_marginal(self) -> bool:
        """Whether its draws are independent draws of p(z), as InfoNCE's bound on I(z; z+) needs of its
        negatives (False unless a component says so)."""
        return False

    def check_marginal(self, marginal: Marginal) -> None:
        """A ValueError when these negatives cannot be drawn for ``marginal`` whatever the anchors
        (the process calls it once it has both); the default accepts every marginal."""

    def describe(self) -> str:
        raise NotImplementedError


class Mixing(nn.Module):
    """An invertible map g: R^n -> R^n. Constructed as ``cls(dim, rng, *, **options)``."""

    def forward(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def inverse(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def condition_numbers(self) -> list[float]:
        """2-norm condition number of each linear layer (empty when there is none)."""
        return []

    def describe(self) -> str:
        raise NotImplementedError
