"""A steady-state training step makes no host synchronisation (what would make a GPU wait) and uploads nothing from
the host (what a step recorded as a CUDA graph cannot hold), counted on the CPU with the eager loss kernels a GPU
runs (:mod:`identifiable_cl.benchmarks.syncs`)."""

import pytest
import torch

from identifiable_cl.benchmarks.syncs import host_syncs, host_uploads
from identifiable_cl.components import build
from tests.tiny import tiny_config

SPHERE = {"dgp.space.name": "sphere", "dgp.conditional.name": "vmf", "encoder.normalize": "sphere"}
R24 = {"dgp.space.name": "sphere", "dgp.conditional.name": "anisotropic", "dgp.conditional.lambdas": "bimodal",
       "loss.name": "aninfonce", "encoder.normalize": "sphere"}
SETTINGS = {
    "default (box, Laplace, L1 InfoNCE)": {},
    "box, truncated normal, L2 InfoNCE": {"dgp.conditional.name": "normal", "loss.similarity": "l2"},
    "content-style with separate negatives": {
        "dgp.space.name": "euclidean", "dgp.marginal.name": "content_style", "dgp.marginal.content_dim": 5,
        "dgp.conditional.name": "content_style", "dgp.conditional.content_dim": 5, "dgp.negatives.name": "marginal"},
    "R24 anisotropic, AnInfoNCE": R24,
    **{f"loss {name}": {"loss.name": name} for name in ("nce", "nwj", "margin", "triplet", "scl", "hard_negative",
                                                        "ensemble")},
    "MoCo's queue": {"loss.negatives": "queue", "loss.queue.size": 64},
    "loss pcl on AR(1) sources": {"loss.name": "pcl", "dgp.space.name": "euclidean", "dgp.marginal.name": "ar1",
                                  "dgp.conditional.name": "ar1"},
    **{f"loss {name} on segment-modulated sources": {
        "loss.name": name, "dgp.space.name": "euclidean", "dgp.marginal.name": "segments",
        "dgp.conditional.name": "same_segment"} for name in ("tcl", "gcl")},
    "bf16 with gradient clipping": {"train.precision": "bf16", "optim.grad_clip": 1.0},
    "sphere, vMF (Wood's sampler in blocks)": SPHERE,
    "sphere, vMF, tilted hard negatives": {**SPHERE, "dgp.negatives.name": "tilted"},
    "box, truncated generalized normal conditional": {"dgp.conditional.name": "gennorm"},
    "box, truncated generalized normal marginal, p < 1": {"dgp.marginal.name": "gennorm", "dgp.marginal.p": 0.5},
    "R24 anisotropic with the shell": {**R24, "dgp.conditional.shell": 0.1},
    **{f"triplet, {mining} mining": {"loss.name": "triplet", "loss.mining": mining} for mining in ("hardest",
                                                                                                  "semihard")},
}
"""Settings whose steady-state step is free of host synchronisations: every one the package has (the rejection
samplers draw in fixed blocks, :mod:`dgp.blocks`)."""


@pytest.fixture
def eager(monkeypatch):
    monkeypatch.setenv("ICL_KERNELS", "eager")


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_steady_state_step_makes_no_host_synchronisation_and_no_upload(setting, eager):
    c = build(tiny_config(**{"train.batch_size": 64, **SETTINGS[setting]}))
    for _ in range(3):  # past the first steps (lazy state, the queue filling)
        c.step()
    assert host_syncs(c.step) == {}
    assert host_uploads(c.step) == {}


def test_the_upload_counter_sees_tensors_made_from_host_data_not_numbers_passed_along():
    from dgp.truncation import float64_on

    x = torch.ones(3)
    assert host_uploads(lambda: torch.tensor([2.0])) == {}  # this test is not the package's code
    assert host_uploads(lambda: float64_on(2.0, x)) == {}  # filled on the device
    uploaded = host_uploads(lambda: float64_on([1.0, 2.0, 3.0], x))
    assert list(uploaded) and all(k.startswith("truncation.py:") and "lift_fresh" in k for k in uploaded)


def test_the_counter_sees_scalar_reads_and_data_dependent_shapes_of_our_own_code_only():
    from dgp import truncation

    x = torch.tensor([1.0, -1.0])
    assert sum(host_syncs(lambda: float(x.sum())).values()) == 0  # this test is not the package's code
    checked = host_syncs(lambda: truncation.truncated_normal(x, 1.0, -2.0, 2.0, torch.Generator().manual_seed(0)))
    assert checked and all(k.startswith("truncation.py:") for k in checked)
    unchecked = host_syncs(lambda: truncation.truncated_normal(x, 1.0, -2.0, 2.0, torch.Generator().manual_seed(0),
                                                               check=False))
    assert unchecked == {}
    masked = host_syncs(lambda: truncation._rejection(x, x > 0, lambda idx: (x[idx], x[idx] < 2)))
    assert any("nonzero" in k or "index" in k for k in masked)


@pytest.mark.parametrize("setting", ["default (box, Laplace, L1 InfoNCE)", "R24 anisotropic, AnInfoNCE",
                                     "loss hard_negative", "sphere, vMF (Wood's sampler in blocks)"])
def test_the_fused_loss_operations_add_no_synchronisation_alone_or_in_a_pack(setting, monkeypatch):
    """The InfoNCE family's fused operations (the choice on a GPU with Triton), for one run and for a pack of three
    whose losses compute as one call along the run axis."""
    from identifiable_cl.solvers.packed import StackedPack

    monkeypatch.setenv("ICL_KERNELS", "fused")
    configs = [tiny_config(**{"train.batch_size": 64, "seed": seed, **SETTINGS[setting]}) for seed in range(3)]
    c = build(configs[0])
    for _ in range(3):
        c.step()
    assert host_syncs(c.step) == {} and host_uploads(c.step) == {}
    pack = StackedPack([build(config) for config in configs])
    assert pack.loss_axis
    for _ in range(3):
        pack.step()
    assert host_syncs(pack.step) == {} and host_uploads(pack.step) == {}
