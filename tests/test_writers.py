"""Every file the package writes goes through one writer discipline (:mod:`identifiable_cl.rundir`): a temporary
file renamed into place, or a plain file opened without following links; a link planted where a file goes is
replaced or refused, what it points to never written; a folder or FIFO there is one line naming it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

import identifiable_cl
from identifiable_cl import rundir

PACKAGE = Path(identifiable_cl.__file__).parent
RAW_WRITES = re.compile(r"(?<!rundir)\.(write_text|write_bytes|savefig)\(|torch\.save\(|np\.savez\(|"
                        r"open\([^)]*['\"][wax]b?\+?['\"]")
"""Writes that follow a link at their path."""


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


WRITERS = {
    "write_text": lambda path: rundir.write_text(path, "new"),
    "write_json": lambda path: rundir.write_json(path, {"a": 1}),
    "write_bytes": lambda path: rundir.write_bytes(path, b"new"),
    "save_torch": lambda path: rundir.save_torch(path, {"t": torch.zeros(2)}),
    "save_npz": lambda path: rundir.save_npz(path, z=torch.zeros(2).numpy()),
    "save_figure": lambda path: rundir.save_figure(path, _figure()),
}


def test_the_package_writes_files_only_through_the_writers_of_rundir():
    """A table of writers by construction: any other write in the package's code (one that would follow a link)
    fails this test, naming its line."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "rundir.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RAW_WRITES.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_planted_link_is_replaced_and_its_target_left_alone(tmp_path, writer):
    target = tmp_path / "users_file"
    target.write_text("precious")
    path = tmp_path / "out" / "file.png"
    path.parent.mkdir()
    path.symlink_to(target)
    WRITERS[writer](path)
    assert target.read_text() == "precious"
    assert path.is_file() and not path.is_symlink()
    assert [p.name for p in path.parent.iterdir()] == ["file.png"]  # no temporary file left


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_fifo_in_the_way_is_one_line_naming_it_and_nothing_is_written(tmp_path, writer, kind):
    path = tmp_path / "file.png"
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(ValueError, match=rf"^'{re.escape(str(path))}' is a (folder|FIFO), not a file of its own: "
                                         "icl does not write through it"):
        WRITERS[writer](path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.png"]


def test_a_log_opens_only_as_a_plain_file(tmp_path):
    target = tmp_path / "users_file"
    target.write_text("precious")
    link = tmp_path / "stdout.log"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="is a symbolic link, not a file of its own"):
        rundir.open_log(link)
    assert target.read_text() == "precious"
    log = tmp_path / "run.log"
    log.write_text("an earlier, longer run's log\n")
    with rundir.open_log(log) as f:
        f.write("new\n")
    with rundir.open_log(log, append=True) as f:
        f.write("more\n")
    assert log.read_text() == "new\nmore\n"
