"""The rules between a run's components, and the defaults one component sets for another.

:func:`with_cross_defaults` fills the options a loss takes from the process it meets (by the option's name, which
the loss contract documents: ``negatives``, ``segments``); :func:`check_fit`, :func:`check_views`,
:func:`check_aux` and :func:`check_eval_sizes` refuse what cannot train together, each a ValueError naming the key.
:func:`identifiable_cl.components.check` applies them all.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from torch import nn

import dgp
from dgp.checks import fail
from dgp.registry import option_parameters, user_options
from identifiable_cl.losses import LOSSES
from identifiable_cl.losses.contract import traits


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
    if declared.needs_unit_norm and not encoder.unit_norm:
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
    if not process.conditional.keeps_segment:
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
