import os
import shutil

import pytest
import torch

if not torch.cuda.is_available():  # Triton's kernels run in its interpreter (identifiable_cl.losses.fused)
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    """The suite tests this package's own components whatever else is installed: a registry loads the entry points
    of installed plugins only when a test forces it (``load_entry_points(force=True)``, as tests/test_registry.py
    does; tests/test_plugin_package.py installs its plugin and runs ``icl`` in subprocesses)."""
    from dgp.registry import Registry

    loading = Registry.load_entry_points

    def forced_only(self, force: bool = False) -> None:
        if force:
            loading(self, force=True)
        else:
            self._entry_points_loaded = True

    Registry.load_entry_points = forced_only


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path_factory):
    """No test talks to W&B's servers or writes into the source tree's wandb/ folder."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path_factory.mktemp("wandb")))
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def evaluation_calls(monkeypatch):
    """``record(*keys)``: from then on, every call of ``evaluate`` and ``identity_baseline`` in a run's evaluation
    protocol (:mod:`identifiable_cl.protocol`) appends ``(function name, kwargs[key] for each key)`` to the
    returned list, and still runs."""
    from identifiable_cl import protocol as training

    def record(*keys):
        seen = []

        def recording(real):
            def wrapped(*args, **kwargs):
                seen.append((real.__name__, *(kwargs[k] for k in keys)))
                return real(*args, **kwargs)

            return wrapped

        for name in ("evaluate", "identity_baseline"):
            monkeypatch.setattr(training, name, recording(getattr(training, name)))
        return seen

    return record


@pytest.fixture(scope="session")
def tiny():
    """The tests' tiny preset (:data:`tests.tiny.TINY`): overrides that make a run take about a second."""
    from tests.tiny import TINY

    return dict(TINY)


@pytest.fixture(scope="session")
def finished(tmp_path_factory, tiny):
    """A finished tiny run (trained once per session; copy it with the ``run`` fixture before changing it)."""
    from identifiable_cl.components import load_config
    from identifiable_cl.training import Trainer

    run = tmp_path_factory.mktemp("finished") / "run"
    Trainer.create(load_config(None, tiny), run, progress=False).run()
    return run


@pytest.fixture
def run(finished, tmp_path):
    """A private copy of :func:`finished`."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


@pytest.fixture
def interrupt_at(monkeypatch):
    """``interrupt_at(step)``: from then on, a run's step raises KeyboardInterrupt (as Ctrl-C does) when the
    run stands at ``step``; ``interrupt_at(None)`` gives training its real step back."""
    from identifiable_cl.solvers import Solver

    real = Solver.step

    def at(step):
        def interrupted(c):
            if c.steps_done == step:
                raise KeyboardInterrupt
            return real(c)

        monkeypatch.setattr(Solver, "step", real if step is None else interrupted)

    return at


def engine_or_skip():
    """W&B's sweep engine, or a skip when it is missing (a folder named sweeps/ without it does not count)."""
    from identifiable_cl.sweeps.engine import engine

    try:
        return engine()
    except ValueError as exc:
        pytest.skip(str(exc))

