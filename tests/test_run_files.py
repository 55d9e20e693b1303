"""A run's own files under damage, foreign content and interruption: one clear line, nothing changed on disk."""

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from identifiable_cl import rundir
from identifiable_cl.cli import main
from identifiable_cl.components import load_config
from identifiable_cl.solvers import Solver
from identifiable_cl.training import NonFiniteLoss, Trainer





def snapshot(folder):
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("override, key", [("--train.steps=-5", "train.steps"), ("--loss.tau=0.5", "loss.tau"),
                                           ("--eval.n_fit=1", "eval.n_fit")])
def test_a_resume_that_fails_validation_changes_nothing(run, override, key, capsys):
    before = snapshot(run)
    assert main(["train", "--resume", str(run), override, "--quiet"]) == 2
    assert key in capsys.readouterr().err
    assert snapshot(run) == before


def test_a_resume_may_repeat_the_runs_own_values(run, capsys):
    assert main(["train", "--resume", str(run), "--loss.tau=0.1", "--dgp.mixing.cond_draws=200", "--quiet"]) == 0
    assert main(["train", "--resume", str(run), "--dgp.mixing.cond_draws=300", "--quiet"]) == 2
    assert "dgp.mixing.cond_draws=300 is invalid: cannot be changed on resume" in capsys.readouterr().err


class Payload:
    """Unpickling this touches a file: a stand-in for code a crafted run file would execute."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("name", [rundir.CHECKPOINT, rundir.DGP])
def test_a_crafted_pickle_is_refused_and_never_runs(run, tmp_path, name, capsys):
    marker = tmp_path / "executed"
    torch.save({"state": Payload(marker)}, run / name)
    with pytest.raises(ValueError, match="refused"):
        rundir.load_torch(run / name)
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / name}: refused" in err and "could run code" in err
    assert not marker.exists()


@pytest.mark.parametrize("name", [rundir.CHECKPOINT, rundir.DGP])
def test_truncated_torch_files_name_the_file(run, name, capsys):
    data = (run / name).read_bytes()
    (run / name).write_bytes(data[: len(data) // 2])
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / name}: truncated or not a torch file" in err and "Traceback" not in err


@pytest.mark.parametrize("text, fragment", [
    (b"\xff\xfe\x00garbage", "cannot be read as text"),
    (b"train: {steps: many}\n", "train.steps='many' is invalid"),
    (b"[1, 2]\n", "must hold a mapping"),
    (b"", "is empty"),
])
def test_damaged_config_yaml_names_the_file(run, text, fragment, capsys):
    (run / rundir.CONFIG).write_bytes(text)
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert str(run / rundir.CONFIG) in err and fragment in err


def test_config_yaml_that_disagrees_with_dgp_pt_is_an_error(run, capsys):
    text = (run / rundir.CONFIG).read_text()
    (run / rundir.CONFIG).write_text(text.replace("scale: 0.1", "scale: 0.2", 1))
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "describe different processes" in err and "conditional" in err


def test_evaluate_prints_its_table_before_writing(run, monkeypatch, capsys):
    def read_only(path, data):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(rundir, "write_json", read_only)
    assert main(["evaluate", str(run)]) == 1
    captured = capsys.readouterr()
    assert "linear R²" in captured.out
    assert "evaluation.json: the file system is read-only" in captured.err


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_honour_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        rundir.write_json(tmp_path / "a.json", {"x": 1})
        rundir.save_torch(tmp_path / "b.pt", {"x": torch.zeros(1)})
        rundir.save_npz(tmp_path / "c.npz", x=torch.zeros(1).numpy())
    finally:
        os.umask(old)
    for name in ("a.json", "b.pt", "c.npz"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_resume_removes_stale_temporaries(run):
    stale = run / f".{rundir.CHECKPOINT}.k1ll3d{rundir.TMP_SUFFIX}"
    stale.write_bytes(b"half a checkpoint")
    Trainer.resume(run, progress=False)
    assert not stale.exists() and (run / rundir.CHECKPOINT).exists()


@pytest.mark.parametrize("factor", [float("nan"), 1e22])
def test_a_diverged_loss_records_why_it_stopped(tmp_path, monkeypatch, factor, capsys, tiny):
    real = Solver.step
    monkeypatch.setattr(Solver, "step", lambda c: real(c) * (factor if c.steps_done > 14 else 1.0))
    with pytest.raises(NonFiniteLoss):
        Trainer.create(load_config(None, tiny), tmp_path / "run", progress=False).run()
    stopped = json.loads((tmp_path / "run" / rundir.STOPPED).read_text())
    assert stopped["first_step"] == 11 and stopped["last_step"] == 20 and stopped["checkpoint_step"] == 10
    assert "train.loss_limit=1e+06" in stopped["reason"]
    assert not (tmp_path / "run" / rundir.SUMMARY).exists()
    assert main(["results", str(tmp_path)]) == 0
    assert "the loss became NaN, inf or larger in magnitude" in capsys.readouterr().out


def test_without_a_loss_limit_only_non_finite_losses_stop(tmp_path, monkeypatch, tiny):
    real = Solver.step
    monkeypatch.setattr(Solver, "step", lambda c: real(c) * 1e22)
    summary = Trainer.create(load_config(None, {**tiny, "train.loss_limit": None}), tmp_path / "run", progress=False).run()
    assert summary["steps"] == 20


def test_ctrl_c_keeps_the_checkpoint_and_says_how_to_resume(tmp_path, interrupt_at, capsys, tiny):
    interrupt_at(15)
    run_dir = tmp_path / "run"
    args = ["train", *(f"--{k}={v}" for k, v in tiny.items()), "--run-dir", str(run_dir), "--quiet"]
    assert main(args) == 130  # the exit code of a run stopped by SIGINT
    err = capsys.readouterr().err
    assert "interrupted at step 15 of 20; the checkpoint of step 10 is kept" in err
    assert f"icl train --resume {run_dir}" in err
    interrupt_at(None)
    assert main(["train", "--resume", str(run_dir), "--quiet"]) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR2])
def test_stop_signals_stop_at_the_next_step_then_at_once_even_where_sigint_was_ignored(sig):
    from identifiable_cl.cli.train import stoppable
    from identifiable_cl.training import STOP

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    term, usr2 = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR2)
    try:
        with pytest.raises(KeyboardInterrupt), stoppable():
            assert not STOP.is_set()
            os.kill(os.getpid(), sig)
            deadline = time.monotonic() + 5
            while not STOP.is_set() and time.monotonic() < deadline:  # the handler runs at the next bytecode
                time.sleep(0.01)
            assert STOP.is_set()  # the first signal: stop at the next step boundary
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the second: at once; the sleep is interrupted
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is term
        assert signal.getsignal(signal.SIGUSR2) is usr2 and not STOP.is_set()
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigterm_ends_icl_train_as_interrupted_with_its_checkpoint(tmp_path, tiny):
    """A scheduler's SIGTERM, sent to a process that ignores SIGINT as background jobs do: exit 130, resumable."""
    run_dir = tmp_path / "run"
    overrides = {**tiny, "train.steps": 10 ** 6, "train.checkpoint_every": 5, "train.eval_every": 10 ** 6}
    argv = [sys.executable, "-m", "identifiable_cl.cli", "train", *(f"--{k}={v}" for k, v in overrides.items()),
            "--run-dir", str(run_dir), "--quiet"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / rundir.METRICS).exists() or len((run_dir / rundir.METRICS).read_text().splitlines()) < 2:
            assert process.poll() is None and time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted at step" in err and "the checkpoint of step" in err
    assert f"icl train --resume {run_dir}" in err
    step = int(err.split("interrupted at step ")[1].split()[0])
    assert f"the checkpoint of step {step} is kept" in err  # the step it reached, not the last periodic one


def test_sigterm_before_the_first_step_ends_icl_train_at_once_and_the_run_resumes(tmp_path, capsys):
    """A scheduler's cancel before the first step (while the run starts W&B, seconds offline) is honoured there:
    exit 130 within seconds, the run's first files complete, and --resume trains it."""
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-u", "-m", "identifiable_cl.cli", "train", "--train.steps=2", "--run-dir", str(run_dir),
            "--quiet", "--train.figures=false"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert process.stdout.readline().startswith("run directory:")  # printed once the folder is written
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = process.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted at step 0 of 2; no checkpoint was written yet" in err and "Traceback" not in err
    assert waited < 30, f"the signal waited {waited:.1f} s"  # not after the run's 2 steps and final evaluation
    assert {p.name for p in run_dir.iterdir()} >= {rundir.CONFIG, rundir.META, rundir.DGP}
    assert main(["train", "--resume", str(run_dir), "--eval.nonlinear=false", "--quiet"]) == 0, capsys.readouterr().err
    assert (run_dir / rundir.SUMMARY).is_file()


def test_a_run_stopped_between_log_steps_resumes_as_the_uninterrupted_run(tmp_path, monkeypatch):
    """STOP checkpoints the step reached with the loss accumulated since the last log step."""
    from identifiable_cl import training
    from tests.tiny import tiny_config

    config = {"train.steps": 40, "train.log_every": 10, "train.checkpoint_every": 40}
    full = Trainer.create(tiny_config(**config), tmp_path / "full", progress=False).run()
    real = Solver.step

    def stop_after_seventeen(c):
        if c.steps_done == 16:
            training.STOP.set()
        return real(c)

    monkeypatch.setattr(Solver, "step", stop_after_seventeen)
    try:
        with pytest.raises(training.Interrupted, match="interrupted at step 17 of 40; the checkpoint of step 17"):
            Trainer.create(tiny_config(**config), tmp_path / "half", progress=False).run()
    finally:
        training.STOP.clear()
    monkeypatch.setattr(Solver, "step", real)
    resumed = Trainer.resume(tmp_path / "half", progress=False).run()
    assert rundir.read_metrics(tmp_path / "half") == rundir.read_metrics(tmp_path / "full")
    assert resumed["r2_linear"] == full["r2_linear"]

def test_out_that_is_a_file_is_one_line(tmp_path, capsys, tiny):
    out = tmp_path / "runs"
    out.write_text("not a folder")
    assert main(["train", *(f"--{k}={v}" for k, v in tiny.items()), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err


def test_metrics_with_a_torn_last_line_are_read_and_a_damaged_one_is_named(run):
    path = run / rundir.METRICS
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines) + '\n{"step": 30, "lo')
    assert [r["step"] for r in rundir.read_metrics(run)] == [10, 20]
    path.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match=f"{rundir.METRICS}: line 2 is not JSON"):
        rundir.read_metrics(run)


def test_damaged_summary_names_the_file(run):
    (run / rundir.SUMMARY).write_text("[1, 2]")
    with pytest.raises(ValueError, match="summary.json: expected a JSON object"):
        rundir.read_json(run / rundir.SUMMARY)


def test_a_checkpoint_that_cannot_be_written_is_one_line_and_keeps_the_previous_one(run, capsys):
    """A real file-size limit (what a full disk does to a write too: an OSError from the write): one line naming the
    checkpoint and the cause, the previous checkpoint kept, no temporary file left."""
    import resource

    before = (run / rundir.CHECKPOINT).read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, hard))  # Python ignores SIGXFSZ: writes fail
    try:
        code = main(["train", "--resume", str(run), "--train.steps=30", "--quiet"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{run / rundir.CHECKPOINT}: writing it failed (File too large); its previous version, if any, is kept" \
        in err, err
    assert err.endswith(f"the checkpoint of step 20 is kept in {run}; continue with: icl train --resume {run}"), err
    assert (run / rundir.CHECKPOINT).read_bytes() == before and not list(run.glob(f".*{rundir.TMP_SUFFIX}"))


def test_metrics_that_cannot_be_appended_are_not_half_written(tmp_path):
    """A real file-size limit in the middle of an append: the file is cut back to its previous end (every line still
    whole) and the OSError names it."""
    import resource

    rundir.append_metrics(tmp_path, [{"step": i, "loss": 1.0 / (i + 1)} for i in range(20)])
    before = (tmp_path / rundir.METRICS).read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 100, hard))
    try:
        with pytest.raises(OSError, match="appending to it failed \\(File too large\\); the records before are kept") as e:
            rundir.append_metrics(tmp_path, [{"step": i, "loss": 0.5} for i in range(20, 40)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert e.value.filename == str(tmp_path / rundir.METRICS)
    assert (tmp_path / rundir.METRICS).read_bytes() == before and len(rundir.read_metrics(tmp_path)) == 20


@pytest.mark.parametrize("at, kept", [(15, "the checkpoint of step 10 is kept"), (3, "the checkpoint of step 0 is kept")])
def test_running_out_of_memory_is_one_line_saying_what_the_run_keeps(tmp_path, tiny, monkeypatch, capsys, at, kept):
    real = Solver.step

    def step(c):
        if c.steps_done == at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return real(c)

    monkeypatch.setattr(Solver, "step", step)
    run = tmp_path / "run"
    assert main(["train", *(f"--{k}={v}" for k, v in tiny.items()), "--run-dir", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("icl train: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB); the sizes that "
                          f"drive memory in this run: train.batch_size={tiny['train.batch_size']}, dgp.dim=10, "
                          "encoder.widths=[16]"), err
    assert "train.loss_memory=4096, eval.final_n_fit=128, eval.final_n_test=128: make one smaller, or use fewer " \
           "--workers/--pack; " in err, err
    assert err.endswith(f"{kept} in {run}; continue with: icl train --resume {run}"), err


def test_a_resume_whose_writing_fails_leaves_the_run_unlocked(run, monkeypatch):
    def read_only(run_dir, config):
        raise OSError(errno.EROFS, "Read-only file system", str(run_dir))

    monkeypatch.setattr(rundir, "write_config", read_only)
    with pytest.raises(OSError):
        Trainer.resume(run, progress=False)
    rundir.unlock(rundir.own(run))  # this process could not take it while a failed resume still held it


def test_a_stop_signal_during_an_evaluation_ends_the_run_at_once_and_it_resumes(tmp_path, monkeypatch, capsys):
    from identifiable_cl import protocol
    from tests.tiny import tiny_args

    real = protocol.evaluate

    def minutes_long(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's cancel, in the middle of an evaluation
        time.sleep(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(protocol, "evaluate", minutes_long)
    started = time.monotonic()
    assert main(["train", *tiny_args(), "--run-dir", str(tmp_path / "run"), "--quiet"]) == 130
    assert time.monotonic() - started < 30
    assert "the checkpoint of step 0 is kept" in capsys.readouterr().err
    monkeypatch.setattr(protocol, "evaluate", real)
    assert main(["train", "--resume", str(tmp_path / "run"), "--quiet"]) == 0
    assert rundir.read_json(tmp_path / "run" / rundir.SUMMARY)["steps"] == 20


def test_sigterm_ends_icl_bench_with_its_child_run_and_temporary_folder(tmp_path):
    """``icl bench --only overhead`` trains runs in a temporary folder: SIGTERM to the bench ends it at once, as
    interrupted, with no child left running and no folder left behind."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "WANDB_MODE": "disabled"}
    bench = subprocess.Popen([sys.executable, "-m", "identifiable_cl.cli", "bench", "--only", "overhead", "--quick",
                              "--device", "cpu"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def children() -> list[str]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(temporary) in line and "identifiable_cl" in line:
                found.append(line)
        return found

    deadline = time.monotonic() + 120
    while not children() and time.monotonic() < deadline and bench.poll() is None:
        time.sleep(0.05)
    assert children(), "the bench started no run in its temporary folder"
    bench.send_signal(signal.SIGTERM)
    _, err = bench.communicate(timeout=60)
    assert bench.returncode == 130 and "icl bench: interrupted" in err, err
    time.sleep(0.5)
    assert children() == [] and list(temporary.glob("tmp*")) == []  # (torch keeps its own caches there)
