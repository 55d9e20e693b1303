"""The run path on a CUDA device: samplers, training and its exact resume, batched packs, the bench sections.

Every test here is marked ``cuda`` and skipped without a CUDA device (``pytest -m cuda`` selects them;
the device check runs them on a GPU machine).
"""

import time

import pytest
import torch

import dgp
from identifiable_cl import rundir
from identifiable_cl.benchmarks import sections as bench
from identifiable_cl.solvers.packed import batched_by_default
from identifiable_cl.training import Trainer, run_packed
from tests.test_packing import configs, losses
from tests.tiny import tiny_config

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch):
    import identifiable_cl.training as training

    monkeypatch.setattr(training, "draw_figures_if_possible", lambda run_dir: {})


@pytest.mark.parametrize("label,cfg", bench.SAMPLING_CASES, ids=[label for label, _ in bench.SAMPLING_CASES])
def test_samplers_on_cuda_draw_the_distribution_the_cpu_draws(label, cfg):
    """Same process (parameters moved, not redrawn), independent streams: the positives' displacement
    z⁺ − z and the observations x agree in mean and second moment within 6 standard errors."""
    n = 20000
    cpu = dgp.build_process({**cfg, "mixing": {"name": "mlp", "cond_draws": 200}, "dtype": "float64"}, seed=0)
    cuda = dgp.build_process({**cfg, "mixing": {"name": "mlp", "cond_draws": 200}, "dtype": "float64"}, seed=0).to("cuda")
    assert cuda.fingerprint() == cpu.fingerprint()
    a = cpu.sample(n, cpu.make_generator(1))
    b = cuda.sample(n, cuda.make_generator(2))
    for name, f in (("z", lambda s: s.z), ("x", lambda s: s.x), ("z+ - z", lambda s: s.z_pos - s.z)):
        u, v = f(a), f(b).cpu()
        for power in (1, 2):
            mu, mv = u**power, v**power
            se = (mu.var(0) / n + mv.var(0) / n).sqrt().clamp_min(1e-12)
            assert ((mu.mean(0) - mv.mean(0)).abs() / se).max() < 6, (label, name, power)


def test_training_on_cuda_resumes_as_the_uninterrupted_run(tmp_path):
    extra = {"device": "cuda", "dgp.dtype": "float64", "train.log_every": 5}
    full = Trainer.create(tiny_config(**extra, **{"train.steps": 60}), tmp_path / "full", progress=False).run()
    Trainer.create(tiny_config(**extra, **{"train.steps": 30}), tmp_path / "half", progress=False).run()
    resumed = Trainer.resume(tmp_path / "half", {"train.steps": 60}, progress=False).run()
    assert losses(tmp_path / "half") == pytest.approx(losses(tmp_path / "full"), rel=1e-9)
    assert resumed["r2_linear"] == pytest.approx(full["r2_linear"], rel=1e-9)
    assert rundir.read_json(tmp_path / "full" / rundir.META)["device"].startswith("cuda")


def test_packs_on_cuda_step_batched_and_follow_the_runs_alone(tmp_path):
    cfgs = [{**c, "device": "cuda"} for c in configs({})]
    alone = [Trainer.create(c, tmp_path / f"alone{i}", progress=False).run() for i, c in enumerate(cfgs)]
    trainers = [Trainer.create(c, tmp_path / f"packed{i}", progress=False) for i, c in enumerate(cfgs)]
    assert batched_by_default([t.c for t in trainers])
    packed = run_packed(trainers)
    for i, (a, p) in enumerate(zip(alone, packed)):
        assert losses(tmp_path / f"packed{i}") == pytest.approx(losses(tmp_path / f"alone{i}"), rel=1e-6)
        assert p["r2_linear"] == pytest.approx(a["r2_linear"], rel=1e-6)


def test_bench_sections_run_on_cuda(monkeypatch):
    device = bench.bench_device("cuda")
    lines: list[str] = []
    rows = bench.bench_loss(batches=(64,), reps=1, memory=True, device=device, print_fn=lines.append)
    assert all(r["eager"] > 0 and r["blocks"] > 0 and r["peak_mib"] > 0 for r in rows) and "on cuda" in lines[0]
    rows = bench.bench_training(batches=(64,), steps=1, device=device, print_fn=lines.append)
    assert all(r["steps_per_s"] > 0 and r["host_syncs"] is not None and r["captured_ms"] > 0 for r in rows)
    assert [r["captured_syncs"] for r in rows] == [0] * len(rows)
    out = bench.bench_precision(batch=64, steps=1, device=device, print_fn=lines.append)
    assert out["fp32"] > 0 and out["bf16"] > 0 and "fp32_onednn" not in out
    monkeypatch.setattr(bench, "PACKING_CASES", [("tiny", None, {"encoder.widths": [8], "train.batch_size": 16})])
    rows = bench.bench_packing(sizes=(1, 4), steps=1, device=device, print_fn=lines.append)
    assert [r["k"] for r in rows] == [1, 4] and all(r["captured"] > 0 for r in rows)
    assert lines[-1] == "packs on this device take one batched step unless told (identifiable_cl.solvers.packed)"


def test_cuda_events_agree_with_the_synchronised_wall_clock():
    x = torch.randn(4096, 4096, device="cuda")

    def work():
        for _ in range(20):
            x @ x

    events = bench.timed(work, reps=3, device=torch.device("cuda"))
    torch.cuda.synchronize()
    start = time.perf_counter()
    work()
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    assert 0.5 < events / wall < 2


def test_a_captured_step_replays_the_eager_steps_without_a_synchronisation():
    from identifiable_cl.components import build
    from identifiable_cl.solvers.packed import StackedPack

    extra = {"device": "cuda", "dgp.dtype": "float64"}
    eager, captured = build(tiny_config(**extra)), build(tiny_config(**extra, **{"train.capture": "graph"}))
    for _ in range(5):  # the eager warm-up, the recorded step and its first replay
        torch.testing.assert_close(captured.step(), eager.step(), rtol=1e-9, atol=0)
    assert captured.graph.graph is not None
    torch.cuda.set_sync_debug_mode("error")
    try:
        steps = [captured.step() for _ in range(3)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for got in steps:
        torch.testing.assert_close(got, eager.step(), rtol=1e-9, atol=0)
    configs = [tiny_config(**extra, **{"train.capture": "graph", "seed": seed}) for seed in (0, 1, 2)]
    alone, pack = [build(c) for c in configs], StackedPack([build(c) for c in configs])
    for _ in range(6):
        torch.testing.assert_close(torch.stack(pack.step()), torch.stack([c.step() for c in alone]), rtol=1e-9, atol=0)
    assert pack.graph.graph is not None


@pytest.mark.parametrize("kind", ["cosine", "l1", "l3"])
@pytest.mark.parametrize("negatives", ["symmetric", "r24", "independent"])
def test_fused_triton_kernels_on_cuda_equal_the_dense_form(kind, negatives):
    """The compiled kernels (the auto choice on CUDA) in float64, B = 70 (two partial tiles each way): the dot
    product and two powers, every exclusion rule (each a kernel of its own to compile; the interpreter checks the
    rest on a CPU, tests/losses/test_fused.py)."""
    from identifiable_cl.losses import InfoNCE, blocked, fused
    from tests.losses.test_blocked import assert_same, dense_infonce, inputs, value_and_grads

    if not fused.triton_available():
        pytest.skip("Triton is not installed")
    loss = InfoNCE(dim=4, similarity=kind, tau=0.3, negatives=negatives).double()
    xs = [x if x is None else x.detach().cuda().requires_grad_()
          for x in inputs(70, 4, seed=1, shared=141 if negatives == "independent" else None)]
    assert blocked._fused(blocked.Plan(kind, (), (), (1.0,), None, 1), xs[0], xs[0])
    want = value_and_grads(lambda: dense_infonce(loss, *xs), xs)
    got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-10)


def test_fused_kernels_on_cuda_agree_with_the_eager_blocks_at_z21s_batch():
    """Float32, B = 6144, d = 10, L1 (2B × 2B pairs): the compiled kernels against the eager blocked kernels."""
    from identifiable_cl.losses import InfoNCE, blocked
    from tests.losses.test_blocked import assert_same, inputs, value_and_grads

    loss = InfoNCE(dim=10, similarity="l1", tau=1.0)
    xs = [x.detach().cuda().requires_grad_() for x in inputs(6144, 10, seed=2, dtype=torch.float32)[:2]]
    with blocked.use_kernels("eager"):
        want = value_and_grads(lambda: loss(*xs), xs)
    with blocked.use_kernels("fused"):
        got = value_and_grads(lambda: loss(*xs), xs)
    assert_same(got, want, 1e-4)
