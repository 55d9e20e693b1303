"""Mutual information at an evaluation: the process's true I(z; z+) beside the bounds a contrastive run reaches.

InfoNCE with K candidates per anchor (its positive and K - 1 negatives) bounds the information of the
views from below for any critic f, I(z; z+) >= log K - L with L = E[-log(e^{f(z, z+)} / Σ_c e^{f(z, c)})]
(van den Oord et al. 2018; Poole et al. 2019, eq. 12), so the bound never exceeds log K: at the papers'
batch sizes it cannot reach the truth where I > log K. Since the process is known, so are I itself and
its density p(z+ | z), whose logarithm is the best critic there is. Keys:

- ``mi_true``: I(z; z+) of the process (``dgp.Process.mutual_information``: closed form, quadrature or
  Monte Carlo with ``mi_true_stderr``); null when infinite (content kept exactly) or not available, with
  ``mi_true_<block>`` for the blocks reported separately (content–style: the style block's own I);
- ``log_k``: log K of the run's loss (``ContrastiveLoss.mi_bound``);
- the encoder's own bound on a held-out batch of the training size, named for what it holds
  (:data:`identifiable_cl.losses.contract.BOUND_KEYS`): ``mi_infonce_bound``, log K - L of a loss in InfoNCE's form, or ``mi_nwj_bound``,
  NWJ's -L;
- ``mi_true_critic_bound``: the same bound with the critic log p(z+ | z) on the true latents at the same K
  (:func:`true_critic_bound`), what no encoder can beat at that K;
- ``mi_loo_upper``: the leave-one-out upper bound on K pairs (:func:`loo_upper_bound`; Poole et al. 2019,
  eq. 13).

The last two need the conditional's ``log_density`` and are null without one.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import Tensor

from dgp.seeding import stream_seed

from identifiable_cl.losses.contract import traits

LogDensity = Callable[[Tensor, Tensor], Tensor]
"""``log_density(z_pos, z)``: log p(z+ | z) for ``(..., n)`` inputs that broadcast, float64."""

BLOCK_ELEMENTS = 1 << 22
"""Rows of anchors are scored in blocks of at most this many (anchor, candidate, coordinate) elements."""


def _block(n_columns: int, dim: int) -> int:
    """Anchors per block against ``n_columns`` candidates of ``dim`` coordinates."""
    return max(1, BLOCK_ELEMENTS // max(1, n_columns * dim))


def true_critic_bound(log_density: LogDensity, z: Tensor, z_pos: Tensor, negatives: Tensor) -> float:
    """InfoNCE's bound with the true critic: anchors z ``(B, n)``, their positives z+ ``(B, n)`` and K - 1
    negatives ``(K - 1, n)`` drawn from the marginal, shared by the anchors:

        log K + mean_i [ log p(z+_i | z_i) - log Σ_{c ∈ {z+_i} ∪ negatives} p(c | z_i) ].
    """
    k = negatives.shape[0] + 1
    total, step = 0.0, _block(k, z.shape[1])
    for start in range(0, z.shape[0], step):
        anchors = z[start : start + step]
        positive = log_density(z_pos[start : start + step], anchors)
        against = log_density(negatives.unsqueeze(0), anchors.unsqueeze(1))
        logits = torch.cat([positive.unsqueeze(1), against], dim=1)
        total += float((positive - torch.logsumexp(logits, dim=1)).sum())
    return math.log(k) + total / z.shape[0]


def loo_upper_bound(log_density: LogDensity, z: Tensor, z_pos: Tensor) -> float:
    """The leave-one-out upper bound on K pairs (z_i, z+_i), ``(K, n)`` each (Poole et al. 2019, eq. 13):

        mean_i [ log p(z+_i | z_i) - log( (1 / (K - 1)) Σ_{j ≠ i} p(z+_i | z_j) ) ].
    """
    k = z.shape[0]
    if k < 2:
        raise ValueError(f"the leave-one-out bound needs at least 2 pairs, got {k}")
    total, step = 0.0, _block(k, z.shape[1])
    for start in range(0, k, step):
        rows = torch.arange(start, min(start + step, k), device=z.device)
        logp = log_density(z_pos[rows].unsqueeze(1), z.unsqueeze(0))  # [i, j] = log p(z+_i | z_j)
        own = logp[torch.arange(rows.numel(), device=z.device), rows]
        others = logp.clone()
        others[torch.arange(rows.numel(), device=z.device), rows] = -math.inf
        total += float((own - (torch.logsumexp(others, dim=1) - math.log(k - 1))).sum())
    return total / k


def truth(process: Any, k: int | None, generator: torch.Generator) -> dict[str, Any]:
    """The encoder-free keys of the module docstring (``mi_true``, its parts and stderr, and at ``k``
    candidates ``log_k``, ``mi_true_critic_bound``, ``mi_loo_upper``), from draws of ``generator``."""
    info = process.mutual_information(generator=generator)
    out: dict[str, Any] = {"mi_true": info.nats if math.isfinite(info.nats) else None}
    if info.stderr is not None:
        out["mi_true_stderr"] = info.stderr
    out.update({f"mi_true_{name}": part.nats for name, part in info.parts.items() if math.isfinite(part.nats)})
    if k is None:
        return out
    out["log_k"] = math.log(k)
    out["mi_true_critic_bound"] = out["mi_loo_upper"] = None
    log_density = process.conditional.log_density
    if log_density is None:
        return out
    try:
        with torch.no_grad():
            z = process.sample_latents(k, generator)
            z_pos = process.conditional.sample(z, generator)
            negatives = process.sample_latents(k - 1, generator)
            out["mi_true_critic_bound"] = true_critic_bound(log_density, z, z_pos, negatives)
            out["mi_loo_upper"] = loo_upper_bound(log_density, z, z_pos)
    except ValueError:  # a log-density the conditional cannot give for these options (e.g. a shell)
        pass
    return out


def information_metrics(run: Any, truths: dict | None = None) -> dict[str, Any]:
    """The keys of the module docstring for a run whose loss bounds I(z; z+) (``mi_bound``, with negatives from the
    batch, drawn from p(z) or queued); ``run``: its solver (:class:`identifiable_cl.solvers.Solver`). The
    encoder's bound log K - L is read on a held-out batch of the training size (random stream
    ``eval.<step>.mi``); the process's own keys at that K do not depend on the encoder and are measured once per
    process, K and seed within ``truths`` (None: afresh). With MoCo's queue the queued keys are those of fresh
    held-out pairs under the current momentum encoder, a full queue's worth: every candidate is scored by the
    same critic, as the bound requires (:meth:`identifiable_cl.solvers.Solver.mi_negatives`). Empty for a loss
    without a bound, a process with views (its loss pairs observations of different mixings) or negatives
    that are not drawn from p(z)."""
    declared = traits(run.loss)
    mi_bound = declared.mi_bound
    if mi_bound is None or run.process.view_count > 1:
        return {}
    generator = run.process.make_generator(stream_seed(run.config["seed"], f"eval.{run.steps_done}.mi"))
    batch = run.process.sample(run.config["train"]["batch_size"], generator)
    if batch.z_neg is not None and not run.process.negatives.from_marginal():
        return {}
    with torch.no_grad():
        h, h_pos, h_neg = run.encodings(batch)
        h_neg = run.mi_negatives(h_neg, generator)
        value = float(run.loss(h, h_pos, h_neg))
    bound = mi_bound(value, batch.z.shape[0], None if h_neg is None else h_neg.shape[-2])
    if bound is None:
        return {}
    k, encoder_bound = bound
    truths = {} if truths is None else truths
    key = (run.process.fingerprint(), k, run.config["seed"])
    if key not in truths:
        truths[key] = truth(run.process, k, run.process.make_generator(stream_seed(run.config["seed"], "eval.mi")))
    return {**truths[key], declared.mi_bound_key: encoder_bound}
