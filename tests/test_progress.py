"""Progress where cluster users look: one line per log step off a terminal, and W&B quiet unless asked."""

import os
import re
import subprocess
import sys
from pathlib import Path

from identifiable_cl.progress import format_seconds, progress_line
from tests.tiny import tiny_args

ARGS = tiny_args(**{"train.steps": 30, "train.eval_every": 20})
LINE = re.compile(r"step +(\d+)/30  loss \d+\.\d{4}(  r2 -?\d\.\d{3}  mcc -?\d\.\d{3})?  \d+\.\d steps/s  eta \d+ s")


def test_progress_line_formatting():
    assert progress_line(1500, 3000, 1.23451, {"r2_linear": 0.9123, "mcc_pearson": 0.9337}, 41.2) == (
        "step 1500/3000  loss 1.2345  r2 0.912  mcc 0.934  41.2 steps/s  eta 36 s"
    )
    assert progress_line(50, 3000, 2.5, None, 10.0) == "step   50/3000  loss 2.5000  10.0 steps/s  eta 4 min 55 s"
    assert progress_line(50, 3000, 2.5, {}, None) == "step   50/3000  loss 2.5000"
    assert progress_line(3000, 3000, 0.5, {"r2_linear": 1.0, "mcc_pearson": -0.25}, 0.5) == (
        "step 3000/3000  loss 0.5000  r2 1.000  mcc -0.250  0.5 steps/s  eta 0 s"
    )
    assert progress_line(1, 10, float("nan"), None, 0.0) == "step  1/10  loss nan"


def test_durations():
    assert [format_seconds(s) for s in (0, 36.4, 59.6, 61, 3599, 3600, 7620, -3)] == [
        "0 s", "36 s", "1 min 00 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 07 min", "0 s"
    ]


def train(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """``icl train`` of a tiny run with stdout and stderr piped (not a terminal), W&B offline and not silenced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") or k == "WANDB_DIR"}
    env.setdefault("ICL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "identifiable_cl"))
    env.update(WANDB_MODE="offline", HOME=str(tmp_path / "home"), NETRC=str(tmp_path / "home" / ".netrc"))
    return subprocess.run(
        [sys.executable, "-m", "identifiable_cl.cli", "train", "--run-dir", str(tmp_path / "run"), *ARGS, *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )


def test_off_a_terminal_progress_is_lines_and_wandb_is_silent(tmp_path):
    out = train(tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert [LINE.fullmatch(line) is not None for line in lines] == [True] * 3, lines
    assert [int(LINE.fullmatch(line).group(1)) for line in lines] == [10, 20, 30]
    assert "r2 " not in lines[0] and "r2 " in lines[1] and "mcc " in lines[2], "R²/MCC once an evaluation exists"
    assert "it/s" not in out.stderr and "\r" not in out.stderr + out.stdout and "train:" not in out.stderr
    assert "wandb:" not in out.stdout + out.stderr
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "W&B still logged the run"


def test_quiet_prints_no_progress_and_verbose_wandb_its_own_lines(tmp_path):
    out = train(tmp_path, "--quiet", "--wandb.verbose=True")
    assert out.returncode == 0, out.stderr
    assert not [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert "it/s" not in out.stderr and "linear R²" in out.stdout
    assert "wandb:" in out.stdout + out.stderr


def test_a_terminal_that_reports_no_width_gets_lines(monkeypatch):
    from identifiable_cl import progress as training

    class Terminal:
        def isatty(self):
            return True

        def fileno(self):
            return 2

    monkeypatch.setattr(training.os, "get_terminal_size", lambda fd: os.terminal_size((80, 24)))
    assert training.bar_fits(Terminal())
    monkeypatch.setattr(training.os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert not training.bar_fits(Terminal())
    monkeypatch.setattr(training.sys, "stderr", Terminal())
    assert training.Progress(None, 10, 0).lines
    assert not training.bar_fits(object()) and not training.bar_fits(open(os.devnull, "w"))
