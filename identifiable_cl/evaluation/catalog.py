"""The metric catalog: every measure of recovery declared once, as a :class:`Metric` registered in
:data:`METRICS` under the key it reports.

A metric is a class with its readable ``label``, the class of maps it ``tests`` (a perfect score means h
recovers z up to such a map), its ``chance`` level when one is known, the key of a chance ``reference`` it
reports itself, the config key that enables it (``enabled_by``, a boolean ``eval.*`` key; None: always),
whether it ``applies`` to a scoring (e.g. only where the process has Λ groups), and ``__call__`` computing
its keys from a :class:`Scoring` of (z, h) pairs, or, for a metric ``of_run``, from a :class:`RunScoring`: the
run itself (its loss, its process) after the pairs' metrics (mutual information, Λ recovery).
:func:`~identifiable_cl.evaluation.metrics` computes every enabled metric of the pairs in ``rank`` order, the
evaluation protocol (:mod:`identifiable_cl.protocol`) those of the run; the printed table, ``summary.json`` and
W&B keys, ``icl results``'s default columns and the figures' labels and reference lines derive from this catalog.

Other distributions add metrics under the entry-point group ``identifiable_cl.metrics`` (``icl plugins --kind
metrics`` lists them). A metric may declare a switch of its own, as a component declares its options: an
``enabled_by`` key ``eval.<name>`` that the config schema does not hold, with its ``switch`` (what turning it on
does) and ``switch_default``; the config then accepts that key (:func:`switches`), a boolean, and the metric is
computed where it is on (its default where a config does not give it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from dgp.registry import Registry
from identifiable_cl.evaluation.blocks import block_aware_mcc, check_blocks, random_rotation_reference, split_by_block
from identifiable_cl.evaluation.dci import dci
from identifiable_cl.evaluation.information import information_metrics
from identifiable_cl.evaluation.lambdas import lambda_recovery
from identifiable_cl.evaluation.mcc import mcc
from identifiable_cl.evaluation.orthogonal import orthogonal_r2
from identifiable_cl.evaluation.records import R2Result
from identifiable_cl.evaluation.regression import linear_r2, nonlinear_r2
from identifiable_cl.evaluation.spectrum import spectrum
from identifiable_cl.evaluation.unmixing import unmixed_mcc

METRICS = Registry("metrics")
"""Metric classes by the key they report (entry-point group ``identifiable_cl.metrics``)."""

REFERENCE_SEED = 20240701
"""Seed of the random-rotation reference when a scoring has no generator."""


@dataclass(frozen=True)
class Scoring:
    """What a metric is computed from: true latents z ``(N, n)`` and representations h ``(N, d)`` of a fit
    pair and a test pair (tensors or arrays; the test pair is None when ``in_sample``), the process's named
    ``blocks`` of latent indices and ``lambda_groups`` (None without a Λ), the ``generator`` of the random
    draws some metrics make, whether to measure chance references, and the kernel ridge's Nyström centres."""

    z_fit: Any
    h_fit: Any
    z_test: Any = None
    h_test: Any = None
    in_sample: bool = False
    blocks: Mapping[str, Sequence[int]] | None = None
    lambda_groups: Sequence[Sequence[int]] | None = None
    generator: torch.Generator | None = None
    rotation_reference: bool = True
    n_centres: int = 1000

    @property
    def z_score(self) -> Any:
        """The latents metrics without a fit score on: the fit sample in sample, else the test sample."""
        return self.z_fit if self.in_sample else self.z_test

    @property
    def h_score(self) -> Any:
        return self.h_fit if self.in_sample else self.h_test


@dataclass(frozen=True)
class RunScoring:
    """What a metric ``of_run`` is computed from, after the metrics of the run's (z, h) pairs: the run's solver
    ``run`` (:class:`identifiable_cl.solvers.Solver`: its loss, process, encoder and config), the metrics
    ``found`` so far at this evaluation, and ``truths``, the encoder-free measurements kept for as long as a pack
    runs (:class:`identifiable_cl.protocol.Measured`'s; None: measured afresh)."""

    run: Any
    found: Mapping[str, Any]
    truths: dict | None = None


def reference_generator(generator: torch.Generator | None) -> torch.Generator:
    """A CPU generator of its own for chance references: seeded by one draw from a copy of ``generator``
    (its state is copied, so the caller's generator, and with it every other metric's draws, stays where it
    was), or by :data:`REFERENCE_SEED` without one; the same generator state always gives the same draws."""
    if generator is None:
        return torch.Generator().manual_seed(REFERENCE_SEED)
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    seed = torch.randint(0, 2**62, (1,), generator=copy, device=generator.device)
    return torch.Generator().manual_seed(int(seed))


class Metric:
    """One measure of recovery; the key it reports is the name it is registered under (``key``, set by
    :func:`ordered`).

    ``__call__(scoring)`` returns its keys: ``key`` itself (a float), and any others it reports beside it
    (``<key>_per_dim``, its reference ...). ``rank`` orders computing and listing (metrics that draw from
    the scoring's generator draw in that order); ``headline`` ones are table columns and figure curves."""

    key: str = ""
    label: str = ""
    tests: str = ""
    chance: float | None = None
    reference: str | None = None
    reference_label: str | None = None
    enabled_by: str | None = None
    columns: dict[str, str] | None = None
    """The headline keys it reports with their labels, when not just ``{key: label}``."""
    headline: bool = True
    per_block: bool = False
    rank: int = 100
    of_run: bool = False
    """Computed from a :class:`RunScoring` (the run itself) instead of a :class:`Scoring` of (z, h) pairs."""
    switch: str | None = None
    """What turning on ``enabled_by`` does, for a metric that declares that key itself (not a key of the config
    schema); ``switch_default``: its value where a config does not give it."""
    switch_default: bool = False

    def applies(self, scoring: Scoring) -> bool:
        return True

    def summary(self) -> str:
        """One line for listings: label, the class it tests, chance level, reference and switch."""
        parts = [self.label, f"tests: {self.tests}"]
        parts += [f"chance: {self.chance:g}"] if self.chance is not None else []
        parts += [f"reference: {self.reference}"] if self.reference else []
        parts += [f"on with {self.enabled_by}"] if self.enabled_by else []
        return "; ".join(parts)

    def __call__(self, scoring: Scoring) -> dict[str, Any]:
        raise NotImplementedError


def ordered() -> list[Metric]:
    """Every registered metric, its ``key`` set to its registered name, in ``rank`` order (then by key)."""
    metrics = []
    for entry in METRICS:
        metric = entry.obj()
        metric.key = entry.name
        metrics.append(metric)
    return sorted(metrics, key=lambda m: (m.rank, m.key))


def labels() -> dict[str, str]:
    """Readable names of the headline metrics and their references, in the order tables and legends list them."""
    out: dict[str, str] = {}
    for metric in ordered():
        if metric.headline:
            out.update(metric.columns or {metric.key: metric.label})
            if metric.reference:
                out[metric.reference] = f"{metric.label}, {metric.reference_label}"
    return out


def references() -> dict[str, str]:
    """Metric key -> key of the chance reference it reports."""
    return {m.key: m.reference for m in ordered() if m.reference}


def block_prefixes() -> tuple[str, ...]:
    """Prefixes of the per-block keys (``r2_linear_<block>``) of the metrics that report them."""
    return tuple(f"{m.key}_" for m in ordered() if m.per_block)


def metric_switch(key: str) -> str | None:
    """The ``eval.*`` key that turns the metric reporting ``key`` on (None: always on, or no such metric); a per-block
    key (``r2_nonlinear_content``) is its metric's (``r2_nonlinear``)."""
    found = [m for m in ordered() if m.key == key or key in (m.columns or {})
             or (m.per_block and key.startswith(f"{m.key}_"))]
    return max(found, key=lambda m: len(m.key)).enabled_by if found else None


def switches() -> dict[str, tuple[bool, str]]:
    """The ``eval.*`` keys metrics declare themselves (``switch``): key -> (default, what it does)."""
    return {m.enabled_by: (m.switch_default, m.switch) for m in ordered() if m.enabled_by and m.switch is not None}


def compute(scoring: Scoring | RunScoring, enabled: Mapping[str, bool]) -> dict[str, Any]:
    """Every metric of the scoring's kind (``of_run`` for a :class:`RunScoring`) whose ``enabled_by`` key is on in
    ``enabled`` (or that has none; a switch a metric declares itself takes its ``switch_default`` where
    ``enabled`` does not give it) and that applies, in ``rank`` order, merged into one flat dict."""
    out: dict[str, Any] = {}
    for metric in ordered():
        if metric.of_run != isinstance(scoring, RunScoring):
            continue
        on = metric.enabled_by is None or enabled.get(metric.enabled_by, metric.switch_default)
        if on and metric.applies(scoring):
            out.update(metric(scoring))
    return out


def r2_keys(key: str, result: R2Result, scoring: Scoring) -> dict[str, Any]:
    """``key``, ``<key>_per_dim`` and ``<key>_<block>`` for every block of the scoring."""
    named = check_blocks(scoring.blocks or {}, len(result.per_dim))
    out: dict[str, Any] = {key: result.mean, f"{key}_per_dim": result.per_dim}
    out.update({f"{key}_{name}": part.mean for name, part in split_by_block(result, named).items()})
    return out


@METRICS.register("r2_linear")
class LinearR2(Metric):
    """Held-out R² of the best affine map from h to z (least squares with intercept), per latent
    dimension and averaged: 1 when h recovers z up to an invertible affine map."""

    label, tests, chance, per_block, rank = "linear R²", "an affine map", 0.0, True, 10

    def __call__(self, s: Scoring) -> dict[str, Any]:
        return r2_keys(self.key, linear_r2(s.z_fit, s.h_fit, s.z_test, s.h_test, in_sample=s.in_sample), s)


@METRICS.register("r2_nonlinear")
class NonlinearR2(Metric):
    """Held-out R² of kernel ridge regression (RBF, Nyström centres) from h to each z_i: 1 when h
    recovers z up to a smooth invertible map."""

    label, tests, chance, per_block, rank = "nonlinear R²", "a smooth invertible map", 0.0, True, 20
    enabled_by = "eval.nonlinear"

    def __call__(self, s: Scoring) -> dict[str, Any]:
        kernel = nonlinear_r2(s.z_fit, s.h_fit, s.z_test, s.h_test, in_sample=s.in_sample, generator=s.generator,
                              n_centres=s.n_centres)
        return r2_keys(self.key, kernel, s)


@METRICS.register("r2_orthogonal")
class OrthogonalR2(Metric):
    """Held-out R² of the best orthogonal map with one global scale from the centred h to the centred z
    (orthogonal Procrustes): 1 when h recovers z up to a rotation or reflection, a scale and a shift (Z21's
    class on the sphere); below 1 for any other invertible linear map, where linear R² is still 1."""

    label, tests, chance, rank = "orthogonal R²", "an orthogonal map, one scale and a shift", 0.0, 25

    def __call__(self, s: Scoring) -> dict[str, Any]:
        result = orthogonal_r2(s.z_fit, s.h_fit, s.z_test, s.h_test, in_sample=s.in_sample)
        return {self.key: result.mean, f"{self.key}_per_dim": result.per_dim}


class _MCC(Metric):
    method = ""
    matching: str | None = None
    """The key under which it also reports the matching, as [latent dim, representation dim] pairs."""
    tests = "a permutation and element-wise rescaling"

    def __call__(self, s: Scoring) -> dict[str, Any]:
        result = mcc(s.z_score, s.h_score, method=self.method)
        out: dict[str, Any] = {self.key: result.mean, f"{self.key}_per_dim": result.per_dim}
        if self.matching:
            out[self.matching] = [[i, j] for i, j in result.matching]
        return out


@METRICS.register("mcc_pearson")
class PearsonMCC(_MCC):
    """Mean |Pearson correlation| between each z_i and its representation dimension under the optimal
    one-to-one matching; also reports the matching (``mcc_matching``, the input of Λ recovery)."""

    label, method, matching, rank = "MCC (Pearson)", "pearson", "mcc_matching", 30


@METRICS.register("mcc_spearman")
class SpearmanMCC(_MCC):
    """MCC of Spearman (rank) correlations: 1 up to a permutation and monotone element-wise maps."""

    label, method, rank = "MCC (Spearman)", "spearman", 40
    tests = "a permutation and monotone element-wise maps"


class _UnmixedMCC(Metric):
    """MCC of a target t(z) and the components of h after the FastICA unmixing fitted on the fit sample
    (:mod:`identifiable_cl.evaluation.unmixing`), off unless its own switch is on; FastICA starts from a seed
    drawn from a copy of the scoring's generator (:func:`reference_generator`), so the other metrics' draws stay
    as they are and the same scoring gives the same score."""

    target, method = "sources", "pearson"

    def __call__(self, s: Scoring) -> dict[str, Any]:
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=reference_generator(s.generator)))
        result = unmixed_mcc(s.z_fit, s.h_fit, s.z_test, s.h_test, target=self.target, method=self.method,
                             in_sample=s.in_sample, seed=seed)
        return {self.key: result.mean, f"{self.key}_per_dim": result.per_dim}


@METRICS.register("mcc_ica_pearson")
class ICAPearsonMCC(_UnmixedMCC):
    """Pearson MCC of z and FastICA's components of h: 1 when h = A z + b for an invertible A (non-Gaussian z)."""

    label, rank, enabled_by = "MCC after FastICA (Pearson)", 42, "eval.mcc_ica_pearson"
    tests = "an invertible linear map (FastICA unmixing), then a permutation and element-wise rescaling"
    switch = "also measure the Pearson MCC of z and the FastICA components of h (unmixing fitted on the fit sample)"


@METRICS.register("mcc_ica_spearman")
class ICASpearmanMCC(_UnmixedMCC):
    """Spearman MCC of z and FastICA's components of h: 1 when h = A f(z) + b with f element-wise monotone (the
    class PCL's score form recovers, where its f_i are monotone)."""

    label, rank, enabled_by, method = "MCC after FastICA (Spearman)", 43, "eval.mcc_ica_spearman", "spearman"
    tests = "an invertible linear map of element-wise monotone maps (FastICA unmixing, then a permutation)"
    switch = "also measure the Spearman MCC of z and the FastICA components of h (unmixing fitted on the fit sample)"


@METRICS.register("mcc_ica_abs_pearson")
class ICAAbsPearsonMCC(_UnmixedMCC):
    """Pearson MCC of |z| and FastICA's components of h, as the TCL code scores its features: 1 when
    h = A |z| + b (TCL's features of Laplace sources)."""

    label, rank, enabled_by, target = "MCC of |z| after FastICA (Pearson)", 44, "eval.mcc_ica_abs_pearson", "abs"
    tests = "an invertible linear map of |z| (FastICA unmixing), then a permutation and element-wise rescaling"
    switch = "also measure the Pearson MCC of |z| and the FastICA components of h (TCL's evaluation)"


@METRICS.register("mcc_ica_abs_spearman")
class ICAAbsSpearmanMCC(_UnmixedMCC):
    """Spearman MCC of |z| and FastICA's components of h: 1 when h = A g(|z|) + b with g element-wise monotone
    (|z| and z² alike, TCL's q(s) for Laplace and Gaussian-scale sources)."""

    label, rank, enabled_by = "MCC of |z| after FastICA (Spearman)", 45, "eval.mcc_ica_abs_spearman"
    target, method = "abs", "spearman"
    tests = "an invertible linear map of element-wise monotone maps of |z| (FastICA unmixing, then a permutation)"
    switch = "also measure the Spearman MCC of |z| and the FastICA components of h (|z| and z² alike)"


@METRICS.register("mcc_block_aware")
class BlockAwareMCC(Metric):
    """MCC after the best orthogonal alignment inside each group of equal Λ (R24's class), with its chance
    level ``mcc_block_aware_random_rotation``: the same score of h = z R for Haar-random orthogonal R on the
    same latents, from a generator of its own (:func:`reference_generator`)."""

    label, rank = "block-aware MCC", 50
    tests = "rotations within groups of equal Λ, a permutation and signs"
    reference, reference_label = "mcc_block_aware_random_rotation", "random rotation"

    def applies(self, s: Scoring) -> bool:
        return s.lambda_groups is not None

    def __call__(self, s: Scoring) -> dict[str, Any]:
        aligned = block_aware_mcc(s.z_score, s.h_score, s.lambda_groups)
        out: dict[str, Any] = {self.key: aligned.mean, f"{self.key}_per_dim": aligned.per_dim}
        if s.rotation_reference:
            out[self.reference] = random_rotation_reference(s.z_score, s.lambda_groups, reference_generator(s.generator)).mean
        return out


@METRICS.register("effective_rank")
class EffectiveRank(Metric):
    """exp of the entropy of the normalised singular values of the centred h (``singular_values`` beside
    it): how many dimensions the representation uses."""

    label, headline, rank = "effective rank", False, 60
    tests = "(not a recovery score: the dimensions h spans)"

    def __call__(self, s: Scoring) -> dict[str, Any]:
        spec = spectrum(s.h_score)
        return {self.key: spec.effective_rank, "singular_values": spec.singular_values}


@METRICS.register("dci")
class DCI(Metric):
    """Disentanglement, completeness and informativeness (Eastwood & Williams 2018) from the importance
    matrix of a lasso (alpha 0.01, standardised h and z) fitted on the fit pair, informativeness as held-out
    R² (:func:`identifiable_cl.evaluation.dci.dci`): all three are 1 when each z_i is one dimension of h."""

    label, tests, rank, enabled_by = "DCI", "a permutation and element-wise rescaling", 70, "eval.dci"
    columns = {"dci_disentanglement": "DCI disentanglement", "dci_completeness": "DCI completeness",
               "dci_informativeness": "DCI informativeness"}

    def __call__(self, s: Scoring) -> dict[str, Any]:
        result = dci(s.z_fit, s.h_fit, s.z_test, s.h_test, in_sample=s.in_sample)
        return {"dci_disentanglement": result.disentanglement, "dci_completeness": result.completeness,
                "dci_informativeness": result.informativeness, "dci_importance": result.importance}


@METRICS.register("lambda_relative_error")
class LambdaRecovery(Metric):
    """Recovery of the concentrations Λ̂ a loss learns (its ``lambda_hat`` log, reported as ``lambda_learned``;
    R24's AnInfoNCE) against the process's true Λ on the Pearson MCC's matching, up to one global scale
    (:func:`identifiable_cl.evaluation.lambdas.lambda_recovery`): its keys with the prefix ``lambda_``."""

    label, headline, rank, of_run = "Λ recovery (relative error)", False, 80, True
    tests = "(not a recovery score of z: Λ̂ against Λ up to one global scale)"

    def applies(self, s: RunScoring) -> bool:
        learned, truth = s.found.get("lambda_learned"), s.run.process.lambda_true
        return (learned is not None and truth is not None and "mcc_matching" in s.found
                and len(learned) == truth.shape[0])

    def __call__(self, s: RunScoring) -> dict[str, Any]:
        found = lambda_recovery(s.found["lambda_learned"], s.run.process.lambda_true.cpu(), s.found["mcc_matching"])
        return {f"lambda_{k}": v for k, v in found.items()}


@METRICS.register("mi_true")
class MutualInformation(Metric):
    """I(z; z+) of the process and the bounds on it at the training batch's K candidates, with the encoder's own
    bound from its loss on a held-out batch, for a run whose loss bounds I(z; z+)
    (:func:`identifiable_cl.evaluation.information.information_metrics`)."""

    label, headline, rank, of_run, enabled_by = "I(z; z+)", False, 90, True, "eval.mi"
    tests = "(not a recovery score: the information the loss bounds, and the encoder's bound on it)"

    def __call__(self, s: RunScoring) -> dict[str, Any]:
        return information_metrics(s.run, s.truths)
