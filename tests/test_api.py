"""The Python API from the package top level, and the example of docs/python-api.md run as written."""

import re
import sys
from pathlib import Path

import pytest

import identifiable_cl as icl

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    """The one Python block of docs/python-api.md (the README shows its first lines)."""
    (code,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python-api.md").read_text(), flags=re.S)
    return code


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(readme_example(), "docs/python-api.md", "exec"), namespace)
    result = namespace["result"]
    assert result.run_dir.parent == tmp_path / "runs" and (result.run_dir / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["process.pt", "runs"]  # the run under runs/
    assert result.summary["steps"] == 300 and namespace["run"].steps_done == 300
    assert namespace["batch"].z.shape == (1024, 10) and (tmp_path / "process.pt").is_file()
    assert str(result.run_dir) in capsys.readouterr().out


def test_the_top_level_names_are_the_api_and_load_lazily():
    import subprocess
    import sys

    from identifiable_cl import api

    assert set(api.__all__) <= set(dir(icl)) and icl.train is api.train
    light = subprocess.run([sys.executable, "-c", "import sys, identifiable_cl; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        icl.trian


def test_train_takes_parts_of_a_config_and_checks_them(tmp_path):
    small = {"train.steps": 10, "train.eval_every": 10, "encoder.widths": [16], "dgp.mixing.cond_draws": 200,
             "eval.n_fit": 64, "eval.n_test": 64, "eval.final_n_fit": 128, "eval.final_n_test": 128,
             "eval.nonlinear": False}
    result = icl.train({"train": {"batch_size": 32}}, small, run_dir=tmp_path / "run")
    assert result.solver.config["train"]["batch_size"] == 32 and result.summary["steps"] == 10
    history = icl.history(result.run_dir)
    assert [r["step"] for r in history] == [10] and "r2_linear" in history[-1] and "loss" in history[-1]
    evaluated = icl.evaluate_run(result.run_dir)
    assert (result.run_dir / "evaluation.json").is_file() and evaluated["steps"] == 10
    (row,) = icl.results(tmp_path, metrics=["r2_linear"])
    assert row["n"] == 1 and row["metrics"]["r2_linear"]["mean"] == pytest.approx(result.summary["r2_linear"])
    with pytest.raises(ValueError, match="no finished run records 'r2_linaer' \\(did you mean r2_linear"):
        icl.results(tmp_path, metrics=["r2_linaer"])
    with pytest.raises(ValueError, match="is not a run directory"):
        icl.history(tmp_path)
    pandas = pytest.importorskip("pandas")
    frame = icl.history(result.run_dir, as_frame=True)
    assert isinstance(frame, pandas.DataFrame) and frame.to_dict("records") == history
    (flat,) = icl.results(tmp_path, metrics=["r2_linear"], as_frame=True).to_dict("records")
    assert (flat["r2_linear"], flat["r2_linear_n"], flat["n"], flat["failed"]) == (
        row["metrics"]["r2_linear"]["mean"], 1, 1, 0)
    with pytest.raises(ValueError, match="loss.tau=-1 is invalid"):
        icl.train(None, {**small, "loss.tau": -1}, run_dir=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_frame_without_pandas_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # an import of it then fails
    with pytest.raises(ValueError, match=r"^as_frame=True needs pandas, which is not installed: pip install "):
        icl.api._frame([{"step": 1}])


def test_train_shows_progress_where_a_person_watches(tmp_path, monkeypatch, capsys):
    """Quiet when nobody watches (standard output a pipe), progress lines in a notebook (an IPython kernel), and
    the run under ``out`` as ``icl train`` names it."""
    small = {"train.steps": 4, "train.log_every": 2, "train.eval_every": 4, "encoder.widths": [8],
             "dgp.mixing.cond_draws": 50, "eval.n_fit": 64, "eval.n_test": 64, "eval.final_n_fit": 64,
             "eval.final_n_test": 64, "eval.nonlinear": False, "wandb.mode": "disabled"}
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    quiet = icl.train(small, out=tmp_path / "runs")
    assert "step" not in capsys.readouterr().out and quiet.run_dir.parent == tmp_path / "runs"
    assert quiet.run_dir.name.endswith("-s0")
    monkeypatch.setitem(sys.modules, "ipykernel", sys)
    icl.train(small, out=tmp_path / "runs")
    assert re.search(r"^step 2/4  loss \d", capsys.readouterr().out, flags=re.M)
    assert len([p for p in (tmp_path / "runs").iterdir() if p.is_dir()]) == 2


def test_a_saved_process_round_trips_and_a_crafted_file_is_refused(tmp_path):
    import os

    import torch

    process = icl.build_process({"mixing": {"name": "mlp", "cond_draws": 200}}, seed=3)
    loaded = icl.load_process(process.save(tmp_path / "p.pt"))
    assert loaded.fingerprint() == process.fingerprint()
    assert torch.equal(loaded.mixing.weight, process.mixing.weight)

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(tmp_path / "executed"),))

    torch.save({"config": Payload()}, tmp_path / "crafted.pt")
    with pytest.raises(ValueError, match="crafted.pt: refused"):
        icl.load_process(tmp_path / "crafted.pt")
    assert not (tmp_path / "executed").exists()
    with pytest.raises(ValueError, match="missing"):
        icl.load_process(tmp_path / "nothing.pt")


@pytest.mark.parametrize("call, message", [
    (lambda: icl.train(3), r"^config of type int is invalid: give None, a YAML file or preset name, or a mapping"),
    (lambda: icl.train([1, 2]), r"^config of type list is invalid"),
    (lambda: icl.train("box", "loss.tau=0.1"), r"^overrides='loss.tau=0.1' is invalid: give a list of arguments"),
    (lambda: icl.train(None, [3]), r"^cannot read the argument 3: overrides are written --dotted.key=value"),
    (lambda: icl.load_config(3.5), r"^config of type float is invalid: give None, a YAML file or a preset name$"),
    (lambda: icl.load_run(None), r"^run_dir of type NoneType is invalid: give a run directory's path$"),
    (lambda: icl.train({"loss": {"tau": 0.1}, "loss.tau": 0.2}),
     r"^loss.tau=0.2 is invalid: given twice in the config \(also =0.1\): give it once, nested or dotted$"),
])
def test_arguments_of_the_wrong_type_are_a_value_error_naming_the_argument(call, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        call()
    assert list(tmp_path.iterdir()) == []


def test_api_calls_that_would_reach_the_allocator_or_the_file_system_raise_one_clear_error(tmp_path, monkeypatch):
    import torch

    import identifiable_cl as icl

    process = icl.build_process({"space": "sphere", "conditional": {"name": "vmf", "kappa": 5.0}}, seed=3)

    def exhausted(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried "
                           "to allocate 400000000000 bytes.")

    monkeypatch.setattr(process.marginal, "sample", exhausted)
    with pytest.raises(ValueError, match=r"^batch_size=1000000000 is invalid: drawing that many rows needs more "
                                         r"memory than this machine has \(\[enforce fail"):
        process.sample(10**9, process.make_generator(0))
    monkeypatch.undo()
    (tmp_path / "afile").write_text("mine\n")
    with pytest.raises(ValueError, match="run directory '.*afile' is a file: give a new or empty folder"):
        icl.train({"train.steps": 1}, run_dir=tmp_path / "afile")
    with pytest.raises(ValueError, match="^out='.*afile' is invalid: give the folder new runs are made in"):
        icl.train({"train.steps": 1}, out=tmp_path / "afile")
    assert (tmp_path / "afile").read_text() == "mine\n"
    with pytest.raises(ValueError, match="is not a run directory"):
        icl.load_run(tmp_path / "afile")
    assert torch.is_tensor(process.sample(4, process.make_generator(0)).z)


def test_assembling_anything_but_a_spec_is_one_line_and_a_new_run_needs_its_folder(tmp_path):
    from identifiable_cl.components import assemble, resolve
    from identifiable_cl.training import Trainer

    for call, where in ((lambda: assemble({"train.steps": 1}), "assemble"),
                        (lambda: Trainer.from_spec({"train": {"steps": 1}}, tmp_path / "run"), "Trainer.from_spec")):
        with pytest.raises(ValueError, match=rf"^{where}: a spec of type dict is invalid: give the RunSpec that "
                                             r"identifiable_cl.resolve returns"):
            call()
    with pytest.raises(ValueError, match="^Trainer.from_spec: a new run needs run_dir, the folder it is written to"):
        Trainer.from_spec(resolve(None, {"train.steps": 1}))
    assert list(tmp_path.iterdir()) == []


def test_check_reads_a_part_of_a_config_over_the_defaults():
    import identifiable_cl as icl

    assert icl.check({"loss": {"tau": 0.5}})["loss"]["tau"] == 0.5
    assert icl.check({"train.steps": 7})["train"]["steps"] == 7
    for partial, message in (({"loss": {"tau": -1}}, "loss.tau=-1 is invalid: must be > 0"),
                             ({"lss.tau": 1}, "lss.tau=1 is invalid: unknown config key")):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
            icl.check(partial)
