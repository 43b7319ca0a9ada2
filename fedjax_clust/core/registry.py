"""One registry type for every kind of named, pluggable thing: algorithms, aggregators, attacks, tasks, devices,
networks, privacy accountants, benchmark suites and the command line's commands.

A :class:`Registry` holds values by name in registration order: the built-in ones first (registered when
``built_in_module`` is imported, which every lookup makes sure of), then plugins, registered from Python
(:meth:`Registry.register`) or, where the registry names an entry-point ``group``, from installed packages::

    [project.entry-points."fedjax_clust.algorithms"]
    my-method = "my_package.fl:SPEC"

An entry point's object is a value or a list of values (or, where the registry has a ``value_type``, a function
returning either); a value registers under its own name (``name_of``), or, in a registry whose values carry no name
(``name_of=None``: functions), under the entry point's name, one value per entry point. Entry points are loaded the
first time the registry is listed or asked for a name it does not hold, never at import.

The one failure rule: a plugin that fails to load (or gives a value of the wrong type) raises a ``ValueError``
naming it at every listing until it loads; the plugins are marked loaded only after all of them loaded, so a
broken plugin is never followed by silently missing ones. A plugin never shadows a built-in name.

An unknown name raises :class:`UnknownName` (a ``ValueError`` and a ``KeyError``) listing the known names, with
a "did you mean" where one is close (``difflib``). A registry is a read-only mapping (``registry[name]``,
``name in registry``, iteration in registration order) and prints its names for ``--help``
(:meth:`Registry.listing`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from typing import Callable, Generic, Iterator, Mapping, Optional, TypeVar

__all__ = ["Registry", "UnknownName", "PluginError", "did_you_mean"]

T = TypeVar("T")


class UnknownName(ValueError, KeyError):
    """A name no registry entry has: a ``ValueError`` (bad input) that is also the ``KeyError`` of the mapping
    protocol (``registry.get(name)`` is ``None``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PluginError(ValueError):
    """An installed plugin (an entry point of a registry's group) that fails to load or gives a wrong value: a
    ``ValueError`` naming the plugin, raised at every listing until it loads (module docstring); the command
    line answers it with one ``error:`` line, whenever the plugins load."""


def did_you_mean(name, known) -> str:
    """``"; did you mean 'x'?"`` for the known names closest to ``name`` (none: an empty string)."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


class Registry(Mapping[str, T], Generic[T]):
    """Values of one ``kind`` by name (see the module docstring).

    Args:
      kind: what a value is, in messages ("algorithm", "task").
      value_type: the type every value must have (None: any).
      group: the entry-point group plugins register through (None: Python registration only).
      built_in_module: the module whose import registers the built-in values (None: they are registered by
        whoever creates the registry).
      name_of: a value's own name (default its ``name`` attribute); None where values carry no name (functions),
        which then register under the name given to :meth:`register`.
    """

    def __init__(
        self,
        kind: str,
        *,
        value_type: Optional[type] = None,
        group: Optional[str] = None,
        built_in_module: Optional[str] = None,
        name_of: Optional[Callable[[T], str]] = lambda value: value.name,  # type: ignore[attr-defined]
    ):
        self.kind, self.value_type, self.group, self.built_in_module = kind, value_type, group, built_in_module
        self.name_of = name_of
        self.specs: dict = {}
        self.entry_points_loaded = False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self.specs)})"

    # a registry is one object, not its contents: equal only to itself, and hashable (Mapping would compare items)
    def __eq__(self, other) -> bool:
        return self is other

    __hash__ = object.__hash__

    def _built_ins(self) -> None:
        if self.built_in_module is not None:
            importlib.import_module(self.built_in_module)  # registers the built-in values (a no-op once imported)

    def _type_name(self) -> str:
        return self.value_type.__name__ if self.value_type is not None else "value"

    def _checked(self, value, where: str):
        if self.value_type is not None and not isinstance(value, self.value_type):
            raise ValueError(f"{where} takes {_article(self._type_name())} {self._type_name()}, got {value!r}")
        return value

    def _name(self, value, name: Optional[str]) -> str:
        if name is None:
            if self.name_of is None:
                raise ValueError(f"registering {_article(self.kind)} {self.kind} needs its name")
            name = self.name_of(value)
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ValueError(f"{_article(self.kind)} {self.kind} name must be a non-empty string, got {name!r}")
        return name

    def register(self, value: T, *, name: Optional[str] = None, replace: bool = False) -> T:
        """Add ``value`` under ``name`` (default its own name) and return it; ValueError when the name is taken by
        another value, unless ``replace``."""
        self._checked(value, f"register_{self.kind.replace(' ', '_')}")
        name = self._name(value, name)
        self._built_ins()
        if name in self.specs and not replace and self.specs[name] is not value:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to replace it)")
        self.specs[name] = value
        return value

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its value (ValueError if it is not registered)."""
        if name not in self.specs:
            raise ValueError(f"{self.kind} {name!r} is not registered")
        return self.specs.pop(name)

    def load_entry_points(self) -> None:
        """Register every plugin of :attr:`group` once, by the module docstring's failure rule."""
        self._built_ins()
        if self.entry_points_loaded or self.group is None:
            return
        for entry in importlib.metadata.entry_points(group=self.group):
            try:
                found = entry.load()
                if callable(found) and self.value_type is not None and not isinstance(found, self.value_type):
                    found = found()  # a function returning the value(s)
            except Exception as error:  # name the plugin that broke
                raise PluginError(
                    f"the {self.kind} plugin {entry.name!r} ({entry.value}) failed to load: {error}"
                ) from None
            values = found if isinstance(found, list) or type(found) is tuple else [found]  # a record stays one
            if self.name_of is None and len(values) != 1:
                raise PluginError(
                    f"the {self.kind} plugin {entry.name!r} ({entry.value}) gives {len(values)} values; "
                    f"an entry point of {self.group} gives one"
                )
            for value in values:
                if self.value_type is not None and not isinstance(value, self.value_type):
                    raise PluginError(
                        f"the {self.kind} plugin {entry.name!r} ({entry.value}) gives {value!r}, not "
                        f"{_article(self._type_name())} {self._type_name()}"
                    )
                try:
                    name = self._name(value, None if self.name_of is not None else entry.name)
                except Exception as error:  # a value without a name: name the plugin that gave it
                    raise PluginError(f"the {self.kind} plugin {entry.name!r} ({entry.value}): {error}") from None
                if name not in self.specs:  # a built-in name is never shadowed by a plugin
                    self.specs[name] = value
        self.entry_points_loaded = True

    def names(self) -> tuple:
        """Every registered name, plugins included: the built-in ones first, then plugins in registration order."""
        self.load_entry_points()
        return tuple(self.specs)

    def registered(self) -> tuple:
        """The names registered so far, without loading entry points (a built-in module's own listing)."""
        self._built_ins()
        return tuple(self.specs)

    def unknown(self, name) -> UnknownName:
        """The error for a name no entry has: the known names, and the closest ones."""
        known = list(self.specs)
        return UnknownName(f"unknown {self.kind} {name!r}; expected one of {known}{did_you_mean(name, known)}")

    def lookup(self, name: str) -> T:
        """The value registered as ``name`` (plugins loaded if needed); :class:`UnknownName` otherwise."""
        self._built_ins()
        if name not in self.specs:
            self.load_entry_points()
        if name not in self.specs:
            raise self.unknown(name)
        return self.specs[name]

    def listing(self, separator: str = ", ") -> str:
        """The registered names for a ``--help`` text."""
        return separator.join(self.names())

    # the read-only mapping protocol
    def __getitem__(self, name: str) -> T:
        return self.lookup(name)

    def __contains__(self, name) -> bool:
        self._built_ins()
        if name not in self.specs and self.group is not None:
            self.load_entry_points()
        return name in self.specs

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"
