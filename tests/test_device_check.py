"""The prepared GPU check: its cost of a step, its experiment copy, and one whole run on the CPU with --tiny."""

import json
from pathlib import Path

import pytest
import torch

from identifiable_cl.benchmarks import device_check as dc
from identifiable_cl.benchmarks import sections as bench
from identifiable_cl.cli import main as icl
from identifiable_cl.reproduce.experiment import load_experiment


def test_the_cost_of_a_step_is_read_from_the_runs_wall_times():
    found = {"aninfonce_bimodal": [{"wall_s": 30.0, "steps": 10000}, {"wall_s": 30.0, "steps": 10000}],
             "infonce_linear": [{"wall_s": 50.0, "steps": 10000}]}
    costs = dc.step_costs(found, pack=2)
    assert costs["aninfonce_bimodal"] == pytest.approx(0.003) and costs["infonce_linear"] == pytest.approx(0.005)
    assert costs["per_run_step"] == pytest.approx(0.002)
    assert dc.step_costs({}, pack=3) == {}


def test_the_official_log_column_at_or_below_the_steps_taken():
    assert dc.logged_column(100000, "aninfonce_bimodal") == 100000
    assert dc.logged_column(73000, "aninfonce_linear") == 50000
    assert dc.logged_column(9999, "aninfonce_linear") is None


def test_the_experiment_copy_changes_only_the_steps_and_cadences(tmp_path):
    original = load_experiment(dc.EXPERIMENT)
    copy = load_experiment(dc.experiment_copy(dc.r24_plan("paper"), 50000, tmp_path / "x"))
    for run in original.runs:
        want = original.config(run.label, "paper")
        got = copy.config(run.label, "paper")
        assert got["train"].pop("steps") == 50000 and want["train"].pop("steps") == 100000
        assert got["train"].pop("capture") == "graph" and want["train"].pop("capture") == "eager"
        assert got == want, run.label
    short = load_experiment(dc.experiment_copy(dc.r24_plan("paper"), 500, tmp_path / "y")).config("aninfonce_bimodal", "paper")
    assert short["train"]["eval_every"] == short["train"]["checkpoint_every"] == 500
    assert short["eval"]["in_sample_n"] == 4096  # the official logs' in-sample scores exist at paper scale


def test_a_file_over_the_limit_keeps_its_end(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"%06d\n" % i for i in range(2000)))  # 14,000 bytes
    dc.keep_end(path, limit=7000)
    text = path.read_text()
    assert len(text.encode()) <= 7000 and text.endswith("001999\n")
    assert text.splitlines()[0].startswith("[the first ") and "bytes were left out]" in text.splitlines()[0]
    dc.keep_end(path, limit=7000)
    assert path.read_text() == text  # within the limit: unchanged


def test_comparison_against_the_logs():
    found = {"aninfonce_bimodal": [{"r2_linear_in_sample": 0.99, "mcc_pearson_in_sample": 0.70},
                                   {"r2_linear_in_sample": 0.98, "mcc_pearson_in_sample": 0.60}]}
    rows = {(r["run"], r["metric"]): r for r in dc.comparison(found, 50000)}
    r2 = rows["aninfonce_bimodal", "r2_linear_in_sample"]
    assert (r2["seeds"], r2["log"], r2["log_step"], r2["within"]) == (2, 0.995, 50000, True)
    assert r2["mean"] == pytest.approx(0.985) and r2["std"] == pytest.approx(0.005)
    assert not rows["aninfonce_bimodal", "mcc_pearson_in_sample"]["within"]  # 0.65 against 0.675
    assert rows["aninfonce_linear", "r2_linear_in_sample"]["mean"] is None


@pytest.mark.integration
def test_tiny_check_runs_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    code = dc.main([str(out), "--tiny", "--device", "cpu", "--budget", "300", "--work", str(tmp_path / "work"),
                    "--tests", str(Path(__file__).parent / "test_registry.py"), "--bench", "packing"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "bench.txt", "device_check.json", "r24.log", "reproduce.md", "results.md", "tests.txt"]
    data = json.loads((out / "device_check.json").read_text())
    assert [s["finished"] for s in data["record"]] == [True] * 3
    assert data["steps"] == 12 and data["step_costs_s"]["per_run_step"] > 0
    row = next(r for r in data["comparison"] if r["run"] == "aninfonce_bimodal" and r["metric"] == "r2_linear_in_sample")
    assert row["seeds"] == 1 and -1 < row["mean"] <= 1 and row["log_step"] is None
    assert "packed runs on cpu" in (out / "bench.txt").read_text()
    text = (out / "results.md").read_text()
    assert "R24 at medium scale: 12 steps" in text and "aninfonce_bimodal" in text and "ms per run-step" in text
    assert "# " in (out / "reproduce.md").read_text()


def test_bench_device_choice(capsys):
    assert bench.bench_device(None).type in ("cpu", "cuda")
    assert bench.bench_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match=r"--device='tpu' is invalid: allowed cpu, cuda"):
        bench.bench_device("tpu")
    if not __import__("torch").cuda.is_available():
        assert icl(["bench", "--device", "cuda", "--only", "loss"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "icl bench: error: --device=cuda: CUDA is not available on this machine; use --device=cpu"


def test_a_reproduction_stopped_at_the_budget_reports_what_it_has(tmp_path, monkeypatch):
    calls = []

    def stopped_reproduction(argv, log, timeout, step, env):
        calls.append(argv)
        with open(log, "a") as out:
            out.write("$ " + " ".join(argv) + "\n")
        step.wall_s += timeout
        return 0 if "pytest" in argv or "bench" in argv else None

    monkeypatch.setattr(dc, "run_logged", stopped_reproduction)
    out = tmp_path / "out"
    data = dc.run_check(out, budget=100.0, device="cpu", tiny=True, work=tmp_path / "work")
    assert [s["finished"] for s in data["record"]] == [True, True, False]
    assert data["step_costs_s"] == {} and all(r["mean"] is None for r in data["comparison"])
    assert sum("reproduce" in argv for argv in calls) == 1
    text = (out / "results.md").read_text()
    assert "no run finished" in text and "(stopped or failed)" in text and "reproduce.md" not in text
    assert not (out / "reproduce.md").exists()


@pytest.mark.parametrize("argv, problem", [
    (["out.txt", "--device", "cpu"], "OUT 'out.txt' is a file: give a folder"),
    (["out", "--device", "cpu", "--work", "out.txt"], "--work 'out.txt' is a file: give a folder"),
    (["out", "--device", "cpu", "--budget", "0"], "--budget=0.0: must be a positive number of seconds"),
    (["out", "--device", "cpu", "--steps", "0"], "--steps=0: must be a whole number of steps from 1 to 100000"),
] + ([] if torch.cuda.is_available() else [(["out"], "--device cuda: CUDA is not available on this machine")]))
def test_a_check_that_cannot_start_says_why_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, problem):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out.txt").write_text("mine\n")
    assert dc.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("device_check: error: ") and problem in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"] and (tmp_path / "out.txt").read_text() == "mine\n"
