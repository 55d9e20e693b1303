"""The plugin example of docs/plugins.md, built as a separate distribution and used by name through entry points."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_files() -> dict[str, str]:
    """Code blocks of docs/plugins.md whose first line is '# <path>'."""
    section = (ROOT / "docs" / "plugins.md").read_text()
    files = {}
    for body in re.findall(r"```\w+\n(.*?)```", section, flags=re.S):
        first, _, rest = body.partition("\n")
        if first.startswith("# icl-align/"):
            files[first[2:].strip()] = rest
    return files


@pytest.mark.integration
def test_readme_plugin_builds_and_trains(tmp_path):
    files = readme_files()
    assert set(files) == {"icl-align/pyproject.toml", "icl-align/icl_align/__init__.py"}
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(tmp_path / "icl-align")],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), WANDB_MODE="disabled")
    icl = [sys.executable, "-m", "identifiable_cl.cli"]
    plugins = subprocess.run(icl + ["plugins"], env=env, capture_output=True, text=True, check=True).stdout
    for name, target in (("torus", "Torus"), ("kumaraswamy", "Kumaraswamy"), ("jitter", "Jitter"),
                         ("opposite", "Opposite"), ("rotated_tanh", "RotatedTanh"), ("halves", "Halves"),
                         ("linear", "LinearEncoder"),
                         ("align_uniform", "AlignUniform"), ("r2_reverse", "ReverseR2")):
        assert re.search(rf"{name}\s+entry point icl_align:{target} \(icl-align 0.1.0\)", plugins), name
    assert re.search(r"t = 2\.0\s+uniformity temperature t > 0", plugins)  # the declared option docs
    small = ["--quiet", "--train.steps=5", "--train.batch_size=32", "--eval.final_n_fit=256", "--eval.final_n_test=256",
             "--eval.nonlinear=False"]
    mlp = ["--encoder.widths=[16]", "--dgp.mixing.cond_draws=100"]
    every_kind = {
        "sphere": ["sphere", "--loss.name=align_uniform", "--dgp.conditional.name=jitter", "--dgp.conditional.sigma=0.1",
                   *mlp],
        "torus": ["--dgp.space.name=torus", "--dgp.marginal.name=kumaraswamy", "--dgp.conditional.name=jitter",
                  "--dgp.mixing.name=rotated_tanh", "--encoder.name=linear", "--encoder.sphere=True",
                  "--loss.name=align_uniform"],
        "negatives": ["--dgp.space.name=torus", "--dgp.marginal.name=kumaraswamy", "--dgp.conditional.name=jitter",
                      "--dgp.negatives.name=opposite", "--loss.negatives=independent", *mlp],
        "views": ["sphere", "--dgp.views.name=halves", "--dgp.views.overlap=2", *mlp],
    }
    for label, args in every_kind.items():
        run_dir = tmp_path / label
        result = subprocess.run(icl + ["train", *args, *small, "--run-dir", str(run_dir)], env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, (label, result.stderr)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["steps"] == 5 and -1.0 <= summary["r2_linear"] <= 1.0
        assert -1.0 <= summary["r2_reverse"] <= 1.0 and -1.0 <= summary["identity_r2_reverse"] <= 1.0
        assert "reverse R²" in result.stdout  # a headline metric: a row of the printed table
        if label == "views":  # each view's encoding scored; the views see 7 of the 10 coordinates each
            assert -1.0 <= summary["view2_r2_linear"] <= 1.0 and -1.0 <= summary["view2_r2_reverse"] <= 1.0
            config = (run_dir / "config.yaml").read_text()
            assert "halves" in config and "overlap: 2" in config
    bad = subprocess.run(icl + ["train", "--run-dir", str(tmp_path / "bad"), "--loss.name=align_uniform", "--loss.tt=2"],
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "loss.tt" in bad.stderr
    for option, message in (("--loss.t=0", "loss.t=0 is invalid: must be > 0"),
                            ("--dgp.conditional.sigma=-1", "dgp.conditional.sigma=-1 is invalid: must be > 0")):
        bad = subprocess.run(icl + ["train", "--run-dir", str(tmp_path / "bad"), *every_kind["sphere"], option],
                             env=env, capture_output=True, text=True)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
    # a saved run that needs a plugin which is no longer installed
    gone = subprocess.run(icl + ["evaluate", str(tmp_path / "torus")], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)))
    assert gone.returncode == 2 and "a plugin that provides it may be missing" in gone.stderr
