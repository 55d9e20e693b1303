"""``icl bench``: speed figures of this machine, as ratios measured side by side in one process.

:mod:`identifiable_cl.benchmarks.sections` holds the sections of ``icl bench`` (sampling,
evaluation, loss, training, cost, precision, packing, overhead); :mod:`identifiable_cl.benchmarks.evaluation`
the evaluation metrics' speed and accuracy against scikit-learn's kernel ridge search;
:mod:`identifiable_cl.benchmarks.overhead` times a short run part by part in a fresh process;
:mod:`identifiable_cl.benchmarks.step_cost` counts a step's kernel launches and bytes as a GPU would run it. The names below
load on first use, so that the overhead probe's own start imports nothing it measures.
"""

from typing import Any

__all__ = ["DEVICES", "SECTIONS", "run_bench"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'identifiable_cl.benchmarks' has no attribute {name!r}")
    from identifiable_cl.benchmarks import sections

    return getattr(sections, name)
