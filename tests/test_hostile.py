"""Hostile input at the command line: each case ends with its exit code and one line naming the key, value or
file at fault (a sweep file: a line per problem), within a time limit (no hang), without a traceback, and with the files it was given unchanged.

A case is ``(argv, files, code, message)``: ``files`` are written into a fresh folder first (the run
folders of ``RUN``-using cases are trained once per session), ``argv`` runs there as ``icl ...``: through the
command line's ``main`` in this process, and for a few cases also as a real ``icl`` process.
"""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from identifiable_cl import rundir

TIMEOUT = 120
DEEP = "x: " + "[" * 5000 + "]" * 5000 + "\n"
LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(9))
GRID = "name: g\nmethod: grid\ncommand: [icl, train, '${args}']\nparameters:\n"

AR1 = ["--dgp.space.name=euclidean", "--dgp.marginal.name=ar1", "--dgp.conditional.name=ar1", "--dgp.negatives.name=none"]
SEGMENTED = ["--dgp.space.name=euclidean", "--dgp.marginal.name=segments", "--dgp.conditional.name=same_segment",
             "--dgp.negatives.name=none"]

CASES = {
    "a reproduction over a hundred million seeds": (
        ["reproduce", "rusak2024", "--scale", "tiny", "--seeds", "100000000", "--out", "x"], {}, 2,
        "--seeds 100000000: must be a whole number from 1 to 10,000"),
    "a sweep quantised by an infinite step": (
        ["sweep", "check", "s.yaml"], {"s.yaml": GRID + "  loss.tau: {distribution: q_uniform, min: 0.1, max: 1, "
                                                      "q: .inf}\n"}, 1,
        "parameters.loss.tau.q=inf is invalid: expected a finite number"),
    "a W&B run name holding a terminal escape code": (
        ["config", "--wandb.name=a\x1b[31mred"], {}, 2,
        "wandb.name='a\\x1b[31mred' is invalid: holds U+001B (a control character)"),
    "an option name holding a zero-width space": (
        ["config", "c.yaml"], {"c.yaml": 'loss:\n  "ta\u200bu": 0.1\n'}, 2,
        "unknown option(s) for losses 'infonce'; allowed: similarity, tau, learn_tau, negatives, reduction, lr, queue; "
        "'ta\\u200bu' holds U+200B ZERO WIDTH SPACE"),
    "a sweep whose search space is its scheduler's": (
        ["sweep", "check", "s.yaml"], {"s.yaml": "name: g\nmethod: grid\ncommand: [icl, train, '${args}']\n"
                                                 "scheduler: {engine: wandb, source: x, search_space: loss.tau}\n"}, 1,
        "parameters: required by icl, which checks, plans and runs each set of parameters itself"),
    "an AR(1) coefficient whose burn-in never ends": (
        ["config", *AR1, "--dgp.marginal.rho=0.999999999999", "--dgp.conditional.rho=0.999999999999"], {}, 2,
        "dgp.marginal.rho=0.999999999999 is invalid: with laplace innovations the stationary law is drawn by a burn-in "
        "of 27,631,632,375,153 steps, more than the 10,000 a draw may take: |rho| <= 0.9972"),
    "a billion segments": (
        ["train", *SEGMENTED, "--dgp.marginal.segments=1000000000", "--run-dir", "fresh"], {}, 2,
        "dgp.marginal.segments=1000000000 is invalid: at most 100,000"),
    "sources scaled past float32": (
        ["train", *SEGMENTED, "--dgp.marginal.std_high=1e300", "--run-dir", "fresh"], {}, 2,
        "dgp.marginal.std_high=1e+300 is invalid: must lie in [0, 1e+06]: the latents are mixed and encoded in float32"),
    "a generalised normal innovation of exponent 1e-300": (
        ["train", *AR1, "--dgp.marginal.innovation=gennorm", "--dgp.conditional.innovation=gennorm",
         "--dgp.marginal.p=1e-300", "--dgp.conditional.p=1e-300", "--run-dir", "fresh"], {}, 2,
        "dgp.marginal.p=1e-300 is invalid: must lie in [0.1, 100]"),
    "an innovation scale of 1e38": (
        ["train", *AR1, "--dgp.marginal.scale=1e38", "--dgp.conditional.scale=1e38", "--run-dir", "fresh"], {}, 2,
        "dgp.marginal.scale=1e+38 is invalid: must lie in [0, 1e+06]"),
    "config with a duplicate key": (
        ["train", "c.yaml"], {"c.yaml": "loss:\n  tau: 0.1\nloss:\n  tau: 0.2\n"}, 2,
        "config file 'c.yaml' is not valid YAML: line 3, column 1: the key 'loss' appears twice (first on line 1)"),
    "config whose key is not a string": (
        ["train", "c.yaml"], {"c.yaml": "1: 2\n"}, 2,
        "config file 'c.yaml' is not valid YAML: line 1, column 1: the key 1 is not a string (quote it)"),
    "config nested thousands deep": (
        ["config", "c.yaml"], {"c.yaml": DEEP}, 2, "is not valid YAML: line 1, column 67: nested deeper than 64 levels"),
    "alias bomb in a config": (
        ["train", "c.yaml"], {"c.yaml": LAUGHS}, 2,
        "config file 'c.yaml' is not valid YAML: line 6, column 15: "
        "more than 200000 values once its aliases are expanded"),
    "alias bomb in a sweep's values": (
        ["sweep", "check", "s.yaml"], {"s.yaml": LAUGHS + GRID + "  seed: {values: *l8}\n"}, 1,
        "values once its aliases are expanded"),
    "alias bomb under wandb.tags": (
        ["train", "c.yaml"], {"c.yaml": LAUGHS.replace("l", "t") + "wandb:\n  tags: *t8\n"}, 2,
        "values once its aliases are expanded"),
    "sweep nested thousands deep": (
        ["sweep", "check", "s.yaml"], {"s.yaml": GRID + "  seed: {values: [0]}\n" + DEEP}, 1,
        "nested deeper than 64 levels"),
    "a config value that contains itself": (
        ["config", "c.yaml"], {"c.yaml": "wandb:\n  tags: &r [*r]\n"}, 2,
        "config file 'c.yaml' is not valid YAML: line 2, column 13: an alias inside the value its anchor names"),
    "results of consistency with options it would ignore": (
        ["results", ".", "--consistency", "--metrics", "r2_linear", "--format", "csv"], {}, 2,
        "--consistency prints its own table and takes no --metrics, --format; give them without --consistency"),
    "results with an empty list of metrics": (
        ["results", ".", "--metrics", ""], {}, 2, "--metrics '': name at least one key (comma-separated)"),
    "a pack of a hundred million seeds": (
        ["train", "--pack-seeds", "0-99999999"], {}, 2,
        "--pack-seeds='0-99999999' is invalid: more than 1024 runs in one pack"),
    "an unknown W&B mode, before anything is written": (
        ["train", "--wandb.mode=bogus", "--run-dir", "fresh"], {}, 2,
        "wandb.mode='bogus' is invalid: allowed: "),
    "a pack file holding a list of nothing": (
        ["train", "--pack-file", "p.json"], {"p.json": "[]"}, 2,
        "--pack-file 'p.json': expected a non-empty JSON list of runs"),
    "a pack file holding an object": (
        ["train", "--pack-file", "p.json"], {"p.json": "{}"}, 2,
        "--pack-file 'p.json': expected a non-empty JSON list of runs"),
    "a sweep whose command passes no parameters": (
        ["sweep", "check", "s.yaml"], {"s.yaml": GRID.replace(", '${args}'", "") + "  seed: {values: [0, 1]}\n"}, 1,
        "passes no argument macro"),
    "a bayes sweep without a metric": (
        ["sweep", "check", "s.yaml"],
        {"s.yaml": GRID.replace("grid", "bayes") + "  loss.tau: {min: 0.05, max: 0.5}\n"}, 1,
        "metric: a bayes search needs the metric to optimise"),
    "a temperature float32 turns into 0": (
        ["config", "--loss.tau=1e-320"], {}, 2,
        "loss.tau=1e-320 is invalid: must lie in [1.18e-38, 3.4e+38]: float32 turns it into 0"),
    "a concentration float32 cannot hold": (
        ["config", "--dgp.conditional.name=anisotropic", "--dgp.conditional.lambdas=[1.0e-300,1,1,1,1,1,1,1,1,1]"], {},
        2, "every entry must lie in [1.18e-38, 3.4e+38], where float32 holds Λ and 1/√Λ; entry 0 is 1e-300"),
    "a config key with spaces around it": (
        ["config", "c.yaml"], {"c.yaml": 'train:\n  "steps ": 5\n'}, 2,
        "'train.steps ' has spaces around it: did you mean 'train.steps'?"),
    "a loss option with spaces around it": (
        ["config", "c.yaml"], {"c.yaml": 'loss:\n  "tau ": 0.5\n'}, 2, "'tau ' has spaces around it"),
    "grid of q_uniform with a tiny q": (
        ["sweep", "check", "s.yaml"],
        {"s.yaml": GRID + "  loss.tau: {distribution: q_uniform, min: 0.0, max: 1.0, q: 1.0e-7}\n"}, 1,
        "the grid has 10,000,000 points (10,000,000 (loss.tau)), more than the limit of 100,000"),
    "a config giving a key nested and dotted": (
        ["config", "c.yaml"], {"c.yaml": "loss:\n  tau: 0.1\nloss.tau: 0.2\n"}, 2,
        "loss.tau=0.2 is invalid: given twice in c.yaml (also =0.1): give it once, nested or dotted"),
    "devices that are not GPUs": (
        ["sweep", "run", "s.yaml", "--devices", "0,banana!!"], {"s.yaml": GRID + "  seed: {values: [0]}\n"}, 2,
        "--devices '0,banana!!': 'banana!!' is not a GPU"),
    "a job memory that is not a number": (
        ["sweep", "submit", "s.yaml", "--cluster", "debug", "--mem-gb", "nan"],
        {"s.yaml": GRID + "  seed: {values: [0]}\n"}, 2, "--mem-gb nan: must be a finite number of GB > 0"),
    "a Slurm partition for the local executor": (
        ["sweep", "submit", "s.yaml", "--cluster", "local", "--partition", "gpu"],
        {"s.yaml": GRID + "  seed: {values: [0]}\n"}, 2,
        "--partition: Slurm settings, which --cluster local would ignore; give them with --cluster slurm"),
    "a temperature float32 training cannot use": (
        ["config", "--loss.tau=1e-30"], {}, 2,
        "loss.tau=1e-30 is invalid: must lie in [1e-06, 1e+06] for float32 training: the logits are similarities"),
    "a margin of 1e300": (
        ["config", "--loss.name=margin", "--loss.margin=1e300"], {}, 2,
        "loss.margin=1e+300 is invalid: must lie in [0, 1e+06] in magnitude for float32 training"),
    "an NCE offset of 1e30": (
        ["config", "--loss.name=nce", "--loss.offset=1e30"], {}, 2,
        "loss.offset=1e+30 is invalid: must lie in [0, 1e+06] in magnitude for float32 training"),
    "a 5,000-digit seed": (
        ["train", "--seed=" + "9" * 5000], {}, 2, "--seed=... is invalid: an integer of 5000 digits (at most 100)"),
    "a 5,000-digit seed in a config": (
        ["train", "c.yaml"], {"c.yaml": "seed: " + "9" * 5000 + "\n"}, 2,
        "config file 'c.yaml' is not valid YAML: line 1, column 7: an integer of 5000 digits (at most 100)"),
    "W&B tags of nested lists": (
        ["train", "--wandb.tags=[[a]]", "--run-dir", "fresh"], {}, 2,
        "wandb.tags=[['a']] is invalid: entry 0 (['a']) is not a W&B tag: a string of 1 to 64 characters"),
    "a W&B tag longer than W&B takes": (
        ["config", "--wandb.tags=[ok," + "x" * 65 + "]"], {}, 2, "entry 1 ('xxxxx"),
    "an evaluation with fewer rows than the columns it correlates": (
        ["config", "--eval.n_test=10"], {}, 2,
        "eval.n_test=10 is invalid: must be >= 11: correlating 10 scored latent columns with 10 columns of h needs"),
    "a process of a thousand views": (
        ["config", "--dgp.space.name=euclidean", "--dgp.marginal.name=gaussian_blocks", "--dgp.conditional.name=keep",
         "--dgp.views.name=subsets",
         "--dgp.views.latents=[" + ",".join(["[z0,z1]"] * 1000) + "]"], {}, 2,
        "dgp.views.latents='a list of 1000 views' is invalid: at most 64 views: a step contrasts every ordered pair"),
    "every subset of forty views contrasted": (
        ["config", "--dgp.space.name=euclidean", "--dgp.marginal.name=gaussian_blocks", "--dgp.conditional.name=keep",
         "--dgp.views.name=subsets",
         "--dgp.views.latents=[" + ",".join(["[z0,z1]"] * 40) + "]", "--dgp.views.contrast=all"], {}, 2,
        "dgp.views.contrast='all' is invalid: 40 views have 1,099,511,627,735 subsets of >= 2, more than the 1,024"),
    "a negative time limit": (
        ["sweep", "submit", "s.yaml", "--cluster", "debug", "--timeout-min", "-1"],
        {"s.yaml": GRID + "  seed: {values: [0]}\n"}, 2, "--timeout-min -1: must be a whole number >= 1"),
}


def held(run: Path):
    """As a run training in another process holds it: this process's lock of the run directory."""
    return rundir.own(run)


def damaged_metrics(record: str):
    def damage(run: Path) -> None:
        with open(run / rundir.METRICS, "a") as out:
            out.write(record + "\n")
    return damage


def one_dimensional_readout(run: Path) -> None:
    np.savez(run / rundir.READOUT, z=np.zeros(5), z_hat=np.zeros(5), r2_per_dim=np.zeros(5))


def meta_field(name: str, value) -> callable:
    def damage(run: Path) -> None:
        meta = json.loads((run / rundir.META).read_text())
        (run / rundir.META).write_text(json.dumps({**meta, name: value}))
    return damage


def edited_config(key: str, value):
    def damage(run: Path) -> None:
        config = yaml.safe_load((run / rundir.CONFIG).read_text())
        config["loss"][key] = value
        (run / rundir.CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    return damage


def checkpoint_folder(run: Path) -> None:
    (run / rundir.CHECKPOINT).unlink()
    (run / rundir.CHECKPOINT).mkdir()


def checkpoint_step(step: int):
    def damage(run: Path) -> None:
        state = rundir.load_torch(run / rundir.CHECKPOINT)
        torch.save({**state, "step": step}, run / rundir.CHECKPOINT)
    return damage


def nan_weights(run: Path) -> None:
    state = rundir.load_torch(run / rundir.CHECKPOINT)
    name = next(iter(state["encoder"]))
    torch.save({**state, "encoder": {**state["encoder"], name: state["encoder"][name] * float("nan")}},
               run / rundir.CHECKPOINT)


RUN_CASES = {
    "resume of a checkpoint holding NaN weights": (
        ["train", "--resume", "run", "--train.steps=30"], nan_weights, 2,
        "checkpoint.pt: does not fit the run's config or is damaged (its encoder tensor "),
    "plot of a readout with one-dimensional latents": (
        ["plot", "run"], one_dimensional_readout, 2,
        "readout.npz: expected z and z_hat of one shape (N, n) and r2_per_dim (n,); got (5,), (5,) and (5,)"),
    "resume of a run another process is writing": (["train", "--resume", "run"], held, 2,
                                                   "run directory 'run' is being written by another process (pid "),
    "evaluate of a run another process is writing": (["evaluate", "run"], held, 2, "is being written by another"),
    "plot of a run another process is writing": (["plot", "run"], held, 2, "is being written by another"),
    "resume that would shorten a finished run": (
        ["train", "--resume", "run", "--train.steps=5"], None, 2,
        "train.steps=5 is invalid: the run has reached step 20, and a resumed run only goes on"),
    "plot of metrics holding a NaN literal": (
        ["plot", "run"], damaged_metrics('{"step": 30, "loss": NaN}'), 2,
        "metrics.jsonl: line 3: loss=nan is not a metric value (a finite number, null, or a list of them)"),
    "resume of metrics holding a word": (
        ["train", "--resume", "run", "--train.steps=40"], damaged_metrics('{"step": 30, "loss": "high"}'), 2,
        "metrics.jsonl: line 3: loss='high' is not a metric value"),
    "evaluate of a run whose meta.json holds a number as its command": (
        ["evaluate", "run"], meta_field("command", 5), 2,
        "meta.json: command=5 is not what a run writes there (the command line, a list of strings)"),
    "resume of a run whose meta.json started at no time": (
        ["train", "--resume", "run", "--train.steps=30"], meta_field("started", "yesterday"), 2,
        "meta.json: started='yesterday' is not what a run writes there (a time as 2026-01-31T12:00:00+0000)"),
    "resume of a run whose config.yaml was edited": (
        ["train", "--resume", "run", "--train.steps=30"], edited_config("tau", 0.7), 2,
        "config.yaml: loss.tau=0.7 is not the 0.1 its checkpoint was trained with: the file was edited; restore it"),
    "evaluate of a run whose config.yaml was edited": (
        ["evaluate", "run"], edited_config("tau", 0.7), 2, "loss.tau=0.7 is not the 0.1 its checkpoint was trained with"),
    "resume of a run whose checkpoint is a folder": (
        ["train", "--resume", "run", "--train.steps=30"], checkpoint_folder, 2,
        "checkpoint.pt' is a folder, not a file of its own"),
    "evaluate of a checkpoint at a negative step": (
        ["evaluate", "run"], checkpoint_step(-5), 2,
        "checkpoint.pt: does not fit the run's config or is damaged (its step -5 is outside 0..train.steps=20)"),
    "resume of a checkpoint past the run's steps": (
        ["train", "--resume", "run", "--train.steps=30"], checkpoint_step(10**12), 2,
        "its step 1000000000000 is outside 0..train.steps=20"),
    "plot of metrics out of order": (
        ["plot", "run"], damaged_metrics('{"step": 5, "loss": 1.0}'), 2,
        "metrics.jsonl: line 3: step 5 does not follow step 20"),
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def said_one_line(said: str) -> str:
    """``said``, asserted to be one line without a traceback (a rejected sweep file: one line, then a line per
    problem)."""
    said = said.strip()
    first, *problems = said.splitlines()
    assert "Traceback" not in said and all(line.startswith("  - ") for line in problems), said
    assert not problems or first.endswith("rejected before any run started:"), said
    return said


class TookTooLong(Exception):
    pass


def icl(argv, cwd: Path, subprocess_: bool = False) -> tuple[int, str]:
    """``icl argv`` in ``cwd`` with W&B off, within the time limit: its exit code and what it said
    (:func:`said_one_line`). In this process through the command line's ``main`` (its output captured), or in a
    fresh interpreter when ``subprocess_``."""
    if subprocess_:
        done = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", *argv], cwd=cwd, capture_output=True,
                              text=True, timeout=TIMEOUT, env={**os.environ, "WANDB_MODE": "disabled"})
        return done.returncode, said_one_line(done.stderr + done.stdout)
    from identifiable_cl.cli import main

    def alarm(signum, frame):
        raise TookTooLong(f"icl {' '.join(argv)} ran past {TIMEOUT} s")

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(TIMEOUT)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(here)
    return code, said_one_line(err.getvalue() + out.getvalue())


IN_A_FRESH_INTERPRETER = ("alias bomb in a config", "resume of a run another process is writing")
"""Cases that also run as a real ``icl`` process: its exit code and start-up, not only ``main``'s."""


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_gets_one_clear_line(case, tmp_path):
    argv, files, code, message = CASES[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    for fresh in (False, True) if case in IN_A_FRESH_INTERPRETER else (False,):
        exit_code, said = icl(argv, tmp_path, subprocess_=fresh)
        assert exit_code == code and message in said, said
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_hostile_use_of_a_run_folder_gets_one_clear_line(case, run):
    argv, prepare, code, message = RUN_CASES[case]
    lock = prepare(run) if prepare else None
    before = snapshot(run)
    try:
        for fresh in (False, True) if case in IN_A_FRESH_INTERPRETER else (False,):
            exit_code, said = icl(argv, run.parent, subprocess_=fresh)
            assert exit_code == code and message in said, said
            assert snapshot(run) == before
    finally:
        if lock is not None:
            rundir.unlock(lock)


def test_an_identity_cache_that_is_not_a_folder_is_named_before_anything_is_written(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file\n")
    monkeypatch.setenv(rundir.IDENTITY_CACHE, str(tmp_path / "cache"))
    before = snapshot(tmp_path)
    exit_code, said = icl(["train", "--run-dir", "fresh"], tmp_path)
    assert exit_code == 2 and f"ICL_IDENTITY_CACHE='{tmp_path / 'cache'}' is not a folder" in said, said
    assert snapshot(tmp_path) == before and not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
@pytest.mark.parametrize("verb", [["evaluate", "run"], ["plot", "run"], ["train", "--resume", "run"]])
def test_a_lock_path_that_is_not_a_plain_file_is_refused_and_never_written_through(kind, verb, run):
    target = run.parent / "mine.txt"
    target.write_text("a user's file\n")
    lock_path = run.parent / ".run.lock"
    lock_path.unlink(missing_ok=True)
    {"link": lambda: lock_path.symlink_to(target), "fifo": lambda: os.mkfifo(lock_path),
     "folder": lambda: lock_path.mkdir()}[kind]()
    before = snapshot(run)
    exit_code, said = icl(verb, run.parent)
    what = {"link": "a symbolic link", "fifo": "a FIFO", "folder": "a folder"}[kind]
    assert exit_code == 2 and f"'.run.lock' is {what}, not a file of its own" in said, said
    assert target.read_text() == "a user's file\n" and snapshot(run) == before


def test_a_queue_larger_than_memory_names_its_key_and_writes_nothing(tmp_path):
    import resource

    def bounded():  # the machine's memory, as this process sees it: 6 GB of address space
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    done = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "train", "--loss.negatives=queue",
                           "--loss.queue.size=1000000000", "--run-dir", "fresh", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=bounded,
                          env={**os.environ, "WANDB_MODE": "disabled"})
    said = said_one_line(done.stderr + done.stdout)
    assert done.returncode == 2 and "out of memory while building the run (" in said, said
    assert "its largest sizes: loss.queue.size=1000000000, " in said and said.endswith("(nothing was written)"), said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch")
def test_a_slurm_submission_no_controller_answers_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"  # a cluster whose controller is not there: the real sbatch cannot reach it
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=9\nAuthType=auth/none\n"
                    "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    (tmp_path / "s.yaml").write_text(GRID + "  seed: {values: [0]}\n")
    before = snapshot(tmp_path)
    exit_code, said = icl(["sweep", "submit", "s.yaml", "--cluster", "slurm", "--out", "out"], tmp_path)
    assert exit_code == 2 and said.startswith("icl sweep: error: --cluster slurm: the cluster refused the jobs (sbatch: ")
    assert said.endswith("nothing was submitted: check that it answers (sinfo) and submit again"), said
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_folder_given_as_the_config_file_is_named_as_a_folder(tmp_path):
    (tmp_path / "configs").mkdir()
    before = snapshot(tmp_path)
    exit_code, said = icl(["train", "configs"], tmp_path)
    assert exit_code == 2 and "config file 'configs' is a folder: give a YAML file or a packaged preset" in said, said
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["configs"]


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    from identifiable_cl import rundir
    from identifiable_cl.rundir import new_run_dirs

    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20261205-120000")
    config = {"loss": {"name": "infonce"}, "dgp": {"conditional": {"name": "laplace"}}, "seed": 0}
    with new_run_dirs(tmp_path / "out", [config]) as (first,), new_run_dirs(tmp_path / "out", [config, config]) as more:
        assert [first.name, *(p.name for p in more)] == [
            "20261205-120000-infonce-laplace-s0", "20261205-120000-infonce-laplace-s0-1",
            "20261205-120000-infonce-laplace-s0-2"]
        assert all(p.is_dir() and not any(p.iterdir()) for p in (first, *more))


def test_a_refused_run_leaves_no_folder_under_out(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file\n")
    monkeypatch.setenv(rundir.IDENTITY_CACHE, str(tmp_path / "cache"))
    exit_code, said = icl(["train", "--out", "out", "--train.steps=1"], tmp_path)
    assert exit_code == 2 and "is not a folder" in said, said
    assert not (tmp_path / "out").exists()


def test_resuming_a_finished_run_says_so_and_changes_nothing(run):
    """A no-op leaves every file as it was, its modification time included, and starts no W&B run."""
    times = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    before = snapshot(run)
    exit_code, said = icl(["train", "--resume", "run"], run.parent)
    assert exit_code == 0
    assert said.strip() == ("run: finished, at step 20 of train.steps=20; nothing to do, nothing changed (train it "
                            "further with icl train --resume run --train.steps=N, N > 20; measure it again with icl "
                            "evaluate run)")
    assert snapshot(run) == before and {p: p.stat().st_mtime_ns for p in run.rglob("*")} == times


def test_a_fifo_where_an_experiment_ships_its_tuned_values_is_named_not_taken_as_absent(tmp_path):
    """Reading a FIFO would block, and taking it as absent would tune the runs again unasked."""
    from identifiable_cl.reproduce.experiment import EXPERIMENTS_DIR

    folder = tmp_path / "exp"
    folder.mkdir()
    shutil.copy(Path(EXPERIMENTS_DIR) / "rusak2024" / "experiment.yaml", folder)
    os.mkfifo(folder / "tuned.yaml")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, said = icl(["reproduce", "exp", "--scale", "tiny", "--out", "x"], tmp_path)
    assert code == 2 and "tuned.yaml' is a FIFO: icl reads only regular files" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_damaged_stop_record_is_listed_with_the_run_not_passed_over(run, capsys):
    """A diverged run's stopped.json that cannot be read: icl results lists the run as failed, naming the file."""
    from identifiable_cl.cli import main

    (run / rundir.STOPPED).write_text('{"reason": ')
    assert main(["results", str(run)]) == 0
    said = capsys.readouterr().out
    assert f"unreadable: {run / rundir.STOPPED}: cannot be read as JSON" in said, said
