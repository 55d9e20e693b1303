"""The run config: one documented, validated tree read from YAML and ``--dotted.key=value`` overrides.

Layers are merged in order: :data:`DEFAULTS`, the YAML file, then the
command-line overrides (exactly the ``--key=value`` form a W&B sweep agent
passes). Sections ``dgp``, ``encoder`` and ``loss`` name registered components
and their options; when a layer changes a component's ``name`` the options of
the previous component are dropped, so ``--loss.name=aninfonce`` never inherits
InfoNCE's ``tau``. Validation runs before anything is built or written and
every error names the offending key.

Sections
--------
seed
    Root seed; every random stream of the run (DGP parameters, batches,
    evaluation samples, model init) is derived from it by name.
device
    ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:<i>``.
dgp
    The data-generating process, see :data:`dgp.process.DEFAULT_CONFIG`.
encoder
    A registered encoder (default ``mlp``, the reference architecture).
loss
    A registered loss (default symmetric cosine InfoNCE).
optim
    ``lr`` (encoder), ``loss_lr`` (loss parameters such as Λ̂ or τ; a loss's own
    ``lr`` option wins), ``grad_clip`` (max gradient norm or null),
    ``weight_decay``.
train
    ``steps``, ``batch_size``, ``log_every`` (loss logged every k steps),
    ``eval_every`` (held-out evaluation every k steps; the last step is always
    evaluated), ``checkpoint_every``, ``precision`` (``fp32``, or ``bf16``: the
    encoder's forward pass under bfloat16 autocast, the loss and its reductions
    in float32; worth it on GPUs and CPUs with AMX/AVX512-BF16 units only).
eval
    ``n_fit``/``n_test`` held-out samples for the periodic evaluation,
    ``final_n_fit``/``final_n_test`` for the final one, ``nonlinear`` (also
    nonlinear R²), ``in_sample`` (score on the fit sample, as the reference
    codes do; off by default).
wandb
    ``project``, ``group``, ``name``, ``tags``, ``mode`` (null = from
    ``WANDB_MODE``), used when the ``wandb`` extra is installed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from dgp.checks import fail
from dgp.process import DEFAULT_CONFIG as DGP_DEFAULTS

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "device": "auto",
    "dgp": {
        **copy.deepcopy(DGP_DEFAULTS),
        "space": {"name": "box", "low": 0.0, "high": 1.0},
        "marginal": {"name": "uniform"},
        "conditional": {"name": "laplace", "scale": 0.1},
    },
    "encoder": {"name": "mlp", "widths": [256, 256, 256], "normalize": "none"},
    "loss": {"name": "infonce", "similarity": "l1", "tau": 0.1},
    "optim": {"lr": 2e-3, "loss_lr": 1e-3, "grad_clip": None, "weight_decay": 0.0},
    "train": {
        "steps": 3000, "batch_size": 512, "log_every": 50, "eval_every": 500, "checkpoint_every": 500,
        "precision": "fp32",
    },
    "eval": {
        "n_fit": 4096,
        "n_test": 8192,
        "final_n_fit": 20480,
        "final_n_test": 40960,
        "nonlinear": True,
        "in_sample": False,
    },
    "wandb": {"project": "identifiable-cl", "group": None, "name": None, "tags": [], "mode": None},
}
"""The default experiment (``icl train`` with no arguments), sized for about two minutes on 2 CPU cores.

Z21's box setting: uniform latents in [0, 1]^10, Laplace(0.1) positives, the
3-layer invertible MLP, and InfoNCE with the matching L1 critic −‖a − b‖₁/τ,
which identifies the latents up to permutation and sign (MCC → 1). The
encoder is a smaller MLP ([256, 256, 256]) than the reference one
(``encoder.widths: null``) so that it trains in minutes on a CPU.
"""

PRECISIONS = ("fp32", "bf16")
"""``train.precision``: float32 throughout, or the encoder's forward pass under bfloat16 autocast."""

COMPONENT_SECTIONS = ("dgp.space", "dgp.marginal", "dgp.conditional", "dgp.negatives", "dgp.mixing", "encoder", "loss")
"""Sections that name a registered component: their other keys are that component's options."""
_SECTIONS = {"dgp", "optim", "train", "eval", "wandb", *COMPONENT_SECTIONS}



def _typed_leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in COMPONENT_SECTIONS:
            continue
        if isinstance(value, Mapping):
            out.update(_typed_leaves(value, path + "."))
        else:
            out[path] = value
    return out


_LEAF_TYPES: dict[str, str] = {
    "seed": "int",
    "device": "str",
    "dgp.dim": "int",
    "dgp.dtype": "str",
    "optim.lr": "float",
    "optim.loss_lr": "float",
    "optim.grad_clip": "float?",
    "optim.weight_decay": "float",
    "train.steps": "int",
    "train.batch_size": "int",
    "train.log_every": "int",
    "train.eval_every": "int",
    "train.checkpoint_every": "int",
    "train.precision": "str",
    "eval.n_fit": "int",
    "eval.n_test": "int",
    "eval.final_n_fit": "int",
    "eval.final_n_test": "int",
    "eval.nonlinear": "bool",
    "eval.in_sample": "bool",
    "wandb.project": "str?",
    "wandb.group": "str?",
    "wandb.name": "str?",
    "wandb.tags": "list",
    "wandb.mode": "str?",
}
assert set(_LEAF_TYPES) == set(_typed_leaves(DEFAULTS)), "every default leaf has a declared type"


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``0.1`` → float, ``True`` → bool, ``[1, 2]`` → list, ``null`` → None.

    Numbers in Python's notation that YAML 1.1 leaves as strings (``1e-05``, what
    ``str(0.00001)`` gives and a sweep agent passes) are read as floats.
    """
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if value == "None":  # how a sweep agent renders Python's None
        return None
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_overrides(args: Iterable[str]) -> dict[str, Any]:
    """``["--loss.tau=0.1", ...]`` → ``{"loss.tau": 0.1, ...}``; the sweep agent's form."""
    out: dict[str, Any] = {}
    for arg in args:
        match = re.fullmatch(r"--?([A-Za-z_][\w.\-]*)=(.*)", arg, flags=re.S)
        if not match:
            raise ValueError(f"cannot read the argument {arg!r}: overrides are written --dotted.key=value")
        out[match.group(1)] = parse_value(match.group(2))
    return out


def _component_prefix(key: str) -> str | None:
    """The component section a dotted key belongs to, if any (longest match)."""
    for section in sorted(COMPONENT_SECTIONS, key=len, reverse=True):
        if key == section or key.startswith(section + "."):
            return section
    return None


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        node = node[part]
    return node


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            fail(".".join(parts[: i + 1]), child, f"is not a section, so {dotted!r} cannot be set")
        node = child
    node[parts[-1]] = value


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out



def merge_layer(config: dict[str, Any], layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Apply one layer (nested or flat dotted keys) over ``config`` and return the result.

    A component whose ``name`` the layer changes starts from ``{"name": new}``.
    """
    merged = copy.deepcopy(config)
    flat: dict[str, Any] = {}
    for key, value in layer.items():
        if isinstance(value, Mapping) and (key in _SECTIONS or _component_prefix(key)):
            flat.update(_flatten({key: value}) if value else {key: value})
        else:
            flat[key] = value
    # a component given as a bare string means {"name": string}
    for key in list(flat):
        if key in COMPONENT_SECTIONS and isinstance(flat[key], str):
            flat[f"{key}.name"] = flat.pop(key)
    for key, value in flat.items():
        if key.endswith(".name") and key[: -len(".name")] in COMPONENT_SECTIONS:
            section = key[: -len(".name")]
            try:
                old = _get(merged, section).get("name")
            except (KeyError, AttributeError):
                old = None
            if old != value:
                _set(merged, section, {"name": value})
    for key, value in flat.items():
        section = _component_prefix(key)
        if section is None and key not in _LEAF_TYPES:
            hint = suggest(key)
            fail(key, value, f"unknown config key (from {source}){hint}")
        if key in COMPONENT_SECTIONS:
            if not isinstance(value, Mapping):
                fail(key, value, f"a mapping with a 'name' entry (from {source})")
            _set(merged, key, dict(value))
            continue
        _set(merged, key, value)
    return merged


def suggest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(_LEAF_TYPES) + [f"{s}.name" for s in COMPONENT_SECTIONS], n=3)
    return f"; did you mean {', '.join(close)}?" if close else f"; top-level keys: {', '.join(DEFAULTS)}"


def _check_type(key: str, value: Any, kind: str) -> None:
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None and optional:
        return
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, list),
    }[kind]
    if not ok:
        fail(key, value, f"expected {'null or ' if optional else ''}{kind}")


def validate(config: Mapping[str, Any]) -> None:
    """Check types, ranges and component names/options without building anything."""
    from identifiable_cl.components import check_component  # registries are filled on import

    for key, kind in _LEAF_TYPES.items():
        _check_type(key, _get(config, key), kind)
    for key in ("train.steps", "train.batch_size", "train.log_every", "train.eval_every", "train.checkpoint_every",
                "eval.n_fit", "eval.n_test", "eval.final_n_fit", "eval.final_n_test"):
        if _get(config, key) < 1:
            fail(key, _get(config, key), "must be >= 1")
    if config["seed"] < 0:
        fail("seed", config["seed"], "must be >= 0")
    for key in ("optim.lr", "optim.loss_lr"):
        if _get(config, key) <= 0:
            fail(key, _get(config, key), "must be > 0")
    if config["optim"]["grad_clip"] is not None and config["optim"]["grad_clip"] <= 0:
        fail("optim.grad_clip", config["optim"]["grad_clip"], "must be > 0 or null")
    if config["optim"]["weight_decay"] < 0:
        fail("optim.weight_decay", config["optim"]["weight_decay"], "must be >= 0")
    if config["wandb"]["mode"] not in (None, "online", "offline", "disabled", "shared"):
        fail("wandb.mode", config["wandb"]["mode"], "allowed: online, offline, disabled, shared, or null (from WANDB_MODE)")
    if config["train"]["precision"] not in PRECISIONS:
        fail("train.precision", config["train"]["precision"], f"allowed: {', '.join(PRECISIONS)}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", config["device"]):
        fail("device", config["device"], "allowed: auto, cpu, cuda, cuda:<index>")
    for section in COMPONENT_SECTIONS:
        check_component(section, _get(config, section))


PRESETS = Path(__file__).resolve().parent / "configs"
"""Packaged base configs, usable by name: ``icl train sphere``, ``icl train box``, ``icl train content_style``."""


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def resolve_config_path(path: str | Path) -> Path:
    """A YAML file, or the packaged preset of that name (see :data:`PRESETS`)."""
    if Path(path).is_file():
        return Path(path)
    if str(path) in preset_names():
        return PRESETS / f"{path}.yaml"
    raise ValueError(
        f"config file {str(path)!r} does not exist and is not a packaged preset "
        f"(presets: {', '.join(preset_names())})"
    )


def load_config(path: str | Path | None = None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> dict[str, Any]:
    """The resolved, validated config: defaults ← YAML file (or preset) ← overrides."""
    config = copy.deepcopy(DEFAULTS)
    if path is not None:
        path = resolve_config_path(path)
        try:
            layer = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"config file {str(path)!r} is not valid YAML: {exc}") from exc
        if not isinstance(layer, Mapping):
            raise ValueError(f"config file {str(path)!r} must hold a mapping, not {type(layer).__name__}")
        config = merge_layer(config, layer, str(path))
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    config = merge_layer(config, overrides, "the command line")
    validate(config)
    return config


def fill_new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """Add the default of every non-component key missing from ``config`` (a run saved before the key existed)."""
    for key in _LEAF_TYPES:
        parts = key.split(".")
        node = config
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node.setdefault(parts[-1], _get(DEFAULTS, key))
    return config


def flat_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as ``{"dotted.key": value}`` (how sweeps and tables name parameters)."""
    return _flatten(config)


def dump(config: Mapping[str, Any]) -> str:
    """YAML text of a config, keys in their natural order."""
    return yaml.safe_dump(dict(config), sort_keys=False)
