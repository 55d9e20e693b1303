"""Every numeric option of every registered component (processes, encoders, losses; plugins included) at the extremes a
hostile config gives it: refused before anything is built, by a message naming its key, or accepted and then a run
that trains to a finite loss within a time limit. Nothing in between: no hang, no allocator error, no NaN."""

from __future__ import annotations

import math
import signal

import pytest

from dgp.registry import REGISTRIES, option_parameters
from identifiable_cl.components import build, load_config
from tests.tiny import TINY

EUCLIDEAN = {"dgp.space.name": "euclidean", "dgp.negatives.name": "none"}
BASES = [
    {},
    {"dgp.space.name": "sphere", "dgp.marginal.name": "uniform", "dgp.conditional.name": "vmf"},
    {"dgp.space.name": "sphere", "dgp.marginal.name": "uniform", "dgp.conditional.name": "anisotropic"},
    {**EUCLIDEAN, "dgp.marginal.name": "normal", "dgp.conditional.name": "normal"},
    {**EUCLIDEAN, "dgp.marginal.name": "segments", "dgp.conditional.name": "same_segment"},
    {**EUCLIDEAN, "dgp.marginal.name": "ar1", "dgp.conditional.name": "ar1"},
    {"dgp.space.name": "euclidean", "dgp.marginal.name": "content_style", "dgp.marginal.content_dim": 5,
     "dgp.conditional.name": "content_style", "dgp.conditional.content_dim": 5},
]
"""Processes a component is tried in, first to last, until one accepts it with its defaults."""
KINDS = ("spaces", "marginals", "conditionals", "negatives", "mixings", "encoders", "losses")
SECONDS = 30


def _registries() -> dict:
    import dgp.conditionals  # noqa: F401  (the registries fill as their modules load)
    import dgp.marginals  # noqa: F401
    import dgp.mixing  # noqa: F401
    import dgp.negatives  # noqa: F401
    import dgp.spaces  # noqa: F401
    import identifiable_cl.encoders  # noqa: F401
    import identifiable_cl.losses  # noqa: F401

    return {kind: REGISTRIES[kind] for kind in KINDS}


def components() -> list[tuple[str, str]]:
    registries = _registries()
    for registry in registries.values():
        registry.load_entry_points()
    return [(kind, name) for kind, registry in registries.items() for name in registry.names()]


def extremes(default: int | float) -> list[int | float]:
    return [10 ** 12, -(10 ** 12)] if isinstance(default, int) else [1e300, -1e300, 1e-300]


class TookTooLong(Exception):
    pass


def _alarm(signum, frame):
    raise TookTooLong


@pytest.mark.integration
@pytest.mark.parametrize("kind,name", components())
def test_every_numeric_option_at_its_extremes_is_refused_by_key_or_trains(kind, name):
    registry = _registries()[kind]
    section = registry.section
    base = None
    for process in BASES:
        try:
            candidate = {**TINY, "train.steps": 2, **process, f"{section}.name": name}
            load_config(None, candidate)
        except ValueError:
            continue
        base = candidate
        break
    if base is None:
        pytest.skip(f"{section}.name={name} fits none of the processes tried")
    options = {option: p.default for option, p in option_parameters(registry.get(name))[0].items()
               if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}
    problems = []
    for option, default in options.items():
        key = f"{section}.{option}"
        for value in extremes(default):
            try:
                config = load_config(None, {**base, key: value})
            except ValueError as exc:
                if key not in str(exc).splitlines()[0]:
                    problems.append(f"{key}={value!r}: refused naming another key: {exc}")
                continue
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(SECONDS)
            try:
                c = build(config)
                losses = [float(c.step()) for _ in range(2)]
                if not all(math.isfinite(loss) for loss in losses):
                    problems.append(f"{key}={value!r}: accepted, then the loss is {losses}")
            except TookTooLong:
                problems.append(f"{key}={value!r}: accepted, then no two steps within {SECONDS} s")
            except ValueError as exc:
                if key not in str(exc).splitlines()[0]:
                    problems.append(f"{key}={value!r}: accepted, then refused naming another key: {exc}")
            except Exception as exc:  # any other failure is the finding this test exists for
                problems.append(f"{key}={value!r}: accepted, then {type(exc).__name__}: {str(exc)[:200]}")
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
    assert not problems, "\n".join(problems)
