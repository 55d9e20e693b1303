"""A population-level check of an experiment's objectives, without training.

For each run listed in the experiment's ``population`` entry (see
:mod:`identifiable_cl.reproduce.experiment`), the run's process and loss are built from its config
at the scale with :func:`identifiable_cl.components.build`, exactly as the run builds them, with
two changes: the mixing is the identity (the encoders below read the latents, h = φ(z), so the
mixing would only cost time; the process draws each component's parameters from its own seed
stream, so its latents, positives and negatives follow the run's laws with the run's parameters),
and, for a series with ``tau: optimal``, the loss's temperature is the optimal one (below). The expected loss L(φ) is then
estimated by Monte Carlo over fresh batches (``batches`` of ``batch_size`` anchors, drawn from the
entry's ``seed``) for a family of encoders applied to the latents:

the true inverse, a Haar-random rotation, the constant (collapsed) encoder and the stretched and
warped distortions of :mod:`identifiable_cl.reproduce.margins`, which also says how the margins
L(φ) − L(id) and their standard errors are taken. The constant encoder's logits are all equal, so
its loss is known in closed form (log(K + 1) for InfoNCE with K negatives and the positive in the
denominator, at any τ). With the process's tilted negatives at β r² = κ the positive and the K
negatives are exchangeable given the anchor, so E[l⁺] = E[mean_j l_j] for every encoder, and
log Σ_j exp l_j ≥ log(K + 1) + mean_j l_j then bounds every encoder's loss below by the constant's:
the true inverse must lose to collapse there. Past κ the negatives are the closer ones, and the row
shows which of the two the objective prefers (as it does for the loss-side reweighting).

Which runs fit. Every run of a series must score a loss with a temperature τ (``infonce`` or
``hard_negative``); a series with ``tau: optimal`` needs the setting below. Both are checked when
the experiment file is loaded (:func:`identifiable_cl.reproduce.experiment.check_population_runs`),
naming the run.

Temperature. With vMF(κ) positives on the sphere of radius r and negatives tilted by β from a
uniform marginal, q_β(z⁻|z) ∝ exp(β zᵀz⁻) p(z⁻), the optimal InfoNCE critic is log p(z⁺|z)/q_β(z⁺|z)
up to a function of z, i.e. (κ − β r²) ẑᵀẑ⁺ on unit directions: a cosine critic at τ = 1/(κ − β r²)
applied to the true inverse. ``tau: optimal`` evaluates a run there (β = 0 for plain negatives from
the marginal). For β r² ≥ κ no positive temperature gives that critic (it is constant at β r² = κ
and decreasing in ẑᵀẑ⁺ past it): the true inverse's loss then falls as τ grows, towards the
collapsed encoder's log(K + 1) as τ → ∞, where every encoder scores the same, so there is no
optimal τ to evaluate at. The check uses the run's own ``loss.tau`` there (the initial value of
its learnt τ, where training starts) and shows which encoder that objective prefers. ``tau:
run`` always uses the run's ``loss.tau``, as for the loss-side runs, whose τ is fixed.

Effective sample sizes. For a loss with importance weights over the negatives (``hard_negative``:
w_k = exp(β l_k), l_k = sim/τ, after Robinson et al., Contrastive Learning with Hard Negative
Samples, ICLR 2021), the check reports Kish's effective sample size (Σ_k w_k)²/Σ_k w_k² (L. Kish,
Survey Sampling, 1965) of each anchor's weights at the true inverse, mean and minimum over the
anchors of all batches, beside the number of negatives: when it is near 1, the reweighted loss
rests on the one negative nearest each anchor. When the process draws tilted negatives by
importance resampling, the sampler's own ESS (``last_ess`` of
:class:`dgp.negatives.TiltedNegatives`) is reported too; on the sphere its draws are exact.

The check runs torch on one thread (restored afterwards): its tensors are small, and on a machine
whose cores are busy with training runs, intra-op threads slow it down.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch
from torch import Tensor

import dgp
from identifiable_cl import components
from identifiable_cl.reproduce.experiment import Experiment, Population, PopulationSeries
from identifiable_cl.solvers import Solver
from identifiable_cl.reproduce.margins import (
    CONSTANT, ROTATION, SIGNIFICANT, Estimate, draws, encoder_name, encoders, expected_losses, kish_ess, margins,
    pooled, ratio,
)


@dataclass(frozen=True)
class ESS:
    """Kish's effective sample size over the anchors of all batches, beside the number it is out of."""

    mean: float
    min: float
    out_of: int


@dataclass
class RunCheck:
    """The check of one run: its hardness, temperature, loss at the true inverse and every margin."""

    label: str
    series: str
    reference: str
    hardness: str
    """``dgp`` (tilted negatives drawn by the process), ``loss`` (importance weights) or ``none``."""
    beta: float
    tilt_over_kappa: float | None
    """The latent tilt (β r² on the DGP side, β/τ·r² for the loss's weights at the true inverse) over κ."""
    tau: float
    tau_rule: str
    batch_size: int
    batches: int
    loss_identity: Estimate
    margins: dict[str, Estimate]
    ratios: dict[str, Estimate | None] = field(default_factory=dict)
    pooled_ratio: Estimate | None = None
    """The ratios to the reference's margins pooled over the distorted encoders (:func:`pooled`)."""
    weights_ess: ESS | None = None
    sampler_ess: ESS | None = None
    sampler: str = ""

    def to_json(self) -> dict[str, Any]:
        """Every field but the label (``ratios`` as ``ratio_to_reference``), in field order."""
        return {("ratio_to_reference" if k == "ratios" else k): v for k, v in asdict(self).items() if k != "label"}


@dataclass
class PopulationCheck:
    """Every run's check, in the entry's series order."""

    spec: Population
    scale: str
    runs: dict[str, RunCheck]
    encoders: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "seed": self.spec.seed,
            "epsilons": list(self.spec.epsilons),
            "distortions": list(self.spec.distortions),
            "encoders": list(self.encoders),
            "series": [{"label": s.label, "runs": list(s.runs), "tau": s.tau} for s in self.spec.series],
            "runs": {label: run.to_json() for label, run in self.runs.items()},
        }


def hardness(config: Mapping[str, Any], built: Solver) -> tuple[str, float]:
    """Where a run's negatives are made hard and by which β: ``("dgp", β)`` for tilted negatives drawn by
    the process, ``("loss", β)`` for the ``hard_negative`` loss's importance weights, ``("none", 0)``
    otherwise."""
    if config["dgp"]["negatives"]["name"] == "tilted":
        return "dgp", float(built.process.negatives.beta)
    if config["loss"]["name"] == "hard_negative":
        return "loss", float(built.loss.beta)
    return "none", 0.0


def weight_logits(loss: torch.nn.Module, h: Tensor, h_pos: Tensor, h_neg: Tensor | None) -> tuple[Tensor, int]:
    """log w of each anchor's negatives ``(R, K)`` (-inf where excluded) and the number of negatives, for the
    ``hard_negative`` loss's importance weights w = exp(β l), l = sim/τ."""
    terms = loss.terms(h, h_pos, h_neg)
    log_w = torch.where(torch.isfinite(terms.neg), loss.beta * terms.neg, torch.full_like(terms.neg, -torch.inf))
    return log_w, int(terms.n_neg)


def _radius(config: Mapping[str, Any], process: dgp.Process) -> float:
    return float(process.space.radius) if config["dgp"]["space"]["name"] == "sphere" else 1.0


def _kappa(config: Mapping[str, Any], process: dgp.Process) -> float | None:
    return float(process.conditional.kappa) if config["dgp"]["conditional"]["name"] == "vmf" else None


def temperature(config: Mapping[str, Any], built: Solver, series: PopulationSeries) -> tuple[float, str]:
    """The τ a run (``config``, built as ``built``) is evaluated at and the rule that gave it (module
    docstring)."""
    own = float(built.loss.temperature.item())
    if series.tau == "run":
        return own, "the run's loss.tau"
    _, beta = hardness(config, built)
    gap = _kappa(config, built.process) - beta * _radius(config, built.process) ** 2
    if gap > 0:
        return 1.0 / gap, "optimal, 1/(κ − β r²)"
    return own, "the run's loss.tau, as β r² ≥ κ leaves no optimal τ > 0"


# ---------------------------------------------------------------------------------------------
# the check


def build(experiment: Experiment, series: PopulationSeries, label: str, scale: str
          ) -> tuple[dict[str, Any], Solver, str]:
    """Run ``label``'s config and components as the check uses them (identity mixing; the temperature of
    its series' rule), with the rule that gave that τ."""
    config = copy.deepcopy(experiment.config(label, scale))
    config["dgp"]["mixing"] = {"name": "identity"}  # the encoders read the latents
    built = components.build(config)
    tau, rule = temperature(config, built, series)
    if tau != float(built.loss.temperature.item()):
        config["loss"]["tau"] = tau
        built = components.build(config)
    return config, built, rule


def check_run(experiment: Experiment, spec: Population, series: PopulationSeries, label: str, scale: str) -> RunCheck:
    """Margins L(φ) − L(id) of every encoder of :func:`identifiable_cl.reproduce.margins.encoders` for run
    ``label`` of ``series`` (module docstring)."""
    config, built, rule = build(experiment, series, label, scale)
    process, loss = built.process, built.loss
    loss.eval()
    radius = _radius(config, process)
    family = encoders(process, spec.seed, spec.distortions, spec.epsilons, radius,
                      process.space.project if config["dgp"]["space"]["name"] == "sphere" else (lambda z: z))
    batch_size = spec.batch_size_at(scale, series) or int(config["train"]["batch_size"])
    batches = spec.batches_at(scale)
    where_hard, beta = hardness(config, built)
    weight_ess: list[Tensor] = []
    n_neg: list[int] = []
    sampler: list[Any] = []

    def at_identity(h: Tensor, h_pos: Tensor, h_neg: Tensor | None) -> None:
        if where_hard == "dgp" and process.negatives.last_ess is not None:  # the sampler's ESS of this batch
            sampler.append(process.negatives.last_ess)
        if config["loss"]["name"] == "hard_negative":
            log_w, count = weight_logits(loss, h, h_pos, h_neg)
            weight_ess.append(kish_ess(log_w).reshape(-1))
            n_neg.append(count)

    values = expected_losses(process, loss, family, draws(process, spec.seed, batch_size, batches), at_identity)
    kappa = _kappa(config, process)
    tau_now = float(loss.temperature.item())
    if kappa is None or where_hard == "none":
        tilt = None if kappa is None else 0.0
    elif where_hard == "dgp":
        tilt = beta * radius**2 / kappa
    else:
        tilt = beta / tau_now / kappa if loss.similarity == "cosine" else None
    check = RunCheck(
        label=label,
        series=series.label,
        reference=series.reference,
        hardness=where_hard,
        beta=beta,
        tilt_over_kappa=tilt,
        tau=tau_now,
        tau_rule=rule,
        batch_size=batch_size,
        batches=batches,
        loss_identity=Estimate.of(values[:, 0]),
        margins=margins(values, list(family)),
    )
    if weight_ess:
        every = torch.cat(weight_ess)
        check.weights_ess = ESS(float(every.mean()), float(every.min()), n_neg[-1])
    if sampler:
        check.sampler_ess = ESS(
            sum(s.mean for s in sampler) / len(sampler), min(s.min for s in sampler), max(s.pool for s in sampler)
        )
        check.sampler = "importance resampling"
    elif where_hard == "dgp":
        check.sampler = "marginal draws (β = 0)" if beta == 0 else "exact"
    return check


def run_check(experiment: Experiment, scale: str) -> PopulationCheck | None:
    """The experiment's population check at ``scale``; None when it has no ``population`` entry."""
    spec = experiment.population
    if spec is None:
        return None
    runs: dict[str, RunCheck] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: more intra-op threads only add synchronisation
    try:
        for series in spec.series:
            for label in series.runs:
                runs[label] = check_run(experiment, spec, series, label, scale)
    finally:
        torch.set_num_threads(threads)
    distorted = distortions(spec)
    for series in spec.series:
        reference = runs[series.reference]
        for run in (runs[label] for label in series.runs):
            run.ratios = {name: None if name == ROTATION else ratio(margin, reference.margins[name])
                          for name, margin in run.margins.items()}
            if run is not reference:
                run.pooled_ratio = pooled([run.ratios[n] for n in distorted if run.ratios[n] is not None])
    names = tuple(next(iter(runs.values())).margins)
    return PopulationCheck(spec, scale, runs, names)


def distortions(spec: Population) -> list[str]:
    """The names of the distorted encoders (neither the rotation nor the constant)."""
    return [encoder_name(d, e) for d in spec.distortions for e in spec.epsilons]


# ---------------------------------------------------------------------------------------------
# results.md


def _g(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}"


def _pm(e: Estimate, digits: int = 3) -> str:
    return f"{_g(e.mean, digits)} ± {_g(e.se, 2)}"


def _margin_cell(margin: Estimate, relative: Estimate | None, is_reference: bool) -> str:
    note = " (ref.)" if is_reference else "" if relative is None else f" ({relative.mean:.2f}×)"
    return _pm(margin) + note


def _hardness_cell(run: RunCheck) -> str:
    if run.hardness == "none":
        return "—"
    tilt = f"; tilt/κ = {run.tilt_over_kappa:.2g}" if run.tilt_over_kappa is not None else ""
    return f"{run.hardness} β = {run.beta:g}{tilt}"


def _ess_cell(run: RunCheck) -> str:
    parts = []
    if run.weights_ess is not None:
        e = run.weights_ess
        parts.append(f"weights {_g(e.mean)} (min {_g(e.min)}) of {e.out_of}")
    if run.sampler_ess is not None:
        e = run.sampler_ess
        parts.append(f"sampler {_g(e.mean)} (min {_g(e.min)}) of pool {e.out_of}")
    elif run.sampler:
        parts.append(f"sampler: {run.sampler}")
    return "; ".join(parts) or "—"


def table(check: PopulationCheck) -> str:
    """One row per run: hardness, τ, anchors × batches, L(id), every margin (its ratio to the series'
    reference), the pooled ratio and the effective sample sizes."""
    head = ["run", "hardness", "τ", "anchors × batches", "L(id) ± SE", *check.encoders, "pooled ratio",
            "effective sample size"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, run in check.runs.items():
        cells = [label, _hardness_cell(run), f"{run.tau:.3g}", f"{run.batch_size} × {run.batches}",
                 _pm(run.loss_identity, 4)]
        for name in check.encoders:
            is_ref = run.reference == run.label and name != ROTATION
            cells.append(_margin_cell(run.margins[name], run.ratios.get(name), is_ref))
        cells.append("ref." if run.reference == run.label else "—" if run.pooled_ratio is None else _pm(run.pooled_ratio, 2))
        cells.append(_ess_cell(run))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _flatter(relative: Estimate) -> str:
    if relative.mean <= 0:
        return "the true inverse no longer wins"
    if relative.mean < 1:
        return f"{1 / relative.mean:.3g}× flatter"
    return f"{relative.mean:.3g}× steeper"


def _list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


PROSE = {
    "intro": "Expected losses by Monte Carlo over fresh batches (anchors × batches in the table), each run's own "
             "process scoring its own loss, for encoders applied to the latents (h = φ(z): no mixing, no training); "
             "every encoder of a run sees the same batches. A margin is L(φ) − L(id) ± one standard error over "
             "batches; positive: the true inverse has the lower expected loss. Encoders: a Haar-random rotation (an "
             "isometry); the constant (collapsed) encoder; stretch ε = π(z + ε D z), D = 1 on the first half of the "
             "coordinates and 0 on the rest; warp ε = π(z + (ε/ω) sin(ω S z)), S a cyclic shift of the coordinates, "
             "ω = π√n/r (π: back onto the sphere). In parentheses: the margin over that of the series' first run "
             "(ref.); significant means at least {significant:g} standard errors from 0.",
    "rotation": "The rotation changes the expected loss by at most {rotation} (a fraction {relative} of L(id): "
                "rounding), as an isometry must.",
    "series": "**{series}**, τ: {rules}.",
    "rules": "Runs under different τ rules are different objectives, not one objective at different hardness: read "
             "the ratios between them with that in mind.",
    "winning": "The true inverse beats every distorted encoder, significantly, at {runs}.",
    "pooled": "Relative to {reference}'s margins, pooled over the {count} distorted encoders (inverse-variance "
              "weights; the ratios share batches, so these standard errors are too small): {ratios}.",
    "no_ratios": "{reference}'s margins are not significantly positive, so no ratios are taken to them.",
    "losing": "A distorted encoder has a significantly lower expected loss than the true inverse at {runs}.",
    "flat": "Every distorted margin of {runs} is within {significant:g} standard errors of 0.",
    "collapse": "The collapsed (constant) encoder beats the true inverse at {runs}: that objective prefers collapse "
                "to the true inverse, so it does not identify the latents.",
    "kept": "The true inverse beats the collapsed encoder at {runs}.",
    "weights": "The importance weights exp(β·sim/τ) over each anchor's {counts} negatives at the true inverse have a "
               "Kish effective sample size of {ess}: where it is near 1 the reweighted loss rests on the one negative "
               "nearest each anchor.",
    "resampled": "The DGP's importance resampling of the tilted negatives has a mean ESS of {ess}.",
}
"""The sentences of the explanation under the table, filled with the check's numbers."""


def _series_paragraph(check: PopulationCheck, series: PopulationSeries) -> str:
    members = [check.runs[label] for label in series.runs]
    ref = check.runs[series.reference]
    names = distortions(check.spec)
    rules: dict[str, list[str]] = {}
    for run in members:
        rules.setdefault(run.tau_rule, []).append(f"{run.label} {run.tau:.3g}")
    words = [PROSE["series"].format(series=series.label,
                                     rules="; ".join(f"{', '.join(v)} ({rule})" for rule, v in rules.items()))]
    if len(rules) > 1:
        words.append(PROSE["rules"])
    winning = [r.label for r in members if all(r.margins[n].mean > 0 and r.margins[n].significant() for n in names)]
    if winning:
        words.append(PROSE["winning"].format(runs=_list(winning)))
    pooled_text = [f"{r.label} {_pm(r.pooled_ratio, 2)} ({_flatter(r.pooled_ratio)})"
                   for r in members if r is not ref and r.pooled_ratio is not None]
    if pooled_text:
        words.append(PROSE["pooled"].format(reference=ref.label, count=len(names), ratios=", ".join(pooled_text)))
    elif len(members) > 1:
        words.append(PROSE["no_ratios"].format(reference=ref.label))
    losing = {r.label: lost for r in members if (lost := [f"{n} ({_pm(r.margins[n])})" for n in names
                                                           if r.margins[n].mean < 0 and r.margins[n].significant()])}
    if losing:
        words.append(PROSE["losing"].format(runs="; ".join(f"{k}: {', '.join(v)}" for k, v in losing.items())))
    flat = [r.label for r in members if not any(r.margins[n].significant() for n in names)]
    if flat:
        words.append(PROSE["flat"].format(runs=_list(flat), significant=SIGNIFICANT))
    collapse = [r for r in members if r.margins[CONSTANT].mean < 0 and r.margins[CONSTANT].significant()]
    if collapse:
        words.append(PROSE["collapse"].format(runs=_list([f"{r.label} ({_pm(r.margins[CONSTANT])})" for r in collapse])))
    kept = [r.label for r in members if r.margins[CONSTANT].mean > 0 and r.margins[CONSTANT].significant()]
    if kept:
        words.append(PROSE["kept"].format(runs=_list(kept)))
    weighted = [r for r in members if r.weights_ess is not None]
    if weighted:
        ess = _list([f"{_g(r.weights_ess.mean)} (min {_g(r.weights_ess.min)}) at β = {r.beta:g}" for r in weighted])
        counts = "/".join(map(str, sorted({r.weights_ess.out_of for r in weighted})))
        words.append(PROSE["weights"].format(counts=counts, ess=ess))
    resampled = [r for r in members if r.sampler_ess is not None]
    if resampled:
        words.append(PROSE["resampled"].format(
            ess=_list([f"{_g(r.sampler_ess.mean)} of {r.sampler_ess.out_of} at {r.label}" for r in resampled])))
    return " ".join(words)


def paragraph(check: PopulationCheck) -> str:
    """The explanation under the table, every number taken from ``check``."""
    runs = list(check.runs.values())
    rotation = max((abs(r.margins[ROTATION].mean) for r in runs), default=0.0)
    relative = max((abs(r.margins[ROTATION].mean) / abs(r.loss_identity.mean) for r in runs
                    if r.loss_identity.mean != 0), default=0.0)
    text = [PROSE["intro"].format(significant=SIGNIFICANT),
            PROSE["rotation"].format(rotation=_g(rotation, 2), relative=_g(relative, 2))]
    text += [_series_paragraph(check, series) for series in check.spec.series]
    return "\n\n".join(text)


def section(check: PopulationCheck) -> str:
    """The "Population check (no training)" section of results.md."""
    return "\n".join(["## Population check (no training)", "", table(check), "", paragraph(check), ""])
