"""The run config: one documented, validated tree read from YAML and ``--dotted.key=value`` overrides.

Every key is declared once, in :data:`SCHEMA`, with its default, type, allowed
values and a one-line description; :data:`DEFAULTS`, the checks, ``icl train
--help``'s key listing and this package's documentation all derive from it.
Entries of kind :class:`Section` name a registered component (``dgp.space``,
``encoder``, ``loss`` ...): their ``name`` picks it and its other keys are that
component's own options, checked against its signature.

Layers are merged in order: :data:`DEFAULTS`, the YAML file, then the
command-line overrides (exactly the ``--key=value`` form a W&B sweep agent
passes; ``key=value``, ``+key=value`` and ``++key=value``, the Hydra forms, are
read the same way). When a layer changes a component's ``name`` the options of
the previous component are dropped, so ``--loss.name=aninfonce`` never inherits
InfoNCE's ``tau``. :func:`validate` checks every key's type and range;
:func:`identifiable_cl.components.check` then builds every component cheaply and
applies the rules between them, before anything is written.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from dgp import checks
from dgp.checks import fail
from dgp.defaults import DEFAULT_CONFIG as DGP_DEFAULTS
from dgp.defaults import DTYPE_NAMES
from dgp.defaults import SAMPLERS as DGP_SAMPLERS
from dgp.defaults import SINGLE_VIEW as DGP_VIEWS
from identifiable_cl.arguments import OVERRIDE
from identifiable_cl.yamlfiles import TooManyDigits, load_yaml

MATMUL_BACKENDS = ("auto", "blas", "onednn")
"""How the encoder's float32 CPU products run (``train.matmul``; :mod:`identifiable_cl.linear`)."""


MAX_TAG = 64
"""The longest W&B tag: W&B refuses a run's tags past it, and with them the run's logging."""


@dataclass(frozen=True)
class Leaf:
    """One config value: its default, type (``int``, ``float``, ``bool``, ``str``, ``list``, ``tags``: a list of W&B
    tags, each a string of 1 to :data:`MAX_TAG` characters as W&B accepts them; a trailing ``?`` allows null),
    one-line description and allowed values.

    ``minimum`` is inclusive and ``above`` exclusive; floats must be finite; ``choices`` lists the
    allowed strings; ``pattern`` is a regular expression the whole string must match, described
    by ``allowed``.
    """

    default: Any
    kind: str
    doc: str
    minimum: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None
    pattern: str | None = None
    allowed: str | None = None

    def check(self, key: str, value: Any) -> None:
        """A ValueError naming ``key``, ``value`` and what is allowed, unless ``value`` fits."""
        kind = self.kind.rstrip("?")
        if value is None and self.kind.endswith("?"):
            return
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "str": isinstance(value, str),
            "list": isinstance(value, list),
            "tags": isinstance(value, list),
        }[kind]
        if not ok:
            fail(key, value, f"expected {'null or ' if self.kind.endswith('?') else ''}{kind.replace('tags', 'list')}")
        for i, tag in enumerate(value if kind == "tags" else ()):
            if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_TAG:
                fail(key, value, f"entry {i} ({tag!r}) is not a W&B tag: a string of 1 to {MAX_TAG} characters")
        for text in value if kind == "tags" else [value] if kind == "str" else []:
            controls = checks.invisible(text, ("Cc",), "\n\t" if key == "wandb.notes" else "")
            if controls:
                fail(key, value, f"holds {controls}: names and text are printed, and a control character would "
                                 "reach the terminal or W&B as it is")
        if kind == "float" and not math.isfinite(value):
            fail(key, value, "must be a finite number")
        if self.minimum is not None and value < self.minimum:
            fail(key, value, f"must be >= {self.minimum:g}")
        if self.above is not None and value <= self.above:
            fail(key, value, f"must be > {self.above:g}" + (" or null" if self.kind.endswith("?") else ""))
        if self.choices is not None and value not in self.choices:
            fail(key, value, "allowed: " + ", ".join("null" if c is None else str(c) for c in self.choices))
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            fail(key, value, f"allowed: {self.allowed}")

    def describe(self) -> str:
        """The allowed values in words, for key listings."""
        if self.choices is not None:
            return " | ".join("null" if c is None else str(c) for c in self.choices)
        if self.allowed is not None:
            return self.allowed
        bound = f" >= {self.minimum:g}" if self.minimum is not None else f" > {self.above:g}" if self.above is not None else ""
        return f"{self.kind.rstrip('?')}{bound}" + (" or null" if self.kind.endswith("?") else "")


@dataclass(frozen=True)
class Section:
    """A registered component: the default ``{"name": ..., **options}``, what it is, and the kind of the
    registry its names come from (:data:`dgp.registry.REGISTRIES`)."""

    default: dict[str, Any]
    doc: str
    registry: str


LOSS_MEMORY_MIB = 4096
"""The default budget (MiB) of the loss's (b, N) buffers (``train.loss_memory``, see
:func:`identifiable_cl.losses.blocked.block_rows`): on an accelerator a block's few large operations take about
the time of a small one, so small blocks leave it waiting on the host and the whole matrix runs fastest where it
fits; at batch 6144 in float32 the whole matrix of InfoNCE over the batch fits this budget."""

SCHEMA: dict[str, Leaf | Section] = {
    "seed": Leaf(0, "int", "root seed; every random stream of the run is derived from it by name", minimum=0),
    "device": Leaf("auto", "str", "auto (CUDA when present), cpu, cuda or cuda:<index>",
                   pattern=r"auto|cpu|cuda(:\d+)?", allowed="auto, cpu, cuda, cuda:<index>"),
    "dgp.seed": Leaf(None, "int?", "seed of the process (its mixing and drawn parameters); null: the root seed, "
                     "so a sweep over seed at a fixed dgp.seed varies the training only", minimum=0),
    "dgp.dim": Leaf(DGP_DEFAULTS["dim"], "int", "number n of latent (and observed) dimensions", minimum=1),
    "dgp.dtype": Leaf(DGP_DEFAULTS["dtype"], "str", "floating type of the process, encoder and loss",
                      choices=DTYPE_NAMES),
    "dgp.sampler": Leaf(DGP_DEFAULTS["sampler"], "int", "version of the rejection samplers: 2, fixed blocks that never "
                        "make a GPU wait; 1, the earlier rounds (same laws, other draws), which runs saved before "
                        "version 2 existed keep", choices=DGP_SAMPLERS),
    "dgp.space": Section(DGP_DEFAULTS["space"], "latent space: sphere, box or euclidean", "spaces"),
    "dgp.marginal": Section(DGP_DEFAULTS["marginal"], "marginal p(z) of the latents", "marginals"),
    "dgp.conditional": Section(DGP_DEFAULTS["conditional"], "conditional p(z+ | z) of the positives", "conditionals"),
    "dgp.negatives": Section(DGP_DEFAULTS["negatives"], "separate negatives (none: the loss uses the batch)", "negatives"),
    "dgp.mixing": Section(DGP_DEFAULTS["mixing"], "mixing g: observations x = g(z)", "mixings"),
    "dgp.views": Section(dict(DGP_VIEWS), "views: single (x = g(z)), or subsets: each view sees its own latent "
                         "blocks through its own mixing (multimodal, multi-view)", "views"),
    "encoder": Section({"name": "mlp", "widths": [256, 256, 256], "normalize": "auto", "shared": True},
                       "encoder f: h = f(x); widths null is the reference architecture", "encoders"),
    "loss": Section({"name": "infonce", "similarity": "l1", "tau": 0.1}, "contrastive loss", "losses"),
    "optim.lr": Leaf(2e-3, "float", "Adam learning rate of the encoder", above=0),
    "optim.loss_lr": Leaf(1e-3, "float", "learning rate of the loss's parameters (Λ̂, τ); a loss's own lr wins", above=0),
    "optim.grad_clip": Leaf(None, "float?", "maximum gradient norm, or null for none", above=0),
    "optim.weight_decay": Leaf(0.0, "float", "Adam weight decay", minimum=0),
    "train.steps": Leaf(3000, "int", "training steps", minimum=1),
    "train.batch_size": Leaf(512, "int", "anchors per batch (each with its positive)", minimum=1),
    "train.log_every": Leaf(50, "int", "log the mean loss every k steps", minimum=1),
    "train.eval_every": Leaf(500, "int", "held-out evaluation every k steps (the last step always)", minimum=1),
    "train.checkpoint_every": Leaf(500, "int", "checkpoint every k steps (the last step always)", minimum=1),
    "train.precision": Leaf("fp32", "str", "fp32; tf32: CUDA's float32 products on its tensor cores (TensorFloat-32, "
                            "10-bit mantissa products; a CPU computes fp32); or bf16: the encoder's forward pass under "
                            "bfloat16 autocast (worth it on GPUs and CPUs with AMX/AVX512-BF16 units only)",
                            choices=("fp32", "tf32", "bf16")),
    "train.matmul": Leaf("auto", "str", "how the encoder's float32 CPU matrix products run: blas (torch's own), "
                         "onednn, or auto (onednn on AMD CPUs with AVX-512, blas elsewhere)", choices=MATMUL_BACKENDS),
    "train.threads": Leaf(None, "int?", "torch's CPU threads; null: OMP_NUM_THREADS when set, else the CPUs this "
                          "process may use (its affinity, cgroup quota, SLURM_CPUS_PER_TASK)", minimum=1),
    "train.figures": Leaf(True, "bool", "draw the run's figures once it has finished (PNG in its folder, and to W&B); "
                          "`icl plot RUN_DIR` draws them later"),
    "train.capture": Leaf("eager", "str", "graph: on a GPU, record a step's device work (draw, encode, loss, "
                          "backward, clip, Adam) once as a CUDA graph and replay it every step (a plain step or a "
                          "batched pack; not MoCo's queue); eager: launch every operation each step (the CPU always "
                          "does)", choices=("eager", "graph")),
    "train.loss_memory": Leaf(LOSS_MEMORY_MIB, "int", "MiB the loss's (rows × candidates) buffers may take at once: "
                              "the whole matrix where it fits, blocks of rows above it (on a CPU blocks stay "
                              "cache-sized)", minimum=1),
    "train.loss_limit": Leaf(1e6, "float?", "stop when |loss| exceeds this (divergence); null: only NaN/inf stop",
                             above=0),
    "eval.n_fit": Leaf(4096, "int", "fit samples of the periodic held-out evaluation", minimum=2),
    "eval.n_test": Leaf(8192, "int", "test samples of the periodic held-out evaluation", minimum=2),
    "eval.final_n_fit": Leaf(20480, "int", "fit samples of the final evaluation and the identity baseline", minimum=2),
    "eval.final_n_test": Leaf(40960, "int", "test samples of the final evaluation and the identity baseline", minimum=2),
    "eval.nonlinear": Leaf(True, "bool", "also measure nonlinear R² (kernel ridge)"),
    "eval.mi": Leaf(True, "bool", "at each evaluation of a run whose loss bounds I(z; z+) (InfoNCE's log K - L): the "
                    "true I, log K, the encoder's bound, the true critic's bound and the leave-one-out upper bound"),
    "eval.dci": Leaf(False, "bool", "also measure DCI (Eastwood & Williams 2018): disentanglement, completeness and "
                     "informativeness from a lasso's importances"),
    "eval.n_centres": Leaf(500, "int", "Nyström centres of the periodic nonlinear R² (fewer than the final "
                           "evaluation's, for speed)",
                           minimum=1),
    "eval.final_n_centres": Leaf(1000, "int", "Nyström centres of the final nonlinear R² and the identity baseline",
                                 minimum=1),
    "eval.gumbel_draws": Leaf(5, "int", "with views that contrast subsets by the Gumbel selection "
                              "(dgp.views.selection: gumbel), also score every subset's blocks as the mean over this "
                              "many draws of the selection's noise (keys suffixed _drawn), as Yao et al.'s code "
                              "evaluates, and how far the selection is from uniform (gumbel_mean_gap, "
                              "gumbel_mode_agreement); 0: the noise-free mode only", minimum=0),
    "eval.in_sample": Leaf(False, "bool", "score on the fit sample, as the reference codes do"),
    "eval.in_sample_n": Leaf(None, "int?", "also score the final evaluation and the identity baseline in sample "
                             "on this many fresh samples, linear metrics only, as the reference codes log them "
                             "(keys <metric>_in_sample); null: not", minimum=2),
    "wandb.project": Leaf("identifiable-cl", "str?", "W&B project"),
    "wandb.group": Leaf(None, "str?", "W&B group"),
    "wandb.name": Leaf(None, "str?", "W&B run name"),
    "wandb.tags": Leaf([], "tags", "W&B tags"),
    "wandb.mode": Leaf(None, "str?", "online, offline, disabled, shared, or null (from WANDB_MODE)",
                       choices=(None, "online", "offline", "disabled", "shared")),
    "wandb.entity": Leaf(None, "str?", "W&B entity (user or team), or null (from WANDB_ENTITY or the login)"),
    "wandb.job_type": Leaf(None, "str?", "W&B job type, e.g. train or eval (from WANDB_JOB_TYPE)"),
    "wandb.notes": Leaf(None, "str?", "W&B notes: a longer description of the run (from WANDB_NOTES)"),
    "wandb.verbose": Leaf(False, "bool", "print W&B's own messages and capture the console; false: W&B stays silent"),
}
"""Every key of the run config, in the order of :data:`DEFAULTS`.

The default experiment (``icl train`` with no arguments) is sized for about two
minutes on 2 CPU cores: Z21's box setting (uniform latents in [0, 1]^10,
Laplace(0.1) positives, the 3-layer invertible MLP) and InfoNCE with the
matching L1 critic −‖a − b‖₁/τ, which identifies the latents up to permutation
and sign (MCC → 1); the encoder is a smaller MLP ([256, 256, 256]) than the
reference one (``encoder.widths: null``) so that it trains in minutes.
"""

LEAVES: dict[str, Leaf] = {k: v for k, v in SCHEMA.items() if isinstance(v, Leaf)}
COMPONENT_SECTIONS = tuple(k for k, v in SCHEMA.items() if isinstance(v, Section))
"""Sections that name a registered component: their other keys are that component's options."""

SECTION_OPTIONS = {
    "encoder.shared": "with views (dgp.views): one encoder for every view (true), or one per view (false)",
}
"""Options of a section that hold whatever component it names (the run reads them, not the component)."""


def set_default(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set the ``dotted`` key of a nested config to ``value`` unless it is there already."""
    *parents, last = dotted.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
    node.setdefault(last, value)


def _tree(schema: Mapping[str, Leaf | Section]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, entry in schema.items():
        set_default(tree, key, copy.deepcopy(entry.default))
    return tree


DEFAULTS: dict[str, Any] = _tree(SCHEMA)
"""The default config, built from :data:`SCHEMA`."""
_SECTIONS = {key.rsplit(".", 1)[0] for key in SCHEMA if "." in key} | set(COMPONENT_SECTIONS)


def yaml_text(value: Any) -> str:
    """A value as a YAML config writes it on one line (``null``, ``true``, ``[1, 2]``)."""
    try:
        out = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    except yaml.YAMLError:
        return repr(value)
    return out[: -len("...")].strip() if out.endswith("\n...") else out


def key_listing() -> str:
    """Every config key with its default, allowed values and description (for ``icl train --help``), from
    :data:`SCHEMA` alone (nothing is imported; ``icl config --keys`` adds each component's options)."""
    lines = []
    for key, entry in SCHEMA.items():
        if isinstance(entry, Section):
            default = ", ".join(f"{k}={v}" for k, v in entry.default.items())
            lines.append(f"  {key}.name ...  [{default}]  {entry.doc}")
        else:
            lines.append(f"  {key}={entry.default!r}  ({entry.describe()})  {entry.doc}")
    return "\n".join(lines)


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``0.1`` → float, ``True`` → bool, ``[1, 2]`` → list, ``null`` → None.

    Numbers in Python's notation that YAML 1.1 leaves as strings (``1e-05``, what
    ``str(0.00001)`` gives and a sweep agent passes) are read as floats.
    """
    try:
        value = load_yaml(text)
    except TooManyDigits as exc:
        raise ValueError(f"{exc.problem}") from None
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
    """``["--loss.tau=0.1", ...]`` → ``{"loss.tau": 0.1, ...}``.

    Each argument is one of the forms of :data:`identifiable_cl.arguments.OVERRIDE`: ``--key=value`` (a sweep agent's
    ``${args}``), ``key=value`` (``${args_no_hyphens}``), ``+key=value`` / ``++key=value``
    (``${args_append_hydra}`` / ``${args_override_hydra}``).
    """
    if isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise ValueError(f"overrides={args!r} is invalid: give a list of arguments (['--loss.tau=0.1']) or a mapping "
                         "({'loss.tau': 0.1})")
    out: dict[str, Any] = {}
    for arg in args:
        match = OVERRIDE.fullmatch(arg) if isinstance(arg, str) else None
        if not match:
            raise ValueError(
                f"cannot read the argument {arg!r}: overrides are written --dotted.key=value "
                "(or key=value, +key=value, ++key=value)"
            )
        try:
            out[match.group(1)] = parse_value(match.group(2))
        except ValueError as exc:
            raise ValueError(f"--{match.group(1)}=... is invalid: {exc}") from None
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


def flat_keys(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as ``{"dotted.key": value}`` (how sweeps and tables name parameters)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        for dotted, leaf in (flat_keys(value, path + ".") if isinstance(value, Mapping) and value else {path: value}).items():
            given_once(out, dotted, leaf)
    return out


def given_once(flat: dict[str, Any], key: str, value: Any, source: str = "the config") -> None:
    """``flat[key] = value``; a key given twice (nested and dotted, ``{"loss": {"tau": ..}, "loss.tau": ..}``)
    is an error naming both values."""
    if key in flat:
        fail(key, value, f"given twice in {source} (also ={flat[key]!r}): give it once, nested or dotted")
    flat[key] = value


def drops_options(key: str, old: Any, new: Any) -> str | None:
    """The one rule of merging layers: a layer that sets a component's name (``key`` = ``<section>.name``,
    e.g. ``loss.name``) to a new value drops the options earlier layers gave that component, so
    ``--loss.name=aninfonce`` never inherits InfoNCE's ``tau``. The section whose options go, or None."""
    section = key[: -len(".name")] if key.endswith(".name") else None
    return section if section in COMPONENT_SECTIONS and old != new else None


def merge_layer(config: dict[str, Any], layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Apply one layer (nested or flat dotted keys) over ``config`` and return the result.

    A component whose ``name`` the layer changes starts from ``{"name": new}``.
    """
    merged = copy.deepcopy(config)
    flat: dict[str, Any] = {}
    for key, value in layer.items():
        nested = isinstance(value, Mapping) and value and (key in _SECTIONS or _component_prefix(key))
        for dotted, leaf in (flat_keys({key: value}) if nested else {key: value}).items():
            given_once(flat, dotted, leaf, source)
    # a component given as a bare string means {"name": string}
    for key in list(flat):
        if key in COMPONENT_SECTIONS and isinstance(flat[key], str):
            flat[f"{key}.name"] = flat.pop(key)
    for key, value in flat.items():
        try:
            old = _get(merged, key)
        except (KeyError, TypeError):
            old = None
        section = drops_options(key, old, value)
        if section is not None:
            _set(merged, section, {"name": value})
    for key, value in flat.items():
        section = _component_prefix(key)
        if section is None and key not in LEAVES and key not in metric_switches(key):
            fail(key, value, f"unknown config key (from {source}){suggest(key)}")
        if key in COMPONENT_SECTIONS:
            if not isinstance(value, Mapping):
                fail(key, value, f"a mapping with a 'name' entry (from {source})")
            value = dict(value)
        _set(merged, key, value)
    return merged


def metric_switches(key: str) -> dict[str, tuple[bool, str]]:
    """The ``eval.*`` switches metrics declare themselves (:func:`identifiable_cl.evaluation.catalog.switches`),
    read only for a key ``eval.<name>`` the schema does not hold: the catalog and its metric plugins are imported
    no sooner."""
    if not key.startswith("eval.") or key in LEAVES:
        return {}
    from identifiable_cl.evaluation.catalog import switches

    return switches()


def suggest(key: str) -> str:
    import difflib

    known = list(LEAVES) + [f"{s}.name" for s in COMPONENT_SECTIONS] + list(metric_switches(key))
    if key.strip() != key and key.strip() in known:
        return f"; {key!r} has spaces around it: did you mean {key.strip()!r}?"
    close = difflib.get_close_matches(key, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else f"; top-level keys: {', '.join(DEFAULTS)}"


def validate(config: Mapping[str, Any]) -> None:
    """Every key's type and range (see :data:`SCHEMA`); components are checked by
    :func:`identifiable_cl.components.check`."""
    if not isinstance(config, Mapping):
        fail("config", config, "expected a mapping of config sections, as load_config returns")
    for key, leaf in LEAVES.items():
        leaf.check(key, _get(config, key))
    evaluation = config.get("eval")
    for key, value in ((f"eval.{k}", v) for k, v in (evaluation.items() if isinstance(evaluation, Mapping) else ())):
        if key not in LEAVES and key not in metric_switches(key):
            fail(key, value, f"unknown config key{suggest(key)}")
        if key not in LEAVES and not isinstance(value, bool):
            fail(key, value, "expected bool: a metric's switch")
    for section in COMPONENT_SECTIONS:
        spec = _get(config, section)
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            fail(section, spec, "a mapping with a 'name' entry")


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
    if Path(path).exists():
        kind = "a folder" if Path(path).is_dir() else "not a regular file"
        raise ValueError(f"config file {str(path)!r} is {kind}: give a YAML file or a packaged preset "
                         f"({', '.join(preset_names())})")
    raise ValueError(
        f"config file {str(path)!r} does not exist and is not a packaged preset "
        f"(presets: {', '.join(preset_names())})"
    )


