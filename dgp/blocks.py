"""Rejection sampling in blocks of fixed size, so that a GPU never waits for the host.

A rejection sampler draws proposals until one is accepted; with a host loop over rounds and boolean
indexing of the pending rows, every round makes the host wait for the device. Here every call runs a plan
fixed before it starts (:func:`plan`, from the number of rows and a lower bound ``a`` on the acceptance
rate of each proposal):

- round 0 gives every row one proposal;
- each later round s gives one proposal to the first C_s rows still pending, in row order, gathered by a
  cumulative sum over the pending mask (slot k serves the row where the count of pending rows reaches k + 1);
  pending rows beyond C_s wait for the next round;
- a final block gives the first C rows still pending m proposals each and keeps each row's first accepted
  one (an argmax over the acceptance mask).

Every row's value is its first accepted proposal of a sequence of i.i.d. proposals, so it is an exact draw
from the target law, and rows stay independent (which rows a round serves depends only on earlier
acceptances). Shapes never depend on the data. With q = 1 - a, C_s is the (1 - δ) quantile of
Binomial(rows, q^s), the number of rows that would still be pending after s rounds without a capacity, and
the final block has q^m·C <= δ; by the union bound a call leaves a row without an accepted proposal (a
*shortfall*) with probability at most (rounds + 2)·δ <= :data:`SHORTFALL_PROBABILITY`. A shortfall row keeps
its round-0 proposal, a draw from the proposal law instead of the target; :class:`Shortfalls` counts such
rows on the device, to be read where the host may wait (logs, checkpoints, tests).

:data:`SAMPLERS` are the versions of the samplers of :mod:`dgp`: 1, the rounds with a host loop the package
had first, which consume the random streams differently; 2, these blocks. A process records its version
(``dgp.sampler``) so that a run resumes with the draws it began with.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

import torch
from torch import Tensor

from dgp.defaults import SAMPLER, SAMPLERS

__all__ = ["SAMPLER", "SAMPLERS", "SHORTFALL_PROBABILITY", "Shortfalls", "plan", "first_accepted"]

SHORTFALL_PROBABILITY = 1e-9
"""Upper bound on the probability that one call of a block sampler leaves any row short."""
_MAX_ROUNDS = 48

Propose = Callable[[Tensor], tuple[Tensor, Tensor]]
"""``propose(rows (k,) int64) -> (values (k, ...), accepted (k,) bool)``: one proposal for each listed row
(rows may repeat), drawn from that row's proposal law, and whether it is accepted."""


class Shortfalls:
    """A count, held on the device, of the rows that block samplers left without an accepted proposal.

    Adding to it never makes the host wait and adds in place, so that a step recorded as a CUDA graph adds
    each time it is replayed; :meth:`total` reads it (and does make the host wait).
    """

    def __init__(self) -> None:
        self._count: Tensor | None = None

    def add(self, short: Tensor) -> None:
        """Add the number of True entries of the boolean mask ``short``."""
        found = short.sum()
        if self._count is None or self._count.device != found.device:
            self._count = found.new_zeros(()) if self._count is None else self._count.to(found.device)
        self._count.add_(found)

    def total(self) -> int:
        """The rows left short so far (0 before any draw)."""
        return 0 if self._count is None else int(self._count)


@lru_cache(maxsize=256)
def plan(rows: int, acceptance: float) -> tuple[int, tuple[int, ...], int, int]:
    """The proposals k each served row gets per round, the capacities ``(C_1, ..., C_S)`` of the rounds after
    round 0, and the rows C and proposals per row m of the final block, for ``rows`` rows whose proposals are
    each accepted with probability >= ``acceptance``.

    k = ⌊1/a⌋, so that a round misses a row with probability q^k <= e^{-1}/q at any a (q = 1 - a); rounds
    are added while the final block they would leave (C·m proposals) holds more than the k·``rows`` of round 0.
    """
    from scipy import stats  # here, not at import: a run whose samplers never reject does not wait for it

    if not 0.0 < acceptance <= 1.0:
        raise ValueError(f"acceptance={acceptance!r} is invalid: a probability in (0, 1]")
    delta = SHORTFALL_PROBABILITY / (_MAX_ROUNDS + 2)
    miss = 1.0 - acceptance
    if miss == 0.0:
        return 1, (), 0, 0
    per_round = max(1, math.floor(1.0 / acceptance))
    capacities: list[int] = []
    while True:
        left = miss ** (per_round * (len(capacities) + 1))
        capacity = min(rows, int(stats.binom.isf(delta, rows, left)) + 1)
        per_row = max(1, math.ceil(math.log(delta / capacity) / math.log(miss)))
        if capacity * per_row <= rows * per_round or len(capacities) == _MAX_ROUNDS:
            return per_round, tuple(capacities), capacity, per_row
        capacities.append(capacity)


def first_accepted(rows: int, acceptance: float, propose: Propose, device: torch.device,
                   shortfalls: Shortfalls | None) -> Tensor:
    """``(rows, ...)`` on ``device``: each row's first accepted proposal, drawn in the fixed blocks of
    :func:`plan`.

    ``acceptance``: a lower bound on every row's acceptance rate. Rows left short keep their first
    proposal and are added to ``shortfalls``.
    """
    per_round, capacities, final, per_row = plan(rows, acceptance)
    every = torch.arange(rows, device=device)
    out, pending = _pick(*propose(every.repeat(per_round)), per_round, rows)
    pending = ~pending
    for capacity in capacities:
        out, pending = _round(out, pending, capacity, per_round, propose)
    if final:
        out, pending = _round(out, pending, final, per_row, propose)
    if shortfalls is not None:
        shortfalls.add(pending)
    return out


def _pick(values: Tensor, ok: Tensor, per_slot: int, slots: int) -> tuple[Tensor, Tensor]:
    """From ``per_slot`` proposals per slot (``values (per_slot·slots, ...)``, ``ok``, slot-minor), each slot's
    first accepted one (its first when none is) ``(slots, ...)`` and whether one was."""
    ok = ok.view(per_slot, slots)
    first = ok.to(torch.uint8).argmax(dim=0)
    flat = values.reshape(per_slot, slots, -1)
    chosen = flat.gather(0, first.view(1, slots, 1).expand(1, slots, flat.shape[2]))
    return chosen.view(slots, *values.shape[1:]), ok.any(dim=0)


def _round(out: Tensor, pending: Tensor, capacity: int, per_slot: int, propose: Propose) -> tuple[Tensor, Tensor]:
    """Give the first ``capacity`` pending rows ``per_slot`` proposals each; each row served takes its first
    accepted one. Returns the updated ``out`` and pending mask."""
    rows = pending.shape[0]
    count = pending.to(torch.int64).cumsum(0)
    slots = torch.arange(1, capacity + 1, device=pending.device)
    served = torch.searchsorted(count, slots)  # (capacity,): the row of each slot; rows where none is left
    chosen, slot_ok = _pick(*propose(served.clamp(max=rows - 1).repeat(per_slot)), per_slot, capacity)
    slot_ok = slot_ok & (served < rows)
    slot = (count - 1).clamp(0, capacity - 1)  # each row's slot, valid where it was served
    got = pending & (count <= capacity) & slot_ok.gather(0, slot)
    taken = chosen.index_select(0, slot)
    out = torch.where(got.view(rows, *([1] * (out.dim() - 1))), taken, out)
    return out, pending & ~got
