"""``icl bench``: speed figures of this machine, as ratios measured side by side in one process.

:mod:`identifiable_cl.benchmarks.sections` holds the sections of ``icl bench`` (sampling,
evaluation, loss, training, precision, packing, overhead); :mod:`identifiable_cl.benchmarks.evaluation`
the evaluation metrics' speed and accuracy against scikit-learn's kernel ridge search.
"""

from identifiable_cl.benchmarks.sections import DEVICES, SECTIONS, run_bench

__all__ = ["DEVICES", "SECTIONS", "run_bench"]
