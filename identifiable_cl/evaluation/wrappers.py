"""Sampling wrappers: draw held-out latents from a data-generating process, encode, score.

The process is duck-typed: it needs ``sample_latents(n, generator) -> z (n, dim)``,
``mix(z) -> x``, ``blocks`` (dict name -> latent indices, possibly empty) and ``lambda_groups``
(list of latent-index lists sharing a Λ value, or None).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from dgp import checks
from identifiable_cl.evaluation.catalog import Scoring, compute
from identifiable_cl.evaluation.regression import LinearMap, prepare, r2_scores

Metrics = dict[str, Any]


def metrics(
    z_fit: Any,
    h_fit: Any,
    z_test: Any = None,
    h_test: Any = None,
    *,
    blocks: Mapping[str, Sequence[int]] | None = None,
    lambda_groups: Sequence[Sequence[int]] | None = None,
    nonlinear: bool = True,
    in_sample: bool = False,
    generator: torch.Generator | None = None,
    rotation_reference: bool = True,
    n_centres: int = 1000,
    enabled: Mapping[str, bool] | None = None,
) -> Metrics:
    """Every metric of the catalog (:mod:`identifiable_cl.evaluation.catalog`) that is enabled and applies,
    as a flat dict of floats and lists.

    Regressions are fitted on (z_fit, h_fit) and scored on (z_test, h_test) (on the fit pair when
    ``in_sample=True``); MCCs, block-aware MCC and the spectrum use the scoring pair. Keys:
    ``r2_linear``, ``r2_linear_per_dim``, ``r2_nonlinear``, ``r2_nonlinear_per_dim`` (when
    ``nonlinear``), ``mcc_pearson``, ``mcc_pearson_per_dim``, ``mcc_matching`` (the Pearson
    matching as a list of [latent dim, representation dim], the input of ``lambda_recovery``),
    ``mcc_spearman``, ``mcc_spearman_per_dim``, ``r2_linear_<block>`` and ``r2_nonlinear_<block>`` for every
    block, ``mcc_block_aware``, ``mcc_block_aware_per_dim`` and (with ``rotation_reference``)
    ``mcc_block_aware_random_rotation`` when ``lambda_groups`` is given, ``effective_rank`` and
    ``singular_values``, and those of any other metric ``enabled`` switches on (its ``enabled_by`` key, e.g.
    ``{"eval.dci": True}``). ``n_centres``: the Nyström centres of ``nonlinear_r2``.

    ``mcc_block_aware_random_rotation`` is the chance level of ``mcc_block_aware``: its mean over
    Haar-random rotations h = z R of the scoring latents (``random_rotation_reference``), drawn
    from a generator of their own (``catalog.reference_generator``), so that it leaves the draws of the
    other metrics as they are without it.
    """
    nonlinear = checks.boolean("eval.nonlinear", nonlinear)
    in_sample = checks.boolean("eval.in_sample", in_sample)
    scoring = Scoring(z_fit, h_fit, z_test, h_test, in_sample=in_sample, blocks=blocks, lambda_groups=lambda_groups,
                      generator=generator, rotation_reference=rotation_reference, n_centres=n_centres)
    return compute(scoring, {**(enabled or {}), "eval.nonlinear": nonlinear})


def encode_latents(encode: Callable[[Tensor], Tensor], process: Any, z: Tensor, batch_size: int) -> Tensor:
    """h = encode(process.mix(z)) in batches of ``batch_size`` rows under torch.no_grad(), shape (N, d)."""
    parts = []
    with torch.no_grad():
        for start in range(0, z.shape[0], batch_size):
            x = process.mix(z[start : start + batch_size])
            h = encode(x)
            if not isinstance(h, Tensor) or h.dim() != 2 or h.shape[0] != x.shape[0]:
                shape = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
                raise ValueError(
                    f"encode returned {shape} for a batch of {x.shape[0]} observations: expected a tensor (batch, d)"
                )
            parts.append(h)
    return torch.cat(parts)


def _draw(
    encode: Callable[[Tensor], Tensor], process: Any, generator: torch.Generator, n: int, batch_size: int
) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        z = process.sample_latents(n, generator)
        return z, encode_latents(encode, process, z, batch_size)


def evaluate(
    encode: Callable[[Tensor], Tensor],
    process: Any,
    generator: torch.Generator,
    *,
    n_fit: int = 20480,
    n_test: int = 40960,
    nonlinear: bool = True,
    in_sample: bool = False,
    batch_size: int = 8192,
    rotation_reference: bool = True,
    n_centres: int = 1000,
    enabled: Mapping[str, bool] | None = None,
) -> Metrics:
    """Metrics of the encoder ``encode`` (x (B, dim) -> h (B, d)) on fresh samples of ``process``.

    Draws z_fit (n_fit) and z_test (n_test) with ``process.sample_latents(n, generator)``,
    encodes x = process.mix(z) in batches, and returns ``metrics`` of the pairs with the
    process's blocks and Λ groups (held-out as in vK21's evaluation: 20,480 fit / 40,960 test).
    With ``in_sample=True`` only the fit sample is drawn and everything is scored on it.
    ``rotation_reference=False`` leaves out block-aware MCC's chance level (it depends on the
    process only, not on the encoder, so a run measures it once, in its final evaluation); ``enabled``
    switches metrics on by their config keys (``metrics``).
    """
    n_fit = checks.integer("eval.n_fit", n_fit, minimum=2)
    n_test = checks.integer("eval.n_test", n_test, minimum=2)
    n_centres = checks.integer("eval.n_centres", n_centres, minimum=1)
    batch_size = checks.integer("batch_size", batch_size, minimum=1)
    in_sample = checks.boolean("eval.in_sample", in_sample)
    z_fit, h_fit = _draw(encode, process, generator, n_fit, batch_size)
    z_test, h_test = (None, None) if in_sample else _draw(encode, process, generator, n_test, batch_size)
    return metrics(z_fit, h_fit, z_test, h_test, blocks=process.blocks, lambda_groups=process.lambda_groups,
                   nonlinear=nonlinear, in_sample=in_sample, generator=generator,
                   rotation_reference=rotation_reference, n_centres=n_centres, enabled=enabled)


def identity_baseline(process: Any, generator: torch.Generator, **options: Any) -> Metrics:
    """``evaluate`` with the observation itself as representation (h = x = g(z)), keys prefixed ``identity_``.

    It shows how much of each score the mixing g already leaves intact before any training.
    """
    return {f"identity_{k}": v for k, v in evaluate(lambda x: x, process, generator, **options).items()}


def linear_readout(
    encode: Callable[[Tensor], Tensor],
    process: Any,
    generator: torch.Generator,
    *,
    n_fit: int = 4096,
    n_test: int = 2048,
    batch_size: int = 8192,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """True test latents z (n_test, n), their linear read-out ẑ from the representation, and R² per dimension.

    The affine map of ``linear_r2`` is fitted on ``n_fit`` fresh samples and applied to ``n_test``
    others; the arrays are float64 numpy arrays, for recovery scatter plots.
    """
    n_fit = checks.integer("n_fit", n_fit, minimum=2)
    n_test = checks.integer("n_test", n_test, minimum=2)
    batch_size = checks.integer("batch_size", batch_size, minimum=1)
    z_fit, h_fit = _draw(encode, process, generator, n_fit, batch_size)
    z_test, h_test = _draw(encode, process, generator, n_test, batch_size)
    zf, hf, zt, ht = prepare(z_fit, h_fit, z_test, h_test, False, minimum_fit=3)
    z_hat = LinearMap(zf, hf).predict(ht)
    return zt.cpu().numpy(), z_hat.cpu().numpy(), r2_scores(zt, z_hat).tolist()
