"""Validation helpers: every invalid option raises a ValueError naming key, value and what is allowed."""

from __future__ import annotations

import math
from typing import Any, Iterable


def fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{key}={value!r} is invalid: {allowed}")


def number(key: str, value: Any) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(key, value, "expected a finite number")
    return float(value)


def positive(key: str, value: Any) -> float:
    v = number(key, value)
    if v <= 0:
        fail(key, value, "must be > 0")
    return v


def non_negative(key: str, value: Any) -> float:
    v = number(key, value)
    if v < 0:
        fail(key, value, "must be >= 0")
    return v


def probability(key: str, value: Any) -> float:
    v = number(key, value)
    if not 0.0 <= v <= 1.0:
        fail(key, value, "must lie in [0, 1]")
    return v


def integer(key: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(key, value, "expected an integer")
    if minimum is not None and value < minimum:
        fail(key, value, f"must be an integer >= {minimum}")
    return int(value)


def boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        fail(key, value, "expected true or false")
    return value


def choice(key: str, value: Any, options: Iterable[str]) -> str:
    options = list(options)
    if value not in options:
        fail(key, value, f"allowed: {', '.join(map(repr, options))}")
    return value
