"""The scores of contrasted subsets of views (Yao et al. 2024) in the printed table, in ``icl results`` and in the
run's figure: every subset's blocks from every view of it, subsets without view 1 included."""

import itertools
import json
from pathlib import Path

import pytest

from identifiable_cl import rundir
from identifiable_cl.aggregate import Group, Run
from identifiable_cl.cli import main
from identifiable_cl.cli.tables import results_table, subset_group_tables, subset_table
from identifiable_cl.plots import SUBSET_SUMMARY_KEYS, subset_blocks, subsets_figure, view_blocks, view_metrics
from tests.test_subset_objective import YAO
from tests.tiny import TINY

SEEN = [{0, 1, 2, 3, 4}, {0, 1, 2, 4, 5}, {0, 1, 2, 3, 5}, {0, 1, 3, 4, 5}]
SUBSETS = [s for r in (2, 3, 4) for s in itertools.combinations(range(4), r)]


def key(view, kind, block, subset):
    prefix = "" if view == 0 else f"view{view + 1}_"
    return f"{prefix}{kind}_{block}_" + "_".join(str(v + 1) for v in subset)


def summary(offset=0.0):
    """A record of the paper's 4 views: distinct values per subset, view and block (shared 0.9 + ..., unshared
    0.01 · ...), the identity baseline 0.5 below; the per-latent blocks and the summary over subsets."""
    out = {"r2_linear": 0.5, "identity_r2_linear": 0.4, **{f"view{v}_r2_linear": 0.5 for v in (2, 3, 4)}}
    for b in range(6):
        out.update({("" if v == 0 else f"view{v + 1}_") + f"r2_linear_z{b}": 0.3 for v in range(4)})
    for i, subset in enumerate(SUBSETS):
        for v in subset:
            for kind in ("r2_linear", "r2_nonlinear"):
                shared = 0.9 + 0.001 * (10 * i + v) + offset
                out[key(v, kind, "shared", subset)] = shared
                out["identity_" + key(v, kind, "shared", subset)] = shared - 0.5
                out[key(v, kind, "unshared", subset)] = 0.01 * (i + v)
    for kind in ("r2_linear", "r2_nonlinear"):
        shared = [v for k, v in out.items() if k.startswith(("r2", "view")) and f"{kind}_shared_" in k]
        out.update({f"{kind}_shared_min": min(shared), f"{kind}_unshared_max": 0.13})
    return out


def test_every_subset_and_view_has_a_cell_in_the_printed_table_with_its_identity_baseline():
    record = summary()
    lines = subset_table(record)
    text = "\n".join(lines)
    assert [name for name, _ in subset_blocks(record)] == ["1_2", "1_3", "1_4", "2_3", "2_4", "3_4", "1_2_3", "1_2_4",
                                                           "1_3_4", "2_3_4", "1_2_3_4"]
    for kind, label in (("r2_nonlinear", "nonlinear R²"), ("r2_linear", "linear R²")):
        for subset in SUBSETS:
            name = "_".join(str(v + 1) for v in subset)
            (row,) = [line for line in lines if line.startswith(f"{label} [shared_{name}] ")]
            cells = [row[34 + 16 * v: 34 + 16 * (v + 1)].strip() for v in range(4)]
            for v in range(4):
                k = key(v, kind, "shared", subset)
                assert cells[v] == (f"{record[k]:.3f} [{record['identity_' + k]:.3f}]" if v in subset else "")
            (row,) = [line for line in lines if line.startswith(f"{label} [unshared_{name}] ")]
            assert [row[34 + 16 * v: 34 + 16 * (v + 1)].strip() for v in range(4)] == [
                f"{record[key(v, kind, 'unshared', subset)]:.3f}" if v in subset else "" for v in range(4)]
    assert f"least shared {record['r2_nonlinear_shared_min']:.3f}, largest unshared 0.130" in text
    assert text.index("nonlinear R² [shared_1_2]") < text.index("linear R² [shared_1_2] ")


def test_the_main_table_lists_the_subsets_once_and_the_view_blocks_keep_their_latents():
    record = summary()
    printed = results_table(record)
    assert printed.count("[shared_2_3_4]") == 2  # one row per regression, in the subset table only
    assert view_blocks(record) == ([f"z{b}" for b in range(6)], [1, 2, 3, 4])
    assert subset_table({"r2_linear": 0.5}) == [] and subset_blocks({"r2_linear_z0": 0.2}) == []


def test_icl_results_default_metrics_take_the_summary_over_subsets():
    metrics = view_metrics(summary())
    assert [m for m in metrics if m in SUBSET_SUMMARY_KEYS] == ["r2_nonlinear_shared_min", "r2_nonlinear_unshared_max"]
    assert not any("_shared_2_3_4" in m for m in metrics)


def test_the_group_tables_give_mean_and_std_over_seeds_for_every_subset_and_view():
    runs = [Run(Path(f"run{s}"), {"seed": s, "dgp.views.selection": "gumbel"}, ("seed",), summary(0.01 * s))
            for s in range(3)]
    text = subset_group_tables([Group(("gumbel",), {"dgp.views.selection": "gumbel"}, runs)])
    lines = text.splitlines()
    assert "dgp.views.selection=gumbel: each subset, from each view of it (3 seeds" in text
    (row,) = [line for line in lines if line.startswith("| nonlinear R² [shared_2_3_4] |")]
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    i = SUBSETS.index((1, 2, 3))
    means = [0.9 + 0.001 * (10 * i + v) + 0.01 for v in (1, 2, 3)]  # the mean over offsets 0, 0.01, 0.02
    assert cells == [""] + [f"{m:.3f} ± 0.010 [{m - 0.5:.3f}]" for m in means]
    assert len([line for line in lines if line.startswith("| ")]) == 2 * (2 * len(SUBSETS) + 1)  # + headers
    assert subset_group_tables([Group(("x",), {"k": 1}, [Run(Path("r"), {}, (), {"r2_linear": 1.0})])]) == ""


def test_the_figure_has_a_bar_per_subset_and_view_on_the_score_axis():
    pytest.importorskip("matplotlib")
    record = summary()
    record[key(2, "r2_nonlinear", "unshared", (1, 2))] = -0.4
    fig = subsets_figure(record, "a run")
    shared, unshared = fig.axes[:2]
    pairs = sum(len(s) for s in SUBSETS)
    assert len(shared.patches) == len(unshared.patches) == pairs == 28
    assert shared.get_ylim() == unshared.get_ylim() == (0.0, 1.0)
    heights = sorted(round(p.get_height(), 6) for p in shared.patches)
    want = sorted(round(record[key(v, "r2_nonlinear", "shared", s)], 6) for s in SUBSETS for v in s)
    assert heights == want
    assert any(t.get_text() == "-0.40" for t in unshared.texts)  # below the axis: written at its floor
    assert [t.get_text() for t in unshared.get_xticklabels()][9] == "views 2,3,4"


@pytest.mark.integration
def test_icl_train_and_icl_results_print_the_subsets_without_view_1(tmp_path, capsys):
    args = [f"--{k}={v}".replace(" ", "") for k, v in {**TINY, **YAO, "train.steps": 10}.items()]
    assert main(["train", "--out", str(tmp_path / "run"), *args]) == 0
    printed = capsys.readouterr().out
    (found,) = (tmp_path / "run").glob(f"*/{rundir.SUMMARY}")
    record = json.loads(found.read_text())
    for name in ("2_3", "2_4", "3_4", "2_3_4"):
        assert f"linear R² [shared_{name}] " in printed
        first = int(name[0])
        assert f"{record[f'view{first}_r2_linear_shared_{name}']:.3f}" in printed
    assert main(["results", str(tmp_path / "run")]) == 0
    table = capsys.readouterr().out
    assert "| linear R² [shared_2_3_4] |" in table and "r2_linear_shared_min" in table
