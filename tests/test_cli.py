import subprocess
import sys

from identifiable_cl.cli import main


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "identifiable-cl" in out.stdout
    out = subprocess.run([sys.executable, "-m", "identifiable_cl.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "train" in out.stdout and "plugins" in out.stdout


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
