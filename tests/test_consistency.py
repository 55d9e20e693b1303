"""Cross-run consistency (CEBRA's score) between runs of one process."""

import pytest
import torch

from identifiable_cl.cli import main
from identifiable_cl.components import load_config
from identifiable_cl.consistency import consistency, consistency_score
from identifiable_cl.training import Trainer


def test_the_score_is_one_for_an_affine_map_and_near_zero_for_independent_embeddings():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2000, 4, generator=g, dtype=torch.float64)
    a = torch.randn(4, 3, generator=g, dtype=torch.float64)
    assert consistency_score(h, h @ a + 2.0) == pytest.approx(1.0, abs=1e-12)
    assert abs(consistency_score(h, torch.randn(2000, 3, generator=g, dtype=torch.float64))) < 0.01


@pytest.mark.integration
def test_runs_of_one_process_are_compared_pairwise_beside_their_linear_r2(tmp_path, tiny, capsys):
    runs = {"a": {"seed": 0}, "b": {"seed": 0}, "c": {"seed": 5, "dgp.seed": 0, "train.steps": 1}, "alone": {"seed": 9}}
    for name, overrides in runs.items():
        Trainer.create(load_config(None, {**tiny, **overrides}), tmp_path / name, progress=False).run()
    (group,) = consistency([tmp_path / name for name in runs])  # "alone" has a process of its own
    assert [p.name for p in group.runs] == ["a", "b", "c"]
    pairs = dict(zip([(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)], group.scores))
    assert pairs[(0, 1)] == pairs[(1, 0)] == pytest.approx(1.0, abs=1e-9)  # one seed: the same encoder
    assert all(pairs[p] < 0.999 for p in [(0, 2), (2, 0), (1, 2), (2, 1)])  # one step of training against 20
    assert len(group.r2_linear) == 3
    assert main(["results", str(tmp_path), "--consistency"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| process | runs | consistency") and f"| {group.fingerprint[:12]} | 3 |" in table[2]
    assert main(["results", str(tmp_path / "alone"), "--consistency"]) == 2
    assert "--consistency: no two finished runs share a process" in capsys.readouterr().err
