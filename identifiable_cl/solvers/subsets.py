"""The step of Yao et al. 2024's multi-view objective: each contrasted subset of views on the coordinates that
carry the block its views share.

Yao, Xu, Lachapelle, Magliacane, Taslakian, Martius, von Kügelgen & Locatello (ICLR 2024, "Multi-View Causal
Representation Learning with Partial Observability"; code CausalLearningAI/multiview-crl, ``main_numerical.py``). A
process's views (``dgp.views.contrast``) name the contrasted subsets C; subset s shares the latents I_s = ∩_{v∈s}
S_v (k_s of them). Each view v ∈ s selects k_s coordinates c_{s,v} of its encoding h_v (B, d) (:class:`Selection`),
and the objective (``dgp.views.objective``) is, with h_{s,v} = h_v[:, c_{s,v}] and h⁻_{s,v} its negatives',

- ``joint`` (the default; the code's ``UnifiedCLLoss`` over ``LpSimCLRLoss``): the sum over the subsets of InfoNCE
  on the subset's views taken together (:func:`joint_loss`),

      L = Σ_{s∈C} mean_a ℓ(a),   ℓ(a) = −pos(a) + log Σ_{c ∈ {pos(a)} ∪ {neg(a, b)}_b} exp c  (logsumexp),
      pos(a) = Σ_{i=1}^{l−1} sim(h_{s,v_i}(a), h_{s,v_{i+1}}(a)) / τ,
      neg(a, b) = Σ_{i=1}^{l} sim(h_{s,v_i}(a), h⁻_{s,v_i}(b)) / τ,

  v_1 < ... < v_l the views of s, and the loss's reduction in place of the logsumexp: the positive runs along
  consecutive views, each negative is a fresh sample seen by every view of s. With the code's critic (``l2``:
  −‖·‖², τ = 1, ``logmeanexp`` over the B fresh negatives and the positive) each term is ``LpSimCLRLoss`` with
  p = 2, α = ½ exactly;
- ``pairs``: the mean over the subsets of the mean over the subset's ordered pairs of views
  (:func:`identifiable_cl.solvers.views.pair_loss`),

      L = (1/|C|) Σ_{s∈C} pair_loss(loss, [h_v[:, c_{s,v}] : v ∈ s], [h⁻_v[..., c_{s,v}] : v ∈ s]),

  the loss with any similarity, negative set and reduction: it receives the selected coordinates followed by
  d - k_s zero columns, which change no similarity (cosine, dot, l1, l2, l3), so it is the loss of the selected
  coordinates, with one temperature for every subset.

Selections (``dgp.views.selection``), r-th selected coordinate of each view against the r-th of the others:

- ``ground_truth``: coordinate j of h_v stands for S_v[j], the j-th latent dimension view v sees, and c_{s,v}
  are the positions of I_s (ascending) in S_v, as the code's ``view_specific_content_indexing``;
- ``gumbel``: c_{s,v} are the k_s largest entries of m_v + g_{s,v} (ascending), m_v the batch mean of h_v and
  g_{s,v} ~ Gumbel(0, 1)^d drawn for every pair (s, v) at every step from the run's stream ``train.selection``
  (saved in each checkpoint): the code's ``infer_content_indices_gumbel_softmax``, whose indices are the top k of
  its relaxed k-hot (iterated softmax), the same coordinates (a test checks it). At evaluation the selection's
  mode, the k_s largest entries of m_v, and, as the code evaluates, fresh noise for each draw
  (:mod:`identifiable_cl.evaluation.views`);
- ``concat``: range(d) split into |C| runs of consecutive coordinates (the first d mod |C| one longer, as
  ``np.array_split``), run i for subset i in each of its views (the code's ``concat`` mode).

Differences from the official code: under ``joint`` none in the objective's value (its loss also reports the
positive and negative halves, which are not logged here); the code draws the Gumbel noise from torch's global
generator, here from the run's own stream. ``pairs`` contrasts every ordered pair of a subset's views with the
loss's own negative set and averages the subsets (the code sums them: the same direction).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

import dgp
from dgp import checks
from dgp.seeding import stream_seed
from identifiable_cl.losses.base import infonce_row, normalise, paired_similarity, pairwise_similarity
from identifiable_cl.losses.infonce import InfoNCE
from identifiable_cl.solvers.views import ViewSolver, pair_loss

SELECTION_STREAM = "train.selection"
"""The run's random stream of the Gumbel noise of ``selection: gumbel``."""


class Selection:
    """Which coordinates of each view's encoding (width ``width``) carry each contrasted subset's shared block,
    for the views component ``views`` (:class:`dgp.views.Subsets` with ``contrast``).

    ``pairs``: (subset index, view) for every view of every subset, in order; :meth:`coordinates` gives, per
    subset, per view of it, a LongTensor (k_s,) of coordinates. :meth:`required` is the least width that fits.
    """

    def __init__(self, views: Any, width: int):
        self.mode = views.selection
        self.joint = views.objective == "joint"
        self.subsets = [s for s, _ in views.contrasted]
        self.sizes = [len(shared) for _, shared in views.contrasted]
        self.pairs = [(i, v) for i, s in enumerate(self.subsets) for v in s]
        self.width = width
        least = self.required(views)
        if width < least:
            checks.fail("encoder.output_dim", width, f"{self.mode} selection of {len(self.subsets)} contrasted "
                        f"subsets (dgp.views.contrast) needs encodings of at least {least} coordinates")
        self.fixed: list[list[list[int]]] = []
        if self.mode == "ground_truth":
            self.fixed = [[[views.dims[v].index(i) for i in shared] for v in s] for s, shared in views.contrasted]
        elif self.mode == "concat":
            count = len(self.subsets)
            bounds = [i * (width // count) + min(i, width % count) for i in range(count + 1)]
            self.fixed = [[list(range(bounds[i], bounds[i + 1]))] * len(s) for i, s in enumerate(self.subsets)]
        self._fixed_on: dict[torch.device, list[list[Tensor]]] = {}

    @staticmethod
    def required(views: Any) -> int:
        """The least encoding width the selection of ``views`` fits: ground_truth, one more than the largest
        position it reads; gumbel, the largest shared block; concat, one coordinate per subset."""
        if views.selection == "ground_truth":
            return 1 + max(views.dims[v].index(i) for s, shared in views.contrasted for v in s for i in shared)
        if views.selection == "gumbel":
            return max(len(shared) for _, shared in views.contrasted)
        return len(views.contrasted)

    def noise(self, generator: torch.Generator, like: Tensor) -> Tensor | None:
        """Gumbel(0, 1) noise ``(len(pairs), width)`` from ``generator`` for ``gumbel`` (in ``like``'s dtype),
        else None: g = −log E with E ~ Exp(1)."""
        if self.mode != "gumbel":
            return None
        shape = (len(self.pairs), self.width)
        return -torch.empty(shape, device=like.device, dtype=like.dtype).exponential_(generator=generator).log()

    def coordinates(self, hs: Sequence[Tensor], noise: Tensor | None = None) -> list[list[Tensor]]:
        """Per subset, per view of it (in order), the coordinates c_{s,v} (k_s,) on ``hs[0]``'s device.

        ``hs``: each view's encodings (N, width), read by ``gumbel`` only (their means); ``noise``: its Gumbel
        noise (:meth:`noise`), None for the noise-free mode (evaluation); noise wider than a view's encoding (the
        evaluation of views of several widths) is read on that view's first columns."""
        device = hs[0].device
        if self.mode != "gumbel":
            if device not in self._fixed_on:  # uploaded once per device, so that a step uploads nothing
                self._fixed_on[device] = [[torch.tensor(c, device=device) for c in per] for per in self.fixed]
            return self._fixed_on[device]
        means = {v: hs[v].detach().mean(0) for _, v in self.pairs}
        out: list[list[Tensor]] = [[] for _ in self.subsets]
        for row, (i, v) in enumerate(self.pairs):
            scores = means[v] if noise is None else means[v] + noise[row, : means[v].shape[0]]
            out[i].append(torch.topk(scores, self.sizes[i]).indices.sort().values)
        return out

    def objective(self, loss: nn.Module, hs: Sequence[Tensor], negs: Sequence[Tensor | None],
                  generator: torch.Generator) -> Tensor:
        """:func:`joint_loss` (objective ``joint``) or :func:`subset_loss` (``pairs``) of ``loss`` on the coordinates
        this selection picks in ``hs`` (with Gumbel noise from ``generator`` for ``gumbel``): the step's objective."""
        objective = joint_loss if self.joint else subset_loss
        return objective(loss, self.subsets, self.coordinates(hs, self.noise(generator, hs[0])), hs, negs)


def selected(h: Tensor, coordinates: Tensor) -> Tensor:
    """The columns ``coordinates`` (k,) of ``h`` (..., d), then d - k zero columns: shape (..., d)."""
    picked = h.index_select(-1, coordinates)
    return torch.cat([picked, picked.new_zeros(*h.shape[:-1], h.shape[-1] - coordinates.shape[0])], dim=-1)


def subset_loss(loss: nn.Module, subsets: Sequence[Sequence[int]], coordinates: Sequence[Sequence[Tensor]],
                hs: Sequence[Tensor], negs: Sequence[Tensor | None]) -> Tensor:
    """L = mean over subsets s of ``pair_loss`` over the views of s of their selected coordinates (module
    docstring); ``hs`` (B, d) and ``negs`` (None or in ``x_neg``'s leading shape) per view, ``coordinates`` per
    subset per view of it (:meth:`Selection.coordinates`)."""
    terms = []
    for subset, chosen in zip(subsets, coordinates):
        picked = [selected(hs[v], c) for v, c in zip(subset, chosen)]
        picked_neg = [None if negs[v] is None else selected(negs[v], c) for v, c in zip(subset, chosen)]
        terms.append(pair_loss(loss, picked, picked_neg))
    return torch.stack(terms).mean()


def joint_loss(loss: nn.Module, subsets: Sequence[Sequence[int]], coordinates: Sequence[Sequence[Tensor]],
               hs: Sequence[Tensor], negs: Sequence[Tensor | None]) -> Tensor:
    """L = Σ_s mean_a ℓ_s(a), InfoNCE ``loss`` (its similarity, τ and reduction) on the views of each subset s
    together (module docstring): pos(a) = Σ_{i<l} sim(h_{s,v_i}(a), h_{s,v_{i+1}}(a)) / τ (B,) and neg(a, b) =
    Σ_{i≤l} sim(h_{s,v_i}(a), h⁻_{s,v_i}(b)) / τ, (B, M) for shared negatives ``negs[v]`` (M, d) or (B, K) for
    per-anchor ones (B, K, d). ``hs`` (B, d) per view, ``coordinates`` per subset per view of it
    (:meth:`Selection.coordinates`). The sums over views are one similarity of the views' selected coordinates
    side by side (each view's unit-normalised first for cosine), which every similarity adds up that way."""
    kind = "dot" if loss.similarity == "cosine" else loss.similarity
    scale = 1.0 / loss.temperature.value()
    terms = []
    for subset, chosen in zip(subsets, coordinates):
        picked = [hs[v].index_select(-1, c) for v, c in zip(subset, chosen)]
        picked_neg = [negs[v].index_select(-1, c) for v, c in zip(subset, chosen)]
        if loss.similarity == "cosine":
            picked, picked_neg = list(normalise(*picked)), list(normalise(*picked_neg))
        h, h_neg = torch.cat(picked, -1), torch.cat(picked_neg, -1)
        pos = paired_similarity(torch.cat(picked[:-1], -1), torch.cat(picked[1:], -1), kind) * scale
        if h_neg.dim() == 2:
            neg = pairwise_similarity(h, h_neg, kind) * scale
        else:
            neg = pairwise_similarity(h.unsqueeze(1), h_neg, kind).squeeze(1) * scale
        lse = torch.logsumexp(neg, 1, keepdim=True)
        terms.append(infonce_row(pos, lse, scale, neg.shape[1], loss.reduction).mean())
    return torch.stack(terms).sum()


def check_subsets(config: Mapping[str, Any], process: dgp.Process, encoder: nn.Module, loss: nn.Module) -> Selection:
    """The rules of the objective over contrasted subsets of views, each a one-line ValueError naming its key: the
    loss is InfoNCE (``loss.name``), with the ``joint`` objective on the independent negatives (``loss.negatives``),
    and ``encoder.output_dim`` fits the selection (:meth:`Selection.required`).
    Returns the run's :class:`Selection`. :func:`identifiable_cl.components.check` applies it to every planned run,
    before anything is written."""
    if not isinstance(loss, InfoNCE):
        checks.fail("loss.name", config["loss"]["name"], "the objective over contrasted subsets of views "
                    "(dgp.views.contrast) applies InfoNCE to each subset's selected coordinates: use infonce")
    if process.views.objective == "joint" and loss.negatives != "independent":
        checks.fail("loss.negatives", loss.negatives, "the joint objective over contrasted subsets of views "
                    "(dgp.views.objective) contrasts each anchor with fresh samples seen by every view of the subset: "
                    "use independent (with a dgp.negatives sampler), or dgp.views.objective: pairs")
    return Selection(process.views, encoder.output_dim)


class SubsetSolver(ViewSolver):
    """:class:`ViewSolver` whose loss is :func:`joint_loss` or :func:`subset_loss` (``dgp.views.objective``) over the
    process's contrasted subsets of views (``dgp.views.contrast``), on the coordinates its :class:`Selection` picks
    (:func:`check_subsets`, which the run's check has applied already); ``selections``: the generator of the Gumbel
    noise (stream :data:`SELECTION_STREAM`), saved with the run's other generators."""

    def __init__(self, config: dict[str, Any], device: torch.device, process: dgp.Process, encoder: nn.Module,
                 loss: nn.Module, optimizer: torch.optim.Optimizer, batches: torch.Generator):
        super().__init__(config, device, process, encoder, loss, optimizer, batches)
        self.selection = check_subsets(config, process, encoder, loss)
        self.selections = process.make_generator(stream_seed(config["seed"], SELECTION_STREAM))

    def objective(self, batch: dgp.Batch) -> tuple[Tensor, Tensor]:
        hs, negs = self.views_encoded(batch)
        return self.selection.objective(self.loss, hs, negs, self.selections), hs[1]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["rng"]["selection"] = self.selections.get_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.selections.set_state(state["rng"]["selection"])
