"""The fused operations (one Triton kernel each on a GPU) against the dense form and the blocked kernels.

Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors (:func:`fused.interpreted`); the same
kernels compile for CUDA. The eager implementation of the operations (what a step's count sees) is checked too.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from identifiable_cl.losses import AnInfoNCE, HardNegativeInfoNCE, InfoNCE, blocked, fused
from identifiable_cl.losses.base import DECOUPLED, NEGATIVE_SETS, SIMILARITIES
from identifiable_cl.benchmarks.step_cost import counted

from tests.losses.test_blocked import assert_same, dense_hard_negative, dense_infonce, inputs, value_and_grads

needs_triton = pytest.mark.skipif(not fused.triton_available() or torch.cuda.is_available(),
                                  reason="Triton is not installed, or compiles for the GPU here (tests/test_cuda.py)")
WAYS = ["eager", pytest.param("triton", marks=needs_triton)]
"""How the operations compute on a CPU: their eager implementation, or the Triton kernels interpreted."""


@contextlib.contextmanager
def fused_kernels(way: str):
    """The fused operations in force, computing ``way``."""
    with blocked.use_kernels("fused"), (fused.interpreted() if way == "triton" else contextlib.nullcontext()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's log(0) on rows past the end
            yield


CASES = ([pytest.param("triton", 70, n, marks=[needs_triton] + ([] if n == "symmetric" else [pytest.mark.integration]))
          for n in NEGATIVE_SETS]
         + [pytest.param("triton", 2, n, marks=[needs_triton, pytest.mark.integration]) for n in ("symmetric", "independent")]
         + [("eager", 70, n) for n in ("symmetric", "independent")])
"""Every similarity with the symmetric negatives by default; the other sets and B = 2 with ``-m integration``."""


@pytest.mark.parametrize("kind", SIMILARITIES)
@pytest.mark.parametrize("way,B,negatives", CASES)
def test_values_and_gradients_equal_the_dense_form(way, kind, negatives, B):
    """B = 70: two tiles of 64 rows and of 64 candidates, the second partial; B = 2: one partial tile."""
    loss = InfoNCE(dim=4, similarity=kind, tau=0.3, negatives=negatives).double()
    xs = inputs(B, 4, seed=B, shared=2 * B + 1 if negatives == "independent" else None)
    want = value_and_grads(lambda: dense_infonce(loss, *xs), xs)
    with fused_kernels(way):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-10)


def assert_gradients_match(loss, dense, xs, params, way, rtol=1e-10):
    """The fused operations' gradients of ``loss(*xs)`` with respect to ``params`` are ``dense(*xs)``'s."""
    want = torch.autograd.grad(dense(loss, *xs), params)
    with fused_kernels(way):
        got = torch.autograd.grad(loss(*xs), params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=rtol, atol=rtol / 100)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ["dot", "l1", "l3"])
@pytest.mark.parametrize("reduction", [DECOUPLED[0], pytest.param(DECOUPLED[1], marks=pytest.mark.integration)])
def test_decoupled_reduction_and_learnt_temperature(way, kind, reduction):
    loss = InfoNCE(dim=5, similarity=kind, tau=0.4, negatives="symmetric", reduction=reduction,
                   learn_tau=True).double()
    xs = inputs(67, 5, seed=3)
    assert_gradients_match(loss, dense_infonce, xs, [loss.temperature.log_tau, *xs[:2]], way)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("negatives", ["symmetric", "r24", "independent"])
def test_aninfonce_and_its_lambda(way, negatives):
    loss = AnInfoNCE(dim=4, negatives=negatives, unit_norm=True, seed=3).double()
    xs = inputs(11, 4, seed=4, shared=6 if negatives == "independent" else None)
    assert_gradients_match(loss, dense_infonce, xs, [loss.raw_lambda, *[x for x in xs if x is not None]], way)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ["cosine", "l2"])
@pytest.mark.parametrize("beta,tau_plus", [(1.5, 0.0), (0.7, 0.1)])
def test_two_multipliers_of_hard_negatives(way, kind, beta, tau_plus):
    if tau_plus > 0 and kind != "cosine":
        pytest.skip("debiasing needs cosine similarity")
    loss = HardNegativeInfoNCE(dim=3, similarity=kind, beta=beta, tau_plus=tau_plus, tau=0.8, learn_tau=True).double()
    xs = inputs(66, 3, seed=5)
    assert_gradients_match(loss, dense_hard_negative, xs, [loss.temperature.log_tau, *xs[:2]], way, rtol=1e-9)


@needs_triton
@pytest.mark.parametrize("kind", ["dot", "l1"])
def test_triton_kernels_equal_the_blocked_kernels_in_float32(kind):
    """Float32 at d = 10, B = 100 (2B = 200 stacked rows: four tiles): the interpreted kernels against the eager
    blocked kernels."""
    loss = InfoNCE(dim=10, similarity=kind, tau=0.1, negatives="symmetric")
    xs = inputs(100, 10, seed=6, dtype=torch.float32)
    with blocked.use_kernels("eager"):
        want = value_and_grads(lambda: loss(*xs), xs)
    with fused_kernels("triton"):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 2e-5)


def test_each_pass_is_one_launch_and_the_traffic_grows_with_the_batch_not_its_square():
    """Counted as a GPU runs them: per pairing one lse and one gradient launch; doubling the batch doubles the
    bytes moved (no rows × candidates buffer), where the eager blocks' quadruple."""
    loss = InfoNCE(dim=8, similarity="l1", tau=0.5, negatives="symmetric")

    def traffic(B: int, *choice) -> int:
        h, hp, _ = inputs(B, 8, seed=7, dtype=torch.float32)
        with blocked.use_kernels(*choice):
            return counted(lambda: loss(h, hp).backward()).total().bytes

    fused_growth = traffic(1024, "fused") / traffic(512, "fused")
    eager_growth = traffic(1024, "eager", None, "cuda") / traffic(512, "eager", None, "cuda")
    assert 1.9 < fused_growth < 2.1 and eager_growth > 3.5
    names = []

    class Names(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    h, hp, _ = inputs(64, 8, seed=7, dtype=torch.float32)
    with blocked.use_kernels("fused"), Names():
        loss(h, hp).backward()
    assert names.count("icl.pair_lse") == names.count("icl.pair_grads") == 1  # symmetric: both views stacked, one pairing


def test_interpreting_needs_triton_imported_for_it():
    """In a process whose Triton compiles for a GPU, interpreting is a clear error (run in a fresh process)."""
    import subprocess
    import sys

    if not fused.triton_available() or torch.cuda.is_available():
        pytest.skip("Triton is not installed, or compiles for the GPU here")
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "from identifiable_cl.losses import fused\n"
            "try:\n    with fused.interpreted(): pass\nexcept RuntimeError as e: print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "set TRITON_INTERPRET=1 before the process first imports Triton" in out.stdout, out.stderr
