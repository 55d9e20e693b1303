"""The W&B sweep-file schema, restated in Python (no jsonschema dependency).

The rules follow the ``wandb/sweeps`` library that ``wandb sweep`` and the W&B
server use to check a sweep config (``config/schema.json`` and
``config/cfg.py``): the allowed top-level keys and their types, the parameter
forms tried in W&B's order (the first form a parameter matches decides its
distribution, and that form's defaults are filled in), ``min < max``,
categorical probabilities, deprecated log distributions, and the consistency
rules between ``metric``/``metrics``/``scheduler``. JSON-schema typing is kept:
``integer`` accepts integral floats, the ``float`` format needs a Python float,
the ``integer`` format a Python int, and booleans are never numbers.

:func:`violations` returns every problem as a message naming the offending entry;
an empty list means W&B accepts the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
METHODS = ("bayes", "random", "grid", "custom")
GOALS = ("minimize", "maximize")
IMPUTES = ("latest", "best", "worst")
IMPUTES_WHILE_RUNNING = ("latest", "best", "worst", "false")
ENGINES = ("optuna", "ax", "wandb")
SUPPORTED_ENGINE_METHODS = {"wandb": ("grid", "bayes", "random")}
DEPRECATED = {
    "log_uniform": "log_uniform_values",
    "inv_log_uniform": "inv_log_uniform_values",
    "q_log_uniform": "q_log_uniform_values",
}
"""Distributions whose min/max are base-e exponents; W&B flags them and names the replacement."""


def is_number(v: Any) -> bool:
    """A JSON number: finite (YAML's .inf and .nan have no JSON form, and W&B's schema takes none)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_integer(v: Any) -> bool:
    """JSON-schema ``integer``: an int, or a float with no fractional part."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def is_int(v: Any) -> bool:
    """An ``integer`` with the ``integer`` format: a Python int."""
    return isinstance(v, int) and not isinstance(v, bool)


def nonnegative(v: Any) -> bool:
    return is_number(v) and v >= 0


def positive(v: Any) -> bool:
    return is_number(v) and v > 0


def nonempty_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) >= 1


def probabilities(v: Any) -> bool:
    return nonempty_list(v) and all(nonnegative(p) for p in v)


def anything(v: Any) -> bool:
    return True


@dataclass(frozen=True)
class Form:
    """One way of writing a parameter: its distribution, required and allowed keys, defaults."""

    distribution: str
    required: tuple[str, ...]
    checks: Mapping[str, Callable[[Any], bool]]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    default_distribution: bool = True
    extra: Callable[[Mapping[str, Any]], bool] = lambda config: True

    def matches(self, config: Mapping[str, Any]) -> bool:
        """The distribution is this one's (or left out, where allowed), every required key is present, and every
        other key is allowed and valid."""
        given = config.get("distribution", self.distribution if self.default_distribution else None)
        return (given == self.distribution and all(key in config for key in self.required)
                and all(key in self.checks and self.checks[key](value) for key, value in config.items()
                        if key != "distribution")
                and self.extra(config))

    def fill(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {"distribution": self.distribution, **self.defaults, **config}


def _uniform_typed(config: Mapping[str, Any]) -> bool:
    """W&B's four ``uniform`` variants: with ``distribution`` given, or with a float min or max."""
    return "distribution" in config or isinstance(config["min"], float) or isinstance(config["max"], float)


_Q = {"q": positive}
_NORMAL = {"mu": is_number, "sigma": nonnegative}
_BOUNDS = {"min": is_number, "max": is_number}
_POSITIVE_BOUNDS = {"min": positive, "max": is_number}
_BETA = {"a": nonnegative, "b": nonnegative}

FORMS: tuple[Form, ...] = (
    Form("q_beta", (), {**_BETA, **_Q}, {"a": 1, "b": 1, "q": 1.0}, default_distribution=False),
    Form("beta", (), _BETA, {"a": 1, "b": 1}, default_distribution=False),
    Form("categorical", ("values",), {"values": nonempty_list}),
    Form("categorical_w_probabilities", ("values", "probabilities"),
         {"values": nonempty_list, "probabilities": probabilities}),
    Form("int_uniform", ("min", "max"), {"min": is_int, "max": is_int}),
    Form("uniform", ("min", "max"), _BOUNDS, extra=_uniform_typed),
    Form("log_normal", (), _NORMAL, {"mu": 0.0, "sigma": 1.0}, default_distribution=False),
    Form("log_uniform", ("min", "max"), _BOUNDS, default_distribution=False),
    Form("inv_log_uniform", ("min", "max"), _BOUNDS, default_distribution=False),
    Form("normal", (), _NORMAL, {"mu": 0.0, "sigma": 1.0}, default_distribution=False),
    Form("q_log_normal", (), {**_NORMAL, **_Q}, {"q": 1.0, "mu": 0, "sigma": 1}, default_distribution=False),
    Form("q_log_uniform", ("min", "max"), {**_BOUNDS, **_Q}, {"q": 1.0}, default_distribution=False),
    Form("q_normal", (), {**_NORMAL, **_Q}, {"q": 1.0, "mu": 0, "sigma": 1}, default_distribution=False),
    Form("q_uniform", ("min", "max"), {**_BOUNDS, **_Q}, {"q": 1.0}, default_distribution=False),
    Form("constant", ("value",), {"value": anything}),
    Form("inv_log_uniform_values", ("min", "max"), _POSITIVE_BOUNDS, default_distribution=False),
    Form("log_uniform_values", ("min", "max"), _POSITIVE_BOUNDS, default_distribution=False),
    Form("q_log_uniform_values", ("min", "max"), {**_POSITIVE_BOUNDS, **_Q}, {"q": 1.0}, default_distribution=False),
)
"""Parameter forms in the order W&B tries them."""

NESTED = "nested"
"""The kind of a parameter written as ``{parameters: {...}}`` (a nested block)."""


def classify(config: Any) -> tuple[str, dict[str, Any]] | None:
    """``(distribution, config with W&B's defaults)`` of a parameter, ``(NESTED, config)``, or None if malformed."""
    if not isinstance(config, Mapping):
        return None
    for form in FORMS:
        if form.matches(config):
            return form.distribution, form.fill(config)
    if set(config) == {"parameters"} and not _parameters_violations(config["parameters"], "parameters"):
        return NESTED, dict(config)
    return None


def _describe_parameter_error(where: str, config: Any) -> str:
    if not isinstance(config, Mapping):
        return f"{where}: expected a mapping such as {{values: [...]}} or {{value: ...}}, got {config!r}"
    if "values" in config and config["values"] == []:
        return f"{where}: 'values' is empty; list at least one value"
    distribution = config.get("distribution")
    known = {form.distribution for form in FORMS}
    if distribution is not None and distribution not in known:
        return f"{where}: unknown distribution {distribution!r}; allowed: {', '.join(sorted(known))}"
    endless = [key for key, value in config.items() if isinstance(value, float) and not math.isfinite(value)]
    if endless:
        return f"{where}.{endless[0]}={config[endless[0]]!r} is invalid: expected a finite number"
    return (
        f"{where}: {dict(config)!r} matches no W&B parameter form "
        "(values / value / min+max / distribution with its own keys, e.g. q for q_uniform)"
    )


def _parameters_violations(parameters: Any, where: str) -> list[str]:
    if not isinstance(parameters, Mapping):
        return [f"{where}: expected a mapping of parameter names to specs, got {parameters!r}"]
    if not parameters:
        return [f"{where}: no parameters (W&B needs at least one)"]
    out = []
    for name, config in parameters.items():
        if not isinstance(name, str) or not PARAMETER_NAME.fullmatch(name):
            out.append(f"{where}: invalid parameter name {name!r} (letters, digits, '_', '.', '-'; not starting with a digit)")
            continue
        if classify(config) is None:
            out.append(_describe_parameter_error(f"{where}.{name}", config))
    return out


def _parameter_value_violations(parameters: Mapping[str, Any]) -> list[str]:
    """W&B's checks beyond the schema, on top-level parameters: min < max, probabilities, deprecations."""
    out = []
    for name, config in parameters.items():
        if not isinstance(config, Mapping):
            continue
        where = f"parameters.{name}"
        if "min" in config and "max" in config and is_number(config["min"]) and is_number(config["max"]):
            if config["min"] >= config["max"]:
                out.append(f"{where}: min {config['min']} is not less than max {config['max']}")
        if isinstance(config.get("values"), list) and isinstance(config.get("probabilities"), list):
            values, probs = config["values"], config["probabilities"]
            if len(values) != len(probs):
                out.append(f"{where}: {len(values)} values but {len(probs)} probabilities")
            elif all(is_number(p) for p in probs) and not math.isclose(sum(probs), 1.0, rel_tol=1e-5, abs_tol=1e-8):
                out.append(f"{where}: probabilities {probs} do not sum to 1")
        kind = classify(config)
        if kind is not None and kind[0] in DEPRECATED:
            out.append(
                f"{where}: uses {kind[0]}, where min/max are base-e exponents; use {DEPRECATED[kind[0]]} "
                "to give the limit values"
            )
    return out


def _metric_violations(metric: Any, where: str) -> list[str]:
    if not isinstance(metric, Mapping):
        return [f"{where}: expected a mapping with a 'name', got {metric!r}"]
    allowed = {"name", "goal", "target", "impute", "impute_while_running"}
    out = [f"{where}.{k}: unknown key; allowed: {', '.join(sorted(allowed))}" for k in metric if k not in allowed]
    if not isinstance(metric.get("name"), str):
        out.append(f"{where}.name: required, a string (the summary metric to optimise)")
    for key, options in (("goal", GOALS), ("impute", IMPUTES), ("impute_while_running", IMPUTES_WHILE_RUNNING)):
        if key in metric and metric[key] not in options:
            out.append(f"{where}.{key}: {metric[key]!r} is not one of {', '.join(options)}")
    if "target" in metric and not is_number(metric["target"]):
        out.append(f"{where}.target: expected a number, got {metric['target']!r}")
    return out


def _early_terminate_violations(value: Any) -> list[str]:
    where = "early_terminate"
    if not isinstance(value, Mapping):
        return [f"{where}: expected a mapping with type: hyperband, got {value!r}"]
    allowed = {"type": lambda v: v == "hyperband", "max_iter": is_integer, "min_iter": lambda v: is_integer(v) and v >= 1,
               "s": is_number, "eta": lambda v: is_number(v) and v > 1, "strict": lambda v: isinstance(v, bool)}
    out = [f"{where}.{k}: unknown key; allowed: {', '.join(allowed)}" for k in value if k not in allowed]
    out += [f"{where}.{k}: invalid value {v!r}" for k, v in value.items() if k in allowed and not allowed[k](v)]
    if "type" not in value:
        out.append(f"{where}.type: required (hyperband)")
    if not ({"max_iter", "s"} <= set(value) or "min_iter" in value):
        out.append(f"{where}: needs max_iter and s, or min_iter")
    return out


def _scheduler_violations(config: Mapping[str, Any]) -> list[str]:
    scheduler = config["scheduler"]
    if not isinstance(scheduler, Mapping):
        return [f"scheduler: expected a mapping with an 'engine', got {scheduler!r}"]
    allowed = ("engine", "source", "optimizer", "search_space")
    out = [f"scheduler.{k}: unknown key; allowed: {', '.join(allowed)}" for k in scheduler if k not in allowed]
    out += [f"scheduler.{k}: expected a string" for k in allowed[1:] if k in scheduler and not isinstance(scheduler[k], str)]
    out += [f"scheduler.{k}: needs scheduler.source" for k in ("optimizer", "search_space") if k in scheduler and "source" not in scheduler]
    engine = scheduler.get("engine")
    if engine not in ENGINES:
        out.append(f"scheduler.engine: {engine!r} is not one of {', '.join(ENGINES)}")
    elif engine not in SUPPORTED_ENGINE_METHODS:
        out.append(f"scheduler.engine: {engine!r} is not supported; supported: {', '.join(SUPPORTED_ENGINE_METHODS)}")
    elif config.get("method") not in SUPPORTED_ENGINE_METHODS[engine]:
        out.append(f"scheduler.engine: {engine} does not support method {config.get('method')!r}")
    if isinstance(config.get("controller"), Mapping) and config["controller"].get("type") == "local":
        out.append("controller: type local cannot be used together with scheduler")
    if "early_terminate" in config:
        out.append("early_terminate: cannot be used together with scheduler")
    return out


def _string(v: Any) -> bool:
    return isinstance(v, str)


TOP_LEVEL: dict[str, Callable[[Any], bool]] = {
    "apiVersion": _string,
    "kind": lambda v: v == "sweep",
    "controller": lambda v: isinstance(v, Mapping) and v.get("type") in ("local", "cloud"),
    **dict.fromkeys(("description", "program", "job", "image_uri", "entity", "project"), _string),
    "method": lambda v: v in METHODS,
    "command": lambda v: isinstance(v, list),
    "name": _string,
    "run_cap": lambda v: is_integer(v) and v > 0,
    **dict.fromkeys(("metric", "metrics", "scheduler", "early_terminate", "parameters"), anything),
}
"""Top-level keys of a sweep file and their basic types (structured ones are checked separately)."""


def violations(config: Any) -> list[str]:
    """Every way ``config`` (a parsed sweep file) breaks W&B's sweep schema; [] when it is valid."""
    if not isinstance(config, Mapping):
        return [f"a sweep file holds a mapping of keys (method, parameters, ...), not {type(config).__name__}"]
    out = []
    for key, value in config.items():
        if key not in TOP_LEVEL:
            out.append(f"{key}: unknown top-level key; allowed: {', '.join(TOP_LEVEL)}")
        elif not TOP_LEVEL[key](value):
            hint = f"one of {', '.join(METHODS)}" if key == "method" else "see W&B's sweep configuration reference"
            out.append(f"{key}: invalid value {value!r} ({hint})")
    if "method" not in config:
        out.append(f"method: required, one of {', '.join(METHODS)}")
    scheduler = config.get("scheduler")
    has_search_space = isinstance(scheduler, Mapping) and bool(scheduler.get("search_space"))
    if "parameters" in config:
        out += _parameters_violations(config["parameters"], "parameters")
        if isinstance(config["parameters"], Mapping):
            out += _parameter_value_violations(config["parameters"])
    elif not has_search_space:
        out.append("parameters: required unless scheduler.search_space is set")
    if "metric" in config:
        out += _metric_violations(config["metric"], "metric")
    if "metrics" in config:
        metrics = config["metrics"]
        if not isinstance(metrics, list) or len(metrics) < 2:
            out.append("metrics: expected a list of at least two metrics")
        else:
            for i, metric in enumerate(metrics):
                out += _metric_violations(metric, f"metrics[{i}]")
        if "metric" in config:
            out.append("metric, metrics: cannot both be set")
        elif config.get("method") != "custom":
            out.append(f"metrics: requires method custom (got {config.get('method')!r})")
    if "early_terminate" in config:
        out += _early_terminate_violations(config["early_terminate"])
    if scheduler is not None:
        out += _scheduler_violations(config)
    return out
