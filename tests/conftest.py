import pytest
import torch


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
