import subprocess
import sys

import pytest

import identifiable_cl
from identifiable_cl.cli import main


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "identifiable-cl" in out.stdout
    out = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "train" in out.stdout and "plugins" in out.stdout


def test_the_help_of_icl_and_icl_train_imports_no_torch():
    """The key listing comes from the config schema alone: a help screen starts no torch, numpy or dgp process."""
    probe = ("import sys\nfrom identifiable_cl.cli import main\n"
             "for argv in (['--help'], ['train', '--help']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "print(sorted(m for m in ('torch', 'numpy', 'dgp.process', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0 and "train.steps=3000" in out.stdout, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-300:]


def test_plugins_lists_every_kind(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for kind in ("spaces:", "marginals:", "conditionals:", "negatives:", "mixings:", "losses:", "encoders:"):
        assert kind in out
    for name in ("vmf", "anisotropic", "content_style", "infonce", "aninfonce", "mlp"):
        assert f"  {name} " in out


def test_unknown_argument_is_rejected(capsys):
    try:
        main(["train", "--bogus"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_bench_only_without_a_section_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--only"])
    assert exit_.value.code == 2 and "argument --only: expected at least one argument" in capsys.readouterr().err


def test_the_api_check_of_something_other_than_a_config_names_it():
    with pytest.raises(ValueError, match=r"^config=\[1, 2, 3\] is invalid: expected a mapping of config sections"):
        identifiable_cl.check([1, 2, 3])
