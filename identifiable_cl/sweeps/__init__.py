"""Sweeps: W&B sweep files checked against W&B's schema, expanded with W&B's semantics, and run
locally (``icl sweep run``), through submitit (``icl sweep submit``) or by W&B agents (``wandb agent``)."""
