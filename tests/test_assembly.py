"""A run is assembled once: ``icl train``, ``icl train --resume`` and ``icl evaluate`` validate and fully check
the config once each and construct the process at most twice (the check's cheap process and the run's own)."""

from collections import Counter

import pytest

from identifiable_cl.cli import main
from tests.tiny import tiny_args


@pytest.fixture
def counted(monkeypatch):
    import dgp
    import identifiable_cl.components as components

    counts: Counter[str] = Counter()

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(components, "validate", counting("validate", components.validate))
    monkeypatch.setattr(components, "check", counting("check", components.check))
    monkeypatch.setattr(dgp.Process, "__init__", counting("process", dgp.Process.__init__))
    return counts


def test_a_run_is_validated_checked_and_its_process_built_once_for_each_use(tmp_path, counted):
    run = tmp_path / "run"
    for argv in (["train", *tiny_args(), "--run-dir", str(run), "--quiet"],
                 ["train", "--resume", str(run), "--train.steps=30", "--quiet"],
                 ["evaluate", str(run), "--eval.final_n_fit=64"]):
        counted.clear()
        assert main(argv) == 0
        assert dict(counted) == {"validate": 1, "check": 1, "process": 2}, argv[:2]


def test_a_spec_edited_after_its_check_is_checked_again():
    from identifiable_cl.components import build, load_config

    spec = load_config(None, {"train.batch_size": 8})
    assert spec.unchanged()
    spec["train"]["batch_size"] = 0
    assert not spec.unchanged()
    with pytest.raises(ValueError, match="train.batch_size"):
        build(spec)


def test_a_saved_run_opened_in_an_unknown_mode_is_one_clear_error(tmp_path):
    from identifiable_cl.components import load_run

    with pytest.raises(ValueError, match="^mode='train' is invalid: allowed: resume, evaluate$"):
        load_run(tmp_path, mode="train")
