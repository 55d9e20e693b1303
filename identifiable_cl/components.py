"""A run's components: resolved and checked from a config or a run directory, built, loaded back.

:func:`resolve` makes every run's spec: a new run's config (defaults, a YAML file, preset or mapping, overrides),
or a saved run's (its own files, with what resuming or evaluating may change), checked once by :func:`check`: every
key's type and range, then every component built cheaply (the process without its expensive draws, see
:func:`dgp.check_process`; the encoder; the loss), the rules between them (:func:`check_fit`), and one loss
evaluation on a three-row batch so that shape and batch-size problems surface here rather than at the first step.
It runs in well under a second and writes nothing; ``icl train``, ``icl sweep check/run/submit`` and ``icl
reproduce`` run it on every planned run first.

:func:`assemble` makes the run's :class:`~identifiable_cl.solvers.Solver` from its spec (:func:`build`: the
process's parameters drawn from the run's seed, or the saved process; the encoder, loss and optimizer; a saved
run's checkpoint loaded). :func:`load_config` (a new run's spec) and :func:`load_run` (a saved run's solver) are the API's
shorthands. The rules between components live in :mod:`identifiable_cl.rules`, the device and threads in
:mod:`identifiable_cl.devices`.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch import nn

import dgp
from dgp.checks import boolean, canonical, fail
from dgp.seeding import stream_seed
from identifiable_cl import linear, rundir
from identifiable_cl.config import (
    DEFAULTS,
    flat_keys,
    merge_layer,
    parse_overrides,
    resolve_config_path,
    validate,
)
from identifiable_cl.devices import resolve_device, use_threads
from identifiable_cl.encoders import ENCODERS, ViewEncoders
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.contract import traits
from identifiable_cl.solvers import Solver, solver_class
from identifiable_cl.spec import CHANGEABLE, MODES, RunSpec, checked_spec, refuse_going_back, refuse_overrides
from identifiable_cl.migration import migrate, schema_version
from identifiable_cl.rules import check_aux, check_eval_sizes, check_fit, check_views, with_cross_defaults
from identifiable_cl.yamlfiles import read_yaml_mapping



def models(config: Mapping[str, Any], process: dgp.Process) -> tuple[nn.Module, nn.Module]:
    """Encoder ``(N, D) -> (N, d)`` and loss on ``d``, initialised from the run's ``model`` and ``loss``
    streams (torch's default generator is seeded from each in turn, and restored afterwards). With views
    and ``encoder.shared: false``, one encoder per view (:class:`identifiable_cl.encoders.ViewEncoders`),
    initialised in view order from the ``model`` stream. ``encoder.normalize: auto`` gives unit-norm outputs
    (``sphere``) when the loss compares unit vectors (its ``needs_unit_norm``) and none otherwise; the
    normalisation draws nothing, so the encoder's weights are the same either way."""
    options = {k: v for k, v in config["encoder"].items() if k != "shared"}
    shared = boolean("encoder.shared", config["encoder"].get("shared", True))
    sizes = process.observed_dims
    if shared and len(set(sizes)) > 1:
        fail("encoder.shared", True, f"one encoder for every view needs views of one size; these observe "
             f"{', '.join(map(str, sizes))} dimensions: set encoder.shared to false")
    auto = options.get("normalize") == AUTO

    def encoders(normalize: str | None) -> nn.Module:
        torch.manual_seed(stream_seed(config["seed"], "model"))
        given = options if normalize is None else {**options, "normalize": normalize}
        built = [ENCODERS.build(given, key="encoder", input_dim=size, latent_dim=process.dim)
                 for size in (sizes[:1] if shared else sizes)]
        return built[0] if len(built) == 1 else ViewEncoders(built)

    with torch.random.fork_rng(devices=[]):
        encoder = encoders("none" if auto else None)
        torch.manual_seed(stream_seed(config["seed"], "loss"))
        loss = LOSSES.build(config["loss"], key="loss", dim=encoder.output_dim)
        if auto and traits(loss, config["loss"]["name"]).needs_unit_norm:
            encoder = encoders("sphere")
    return encoder, loss


AUTO = "auto"
"""``encoder.normalize: auto``: the normalisation the loss needs (see :func:`models`)."""


def check(config: Mapping[str, Any]) -> RunSpec:
    """Everything :func:`build` and the first training step would reject, as a ValueError naming the key; the
    config as it runs (:func:`with_cross_defaults`, and ``encoder.normalize: auto`` resolved) as a
    :class:`~identifiable_cl.spec.RunSpec`.

    Builds a checking process (:func:`dgp.check_process`), the encoder and the loss on the
    CPU, applies :func:`check_fit` and the rules of views (:func:`check_views`), makes the run's own step
    (:func:`identifiable_cl.solvers.solver_class`, the choice :func:`build` makes; for contrasted subsets of views
    its :func:`identifiable_cl.solvers.subsets.check_subsets`) and evaluates its objective once on
    ``min(batch_size, 3)`` anchors (a batch of one fails for losses that draw negatives from the batch).
    A part of a config (some sections, or dotted keys) is read over the defaults first, as :func:`resolve` reads it.
    """
    if isinstance(config, Mapping) and not set(DEFAULTS) <= set(config):
        return resolve(config)
    validate(config)
    config = with_cross_defaults(config)
    process = dgp.check_process(config["dgp"], seed=config["seed"])
    encoder, loss = models(config, process)
    if config["encoder"].get("normalize") == AUTO:
        config["encoder"]["normalize"] = "sphere" if encoder.unit_norm else "none"
    encoder, loss = encoder.to(process.dtype), loss.to(process.dtype)
    check_fit(config, encoder, loss)
    check_views(config, process, loss)
    check_aux(config, process, loss)
    check_eval_sizes(config, process, encoder)
    batch_size = config["train"]["batch_size"]
    try:
        with memory_named(config), torch.no_grad():
            step = solver_class(config, process, loss)(config, torch.device("cpu"), process, encoder, loss, None,
                                                       process.make_generator(0))
            step.objective(process.sample(min(batch_size, 3), process.make_generator(0)))
    except ValueError as exc:
        if batch_size == 1:
            fail("train.batch_size", 1, f"the loss needs at least 2 anchors per batch ({exc})")
        raise
    return RunSpec(config)


def resolve(source: Any = None, overrides: Sequence[str] | Mapping[str, Any] = (), mode: str = "new") -> RunSpec:
    """The spec of a run (:class:`~identifiable_cl.spec.RunSpec`), the one place where a config is resolved, its mode's
    policy applied (:mod:`identifiable_cl.spec`), and it is validated and fully checked (:func:`check`), once.

    ``new``: ``source`` None (the defaults), a YAML file or preset name, or a mapping (a config, or any part of one,
    nested or as dotted keys) read over the defaults; ``overrides`` (``{"loss.tau": 0.1}`` or ``["--loss.tau=0.1"]``)
    last. ``resume`` / ``evaluate``: ``source`` a run directory, read only: its config brought up to this code's
    files (:func:`identifiable_cl.migration.migrate`) over the defaults, the overrides the mode allows, its process
    (``dgp.pt``, which must describe the config's) and last checkpoint, which evaluating needs. Every problem is a
    ValueError naming the key, or the file.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is invalid: allowed: {', '.join(MODES)}")
    if not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    if mode != "new":
        return _saved(source, overrides, mode)
    if isinstance(source, RunSpec) and source.unchanged() and source.mode == "new" and not overrides:
        return source  # resolved and checked already
    if source is not None and not isinstance(source, (Mapping, str, Path)):
        raise ValueError(f"config of type {type(source).__name__} is invalid: give None, a YAML file or preset name, "
                         "or a mapping of config keys")
    config = copy.deepcopy(DEFAULTS)
    if isinstance(source, Mapping):
        overrides = {**flat_keys(source), **overrides}
    elif source is not None:
        path = resolve_config_path(source)
        config = merge_layer(config, read_yaml_mapping(path), str(path))
    return check(merge_layer(config, overrides, "the command line"))


def _saved(run_dir: Any, overrides: Mapping[str, Any], mode: str) -> RunSpec:
    """:func:`resolve` of a saved run."""
    if not isinstance(run_dir, (str, Path)):
        raise ValueError(f"run_dir of type {type(run_dir).__name__} is invalid: give a run directory's path")
    run_dir = Path(run_dir)
    if not rundir.is_run_dir(run_dir):
        raise ValueError(f"{str(run_dir)!r} is not a run directory (no {rundir.CONFIG} and {rundir.DGP})")
    checkpoint = run_dir / rundir.CHECKPOINT
    rundir.refuse_unplain(checkpoint)
    if mode == "evaluate" and not checkpoint.is_file():
        raise _untrained(run_dir)
    config, saved = rundir.read_config(run_dir), rundir.load_torch(run_dir / rundir.DGP)
    meta = rundir.read_meta(run_dir)
    try:
        config, saved = migrate(config, saved, schema_version(meta))
    except ValueError as exc:
        raise ValueError(f"{run_dir / rundir.META}: {exc}") from exc
    config = merge_layer(DEFAULTS, config, str(run_dir / rundir.CONFIG))
    refuse_overrides(mode, overrides, config)
    try:
        checked = check(merge_layer(config, overrides, "the command line") if overrides else config)
    except ValueError:
        try:
            check(config)  # on the error path only: is it the saved file's?
        except ValueError as exc:
            raise ValueError(f"{run_dir / rundir.CONFIG}: {exc}") from exc
        raise
    try:
        process = dgp.load_process(saved)
    except ValueError as exc:
        raise ValueError(f"{run_dir / rundir.DGP}: {exc}") from exc
    section, seed = dgp.process.own_seed(checked["dgp"], checked["seed"])
    ours = canonical({"dgp": dgp.process.resolve_config(section), "seed": seed})
    theirs = canonical({"dgp": process.config, "seed": process.seed})
    if ours != theirs:
        differing = sorted(k for k in set(ours["dgp"]) | {"seed"} if (ours["dgp"].get(k), ours.get(k)) != (theirs["dgp"].get(k), theirs.get(k)))
        raise ValueError(
            f"{run_dir / rundir.CONFIG} and {run_dir / rundir.DGP} describe different processes "
            f"(dgp keys {', '.join(differing)} differ); restore the run's own config.yaml"
        )
    state = rundir.load_torch(checkpoint) if checkpoint.is_file() else None
    if state is not None:
        try:
            reached = int(state["step"])
            if not 0 <= reached <= config["train"]["steps"]:
                raise ValueError(f"its step {reached} is outside 0..train.steps={config['train']['steps']}")
            for part in ("encoder", "loss"):  # a diverged run keeps its last finite checkpoint: NaN is damage
                for name, value in (state.get(part) or {}).items():
                    if isinstance(value, torch.Tensor) and value.is_floating_point() and not value.isfinite().all():
                        raise ValueError(f"its {part} tensor {name!r} holds values that are not finite")
        except (KeyError, TypeError, ValueError) as exc:
            raise _damaged(checkpoint, exc) from exc
        refuse_edited(config, state.get("trained"), run_dir)
        if mode == "resume":
            refuse_going_back(checked["train"]["steps"], reached)
    return RunSpec(checked, mode, run_dir, process, state)


def _untrained(run_dir: Path) -> ValueError:
    return ValueError(f"{str(run_dir)!r} has no {rundir.CHECKPOINT}: the run never reached its first step")


def refuse_edited(config: Mapping[str, Any], trained: Mapping[str, Any] | None, run_dir: Path) -> None:
    """A ValueError naming the first key of the run's ``config`` (its ``config.yaml`` as read, migrated, over the
    defaults) whose value differs from the one its checkpoint was trained with (``trained``, the sections a resume
    may not change; None in checkpoints written before it was kept), with both values."""
    if not trained:
        return
    ours, theirs = flat_keys(config), flat_keys(trained)
    for key in sorted(set(ours) & set(theirs)):
        if canonical(ours[key]) != canonical(theirs[key]):
            raise ValueError(f"{run_dir / rundir.CONFIG}: {key}={ours[key]!r} is not the {theirs[key]!r} its checkpoint "
                             f"was trained with: the file was edited; restore it, or train a new run with the new value")


def _damaged(checkpoint: Path, exc: BaseException) -> ValueError:
    return ValueError(f"{checkpoint}: does not fit the run's config or is damaged ({exc})")


def load_config(path: str | Path | None = None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> RunSpec:
    """The spec of a new run: defaults ← YAML file (or preset) ← overrides, fully checked once (:func:`resolve`),
    so a config this returns builds and trains."""
    if path is not None and not isinstance(path, (str, Path)):
        raise ValueError(f"config of type {type(path).__name__} is invalid: give None, a YAML file or a preset name")
    return resolve(path, overrides)


def build(config: Mapping[str, Any], process: dgp.Process | None = None) -> Solver:
    """Check ``config`` (:func:`check`; a :class:`~identifiable_cl.spec.RunSpec` that still holds what was checked
    is not checked again), then build process (unless given), encoder, loss and optimizer, and the run's solver
    (:func:`identifiable_cl.solvers.solver_class`) over them."""
    if not (isinstance(config, RunSpec) and config.unchanged()):
        config = check(config)
    with memory_named(config):
        return _assemble(config, process)


@contextlib.contextmanager
def memory_named(config: Mapping[str, Any]) -> Iterator[None]:
    """Running out of memory while the run is built (or checked) as a ValueError naming its largest sizes."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        first = dgp.process.allocation_failure(exc)
        if first is None:
            raise
        raise ValueError(f"out of memory while building the run ({first}); its largest sizes: {largest_sizes(config)}: "
                         "make the one that dominates smaller (nothing was written)") from None


NOT_SIZES = ("seed", "train.steps", "train.log_every", "train.eval_every", "train.checkpoint_every", "train.threads",
             "train.loss_memory")
"""Integer keys that size no tensor."""


def largest_sizes(config: Mapping[str, Any], count: int = 3) -> str:
    """The ``count`` integer keys of ``config`` that size its tensors with the largest values (a list of integers,
    such as ``encoder.widths``, by its largest), as ``key=value`` for an out-of-memory message."""
    sizes = {}
    for key, value in flat_keys(config).items():
        values = value if isinstance(value, list) else [value]
        if key not in NOT_SIZES and values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            sizes[key] = max(values)
    ranked = sorted(sizes.items(), key=lambda item: -item[1])[:count]
    return ", ".join(f"{key}={value}" for key, value in ranked)


def _assemble(config: RunSpec, process: dgp.Process | None) -> Solver:
    device = resolve_device(config["device"])
    if config["train"]["threads"] is not None:
        use_threads(config["train"]["threads"])
    if process is None:
        process = dgp.build_process(config["dgp"], seed=config["seed"])
    process = process.to(device)
    encoder, loss = models(config, process)
    encoder = encoder.to(device=device, dtype=process.dtype)
    linear.use_backend(encoder, config["train"]["matmul"])
    loss = loss.to(device=device, dtype=process.dtype)
    groups = [{"params": list(encoder.parameters()), "lr": config["optim"]["lr"], "name": "encoder"}]
    param_groups = traits(loss).param_groups
    for i, group in enumerate(param_groups() if param_groups else [{"params": list(loss.parameters())}]):
        if group["params"]:
            groups.append({"params": group["params"], "lr": group.get("lr") or config["optim"]["loss_lr"], "name": f"loss{i}"})
    optimizer = torch.optim.Adam(groups, weight_decay=config["optim"]["weight_decay"])
    batches = process.make_generator(stream_seed(config["seed"], "train.batches"))
    return solver_class(config, process, loss)(config, device, process, encoder, loss, optimizer, batches)


def assemble(spec: RunSpec) -> Solver:
    """The solver of a run from its spec (:func:`resolve`): new, resumed and evaluated runs differ only in where the
    process (drawn from the seed, or the saved one) and the state (fresh, or the last checkpoint's) come from."""
    spec = checked_spec(spec, "assemble")
    c = build(spec, process=spec.process)
    if spec.state is not None:
        try:
            c.load_state_dict(spec.state)
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise _damaged(spec.run_dir / rundir.CHECKPOINT, exc) from exc
    return c


def load_run(run_dir: Path, overrides: Mapping[str, Any] | None = None, *, need_checkpoint: bool = True,
             mode: str = "resume") -> Solver:
    """The solver of a saved run at its last checkpoint, from its own files, opened to ``resume`` or to
    ``evaluate`` (:func:`resolve`, which says what ``overrides`` may change); nothing is written.
    ``need_checkpoint``: a run that never reached its first step is an error (evaluating always needs one)."""
    if mode not in CHANGEABLE:
        raise ValueError(f"mode={mode!r} is invalid: allowed: {', '.join(CHANGEABLE)}")
    spec = resolve(run_dir, overrides or {}, mode)
    if need_checkpoint and spec.state is None:
        raise _untrained(run_dir)
    return assemble(spec)
