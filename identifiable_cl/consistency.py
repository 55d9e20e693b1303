"""Cross-run consistency: identifiability measured without the true latents (``icl results --consistency``).

Two runs trained on the same process (same ``dgp.seed``, so the same mixing and drawn parameters) but from
different training seeds recover the same latents only if training identifies them; then each run's
embedding is an invertible map of the other's. CEBRA's consistency score (Schneider et al. 2023) measures
this as the R² of the least-squares affine map from one run's embedding h_a (N, d) to another's h_b
(in sample, with intercept, averaged over h_b's dimensions), for every ordered pair of runs on the same
held-out observations x = g(z). It needs no z, which is how a finding carries from synthetic data to real
data; here, beside the ground-truth linear R², it shows how far consistency predicts identifiability.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from dgp.seeding import stream_seed
from identifiable_cl.aggregate import mean_std, stats
from identifiable_cl.rundir import SUMMARY, is_run_dir, read_json

SAMPLES = 8192
"""Held-out observations each group's runs are compared on."""
SEED = 0
"""Root of the random stream ``consistency`` the held-out latents are drawn from."""


def consistency_score(h_a: Any, h_b: Any) -> float:
    """R² of h_b ``(N, d')`` predicted from h_a ``(N, d)`` by least squares with an intercept, in sample,
    averaged over h_b's dimensions: 1 when h_b is an affine function of h_a."""
    from identifiable_cl.evaluation import linear_r2

    return linear_r2(h_b, h_a, in_sample=True).mean


@dataclass
class Consistency:
    """The runs of one process and their scores: one per ordered pair of runs, and each run's linear R²."""

    fingerprint: str
    runs: list[Path]
    scores: list[float]
    r2_linear: list[float]

    def row(self) -> str:
        cells = (mean_std(*stats(values)[:2]) for values in (self.scores, self.r2_linear))
        return f"| {self.fingerprint[:12]} | {len(self.runs)} | {' | '.join(cells)} |"


def run_dirs(runs: Sequence[Any]) -> list[Path]:
    """The run directories of the finished runs among ``runs`` (:class:`identifiable_cl.aggregate.Run`)."""
    found = []
    for run in runs:
        if run.ok:
            found.append(run.path if is_run_dir(run.path) else run.path / "run")
    return found


def consistency(dirs: Sequence[Path], samples: int = SAMPLES) -> list[Consistency]:
    """Every group of at least two finished runs that share a process, with CEBRA's score for each ordered
    pair of its runs on the same ``samples`` held-out observations of that process."""
    from identifiable_cl.components import load_run

    groups: dict[str, list[tuple[Path, Any]]] = {}
    for run_dir in dirs:
        c = load_run(run_dir)
        groups.setdefault(c.process.fingerprint(), []).append((run_dir, c))
    out = []
    for fingerprint, members in groups.items():
        if len(members) < 2:
            continue
        process = members[0][1].process
        with torch.no_grad():
            z = process.sample_latents(samples, process.make_generator(stream_seed(SEED, "consistency")))
            x = process.mix(z)
        h = [c.encode(x.to(c.device)).cpu() for _, c in members]
        scores = [consistency_score(h[a], h[b]) for a, b in itertools.permutations(range(len(h)), 2)]
        r2 = [summary["r2_linear"] for d, _ in members
              if isinstance(summary := read_json(d / SUMMARY, missing_ok=True), dict) and "r2_linear" in summary]
        out.append(Consistency(fingerprint, [d for d, _ in members], scores, r2))
    return out


HEADER = ("| process | runs | consistency (every ordered pair) | linear R² (ground truth) |\n"
          "|---|---|---|---|")


def consistency_table(runs: Sequence[Any], samples: int = SAMPLES) -> str:
    """The markdown table of :func:`consistency` over the finished runs among ``runs``; a ValueError when no two
    of them share a process."""
    groups = consistency(run_dirs(runs), samples)
    if not groups:
        raise ValueError("--consistency: no two finished runs share a process; train several seeds on one process "
                         "with the same dgp.seed (e.g. a sweep over seed with dgp.seed fixed)")
    return "\n".join([HEADER, *(g.row() for g in groups)])
