"""Validation helpers: every invalid option raises a ValueError naming key, value and what is allowed."""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
import unicodedata
from typing import Any, Iterable, Iterator, Mapping

_CHECKING = contextvars.ContextVar("dgp_checking", default=False)


@contextlib.contextmanager
def checking() -> Iterator[None]:
    """Within this block components are built only to check their options: a component whose
    construction is expensive (the mixing's condition-number search) validates every option,
    then skips the expensive draw and holds placeholder parameters (see :func:`only_checking`)."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


_SECTION = contextvars.ContextVar("dgp_section", default="")


@contextlib.contextmanager
def section(key: str) -> Iterator[None]:
    """Within this block components are built for the config key ``key`` (a registry opens one
    around each construction; :func:`current_section` reads it)."""
    token = _SECTION.set(key)
    try:
        yield
    finally:
        _SECTION.reset(token)


def current_section(default: str) -> str:
    """The config key of the component being built (``loss.members[0]``); ``default`` outside any."""
    return _SECTION.get() or default


def only_checking() -> bool:
    """True inside :func:`checking`: validate, then skip expensive parameter draws."""
    return _CHECKING.get()


class OptionError(ValueError):
    """An invalid option, its message led by the config key(s) it names: ``<keys><detail>``.

    A component names its own options bare (``tau``, ``members[0].weight``); the registry that
    builds it prefixes its section onto each such key (:meth:`within`), so the message names the
    full config key (``loss.tau``). Keys of other sections (``dgp.dim``) are written in full.
    """

    def __init__(self, keys: tuple[str, ...], detail: str):
        super().__init__(", ".join(keys) + detail)
        self.keys, self.detail = keys, detail

    def within(self, section: str, own: Iterable[str]) -> OptionError:
        """This error with ``section.`` before each key whose first name is one of ``own``."""
        own = set(own)
        return OptionError(tuple(f"{section}.{k}" if re.match(r"[^.\[]*", k).group() in own else k
                                 for k in self.keys), self.detail)


def invisible(text: Any, kinds: tuple[str, ...] = ("Cc", "Cf"), allowed: str = "") -> str:
    """The invisible characters of ``text`` named in words (``U+200B ZERO WIDTH SPACE``): of the Unicode categories
    ``kinds`` (default: control and format characters, which print as nothing or move the terminal's cursor), other
    than those in ``allowed``; empty when it holds none or is no string."""
    if not isinstance(text, str):
        return ""
    found = dict.fromkeys(ch for ch in text if unicodedata.category(ch) in kinds and ch not in allowed)
    return ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, '(a control character)')}" for ch in found)


def dotted(config: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` (``dgp.conditional.name``) in a nested config; None where it is not set."""
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def fail(key: str, value: Any, allowed: str) -> None:
    raise OptionError((key,), f"={value!r} is invalid: {allowed}")


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


FLOAT32_RANGE = (1.1754943508222875e-38, 3.4028234663852886e38)
"""The positive normal numbers float32 holds: a scale outside them becomes 0 or inf in a float32 run."""


def float32_positive(key: str, value: Any) -> float:
    """A positive number a float32 computation holds as such (:data:`FLOAT32_RANGE`)."""
    v = positive(key, value)
    if not FLOAT32_RANGE[0] <= v <= FLOAT32_RANGE[1]:
        fail(key, value, f"must lie in [{FLOAT32_RANGE[0]:.3g}, {FLOAT32_RANGE[1]:.3g}]: float32 turns it into "
                         f"{'0' if v < 1 else 'inf'}")
    return v


TRAINABLE = 1e6
"""The largest magnitude of a loss's scale or shift (τ and 1/τ, a margin, an offset, a tilt) that float32 training can
use: the loss's values grow with it, and a run stops once |loss| exceeds ``train.loss_limit`` (10⁶ by default)."""


def trainable(key: str, value: float, what: str, smallest: float | None = None) -> float:
    """``value`` (already checked as a number) within [``smallest``, :data:`TRAINABLE`] in magnitude (``smallest``
    None: 0), else a ValueError naming the range and ``what`` grows with it."""
    low = 0.0 if smallest is None else smallest
    if not low <= abs(value) <= TRAINABLE:
        fail(key, value, f"must lie in [{low:g}, {TRAINABLE:g}]{' in magnitude' if smallest is None else ''} for "
                         f"float32 training: {what}")
    return value


SHAPE_P = (0.1, 100.0)
"""The exponents p of a generalised normal law (density ∝ exp(-|x/λ|^p)) whose draws float32 holds: they are
Gamma(1/p)^(1/p) variates, which overflow float32 below p ≈ 0.03 (and p = 100 is already a uniform law to
plotting accuracy)."""
DATA_SCALE = 1e6
"""The largest scale or offset of a process's latents: they are mixed and encoded in float32, whose squares
(variances, squared distances) overflow near 1.8e19."""


def shape_p(key: str, value: Any) -> float:
    """A generalised normal exponent within :data:`SHAPE_P`."""
    v = positive(key, value)
    if not SHAPE_P[0] <= v <= SHAPE_P[1]:
        fail(key, value, f"must lie in [{SHAPE_P[0]:g}, {SHAPE_P[1]:g}]: the generalised normal draws Gamma(1/p)^(1/p), "
                         "which float32 holds there")
    return v


def latent_scale(key: str, value: Any) -> float:
    """A positive scale of the latents that float32 holds and keeps mixable: in [:data:`FLOAT32_RANGE` [0],
    :data:`DATA_SCALE`]."""
    v = positive(key, value)
    if not FLOAT32_RANGE[0] <= v <= DATA_SCALE:
        fail(key, value, f"must lie in [{FLOAT32_RANGE[0]:.3g}, {DATA_SCALE:g}]: the latents are mixed and encoded in "
                         "float32")
    return v


def data_scale(key: str, value: Any, minimum: float = 0.0) -> float:
    """A scale or offset of the latents in [``minimum``, :data:`DATA_SCALE`]."""
    v = number(key, value)
    if not minimum <= v <= DATA_SCALE:
        fail(key, value, f"must lie in [{minimum:g}, {DATA_SCALE:g}]: the latents are mixed and encoded in float32")
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


def integer(key: str, value: Any, minimum: int | None = None, maximum: int | None = None, why: str = "") -> int:
    """An int at least ``minimum`` and at most ``maximum`` (``why``: what the bound protects, said when it breaks)."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail(key, value, "expected an integer")
    if minimum is not None and value < minimum:
        fail(key, value, f"must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        fail(key, value, f"at most {maximum:,}" + (f": {why}" if why else ""))
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


def canonical(value: Any) -> Any:
    """``value`` with every number as a float and mappings as plain dicts, recursively.

    ``10`` and ``10.0`` (what a W&B server sends for a float ending in .0) describe the same
    parameter; hashes and comparisons of configs use this form.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value
