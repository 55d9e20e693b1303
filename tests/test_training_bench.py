"""``icl bench``: its plain reference loss is the loss it is compared with, and every section reports."""

import json
import math

import pytest
import torch

from identifiable_cl import linear
from identifiable_cl.benchmarks import sections as bench
from identifiable_cl.losses import InfoNCE


@pytest.mark.parametrize("kind", bench.LOSS_KINDS)
def test_naive_reference_is_symmetric_infonce(kind):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(9, 4, generator=g, dtype=torch.float64)
    hp = h + 0.3 * torch.randn(9, 4, generator=g, dtype=torch.float64)
    want = InfoNCE(dim=4, similarity=kind, tau=0.1)(h, hp)
    torch.testing.assert_close(bench.naive_infonce(h, hp, kind, 0.1), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("label,cfg", bench.SAMPLING_CASES, ids=[label for label, _ in bench.SAMPLING_CASES])
def test_every_sampling_case_builds_the_process_its_label_names(label, cfg):
    from dgp import build_process

    process = build_process({**cfg, "mixing": {"name": "identity"}}, seed=0)
    space = {"sphere": "sphere", "box": "box", "R^n": "euclidean"}[label.split()[0]]
    assert process.config["space"]["name"] == space
    assert process.config["conditional"]["name"] == cfg["conditional"]["name"]


def test_loss_and_precision_sections_report():
    lines: list[str] = []
    rows = bench.bench_loss(batches=(16,), reps=1, memory=False, print_fn=lines.append)
    assert [r["similarity"] for r in rows] == list(bench.LOSS_KINDS)
    for row in rows:
        assert row["encoder_ms"] > 0 and row["eager"] > 0 and row["naive"] > 0
    assert any("naive/best" in line for line in lines)
    bench.loss_step("l1", 64, "blocks", torch.device("cpu"))()  # the accelerators' blocked column runs here too
    pairs = bench.bench_pair_losses(batches=(16,), reps=1, print_fn=lines.append)
    assert [r["loss"] for r in pairs] == list(bench.PAIR_LOSSES) and all(r["ms"] > 0 for r in pairs)
    out = bench.bench_precision(batch=16, steps=1, print_fn=lines.append)
    assert out["fp32"] > 0 and out["bf16"] > 0 and "bf16" in lines[-1]
    if linear._operator() is not None:
        assert out["fp32_onednn"] > 0 and "fp32 through oneDNN" in lines[-1]


def test_packing_section_reports(monkeypatch):
    monkeypatch.setattr(bench, "PACKING_CASES", [("tiny", None, {"encoder.widths": [8], "train.batch_size": 16})])
    lines: list[str] = []
    rows = bench.bench_packing(sizes=(1, 2), steps=1, print_fn=lines.append)
    assert [r["k"] for r in rows] == [1, 2] and all(r["ratio"] > 0 for r in rows)
    assert lines[-2].startswith("tiny")
    assert lines[-1] == "packs on this device take each run's own step in turn unless told (identifiable_cl.solvers.packed)"


def test_peak_memory_probe_measures_a_fresh_process():
    mib = bench.loss_peak_memory("cosine", 512, "naive")
    assert not math.isnan(mib) and mib > 0


@pytest.mark.slow
def test_overhead_section_reports_fresh_processes():
    lines = []
    out = bench.bench_overhead(steps=20, print_fn=lines.append)
    assert 0 < out["help_s"] < out["one_step_s"] and 0 < out["train_help_s"] < out["one_step_s"]
    assert 0 < out["one_step_shared_s"] and out["floor_ms"] > 0
    assert out["run_over_floor"] == pytest.approx(out["run_s"] / 20 / (out["floor_ms"] / 1e3))
    assert any("20-step default run" in line for line in lines)
    for parts in (out["parts"], out["parts_offline"]):
        named = {k: v for k, v in parts.items() if k not in ("total", "wall", "first_step")}
        assert all(v >= 0 for v in named.values()) and named["evaluation"] > 0 and named["identity"] > 0
        assert sum(named.values()) == pytest.approx(parts["wall"], rel=1e-3)
    assert out["parts"]["wandb"] < 0.01 < out["parts_offline"]["wandb"]
    assert sum(line.startswith("  parts (s): interpreter ") for line in lines) == 2
    if out["one_step_s"] > bench.TARGETS_S["one_step_s"]:
        fit = out["nonlinear_fit"]
        assert fit["gflop"] == pytest.approx(3 * 2 * 2 * 16384 * 1000**2 / 1e9) and fit["seconds"] > 0
        assert any(line.startswith("  why: the identity baseline and the final evaluation") for line in lines)


def test_the_overhead_probe_times_each_part_of_a_run(tmp_path, capsys):
    from identifiable_cl.benchmarks import overhead
    from tests.tiny import tiny_args

    assert overhead.main([str(tmp_path / "run"), *tiny_args(**{"train.steps": 2, "train.figures": True})]) == 0
    parts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(parts) == {*overhead.PARTS, "total", "first_step", "started_at", "exit_code"} and parts["exit_code"] == 0
    assert parts["started_at"] == overhead.STARTED_AT  # this process's first line, for a spawner's start latency
    assert all(parts[p] > 0 for p in ("build", "identity", "steps", "evaluation", "figures", "rest"))
    assert sum(parts[p] for p in overhead.PARTS) == pytest.approx(parts["total"], abs=1e-3)
    # the identity baseline is measured after training: the first step comes before it
    assert parts["first_step"] <= parts["total"] - parts["identity"]
