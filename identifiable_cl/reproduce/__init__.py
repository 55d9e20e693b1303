"""Reproducing the papers: experiments as data (``experiments/*/experiment.yaml``), run through the local
sweep runner, reported against the published numbers with a verdict per claim."""

from identifiable_cl.reproduce.runner import reproduce

__all__ = ["reproduce"]
