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
shorthands.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn

import dgp
from dgp.checks import boolean, canonical, fail
from dgp.registry import option_parameters, user_options
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
from identifiable_cl.encoders import ENCODERS, ViewEncoders
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.contract import traits
from identifiable_cl.solvers import Solver, solver_class
from identifiable_cl.solvers.base import loss_arguments, observations, split_encodings
from identifiable_cl.solvers.subsets import check_subsets
from identifiable_cl.solvers.views import pair_loss, view_encodings
from identifiable_cl.spec import CHANGEABLE, MODES, RunSpec, checked_spec, refuse_going_back, refuse_overrides
from identifiable_cl.migration import migrate, schema_version
from identifiable_cl.yamlfiles import read_yaml_mapping



def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when present, else CPU; ``cuda`` without a GPU is an error naming the key."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("device", name, "CUDA is not available on this machine; use auto or cpu")
    return device


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""The cgroup (v2) CPU quota of this process's group: ``QUOTA PERIOD`` or ``max PERIOD``."""


def available_cpus(environ: Mapping[str, str] | None = None) -> int:
    """The CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota and by Slurm's
    ``SLURM_CPUS_PER_TASK`` (a cluster that does not pin a job's processes still gives it that many)."""
    environ = os.environ if environ is None else environ
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    slurm = environ.get("SLURM_CPUS_PER_TASK", "")
    return max(1, min(n, int(slurm)) if slurm.isdigit() else n)


def use_threads(threads: int | None = None) -> None:
    """torch's intra-op threads: ``threads`` when given (a run's ``train.threads``), capped at
    :func:`available_cpus` with a line on stderr saying so (more threads than CPUs only slow everyone on the
    machine down), else ``OMP_NUM_THREADS`` when set, else :func:`available_cpus` (torch's own default counts
    every core of the machine, given or not)."""
    if threads is not None:
        cpus = available_cpus()
        if threads > cpus:
            print(f"train.threads={threads} is more than the {cpus} CPU{'s' if cpus > 1 else ''} this process may use "
                  f"(its affinity, cgroup quota, SLURM_CPUS_PER_TASK); using {cpus}", file=sys.stderr)
            threads = cpus
        torch.set_num_threads(threads)
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(available_cpus())


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


def with_cross_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with the defaults that depend on another component filled in, so that any loss
    swapped in with ``--loss.name=NAME`` trains on the process it meets: where the process draws separate
    negatives (``dgp.negatives.name`` not none) and no part of the loss uses them yet, the loss, or each
    ensemble member, that takes a ``negatives`` option and sets none uses them (``negatives: independent``); a
    loss that takes a ``segments`` option and sets none tells apart the marginal's ``dgp.marginal.segments``
    where it sets one. A config that was valid without this stays as it was. ``encoder.normalize: auto`` is
    resolved by :func:`check`, which builds the loss."""
    config = copy.deepcopy(dict(config))
    if config["dgp"]["negatives"]["name"] != "none" and not _uses_separate_negatives(config["loss"]):
        config["loss"] = _independent_negatives(config["loss"])
    marginal = config["dgp"]["marginal"]
    segments = marginal.get("segments") if isinstance(marginal, Mapping) else None
    if segments is not None and _takes(config["loss"], "segments") and "segments" not in config["loss"]:
        config["loss"] = {**config["loss"], "segments": segments}
    return config


def _takes(spec: Any, option: str) -> bool:
    """Whether the loss ``spec`` names is registered and takes ``option``."""
    return (isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and spec["name"] in LOSSES
            and option in option_parameters(LOSSES.get(spec["name"], "loss.name"))[0])


def _uses_separate_negatives(spec: Any) -> bool:
    members = spec.get("members") if isinstance(spec, Mapping) else None
    return isinstance(spec, Mapping) and (spec.get("negatives") == "independent" or (
        isinstance(members, list) and any(_uses_separate_negatives(m) for m in members)))


def _independent_negatives(spec: Any) -> Any:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or spec["name"] not in LOSSES:
        return spec  # an unknown or malformed spec: its own check names it
    spec = dict(spec)
    if isinstance(spec.get("members"), list):
        spec["members"] = [_independent_negatives(member) for member in spec["members"]]
    elif spec["name"] == "ensemble" and "members" not in spec:
        from identifiable_cl.losses.ensemble import DEFAULT_MEMBERS

        spec["members"] = [_independent_negatives(dict(member)) for member in DEFAULT_MEMBERS]
    if "negatives" not in spec and "negatives" in option_parameters(LOSSES.get(spec["name"], "loss.name"))[0]:
        spec["negatives"] = "independent"
    return spec


def check_fit(config: Mapping[str, Any], encoder: nn.Module, loss: nn.Module) -> None:
    """The rules between components: unit-norm outputs for a cosine critic, and the DGP's
    separate negatives exactly when the loss uses them."""
    name, declared = config["loss"]["name"], traits(loss, config["loss"]["name"])
    if declared.needs_unit_norm and not getattr(encoder, "unit_norm", False):
        fail("encoder.normalize", config["encoder"].get("normalize"), f"loss {name!r} compares unit vectors "
             "(cosine similarity, or unit_norm) and needs unit-norm outputs: use 'sphere'")
    uses_negatives = declared.requires_negatives
    negatives = config["dgp"]["negatives"]["name"]
    if not uses_negatives and negatives != "none":
        takes = "negatives" in user_options(LOSSES.get(name))
        fail("dgp.negatives.name", negatives, f"loss {name!r} does not use the DGP's separate negatives (set "
             + ("its negatives option to 'independent', or " if takes else "") + "dgp.negatives.name to 'none')")
    if uses_negatives and negatives == "none":
        fail("dgp.negatives.name", "none", f"loss {name!r} uses the DGP's separate negatives: set dgp.negatives.name "
             f"to one of {', '.join(n for n in dgp.NEGATIVES.names() if n != 'none')}")


def check_views(config: Mapping[str, Any], process: dgp.Process, loss: nn.Module) -> None:
    """The rules of a process with views and of MoCo's queue: MoCo's queue holds keys of one view's momentum
    encoder and is refused with views; neither step is recorded as a CUDA graph (``train.capture``)."""
    queue = traits(loss).queue
    if process.view_count > 1 and queue:
        fail("loss.negatives", "queue", f"a process with {process.view_count} views (dgp.views) pairs every view with "
             "every other, and MoCo's queue keeps the keys of one: use negatives batch or independent")
    if config["train"]["capture"] == "graph" and (process.view_count > 1 or queue):
        why = "MoCo's queue keeps its counters on the host" if process.view_count == 1 else "views take a pass each"
        fail("train.capture", "graph", f"{why}, and its step is not recorded as a CUDA graph: use eager")


def check_aux(config: Mapping[str, Any], process: dgp.Process, loss: nn.Module) -> None:
    """A loss that reads each anchor's auxiliary variable u (its ``uses_aux``) needs a process whose marginal draws
    one, with as many segments as the loss tells apart, whose conditional keeps it (the loss reads the positive as
    an observation of the anchor's segment: ``keeps_segment``), and a single view (views pair observations of one
    latent, whose segment no view's pairing carries)."""
    declared = traits(loss, config["loss"]["name"])
    if not declared.uses_aux:
        return
    name, marginal, segments = config["loss"]["name"], process.marginal, declared.segments
    if marginal.segments is None:
        fail("loss.name", name, f"it reads each anchor's segment u, and dgp.marginal.name="
             f"{config['dgp']['marginal']['name']!r} draws none: use a marginal that does (segments)")
    if segments != marginal.segments:
        fail("loss.segments", segments, f"the process draws {marginal.segments} segments "
             "(dgp.marginal.segments): give both the same")
    if not getattr(process.conditional, "keeps_segment", False):
        fail("dgp.conditional.name", config["dgp"]["conditional"]["name"], f"loss {name!r} reads each positive as an "
             "observation of its anchor's segment, and this conditional does not keep the segment: use same_segment")
    if process.view_count > 1:
        fail("loss.name", name, f"it reads each anchor's segment u, and a process with {process.view_count} views "
             "(dgp.views) pairs views instead: use one view")


def check_eval_sizes(config: Mapping[str, Any], process: dgp.Process, encoder: nn.Module) -> None:
    """The evaluation's sample sizes against what its fits need, each named by its key: a regression on h (the
    encoder's d columns, or the observations' D for the identity baseline) needs at least d + 2 fit rows, and
    correlations of the scored latent columns (with views: each view's changed blocks too, and the
    permuted-content control at the final evaluation) with h one row more than either has columns."""
    from identifiable_cl.evaluation.views import ViewSample

    features = max([encoder.output_dim, *process.observed_dims])
    columns = {final: process.dim if process.view_count == 1 else ViewSample(
        process, 0, permuted=final and "content" in process.blocks).dim for final in (False, True)}
    e = config["eval"]
    for final, prefix in ((False, ""), (True, "final_")):
        least = {"n_fit": features + 2, "n_test": max(columns[final], features) + 1}
        for name, minimum in least.items():
            if e[prefix + name] < minimum:
                what = (f"the regressions on {features} columns need more rows than columns plus an intercept"
                        if name == "n_fit" else f"correlating {columns[final]} scored latent columns with "
                        f"{features} columns of h needs more rows than either has")
                fail(f"eval.{prefix}{name}", e[prefix + name], f"must be >= {minimum}: {what}")
    if e["in_sample_n"] is not None and e["in_sample_n"] < max(features + 2, max(columns[True], features) + 1):
        fail("eval.in_sample_n", e["in_sample_n"], f"must be >= {max(features + 2, max(columns[True], features) + 1)}: "
             "the in-sample scores fit and correlate on the same rows")


def check(config: Mapping[str, Any]) -> RunSpec:
    """Everything :func:`build` and the first training step would reject, as a ValueError naming the key; the
    config as it runs (:func:`with_cross_defaults`, and ``encoder.normalize: auto`` resolved) as a
    :class:`~identifiable_cl.spec.RunSpec`.

    Builds a checking process (:func:`dgp.check_process`), the encoder and the loss on the
    CPU, applies :func:`check_fit` (and the rules of views: :func:`check_views`, and for contrasted subsets of
    views :func:`identifiable_cl.solvers.subsets.check_subsets`), then evaluates the run's loss once on
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
        config["encoder"]["normalize"] = "sphere" if getattr(encoder, "unit_norm", False) else "none"
    encoder, loss = encoder.to(process.dtype), loss.to(process.dtype)
    check_fit(config, encoder, loss)
    check_views(config, process, loss)
    check_aux(config, process, loss)
    check_eval_sizes(config, process, encoder)
    contrasted = getattr(process.views, "contrasted", None) is not None
    subsets = check_subsets(config, process, encoder, loss) if contrasted else None
    batch_size = config["train"]["batch_size"]
    batch = process.sample(min(batch_size, 3), process.make_generator(0))
    try:
        with torch.no_grad():
            if subsets is not None:
                hs, negs = view_encodings(encoder, batch)
                subsets.objective(loss, hs, negs, process.make_generator(0))
            elif batch.views is not None:
                pair_loss(loss, *view_encodings(encoder, batch))
            else:
                loss(*split_encodings(encoder(observations(batch, process.dim)), batch), **loss_arguments(loss, batch))
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
    try:
        return _assemble(config, process)
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
