"""A data-generating process: space, marginal, conditional, negatives and mixing in one object.

The process owns every parameter it needs. They are drawn once, at construction,
from named streams of its seed (``dgp.space``, ``dgp.marginal``, ...), so two
processes built from the same config and seed are identical and adding a
component never changes the draws of another. Batches are then sampled with an
explicit generator::

    process = build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 5.0}}, seed=0)
    batch = process.sample(6144, process.make_generator(1))
    batch.x, batch.x_pos   # (6144, 10) observations g(z), g(z+)

A process with views (``views: {name: subsets, ...}``, :mod:`dgp.views`) observes the anchor and each
positive through the mixing of its view: ``batch.views`` holds every view's observations.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn

from dgp import checks
from dgp.files import load_tensors
from dgp.conditionals import CONDITIONALS
from dgp.information import Information
from dgp.marginals import MARGINALS
from dgp.mixing import MIXINGS
from dgp.negatives import NEGATIVES
from dgp.registry import option_parameters
from dgp.spaces import SPACES
from dgp.defaults import DEFAULT_CONFIG, DTYPE_NAMES, SAMPLERS, SINGLE_VIEW
from dgp.views import VIEWS
from dgp.seeding import generator as stream_generator

OPTIONAL: dict[str, Any] = {"views": SINGLE_VIEW}
"""Components a config may set that :data:`DEFAULT_CONFIG` leaves out: a resolved config holds one only
when it differs from this default, so the configs (and fingerprints) of the processes without it stay as
they were."""

COMPONENTS = ("space", "marginal", "conditional", "negatives", "mixing", "views")
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass
class Batch:
    """One training batch. Latents ``z``, ``z_pos``: ``(B, n)``; observations ``x = g(z)``, ``x_pos = g(z_pos)``.

    ``z_neg``/``x_neg`` are None, ``(M, n)`` shared by all anchors, or ``(B, K, n)`` per anchor.

    With V >= 2 views, ``views`` holds each view's observations ``(B, D_v)`` (``x`` and ``x_pos`` are views 1
    and 2, ``z_pos`` view 2's latent) and ``views_neg`` each view's observations of the negatives (view v of a
    negative z⁻ sees a positive of its own drawn from p(· | z⁻) when v >= 2), in ``z_neg``'s leading shape;
    both are None with one view.

    ``u``: the auxiliary variable each anchor was drawn given, ``(B,)`` int64 segment labels in 0..S-1, where the
    marginal draws one (:meth:`dgp.base.Marginal.sample_labelled`; e.g. ``segments``), else None.
    """

    z: Tensor
    z_pos: Tensor
    z_neg: Tensor | None
    x: Tensor
    x_pos: Tensor
    x_neg: Tensor | None
    views: tuple[Tensor, ...] | None = None
    views_neg: tuple[Tensor, ...] | None = None
    u: Tensor | None = None


def resolve_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` merged over :data:`DEFAULT_CONFIG`; unknown top-level keys are rejected.

    A component given as a bare string is read as ``{"name": string}``.
    """
    if config is not None and not isinstance(config, Mapping):
        checks.fail("dgp", config, "a mapping of process keys (dim, dtype, space, marginal, ...)")
    resolved = copy.deepcopy(DEFAULT_CONFIG)
    for key, value in dict(config or {}).items():
        if key not in DEFAULT_CONFIG and key not in OPTIONAL:
            checks.fail(f"dgp.{key}", value, f"unknown key; allowed: {', '.join([*DEFAULT_CONFIG, *OPTIONAL])}")
        if key in COMPONENTS:
            if not isinstance(value, (str, Mapping)) or (isinstance(value, Mapping) and "name" not in value):
                checks.fail(f"dgp.{key}", value, "a component name, or a mapping with a 'name' entry")
            value = {"name": value} if isinstance(value, str) else dict(value)
        if key in OPTIONAL and value == OPTIONAL[key]:
            continue
        resolved[key] = value
    return resolved


def own_seed(config: Mapping[str, Any] | None, seed: int) -> tuple[Mapping[str, Any] | None, int]:
    """A config's own ``seed`` entry (a run config's ``dgp.seed``) taken out of it: the config without it, and
    the seed the process is drawn from, that entry when it is set (not None), else ``seed``. So runs can share
    one process while their root seeds differ, and a config without the entry keeps its fingerprint."""
    if isinstance(config, Mapping) and "seed" in config:
        own = config["seed"]
        config = {k: v for k, v in config.items() if k != "seed"}
        seed = seed if own is None else own
    return config, seed


def mixed_rows(z: Tensor, z_pos: Tensor, z_neg: Tensor | None) -> Tensor:
    """The latents of a batch as the rows of one mixing pass: z (B, n), z+ (B, n), then the negatives flattened to
    (B·K or M, n)."""
    return torch.cat([z, z_pos] + ([z_neg.reshape(-1, z.shape[-1])] if z_neg is not None else []))


BLOCK_OPTIONS = ("modality_dim", "modalities")
"""Options that lay out the modality-specific latent blocks: a marginal and a conditional that both take one describe
one layout (the content block's size is compared once both are built, :meth:`Process._check_blocks`)."""


def _check_block_options(cfg: Mapping[str, Any]) -> None:
    """A ValueError naming the conditional's block option (:data:`BLOCK_OPTIONS`) that differs from the marginal's,
    defaults included, before either is built on it (unknown names are left to the registries to name)."""
    try:
        taken = [option_parameters(registry.get(cfg[part]["name"], f"dgp.{part}.name"))[0]
                 for part, registry in (("marginal", MARGINALS), ("conditional", CONDITIONALS))]
    except ValueError:
        return
    for option in BLOCK_OPTIONS:
        if option in taken[0] and option in taken[1]:
            given = [cfg[part].get(option, params[option].default)
                     for part, params in zip(("marginal", "conditional"), taken)]
            if given[0] != given[1] and (option != "modalities" or cfg["marginal"].get("modality_dim")):
                checks.fail(f"dgp.conditional.{option}", given[1], f"the marginal's is {given[0]} "
                            f"(dgp.marginal.{option}), and both describe one layout of the latent blocks: give both the "
                            "same")


def allocation_failure(exc: BaseException) -> str | None:
    """When ``exc`` is running out of memory (a MemoryError, torch's OutOfMemoryError, or the CPU allocator's
    RuntimeError, whose text says it cannot allocate memory): its first line, or its type's name when it has no
    text; else None."""
    if not isinstance(exc, (MemoryError, torch.OutOfMemoryError)) and "allocate memory" not in str(exc):
        return None
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def _memory_for(n: int, key: str) -> Iterator[None]:
    """A draw of ``n`` rows that runs out of memory ends as a ValueError naming ``key`` and ``n``, not as the
    allocator's error."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        first = allocation_failure(exc)
        if first is None:
            raise
        raise ValueError(f"{key}={n} is invalid: drawing that many rows needs more memory than this machine has "
                         f"({first}); draw fewer") from None


class Process(nn.Module):
    """z ~ p(z) on a space, z+ ~ p(z+|z), optional negatives, observations x = g(z).

    Build with :func:`build_process`. All drawn parameters are buffers of the
    sub-modules: ``state_dict()`` holds them, ``.to(device)`` moves them.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, seed: int = 0):
        super().__init__()
        config, seed = own_seed(config, seed)
        self.config = cfg = resolve_config(config)
        self.seed = checks.integer("dgp.seed", seed, minimum=0)
        dim = checks.integer("dgp.dim", cfg["dim"], minimum=1)
        dtype = DTYPES[checks.choice("dgp.dtype", cfg["dtype"], DTYPES)]

        def rng(name: str) -> torch.Generator:
            return stream_generator(self.seed, f"dgp.{name}")

        self.space = SPACES.build(cfg["space"], dim, rng("space"), key="dgp.space")
        self.marginal = MARGINALS.build(cfg["marginal"], self.space, rng("marginal"), key="dgp.marginal")
        _check_block_options(cfg)
        self.conditional = CONDITIONALS.build(cfg["conditional"], self.space, rng("conditional"), key="dgp.conditional")
        self.negatives = NEGATIVES.build(cfg["negatives"], self.space, rng("negatives"), key="dgp.negatives")
        self.conditional.check_marginal(self.marginal)
        self.negatives.check_marginal(self.marginal)
        self.sampler = _sampler(cfg["sampler"])
        for part in (self.marginal, self.conditional, self.negatives):
            part.sampler = self.sampler
        self._check_blocks()
        self.views = VIEWS.build(cfg.get("views", SINGLE_VIEW), self.blocks, dim, key="dgp.views")
        for v, dims in enumerate(self.views.dims if self.view_count > 1 else []):  # index_select's, not saved
            self.register_buffer(f"_seen{v}", torch.tensor(dims), persistent=False)
        sizes = self.observed_dims
        self.mixing = MIXINGS.build(cfg["mixing"], sizes[0], rng("mixing"), key="dgp.mixing")
        self.view_mixings = nn.ModuleList(
            self.mixing if self.views.shared_mixing
            else MIXINGS.build(cfg["mixing"], size, rng(f"mixing.view{v + 1}"), key="dgp.mixing")
            for v, size in enumerate(sizes) if v > 0
        )
        self.register_buffer("_anchor", torch.zeros((), dtype=dtype), persistent=False)
        self.to(dtype)

    def _check_blocks(self) -> None:
        """Marginal and conditional must agree on the dimensions of every block both define."""
        ours = self.marginal.blocks()
        for name, dims in self.conditional.blocks().items():
            if name in ours and ours[name] != dims:
                checks.fail(
                    "dgp.conditional.content_dim" if name == "content" else f"dgp.conditional ({name} block)",
                    len(dims),
                    f"the marginal's {name} block has {len(ours[name])} dimensions "
                    f"({ours[name][0]}..{ours[name][-1]}); give both the same",
                )

    @property
    def dim(self) -> int:
        return int(self.config["dim"])

    @property
    def device(self) -> torch.device:
        return self._anchor.device

    @property
    def dtype(self) -> torch.dtype:
        return self._anchor.dtype

    @property
    def view_count(self) -> int:
        """The number V of views (1 without a views component)."""
        return len(self.views.dims)

    @property
    def observed_dims(self) -> list[int]:
        """Each view's observation dimension D_v (``[dim]`` with one view)."""
        return [len(dims) for dims in self.views.dims]

    def make_generator(self, seed: int) -> torch.Generator:
        """A generator on the process's device, for :meth:`sample`."""
        return torch.Generator(device=self.device).manual_seed(int(seed))

    def sample_latents(self, n: int, generator: torch.Generator) -> Tensor:
        """``(n, dim)`` draws from the marginal p(z)."""
        n = self._check_draw(n, generator, "n")
        with _memory_for(n, "n"):
            return self.marginal.sample(n, generator)

    def mix(self, z: Tensor) -> Tensor:
        """Observations x = g(z) for latents of shape ``(..., dim)``; with views, view 1's (:meth:`mix_view`)."""
        return self.mix_view(0, z)

    def mix_view(self, view: int, z: Tensor) -> Tensor:
        """View ``view``'s (0-based) observations f_v(z[S_v]) of latents ``(..., dim)``: shape ``(..., D_v)``."""
        mixing = self.mixing if view == 0 else self.view_mixings[view - 1]
        flat = z.reshape(-1, self.dim)
        if self.view_count > 1:
            flat = flat.index_select(-1, getattr(self, f"_seen{view}"))
        return mixing(flat).reshape(*z.shape[:-1], -1)

    def _check_draw(self, n: Any, generator: Any, key: str) -> int:
        n = checks.integer(key, n, minimum=1)
        if not isinstance(generator, torch.Generator):
            checks.fail("generator", generator, "a torch.Generator, e.g. process.make_generator(seed)")
        if generator.device.type != self.device.type:
            checks.fail("generator", f"on {generator.device}", f"a generator on the process's device {self.device}")
        return n

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        """A fresh batch: anchors, positives, negatives, and all of them mixed in one pass."""
        batch_size = self._check_draw(batch_size, generator, "batch_size")
        with _memory_for(batch_size, "batch_size"):
            return self._sample_views(batch_size, generator) if self.view_count > 1 else self._sample(batch_size, generator)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        z, z_pos, z_neg, u = self.draw_latents(batch_size, generator)
        return self.observed(z, z_pos, z_neg, u, self.mixing(mixed_rows(z, z_pos, z_neg)))

    def draw_latents(self, batch_size: int, generator: torch.Generator
                     ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """The latents of a single-view batch as :meth:`sample` draws them: anchors z (B, n), positives z+ (B, n),
        the separate negatives ((B, K, n), (M, n) or None) and the anchors' auxiliary variable u ((B,) or None);
        ``batch_size`` and ``generator`` checked by the caller."""
        z, u = self.marginal.sample_labelled(batch_size, generator)
        z_pos = self.conditional.sample_labelled(z, u, self.marginal, generator)
        return z, z_pos, self.negatives.sample(z, self.marginal, generator), u

    def observed(self, z: Tensor, z_pos: Tensor, z_neg: Tensor | None, u: Tensor | None, x_all: Tensor) -> Batch:
        """The batch of latents from :meth:`draw_latents` with ``x_all``, the mixing of their
        :func:`mixed_rows`."""
        size = z.shape[0]
        x_neg = x_all[2 * size :].reshape(z_neg.shape) if z_neg is not None else None
        return Batch(z, z_pos, z_neg, x_all[:size], x_all[size : 2 * size], x_neg, u=u)

    def view_latents(self, z: Tensor, generator: torch.Generator) -> list[Tensor]:
        """The latent each view observes for anchors ``z (N, dim)``: z itself for view 1, for each view v >= 2
        a positive of its own drawn from p(· | z), in view order."""
        return [z] + [self.conditional.sample(z, generator) for _ in range(self.view_count - 1)]

    def _sample_views(self, batch_size: int, generator: torch.Generator) -> Batch:
        """:meth:`sample` with V >= 2 views: anchors z, one positive per view v >= 2, the negatives and their
        positives, each seen through its view's mixing."""
        z, u = self.marginal.sample_labelled(batch_size, generator)
        latents = self.view_latents(z, generator)
        views = tuple(self.mix_view(v, latent) for v, latent in enumerate(latents))
        z_neg = self.negatives.sample(z, self.marginal, generator)
        views_neg = None
        if z_neg is not None:
            seen = self.view_latents(z_neg.reshape(-1, self.dim), generator)
            views_neg = tuple(self.mix_view(v, latent).reshape(*z_neg.shape[:-1], -1) for v, latent in enumerate(seen))
        return Batch(z, latents[1], z_neg, views[0], views[1], views_neg[0] if views_neg else None, views, views_neg,
                     u)

    def mutual_information(self, **options: Any) -> Information:
        """I(z; z+) in nats, from the conditional given the marginal (:meth:`dgp.base.Conditional.mutual_information`).

        A closed form or a quadrature where one exists; otherwise a Monte-Carlo estimate, for which ``options``
        must hold ``generator`` (e.g. ``process.make_generator(seed)``) and may set the sizes ``n`` and ``m``
        (:func:`dgp.information.monte_carlo_information`). InfoNCE with K candidates bounds it:
        I(z; z+) >= log K - L.
        """
        return self.conditional.mutual_information(self.marginal, **options)

    @property
    def blocks(self) -> dict[str, list[int]]:
        """Named groups of latent dimensions (content/style, Λ groups); empty if the DGP has none."""
        return {**self.marginal.blocks(), **self.conditional.blocks()}

    @property
    def lambda_true(self) -> Tensor | None:
        """The conditional's per-dimension concentrations Λ, or None."""
        return self.conditional.lambda_true()

    @property
    def lambda_groups(self) -> list[list[int]] | None:
        """Dimensions sharing one Λ value, in order of first appearance; None without Λ."""
        lam = self.lambda_true
        if lam is None:
            return None
        groups: dict[float, list[int]] = {}
        for i, value in enumerate(lam.tolist()):
            groups.setdefault(value, []).append(i)
        return list(groups.values())

    def shortfalls(self) -> int:
        """The rows its block samplers have left without an accepted proposal so far (:mod:`dgp.blocks`), over
        the marginal, conditional and negatives; reading it makes the host wait for the device."""
        return sum(part.shortfalls.total() for part in (self.marginal, self.conditional, self.negatives))

    def fingerprint(self) -> str:
        """A stable hash of the config, the seed and every drawn parameter (device-independent).

        Config numbers are hashed as floats (:func:`dgp.checks.canonical`), so ``kappa: 10`` and
        ``kappa: 10.0`` give the same fingerprint. ``sampler: 1`` is left out of the hash, so a process saved
        before ``dgp.sampler`` existed keeps its fingerprint (:func:`saved_config`).
        """
        config = {k: v for k, v in self.config.items() if (k, v) != ("sampler", 1)}
        return self.fingerprint_of(checks.canonical({"config": config, "seed": self.seed}))

    def fingerprint_of(self, header: Mapping[str, Any]) -> str:
        """The hash of ``header`` (JSON) followed by every drawn parameter; :meth:`fingerprint` hashes the
        canonical config and seed."""
        h = hashlib.sha256()
        h.update(json.dumps(header, sort_keys=True).encode())
        for name, tensor in sorted(self.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def describe(self) -> str:
        """The process in words."""
        return (
            f"Latents on {self.space.describe()}, drawn from {self.marginal.describe()}; "
            f"positives: {self.conditional.describe()}; negatives: {self.negatives.describe()}; "
            f"observed through {self.mixing.describe()}" + ("." if self.view_count == 1 else f"; {self.views.describe()}.")
        )

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild this exact process: config, seed, fingerprint and drawn
        parameters, as plain containers and CPU tensors (see :func:`load_process`)."""
        return {
            "config": self.config,
            "seed": self.seed,
            "fingerprint": self.fingerprint(),
            "state": {k: v.detach().cpu() for k, v in self.state_dict().items()},
        }

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` to ``path`` (a ``dgp.pt`` file, read back by :func:`load_process`)."""
        path = Path(path)
        torch.save(self.to_dict(), path)
        return path


def build_process(config: Mapping[str, Any] | None = None, seed: int = 0) -> Process:
    """Build a process from a plain config dict (see :data:`DEFAULT_CONFIG`; its own ``seed`` entry, when set,
    wins over ``seed``: :func:`own_seed`) and its seed."""
    return Process(config, seed)


def check_process(config: Mapping[str, Any] | None = None, seed: int = 0) -> Process:
    """Build every component of ``config`` to check it, quickly: the expensive draws (the mixing's
    condition-number search) are skipped and hold placeholders (:func:`dgp.checks.checking`),
    so the result is for checks only, never for an experiment. Its marginal's draws and its conditional's
    positives are checked to lie in the space (:func:`check_draws`)."""
    with checks.checking():
        process = Process(config, seed)
        check_draws(process)
    return process


DRAWS_CHECKED = 256
"""How many anchors, and their positives, :func:`check_draws` draws."""


def check_draws(process: Process, n: int = DRAWS_CHECKED) -> None:
    """A ValueError naming the component when any of ``n`` anchors of the marginal, or of their positives from
    the conditional, lies outside the space (``space.contains``: a non-finite row is outside every space). The
    draws come from a generator of their own (seed 0), so no stream of a run is touched."""
    generator = process.make_generator(0)
    z, u = process.marginal.sample_labelled(n, generator)
    z_pos = process.conditional.sample_labelled(z, u, process.marginal, generator)
    for part, drawn, what in (("marginal", z, "draws"), ("conditional", z_pos, "positives")):
        outside = ~process.space.contains(drawn)
        if bool(outside.any()):
            row = drawn[outside.nonzero()[0, 0]].tolist()
            shown = ", ".join(f"{v:.4g}" for v in row[:4]) + (", ..." if len(row) > 4 else "")
            checks.fail(f"dgp.{part}.name", process.config[part]["name"], f"{int(outside.sum())} of {n} of its {what} "
                        f"lie outside the space, {process.space.describe()} (one is [{shown}]): a {part} must draw "
                        "points of the space it is given")


SAVED_KEYS = ("config", "seed", "fingerprint", "state")
"""What :meth:`Process.to_dict` holds."""


def _sampler(value: Any) -> int:
    """``dgp.sampler`` checked: one of :data:`dgp.defaults.SAMPLERS`."""
    if isinstance(value, bool) or value not in SAMPLERS:
        checks.fail("dgp.sampler", value, f"allowed: {', '.join(map(str, SAMPLERS))} (the sampler versions)")
    return int(value)


def saved_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A saved process's config as it drew: one saved before ``dgp.sampler`` existed records no version and
    drew with version 1."""
    return {"sampler": 1, **config}


def load_process(saved: Mapping[str, Any] | str | Path, device: torch.device | str = "cpu") -> Process:
    """Rebuild a process from :meth:`Process.to_dict`'s mapping or a file :meth:`Process.save` wrote
    (a run's ``dgp.pt``), with its saved parameters loaded.

    The saved parameters, not fresh draws, are used: the process is built as :func:`check_process` builds
    it (the mixing's condition-number search skipped), then every buffer is loaded from the saved state;
    a fingerprint mismatch means the file was altered and raises a ValueError. A file is read with
    ``weights_only=True``: one holding anything but tensors and plain containers is refused, so it cannot
    run code.
    """
    if isinstance(saved, (str, Path)):
        saved = load_tensors(Path(saved))
    if not isinstance(saved, Mapping) or any(k not in saved for k in SAVED_KEYS):
        given = sorted(saved) if isinstance(saved, Mapping) else type(saved).__name__
        raise ValueError(f"a saved process is a mapping with keys {', '.join(SAVED_KEYS)}; got {given}")
    with checks.checking():  # every drawn parameter is a buffer the saved state replaces: skip the costly draws
        process = Process(saved_config(saved["config"]), saved["seed"])
    try:
        process.load_state_dict(saved["state"])
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise ValueError(f"the saved process's parameters do not fit its config: {exc}") from exc
    if saved["fingerprint"] != process.fingerprint():
        raise ValueError(
            f"saved process fingerprint {saved['fingerprint']} does not match its parameters "
            f"({process.fingerprint()}); the file is corrupt or was edited"
        )
    return process.to(device)
