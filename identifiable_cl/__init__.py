"""identifiable-cl: when does a contrastive loss recover the true latent factors?

The Python API (:mod:`identifiable_cl.api`) is importable from here: ``resolve``, ``load_config``, ``check``,
``train``, ``load_run``, ``evaluate_run``, ``history``, ``results``, ``build``, ``Solver``, ``Trainer``, ``build_process``,
``load_process``, ``Process``, ``SCHEMA``. They load on first use, so ``import identifiable_cl``
stays quick.
"""

from importlib import metadata

try:
    __version__ = metadata.version("identifiable-cl")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"


API = (
    "Batch", "Process", "SCHEMA", "Solver", "TrainedRun", "Trainer", "build", "build_process", "check",
    "check_process", "evaluate_run", "history", "load_config", "load_process", "load_run", "resolve", "results",
    "train",
)
"""The names of the Python API (:mod:`identifiable_cl.api`), available here."""


def __getattr__(name: str):
    if name in API:
        from identifiable_cl import api

        return getattr(api, name)
    raise AttributeError(f"module 'identifiable_cl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
