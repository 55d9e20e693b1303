"""Every registered loss, over the choices of its options, obeys the loss interface.

Cases are generated from ``LOSSES.names()``, so a new built-in (or plugin) is exercised as
soon as it is registered. A loss whose defaults leave part of it unexercised lists richer
options in ``RICHER``.
"""

from __future__ import annotations

import pytest
import torch

import identifiable_cl.losses  # noqa: F401  (registration)
from dgp.registry import user_options
from identifiable_cl.losses.base import NEGATIVE_SETS, REDUCTIONS, SIMILARITIES, ContrastiveLoss
from identifiable_cl.losses import LOSSES

RICHER = {
    "ensemble": {
        "members": [
            {"name": "infonce", "negatives": "independent"},
            {"name": "aninfonce", "head": [8, 3], "weight": 0.5},
        ]
    }
}
CHOICES = {"similarity": SIMILARITIES, "negatives": NEGATIVE_SETS, "reduction": REDUCTIONS}


def cases() -> list:
    out = []
    for name in LOSSES.names():
        base = {"name": name, **RICHER.get(name, {})}
        out.append(pytest.param(base, id=name))
        options = user_options(LOSSES.get(name), exclude={"dim"})
        for option, choices in CHOICES.items():
            if option in options:
                for choice in choices:
                    spec = {**base, option: choice}
                    out.append(pytest.param(spec, id=f"{name}-{option}={choice}"))
    return out


REFUSED = {("nce", "negatives", "first_view"), ("nwj", "negatives", "first_view"),
           *(("pcl", "negatives", n) for n in NEGATIVE_SETS if n != "independent")}
"""Choices a loss refuses (each says why): the anchor as its own negative is no draw from the noise; PCL's fake
pairs take their past points from the batch rolled by one row or from the DGP's negatives, no other set."""


def labels(loss: ContrastiveLoss, B: int, device: torch.device) -> dict:
    """The segment labels ``u`` (B,) of a loss that reads them (its ``uses_aux``), each segment in turn; else none."""
    return {"u": torch.arange(B, device=device) % loss.segments} if loss.uses_aux else {}


def exercise(spec: dict, device: torch.device) -> None:
    d = 5
    refused = [(spec["name"], k, v) for k, v in spec.items() if isinstance(v, str) and (spec["name"], k, v) in REFUSED]
    if refused:
        with pytest.raises(ValueError, match=rf"^loss\.{refused[0][1]}='{refused[0][2]}' is invalid: "):
            LOSSES.build(spec, key="loss", dim=d)
        return
    loss = LOSSES.build(spec, key="loss", dim=d).to(device)
    assert isinstance(loss, ContrastiveLoss)
    assert isinstance(loss.requires_negatives, bool) and isinstance(loss.needs_unit_norm, bool)
    assert isinstance(loss.uses_aux, bool)
    grouped = [p for g in loss.param_groups() for p in g["params"]]
    assert {id(p) for p in grouped} == {id(p) for p in loss.parameters()}
    assert len(grouped) == len({id(p) for p in grouped})
    g = torch.Generator(device=device).manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        loss = loss.to(dtype)
        for B in (4, 7):
            h = torch.randn(B, d, generator=g, device=device, dtype=dtype)
            hp = h + 0.1 * torch.randn(B, d, generator=g, device=device, dtype=dtype)
            aux = labels(loss, B, device)
            negatives = [None]
            if loss.requires_negatives:
                negatives = [
                    torch.randn(6, d, generator=g, device=device, dtype=dtype),
                    torch.randn(B, 3, d, generator=g, device=device, dtype=dtype),
                ]
            for hn in negatives:
                inputs = [x.requires_grad_() for x in (h, hp, hn) if x is not None]
                value = loss(h, hp, hn, **aux)
                assert value.dim() == 0 and value.dtype == dtype
                assert value.device.type == device.type and torch.isfinite(value)
                loss.zero_grad()
                value.backward()
                for x in inputs:
                    assert x.grad is not None and torch.isfinite(x.grad).all()
                    x.grad = None
                for p in loss.parameters():
                    assert p.grad is not None and torch.isfinite(p.grad).all()
    logs = loss.logs()
    assert all(isinstance(k, str) for k in logs)
    for value in logs.values():
        assert isinstance(value, float) or all(isinstance(x, float) for x in value)
    twin = LOSSES.build(spec, key="loss", dim=d).to(device=device, dtype=torch.float64)
    twin.load_state_dict(loss.state_dict())
    hn = negatives[0].detach() if loss.requires_negatives else None
    torch.testing.assert_close(twin(h.detach(), hp.detach(), hn, **aux), loss(h.detach(), hp.detach(), hn, **aux))


@pytest.mark.parametrize("spec", cases())
def test_registered_loss(spec):
    exercise(spec, torch.device("cpu"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("spec", cases())
def test_registered_loss_on_cuda(spec):
    exercise(spec, torch.device("cuda"))


def test_every_builtin_is_registered():
    assert {"infonce", "aninfonce", "hard_negative", "ensemble", "nce", "nwj", "margin", "triplet", "scl"} <= set(
        LOSSES.names())
    for entry in LOSSES:
        if entry.obj.__module__.startswith("identifiable_cl.losses"):
            doc = entry.obj.__doc__ or ""
            assert " = " in doc and len(doc) > 200, f"{entry.name}: state the equation"
            assert "dim" in user_options(entry.obj)
