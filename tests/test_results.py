"""``icl results``: grouping by swept parameters except the seed, mean ± std over seeds, failures shown."""

import csv
import io
import json
import statistics

import pytest
import yaml

from identifiable_cl.cli import main
from identifiable_cl.aggregate import results
from identifiable_cl.sweeps.local import write_params

R2 = {("infonce", 0): 0.91, ("infonce", 1): 0.95, ("infonce", 2): 0.93, ("aninfonce", 0): 0.99, ("aninfonce", 1): 0.97}


def sweep_run(folder, index, params, exit_code=0, summary=None, state=None):
    folder.mkdir(parents=True)
    write_params(folder / "params.yaml", params)
    status = {"index": index, "exit_code": exit_code, "state": state or ("finished" if exit_code == 0 else "failed"),
              "run_dir": "run"}
    (folder / "status.json").write_text(json.dumps(status))
    run = folder / "run"
    run.mkdir()
    config = {"seed": params["seed"], "loss": {"name": params["loss.name"]}, "train": {"steps": 5}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep_dir(tmp_path):
    out = tmp_path / "out" / "demo"
    index = 0
    for loss in ("infonce", "aninfonce"):
        for seed in (0, 1, 2):
            params = {"loss.name": loss, "seed": seed, "train.steps": 5}
            folder = out / f"run{9 - index}"  # folder names out of plan order on purpose
            if (loss, seed) in R2:
                summary = {"r2_linear": R2[loss, seed], "mcc_pearson": 0.5 + seed / 10, "seed": seed}
                sweep_run(folder, index, params, 0, summary)
            else:
                sweep_run(folder, index, params, exit_code=1)
            index += 1
    sweep_run(out / "runZ", index, {"loss.name": "aninfonce", "seed": 3, "train.steps": 5}, exit_code=None, state="running")
    sweep_run(out / "runY", index + 1, {"loss.name": "infonce", "seed": 4, "train.steps": 5}, exit_code=0)
    return tmp_path / "out"


def test_json_groups_stats_and_failures(sweep_dir):
    rows = json.loads(results([sweep_dir], fmt="json"))
    assert [row["group"] for row in rows] == [{"loss.name": "infonce"}, {"loss.name": "aninfonce"}]
    infonce, aninfonce = rows
    assert infonce["n"] == 3 and infonce["failed"] == 1 and sorted(infonce["seeds"]) == [0, 1, 2]
    values = [R2["infonce", s] for s in (0, 1, 2)]
    assert infonce["metrics"]["r2_linear"] == {
        "mean": pytest.approx(statistics.fmean(values)), "std": pytest.approx(statistics.stdev(values)), "n": 3
    }
    assert "no summary.json" in infonce["failed_runs"][0]["problem"]
    assert aninfonce["n"] == 2 and aninfonce["failed"] == 2
    problems = sorted(r["problem"] for r in aninfonce["failed_runs"])
    assert problems[0].startswith("exit 1, log") and problems[1].startswith("running (no exit code)")


def test_markdown_table(sweep_dir):
    table = results([sweep_dir], metrics=["r2_linear"])
    lines = table.splitlines()
    assert lines[0] == "| loss.name | r2_linear | n | failed |"
    assert lines[2] == "| infonce | 0.930 ± 0.020 | 3 | 1 |"
    assert lines[3] == "| aninfonce | 0.980 ± 0.014 | 2 | 2 |"
    assert "3 failed run(s):" in table


def test_csv_and_explicit_grouping(sweep_dir):
    text = results([sweep_dir], group_by=[], metrics=["mcc_pearson"], fmt="csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 1 and rows[0]["n"] == "5" and rows[0]["failed"] == "3"
    assert float(rows[0]["mcc_pearson_mean"]) == pytest.approx(statistics.fmean([0.5, 0.6, 0.7, 0.5, 0.6]))
    by_seed = results([sweep_dir], group_by=["seed"], metrics=["r2_linear"], fmt="csv")
    assert next(csv.DictReader(io.StringIO(by_seed)))["r2_linear_std"] == repr(statistics.stdev([0.91, 0.99]))


def test_bare_run_directories_group_by_varying_config_keys(tmp_path):
    for i, (tau, seed, r2) in enumerate([(0.1, 0, 0.8), (0.1, 1, 0.9), (0.5, 0, 0.7), (0.5, 1, None)]):
        run = tmp_path / f"r{i}"
        run.mkdir()
        (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "loss": {"name": "infonce", "tau": tau}}))
        (run / "dgp.pt").write_bytes(b"")
        if r2 is not None:
            (run / "summary.json").write_text(json.dumps({"r2_linear": r2}))
    wandb_files = tmp_path / "r0" / "wandb" / "run-x" / "files"
    wandb_files.mkdir(parents=True)
    (wandb_files / "config.yaml").write_text("wandb_version: 1\n")  # online W&B writes one: not a run
    rows = json.loads(results([tmp_path], fmt="json"))
    assert [(r["group"], r["n"], r["failed"]) for r in rows] == [({"loss.tau": 0.1}, 2, 0), ({"loss.tau": 0.5}, 1, 1)]
    assert rows[0]["metrics"]["r2_linear"]["mean"] == pytest.approx(0.85)
    assert rows[1]["metrics"]["r2_linear"]["std"] is None


def test_no_runs_and_missing_folders(tmp_path, capsys):
    with pytest.raises(ValueError, match="no runs found"):
        results([tmp_path])
    with pytest.raises(ValueError, match="does not exist"):
        results([tmp_path / "nope"])
    with pytest.raises(ValueError, match="--format 'xml'"):
        results([tmp_path], fmt="xml")
    assert main(["results", str(tmp_path)]) == 2
    assert "no runs found" in capsys.readouterr().err


def test_cli_options(sweep_dir, capsys):
    assert main(["results", str(sweep_dir), "--group-by", "loss.name,seed", "--metrics", "r2_linear", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["loss.name"], r["seed"], r["n"], r["failed"]) for r in rows] == [
        ("infonce", "0", "1", "0"),
        ("infonce", "1", "1", "0"),
        ("infonce", "2", "1", "0"),
        ("aninfonce", "0", "1", "0"),
        ("aninfonce", "1", "1", "0"),
        ("aninfonce", "2", "0", "1"),
        ("aninfonce", "3", "0", "1"),
        ("infonce", "4", "0", "1"),
    ]


def test_block_aware_mcc_column_is_followed_by_its_random_rotation_reference(tmp_path):
    for seed, (aware, chance) in enumerate([(0.97, 0.78), (0.99, 0.80)]):
        summary = {"r2_linear": 0.9, "mcc_block_aware": aware, "mcc_block_aware_random_rotation": chance, "seed": seed}
        sweep_run(tmp_path / f"run{seed}", seed, {"loss.name": "aninfonce", "seed": seed}, 0, summary)
    lines = results([tmp_path]).splitlines()
    assert lines[0] == "| r2_linear | mcc_block_aware | mcc_block_aware_random_rotation | n | failed |"
    assert lines[2] == "| 0.900 ± 0.000 | 0.980 ± 0.014 | 0.790 ± 0.014 | 2 | 0 |"


def test_icl_evaluate_prints_the_random_rotation_reference_beside_block_aware_mcc(tmp_path, monkeypatch, capsys):
    import identifiable_cl.training

    summary = {"r2_linear": 0.99, "identity_r2_linear": 0.8, "mcc_block_aware": 0.981,
               "identity_mcc_block_aware": 0.9, "mcc_block_aware_random_rotation": 0.783,
               "identity_mcc_block_aware_random_rotation": 0.781, "mcc_block_aware_in_sample": 0.99}
    monkeypatch.setattr(identifiable_cl.training, "evaluate_run", lambda run_dir, overrides, write=True: dict(summary))
    assert main(["evaluate", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric", "encoder", "identity", "g(z)", "random", "rotation"]
    assert lines[2].split() == ["block-aware", "MCC", "0.981", "0.900", "0.783"]
    assert lines[0].index("random rotation") + len("random rotation") == len(lines[2])  # right-aligned under it
    assert lines[1].split() == ["linear", "R²", "0.990", "0.800"]
    assert lines[3].split() == ["block-aware", "MCC,", "in", "sample", "0.990", "0.783"]  # the same chance level
    assert json.loads((tmp_path / "evaluation.json").read_text()) == summary
    del summary["mcc_block_aware_random_rotation"]
    assert main(["evaluate", str(tmp_path)]) == 0
    assert "random rotation" not in capsys.readouterr().out  # a summary from before the reference existed


def test_a_metric_no_run_records_is_refused_with_the_closest_ones(sweep_dir, capsys):
    assert main(["results", str(sweep_dir), "--metrics", "r2_linaer,mcc_pearson"]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert ("--metrics: no finished run records 'r2_linaer' (did you mean r2_linear" in said.err
            and "takes keys of the runs' summary.json" in said.err)
