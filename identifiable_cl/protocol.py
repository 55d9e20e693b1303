"""A run's evaluation protocol: the held-out metrics of an evaluation, the loss's own logs, the metrics of the run
itself (Λ recovery, mutual information: the catalog's ``of_run`` metrics), the in-sample scores, and the identity
baseline g(z).

Every evaluation draws from its own random stream (``eval.<step>``, ``eval.identity`` ...), so evaluating never
disturbs training and a resumed run evaluates exactly as an uninterrupted one. What does not depend on the
encoder (the identity baseline, the process's mutual-information truth) is measured once within a
:class:`Measured`, whose lifetime is a pack of runs (:func:`identifiable_cl.training.run_packed`); runs in
different processes share identity baselines through :data:`identifiable_cl.rundir.IDENTITY_CACHE`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from torch import Tensor

from dgp.seeding import stream_seed
from identifiable_cl import __version__, rundir
from identifiable_cl.evaluation import evaluate, identity_baseline
from identifiable_cl.losses.contract import traits
from identifiable_cl.evaluation.catalog import RunScoring, compute
from identifiable_cl.evaluation.views import evaluate_views
from identifiable_cl.solvers import Solver
from identifiable_cl.tracking import check_tracking


@dataclass
class Measured:
    """What is measured once and shared for as long as this object lives: identity baselines by
    :func:`identity_key`, mutual-information truths by (process fingerprint, K, seed)."""

    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    truths: dict[tuple[str, int, int], dict[str, Any]] = field(default_factory=dict)


def eval_arguments(e: Mapping[str, Any], final: bool) -> dict[str, Any]:
    """The sample sizes and options of an evaluation from the config's ``eval`` section (the final
    evaluation and the identity baseline use the ``final_*`` sizes; ``enabled``: every boolean ``eval.*`` key,
    which switch metrics of the catalog on)."""
    prefix = "final_" if final else ""
    return {
        "n_fit": e[prefix + "n_fit"], "n_test": e[prefix + "n_test"], "n_centres": e[prefix + "n_centres"],
        "nonlinear": e["nonlinear"], "in_sample": e["in_sample"],
        "enabled": {f"eval.{k}": v for k, v in e.items() if isinstance(v, bool)},
    }


MATCHING = "mcc_matching"
"""The MCC's matching of latents to dimensions: used for Λ recovery, not reported."""


def reported(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics as logged and summarised: without the MCC matchings (:data:`MATCHING`)."""
    return {k: v for k, v in metrics.items() if not k.endswith(MATCHING)}


def evaluation(c: Solver, final: bool, measured: Measured | None = None) -> dict[str, Any]:
    """Held-out metrics at the current step (the final evaluation uses the larger sample sizes); ``measured``: the
    measurements shared within a pack (None: a fresh one)."""
    generator = c.process.make_generator(stream_seed(c.config["seed"], f"eval.{c.steps_done}"))
    arguments = eval_arguments(c.config["eval"], final)
    if c.process.view_count > 1:
        encoders = [lambda x, v=v: c.encode(x, v) for v in range(c.process.view_count)]
        draws = c.config["eval"]["gumbel_draws"]
        metrics = evaluate_views(encoders, c.process, generator, control=final, gumbel_draws=draws, **arguments,
                                 rotation_reference=final)
    else:
        metrics = evaluate(c.encode, c.process, generator, **arguments, rotation_reference=final)
    if final:
        metrics.update(in_sample_metrics(c.encode, c, f"eval.{c.steps_done}.in_sample"))
    metrics.update(loss_logs(c))
    metrics.update(compute(RunScoring(c, metrics, (measured or Measured()).truths), arguments["enabled"]))
    return metrics


def in_sample_metrics(encode: Callable[[Tensor], Tensor], c: Solver, stream: str) -> dict[str, float]:
    """The scalar linear metrics (R², MCCs, block R²) fitted and scored on the same ``eval.in_sample_n``
    fresh samples of the random stream ``stream``, as the reference codes log them; keys get the suffix
    ``_in_sample``. None of them when ``eval.in_sample_n`` is null."""
    n = c.config["eval"]["in_sample_n"]
    if n is None:
        return {}
    generator = c.process.make_generator(stream_seed(c.config["seed"], stream))
    scored = evaluate(encode, c.process, generator, n_fit=n, n_test=2, nonlinear=False, in_sample=True,
                      rotation_reference=False)
    return {f"{k}_in_sample": v for k, v in scored.items() if isinstance(v, float)}


def loss_logs(c: Solver) -> dict[str, Any]:
    """The loss's own logs (τ, Λ̂ ...), and, where the loss learns a Λ̂ (its ``lambda_hat`` log) or the process
    has a true Λ, each as ``lambda_learned`` / ``lambda_true`` (the catalog's Λ recovery compares them)."""
    logs = traits(c.loss).logs
    out: dict[str, Any] = dict(logs()) if logs else {}
    if out.get("lambda_hat") is not None:
        out["lambda_learned"] = out["lambda_hat"]
    if c.process.lambda_true is not None:
        out["lambda_true"] = c.process.lambda_true.cpu().tolist()
    return out


def identity_key(c: Solver) -> str:
    """A hash of what the identity baseline depends on: the process, the root seed (its random stream), the
    final evaluation's settings, the device type and the version."""
    e = c.config["eval"]
    what = {"process": c.process.fingerprint(), "seed": c.config["seed"], "eval": eval_arguments(e, final=True),
            "in_sample_n": e["in_sample_n"], "gumbel_draws": e["gumbel_draws"], "device": c.device.type,
            "version": __version__}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


def measure_identity(c: Solver) -> dict[str, Any]:
    """The metrics of the identity encoder h = g(z) (the observations themselves) at the final evaluation's
    sizes, and its in-sample scores as ``identity_*_in_sample``; with views, each view's observations."""
    generator = c.process.make_generator(stream_seed(c.config["seed"], "eval.identity"))
    arguments = {**eval_arguments(c.config["eval"], final=True), "rotation_reference": False}
    if c.process.view_count > 1:  # every view's observations, scored as the encoders' (evaluate_views)
        views = evaluate_views([lambda x: x] * c.process.view_count, c.process, generator,
                               gumbel_draws=c.config["eval"]["gumbel_draws"], **arguments)
        base = {f"identity_{k}": v for k, v in views.items()}
    else:
        base = identity_baseline(c.process, generator, **arguments)
    scored = in_sample_metrics(lambda x: x, c, "eval.identity.in_sample")
    base.update({f"identity_{k}": v for k, v in scored.items()})
    return reported(base)


def identity_cache() -> Path | None:
    """The folder :data:`identifiable_cl.rundir.IDENTITY_CACHE` names, or None; one that names something other
    than a folder is an error naming it (checked before a run writes anything)."""
    folder = os.environ.get(rundir.IDENTITY_CACHE)
    if folder and Path(folder).exists() and not Path(folder).is_dir():
        raise ValueError(f"{rundir.IDENTITY_CACHE}={folder!r} is not a folder: name a folder where runs share their "
                         "identity baselines, or unset it")
    return Path(folder) if folder else None


def check_before_writing(c: Solver) -> None:
    """What can fail before training and is checked before a run's folder changes: its tracking and the
    identity baselines' cache."""
    check_tracking(c.config)
    identity_cache()


def shared_identity(c: Solver, measured: Measured) -> dict[str, Any]:
    """:func:`measure_identity`, measured once per :func:`identity_key` within ``measured`` and, with
    :data:`identifiable_cl.rundir.IDENTITY_CACHE` set, once for every run that shares that folder (a damaged
    file is measured again)."""
    key = identity_key(c)
    if key not in measured.identities:
        folder = identity_cache()
        path = folder / f"identity-{key}.json" if folder else None
        try:
            found = rundir.read_json(path, missing_ok=True) if path else None
        except (ValueError, OSError):
            found = None
        if found is None:
            found = measure_identity(c)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    rundir.write_json(path, found)
                except OSError:
                    pass  # a cache that cannot be written is not shared; the run has its baseline
        measured.identities[key] = found
    return copy.deepcopy(measured.identities[key])
