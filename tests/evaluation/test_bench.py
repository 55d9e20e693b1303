from identifiable_cl.benchmarks import evaluation as bench


def test_bench_runs_and_reports_every_measurement():
    lines = []
    rows = bench.run(print_fn=lines.append, dim=2, n_fit=400, n_test=400, n_subsample=200, problems=("tanh",))
    assert [r["method"] for r in rows] == [
        "linear R² + MCC (Pearson, Spearman)",
        "nonlinear R², ours",
        "nonlinear R², ours",
        "nonlinear R², vK21 KRR grid",
        "nonlinear R², vK21 KRR grid",
        "nonlinear R², vK21 KRR grid",
    ]
    assert [r["n_fit"] for r in rows] == [400, 400, 200, 100, 200, 400]
    assert 2.0 <= rows[-1]["exponent"] <= 3.0 and rows[-1]["r2"] is None
    assert all(r["exponent"] is None for r in rows[:-1])
    assert all(r["seconds"] > 0 for r in rows)
    assert 0.5 < rows[4]["r2"] <= 1.0 and 0.5 < rows[2]["r2"] <= 1.0
    assert lines[0] == "threads per method: 1"
    assert lines[1].split()[:2] == ["problem", "method"]
    assert any("faster than vK21's grid search" in line for line in lines)
    assert any("linear R² + both MCCs" in line for line in lines)
