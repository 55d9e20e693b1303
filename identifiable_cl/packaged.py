"""The data folders installed with the package: ``experiments/`` and ``sweeps/`` of the source tree.

``pyproject.toml`` installs them as the data packages ``identifiable_cl.experiments`` and
``identifiable_cl.sweep_files``, so a wheel carries them; a source checkout and an editable
install read them where they are.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def packaged_folder(package: str, source: str) -> Path:
    """The folder of the data package ``package``, installed from the source folder ``source``.

    A wheel installs ``source`` (a top-level folder of the source tree, such as ``experiments``)
    as the package, found here through its import path. An editable install or a plain checkout
    cannot import it (setuptools' editable import hook does not resolve a folder without
    ``__init__.py`` mapped outside its parent package), so there it is ``source`` in the source
    tree this module was imported from.
    """
    try:
        spec = importlib.util.find_spec(package)
    except ImportError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(location).is_dir():
            return Path(location)
    return Path(__file__).resolve().parents[1] / source


EXPERIMENTS_DIR = packaged_folder("identifiable_cl.experiments", "experiments")
"""The experiment folders: ``experiments/`` of the source tree, packaged as ``identifiable_cl.experiments``."""
SWEEPS_DIR = packaged_folder("identifiable_cl.sweep_files", "sweeps")
"""The sweep files: ``sweeps/`` of the source tree, packaged as ``identifiable_cl.sweep_files``."""
