"""The wheel carries experiments/ and sweeps/, an installed (non-editable) copy finds and runs them, and the
``icl reproduce --list`` / ``icl sweep list|copy`` commands that show them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from identifiable_cl.cli import main
from identifiable_cl.cli.sweep import sweep_file
from identifiable_cl.packaged import SWEEPS_DIR
from identifiable_cl.reproduce.experiment import EXPERIMENTS_DIR

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "dgp", "identifiable_cl", "experiments", "sweeps")
"""What the build reads from the source tree."""
CHEAPEST = "ensembles"
"""The experiment with the fewest runs (3), run at tiny scale from the installed copy."""


def experiment_folders() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "experiments").glob("*/experiment.yaml"))


def sweep_files() -> list[Path]:
    return sorted((ROOT / "sweeps").glob("*.yaml"))


def source_files(folder: str) -> list[Path]:
    """The files of a source folder that belong in the wheel (no caches, no hidden files)."""
    base = ROOT / folder
    return sorted(
        p for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not any(part.startswith(".") for part in p.relative_to(base).parts)
        and p.suffix != ".pyc"
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built without network from a clean copy of the sources (so no stale build/ folder leaks in)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=skip)
        else:
            shutil.copy2(ROOT / name, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "-w", str(tmp / "dist")],
        capture_output=True, text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = (tmp / "dist").glob("*.whl")
    return path


def test_the_wheel_carries_every_experiment_sweep_and_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = [f"identifiable_cl/experiments/{p.relative_to(ROOT / 'experiments').as_posix()}"
                for p in source_files("experiments")]
    expected += [f"identifiable_cl/sweep_files/{p.name}" for p in sweep_files()]
    assert len(expected) > len(experiment_folders()) * 2
    assert all(f"identifiable_cl/experiments/{name}/experiment.yaml" in expected for name in experiment_folders())
    # the package list of pyproject.toml is written out: a new subpackage must not be left behind
    expected += [p.relative_to(ROOT).as_posix() for folder in ("dgp", "identifiable_cl") for p in source_files(folder)]
    assert sorted(set(expected) - names) == []
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "icl = identifiable_cl.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.slow
def test_an_installed_wheel_lists_and_runs_the_packaged_experiments(wheel, tmp_path):
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", "--target", str(site), str(wheel)],
        capture_output=True, text=True,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    work = tmp_path / "work"  # outside the source tree: nothing there can shadow the installed copy
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), HOME=str(tmp_path), WANDB_MODE="disabled", OMP_NUM_THREADS="1")

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True, text=True)

    where = python("-c", "import identifiable_cl, identifiable_cl.packaged as e; "
                         "print(identifiable_cl.__file__); print(e.EXPERIMENTS_DIR); print(e.SWEEPS_DIR)")
    assert where.returncode == 0, where.stderr
    package, experiments, sweeps = map(Path, where.stdout.split())
    assert package == site / "identifiable_cl" / "__init__.py"
    assert experiments == site / "identifiable_cl" / "experiments"
    assert sweeps == site / "identifiable_cl" / "sweep_files"

    listed = python("-m", "identifiable_cl.cli", "reproduce", "--list")
    assert listed.returncode == 0, listed.stderr
    assert {line.split()[0] for line in listed.stdout.splitlines()} == set(experiment_folders())
    listed = python("-m", "identifiable_cl.cli", "sweep", "list")
    assert listed.returncode == 0, listed.stderr
    assert {line.split()[0] for line in listed.stdout.splitlines()} == {p.stem for p in sweep_files()}

    out = tmp_path / "out"
    ran = python("-m", "identifiable_cl.cli", "reproduce", CHEAPEST, "--scale", "tiny", "--workers", "2", "--out", str(out))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (out / "results.md").is_file() and json.loads((out / "results.json").read_text())["scale"] == "tiny"
    metas = sorted(out.glob("sweeps/*/*/run/meta.json"))
    assert len(metas) == 3
    assert all(Path(json.loads(m.read_text())["command"][0]).is_relative_to(site) for m in metas)  # runs used it too


def test_the_source_tree_is_where_the_data_is_found_here():
    assert EXPERIMENTS_DIR.resolve() == (ROOT / "experiments").resolve()
    assert SWEEPS_DIR.resolve() == (ROOT / "sweeps").resolve()


def test_reproduce_list_prints_every_experiment_with_its_title(capsys):
    assert main(["reproduce", "--list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert sorted(lines) == experiment_folders()
    for name in experiment_folders():
        title = yaml.safe_load((ROOT / "experiments" / name / "experiment.yaml").read_text())["title"]
        assert lines[name].split(None, 1)[1] == title


def test_reproduce_needs_a_name_without_list(capsys):
    assert main(["reproduce"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("icl reproduce: error:") and "--list" in err and "zimmermann2021" in err


def test_sweep_list_prints_every_packaged_sweep_with_its_method(capsys):
    assert main(["sweep", "list"]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert sorted(lines) == [p.stem for p in sweep_files()]
    for path in sweep_files():
        raw = yaml.safe_load(path.read_text())
        assert lines[path.stem][1] == raw["method"]
        assert " ".join(lines[path.stem][2:]) == " ".join(raw["description"].split())


def test_sweep_copy_copies_and_never_overwrites(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "copy", "z21"]) == 0
    assert (tmp_path / "z21.yaml").read_bytes() == (ROOT / "sweeps" / "z21.yaml").read_bytes()
    (tmp_path / "z21.yaml").write_text("# mine\n")
    assert main(["sweep", "copy", "z21", "."]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "z21.yaml").read_text() == "# mine\n"
    assert main(["sweep", "copy", "smoke.yaml", "sub/mine.yaml"]) == 0
    assert main(["sweep", "copy", "smoke", "folder"]) == 0
    smoke = (ROOT / "sweeps" / "smoke.yaml").read_bytes()
    assert (tmp_path / "sub" / "mine.yaml").read_bytes() == smoke == (tmp_path / "folder" / "smoke.yaml").read_bytes()


def test_sweep_copy_of_an_unknown_name_lists_the_packaged_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "copy", "no_such_sweep"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("icl sweep: error:") and "no_such_sweep" in err and "z21" in err and "smoke" in err
    assert list(tmp_path.iterdir()) == []


def test_sweep_commands_take_a_packaged_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "check", "smoke", "r24_bayes.yaml", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "smoke: ok, method grid, 4 runs" in out and "r24_bayes.yaml: ok, method bayes" in out
    assert main(["sweep", "run", "smoke", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert main(["sweep", "check", "no_such_sweep"]) == 1
    assert "not a packaged sweep" in capsys.readouterr().err
    (tmp_path / "z21").write_text("a local file wins over the packaged name\n")
    assert sweep_file("z21") == Path("z21")
    assert sweep_file("r24") == SWEEPS_DIR / "r24.yaml"
