"""Named registries of components, filled by built-ins and by entry points.

Both packages use this module: ``dgp`` registers spaces, marginals, conditionals,
negatives and mixings; ``identifiable_cl`` registers losses and encoders. A
third-party distribution adds a component without editing this repository by
declaring an entry point in the group ``identifiable_cl.<kind>``::

    [project.entry-points."identifiable_cl.losses"]
    my_loss = "my_package.losses:MyLoss"

The entry point's name is the registry name; it is loaded the first time the
registry is queried. A component documents its options in ``OPTION_DOCS``, a mapping
from option name to a one-line text (:func:`option_docs`); ``icl config --keys`` and
``icl plugins`` show them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Iterator, Mapping, Sequence

from dgp import checks
from dgp.checks import OptionError, current_section, section

ENTRY_POINT_PREFIX = "identifiable_cl."


@dataclass(frozen=True)
class Entry:
    """One registered component: what it is called, the object, and where it came from."""

    name: str
    obj: Any
    origin: str


class Registry:
    """A mapping from names to components of one kind (e.g. ``"losses"``).

    ``register`` is used as a decorator by built-ins; the modules named in ``builtins`` (those that
    register built-ins) are imported, and entry points in the group ``identifiable_cl.<kind>`` merged
    in, the first time the registry is queried. Unknown names raise a
    ``ValueError`` that lists the available ones. ``section`` is the config key of
    the components (``loss``, ``dgp.conditional``): a component names its own options
    bare in an :class:`~dgp.checks.OptionError` and the registry keys them in full. ``contract``: the kind's
    :class:`~dgp.contract.Contract`, checked on every component :meth:`build` makes (None: none).
    """

    def __init__(self, kind: str, section: str | None = None, builtins: Sequence[str] = (), contract: Any = None):
        self.kind = kind
        self.contract = contract
        self.section = section or kind
        self.group = ENTRY_POINT_PREFIX + kind
        self._entries: dict[str, Entry] = {}
        self._builtins = tuple(builtins)
        self._builtins_loaded = not self._builtins
        self._entry_points_loaded = False
        REGISTRIES[kind] = self

    def register(self, name: str, *, origin: str | None = None) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name``; a name can be taken only once."""

        def decorate(obj: Any) -> Any:
            self._add(name, obj, origin or f"{obj.__module__}.{obj.__qualname__}")
            return self._entries[name].obj

        return decorate

    def _add(self, name: str, obj: Any, origin: str) -> None:
        known = self._entries.get(name)
        if known is not None and getattr(known.obj, "__wrapped__", known.obj) is not obj:
            raise ValueError(
                f"{self.kind}: the name {name!r} is already registered by "
                f"{known.origin}; cannot register {origin} under it"
            )
        check_option_docs(obj, f"{self.kind} {name!r} ({origin})")
        if not inspect.isclass(obj):
            obj = self._keyed(obj, obj)
        elif not getattr(obj.__init__, "keyed", False):
            obj.__init__ = self._keyed(obj.__init__, obj)
        self._entries[name] = Entry(name, obj, origin)

    def _keyed(self, construct: Callable[..., Any], obj: Any) -> Callable[..., Any]:
        """``construct`` run in the section of what it builds (``self.section`` unless a build names
        another), an :class:`OptionError` about one of ``obj``'s options keyed in full (``tau`` → ``loss.tau``)."""

        @functools.wraps(construct)
        def keyed(*args: Any, **kwargs: Any) -> Any:
            key = current_section(self.section)
            try:
                with section(key):
                    return construct(*args, **kwargs)
            except OptionError as error:
                raise error.within(key, option_parameters(obj)[0]) from None

        keyed.keyed = True
        return keyed

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

    def load_builtins(self) -> None:
        """Import the modules named by ``builtins`` (those that register the package's own components), once."""
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        for module in self._builtins:
            importlib.import_module(module)

    def _all(self) -> dict[str, Entry]:
        self.load_builtins()
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
            detail = (f"unknown name {name!r} among the registered {self.kind}; "
                      f"available: {', '.join(self.names()) or '(none)'} (if {name!r} comes from a plugin, "
                      f"a plugin that provides it may be missing: `icl plugins` lists what is installed)")
            raise OptionError((key,), f": {detail}") if key else ValueError(detail)
        return entries[name]

    def get(self, name: str, key: str | None = None) -> Any:
        """The object registered as ``name``."""
        return self.entry(name, key).obj

    def build(self, spec: Mapping[str, Any] | str, *args: Any, key: str, **kwargs: Any) -> Any:
        """Instantiate from ``{"name": ..., **options}`` (or a bare name).

        ``args``/``kwargs`` are supplied by the caller (e.g. the space); the
        spec's other entries are user options, checked against the signature so
        a misspelt option fails with the list of allowed ones. ``key`` is the config
        key of ``spec``, relative to the component being built if any (an ensemble's
        ``members[0]``); errors about the component's own options name it in full.
        """
        enclosing = current_section("")
        key = f"{enclosing}.{key}" if enclosing else key
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, Mapping) or "name" not in spec:
            raise OptionError((key,), f": expected a mapping with a 'name' entry, got {spec!r}")
        options = {k: v for k, v in spec.items() if k != "name"}
        obj = self.get(spec["name"], f"{key}.name")
        allowed = user_options(obj, exclude=set(kwargs))
        unknown = sorted(set(options) - set(allowed))
        if unknown and not accepts_var_kwargs(obj):
            notes = [f"{o!r} has spaces around it" for o in unknown if isinstance(o, str) and o.strip() in allowed]
            notes += [f"{ascii(o)} holds {hidden}" for o in unknown if (hidden := checks.invisible(o))]
            raise OptionError(tuple(f"{key}.{o}" for o in unknown), f": unknown option(s) for {self.kind} "
                              f"{spec['name']!r}; allowed: {', '.join(allowed) or '(none)'}"
                              + "".join(f"; {note}" for note in notes))
        missing = [name for name, p in option_parameters(obj)[0].items()
                   if p.default is inspect.Parameter.empty and name not in kwargs and name not in options]
        if missing:
            docs = option_docs(obj)
            raise OptionError(tuple(f"{key}.{o}" for o in missing), f": required by {self.kind} {spec['name']!r} "
                              "and not given" + "".join(f"; {o}: {docs[o]}" for o in missing if o in docs))
        with section(key):
            built = obj(*args, **kwargs, **options)
        return built if self.contract is None else self.contract.check(built, spec["name"])


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


def _declared(obj: Any) -> dict[str, str]:
    """``OPTION_DOCS`` of ``obj`` merged along its method resolution order (the first text of a name wins)."""
    sources = obj.__mro__ if inspect.isclass(obj) else [obj]
    docs: dict[str, str] = {}
    for source in sources:
        declared = vars(source).get("OPTION_DOCS") if inspect.isclass(source) else getattr(source, "OPTION_DOCS", None)
        for name, text in (declared if isinstance(declared, Mapping) else {}).items():
            docs.setdefault(name, text)
    return docs


def option_docs(obj: Any) -> dict[str, str]:
    """The one-line description of each option of ``obj`` (:func:`option_parameters`), in signature order.

    A component declares them in its attribute ``OPTION_DOCS``, a mapping from option name to text; a
    class inherits its bases' (the first class along the method resolution order that documents an
    option wins), as it inherits their options. Options without a text are left out.
    """
    try:
        names = list(option_parameters(obj)[0])
    except (TypeError, ValueError):
        return {}
    docs = _declared(obj)
    return {name: docs[name] for name in names if name in docs}


def check_option_docs(obj: Any, origin: str) -> None:
    """A ValueError naming the component when its ``OPTION_DOCS`` documents what is not one of its options."""
    try:
        names = set(option_parameters(obj)[0])
    except (TypeError, ValueError):
        names = set()
    stray = sorted(set(_declared(obj)) - names)
    if stray:
        raise ValueError(f"{origin}: OPTION_DOCS documents {', '.join(stray)}, which are not options of it "
                         f"(its options: {', '.join(sorted(names)) or 'none'})")


REGISTRIES: dict[str, Registry] = {}
"""Every registry created so far, by kind (for ``icl plugins``)."""
