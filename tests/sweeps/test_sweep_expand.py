"""Grid and random expansion against W&B's semantics, checked with hand-written expectations."""

import math
import random

import pytest

from identifiable_cl.sweeps.expand import expand
from identifiable_cl.sweeps.spec import parse_sweep

COMMAND = ["${env}", "icl", "train", "${args}"]


def sweep(method, parameters, **extra):
    return parse_sweep({"method": method, "command": COMMAND, "parameters": parameters, **extra})


def test_mixed_grid_order_ranges_and_constants():
    spec = sweep(
        "grid",
        {
            "seed": {"value": 3},
            "optim.lr": {"distribution": "q_uniform", "min": 0.1, "max": 0.3, "q": 0.1},
            "loss.similarity": {"values": ["cosine", "l2"]},
            "eval.n_fit": {"min": 100, "max": 101},
        },
    )
    expected = [
        {"eval.n_fit": n, "loss.similarity": s, "optim.lr": lr, "seed": 3}
        for n in (100, 101)  # int_uniform: max included
        for s in ("cosine", "l2")
        for lr in (0.1, 0.2)  # q_uniform: numpy.arange, max excluded
    ]
    runs = expand(spec)
    assert runs == expected
    assert all(list(r) == ["eval.n_fit", "loss.similarity", "optim.lr", "seed"] for r in runs)
    assert all(type(r["eval.n_fit"]) is int and type(r["optim.lr"]) is float for r in runs)


def test_q_uniform_with_integer_step_excludes_max_and_keeps_ints():
    runs = expand(sweep("grid", {"train.steps": {"distribution": "q_uniform", "min": 0, "max": 10, "q": 5}}))
    assert runs == [{"train.steps": 0}, {"train.steps": 5}]
    assert all(type(r["train.steps"]) is int for r in runs)


def test_q_uniform_default_step_gives_floats():
    runs = expand(sweep("grid", {"train.steps": {"distribution": "q_uniform", "min": 1, "max": 3}}))
    assert runs == [{"train.steps": 1.0}, {"train.steps": 2.0}] and type(runs[0]["train.steps"]) is float


def test_grid_drops_values_with_the_same_yaml_form_keeping_the_last_spelling():
    runs = expand(sweep("grid", {"loss.tau": {"values": [1, 1.0, 0.5]}, "seed": {"values": [0, 0]}}))
    assert runs == [{"loss.tau": 1.0, "seed": 0}, {"loss.tau": 0.5, "seed": 0}]
    assert type(runs[0]["loss.tau"]) is float


def test_grid_of_constants_is_one_run_and_count_and_run_cap_truncate():
    assert expand(sweep("grid", {"seed": {"value": 1}, "loss.tau": {"value": 0.5}})) == [{"loss.tau": 0.5, "seed": 1}]
    spec = sweep("grid", {"seed": {"values": [0, 1, 2, 3]}}, run_cap=3)
    assert [r["seed"] for r in expand(spec)] == [0, 1, 2]
    assert [r["seed"] for r in expand(spec, count=2)] == [0, 1]
    assert [r["seed"] for r in expand(spec, count=10)] == [0, 1, 2]


def reference_random(seed, n):
    """A plain restatement of W&B's random search for the parameters of the test below (names sorted)."""
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        u = [rng.uniform(0.0, 1.0) for _ in range(5)]
        runs.append(
            {
                "eval.n_fit": 10 + math.ceil(u[0] * 5) - 1,  # int_uniform 10..14: smallest k with cdf(k) >= u
                "loss.similarity": ["cosine", "l1", "l2"][math.ceil(u[1] * 3) - 1],
                "loss.tau": 0.05 + u[2] * (2.0 - 0.05),
                "optim.lr": math.exp(math.log(1e-5) + u[3] * (math.log(1e-2) - math.log(1e-5))),
                "seed": 7,  # a constant, but it still consumes a draw
            }
        )
    return runs


def test_random_matches_reference_and_is_repeatable():
    spec = sweep(
        "random",
        {
            "seed": {"value": 7},
            "optim.lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-2},
            "loss.tau": {"min": 0.05, "max": 2.0},
            "loss.similarity": {"values": ["cosine", "l1", "l2"]},
            "eval.n_fit": {"min": 10, "max": 14},
        },
    )
    runs = expand(spec, count=50, seed=11)
    reference = reference_random(11, 50)
    for got, want in zip(runs, reference, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == (pytest.approx(want[key], rel=1e-12) if isinstance(want[key], float) else want[key]), key
            assert type(got[key]) is type(want[key]), key
    assert expand(spec, count=50, seed=11) == runs
    assert expand(spec, count=50, seed=12) != runs
    assert {r["loss.similarity"] for r in runs} == {"cosine", "l1", "l2"}
    assert {r["eval.n_fit"] for r in runs} == {10, 11, 12, 13, 14}


def test_random_q_uniform_rounds_to_the_step():
    spec = sweep("random", {"loss.tau": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.25}}, run_cap=40)
    values = [r["loss.tau"] for r in expand(spec, seed=0)]
    assert len(values) == 40 and set(values) <= {0.0, 0.25, 0.5, 0.75, 1.0} and len(set(values)) >= 4


def test_random_sweep_needs_a_limit():
    spec = sweep("random", {"loss.tau": {"min": 0.1, "max": 1.0}})
    with pytest.raises(ValueError, match="--count"):
        expand(spec)
    assert len(expand(spec, count=3)) == 3


def test_a_metric_switch_is_a_sweep_parameter_and_a_misspelt_one_is_named():
    spec = sweep("grid", {"eval.mcc_ica_pearson": {"values": [False, True]}, "seed": {"value": 0}})
    assert [p.name for p in spec.parameters] == ["eval.mcc_ica_pearson", "seed"]
    with pytest.raises(ValueError, match=r"parameters.eval.mcc_ica_pearsn: not an `icl train` config key; did you mean"):
        sweep("grid", {"eval.mcc_ica_pearsn": {"value": True}})
