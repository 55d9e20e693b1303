"""A sample of bad-input messages, frozen: each entry point says exactly this, in one line.

Restructuring the code behind them (where a config is resolved, checked, or a key named) must not change
a byte of what users read; a deliberate change of wording updates this file with it.
"""

import pytest

from identifiable_cl import api
from identifiable_cl.cli import main
from identifiable_cl.reproduce.experiment import EXPERIMENTS_DIR

CLI = [
    (['train', '--loss.tau=-1'], 2, 'icl train: error: loss.tau=-1 is invalid: must be > 0'),
    (['train', '--loss.taux=1'], 2, "icl train: error: loss.taux: unknown option(s) for losses 'infonce'; allowed: similarity, tau, learn_tau, negatives, reduction, lr, queue"),
    (['train', '--train.steps=abc'], 2, "icl train: error: train.steps='abc' is invalid: expected int"),
    (['train', '--dgp.conditional.name=nope'], 2, "icl train: error: dgp.conditional.name: unknown name 'nope' among the registered conditionals; available: anisotropic, ar1, content_style, gennorm, keep, laplace, normal, same_segment, vmf (if 'nope' comes from a plugin, a plugin that provides it may be missing: `icl plugins` lists what is installed)"),
    (['train', '--dgp.space.radius=0'], 2, "icl train: error: dgp.space.radius: unknown option(s) for spaces 'box'; allowed: low, high"),
    (['train', '--train.batch_size=1', '--loss.negatives=first_view_others'], 2, "icl train: error: train.batch_size=1 is invalid: the loss needs at least 2 anchors per batch (loss.negatives='first_view_others' draws negatives from the batch and needs at least 2 samples; got a batch of 1)"),
    (['train', '--train.matmul=gemm'], 2, "icl train: error: train.matmul='gemm' is invalid: allowed: auto, blas, onednn"),
    (['train', '--eval.n_centres=0'], 2, 'icl train: error: eval.n_centres=0 is invalid: must be >= 1'),
    (['train', '--device=cuda:7'], 2, "icl train: error: device='cuda:7' is invalid: CUDA is not available on this machine; use auto or cpu"),
    (['train', 'nosuchfile.yaml'], 2, "icl train: error: config file 'nosuchfile.yaml' does not exist and is not a packaged preset (presets: box, content_style, sphere)"),
    (['train', '--encoder.widths=[0]'], 2, 'icl train: error: encoder.widths=[0] is invalid: a list of positive integers, or null for the reference widths'),
    (['train', '--dgp.mixing.name=mlp', '--dgp.mixing.layers=-2'], 2, 'icl train: error: dgp.mixing.layers=-2 is invalid: must be an integer >= 1'),
    (['train', '--loss.name=aninfonce', '--loss.similarity=cosine'], 2, "icl train: error: loss.similarity: unknown option(s) for losses 'aninfonce'; allowed: lambda_init, seed, factor, negatives, reduction, unit_norm, lr"),
    (['train', '--dgp.negatives.name=tilted', '--dgp.negatives.beta=-1'], 2, 'icl train: error: dgp.negatives.beta=-1 is invalid: must be >= 0'),
    (['train', '--optim.lr=0'], 2, 'icl train: error: optim.lr=0 is invalid: must be > 0'),
    (['config', '--dgp.dim=0'], 2, 'icl config: error: dgp.dim=0 is invalid: must be >= 1'),
    (['evaluate', '/nonexistent_run_dir'], 2, "icl evaluate: error: '/nonexistent_run_dir' is not a run directory (no config.yaml and dgp.pt)"),
    (['reproduce', 'nosuch'], 2, "icl reproduce: error: experiment 'nosuch' not found (no experiment.yaml); experiments in {experiments}: atlas, contrastive_losses, daunhawer2023, ensembles, hard_negatives, hyvarinen2016, hyvarinen2017, hyvarinen2019, rusak2024, vonkugelgen2021, yao2024, zimmermann2021"),
    (['reproduce', 'rusak2024', '--scale', 'medium', '--seeds', '0'], 2, 'icl reproduce: error: --seeds 0: must be a whole number from 1 to 10,000'),
    (['reproduce', 'rusak2024', '--runs', 'nope'], 2, 'icl reproduce: error: --runs nope: allowed: run labels of rusak2024, comma-separated: infonce_bimodal, aninfonce_bimodal, infonce_linear, aninfonce_linear'),
    (['results', '/nonexistent_dir_for_results'], 2, "icl results: error: '/nonexistent_dir_for_results' does not exist"),
    (['plot', '/nonexistent_dir_for_plot'], 2, "icl plot: error: '/nonexistent_dir_for_plot': nothing to plot (no metrics.jsonl or readout.npz)"),
    (['sweep', 'check', '/nonexistent_sweep.yaml'], 1, "sweep file '/nonexistent_sweep.yaml' does not exist and is not a packaged sweep; packaged sweeps: ensemble, hard_negative_loss, hard_negatives, r24, r24_bayes, smoke, tau_random, vk21, z21"),
]

API = [
    ((None, {'loss': {'tau': 0}}), 'loss.tau=0 is invalid: must be > 0'),
    (('box', {'loss.nope': 1}), "loss.nope: unknown option(s) for losses 'infonce'; allowed: similarity, tau, learn_tau, negatives, reduction, lr, queue"),
    ((None, {'train.steps': 0}), 'train.steps=0 is invalid: must be >= 1'),
]


@pytest.mark.parametrize("argv,code,message", CLI, ids=[" ".join(argv) for argv, _, _ in CLI])
def test_cli_message(argv, code, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == code
    captured = capsys.readouterr()
    assert captured.err.strip() == message.format(experiments=EXPERIMENTS_DIR)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,message", API, ids=[repr(a) for a, _ in API])
def test_api_message(args, message):
    with pytest.raises(ValueError) as caught:
        api.load_config(*args)
    assert str(caught.value) == message
