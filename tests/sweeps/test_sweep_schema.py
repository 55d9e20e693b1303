"""The W&B sweep schema copy: parameter forms in W&B's order, defaults, and each violation it reports."""

import pytest

from identifiable_cl.sweeps import schema


@pytest.mark.parametrize(
    "config, kind, filled",
    [
        ({"values": [1, 2]}, "categorical", {"values": [1, 2]}),
        ({"values": ["a"], "probabilities": [1.0]}, "categorical_w_probabilities", {"probabilities": [1.0]}),
        ({"value": None}, "constant", {"value": None}),
        ({"value": [1, 2], "distribution": "constant"}, "constant", {"value": [1, 2]}),
        # two ints: int_uniform is tried before uniform
        ({"min": 1, "max": 3}, "int_uniform", {"min": 1, "max": 3}),
        # a float bound (format float) or an explicit distribution make it uniform
        ({"min": 1, "max": 3.0}, "uniform", {"max": 3.0}),
        ({"min": 0.5, "max": 3}, "uniform", {"min": 0.5}),
        ({"min": 1, "max": 3, "distribution": "uniform"}, "uniform", {"min": 1}),
        ({"distribution": "q_uniform", "min": 0, "max": 1}, "q_uniform", {"q": 1.0}),
        ({"distribution": "normal"}, "normal", {"mu": 0.0, "sigma": 1.0}),
        ({"distribution": "q_normal", "q": 2}, "q_normal", {"q": 2, "mu": 0, "sigma": 1}),
        ({"distribution": "beta"}, "beta", {"a": 1, "b": 1}),
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2}, "log_uniform_values", {"min": 1e-4}),
        ({"distribution": "inv_log_uniform_values", "min": 0.1, "max": 1}, "inv_log_uniform_values", {"max": 1}),
        ({"parameters": {"b": {"value": 1}}}, schema.NESTED, {"parameters": {"b": {"value": 1}}}),
    ],
)
def test_parameter_forms_follow_wandb_order_and_defaults(config, kind, filled):
    got = schema.classify(config)
    assert got is not None and got[0] == kind
    if kind != schema.NESTED:
        assert got[1]["distribution"] == kind
    for key, value in filled.items():
        assert got[1][key] == value and type(got[1][key]) is type(value)


@pytest.mark.parametrize(
    "config",
    [
        {"values": []},
        {"min": 1.0, "max": 3.0, "distribution": "int_uniform"},  # int_uniform needs Python ints
        {"min": True, "max": 3},  # booleans are not numbers
        {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0},  # q must be > 0
        {"distribution": "log_uniform_values", "min": 0, "max": 1},  # min must be > 0
        {"values": [1], "value": 1},  # no form allows both
        {"distribution": "gaussian"},
        {"min": 1},
        "0.1",
    ],
)
def test_malformed_parameters_match_no_form(config):
    assert schema.classify(config) is None


def test_valid_file_has_no_violations():
    config = {
        "name": "x",
        "program": "train.py",
        "method": "random",
        "run_cap": 4,
        "metric": {"name": "r2_linear", "goal": "maximize"},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
        "parameters": {"loss.tau": {"min": 0.05, "max": 1.0}, "seed": {"values": [0, 1]}},
    }
    assert schema.violations(config) == []


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"parameters": {"a": {"value": 1}}}, "method: required"),
        ({"method": "anneal", "parameters": {"a": {"value": 1}}}, "method: invalid value 'anneal'"),
        ({"method": "grid", "parameters": {"a": {"value": 1}}, "workers": 2}, "workers: unknown top-level key"),
        ({"method": "grid", "parameters": {}}, "parameters: no parameters"),
        ({"method": "grid"}, "parameters: required"),
        ({"method": "grid", "parameters": {"a": {"values": []}}}, "parameters.a: 'values' is empty"),
        ({"method": "grid", "parameters": {"1a": {"value": 1}}}, "invalid parameter name '1a'"),
        ({"method": "grid", "parameters": {"a": {"min": 3, "max": 1}}}, "parameters.a: min 3 is not less than max 1"),
        ({"method": "grid", "parameters": {"a": {"values": [1, 2], "probabilities": [0.5, 0.6]}}}, "do not sum to 1"),
        ({"method": "grid", "parameters": {"a": {"values": [1, 2], "probabilities": [1.0]}}}, "2 values but 1 probabilities"),
        (
            {"method": "random", "parameters": {"a": {"distribution": "log_uniform", "min": -3, "max": 0}}},
            "use log_uniform_values",
        ),
        ({"method": "grid", "run_cap": 0, "parameters": {"a": {"value": 1}}}, "run_cap: invalid value 0"),
        ({"method": "grid", "metric": {"goal": "maximize"}, "parameters": {"a": {"value": 1}}}, "metric.name: required"),
        ({"method": "grid", "metric": {"name": "m", "goal": "up"}, "parameters": {"a": {"value": 1}}}, "metric.goal: 'up'"),
        (
            {"method": "grid", "metrics": [{"name": "a"}, {"name": "b"}], "parameters": {"a": {"value": 1}}},
            "metrics: requires method custom",
        ),
        (
            {"method": "bayes", "early_terminate": {"type": "hyperband"}, "parameters": {"a": {"value": 1}}},
            "early_terminate: needs max_iter and s, or min_iter",
        ),
        ({"method": "grid", "parameters": {"a": {"distribution": "gaussian"}}}, "unknown distribution 'gaussian'"),
        (["method", "grid"], "holds a mapping"),
    ],
)
def test_violations_name_the_entry(config, fragment):
    problems = schema.violations(config)
    assert any(fragment in p for p in problems), problems


def test_hyperband_and_bayes_are_valid_wandb_files():
    config = {
        "method": "bayes",
        "metric": {"name": "r2_linear", "goal": "maximize"},
        "early_terminate": {"type": "hyperband", "min_iter": 3},
        "parameters": {"loss.tau": {"min": 0.05, "max": 1.0}},
    }
    assert schema.violations(config) == []
