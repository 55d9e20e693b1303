"""The ``icl`` command line: one module per verb, each with ``add_parser(subparsers)`` and ``run(args)``.

Errors reach the user as one line each: a ``ValueError`` (bad input: the key or the
file and what is allowed) exits with 2; a failed or interrupted run, a full disk, an
unwritable folder or exhausted memory exit with 1 and say what was kept.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from typing import Sequence

import identifiable_cl

VERBS = {
    "train": "train an encoder and measure latent recovery",
    "config": "print the resolved, checked config of a run, or every config key (--keys)",
    "evaluate": "re-evaluate a saved run from its saved DGP and checkpoint",
    "plugins": "list every registered component by kind and name, with its origin and options",
    "bench": "print sampling, evaluation, loss, training, step-cost, precision, packing and per-run overhead figures",
    "sweep": "run a W&B sweep file locally or on a cluster",
    "results": "mean ± std over seeds of finished runs, grouped by the swept parameters",
    "plot": "redraw a run's figures (latent recovery, R²/MCC over steps, learned vs true Λ)",
    "reproduce": "rerun a paper's experiments (experiments/NAME) and check its claims",
}
"""The subcommands, each the module ``identifiable_cl.cli.<verb>``, and their one-line help."""
OVERRIDE_VERBS = frozenset({"train", "config", "evaluate"})
"""The subcommands that take ``--dotted.key=value`` config overrides (split off before argparse reads the rest)."""


def build_parser(verbs: Sequence[str] = tuple(VERBS)) -> argparse.ArgumentParser:
    """The ``icl`` parser with the full parsers of ``verbs`` (importing their modules) and the one-line help of
    the others, so that ``icl --help`` and each verb's help import only what that verb needs."""
    parser = argparse.ArgumentParser(prog="icl", description="Identifiability testbed for contrastive learning.")
    parser.add_argument("--version", action="version", version=f"identifiable-cl {identifiable_cl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for verb, text in VERBS.items():
        if verb in verbs:
            importlib.import_module(f"identifiable_cl.cli.{verb}").add_parser(sub)
        else:
            sub.add_parser(verb, help=text)
    return parser


def os_error_message(exc: OSError) -> str:
    """One line for a failed file operation: the path, what happened and what to do."""
    where = f"{exc.filename}: " if exc.filename else ""
    advice = {
        errno.ENOSPC: "the disk is full; free space (files are written whole or not at all, so its previous version "
                      "is kept; finished runs are complete, an interrupted one resumes with --resume)",
        errno.EDQUOT: "the disk quota is exceeded; free space and resume with --resume",
        errno.EACCES: "permission denied; choose a folder you can write (--out) or fix its permissions",
        errno.EROFS: "the file system is read-only; choose another folder with --out",
        errno.ENOTDIR: "a path component is a file, not a folder; choose another --out",
        errno.EEXIST: "it already exists",
    }.get(exc.errno, exc.strerror or str(exc))
    return f"{where}{advice}"


def main(argv: Sequence[str] | None = None) -> int:
    from identifiable_cl import arguments

    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if argv[:1] and argv[0] in OVERRIDE_VERBS:
        options, overrides = arguments.split(argv[1:])
        argv = argv[:1] + options
    parser = build_parser(argv[:1])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from identifiable_cl.stops import Interrupted, NonFiniteLoss

    args.overrides = overrides
    name = f"icl {args.command}"
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteLoss as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``icl results ... | head``): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"{name}: interrupted; files already written are kept", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as exc:  # torch's OutOfMemoryError is a RuntimeError
        from dgp.process import allocation_failure

        if allocation_failure(exc) is None:
            raise
        print(f"{name}: {out_of_memory(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{name}: error: {'; '.join([os_error_message(exc), *getattr(exc, '__notes__', ())])}", file=sys.stderr)
        return 1


def out_of_memory(exc: BaseException) -> str:
    """One line: the allocation that failed, what to make smaller, and what each stopped run keeps."""
    from identifiable_cl.training import SIZES

    detail = str(exc).splitlines()[0] if str(exc) else "no detail"
    notes = list(getattr(exc, "__notes__", ()))
    sizes = [note for note in notes if note.startswith(SIZES)]
    kept = "; ".join(note for note in notes if not note.startswith(SIZES)) or "files already written are kept"
    advice = (f"{sizes[0]}: make one smaller" if sizes else
              "use a smaller train.batch_size, dgp.dim, encoder.widths or eval sizes")
    return f"out of memory ({detail}); {advice}, or use fewer --workers/--pack; {kept}"
