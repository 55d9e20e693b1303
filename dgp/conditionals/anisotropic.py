"""Anisotropic normal positives (R24, Rusak et al. 2024/25, Sec. 4): δ ~ N(0, diag(1/Λ)).

Λ holds one precision per latent dimension: a high Λ_i keeps coordinate i
nearly unchanged ("content-like"), a low Λ_i lets it move ("style-like").

- Sphere of radius r: ``z+ = r (z/r + δ) / ‖z/r + δ‖``. With ``shell = t`` δ is
  redrawn until ``|1 - ‖z/r + δ‖| < t``, as in the official R24 code
  (brendel-group/AnInfoNCE, threshold 0.1, which accepts roughly 10-15 % of the
  candidates for the profiles below at n = 10).
- Box: each coordinate is an exact normal truncated to ``[low, high]``.
- R^n: ``z+ = z + δ``.

Profiles for ``lambdas`` (R24): ``"bimodal"`` = 25 for the first ``n // 2``
dimensions (the official ``int(n / 2)``) and 5 for the rest, i.e.
[25]*5 + [5]*5 at n = 10; ``"linear"`` = linspace(5, 25, n).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dgp import checks
from dgp.base import Conditional, Marginal, Space
from dgp.conditionals import CONDITIONALS
from dgp.conditionals.steps import log_step_density, step_information
from dgp.information import Information
from dgp.blocks import first_accepted
from dgp.spaces import Box, Euclidean, Sphere
from dgp.truncation import normal, truncated_normal

KEY = "dgp.conditional"
PROFILES = ("bimodal", "linear")
INITIAL_ACCEPTANCE = 0.1
"""Acceptance guess for the first rejection round of a call; later rounds use the rate measured so far."""
OVERDRAW = 1.2
"""Candidates per pending row and round: ``ceil(OVERDRAW / acceptance estimate)``."""
MAX_ROUND_ELEMENTS = 1 << 24
"""Upper bound on the number of candidate coordinates drawn in one rejection round."""
GIVE_UP_DRAWS = 10**6
GIVE_UP_RATE = 1e-3
"""After ``GIVE_UP_DRAWS`` candidates, an acceptance rate below ``GIVE_UP_RATE`` is a configuration error."""
SHELL_DRAWS = 1 << 15
"""Candidates per axis direction of the estimate of the shell's acceptance rate (:func:`shell_acceptance`)."""
SHELL_MARGIN = 0.5
"""The block plan assumes this fraction of the estimated acceptance rate."""


def shell_acceptance(lam: Tensor, shell: float) -> float:
    """An estimate of the lowest acceptance rate P(|1 - ‖u + δ‖| < shell), δ ~ N(0, diag(1/Λ)), over the unit
    anchors u: the smallest Monte-Carlo rate over the axis directions ±e_i (where the variance Σ u_i²/Λ_i of
    uᵀδ takes its extremes), :data:`SHELL_DRAWS` candidates each from a fixed seed, less three standard
    errors. It does not consume the process's random streams."""
    n = lam.numel()
    generator = torch.Generator().manual_seed(0)
    delta = torch.randn(SHELL_DRAWS, n, generator=generator, dtype=torch.float64) * lam.to(torch.float64).rsqrt()
    norms = (delta.unsqueeze(0) + torch.eye(n, dtype=torch.float64).unsqueeze(1)).norm(dim=-1)
    rates = ((1.0 - norms).abs() < shell).double().mean(dim=1)
    low = float(rates.min())
    return max(0.0, low - 3.0 * math.sqrt(low * (1.0 - low) / SHELL_DRAWS))


def lambda_profile(lambdas: Any, n: int) -> Tensor:
    """Λ as a float64 tensor ``(n,)`` from a profile name or an explicit list of n positive numbers."""
    key = "lambdas"
    if isinstance(lambdas, str):
        checks.choice(key, lambdas, PROFILES)
        if lambdas == "bimodal":
            return torch.tensor([25.0] * (n // 2) + [5.0] * (n - n // 2), dtype=torch.float64)
        return torch.linspace(5.0, 25.0, n, dtype=torch.float64)
    if not isinstance(lambdas, (list, tuple)):
        checks.fail(key, lambdas, f"a profile name ({', '.join(PROFILES)}) or a list of {n} positive numbers")
    if len(lambdas) != n:
        checks.fail(key, lambdas, f"needs exactly {n} entries (one per latent dimension), got {len(lambdas)}")
    low, high = checks.FLOAT32_RANGE
    for i, value in enumerate(lambdas):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            checks.fail(key, lambdas, f"every entry must be a finite number > 0; entry {i} is {value!r}")
        if not low <= value <= high:
            checks.fail(key, lambdas, f"every entry must lie in [{low:.3g}, {high:.3g}], where float32 holds Λ and "
                                      f"1/√Λ; entry {i} is {value!r}")
    return torch.tensor([float(v) for v in lambdas], dtype=torch.float64)


@CONDITIONALS.register("anisotropic")
class Anisotropic(Conditional):
    """p(z+ | z) with δ ~ N(0, diag(1/Λ)) around z (module docstring), for latents ``(batch, n)``.

    Options: ``lambdas`` ("bimodal", "linear" or n positive numbers), ``shell``
    (None or a threshold t > 0, sphere only). Buffer: ``lam`` ``(n,)``.
    Attribute ``acceptance_rate``: the fraction of candidates inside the shell
    during the last call to :meth:`sample` (1.0 without a shell, NaN before any call; a 0-d tensor on the
    device with sampler 2, which reads it without making a GPU wait). Attribute ``shell_acceptance``: the
    estimate of the lowest rate over the anchors the block sampler is planned with (:func:`shell_acceptance`).
    """

    OPTION_DOCS = {
        'lambdas': '"bimodal" ([25]*5 + [5]*5), "linear" (linspace(5, 25, n)) or n positive numbers: the concentrations Λ',
        'shell': "null, or t > 0: δ redrawn until |1 - ‖z/r + δ‖| < t, as R24's code does with 0.1 (sphere only)",
    }

    def __init__(self, space: Space, rng: torch.Generator | None = None, *, lambdas: Any = "bimodal",
                 shell: float | None = None):
        super().__init__()
        if not isinstance(space, (Sphere, Box, Euclidean)):
            checks.fail("dgp.space.name", type(space).__name__, "anisotropic needs sphere, box or euclidean")
        self.space = space
        self.profile = lambdas if isinstance(lambdas, str) else None
        self.register_buffer("lam", lambda_profile(lambdas, space.dim))
        self.shell = None if shell is None else checks.positive("shell", shell)
        if self.shell is not None and not isinstance(space, Sphere):
            checks.fail("shell", shell, "a rejection shell exists only on the sphere; use null")
        self.shell_acceptance = None if self.shell is None else shell_acceptance(self.lam, self.shell)
        if self.shell is not None and self.shell_acceptance < GIVE_UP_RATE:
            checks.fail(f"{KEY}.shell", self.shell,
                        f"accepts only about {self.shell_acceptance:.2g} of the candidates (at least {GIVE_UP_RATE:g} "
                        "is needed); widen the shell or raise Λ")
        self.acceptance_rate = math.nan

    def lambda_true(self) -> Tensor:
        return self.lam

    def blocks(self) -> dict[str, list[int]]:
        """Dimensions sharing one Λ value, named ``lambda_<value>``; empty when all values differ."""
        groups: dict[float, list[int]] = {}
        for i, value in enumerate(self.lam.tolist()):
            groups.setdefault(value, []).append(i)
        if len(groups) == self.space.dim:
            return {}
        named: dict[str, list[int]] = {}
        for value, dims in groups.items():
            name = f"lambda_{value:g}"
            named[name if name not in named else f"lambda_{value!r}"] = dims
        return named

    def sample(self, z: Tensor, generator: torch.Generator) -> Tensor:
        if isinstance(self.space, Box):
            self.acceptance_rate = 1.0
            return truncated_normal(z, self.lam.to(z).rsqrt(), self.space.low, self.space.high, generator,
                                    check=False)
        if isinstance(self.space, Euclidean):
            self.acceptance_rate = 1.0
            return normal(z, self.lam.to(z).rsqrt(), generator)
        w = self.displaced(z, generator)
        return self.space.radius * w / w.norm(dim=-1, keepdim=True)

    def displaced(self, z: Tensor, generator: torch.Generator) -> Tensor:
        """Sphere only: ``w = z/r + δ`` before normalisation, ``(batch, n)``; inside the shell if set."""
        if not isinstance(self.space, Sphere):
            raise TypeError("displaced() is defined for the sphere only")
        u = z / self.space.radius
        scale = self.lam.to(z).rsqrt()
        if self.shell is None:
            self.acceptance_rate = 1.0
            return normal(u, scale, generator)
        if self.sampler == 1:
            return self._shell_displaced(u, scale, generator)
        return self._shell_in_blocks(u, scale, generator)

    def _shell_in_blocks(self, u: Tensor, scale: Tensor, generator: torch.Generator) -> Tensor:
        """``w = u + δ`` with ``|1 - ‖w‖| < shell``, ``(batch, n)``: each row's first candidate inside the shell,
        drawn in the fixed blocks of :func:`dgp.blocks.first_accepted` planned with
        :attr:`shell_acceptance`; ``acceptance_rate`` becomes a device tensor."""
        accepted, drawn = [], 0

        def propose(rows: Tensor) -> tuple[Tensor, Tensor]:
            nonlocal drawn
            noise = torch.randn(rows.numel(), u.shape[1], generator=generator, device=u.device, dtype=u.dtype)
            w = u.index_select(0, rows) + scale * noise
            ok = (1.0 - w.norm(dim=-1)).abs() < self.shell
            accepted.append(ok.sum())
            drawn += rows.numel()
            return w, ok

        out = first_accepted(u.shape[0], SHELL_MARGIN * self.shell_acceptance, propose, u.device, self.shortfalls)
        self.acceptance_rate = torch.stack(accepted).sum() / drawn
        return out

    def _shell_displaced(self, u: Tensor, scale: Tensor, generator: torch.Generator) -> Tensor:
        """``w = u + δ`` with δ redrawn per row until ``|1 - ‖w‖| < shell``; ``(batch, n)``.

        Each round draws ``k`` candidates for every pending row and keeps its
        first accepted one, which is exact rejection sampling row by row.
        """
        batch, n = u.shape
        out = torch.empty_like(u)
        pending = torch.arange(batch, device=u.device)
        drawn, accepted, estimate = 0, 0, INITIAL_ACCEPTANCE
        while pending.numel():
            rows = pending.numel()
            k = max(1, min(math.ceil(OVERDRAW / estimate), MAX_ROUND_ELEMENTS // (rows * n)))
            noise = torch.randn(rows, k, n, generator=generator, device=u.device, dtype=u.dtype)
            w = u[pending].unsqueeze(1) + scale * noise
            norm = w.norm(dim=-1)
            ok = (1.0 - norm).abs() < self.shell
            drawn += rows * k
            accepted += int(ok.sum())
            done = ok.any(dim=1)
            first = ok[done].to(torch.uint8).argmax(dim=1)
            hit = torch.nonzero(done).squeeze(1)
            out[pending[hit]] = w[hit, first]
            pending = pending[~done]
            if drawn >= GIVE_UP_DRAWS and accepted < GIVE_UP_RATE * drawn:
                checks.fail(
                    f"{KEY}.shell", self.shell,
                    f"accepted only {accepted} of {drawn} candidates; widen the shell or raise Λ",
                )
            estimate = max(accepted, 1) / drawn
        self.acceptance_rate = accepted / drawn if drawn else math.nan
        return out

    def log_density(self, z_pos: Tensor, z: Tensor) -> Tensor:
        """log p(z+ | z), float64, for ``(..., n)`` inputs that broadcast (:func:`dgp.conditionals.steps.
        log_step_density` with λ_i = √(2/Λ_i); on the sphere the projected normal of z/r + δ); a ValueError
        with a shell."""
        if self.shell is not None:
            raise ValueError(self._shell_reason())
        centre = z.to(torch.float64) / self.space.radius if isinstance(self.space, Sphere) else z
        return log_step_density(self.space, z_pos, z, self._scales(), 2.0, centre)

    def _scales(self) -> Tensor:
        """λ_i = √(2/Λ_i) of the normal steps N(0, 1/Λ_i), ``(n,)`` float64 on the CPU."""
        return (2.0 / self.lam.to("cpu", torch.float64)).sqrt()

    def _shell_reason(self) -> str:
        return (f"with shell={self.shell:g}, p(z+|z) is divided by the acceptance probability "
                "P(|1 - ‖z/r + δ‖| < shell) of each anchor, which has no closed form")

    def mutual_information(self, marginal: Marginal, **options: Any) -> Information:
        """I(z; z+) in nats (:meth:`dgp.base.Conditional.mutual_information`): the quadrature on the box or the
        Gaussian closed form on R^n of :func:`dgp.conditionals.steps.step_information`; on the sphere, not
        available with a shell, else Monte Carlo (``options``: a ``generator`` and the sizes ``n``, ``m``)."""
        found = step_information(self.space, marginal, self._scales(), 2.0)
        if found is not None:
            return found
        if self.shell is not None:
            return Information.unavailable(self._shell_reason())
        return super().mutual_information(marginal, **options)

    def describe(self) -> str:
        lam = ", ".join(f"{v:g}" for v in self.lam.tolist())
        name = f" ({self.profile})" if self.profile else ""
        if isinstance(self.space, Sphere):
            where = "projected to the sphere"
        elif isinstance(self.space, Box):
            where = "truncated to the box"
        else:
            where = "in R^n"
        text = f"anisotropic normal δ ~ N(0, diag(1/Λ)), Λ = [{lam}]{name}, {where}"
        if self.shell is not None:
            text += f", δ redrawn until |1 - ‖z/r + δ‖| < {self.shell:g}"
        return text
