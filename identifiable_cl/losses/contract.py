"""What the project reads from a loss, in one place: the contract every loss meets, built in or a plugin.

A loss is a ``torch.nn.Module`` built as ``cls(*, dim, **options)`` whose ``forward(h, h_pos, h_neg=None)`` returns a
scalar (``h``, ``h_pos`` (B, d); ``h_neg`` None, (M, d) or (B, K, d)). Beside ``forward`` the project reads only the
attributes of :data:`DECLARED`, each optional with the default given there, and reads them through :func:`traits`,
which checks them when the loss is built (:func:`identifiable_cl.components.models`): a loss that declares
something it cannot be is refused then, in one line naming the loss and the attribute, never later with an
``AttributeError`` from inside a step. :class:`identifiable_cl.losses.base.ContrastiveLoss` declares every default. Two of a loss's options are filled by
name from the process it meets where a config leaves them out (:func:`identifiable_cl.rules.with_cross_defaults`):
``negatives`` (``independent`` where the process draws separate negatives) and ``segments`` (the marginal's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn


BOUND_KEYS = ("mi_infonce_bound", "mi_nwj_bound")
"""The metric keys of an encoder's bound on I(z; z+), by the loss's form (a loss's ``mi_bound_key``)."""


@dataclass(frozen=True)
class Traits:
    """A loss's declared attributes (:data:`DECLARED`), checked."""

    requires_negatives: bool = False
    needs_unit_norm: bool = False
    uses_aux: bool = False
    segments: int | None = None
    queue: Any = None
    lr: float | None = None
    batches_over_runs: bool = False
    mi_bound: Callable[[float, int, int | None], tuple[int, float] | None] | None = None
    mi_bound_key: str | None = None
    logs: Callable[[], dict[str, Any]] | None = None
    param_groups: Callable[[], list[dict[str, Any]]] | None = None
    predictions: tuple[Any, ...] = ()


DECLARED: dict[str, str] = {
    "requires_negatives": "bool: forward uses the DGP's separate negatives h_neg (a process must draw them)",
    "needs_unit_norm": "bool: forward compares unit vectors (the encoder then normalises its outputs)",
    "uses_aux": "bool: forward also takes u=, each anchor's (B,) int64 segment label (dgp.Batch.u)",
    "segments": "int >= 2: the segments a loss with uses_aux tells apart (checked against the process's)",
    "queue": "MoCo's QueueOptions (identifiable_cl.losses.queue) of a loss with negatives: queue, else None",
    "lr": "float > 0 or None: the learning rate of the loss's own parameters (None: optim.loss_lr)",
    "batches_over_runs": "bool: forward runs under torch.func.vmap over a run axis (packs of runs alike)",
    "mi_bound": "mi_bound(value, batch, separate) -> (K, bound) or None: the bound on I(z; z+) a value gives",
    "mi_bound_key": "str: the metric key of that bound (identifiable_cl.evaluation.information.BOUND_KEYS)",
    "logs": "logs() -> {name: float or list}: values worth logging (a learnt temperature, Λ̂)",
    "param_groups": "param_groups() -> [{'params': [...], 'lr': float or None}]: optimizer groups of its parameters",
    "predictions": "a tuple of identifiable_cl.predictions.Prediction: what theory predicts for it, per process family",
}
"""Every attribute the project reads from a loss, with its type and meaning (docs/plugins.md lists the same)."""


def declared_predictions(cls: Any) -> tuple[Any, ...]:
    """The predictions a loss class declares (its ``predictions``, read before any loss is built: the atlas makes
    its cells from them); a ValueError naming the class unless a tuple of
    :class:`identifiable_cl.predictions.Prediction`."""
    from identifiable_cl.predictions import Prediction

    found = getattr(cls, "predictions", None)
    found = () if found is None else found
    if not isinstance(found, tuple) or not all(isinstance(p, Prediction) for p in found):
        raise ValueError(f"loss {getattr(cls, '__name__', cls)!r}: predictions={found!r} is invalid: expected "
                         f"{DECLARED['predictions']}")
    return found


def traits(loss: nn.Module, name: str | None = None) -> Traits:
    """``loss``'s declared attributes, checked; a ValueError naming the loss (``name``: its registered name) and the
    attribute otherwise."""
    who = f"loss {name or type(loss).__name__!r}"

    def fail(attribute: str, value: Any) -> None:
        raise ValueError(f"{who}: {attribute}={value!r} is invalid: expected {DECLARED[attribute]}")

    found = {attribute: getattr(loss, attribute, None) for attribute in DECLARED}
    for flag in ("requires_negatives", "needs_unit_norm", "uses_aux", "batches_over_runs"):
        found[flag] = False if found[flag] is None else found[flag]
        if not isinstance(found[flag], bool):
            fail(flag, found[flag])
    segments = found["segments"]
    if found["uses_aux"] and (isinstance(segments, bool) or not isinstance(segments, int) or segments < 2):
        raise ValueError(f"{who} declares uses_aux (it reads each anchor's segment u), and a loss that does must say "
                         f"how many segments it tells apart: segments={segments!r}; expected {DECLARED['segments']}")
    lr = found["lr"]
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0):
        fail("lr", lr)
    try:
        found["predictions"] = declared_predictions(loss)
    except ValueError:
        fail("predictions", found["predictions"])
    for method in ("mi_bound", "logs", "param_groups"):
        if found[method] is not None and not callable(found[method]):
            fail(method, found[method])
    if found["mi_bound"] is not None and found["mi_bound_key"] not in BOUND_KEYS:
        raise ValueError(f"{who} has mi_bound, and mi_bound_key={found['mi_bound_key']!r} is not a bound's metric "
                         f"key: allowed: {', '.join(BOUND_KEYS)}")
    return Traits(**found)
