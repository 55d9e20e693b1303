"""Evaluation: pure metric functions on (z, h) arrays and wrappers that sample from a process.

Pure functions (torch tensors or numpy arrays in, plain Python results out): ``linear_r2``,
``nonlinear_r2``, ``mcc``, ``correlation_matrix``, ``block_r2``, ``block_aware_mcc``,
``random_rotation_reference`` (the chance level of block-aware MCC), ``lambda_recovery``,
``spectrum``, ``effective_rank``, ``metrics``, ``unmixed_mcc`` (MCC after a FastICA unmixing, as TCL and PCL
score); the metric catalog (``METRICS``, ``Metric``, ``Scoring``:
every measure declared once, :mod:`identifiable_cl.evaluation.catalog`). Wrappers: ``evaluate`` and
``identity_baseline`` draw held-out samples from a data-generating process and an encoder;
``linear_readout`` returns true and linearly read-out test latents for scatter plots.
"""

from identifiable_cl.evaluation.blocks import (
    RotationReference, block_aware_mcc, block_r2, haar_orthogonal, random_rotation_reference, split_by_block,
)
from identifiable_cl.evaluation.catalog import METRICS, Metric, Scoring
from identifiable_cl.evaluation.lambdas import lambda_recovery
from identifiable_cl.evaluation.mcc import correlation_matrix, mcc
from identifiable_cl.evaluation.regression import linear_r2, nonlinear_r2
from identifiable_cl.evaluation.records import BlockMCCResult, KernelR2Result, MCCResult, R2Result, SpectrumResult
from identifiable_cl.evaluation.spectrum import effective_rank, spectrum
from identifiable_cl.evaluation.unmixing import unmixed_mcc
from identifiable_cl.evaluation.wrappers import evaluate, identity_baseline, linear_readout, metrics

__all__ = [
    "BlockMCCResult",
    "KernelR2Result",
    "METRICS",
    "Metric",
    "MCCResult",
    "R2Result",
    "RotationReference",
    "Scoring",
    "SpectrumResult",
    "block_aware_mcc",
    "block_r2",
    "correlation_matrix",
    "effective_rank",
    "evaluate",
    "haar_orthogonal",
    "identity_baseline",
    "lambda_recovery",
    "linear_r2",
    "linear_readout",
    "mcc",
    "metrics",
    "nonlinear_r2",
    "random_rotation_reference",
    "spectrum",
    "split_by_block",
    "unmixed_mcc",
]
