"""The tests' one tiny preset: a run of about a second (20 steps of a one-layer encoder on small samples, linear
metrics only, no figures). A test that needs more of a run names what it changes: ``{**TINY, key: value}``."""

from __future__ import annotations

from typing import Any

TINY: dict[str, Any] = {
    "dgp.mixing.cond_draws": 200, "encoder.widths": [16], "train.batch_size": 32, "train.steps": 20,
    "train.log_every": 10, "train.eval_every": 10, "train.checkpoint_every": 10, "eval.n_fit": 64,
    "eval.n_test": 64, "eval.final_n_fit": 128, "eval.final_n_test": 128, "eval.nonlinear": False,
    "train.figures": False,
}


def tiny_args(**extra: Any) -> list[str]:
    """``TINY`` with ``extra`` (dotted keys given with ``__`` for ``.`` are not needed: pass a dict) as
    ``--key=value`` arguments of ``icl train``."""
    return [f"--{k}={v}".replace(" ", "") for k, v in {**TINY, **extra}.items()]


def tiny_config(**extra: Any) -> dict[str, Any]:
    """The resolved, checked config of ``TINY`` with ``extra`` overrides (dotted keys: ``**{"train.steps": 5}``)."""
    from identifiable_cl.components import load_config

    return load_config(None, {**TINY, **extra})
