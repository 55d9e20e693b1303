"""Named registries of components, filled by built-ins and by entry points.

Both packages use this module: ``dgp`` registers spaces, marginals, conditionals,
negatives and mixings; ``identifiable_cl`` registers losses and encoders. A
third-party distribution adds a component without editing this repository by
declaring an entry point in the group ``identifiable_cl.<kind>``::

    [project.entry-points."identifiable_cl.losses"]
    my_loss = "my_package.losses:MyLoss"

The entry point's name is the registry name; it is loaded the first time the
registry is queried.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Container, Iterator, Mapping

ENTRY_POINT_PREFIX = "identifiable_cl."


@dataclass(frozen=True)
class Entry:
    """One registered component: what it is called, the object, and where it came from."""

    name: str
    obj: Any
    origin: str


class Registry:
    """A mapping from names to components of one kind (e.g. ``"losses"``).

    ``register`` is used as a decorator by built-ins; entry points in the group
    ``identifiable_cl.<kind>`` are merged in lazily. Unknown names raise a
    ``ValueError`` that lists the available ones.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self.group = ENTRY_POINT_PREFIX + kind
        self._entries: dict[str, Entry] = {}
        self._entry_points_loaded = False
        REGISTRIES[kind] = self

    def register(self, name: str, *, origin: str | None = None) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name``; a name can be taken only once."""

        def decorate(obj: Any) -> Any:
            self._add(name, obj, origin or f"{obj.__module__}.{obj.__qualname__}")
            return obj

        return decorate

    def _add(self, name: str, obj: Any, origin: str) -> None:
        if name in self._entries and self._entries[name].obj is not obj:
            raise ValueError(
                f"{self.kind}: the name {name!r} is already registered by "
                f"{self._entries[name].origin}; cannot register {origin} under it"
            )
        self._entries[name] = Entry(name, obj, origin)

    def load_entry_points(self, force: bool = False) -> None:
        """Merge in the components other distributions declare in ``self.group``."""
        if self._entry_points_loaded and not force:
            return
        self._entry_points_loaded = True
        for ep in metadata.entry_points(group=self.group):
            if ep.name in self._entries:
                continue
            dist = getattr(ep, "dist", None)
            source = f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not take the library down
                raise ValueError(
                    f"{self.kind}: entry point {ep.name!r} = {ep.value!r} from {source} "
                    f"failed to load: {exc}"
                ) from exc
            self._add(ep.name, obj, f"entry point {ep.value} ({source})")

    def _all(self) -> dict[str, Entry]:
        self.load_entry_points()
        return self._entries

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._all()[n] for n in self.names())

    def entry(self, name: str, key: str | None = None) -> Entry:
        """The entry called ``name``; ``key`` names the config key for the error message."""
        entries = self._all()
        if name not in entries:
            where = f"{key}: " if key else ""
            raise ValueError(
                f"{where}unknown name {name!r} among the registered {self.kind}; "
                f"available: {', '.join(self.names()) or '(none)'} (if {name!r} comes from a plugin, "
                f"a plugin that provides it may be missing: `icl plugins` lists what is installed)"
            )
        return entries[name]

    def get(self, name: str, key: str | None = None) -> Any:
        """The object registered as ``name``."""
        return self.entry(name, key).obj

    def build(self, spec: Mapping[str, Any] | str, *args: Any, key: str, **kwargs: Any) -> Any:
        """Instantiate from ``{"name": ..., **options}`` (or a bare name).

        ``args``/``kwargs`` are supplied by the caller (e.g. the space); the
        spec's other entries are user options, checked against the signature so
        a misspelt option fails with the list of allowed ones.
        """
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, Mapping) or "name" not in spec:
            raise ValueError(f"{key}: expected a mapping with a 'name' entry, got {spec!r}")
        options = {k: v for k, v in spec.items() if k != "name"}
        obj = self.get(spec["name"], f"{key}.name")
        allowed = user_options(obj, exclude=set(kwargs))
        unknown = sorted(set(options) - set(allowed))
        if unknown and not accepts_var_kwargs(obj):
            raise ValueError(
                f"{', '.join(f'{key}.{o}' for o in unknown)}: unknown option(s) for "
                f"{self.kind} {spec['name']!r}; allowed: {', '.join(allowed) or '(none)'}"
            )
        return obj(*args, **kwargs, **options)


def option_parameters(obj: Any) -> tuple[dict[str, inspect.Parameter], bool]:
    """The keyword-only parameters a config may set on ``obj``, and whether it takes any other.

    For a class they are collected along its method resolution order: an
    ``__init__`` that takes ``**options`` passes them on to the next class's
    ``__init__``, so a subclass declares only the options it adds. The chain
    ends at the first ``__init__`` without ``**`` (or at ``torch.nn.Module``,
    which takes none); only a function with ``**`` accepts arbitrary options.
    """
    if not inspect.isclass(obj):
        params = inspect.signature(obj).parameters.values()
        found = {p.name: p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
        return found, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    found: dict[str, inspect.Parameter] = {}
    for cls in obj.__mro__:
        if "__init__" not in vars(cls) or cls.__module__.startswith(("torch.", "builtins")):
            continue
        params = inspect.signature(vars(cls)["__init__"]).parameters.values()
        for p in params:
            if p.kind is inspect.Parameter.KEYWORD_ONLY:
                found.setdefault(p.name, p)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return found, False


def user_options(obj: Any, exclude: set[str] = frozenset()) -> list[str]:
    """Names of the options a config may set on ``obj`` (see :func:`option_parameters`)."""
    return [name for name in option_parameters(obj)[0] if name not in exclude]


def accepts_var_kwargs(obj: Any) -> bool:
    """Whether ``obj`` takes options beyond those it names (a function with ``**options``)."""
    return option_parameters(obj)[1]


_NAME = r"(?:``\w+``|\w+)"
_OPTION_LINE = re.compile(
    rf"(?:[-*]\s+)?(?:Options?:?\s+)?(?P<names>{_NAME}(?:\s*(?:,|\band\b)\s*{_NAME})*)"
    r"\s*(?:\((?P<paren>[^()]*(?:\([^()]*\)[^()]*)*)\))?\s*:(?:\s+(?P<text>.*))?"
)
_ABBREVIATION = re.compile(r"(?:^|\s)(?:[A-Za-z]\.)+[A-Za-z]$|(?:^|\s)(?:etc|cf|vs)$")
_OPENING, _CLOSING = "([{", ")]}"


def _scan(text: str) -> Iterator[tuple[int, int, bool]]:
    """For each character of ``text``: its index, bracket depth, and whether it is inside a double-backtick literal."""
    depth, literal, i = 0, False, 0
    while i < len(text):
        if text.startswith("``", i):
            literal = not literal
            yield i, depth, True
            yield i + 1, depth, True
            i += 2
            continue
        char = text[i]
        if not literal and char in _CLOSING:
            depth = max(depth - 1, 0)
        yield i, depth, literal
        if not literal and char in _OPENING:
            depth += 1
        i += 1


def _first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (a full stop outside brackets and literals)."""
    for i, depth, literal in _scan(text):
        if (text[i] == "." and depth == 0 and not literal and (i + 1 == len(text) or text[i + 1].isspace())
                and not _ABBREVIATION.search(text[:i])):
            return text[:i]
    return text


def _clean(text: str) -> str:
    """One line of plain text: whitespace collapsed, double backticks and brackets around it all removed."""
    text = " ".join(text.split()).strip(" :;,.")
    if text.startswith("(") and text.endswith(")"):
        closes = [i for i, depth, literal in _scan(text) if depth == 0 and text[i] == ")" and not literal]
        if closes == [len(text) - 1]:
            text = text[1:-1].strip()
    return text.replace("``", "").strip()


def _line_docs(doc: str, names: Container[str]) -> dict[str, str]:
    """Options documented one per line: ``name: text``, ``name (allowed): text``, ``a, b: text``,
    each with its more deeply indented continuation lines."""
    docs: dict[str, str] = {}
    lines = doc.expandtabs().splitlines()
    for i, line in enumerate(lines):
        match = _OPTION_LINE.fullmatch(line.strip())
        if not match:
            continue
        found = [n for n in re.findall(r"\w+", match.group("names")) if n in names]
        if not found:
            continue
        indent = len(line) - len(line.lstrip())
        parts = [match.group("text") or ""]
        for more in lines[i + 1 :]:
            if not more.strip() or len(more) - len(more.lstrip()) <= indent:
                break
            parts.append(more)
        text = _first_sentence(" ".join(" ".join(parts).split()))
        if match.group("paren"):
            text = f"({match.group('paren').strip()}) {text}"
        text = _clean(text)
        if text:
            for name in found:
                docs.setdefault(name, text)
    return docs


def _inline_docs(doc: str, names: Container[str]) -> dict[str, str]:
    """Options listed in running text after ``Option``/``Options``, each a double-backtick literal followed
    by its text (``a`` (allowed), ``b``: text; the shape ``c`` (> 0) ...), up to the end of the sentence."""
    docs: dict[str, str] = {}
    text = " ".join(doc.split())
    for start in re.finditer(r"\bOptions?\b:?", text):
        region = _first_sentence(text[start.end() :])
        states = {i: (depth, literal) for i, depth, literal in _scan(region)}
        marks = [
            (m.start(), m.end(), m.group(1))
            for m in re.finditer(r"``(\w+)``", region)
            if m.group(1) in names and states[m.start()][0] == 0
            and not (m.start() > 0 and states[m.start() - 1][1])
        ]
        if not marks or region[: marks[0][0]].strip():
            continue
        prefix = ""
        for k, (_, end, name) in enumerate(marks):
            stop = marks[k + 1][0] if k + 1 < len(marks) else len(region)
            body = region[end:stop]
            cuts = [end + j for j in range(len(body)) if states[end + j] == (0, False)
                    and (body[j] in ",;" or body.startswith(" and ", j) or body.startswith(" or ", j))]
            following = ""
            if k + 1 < len(marks) and cuts:
                cut = cuts[-1] - end
                sep = 5 if body.startswith(" and ", cut) else 4 if body.startswith(" or ", cut) else 1
                body, following = body[:cut], body[cut + sep :]
            semicolon = next((c - end for c in cuts if region[c] == ";"), None)
            if semicolon is not None and semicolon < len(body):
                body = body[:semicolon]
            prefix = _clean(prefix)  # words before the name ("the shape ``p`` (> 0)") lead its text
            body = " ".join(f"{prefix} {body}".split()).replace("``", "").strip(" :;,.") if prefix else _clean(body)
            if body:
                docs.setdefault(name, body)
            prefix = following
    return docs


def option_docs(obj: Any) -> dict[str, str]:
    """A one-line description of each option of ``obj`` (:func:`option_parameters`) that its docstring documents.

    Read from the docstrings of the class and its bases (the first that documents an option wins),
    in the forms ``name: text`` / ``name (allowed): text`` one per line (e.g. under ``Options:``), or in
    running text after ``Option``/``Options`` (each option a double-backtick literal followed by its text).
    Options it does not document are left out; anything unreadable gives an empty mapping.
    """
    try:
        names = set(option_parameters(obj)[0])
    except (TypeError, ValueError):
        return {}
    if not names:
        return {}
    if inspect.isclass(obj):
        sources = [c for c in obj.__mro__ if not str(getattr(c, "__module__", "")).startswith(("torch.", "builtins"))]
    else:
        sources = [obj]
    docs: dict[str, str] = {}
    for source in sources:
        doc = vars(source).get("__doc__") if inspect.isclass(source) else getattr(source, "__doc__", None)
        if not isinstance(doc, str):
            continue
        doc = inspect.cleandoc(doc)
        for name, text in {**_inline_docs(doc, names), **_line_docs(doc, names)}.items():
            docs.setdefault(name, text)
    return {name: docs[name] for name in option_parameters(obj)[0] if name in docs}


REGISTRIES: dict[str, Registry] = {}
"""Every registry created so far, by kind (for ``icl plugins``)."""
