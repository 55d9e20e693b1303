"""Figures from a run's own files: what each panel shows, which figures exist, and ``icl plot``."""

import json
import sys

import numpy as np
import pytest

from identifiable_cl import rundir
from identifiable_cl.cli import main
from identifiable_cl.plots import MAX_POINTS, chance_level, draw_figures, lambda_figure, latents_figure, training_figure

PNG = b"\x89PNG\r\n\x1a\n"


def make_run(run_dir, lam=True, readout=True):
    run_dir.mkdir()
    rng = np.random.default_rng(0)
    if readout:
        z = rng.normal(size=(3000, 4))
        z_hat = z + 0.1 * rng.normal(size=z.shape)
        np.savez(run_dir / "readout.npz", z=z, z_hat=z_hat, r2_per_dim=np.array([0.99, 0.98, 0.5, 0.97]))
    records = []
    for step in (10, 20, 30):
        record = {"step": step, "loss": 2.0 / step, "r2_linear": step / 40, "mcc_pearson": step / 50}
        if lam:
            record.update(lambda_learned=[5.0 + step, 1.0 + step / 10, 20.0, 3.0], lambda_true=[25.0, 25.0, 5.0, 5.0])
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"r2_linear": 0.75}
    if lam:
        summary.update(lambda_learned=records[-1]["lambda_learned"], lambda_true=records[-1]["lambda_true"])
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_all_figures_are_written_as_png(tmp_path):
    paths = draw_figures(make_run(tmp_path / "run"))
    assert set(paths) == {"latents", "training", "lambda"}
    for name, path in paths.items():
        assert path == tmp_path / "run" / "figures" / f"{name}.png"
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5000


def test_latents_panels_show_each_dimension_and_its_r2():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(5000, 3))
    z_hat = 2 * z
    r2 = np.array([0.9, 0.5, 0.1])
    fig = latents_figure(z, z_hat, r2)
    scatters, bars = fig.axes[:3], fig.axes[3]
    for i, ax in enumerate(scatters):
        points = ax.collections[0].get_offsets()
        assert len(points) == MAX_POINTS
        np.testing.assert_allclose(points[:, 1], 2 * points[:, 0])
        assert np.isin(points[:, 0], z[:, i]).all()
        assert f"R² = {r2[i]:.3f}" in ax.get_title()
    np.testing.assert_allclose([p.get_height() for p in bars.patches], r2)


def test_training_panels_show_curves_and_identity_baseline():
    records = [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.0, "r2_linear": 0.5}, {"step": 30, "r2_linear": 0.7}]
    fig = training_figure(records, {"identity_r2_linear": 0.66})
    loss_ax, metric_ax = fig.axes
    assert [list(line.get_xydata()[:, 1]) for line in loss_ax.lines] == [[2.0, 1.0]]
    curve, baseline = metric_ax.lines
    assert list(curve.get_xdata()) == [20, 30] and list(curve.get_ydata()) == [0.5, 0.7]
    assert list(baseline.get_ydata()) == [0.66, 0.66] and baseline.get_color() == curve.get_color()


def test_lambda_panels_compare_sorted_values_and_trajectories():
    history = np.array([[1.0, 9.0], [2.0, 8.0]])
    fig = lambda_figure([8.0, 2.0], [5.0, 25.0], [10, 20], history)
    compare, over_time = fig.axes
    heights = [p.get_height() for p in compare.patches]
    assert heights == [5.0, 25.0, 2.0, 8.0]
    lines = [list(line.get_ydata()) for line in over_time.lines]
    assert [1.0, 2.0] in lines and [9.0, 8.0] in lines
    assert {tuple(line.get_ydata()) for line in over_time.lines[2:]} == {(5.0, 5.0), (25.0, 25.0)}


def test_only_the_figures_the_files_allow(tmp_path):
    assert set(draw_figures(make_run(tmp_path / "a", lam=False))) == {"latents", "training"}
    assert set(draw_figures(make_run(tmp_path / "b", lam=False, readout=False))) == {"training"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="nothing to plot"):
        draw_figures(tmp_path / "empty")


def test_icl_plot(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    assert main(["plot", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"lambda: {run / 'figures' / 'lambda.png'}" in out
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2


def test_without_matplotlib(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path / "run")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ModuleNotFoundError, match="identifiable-cl\\[plots\\]"):
        draw_figures(run)
    assert main(["plot", str(run)]) == 2 and "needs matplotlib" in capsys.readouterr().err
    assert not (run / "figures").exists()


def test_figures_are_titled_with_the_run_and_use_the_final_evaluation(tmp_path, monkeypatch):
    import yaml

    run = make_run(tmp_path / "run", lam=False)
    config = {"seed": 7, "loss": {"name": "infonce", "similarity": "l1", "tau": 0.1},
              "dgp": {"space": {"name": "box"}, "conditional": {"name": "laplace", "scale": 0.1}},
              "eval": {"final_n_fit": 20480, "final_n_test": 40960}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    summary = {"r2_linear": 0.9, "r2_linear_per_dim": [0.91, 0.92, 0.93, 0.94]}
    (run / "summary.json").write_text(json.dumps(summary))
    drawn = {}
    monkeypatch.setattr(rundir, "save_figure", lambda path, fig, dpi=110: drawn.__setitem__(path.stem, fig))
    draw_figures(run)
    title = "run: infonce(similarity=l1, tau=0.1) on box/laplace(scale=0.1), seed 7"
    for name in ("latents", "training"):
        assert drawn[name].get_suptitle() == title, name
    bars = drawn["latents"].axes[-1]
    np.testing.assert_allclose([p.get_height() for p in bars.patches], summary["r2_linear_per_dim"])
    assert "final evaluation, 20480 fit / 40960 test samples" in bars.get_title()


def test_block_r2_gets_its_own_panel_with_readable_legends():
    records = [{"step": s, "loss": 1.0 / s, "r2_linear": 0.5, "mcc_pearson": 0.4, "r2_linear_content": 0.9,
                "r2_linear_style": 0.1, "r2_linear_per_dim": [0.5]} for s in (10, 20)]
    fig = training_figure(records, {"identity_r2_linear_content": 0.6})
    loss, metrics, blocks = fig.axes
    assert [t.get_text() for t in metrics.get_legend().get_texts()] == ["linear R²", "MCC (Pearson)"]
    assert [t.get_text() for t in blocks.get_legend().get_texts()] == ["linear R² [content]", "linear R² [style]"]
    assert [line.get_ydata()[0] for line in blocks.lines if line.get_linestyle() == "--"] == [0.6]


def test_a_single_evaluation_is_drawn_as_bars_beside_the_baseline():
    records = [{"step": 5, "loss": 2.0}, {"step": 10, "loss": 1.0, "r2_linear": 0.8, "mcc_pearson": 0.7}]
    fig = training_figure(records, {"identity_r2_linear": 0.6, "identity_mcc_pearson": 0.4})
    _, scores = fig.axes
    heights = [p.get_height() for p in scores.patches]
    assert heights == [0.8, 0.7, 0.6, 0.4]
    assert [t.get_text() for t in scores.get_xticklabels()] == ["linear R²", "MCC (Pearson)"]
    assert "step 10" in scores.get_title()


def test_block_aware_mcc_curve_comes_with_its_random_rotation_reference():
    records = [{"step": s, "loss": 1.0, "mcc_pearson": 0.5, "mcc_block_aware": 0.8 + s / 100,
                "mcc_block_aware_random_rotation": 0.77} for s in (10, 20)]
    fig = training_figure(records, {"identity_mcc_block_aware": 0.9, "mcc_block_aware_random_rotation": 0.78})
    _, metrics = fig.axes
    legend = [t.get_text() for t in metrics.get_legend().get_texts()]
    assert legend == ["MCC (Pearson)", "block-aware MCC", "random rotation (block-aware MCC)"]
    chance = [line for line in metrics.lines if line.get_label() == "random rotation (block-aware MCC)"]
    assert len(chance) == 1 and chance[0].get_linestyle() == "--"
    assert list(chance[0].get_ydata()) == [0.78, 0.78]  # the summary's (final) value before the records'
    without_summary = training_figure(records, {}).axes[1]
    assert [line.get_ydata()[0] for line in without_summary.lines if "random rotation" in line.get_label()] == [0.77]
    bare = [{"step": s, "mcc_block_aware": 0.9} for s in (5, 6)]  # runs from before the reference existed
    assert not [line for line in training_figure(bare).axes[1].lines if "random rotation" in line.get_label()]


def test_block_aware_mcc_bar_comes_with_its_random_rotation_reference():
    records = [{"step": 10, "loss": 1.0, "mcc_pearson": 0.6, "mcc_block_aware": 0.95,
                "mcc_block_aware_random_rotation": 0.79}]
    fig = training_figure(records, {"identity_mcc_pearson": 0.4, "identity_mcc_block_aware": 0.85})
    _, scores = fig.axes
    assert [p.get_height() for p in scores.patches] == [0.6, 0.95, 0.4, 0.85]
    assert [t.get_text() for t in scores.get_xticklabels()] == ["MCC (Pearson)", "block-aware MCC"]
    (segment,) = [c for c in scores.collections if c.get_label() == "random rotation (block-aware MCC)"]
    (xy,) = segment.get_segments()
    assert list(xy[:, 1]) == [0.79, 0.79] and xy[0, 0] < 1.0 < xy[1, 0]  # over the block-aware MCC bars only
    assert "random rotation (block-aware MCC)" in [t.get_text() for t in scores.get_legend().get_texts()]


def _results(scores):
    """RunResults per label from ``{label: [summary of each seed]}``."""
    from pathlib import Path

    from identifiable_cl.aggregate import Run
    from identifiable_cl.reproduce.report import RunResults

    return {label: RunResults(label, [Run(Path(label), {}, (), summary) for summary in summaries])
            for label, summaries in scores.items()}


def _bars(results, metrics, losses=None):
    from identifiable_cl.reproduce.report import _bars_figure

    fig = _bars_figure({"runs": list(results), "metrics": metrics}, results, losses)
    return fig, dict(zip(metrics, fig.axes))


def test_score_panels_of_an_experiment_figure_share_one_axis_from_zero_to_one():
    results = _results({"a": [{"r2_linear": 0.02, "mcc_pearson": 0.9, "r2_nonlinear_content": 0.5,
                               "mi_infonce_bound": 5.0}],
                        "b": [{"r2_linear": 0.03, "mcc_pearson": 0.95, "r2_nonlinear_content": 0.6,
                               "mi_infonce_bound": 6.0}]})
    _, axes = _bars(results, ["r2_linear", "mcc_pearson", "r2_nonlinear_content", "mi_infonce_bound"])
    assert axes["r2_linear"].get_ylim() == axes["mcc_pearson"].get_ylim() == axes["r2_nonlinear_content"].get_ylim()
    assert axes["r2_linear"].get_ylim() == (0.0, 1.0)  # a block at 0.02 stays small beside one at 0.9
    assert axes["mi_infonce_bound"].get_ylim()[1] > 6.0  # a bound in nats keeps its own scale


def test_a_score_below_zero_is_written_at_the_floor_not_drawn_below_it():
    results = _results({"a": [{"r2_linear": -0.3}], "b": [{"r2_linear": 0.7}]})
    _, axes = _bars(results, ["r2_linear"])
    ax = axes["r2_linear"]
    assert ax.get_ylim() == (0.0, 1.0)
    (note,) = ax.texts
    assert note.get_text() == "-0.30" and note.xy == (0, 0.0)


def test_each_bar_has_its_identity_baseline_and_r2_its_stated_chance_level():
    results = _results({"a": [{"r2_linear": 0.8, "identity_r2_linear": 0.6, "mcc_pearson": 0.7, "identity_mcc_pearson": 0.4},
                              {"r2_linear": 0.9, "identity_r2_linear": 0.6, "mcc_pearson": 0.7, "identity_mcc_pearson": 0.4}],
                        "b": [{"r2_linear": 0.5, "identity_r2_linear": 0.65, "mcc_pearson": 0.3, "identity_mcc_pearson": 0.45}],
                        "c": [{"r2_linear": 0.1, "mcc_pearson": 0.2}]})  # a run from before baselines were recorded
    _, axes = _bars(results, ["r2_linear", "mcc_pearson"])
    for metric, expected in (("r2_linear", [0.6, 0.65]), ("mcc_pearson", [0.4, 0.45])):
        ax = axes[metric]
        (baseline,) = [line for line in ax.lines if line.get_label() == "identity g(z)"]
        centres = [bar.get_x() + bar.get_width() / 2 for bar in ax.patches]
        assert list(baseline.get_xdata()) == centres  # one marker over each bar
        assert baseline.get_ydata()[:2] == pytest.approx(expected) and np.isnan(baseline.get_ydata()[2])
        assert baseline.get_marker() == "_"
    (chance,) = [line for line in axes["r2_linear"].lines if line.get_label().startswith("chance")]
    assert list(chance.get_ydata()) == [0.0, 0.0] and chance.get_label() == "chance (0)"
    stated = chance_level("mcc_pearson")  # the catalog's word: a line where it states a level, none where it does not
    mcc_chance = [list(line.get_ydata()) for line in axes["mcc_pearson"].lines if line.get_label().startswith("chance")]
    assert mcc_chance == ([] if stated is None else [[stated, stated]])


def test_runs_are_coloured_by_the_family_of_their_loss():
    from matplotlib.colors import to_rgba

    from identifiable_cl.plots import FAMILY_COLOURS, OTHER_FAMILY, loss_family

    losses = {"infonce": "infonce", "aninfonce": "aninfonce", "nce": "nce", "triplet": "triplet",
              "margin": "margin", "pcl": "pcl", "plugin": "someone_elses"}
    results = _results({label: [{"r2_linear": 0.5}] for label in losses})
    fig, axes = _bars(results, ["r2_linear"], losses)
    colour = {label: bar.get_facecolor() for label, bar in zip(losses, axes["r2_linear"].patches)}
    assert colour["infonce"] == colour["aninfonce"] and colour["triplet"] == colour["margin"]
    family_colours = [colour[label] for label in ("infonce", "nce", "triplet", "pcl", "plugin")]
    assert len(set(family_colours)) == 5
    assert colour["plugin"] == to_rgba(FAMILY_COLOURS[OTHER_FAMILY]) and loss_family("someone_elses") == OTHER_FAMILY
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "InfoNCE", "NCE / NWJ", "margin / triplet", "nonlinear ICA (PCL, TCL, GCL)", OTHER_FAMILY]


def test_an_experiments_bar_figure_takes_each_runs_loss_from_its_config():
    from pathlib import Path

    from identifiable_cl.reproduce.experiment import parse_experiment
    from identifiable_cl.reproduce.report import FIGURES

    raw = {"name": "toy", "title": "toy", "paper": "nobody", "reference_source": "none",
           "base": {"loss.name": "infonce"}, "scales": {"paper": {}, "smoke": {}},
           "runs": [{"label": "a", "description": "a"}, {"label": "b", "description": "b", "overrides": {"loss.name": "nce"}},
                    {"label": "c", "description": "c", "overrides": {"loss.name": "aninfonce"}}],
           "metrics": ["r2_linear"]}
    experiment = parse_experiment(raw, Path("."), "toy.yaml")
    results = _results({label: [{"r2_linear": 0.5}] for label in "abc"})
    fig = FIGURES["bars"]({"runs": ["a", "b", "c"], "metrics": ["r2_linear"]}, results, experiment, "smoke")
    a, b, c = (bar.get_facecolor() for bar in fig.axes[0].patches)
    assert a == c != b


def test_score_panels_of_an_against_figure_share_the_same_axis():
    from pathlib import Path

    from identifiable_cl.reproduce.experiment import parse_experiment
    from identifiable_cl.reproduce.report import _against_figure

    raw = {"name": "toy", "title": "toy", "paper": "nobody", "reference_source": "none",
           "base": {"loss.name": "infonce"}, "scales": {"paper": {}, "smoke": {}},
           "runs": [{"label": "a", "description": "a", "overrides": {"loss.tau": 0.1}},
                    {"label": "b", "description": "b", "overrides": {"loss.tau": 0.5}}],
           "metrics": ["r2_linear"]}
    experiment = parse_experiment(raw, Path("."), "toy.yaml")
    results = _results({"a": [{"r2_linear": 0.9, "mcc_pearson": 0.05, "log_k": 6.2}],
                        "b": [{"r2_linear": -0.2, "mcc_pearson": 0.04, "log_k": 6.2}]})
    spec = {"series": [{"label": "InfoNCE", "x": "loss.tau", "runs": ["a", "b"]}],
            "metrics": ["r2_linear", "mcc_pearson", "log_k"]}
    r2, mcc, log_k = _against_figure(spec, results, experiment, "smoke").axes
    assert r2.get_ylim() == mcc.get_ylim() == (0.0, 1.0) != log_k.get_ylim()
    assert [(t.get_text(), t.xy) for t in r2.texts] == [("-0.20", (0.5, 0.0))] and not mcc.texts
