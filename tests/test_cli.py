import subprocess
import sys

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
