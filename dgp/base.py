"""Interfaces of the components a process is made of, and their contracts.

Each kind's base class declares every attribute the project reads of that kind, with its default; the
:class:`~dgp.contract.Contract` beside it (``SPACE_CONTRACT``, ``MARGINAL_CONTRACT``, ...) says which methods a component must define
itself and what each attribute may hold, and the kind's registry checks it once a component is built.

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
from dgp.contract import Contract, is_bool, is_count, is_dims, is_segments, optional_method
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


SPACE_CONTRACT = Contract("space", Space, {
    "contains": "contains(z, atol) -> (batch,) booleans", "project": "project(z) -> (batch, n)",
    "describe": "describe() -> str"}, {
    "dim": (is_count, "int >= 1: the space's dimension"),
    "uniform": (callable, "uniform(batch, generator, dtype) -> (batch, n) (the base's: a ValueError, no uniform law)")})


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

    def blocks(self) -> dict[str, list[int]]:
        """Named groups of latent dimensions (e.g. content/style); empty if none."""
        return {}

    tilt_limit: Any = None
    """None, or ``tilt_limit()``: the bound on β|z_i| below which the exponential tilt exp(β zᵀz⁻) p(z⁻) is
    normalisable (inf where every tilt is), which tilted negatives check (:mod:`dgp.negatives`)."""
    sample_tilted: Any = None
    """None, or ``sample_tilted(z, beta, num, generator) -> (batch, num, n)``: exact draws of that tilt, which
    tilted negatives use in place of resampling."""

    def describe(self) -> str:
        raise NotImplementedError


MARGINAL_CONTRACT = Contract("marginal", Marginal, {
    "sample": "sample(batch, generator) -> (batch, n)", "describe": "describe() -> str"}, {
    "segments": (is_segments, "None or an int >= 2: the segments its auxiliary variable u takes"),
    "sample_labelled": (callable, "sample_labelled(batch, generator) -> (z, u or None)"),
    "blocks": (callable, "blocks() -> {name: [dimensions]}"),
    "tilt_limit": (optional_method, "None or tilt_limit() -> float"),
    "sample_tilted": (optional_method, "None or sample_tilted(z, beta, num, generator) -> (batch, num, n)")})


class Conditional(Drawing):
    """p(z+ | z). Constructed as ``cls(space, rng, *, **options)``."""

    space: Space
    keeps_segment: bool = False
    """Whether each positive is a draw of its anchor's segment, z+ ~ p(z | u) with the anchor's u
    (:meth:`Marginal.sample_labelled`), so that it carries the anchor's label too."""
    log_density: Any = None
    """None, or ``log_density(z_pos, z)``: the normalised log p(z+ | z), broadcasting over leading axes; it gives a
    Monte-Carlo I(z; z+) (:meth:`mutual_information`) and the critic bounds of the evaluation."""

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

    def changed_blocks(self) -> list[str]:
        """The names of the blocks a positive changes (with views, evaluation scores them as each view sees them,
        ``<block>_view<v>``); none by default."""
        return []

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
        if self.log_density is None:
            return Information.unavailable(f"{type(self).__name__} has no normalised log-density p(z+|z)")
        return monte_carlo_information(marginal.sample, self.sample, self.log_density, **options)

    def describe(self) -> str:
        raise NotImplementedError


CONDITIONAL_CONTRACT = Contract("conditional", Conditional, {
    "sample": "sample(z, generator) -> (batch, n)", "describe": "describe() -> str"}, {
    "keeps_segment": (is_bool, "bool: each positive is a draw of its anchor's segment"),
    "log_density": (optional_method, "None or log_density(z_pos, z) -> log p(z+ | z)"),
    "sample_labelled": (callable, "sample_labelled(z, u, marginal, generator) -> (batch, n)"),
    "blocks": (callable, "blocks() -> {name: [dimensions]}"),
    "changed_blocks": (callable, "changed_blocks() -> [block names]"),
    "check_marginal": (callable, "check_marginal(marginal) -> None, or a ValueError"),
    "lambda_true": (callable, "lambda_true() -> (n,) tensor or None"),
    "mutual_information": (callable, "mutual_information(marginal, **options) -> dgp.information.Information")})


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


NEGATIVES_CONTRACT = Contract("negatives", Negatives, {
    "sample": "sample(z, marginal, generator) -> None, (m, n) or (batch, k, n)", "describe": "describe() -> str"}, {
    "from_marginal": (callable, "from_marginal() -> bool"),
    "check_marginal": (callable, "check_marginal(marginal) -> None, or a ValueError")})


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


MIXING_CONTRACT = Contract("mixing", Mixing, {
    "forward": "forward(z) -> x", "inverse": "inverse(x) -> z", "describe": "describe() -> str"}, {
    "condition_numbers": (callable, "condition_numbers() -> [float]")})


class Views(nn.Module):
    """Which latent dimensions each observation of a process sees (:mod:`dgp.views`). Constructed as
    ``cls(blocks, dim, *, **options)`` from the process's named latent blocks (name -> dimensions) and n.

    ``dims``: per view, the latent dimensions it sees, in the order its mixing takes them (set by the constructor);
    ``shared_mixing``: one mixing for every view; ``contrasted``, ``selection``, ``objective``: None, or the
    subsets of views the loss contrasts, how their coordinates are selected and how they are contrasted
    (Yao et al. 2024, :class:`dgp.views.Subsets`)."""

    dims: list[list[int]]
    shared_mixing: bool = False
    contrasted: Any = None
    selection: str | None = None
    objective: str | None = None

    def describe(self) -> str:
        raise NotImplementedError


def _is_subsets(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(s, tuple) and len(s) == 2 for s in value))


VIEWS_CONTRACT = Contract("views", Views, {"describe": "describe() -> str"}, {
    "dims": (is_dims, "a list of views, each a non-empty list of the latent dimensions it sees"),
    "shared_mixing": (is_bool, "bool: one mixing for every view"),
    "contrasted": (_is_subsets, "None or a list of (views, shared dimensions) pairs")})
