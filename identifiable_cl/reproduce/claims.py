"""Claims written as data, checked against the mean over seeds of each run's summary metrics.

A claim reads ``left op right + offset``:

- ``left`` / ``right``: an operand, either a number, a mapping ``{scale: number}``
  (a threshold that depends on the scale; ``tiny`` and ``medium`` fall back to ``smoke``), or
  ``{run: LABEL, metric: KEY}`` (the mean over seeds of that run's summary metric,
  e.g. ``r2_linear_lambda_5`` or ``identity_r2_linear``);
- ``op``: ``>=``, ``<=``, ``>`` or ``<``; or ``within``, with ``tolerance`` (a number or
  ``{scale: number}``): |left − (right + offset)| ≤ tolerance, for "matches a published number";
- ``offset`` (optional, default 0): a number or ``{scale: number}`` added to ``right``,
  for "exceeds the other run by at least X";
- ``scales`` (optional): the scales the claim is checked at (default: all); ``tiny``, the plumbing
  check of ``smoke``, goes with ``smoke``, while ``medium`` is checked only where it is listed.

Example::

    claim: AnInfoNCE recovers the low-Λ block better than InfoNCE
    left: {run: aninfonce_bimodal, metric: r2_linear_lambda_5}
    op: ">="
    right: {run: infonce_bimodal, metric: r2_linear_lambda_5}
    offset: {paper: 0.5, smoke: 0.2}
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
SYMBOLS = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}
WITHIN = "within"
FALLBACK = {"tiny": "smoke", "medium": "smoke"}
"""A scale without its own value of a per-scale number uses this scale's value."""

HOLDS, FAILS, NO_DATA = "holds", "fails", "no data"


def check_entries(where: str, raw: Mapping[str, Any], allowed: set[str]) -> None:
    """A ValueError naming the entries of ``raw`` outside ``allowed``."""
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown entries {unknown}; allowed: {', '.join(sorted(allowed))}")


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}={value!r} is invalid: expected a finite number")
    return float(value)


@dataclass(frozen=True)
class Operand:
    """A constant (``values``: scale → number, key ``None`` for every scale) or a run's metric."""

    run: str | None = None
    metric: str | None = None
    values: Mapping[str | None, float] | None = None

    @classmethod
    def parse(cls, where: str, raw: Any, scales: Sequence[str]) -> "Operand":
        if isinstance(raw, Mapping) and ("run" in raw or "metric" in raw):
            if set(raw) != {"run", "metric"} or not all(isinstance(raw[k], str) and raw[k] for k in ("run", "metric")):
                raise ValueError(f"{where}={dict(raw)!r} is invalid: expected {{run: LABEL, metric: KEY}}")
            return cls(run=raw["run"], metric=raw["metric"])
        if isinstance(raw, Mapping):
            unknown = [k for k in raw if k not in scales]
            if unknown or not raw:
                raise ValueError(
                    f"{where}={dict(raw)!r} is invalid: a per-scale value maps scales ({', '.join(scales)}) to numbers"
                )
            return cls(values={k: _number(f"{where}.{k}", v) for k, v in raw.items()})
        return cls(values={None: _number(where, raw)})

    def constant(self, scale: str) -> float | None:
        """The number at ``scale`` (None when this operand is a run's metric or has no value there)."""
        if self.values is None:
            return None
        for key in (None, scale, FALLBACK.get(scale)):
            if key in self.values:
                return self.values[key]
        return None

    def text(self) -> str:
        if self.run is not None:
            return f"{self.run}.{self.metric}"
        return ", ".join(f"{v:g}" if k is None else f"{v:g} ({k})" for k, v in self.values.items())


@dataclass(frozen=True)
class Claim:
    """One checkable statement; see the module docstring."""

    text: str
    left: Operand
    op: str
    right: Operand
    offset: Operand
    scales: tuple[str, ...] | None = None
    tolerance: Operand | None = None

    @classmethod
    def parse(cls, where: str, raw: Any, scales: Sequence[str]) -> "Claim":
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}={raw!r} is invalid: expected a mapping with claim, left, op, right")
        check_entries(where, raw, {"claim", "left", "op", "right", "offset", "scales", "tolerance"})
        missing = [k for k in ("claim", "left", "op", "right") if k not in raw]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if raw["op"] not in (*OPS, WITHIN):
            raise ValueError(f"{where}.op={raw['op']!r} is invalid: allowed: {', '.join((*OPS, WITHIN))}")
        if (raw["op"] == WITHIN) != ("tolerance" in raw):
            raise ValueError(f"{where}: a tolerance goes with op 'within', and op 'within' needs one")
        only = raw.get("scales")
        if only is not None and (not isinstance(only, list) or not only or any(s not in scales for s in only)):
            raise ValueError(f"{where}.scales={only!r} is invalid: a non-empty list of {', '.join(scales)}")
        left = Operand.parse(f"{where}.left", raw["left"], scales)
        if left.run is None:
            raise ValueError(f"{where}.left: must name a run and a metric, {{run: LABEL, metric: KEY}}")
        return cls(
            text=str(raw["claim"]),
            left=left,
            op=raw["op"],
            right=Operand.parse(f"{where}.right", raw["right"], scales),
            offset=Operand.parse(f"{where}.offset", raw.get("offset", 0.0), scales),
            scales=None if only is None else tuple(only),
            tolerance=Operand.parse(f"{where}.tolerance", raw["tolerance"], scales) if "tolerance" in raw else None,
        )

    def runs(self) -> set[str]:
        return {o.run for o in (self.left, self.right) if o.run is not None}

    def applies(self, scale: str) -> bool:
        return self.scales is None or scale in self.scales or (scale == "tiny" and "smoke" in self.scales)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one claim: ``state`` is holds, fails or no data; ``detail`` shows the numbers."""

    claim: Claim
    state: str
    left: float | None
    right: float | None
    threshold: float | None
    detail: str


def tally(verdicts: Sequence["Verdict"]) -> str:
    """"3 of 4 claims hold", with ", 2 without data" when some claims had no numbers to check."""
    holds = sum(v.state == HOLDS for v in verdicts)
    missing = sum(v.state == NO_DATA for v in verdicts)
    return f"{holds} of {len(verdicts)} claims hold" + (f", {missing} without data" if missing else "")


Means = Mapping[str, Mapping[str, float]]
"""Run label → metric → mean over the run's successful seeds."""


def _value(operand: Operand, means: Means, scale: str) -> float | None:
    if operand.run is None:
        return operand.constant(scale)
    value = means.get(operand.run, {}).get(operand.metric)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def check(claim: Claim, means: Means, scale: str) -> Verdict:
    """Evaluate ``claim`` on the means of ``scale``; missing numbers give ``no data``."""
    left = _value(claim.left, means, scale)
    right = _value(claim.right, means, scale)
    offset = _value(claim.offset, means, scale)
    if left is None or right is None or offset is None:
        missing = [o.text() for o, v in ((claim.left, left), (claim.right, right), (claim.offset, offset)) if v is None]
        return Verdict(claim, NO_DATA, left, right, None, f"no value for {', '.join(missing)}")
    threshold = right + offset
    right_text = f"{claim.right.text()} = {right:.3f}" if claim.right.run is not None else f"{right:.3f}"
    if offset:
        right_text = f"{right_text} {'+' if offset > 0 else '−'} {abs(offset):.3f} = {threshold:.3f}"
    if claim.tolerance is not None:
        tolerance = _value(claim.tolerance, means, scale)
        if tolerance is None:
            return Verdict(claim, NO_DATA, left, right, threshold, f"no value for {claim.tolerance.text()}")
        holds = abs(left - threshold) <= tolerance
        detail = (f"{claim.left.text()} = {left:.3f} {'' if holds else 'is not '}within ±{tolerance:.3f} of {right_text} "
                  f"(off by {left - threshold:+.3f})")
        return Verdict(claim, HOLDS if holds else FAILS, left, right, threshold, detail)
    holds = OPS[claim.op](left, threshold)
    detail = f"{claim.left.text()} = {left:.3f} {'' if holds else 'is not '}{SYMBOLS[claim.op]} {right_text}"
    return Verdict(claim, HOLDS if holds else FAILS, left, right, threshold, detail)
