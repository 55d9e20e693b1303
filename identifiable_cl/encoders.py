"""Encoders f: x -> h. The default is the reference MLP of Z21/vK21/R24: the encoder trained by the official
codes of Zimmermann et al. 2021 (brendel-group/cl-ica), von Kügelgen et al. 2021
(ysharma1126/ssl_identifiability) and Rusak et al. 2024 (brendel-group/AnInfoNCE).

An encoder derives from :class:`Encoder`, is registered in :data:`ENCODERS` and is
constructed as ``cls(*, input_dim, latent_dim, **options)``: the caller supplies
the observation dimension and the true latent dimension, the config the options.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dgp import checks
from dgp.contract import Contract, is_bool, is_count
from dgp.registry import Registry
from identifiable_cl.linear import Linear


class Encoder(nn.Module):
    """f: x -> h, ``(N, input_dim) -> (N, output_dim)``: what the project reads of an encoder."""

    output_dim: int
    """The dimension d of h (set by the constructor)."""
    unit_norm: bool = False
    """Whether every output is a unit vector by construction (a cosine critic then needs no normalisation)."""

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError


ENCODER_CONTRACT = Contract("encoder", Encoder, {"forward": "forward(x) -> (N, output_dim)"}, {
    "output_dim": (is_count, "int >= 1: the dimension of h"),
    "unit_norm": (is_bool, "bool: every output is a unit vector by construction")})

ENCODERS = Registry("encoders", "encoder", contract=ENCODER_CONTRACT)
"""Encoders by name."""

ACTIVATIONS = {
    "leaky_relu": lambda slope: nn.LeakyReLU(slope),
    "relu": lambda slope: nn.ReLU(),
    "tanh": lambda slope: nn.Tanh(),
    "gelu": lambda slope: nn.GELU(),
    "silu": lambda slope: nn.SiLU(),
}
NORMALIZATIONS = ("none", "sphere", "learnable_sphere", "learnable_box")


class OutputNormalization(nn.Module):
    """Maps raw outputs ``(B, d)`` into the output space.

    ``none``: unchanged; ``sphere``: h/‖h‖ (unit sphere); ``learnable_sphere``:
    r·h/‖h‖ with a trainable radius r (init 1); ``learnable_box``:
    low + (high − low)·sigmoid(h) with trainable bounds (init [0, 1]).
    """

    def __init__(self, kind: str):
        super().__init__()
        self.kind = checks.choice("normalize", kind, NORMALIZATIONS)
        if kind == "learnable_sphere":
            self.log_radius = nn.Parameter(torch.zeros(()))
        if kind == "learnable_box":
            self.low = nn.Parameter(torch.zeros(()))
            self.raw_width = nn.Parameter(torch.tensor(0.5413248546))  # softplus⁻¹(1)

    def forward(self, h: Tensor) -> Tensor:
        if self.kind == "none":
            return h
        if self.kind == "learnable_box":
            return self.low + F.softplus(self.raw_width) * torch.sigmoid(h)
        unit = F.normalize(h, dim=-1)
        return unit * self.log_radius.exp() if self.kind == "learnable_sphere" else unit

    @property
    def unit_norm(self) -> bool:
        """True when outputs lie on the unit sphere by construction."""
        return self.kind == "sphere"


@ENCODERS.register("mlp")
class MLPEncoder(Encoder):
    """A fully connected encoder ``(B, input_dim) -> (B, output_dim)``.

    Hidden widths default to the reference ``[10n, 50n, 50n, 50n, 50n, 10n]``
    (n = latent dim; ≈0.85 M parameters for n = 10) with LeakyReLU(0.01) after
    each hidden layer and a linear output layer, then ``normalize``. The layers are
    :class:`identifiable_cl.linear.Linear` (``train.matmul`` chooses how their float32 products run).
    """

    OPTION_DOCS = {
        'widths': 'hidden widths, or null for the reference [10n, 50n, 50n, 50n, 50n, 10n]',
        'activation': 'activation after each hidden layer: leaky_relu, relu, tanh, gelu or silu',
        'slope': '(>= 0) negative slope of leaky_relu',
        'output_dim': '(int >= 1) output dimension, or null for n',
        'normalize': 'output normalisation: none, sphere (unit norm), learnable_sphere or learnable_box; in a run config also auto (the default there): sphere when the loss compares unit vectors, else none',
    }

    def __init__(
        self,
        *,
        input_dim: int,
        latent_dim: int,
        widths: list[int] | None = None,
        activation: str = "leaky_relu",
        slope: float = 0.01,
        output_dim: int | None = None,
        normalize: str = "sphere",
    ):
        super().__init__()
        n = latent_dim
        widths = [10 * n, 50 * n, 50 * n, 50 * n, 50 * n, 10 * n] if widths is None else widths
        if not isinstance(widths, list) or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
            checks.fail("widths", widths, "a list of positive integers, or null for the reference widths")
        checks.choice("activation", activation, ACTIVATIONS)
        slope = checks.non_negative("slope", slope)
        if slope > 1:
            checks.fail("slope", slope, "must lie in [0, 1]: the leaky ReLU's slope for negative inputs")
        self.output_dim = n if output_dim is None else checks.integer("output_dim", output_dim, minimum=1)
        layers: list[nn.Module] = []
        previous = input_dim
        for width in widths:
            layers += [Linear(previous, width), ACTIVATIONS[activation](slope)]
            previous = width
        layers.append(Linear(previous, self.output_dim))
        self.net = nn.Sequential(*layers)
        self.normalization = OutputNormalization(normalize)

    def forward(self, x: Tensor) -> Tensor:
        return self.normalization(self.net(x))

    @property
    def unit_norm(self) -> bool:
        return self.normalization.unit_norm


class ViewEncoders(Encoder):
    """One encoder per view of a multi-view process (``encoder.shared: false``): ``encoders[v]`` maps view v's
    observations ``(B, D_v)`` to ``(B, d)``. Called as a module it is view 1's encoder, so every consumer of a
    single encoder (evaluation, figures) reads the first view's encoding, as the multimodal study does."""

    def __init__(self, encoders: list[nn.Module]):
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.output_dim = encoders[0].output_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.encoders[0](x)

    @property
    def unit_norm(self) -> bool:
        return all(e.unit_norm for e in self.encoders)


def view_encoder(encoder: nn.Module, view: int) -> nn.Module:
    """The encoder of view ``view`` (0-based): its own under :class:`ViewEncoders`, else the one shared."""
    return encoder.encoders[view] if isinstance(encoder, ViewEncoders) else encoder
