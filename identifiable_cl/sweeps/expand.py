"""Grid and random expansion of a sweep with the semantics of W&B's sweep engine.

Grid (``grid_search_next_runs`` in ``wandb/sweeps``): parameters in name order;
``int_uniform`` becomes ``range(min, max + 1)`` and ``q_uniform``
``numpy.arange(min, max, q)`` (max excluded); the runs are the Cartesian
product with the last parameter varying fastest; a point whose values have
the same YAML form as an earlier point (``1`` and ``1.0`` count as equal) is
skipped, and equal values take the last listed spelling.

Random (``random_search_next_runs``): for each run, each parameter in name
order, constants included, draws ``u = uniform(0, 1)`` and maps it through
the distribution's inverse CDF (``scipy.stats`` ``ppf``, as W&B does). W&B
uses the global ``random`` module; here a ``random.Random(seed)`` makes the
draws repeatable.

Every run's parameters hold all swept keys, constants included, in name order.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from typing import Any, Iterator

import numpy as np
import yaml
from scipy import stats

from identifiable_cl.sweeps.spec import Parameter, SweepSpec


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as Python numbers and lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


MAX_GRID_RUNS = 100_000
"""A grid of more runs than this is refused before any of it is enumerated."""


def grid_count(p: Parameter) -> int:
    """How many values a grid takes for one parameter (before repeats are dropped)."""
    s = p.spec
    if p.kind == "int_uniform":
        return max(0, s["max"] - s["min"] + 1)
    if p.kind == "q_uniform":
        return max(0, math.ceil((s["max"] - s["min"]) / s["q"]))
    return len(s["values"]) if p.kind == "categorical" else 1


def check_grid_size(parameters: tuple[Parameter, ...]) -> None:
    """A ValueError giving the size of a grid of more than :data:`MAX_GRID_RUNS` runs."""
    counts = {p.name: grid_count(p) for p in parameters if p.kind != "constant"}
    if math.prod(counts.values()) > MAX_GRID_RUNS:
        sizes = " × ".join(f"{n:,} ({name})" for name, n in counts.items())
        raise ValueError(f"parameters: the grid has {math.prod(counts.values()):,} points ({sizes}), more than the "
                         f"limit of {MAX_GRID_RUNS:,}; take fewer values, a coarser q, or method random with run_cap")


def grid_values(p: Parameter) -> list[Any]:
    """The values a grid takes for one parameter."""
    s = p.spec
    if p.kind == "constant":
        return [s["value"]]
    if p.kind == "categorical":
        return list(s["values"])
    if p.kind == "int_uniform":
        return list(range(s["min"], s["max"] + 1))
    if p.kind == "q_uniform":
        return np.arange(s["min"], s["max"], s["q"]).tolist()
    raise ValueError(f"parameters.{p.name}: distribution {p.kind!r} cannot be used with method grid")


def value_identity(value: Any) -> str:
    """W&B's identity of a grid value: its sorted YAML form, integral floats written as ints."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return hashlib.md5(yaml.dump(value, default_flow_style=True, sort_keys=True).encode("ascii")).hexdigest()


def grid(parameters: tuple[Parameter, ...]) -> Iterator[dict[str, Any]]:
    """All grid points in W&B's order, without repeats."""
    check_grid_size(parameters)
    constants = {p.name: p.spec["value"] for p in parameters if p.kind == "constant"}
    varying = [p for p in parameters if p.kind != "constant"]
    tables = [{value_identity(v): v for v in grid_values(p)} for p in varying]  # equal values: the last spelling
    for point in itertools.product(*tables):
        chosen = {p.name: table[i] for p, table, i in zip(varying, tables, point)}
        yield {p.name: constants[p.name] if p.name in constants else chosen[p.name] for p in parameters}


def _quantize(value: Any, q: Any) -> Any:
    out = np.round(value / q) * q
    return out.astype(int) if isinstance(q, int) else out


def inverse_cdf(p: Parameter, u: float) -> Any:
    """The value at quantile ``u`` of a parameter's distribution (W&B's ``HyperParameter.ppf``)."""
    s = p.spec
    kind = p.kind
    if kind == "constant":
        return s["value"]
    if kind == "categorical":
        return s["values"][int(stats.randint.ppf(u, 0, len(s["values"])))]
    if kind == "categorical_w_probabilities":
        cdf = np.cumsum(s["probabilities"])
        return s["values"][int(np.argmin(u >= cdf))]
    if kind == "int_uniform":
        return int(stats.randint.ppf(u, s["min"], s["max"] + 1))
    if kind in ("inv_log_uniform", "inv_log_uniform_values"):
        low, high = (-np.log(s["max"]), -np.log(s["min"])) if kind.endswith("_values") else (s["min"], s["max"])
        return np.exp(-stats.uniform.ppf(1 - u, low, high - low))
    base = kind.removeprefix("q_")  # a q_ distribution is its base one, rounded to a multiple of q
    if base == "uniform":
        value = stats.uniform.ppf(u, s["min"], s["max"] - s["min"])
    elif base in ("log_uniform", "log_uniform_values"):
        low, high = (np.log(s["min"]), np.log(s["max"])) if base.endswith("_values") else (s["min"], s["max"])
        value = np.exp(stats.uniform.ppf(u, low, high - low))
    elif base == "normal":
        value = stats.norm.ppf(u, loc=s["mu"], scale=s["sigma"])
    elif base == "log_normal":
        value = stats.lognorm.ppf(u, s=s["sigma"], scale=np.exp(s["mu"]))
    elif base == "beta":
        value = stats.beta.ppf(u, a=s["a"], b=s["b"])
    else:
        raise ValueError(f"parameters.{p.name}: distribution {kind!r} cannot be sampled")
    return _quantize(value, s["q"]) if kind.startswith("q_") else value


def random_points(parameters: tuple[Parameter, ...], seed: int) -> Iterator[dict[str, Any]]:
    """An endless stream of random-search points, repeatable for a given ``seed``."""
    rng = random.Random(seed)
    while True:
        yield {p.name: _plain(inverse_cdf(p, rng.uniform(0.0, 1.0))) for p in parameters}


def expand(spec: SweepSpec, *, count: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The runs of a grid or random sweep, in order: at most ``count`` (and the file's ``run_cap``).

    A random sweep has no end, so it needs ``count`` or ``run_cap``.
    """
    limits = [n for n in (count, spec.run_cap) if n is not None]
    limit = min(limits) if limits else None
    if limit is not None and limit < 1:
        raise ValueError(f"--count {count}: must be >= 1")
    if spec.method == "grid":
        return list(itertools.islice(grid(spec.parameters), limit))
    if spec.method == "random":
        if limit is None:
            raise ValueError(f"sweep file {spec.source}: a random sweep never ends; give --count N or run_cap in the file")
        return list(itertools.islice(random_points(spec.parameters, seed), limit))
    raise ValueError(f"sweep file {spec.source}: method {spec.method!r} cannot be expanded locally (grid or random)")
