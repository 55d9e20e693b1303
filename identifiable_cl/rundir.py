"""The files of one run. Everything is written atomically (temporary file, then rename).

::

    RUN_DIR/
      config.yaml     resolved config
      meta.json       schema version of these files, version, git revision, command, device, start time
      dgp.pt          the process: config, seed, drawn parameters, fingerprint
      checkpoint.pt   encoder, loss, optimizer, RNG states, step
      metrics.jsonl   one record per logging/evaluation step
      summary.json    final metrics (written last: its presence marks a finished run)
      stopped.json    why and when a diverged run stopped (instead of summary.json)
      readout.npz     true vs linearly read-out latents of the final evaluation
"""

from __future__ import annotations

import contextlib
import copy
import errno
import itertools
import fcntl
import io
import json
import math
import os
import platform
import re
import secrets
import socket
import stat
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

import identifiable_cl
from dgp.files import load_tensors
from identifiable_cl.yamlfiles import dump, read_yaml_mapping, regular_file
from identifiable_cl.stops import signals_held

SCHEMA_VERSION = 4
"""The version of the files this code writes in a run folder (``meta.json``'s ``schema_version``;
:mod:`identifiable_cl.migration` reads the earlier ones)."""
CONFIG, META, DGP, CHECKPOINT = "config.yaml", "meta.json", "dgp.pt", "checkpoint.pt"
METRICS, SUMMARY, READOUT = "metrics.jsonl", "summary.json", "readout.npz"
STOPPED = "stopped.json"
"""Written when the loss diverged: reason, step range and the step of the checkpoint kept."""
EVALUATION = "evaluation.json"
"""Written by ``icl evaluate``: the saved encoder re-evaluated at the final sample sizes."""
TMP_SUFFIX = ".tmp"
IDENTITY_CACHE = "ICL_IDENTITY_CACHE"
"""Environment variable: a folder where runs share their identity baselines, one ``identity-<key>.json`` per
process and evaluation (the local runner sets it to the sweep's ``.identity`` folder)."""


def _lock_file(folder: Path) -> Path:
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


def open_plain_file(path: Path, flags: int) -> int:
    """``os.open(path, flags)`` (``O_CREAT`` creates it 0666 less the umask) of a regular file only, never through
    a symbolic link: a link, a FIFO, a folder or another special file at ``path`` is a ValueError naming it, and
    what it points to is not touched."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _not_plain(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_plain(path)
    return fd


def refuse_unplain(path: Path) -> None:
    """A ValueError naming ``path`` when something other than a regular file is there (a link, a folder, a
    FIFO ...); nothing, when it is a regular file or absent."""
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
        raise _not_plain(Path(path))


def _not_plain(path: Path) -> ValueError:
    return ValueError(f"{str(path)!r} is {_kind(path)}, not a file of its own: icl does not write through it; "
                      "remove it (or choose another folder)")


def _kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "not a regular file"
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def lock(folder: Path) -> int | None:
    """Take the lock of ``folder`` (an ``flock`` of ``.<name>.lock`` beside it, in its existing parent, recording
    the holder's pid) without waiting: its file descriptor, or None when another process holds it. A process
    started with the descriptor inherits the lock; it is released by :func:`unlock` or when every holder ends.
    A lock path that is not a regular file (a link, a FIFO, a folder) is a ValueError naming it
    (:func:`open_plain_file`)."""
    fd = open_plain_file(_lock_file(folder), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def holder(folder: Path) -> str:
    """The pid recorded by the process that holds the lock of ``folder`` (:func:`lock`), or ``unknown``."""
    try:
        fd = open_plain_file(_lock_file(folder), os.O_RDONLY)
    except (OSError, ValueError):
        return "unknown"
    with os.fdopen(fd, "rb") as held:
        return held.read(64).decode(errors="replace").strip() or "unknown"


def own(folder: Path) -> int:
    """:func:`lock` of a run directory, or a ValueError naming it and the pid of the process writing it."""
    fd = lock(folder)
    if fd is None:
        raise ValueError(f"run directory {str(folder)!r} is being written by another process (pid {holder(folder)}); "
                         "wait until it ends, or stop it first")
    return fd


@contextlib.contextmanager
def owned(folder: Path) -> Iterator[None]:
    """Within this block this process is the one writer of the run in ``folder`` (:func:`own`); a folder that
    holds no run is left untouched (what reads it fails, and writes nothing)."""
    fd = own(folder) if is_run_dir(folder) else None
    try:
        yield
    finally:
        if fd is not None:
            unlock(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic(path: Path, write) -> None:
    """Write through ``write(tmp)`` to a temporary file beside ``path``, then rename it into place: a symbolic link
    at ``path`` is replaced, what it points to is never written; a folder, FIFO or other special file there is a
    ValueError naming it, and nothing is written.

    The file gets the permissions of any newly created file (0666 less the umask), not
    ``mkstemp``'s private 0600, so the people who can read a run's other files can read it.
    """
    path = Path(path)
    if not path.is_symlink():
        refuse_unplain(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a file-size limit: named by the file meant, not the temporary one
        Path(tmp).unlink(missing_ok=True)
        if exc.filename not in (None, tmp):
            raise
        raise OSError(exc.errno, f"writing it failed ({exc.strerror or exc}); its previous version, if any, is kept",
                      str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Delete the temporary files an interrupted atomic write left in ``run_dir``; returns them."""
    stale = sorted(Path(run_dir).glob(f".*{TMP_SUFFIX}"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    if isinstance(value, torch.Tensor):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda tmp: Path(tmp).write_text(text))


def write_bytes(path: Path, data: bytes) -> None:
    _atomic(path, lambda tmp: Path(tmp).write_bytes(data))


def save_figure(path: Path, fig: Any, dpi: int = 110) -> None:
    """``fig.savefig`` (a matplotlib figure) through :func:`_atomic`, in the format of ``path``'s suffix."""
    _atomic(path, lambda tmp: fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi))


def open_log(path: Path, append: bool = False) -> Any:
    """``path`` opened for writing text (a log a child process streams into) from its start, or at its end with
    ``append``, created 0666 less the umask; a link, FIFO or folder there is a ValueError naming it
    (:func:`open_plain_file`)."""
    fd = open_plain_file(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0))
    if not append:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "a" if append else "w")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_text(path, json.dumps(_jsonable(data), indent=2) + "\n")


def read_json(path: Path, missing_ok: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``: every JSON file of a run or sweep folder is read by this one rule. A
    missing file is None with ``missing_ok`` (else a ValueError naming it); a damaged one (unreadable,
    not JSON, not an object) is always a ValueError naming it; the caller decides what that means."""
    if not regular_file(path, "the record") and missing_ok:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def save_torch(path: Path, obj: Any) -> None:
    """``torch.save`` through :func:`_atomic`: serialised in memory, then written by Python, so that a write that
    fails (a full disk, a file-size limit) is an OSError naming the file, not torch's stream error."""

    def write(tmp: str) -> None:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        with open(tmp, "wb") as f:
            f.write(buffer.getbuffer())

    _atomic(path, write)


def save_npz(path: Path, **arrays: Any) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    _atomic(path, write)


def read_readout(path: Path) -> dict[str, np.ndarray]:
    """The true and read-out test latents ``z``, ``z_hat`` ``(N, n)`` and the per-dimension R² ``r2_per_dim``
    ``(n,)`` of a ``readout.npz`` (never unpickled); a ValueError naming the file otherwise."""
    keys = ("z", "z_hat", "r2_per_dim")
    try:
        with np.load(path, allow_pickle=False) as data:
            z, z_hat, r2 = (data[key] for key in keys)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise ValueError(f"{path}: not a readout file with arrays {', '.join(keys)} ({exc})") from exc
    if z.ndim != 2 or z_hat.shape != z.shape or r2.shape != z.shape[1:]:
        raise ValueError(f"{path}: expected z and z_hat of one shape (N, n) and r2_per_dim (n,); got "
                         f"{z.shape}, {z_hat.shape} and {r2.shape}")
    return {"z": z, "z_hat": z_hat, "r2_per_dim": r2}


def load_torch(path: Path) -> Any:
    """A file written by :func:`save_torch`, read safely (:func:`dgp.files.load_tensors`)."""
    return load_tensors(path)


def write_config(run_dir: Path, config: Mapping[str, Any]) -> None:
    write_text(run_dir / CONFIG, dump(config))


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run's saved config as written (:func:`identifiable_cl.components.resolve` upgrades it)."""
    return copy.deepcopy(dict(read_yaml_mapping(Path(run_dir) / CONFIG)))


def append_metrics(run_dir: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append ``records`` to the run's :data:`METRICS` as JSON lines, all or none: a write that fails (a full disk,
    a file-size limit) is cut back to the file's previous end and raised as an OSError naming the file."""
    path = Path(run_dir) / METRICS
    text = "".join(json.dumps(_jsonable(record)) + "\n" for record in records).encode()
    fd = open_plain_file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        end = os.fstat(fd).st_size
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            os.ftruncate(fd, end)
            raise OSError(exc.errno, f"appending to it failed ({exc.strerror or exc}); the records before are kept",
                          str(path)) from None
    finally:
        os.close(fd)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    records = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # the last line of a run killed while appending
                break
            raise ValueError(f"{path}: line {number} is not JSON ({exc})") from exc
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"{path}: line {number} is not a metrics record with an integer 'step'")
        wrong = next((k for k, v in record.items() if k != "step" and not _metric_value(v)), None)
        if wrong is not None:
            raise ValueError(f"{path}: line {number}: {wrong}={record[wrong]!r} is not a metric value "
                             "(a finite number, null, or a list of them)")
        if records and record["step"] <= records[-1]["step"]:
            raise ValueError(f"{path}: line {number}: step {record['step']} does not follow step {records[-1]['step']}")
        records.append(record)
    return records


def _metric_value(value: Any) -> bool:
    """A value as :func:`append_metrics` writes it: a finite number, null (NaN), or a list of them."""
    if isinstance(value, list):
        return all(_metric_value(v) for v in value)
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep only records up to ``last_step`` (those after a checkpoint are replayed on resume)."""
    kept = [r for r in read_metrics(run_dir) if r["step"] <= last_step]
    write_text(run_dir / METRICS, "".join(json.dumps(r) + "\n" for r in kept))


def git_revision() -> str | None:
    """The git revision of the source tree this package was imported from (``+dirty`` if modified)."""
    source = Path(identifiable_cl.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=source, capture_output=True, text=True, timeout=5
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


WANDB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a W&B run id may hold (``wandb.init(id=...)``)."""


def wandb_id(environ: Mapping[str, str] | None = None) -> str:
    """A new run's W&B run id: the one a sweep agent or the local runner sets (``WANDB_RUN_ID``), else 8 random
    lowercase letters and digits, as W&B draws them."""
    given = (os.environ if environ is None else environ).get("WANDB_RUN_ID")
    if given and WANDB_ID.fullmatch(given):
        return given
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def meta(device: torch.device, matmul: str | None = None, wandb_run: str | None = None) -> dict[str, Any]:
    """Where and how the run was made; ``matmul``: the backend ``train.matmul`` resolved to; ``wandb_run``: its
    W&B run id (:func:`wandb_id` when None), which every resume of the run continues."""
    return {
        "schema_version": SCHEMA_VERSION,
        "version": identifiable_cl.__version__,
        "git_revision": git_revision(),
        "command": sys.argv,
        "device": str(device),
        "torch": torch.__version__,
        "matmul": matmul,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wandb_id": wandb_run or wandb_id(),
    }


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _started(value: Any) -> bool:
    try:
        time.strptime(value, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return False
    return True


META_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "version": ("a version string", _text),
    "git_revision": ("a git revision or null", lambda v: v is None or _text(v)),
    "command": ("the command line, a list of strings", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v)),
    "device": ("a device name", _text),
    "torch": ("a version string", _text),
    "matmul": ("a matmul backend or null", lambda v: v is None or _text(v)),
    "python": ("a version string", _text),
    "host": ("a host name", _text),
    "started": ("a time as 2026-01-31T12:00:00+0000", _started),
    "wandb_id": ("a W&B run id of letters, digits, - and _", lambda v: isinstance(v, str) and bool(WANDB_ID.fullmatch(v))),
}
"""What :func:`meta` writes in each field of ``meta.json`` but its schema version (which
:func:`identifiable_cl.migration.schema_version` reads), and a test of it."""


def read_meta(run_dir: Path) -> dict[str, Any] | None:
    """``meta.json`` of ``run_dir`` (None when missing), every field of :data:`META_FIELDS` checked where present:
    a field that holds something else is a ValueError naming the file, the field, the value and what it holds."""
    path = Path(run_dir) / META
    found = read_json(path, missing_ok=True)
    for name, (holds, fits) in META_FIELDS.items():
        if found is not None and name in found and not fits(found[name]):
            shown = repr(found[name])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ValueError(f"{path}: {name}={shown} is not what a run writes there ({holds})")
    return found


def is_run_dir(path: Path) -> bool:
    path = Path(path)
    return (path / CONFIG).is_file() and (path / DGP).is_file()


class RunFolder:
    """The one writer of a run's folder: :meth:`create` (a new run) or :meth:`reopen` (a resumed one) take its lock
    (:func:`own`) and write its first files with stop signals held, so a signal never leaves them half-written;
    then every write of the run goes through it, until :meth:`release`. ``held``: the lock's descriptor (None: a
    folder this process only reads, or released)."""

    def __init__(self, path: Path, held: int | None = None):
        self.path, self.held = Path(path), held

    @classmethod
    def create(cls, path: Path, config: Mapping[str, Any], meta: Mapping[str, Any], process: Any) -> "RunFolder":
        """A new run in ``path`` (a new or empty folder): its ``config``, ``meta`` (:func:`meta`) and ``process``
        (``dgp.Process.to_dict()``) written."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise ValueError(f"run directory {str(path)!r} is a file: give a new or empty folder")
        if path.exists() and any(path.iterdir()):
            raise ValueError(f"run directory {str(path)!r} exists and is not empty; use --resume to continue it")
        path.mkdir(parents=True, exist_ok=True)

        def write() -> None:
            write_config(path, config)
            write_json(path / META, meta)
            save_torch(path / DGP, process)

        return cls._taken(path, write)

    @classmethod
    def reopen(cls, path: Path, config: Mapping[str, Any], step: int) -> "RunFolder":
        """A saved run continued from its checkpoint of ``step``: stale temporaries, the metrics after ``step``, the
        summary and the stopped state removed, the ``config`` it goes on with rewritten (and a W&B run id recorded
        in ``meta.json`` for a run saved without one)."""
        path = Path(path)

        def write() -> None:
            remove_stale_temporaries(path)
            truncate_metrics(path, step)
            write_config(path, config)
            for name in (SUMMARY, STOPPED):
                (path / name).unlink(missing_ok=True)
            saved = read_meta(path)
            if saved is not None and "wandb_id" not in saved:  # saved before runs kept their W&B id
                write_json(path / META, {**saved, "wandb_id": wandb_id()})

        return cls._taken(path, write)

    @classmethod
    def _taken(cls, path: Path, write: Callable[[], None]) -> "RunFolder":
        held = own(path)
        try:
            with signals_held():
                write()
        except BaseException:
            unlock(held)
            raise
        return cls(path, held)

    def checkpoint(self, state: Mapping[str, Any]) -> None:
        save_torch(self.path / CHECKPOINT, state)

    def append(self, record: Mapping[str, Any]) -> None:
        append_metrics(self.path, [record])

    def stopped(self, record: Mapping[str, Any]) -> None:
        """Why and when a diverged run stopped (:data:`STOPPED`)."""
        write_json(self.path / STOPPED, record)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """The summary, written last: its presence marks a finished run."""
        write_json(self.path / SUMMARY, summary)

    def readout(self, **arrays: Any) -> None:
        save_npz(self.path / READOUT, **arrays)

    def release(self) -> None:
        if self.held is not None:
            unlock(self.held)
            self.held = None


@contextlib.contextmanager
def new_run_dirs(out: Path, configs: Sequence[Mapping[str, Any]]) -> Iterator[list[Path]]:
    """A new folder under ``out`` for each config, named for the run (time, loss, conditional, seed) and created
    here, so that runs started in the same second, in this process or another, never share one (a later one
    gets the suffix -1, -2 ...). Folders still empty when the block fails are removed again, with ``out`` if it
    was made for them."""
    made_out = not out.exists()
    if not made_out and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out))
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    paths = []
    try:
        for config in configs:
            name = f"{stamp}-{config['loss']['name']}-{config['dgp']['conditional']['name']}-s{config['seed']}"
            for i in itertools.count():
                path = out / (name if i == 0 else f"{name}-{i}")
                try:
                    path.mkdir()
                except FileExistsError:
                    continue
                paths.append(path)
                break
        yield paths
    except BaseException:
        for path in [*paths, *([out] if made_out else [])]:
            with contextlib.suppress(OSError):
                path.rmdir()  # only an empty folder: what a run wrote stays
        raise
