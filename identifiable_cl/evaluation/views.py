"""Evaluation of a process with views (:mod:`dgp.views`): every block predicted from every view's encoding.

For each view v, :func:`evaluate_views` scores view v's encoder on held-out samples of :class:`ViewSample`:
the latents are z (every block of the process) followed by what each view w >= 2 sees differently, the
blocks its positive changes (``style_view2``: the perturbed style s̃ of Daunhawer et al. 2023), so one
regression per view gives the R² of content, style, s̃ and each modality-specific block, as the multimodal
study's evaluation does (``main_mlp.py``: linear and kernel-ridge regression of c, s, s̃, m_1, m_2 from each
view's encoding, held out). View 1's metrics keep their plain keys (``r2_nonlinear_content`` ...), view v's
are prefixed ``view<v>_``.

The permuted-content control (``permuted_`` keys): the observations carry the content of another sample
(one random permutation of the rows, the same for every view) while the labels keep their own; the R² of
``content`` from such observations measures how much of the content the encoding reads from the other
blocks (through a content-dependent style, say), the R² of ``content_permuted`` how much it reads from the
content it was shown.

Views that contrast subsets (``dgp.views.contrast``, Yao et al. 2024) are also scored subset by subset
(:func:`shared_block_metrics`): from the coordinates of view v's encoding that the objective selects for subset s
(:class:`identifiable_cl.solvers.subsets.Selection`, its noise-free mode), the R² of the block the views of s
share (``shared_<s>``, s written as its view numbers joined by ``_``: ``shared_1_2_3``) and of the other latents
view v sees (``unshared_<s>``), linear and nonlinear, held out, under view v's prefix. The theorem's prediction:
the first near 1 from every view of s, the second low where the latents are independent; over every subset and
view (:func:`shared_block_summary`), ``r2_<kind>_shared_min`` and ``_shared_mean``, ``r2_<kind>_unshared_max``
and ``_unshared_mean``. The code's evaluation (``main_numerical.py``'s ``evaluate``) regresses each latent alone
from those coordinates.

The Gumbel selection is also scored as the code scores it, with noise: the code draws fresh Gumbel noise for each
evaluation batch and averages the R² over the batches; here, with ``eval.gumbel_draws`` D > 0, every score is also
the mean over D draws of the noise (from the evaluation's generator) of the R² on the coordinates the noisy top-k
selects, keys suffixed :data:`DRAWN` (``r2_nonlinear_shared_1_2_3_4_drawn``, and in the summary
``r2_nonlinear_shared_min_drawn`` ...). How far the selection is from uniform: ``gumbel_mean_gap``, the mean over
every subset s and view v of it of (mean of the k_s largest batch means of h_v − mean of the others) / (π/√6), the
Gumbel noise's standard deviation, and ``gumbel_mode_agreement``, the fraction of the D draws and every (s, v) whose
noisy top k_s is the mode's.
"""

from __future__ import annotations

import math
import types
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from identifiable_cl.evaluation.regression import linear_r2, nonlinear_r2
from identifiable_cl.evaluation.wrappers import Metrics, encode_latents, evaluate
from identifiable_cl.solvers.subsets import Selection

DRAWN = "_drawn"
"""Suffix of the shared-block scores averaged over draws of the Gumbel selection's noise (``eval.gumbel_draws``)."""
GUMBEL_STD = math.pi / math.sqrt(6)
"""The standard deviation of Gumbel(0, 1) noise, the scale of ``gumbel_mean_gap``."""


class ViewSample:
    """The process as :func:`identifiable_cl.evaluation.evaluate` reads it, for view ``view`` (0-based).

    ``sample_latents(n, generator)`` returns ``(n, dim)`` rows: z ``(n, process.dim)``, then for each view
    w >= 2 the blocks its positive changes (block ``<name>_view<w>``; the conditional names them with
    ``changed_blocks()``, and one that does not adds none), then with ``permuted`` the content of
    a permuted row (block ``content_permuted``). ``mix`` builds view ``view``'s latent from them (its own
    changed blocks, the permuted content in place of the content) and mixes it with the view's mixing.
    """

    def __init__(self, process: Any, view: int, permuted: bool = False):
        changed = process.conditional.changed_blocks
        if permuted and "content" not in process.blocks:
            raise ValueError("the permuted-content control needs a block named 'content'")
        self.process, self.view, self.permuted = process, view, permuted
        blocks = {name: list(dims) for name, dims in process.blocks.items()}
        self.slots: list[tuple[int, list[int], int]] = []  # (view, latent dims, first column)
        width = process.dim
        for w in range(1, process.view_count):
            for name in changed():
                dims = list(process.blocks[name])
                blocks[f"{name}_view{w + 1}"] = list(range(width, width + len(dims)))
                self.slots.append((w, dims, width))
                width += len(dims)
        if permuted:
            blocks["content_permuted"] = list(range(width, width + len(process.blocks["content"])))
            width += len(process.blocks["content"])
        self.blocks, self.dim, self.lambda_groups = blocks, width, None

    def sample_latents(self, n: int, generator: torch.Generator) -> Tensor:
        process = self.process
        latents = process.view_latents(process.sample_latents(n, generator), generator)
        z = latents[0]
        parts = [z] + [latents[w][:, dims] for w, dims, _ in self.slots]
        if self.permuted:
            order = torch.randperm(n, generator=generator, device=generator.device)
            parts.append(z[order][:, process.blocks["content"]])
        return torch.cat(parts, dim=-1)

    def mix(self, latents: Tensor) -> Tensor:
        process = self.process
        z = latents[:, : process.dim].clone()
        for w, dims, start in self.slots:
            if w == self.view:
                z[:, dims] = latents[:, start : start + len(dims)]
        if self.permuted:
            content = process.blocks["content"]
            z[:, content] = latents[:, self.blocks["content_permuted"]]
        return process.mix_view(self.view, z)


def evaluate_views(
    encoders: Sequence[Callable[[Tensor], Tensor]],
    process: Any,
    generator: torch.Generator,
    *,
    control: bool = False,
    gumbel_draws: int = 0,
    **options: Any,
) -> Metrics:
    """Held-out metrics of each view's encoder ``encoders[v]`` (x_v (B, D_v) -> h (B, d)) on
    :class:`ViewSample` s of ``process``: view 1's every metric under its plain key, view v's scalar
    metrics prefixed ``view<v>_``; with ``control`` (and a ``content`` block) the block R² of the
    permuted-content control prefixed ``permuted_`` (view 1) and ``view<v>_permuted_``; views that contrast subsets
    add :func:`shared_block_metrics` (drawn after the others; ``gumbel_draws`` its) and their
    :func:`shared_block_summary`. ``options`` are :func:`evaluate`'s."""
    out: Metrics = {}
    for v, encode in enumerate(encoders):
        prefix = "" if v == 0 else f"view{v + 1}_"
        scored = evaluate(encode, ViewSample(process, v), generator, **options)
        out.update({prefix + k: value for k, value in scored.items() if v == 0 or isinstance(value, float)})
        if control and "content" in process.blocks:
            plain = {**options, "rotation_reference": False, "enabled": None}
            scored = evaluate(encode, ViewSample(process, v, permuted=True), generator, **plain)
            out.update({f"{prefix}permuted_{k}": value for k, value in scored.items() if _block_r2(k, value)})
    if process.views.contrasted is not None:
        names = ("n_fit", "n_test", "nonlinear", "in_sample", "n_centres", "batch_size")
        shared = shared_block_metrics(encoders, process, generator, gumbel_draws=gumbel_draws,
                                      **{k: options[k] for k in names if k in options})
        out.update(shared)
        out.update(shared_block_summary(shared))
    return out


def shared_block_summary(metrics: Metrics) -> Metrics:
    """The theorem's two predictions over every subset and every view of it, from :func:`shared_block_metrics`'s
    ``metrics``, per regression (``r2_linear``, ``r2_nonlinear``): the least and the mean R² of a shared block
    (``<kind>_shared_min``, ``<kind>_shared_mean``: every shared block identified from every view that sees it
    means the min near 1) and the largest and the mean R² of the unshared latents (``<kind>_unshared_max``,
    ``<kind>_unshared_mean``: near 0 where the latents are independent); the same of the scores over draws of the
    Gumbel noise, suffixed :data:`DRAWN`. Empty for empty ``metrics``."""
    values: dict[tuple[str, str, str], list[float]] = {}
    for key, value in metrics.items():
        if "shared_" not in key:
            continue  # the Gumbel selection's gumbel_* measures
        kind = "r2_nonlinear" if "r2_nonlinear_" in key else "r2_linear"
        block = "unshared" if "_unshared_" in key else "shared"
        values.setdefault((kind, block, DRAWN if key.endswith(DRAWN) else ""), []).append(value)
    out: Metrics = {}
    for (kind, block, suffix), scores in values.items():
        if block == "shared":
            out[f"{kind}_shared_min{suffix}"] = min(scores)
        else:
            out[f"{kind}_unshared_max{suffix}"] = max(scores)
        out[f"{kind}_{block}_mean{suffix}"] = sum(scores) / len(scores)
    return out


def shared_block_metrics(
    encoders: Sequence[Callable[[Tensor], Tensor]],
    process: Any,
    generator: torch.Generator,
    *,
    n_fit: int = 20480,
    n_test: int = 40960,
    nonlinear: bool = True,
    in_sample: bool = False,
    n_centres: int = 1000,
    batch_size: int = 8192,
    gumbel_draws: int = 0,
) -> Metrics:
    """For each contrasted subset s of ``process``'s views and each view v of s: R² of the shared block I_s
    (``r2_linear_shared_<s>``, ``r2_nonlinear_shared_<s>``) and of view v's other latents S_v minus I_s
    (``..._unshared_<s>``; none when v sees only I_s), regressed from the coordinates c_{s,v} that
    :class:`~identifiable_cl.solvers.subsets.Selection` selects in view v's encoding ``encoders[v]`` (x_v (B, D_v)
    -> h (B, d)), keys prefixed ``view<v>_`` for v >= 2 (module docstring).

    Each view observes its latent from :meth:`dgp.Process.view_latents` of ``n_fit`` fresh anchors (and ``n_test``
    more, unless ``in_sample``); its labels are its own latent's columns. The selection reads the fit sample's
    encodings (their means, for ``gumbel``), on the narrowest view's width; where that is too narrow for it (the
    observations themselves under ``concat``, say) there are no such metrics. With the ``gumbel`` selection and
    ``gumbel_draws`` D > 0, also each score's mean over D draws of the selection's noise from ``generator`` (keys
    suffixed :data:`DRAWN`; a set of coordinates already scored is not fitted again), ``gumbel_mean_gap`` and
    ``gumbel_mode_agreement`` (module docstring)."""
    views = process.views

    def draw(n: int) -> tuple[list[Tensor], list[Tensor]]:
        latents = process.view_latents(process.sample_latents(n, generator), generator)
        mixed = [types.SimpleNamespace(mix=lambda z, v=v: process.mix_view(v, z)) for v in range(len(latents))]
        return latents, [encode_latents(encode, mixed[v], latents[v], batch_size) for v, encode in enumerate(encoders)]

    def regressed(kind: str, v: int, labels: list[int], columns: Tensor) -> list[float]:
        pair = (None, None) if in_sample else (z_test[v][:, labels], h_test[v][:, columns])
        if kind == "r2_linear":
            return linear_r2(z_fit[v][:, labels], h_fit[v][:, columns], *pair, in_sample=in_sample).per_dim
        return nonlinear_r2(z_fit[v][:, labels], h_fit[v][:, columns], *pair, in_sample=in_sample,
                            generator=generator, n_centres=n_centres).per_dim

    fitted: dict[tuple[str, int, int, tuple[int, ...]], list[float]] = {}

    def scored(coordinates: list[list[Tensor]]) -> Metrics:
        """The R² of every subset's blocks from every view of it, on ``coordinates`` (per subset, per view)."""
        out: Metrics = {}
        for i, ((subset, shared), chosen) in enumerate(zip(views.contrasted, coordinates)):
            name = "shared_" + "_".join(str(v + 1) for v in subset)
            for v, columns in zip(subset, chosen):
                rest = [j for j in views.dims[v] if j not in shared]
                prefix = "" if v == 0 else f"view{v + 1}_"
                for kind in kinds:
                    key = (kind, i, v, tuple(columns.tolist()))
                    if key not in fitted:
                        fitted[key] = regressed(kind, v, shared + rest, columns)
                    per_dim = fitted[key]
                    out[f"{prefix}{kind}_{name}"] = sum(per_dim[: len(shared)]) / len(shared)
                    if rest:
                        out[f"{prefix}{kind}_un{name}"] = sum(per_dim[len(shared):]) / len(rest)
        return out

    z_fit, h_fit = draw(n_fit)
    z_test, h_test = (None, None) if in_sample else draw(n_test)
    width = min(h.shape[1] for h in h_fit)
    if width < Selection.required(views):
        return {}
    kinds = ("r2_linear", "r2_nonlinear") if nonlinear else ("r2_linear",)
    selection = Selection(views, width)
    mode = selection.coordinates(h_fit)
    out = scored(mode)
    if selection.mode == "gumbel" and gumbel_draws > 0:
        widest = Selection(views, max(h.shape[1] for h in h_fit))
        drawn = [selection.coordinates(h_fit, widest.noise(generator, h_fit[0])) for _ in range(gumbel_draws)]
        runs = [scored(coordinates) for coordinates in drawn]
        out.update({key + DRAWN: sum(run[key] for run in runs) / gumbel_draws for key in runs[0]})
        out.update(gumbel_spread(selection, h_fit, mode, drawn))
    return out


def gumbel_spread(selection: Selection, hs: Sequence[Tensor], mode: list[list[Tensor]],
                  drawn: Sequence[list[list[Tensor]]]) -> Metrics:
    """How far the Gumbel ``selection`` is from uniform on the encodings ``hs`` (N, d_v) per view: ``gumbel_mean_gap``,
    the mean over its (subset s, view v) pairs with k_s < d_v of (mean of the k_s largest batch means of h_v − mean
    of the other d_v − k_s) / (π/√6), and ``gumbel_mode_agreement``, the fraction of the draws ``drawn`` and pairs
    whose coordinates are the ``mode``'s (both per subset, per view of it, as :meth:`Selection.coordinates`)."""
    gaps = []
    for i, v in selection.pairs:
        means = hs[v].detach().mean(0).sort(descending=True).values
        k = selection.sizes[i]
        if k < means.shape[0]:
            gaps.append(float(means[:k].mean() - means[k:].mean()) / GUMBEL_STD)
    agree = [torch.equal(a, b) for coordinates in drawn for per, per_mode in zip(coordinates, mode)
             for a, b in zip(per, per_mode)]
    out: Metrics = {"gumbel_mode_agreement": sum(agree) / len(agree)}
    if gaps:
        out["gumbel_mean_gap"] = sum(gaps) / len(gaps)
    return out


def _block_r2(key: str, value: Any) -> bool:
    """Whether ``key`` is a block's R² (``r2_linear_<block>``, ``r2_nonlinear_<block>``)."""
    return key.startswith(("r2_linear_", "r2_nonlinear_")) and not key.endswith("per_dim") and isinstance(value, float)
