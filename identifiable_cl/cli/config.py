"""``icl config``: the resolved, fully checked config a run would train with, or every config key."""

from __future__ import annotations

import argparse
import inspect
import re

from identifiable_cl.arguments import OVERRIDE
from identifiable_cl.cli import VERBS
from identifiable_cl.config import SCHEMA, SECTION_OPTIONS, Leaf, parse_overrides, yaml_text
from identifiable_cl.yamlfiles import dump


def key_table() -> str:
    """Every config key with its type, default, allowed values and description (``icl config --keys``); each
    component section's ``name`` with the registered names it allows, followed by the options of its default
    component with their defaults (the section's, else the component's own) and the description it declares
    (:func:`dgp.registry.option_docs`); last, the ``eval.*`` switches metric plugins declare.
    """
    import dgp
    import identifiable_cl.encoders  # noqa: F401
    import identifiable_cl.losses  # noqa: F401
    from dgp.registry import REGISTRIES, option_docs, option_parameters
    from identifiable_cl.evaluation.catalog import switches

    dgp.load_builtins()

    rows = [("KEY", "TYPE", "DEFAULT", "ALLOWED", "DESCRIPTION")]
    for key, entry in SCHEMA.items():
        if isinstance(entry, Leaf):
            kind = entry.kind[:-1] + " | null" if entry.kind.endswith("?") else entry.kind
            rows.append((key, kind, yaml_text(entry.default), entry.describe(), entry.doc))
            continue
        default = dict(entry.default)
        registry = REGISTRIES.get(entry.registry)
        allowed = " | ".join(registry.names()) if registry is not None else "a registered name"
        rows.append((f"{key}.name", "component", str(default.get("name")), allowed, entry.doc))
        if registry is None or default.get("name") not in registry:
            continue
        obj = registry.get(default["name"])
        params, _ = option_parameters(obj)
        docs = option_docs(obj)
        for option, param in params.items():
            if option not in default and param.default is inspect.Parameter.empty:
                continue  # supplied by the caller when the component is built
            value = default.get(option, param.default)
            annotation = param.annotation
            type_ = "" if annotation is inspect.Parameter.empty else getattr(annotation, "__name__", str(annotation))
            type_ = re.sub(r"\bNone\b", "null", type_)
            rows.append((f"  {key}.{option}", type_, yaml_text(value), f"option of {default['name']}", docs.get(option, "")))
        for option in default:
            if option != "name" and option not in params:
                doc = SECTION_OPTIONS.get(f"{key}.{option}")
                of = f"option of {default['name']}" if doc is None else f"option of any {key}"
                rows.append((f"  {key}.{option}", "", yaml_text(default[option]), of, doc or ""))
    for key, (default, doc) in switches().items():
        rows.append((key, "bool", yaml_text(default), "switch of a metric", doc))
    widths = [min(max(len(row[i]) for row in rows), cap) for i, cap in enumerate((34, 16, 18, 30))]
    cells = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    return "\n".join(f"  {line}  {row[-1]}".rstrip() for line, row in zip(cells, rows))


def run(args: argparse.Namespace) -> int:
    # ``--keys VALUE`` reaches here as the override ``--keys=VALUE`` (see ``identifiable_cl.arguments.split``)
    keys = [o for o in args.overrides if (m := OVERRIDE.fullmatch(o)) and m.group(1) == "keys"]
    if args.keys or keys:
        extra = ([args.config] if args.config else []) + [o.split("=", 1)[1] for o in keys]
        extra += [o for o in args.overrides if o not in keys]
        if extra:
            raise ValueError(
                f"--keys lists every config key and takes nothing else; got {' '.join(map(repr, extra))} "
                "(icl config [CONFIG] [--key=value ...] prints the resolved config)"
            )
        print(key_table())
        return 0
    from identifiable_cl.components import load_config

    print(dump(load_config(args.config, parse_overrides(args.overrides))), end="")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``config`` to the ``icl`` subcommands."""
    p = subparsers.add_parser(
        "config",
        help=VERBS["config"],
        description="Print, as YAML, the config icl train would run with the same CONFIG and overrides: the "
        "defaults, then CONFIG (a YAML file or packaged preset), then the --dotted.key=value overrides, fully "
        "checked. With --keys, list every key with its type, default, allowed values and meaning, and the "
        "options of each component section's default component.",
    )
    p.add_argument("config", nargs="?", help="YAML config or packaged preset (default: the built-in default experiment)")
    p.add_argument("--keys", action="store_true", help="list every config key instead")
    p.set_defaults(func=run)
    return p
