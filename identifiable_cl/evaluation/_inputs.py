"""Conversion and validation of metric inputs.

Every metric takes arrays of shape (N, dims) as torch tensors or anything ``torch.as_tensor``
accepts (numpy arrays, nested lists) and computes in float64 on the device of the representation.
Bad input raises a ValueError that names the argument, what is wrong and what is allowed.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor


def device_of(*arrays: Any) -> torch.device:
    """The device of the first torch tensor among ``arrays`` (CPU when none is a tensor)."""
    for a in arrays:
        if isinstance(a, Tensor):
            return a.device
    return torch.device("cpu")


def _finite(name: str, t: Tensor) -> Tensor:
    """``t`` itself, once it is known to hold no NaN or infinite entry."""
    if bad := int((~torch.isfinite(t)).sum()):
        raise ValueError(f"{name} contains {bad} NaN or infinite entries: all entries must be finite")
    return t


def matrix(name: str, x: Any, device: torch.device) -> Tensor:
    """``x`` as a finite float64 tensor of shape (N, dims) on ``device``."""
    if x is None:
        raise ValueError(f"{name} is missing: expected an array of shape (samples, dims)")
    t = x if isinstance(x, Tensor) else torch.as_tensor(x)
    if t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} has dtype {t.dtype}: expected real numbers")
    if t.dim() != 2:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: expected a 2-D array (samples, dims)")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: expected at least one sample and one dimension")
    return _finite(name, t.detach().to(device=device, dtype=torch.float64))


def vector(name: str, x: Any, device: torch.device) -> Tensor:
    """``x`` as a finite float64 tensor of shape (k,) on ``device``."""
    t = x if isinstance(x, Tensor) else torch.as_tensor(x)
    if t.dim() != 1 or t.shape[0] == 0:
        raise ValueError(f"{name} has shape {tuple(t.shape)}: expected a non-empty 1-D array")
    return _finite(name, t.detach().to(device=device, dtype=torch.float64))


def paired(z_name: str, z: Tensor, h_name: str, h: Tensor) -> None:
    """Latents and representation must hold the same samples."""
    if z.shape[0] != h.shape[0]:
        raise ValueError(
            f"{z_name} has {z.shape[0]} samples but {h_name} has {h.shape[0]}: "
            "they must be paired row by row"
        )


def same_dims(fit_name: str, fit: Tensor, test_name: str, test: Tensor) -> None:
    if fit.shape[1] != test.shape[1]:
        raise ValueError(
            f"{test_name} has {test.shape[1]} dimensions but {fit_name} has {fit.shape[1]}: they must match"
        )


def enough_samples(name: str, x: Tensor, minimum: int, reason: str) -> None:
    if x.shape[0] < minimum:
        raise ValueError(f"{name} has {x.shape[0]} samples: at least {minimum} are needed ({reason})")


def varying(name: str, x: Tensor) -> None:
    """Every column of ``x`` must take at least two values (a constant true latent has no R² or correlation)."""
    constant = (x == x[:1]).all(dim=0)
    if bool(constant.any()):
        dims = constant.nonzero().flatten().tolist()
        raise ValueError(f"{name} is constant in dimension(s) {dims}: every true latent must vary across samples")


def partition(name: str, groups: Sequence[Sequence[int]] | Mapping[str, Sequence[int]], dim: int) -> list[list[int]]:
    """Check that ``groups`` (a list of index lists, or a dict name -> index list) partitions range(dim)."""
    items = list(groups.items()) if isinstance(groups, Mapping) else list(enumerate(groups))
    seen: dict[int, Any] = {}
    out = []
    for label, members in items:
        members = list(members)
        if not members:
            raise ValueError(f"{name}[{label!r}] is empty: every block must contain at least one latent dimension")
        for raw in members:
            try:
                i = operator.index(raw)
            except TypeError:
                i = None
            if i is None or isinstance(raw, bool):
                raise ValueError(f"{name}[{label!r}] contains {raw!r}: expected integer latent indices")
            if not 0 <= i < dim:
                raise ValueError(f"{name}[{label!r}] contains {i}: latent indices must lie in [0, {dim - 1}]")
            if i in seen:
                raise ValueError(
                    f"{name}: latent dimension {i} appears in both {seen[i]!r} and {label!r}; "
                    "the blocks must partition the latent dimensions"
                )
            seen[i] = label
        out.append([operator.index(i) for i in members])
    missing = sorted(set(range(dim)) - set(seen))
    if missing:
        raise ValueError(
            f"{name} leaves latent dimension(s) {missing} out: the blocks must partition all {dim} dimensions"
        )
    return out


def standardise(x: Tensor, mean: Tensor | None = None, scale: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Centre and scale the columns of ``x`` (N, d) with the given or else its own statistics.

    With its own statistics, a constant column gets mean = its value and scale 1, so it becomes
    identically zero instead of NaN. Returns (standardised x, mean (d,), scale (d,)).
    """
    if mean is not None and scale is not None:
        return (x - mean) / scale, mean, scale
    mean = x.mean(dim=0)
    scale = x.std(dim=0, correction=0)
    constant = (x == x[:1]).all(dim=0) | (scale == 0)
    scale = torch.where(constant, torch.ones_like(scale), scale)
    mean = torch.where(constant, x[0], mean)
    return (x - mean) / scale, mean, scale
