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


def test_resolve_makes_the_spec_of_each_mode_with_where_the_run_comes_from(tmp_path, counted):
    import torch

    from identifiable_cl.components import resolve
    from identifiable_cl.training import Trainer
    from tests.tiny import TINY

    spec = resolve(None, TINY)
    assert (spec.mode, spec.run_dir, spec.process, spec.state) == ("new", None, None, None)
    assert resolve({"train": {"batch_size": 32}}, {k: v for k, v in TINY.items() if k != "train.batch_size"}) == spec
    counted.clear()
    assert resolve(spec) is spec and not counted  # a spec still holding what was checked is not checked again
    trainer = Trainer.from_spec(spec, tmp_path / "run")
    trainer.run()
    files = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()}

    evaluated = resolve(tmp_path / "run", {"eval.final_n_fit": 64}, "evaluate")
    assert evaluated.mode == "evaluate" and evaluated.run_dir == tmp_path / "run"
    assert evaluated["eval"]["final_n_fit"] == 64 and evaluated.state["step"] == 20
    assert evaluated.process.fingerprint() == trainer.c.process.fingerprint()
    again = Trainer.from_spec(evaluated)
    assert torch.equal(next(again.c.encoder.parameters()), next(trainer.c.encoder.parameters()))
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()} == files  # evaluating reads only

    resumed = resolve(tmp_path / "run", ["--train.steps=30"], "resume")
    assert resumed.mode == "resume" and resumed["train"]["steps"] == 30 and resumed.state["step"] == 20


def test_resolve_refuses_what_a_mode_may_not_take(tmp_path):
    from identifiable_cl.components import resolve
    from tests.tiny import TINY

    with pytest.raises(ValueError, match="^mode='train' is invalid: allowed: new, resume, evaluate$"):
        resolve(None, mode="train")
    with pytest.raises(ValueError, match="^config of type int is invalid"):
        resolve(3)
    with pytest.raises(ValueError, match="^run_dir of type NoneType is invalid"):
        resolve(None, mode="resume")
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "dgp.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="has no checkpoint.pt: the run never reached its first step"):
        resolve(tmp_path, mode="evaluate")
    from identifiable_cl.training import Trainer

    run = tmp_path / "run"
    Trainer.from_spec(resolve(None, TINY), run).run()
    with pytest.raises(ValueError, match=r"^loss.tau=0.5: only eval.\* keys can be overridden when evaluating"):
        resolve(run, {"loss.tau": 0.5}, "evaluate")
    with pytest.raises(ValueError, match="^train.steps=10 is invalid: the run has reached step 20"):
        resolve(run, {"train.steps": 10}, "resume")
