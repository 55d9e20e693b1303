"""What the project reads from a component, in one place per kind: the kind's base class.

A component of a registered kind derives from the kind's base class (:class:`dgp.base.Space`,
:class:`dgp.base.Marginal`, :class:`dgp.base.Conditional`, :class:`dgp.base.Negatives`, :class:`dgp.base.Mixing`,
:class:`dgp.base.Views`, :class:`identifiable_cl.encoders.Encoder`). The base class declares every attribute the
project reads of that kind, with its default and meaning, so that a component states only what it has and every
reader reads plain attributes. The kind's :class:`Contract` says which of them a component must define itself and
what each may hold; its registry applies it once the component is built (:meth:`Contract.check`), so a component
that does not fit is refused in one line naming it and the attribute, never later from inside a step. Losses keep
their own, duck-typed contract (:mod:`identifiable_cl.losses.contract`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def optional_method(value: Any) -> bool:
    return value is None or callable(value)


@dataclass(frozen=True)
class Contract:
    """The contract of one kind of component.

    ``base``: the class that declares what is read (a component derives from it); ``required``: the methods a
    component defines itself (the base's raise NotImplementedError), each with how it is called;
    ``attributes``: the other attributes the project reads, each with a test of its value and what it may be.
    """

    kind: str
    base: type
    required: dict[str, str]
    attributes: dict[str, tuple[Callable[[Any], bool], str]] = field(default_factory=dict)

    def check(self, component: Any, name: str) -> Any:
        """``component`` when it meets the contract; a ValueError naming the component (``name``: its registered
        name) and the first attribute that does not, otherwise."""
        who = f"{self.kind} {name!r} ({type(component).__module__}.{type(component).__qualname__})"
        if not isinstance(component, self.base):
            raise ValueError(f"{who} does not derive from {self.base.__module__}.{self.base.__qualname__}, the base "
                             f"class that declares what the project reads of a {self.kind}")
        for method, called in self.required.items():
            if getattr(type(component), method, None) is getattr(self.base, method, None):
                raise ValueError(f"{who} does not define {called}, which every {self.kind} has")
        for attribute, (fits, expects) in self.attributes.items():
            value = getattr(component, attribute)
            if not fits(value):
                raise ValueError(f"{who}: {attribute}={_shown(value)} is invalid: expected {expects}")
        return component

    def rows(self) -> list[tuple[str, str]]:
        """``(attribute, what it is)`` for every declared attribute, required first: the documentation's table."""
        return list(self.required.items()) + [
            (a, expects) for a, (_, expects) in self.attributes.items()]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_segments(value: Any) -> bool:
    return value is None or (is_count(value) and value >= 2)


def is_dims(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= 1 and all(
        isinstance(d, list) and d and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in d)
        for d in value)
