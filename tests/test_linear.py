"""The encoder's Linear layers: the oneDNN products against F.linear, and when each backend applies."""

import contextlib
import json

import pytest
import torch
from torch.nn import functional as F

from identifiable_cl import linear, rundir
from identifiable_cl.components import build
from identifiable_cl.components import load_config
from identifiable_cl.linear import Linear, blas_only, prefers_onednn, resolve, use_backend

needs_onednn = pytest.mark.skipif(linear._operator() is None, reason="this torch has no oneDNN CPU operator")

AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n\nprocessor\t: 1\n"
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16\n"
AMD_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\n"


def test_auto_prefers_onednn_on_amd_cpus_with_avx512_only():
    assert prefers_onednn(AMD)
    assert not prefers_onednn(INTEL)
    assert not prefers_onednn(AMD_AVX2)
    assert not prefers_onednn("")


def layer_and_input(backend, bias=True, seed=0, rows=37, dtype=torch.float32):
    """The same layer and input (drawn in float32) for every backend, in ``dtype``."""
    torch.manual_seed(seed)
    layer = Linear(13, 9, bias=bias).to(dtype)
    layer.backend = backend
    x = torch.randn(rows, 13).to(dtype).requires_grad_()
    return layer, x


def value_and_grads(layer, x):
    y = layer(x)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * weights).sum().backward()
    grads = [x.grad] + [p.grad for p in layer.parameters()]
    return y.detach(), grads


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 37, 512])
def test_onednn_products_equal_the_float64_reference(bias, rows):
    layer, x = layer_and_input("onednn", bias=bias, rows=rows)
    got, got_grads = value_and_grads(layer, x)
    ref, ref_x = layer_and_input("blas", bias=bias, rows=rows, dtype=torch.float64)
    want, want_grads = value_and_grads(ref, ref_x)
    assert len(got_grads) == len(want_grads) == (3 if bias else 2)
    torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w.float(), rtol=1e-5, atol=1e-5 * float(w.abs().max()))


@needs_onednn
def test_onednn_is_used_and_differs_from_blas_only_in_rounding():
    layer, x = layer_and_input("onednn", rows=700)
    y = layer(x)
    assert "OneDNN" in type(y.grad_fn).__name__
    blas = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(y, blas, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["float64", "three_dims", "blas", "autocast", "blas_only"])
def test_fallbacks_are_f_linear_bit_for_bit(case):
    layer, x = layer_and_input("blas" if case == "blas" else "onednn", dtype=torch.float64 if case == "float64" else torch.float32)
    if case == "three_dims":
        x = x.detach().reshape(1, 37, 13)
    context = {"autocast": torch.autocast("cpu", dtype=torch.bfloat16), "blas_only": blas_only()}.get(case)
    with context if context is not None else contextlib.nullcontext():
        got = layer(x)
        want = F.linear(x, layer.weight, layer.bias)
    assert torch.equal(got, want)
    assert "OneDNN" not in type(got.grad_fn).__name__


def test_backend_names_are_checked():
    with pytest.raises(ValueError, match="train.matmul='gemm' is invalid: allowed: auto, blas, onednn"):
        resolve("gemm")
    assert resolve("blas") == "blas" and resolve("auto") in ("blas", "onednn")


def test_onednn_without_the_operator_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(linear, "_operator", lambda: None)
    with pytest.raises(ValueError, match="train.matmul='onednn' is invalid here"):
        resolve("onednn")


def test_build_sets_the_backend_of_every_layer_and_the_run_records_it(tmp_path):
    from identifiable_cl.training import Trainer
    from tests.tiny import tiny_config

    c = build(load_config(None, {"train.matmul": "blas", "dgp.mixing.cond_draws": 50}))
    layers = [m for m in c.encoder.modules() if isinstance(m, Linear)]
    assert len(layers) == 4 and all(m.backend == "blas" for m in layers)
    assert use_backend(c.encoder, "auto") == resolve("auto") and all(m.backend == "auto" for m in layers)
    Trainer.create(tiny_config(**{"train.steps": 2, "train.matmul": "blas"}), tmp_path / "run", progress=False).run()
    assert json.loads((tmp_path / "run" / rundir.META).read_text())["matmul"] == "blas"


@needs_onednn
def test_a_run_on_onednn_follows_the_blas_run_closely(tmp_path, monkeypatch):
    from identifiable_cl.training import Trainer
    from tests.tiny import tiny_config

    real = linear._operator()
    products = []

    def counted(*args):
        products.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(linear, "_operator", lambda: counted)
    losses, calls = {}, {}
    for backend in ("blas", "onednn"):
        run = tmp_path / backend
        products.clear()
        # lr 1e-4: Adam turns rounding differences in near-zero gradients into steps of size lr
        Trainer.create(tiny_config(**{"train.steps": 20, "train.log_every": 1, "optim.lr": 1e-4, "train.matmul": backend}),
                       run, progress=False).run()
        losses[backend], calls[backend] = [r["loss"] for r in rundir.read_metrics(run)], len(products)
        assert json.loads((run / rundir.META).read_text())["matmul"] == backend
    assert losses["onednn"][0] == pytest.approx(losses["blas"][0], rel=1e-6)
    assert losses["onednn"] == pytest.approx(losses["blas"], rel=1e-4)
    # whether the two differ in rounding depends on the CPU (on AMX Xeons they agree bit for bit): count the
    # oneDNN products instead: each of the 20 steps runs both of the encoder's layers and their ∂W through them
    assert calls["onednn"] - calls["blas"] >= 20 * 2 * 2


@needs_onednn
def test_a_second_derivative_through_onednn_is_refused_loudly():
    layer, x = layer_and_input("onednn")
    (grad,) = torch.autograd.grad(layer(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|double backward|twice"):
        grad.sum().backward()
