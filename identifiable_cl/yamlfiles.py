"""Reading and writing YAML: every YAML text the package reads goes through :class:`BoundedLoader` (configs, sweep,
experiment and parameter files, command-line values), which refuses what would hang or mislead instead of
expanding it; :func:`dump` writes a config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 200_000
MAX_INT_DIGITS = 100
"""Bounds of every YAML text read, far beyond any real config, sweep or experiment file: its nesting depth,
its number of nodes with every alias expanded (a "billion laughs" file is refused, not expanded) and the digits
of one integer."""


class BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key that is not a string or appears twice in one mapping, nesting
    deeper than :data:`MAX_YAML_DEPTH`, more than :data:`MAX_YAML_NODES` nodes with aliases expanded, a value
    that contains itself through an alias and an integer of more than :data:`MAX_INT_DIGITS` digits; its errors
    are ``yaml.YAMLError`` s with the line and column."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth, self.nodes, self.sizes = 0, 0, {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self.sizes:  # its anchor's value is still being read: the alias is inside it
                raise yaml.composer.ComposerError(None, None, "an alias inside the value its anchor names (a value "
                                                  "that contains itself)", mark)
            return self._counted(node, self.sizes[id(node)], mark)
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
        before = self.nodes
        node = self._counted(super().compose_node(parent, index), 1, mark)
        self.depth -= 1
        self.sizes[id(node)] = self.nodes - before
        return node

    def _counted(self, node: Any, size: int, mark: Any) -> Any:
        self.nodes += size
        if self.nodes > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_YAML_NODES} values once its aliases "
                                              "are expanded", mark)
        return node

    def construct_yaml_int(self, node: Any) -> int:
        digits = sum(ch.isdigit() for ch in node.value)
        if digits > MAX_INT_DIGITS:
            raise TooManyDigits(None, None, f"an integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            problem = (f"the key {key!r} is not a string (quote it)" if not isinstance(key, str) else
                       f"the key {key!r} appears twice (first on line {seen[key] + 1})" if key in seen else None)
            if problem:
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


class TooManyDigits(yaml.constructor.ConstructorError):
    """An integer longer than :data:`MAX_INT_DIGITS` digits in a YAML text."""


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (``line 3, column 1: the key 'a' appears twice``)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def load_yaml(text: str) -> Any:
    """The value a YAML text holds, read by :class:`BoundedLoader`."""
    return yaml.load(text, Loader=BoundedLoader)


def regular_file(path: Path, what: str = "file") -> bool:
    """Whether a regular file is at ``path`` (through links); False where nothing is; a ValueError naming it (as
    ``what``) where something else is: a FIFO or a device would block the read or feed it endless bytes, a folder
    holds no text."""
    path = Path(path)
    if not path.exists():
        return False
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "a FIFO" if path.is_fifo() else "not a regular file"
        raise ValueError(f"{what} {str(path)!r} is {kind}: icl reads only regular files; remove it or replace it "
                         "with a file")
    return True


def read_yaml_mapping(path: Path, what: str = "config file") -> Mapping[str, Any]:
    """The mapping a YAML file holds; a ValueError naming the file (as ``what``) otherwise."""
    regular_file(path, what)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be read as text: {exc}") from exc
    try:
        layer = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {str(path)!r} is not valid YAML: {yaml_problem(exc)}") from exc
    if layer is None:
        raise ValueError(f"{what} {str(path)!r} is empty" + (": give at least one key (no file means the defaults)"
                                                             if what == "config file" else ""))
    if not isinstance(layer, Mapping):
        raise ValueError(f"{what} {str(path)!r} must hold a mapping, not {type(layer).__name__}")
    return layer


def dump(config: Mapping[str, Any]) -> str:
    """YAML text of a config, keys in their natural order."""
    return yaml.safe_dump(dict(config), sort_keys=False)
