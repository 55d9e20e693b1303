"""Weights & Biases tracking: the run's config, metrics records, figures and summary.

:func:`open_wandb` returns None when ``wandb`` is not installed or the mode is
``disabled``. The mode is ``config["wandb"]["mode"]`` when set, else
``WANDB_MODE``; without credentials (no ``WANDB_API_KEY`` or
``WANDB_IDENTITY_TOKEN_FILE``, no ``.netrc`` entry for the W&B host) an online
mode becomes ``offline``, so a run never prompts for a key or waits on the
network. The W&B files go to ``RUN_DIR/wandb/`` (offline: ``offline-run-*``,
uploaded later with ``wandb sync RUN_DIR/wandb/offline-run-*``).

Project, group, name, tags, entity, job type and notes come from the config's
``wandb`` section when set there (a value equal to the default counts as
unset), else from W&B's standard variables ``WANDB_PROJECT``,
``WANDB_RUN_GROUP``, ``WANDB_NAME``, ``WANDB_TAGS``, ``WANDB_ENTITY``,
``WANDB_JOB_TYPE``, ``WANDB_NOTES``, else the default project and the run
directory's name.

The run's config is logged once, as flat dotted keys (``{"loss.tau": 0.1, ...}``,
:func:`identifiable_cl.config.flat_keys`): the names sweep parameters have.
Inside a sweep (``WANDB_SWEEP_ID`` set by an agent, or ``WANDB_SWEEP_PARAM_PATH``
set by the local runner) ``wandb.init`` itself merges the parameters from
``WANDB_SWEEP_PARAM_PATH`` into that config, so a swept ``loss.tau`` and the
run's ``loss.tau`` are one entry; an agent's sweep also gives the project.

With ``wandb.verbose: false`` (the default) W&B prints nothing (no banner,
history or summary lines) and does not capture the console; ``true`` keeps
W&B's own output.

One run is one W&B run: its id is chosen when the run directory is made (``WANDB_RUN_ID``, as a sweep agent or the
local runner sets it, or a new one) and kept in ``meta.json``; every resume passes it back with
``resume="allow"`` (:func:`open_wandb`). A resumed run logs again from its checkpoint's step, so W&B, whose steps
only go forward, keeps the records it already had for the steps between that checkpoint and the interruption.

Records are logged at their training step; a list of numbers (e.g. the learned
Λ̂) is logged as one scalar per entry, ``key/0``, ``key/1``, ..., so W&B draws
each over time; figures are logged as ``figures/<name>`` images.
"""

from __future__ import annotations

import netrc
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from identifiable_cl.tracking import Tracker

DEFAULT_HOST = "https://api.wandb.ai"
ENV_KEYS = {"project": "WANDB_PROJECT", "group": "WANDB_RUN_GROUP", "name": "WANDB_NAME", "tags": "WANDB_TAGS",
            "entity": "WANDB_ENTITY", "job_type": "WANDB_JOB_TYPE", "notes": "WANDB_NOTES"}
QUIET_SETTINGS = {"silent": True, "console": "off"}
"""``wandb.init``'s settings under ``wandb.verbose: false``: none of W&B's messages, no console capture."""
MODES = ("online", "offline", "disabled", "shared")
LEGACY_MODES = {"dryrun": "offline", "run": "online"}


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """Whether W&B would find a key without prompting: env variables or a .netrc entry for its host."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(environ.get("WANDB_BASE_URL") or DEFAULT_HOST).netloc
    home = Path(environ.get("HOME") or Path.home())
    path = Path(environ["NETRC"]).expanduser() if environ.get("NETRC") else home / ".netrc"
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def resolve_mode(config_mode: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The W&B mode to use: config, else ``WANDB_MODE``, else online; online without credentials → offline."""
    environ = os.environ if environ is None else environ
    source = "wandb.mode" if config_mode else "WANDB_MODE"
    given = config_mode or environ.get("WANDB_MODE") or "online"
    mode = LEGACY_MODES.get(given, given)
    if mode not in MODES:
        raise ValueError(f"{source}={given!r} is invalid: allowed: {', '.join(MODES)}")
    if mode in ("online", "shared") and not has_credentials(environ):
        return "offline"
    return mode


def init_arguments(config: Mapping[str, Any], run_dir: Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments of ``wandb.init`` for this run (see the module docstring for the precedence)."""
    from identifiable_cl.config import DEFAULTS, flat_keys

    environ = os.environ if environ is None else environ
    section = dict(config.get("wandb") or {})
    defaults = DEFAULTS["wandb"]
    kwargs: dict[str, Any] = {}
    for key, variable in ENV_KEYS.items():
        value = section.get(key)
        if value not in (None, [], "") and value != defaults[key]:
            kwargs[key] = value
        elif not environ.get(variable):
            fallback = {"project": defaults["project"], "name": Path(run_dir).name}.get(key)
            if fallback:
                kwargs[key] = fallback
    kwargs.update(mode=resolve_mode(section.get("mode"), environ), dir=str(run_dir), config=flat_keys(config))
    if not section.get("verbose", defaults["verbose"]):
        kwargs["settings"] = dict(QUIET_SETTINGS)
    return kwargs


def expand_lists(record: Mapping[str, Any]) -> dict[str, Any]:
    """``{"lambda_hat": [a, b]}`` → ``{"lambda_hat/0": a, "lambda_hat/1": b}``; other values unchanged."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            out.update({f"{key}/{i}": v for i, v in enumerate(value)})
        else:
            out[key] = value
    return out


def piece_of(folder: str, run_id: str) -> bool:
    """Whether W&B's folder ``folder`` (``offline-run-<time>-<id>``, or ``run-...`` online; a second start in the same
    second adds ``-1``, ``-2`` ...) holds a piece of the W&B run ``run_id``."""
    return re.fullmatch(rf"(offline-)?run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?", folder) is not None


def continued(run_id: str, run_dir: Path, step: int, environ_id: str | None = None) -> str:
    """The line a resumed run prints about its W&B run ``run_id``: continued from ``step``, with the earlier pieces
    found in ``run_dir/wandb`` or none (a copied folder, deleted files), and a ``WANDB_RUN_ID`` that is not used."""
    pieces = [p for p in (Path(run_dir) / "wandb").glob("*run-*") if piece_of(p.name, run_id)]
    line = f"W&B: continuing the run's W&B run {run_id} from step {step}"
    line += (f" ({len(pieces)} earlier piece{'s' if len(pieces) != 1 else ''} in {Path(run_dir) / 'wandb'})" if pieces
             else f"; none of its earlier files is in {Path(run_dir) / 'wandb'} (a copied run directory, or deleted "
                  "files): W&B joins this piece to that run wherever the earlier ones were synced")
    if environ_id and environ_id != run_id:
        line += f"; WANDB_RUN_ID={environ_id} is not used: the run keeps the id it began with"
    return line


class WandbTracker(Tracker):
    """Mirrors a run's records, figures and summary into one W&B run."""

    def __init__(self, run: Any):
        self.run = run

    def log(self, step: int, record: Mapping[str, Any]) -> None:
        self.run.log(expand_lists({k: v for k, v in record.items() if k != "step"}), step=step)

    def log_figures(self, step: int, figures: Mapping[str, Path]) -> None:
        import wandb

        self.run.log({f"figures/{name}": wandb.Image(str(path)) for name, path in figures.items()}, step=step)

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """Finish the W&B run; a W&B that fails here (its service stopped by the same signal that stopped the
        run, say) is reported on stderr and changes nothing else: the run's own files are complete."""
        try:
            if summary is None:
                self.run.finish(exit_code=1)
            else:
                self.run.summary.update(dict(summary))
                self.run.finish()
        except Exception as exc:  # W&B's own errors have no common base class
            print(f"W&B could not finish the run ({type(exc).__name__}: {exc}); its files in the run directory "
                  "are complete", file=sys.stderr)


def open_wandb(
    config: Mapping[str, Any], run_dir: Path, shared: bool = False, run_id: str | None = None, name: str | None = None,
    resumed_at: int | None = None,
) -> WandbTracker | None:
    """A W&B tracker for this run, or None when ``wandb`` is not installed or W&B is disabled.

    ``run_id``: the run's own W&B run id (``meta.json``'s), passed as ``wandb.init(id=..., resume="allow")``, so
    that a resumed, requeued or restarted run continues the one W&B run it began, online and offline (each offline
    piece an ``offline-run-*-<id>`` folder that ``wandb sync`` joins); on a resume from step ``resumed_at`` one line
    on stderr says which W&B run goes on, and whether its earlier files are in this run directory.

    ``shared``: the run is one of several W&B runs open side by side in this process (packed
    runs); each gets a new W&B run instead of finishing the one before, named
    by ``wandb.name``, else ``name`` (a sweep's name for the run), else its run directory (not by
    ``WANDB_NAME``, which cannot name several runs).

    A failure to start W&B is reported on stderr and the run goes on with its own files only.
    """
    kwargs = init_arguments(config, Path(run_dir))
    if kwargs["mode"] == "disabled":  # before importing wandb, which takes seconds
        return None
    try:
        import wandb
    except ImportError:
        return None
    if shared:
        kwargs["reinit"] = "create_new"
        kwargs.setdefault("name", name or Path(run_dir).name)  # one WANDB_NAME cannot name several runs
    if run_id is not None:
        kwargs.update(id=run_id, resume="allow")
        if resumed_at is not None:
            print(continued(run_id, Path(run_dir), resumed_at, os.environ.get("WANDB_RUN_ID")), file=sys.stderr)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    try:
        run = wandb.init(**kwargs)
    except Exception as exc:  # noqa: BLE001  (W&B must never take the run down)
        print(f"W&B could not start ({type(exc).__name__}: {exc}); the run continues with its own files only",
              file=sys.stderr)
        return None
    return WandbTracker(run)
