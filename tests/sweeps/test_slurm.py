"""``icl sweep submit --cluster slurm`` against a real Slurm: what a scheduler's cancel, time-limit warning
and preemption do to a run. ``.ci/slurm start`` runs a one-node cluster on this machine; without one
answering ``sinfo`` these tests skip."""

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from dgp.files import load_tensors
from identifiable_cl.rundir import CHECKPOINT, read_json
from identifiable_cl.sweeps.local import read_status
from identifiable_cl.sweeps.spec import load_sweep
from identifiable_cl.sweeps.submit import make_executor, submit_offline

pytestmark = [pytest.mark.slurm, pytest.mark.integration]

STEPS = 6000
RUN_ARGS = {"train.steps": STEPS, "train.batch_size": 32, "encoder.widths": [16], "dgp.mixing.cond_draws": 100,
            "train.checkpoint_every": 100, "train.eval_every": STEPS, "train.log_every": 100,
            "eval.nonlinear": False, "eval.final_n_fit": 256, "eval.final_n_test": 256}


@pytest.fixture
def slurm():
    """A Slurm cluster that answers, or a skip."""
    try:
        answer = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no Slurm here (start a one-node cluster with .ci/slurm start)")
    if answer.returncode != 0 or not answer.stdout.strip():
        pytest.skip(f"sinfo does not answer: {answer.stderr.strip()}")


def submit(tmp_path: Path, monkeypatch, steps: int = STEPS, timeout_min: int = 10, warn_s: int = 90):
    """One run of ``icl train`` submitted as a job from an environment whose PATH has no ``icl`` (sbatch hands
    the job that environment): the bare ``icl`` of the sweep's command runs as this interpreter. The job's time
    limit is ``timeout_min``, warned ``warn_s`` seconds before."""
    sweep = tmp_path / "one.yaml"
    parameters = {key: {"value": value} for key, value in {**RUN_ARGS, "train.steps": steps, "train.eval_every": steps}.items()}
    sweep.write_text(yaml.safe_dump({"name": "one", "method": "grid", "command": ["icl", "train", "--quiet", "${args}"],
                                     "parameters": {"seed": {"value": 0}, **parameters}}))
    executor = make_executor(tmp_path / "submitit", "slurm", name="icl-test", timeout_min=timeout_min, cpus_per_task=1,
                             warn_s=warn_s)
    with monkeypatch.context() as env:
        env.setenv("PATH", "/usr/bin:/bin")
        env.setenv("WANDB_MODE", "disabled")
        env.setenv("OMP_NUM_THREADS", "1")
        runs, jobs = submit_offline(load_sweep(sweep), tmp_path / "out", executor)
    assert len(runs) == len(jobs) == 1
    return runs[0], jobs[0].job_id


def wait(until, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = until()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def checkpoint_step(run) -> int:
    try:
        return int(load_tensors(run.folder / "run" / CHECKPOINT)["step"])
    except (OSError, ValueError, KeyError, RuntimeError, EOFError):
        return 0


def job_state(job_id: str) -> str:
    """The job's state in squeue (PENDING, RUNNING, ...), '' once Slurm has ended it, or '?' when squeue
    does not answer (a busy controller)."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    if out.returncode != 0:
        return "" if "Invalid job id" in out.stderr else "?"  # the controller forgot it, or is busy
    return out.stdout.strip()


def job_story(tmp_path: Path, job_id: str) -> str:
    """What Slurm and the job's own logs say of a job, for a failure's message."""
    show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    logs = sorted((tmp_path / "submitit").glob(f"{job_id}*/*.out")) + sorted((tmp_path / "submitit").glob(f"{job_id}*/*.err"))
    tails = [f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-25:]) for p in logs]
    ctld = Path("/tmp/icl-slurm/log/slurmctld.log")
    lines = [l for l in ctld.read_text(errors="replace").splitlines() if f"JobId={job_id}" in l] if ctld.exists() else []
    return "\n".join([show.stdout + show.stderr, *tails, "--- slurmctld", *lines[-30:]])


def started(run, job_id: str) -> int:
    """The step of the first checkpoint of the job's current attempt."""
    return wait(lambda: job_state(job_id) == "RUNNING" and checkpoint_step(run), 120, "a checkpoint")


def ended(job_id: str, timeout: float = 180) -> None:
    wait(lambda: job_state(job_id) == "", timeout, f"job {job_id} to end", every=0.5)


def test_a_cancelled_task_ends_interrupted_and_a_resubmission_resumes_it(slurm, tmp_path, monkeypatch):
    run, job_id = submit(tmp_path, monkeypatch)
    reached = started(run, job_id)
    subprocess.run(["scancel", job_id], check=True)
    ended(job_id)
    status = read_status(run.folder)
    assert (status["state"], status["exit_code"]) == ("failed", 130), status
    kept = checkpoint_step(run)
    assert reached <= kept < STEPS
    assert f"interrupted at step" in (run.folder / "stdout.log").read_text()

    again, job_id = submit(tmp_path, monkeypatch)
    assert again.folder == run.folder and again.wandb_id == run.wandb_id
    ended(job_id)
    status = read_status(run.folder)
    assert (status["state"], status["exit_code"], status["resumed_from_step"]) == ("finished", 0, kept), status
    assert read_json(run.folder / "run" / "summary.json")["steps"] == STEPS


@pytest.mark.parametrize("how", ["time-limit warning", "preemption"])
def test_a_warned_or_preempted_task_checkpoints_and_is_requeued_to_finish(slurm, tmp_path, monkeypatch, how):
    run, job_id = submit(tmp_path, monkeypatch)
    started(run, job_id)
    if how == "time-limit warning":  # what Slurm sends before the limit (submitit's --signal=USR2@90)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    else:
        subprocess.run(["scontrol", "requeue", job_id], check=True)
    wait(lambda: (read_status(run.folder) or {}).get("exit_code") == 130, 120, "the run to stop interrupted")
    kept = checkpoint_step(run)
    wait(lambda: job_state(job_id) == "PENDING", 120, "the job to be requeued")
    release(job_id)
    ended(job_id)
    status = read_status(run.folder)
    assert (status["state"], status["exit_code"], status["resumed_from_step"]) == ("finished", 0, kept), status
    assert status["wandb_id"] == run.wandb_id
    assert read_json(run.folder / "run" / "summary.json")["steps"] == STEPS
    assert [p.name for p in run.folder.parent.iterdir() if p.is_dir() and p.name[0] != "."] == [run.folder.name]


def release(job_id: str) -> None:
    """Start a requeued job now. Slurm holds a requeued job for 120 s; started at once, it would get a credential
    of the same second as the revoked one of its first attempt, which slurmd refuses: wait two seconds first."""
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)


@pytest.mark.slow
def test_a_run_longer_than_its_time_limit_finishes_over_several_jobs(slurm, tmp_path, monkeypatch):
    """A real two-minute limit, warned 30 s before (the shortest make_executor allows: Slurm may warn up to a
    minute early, and a warning before the job's Python has started would end it): every attempt checkpoints on
    the warning and is requeued, and the last one finishes the run."""
    steps = 80_000
    run, job_id = submit(tmp_path, monkeypatch, steps=steps, timeout_min=2, warn_s=30)
    deadline = time.monotonic() + 900
    while (state := job_state(job_id)) != "":
        assert time.monotonic() < deadline, "the run did not finish in 15 minutes"
        if state == "PENDING" and (read_status(run.folder) or {}).get("exit_code") is not None:
            release(job_id)  # requeued after a warning
        time.sleep(1)
    status = read_status(run.folder) or {}
    assert (status.get("state"), status.get("exit_code")) == ("finished", 0), f"{status}\n{job_story(tmp_path, job_id)}"
    attempts = status["resumed_from_steps"]
    assert len(attempts) >= 1 and attempts == sorted(attempts), status
    assert status["wandb_id"] == run.wandb_id
    assert read_json(run.folder / "run" / "summary.json")["steps"] == steps
    assert [p.name for p in run.folder.parent.iterdir() if p.is_dir() and p.name[0] != "."] == [run.folder.name]
