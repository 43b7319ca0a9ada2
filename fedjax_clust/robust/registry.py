"""The registries of robust aggregators and Byzantine attacks: one spec per rule, read by ``make_aggregator`` /
``make_attack``, the algorithms, the command line (``--aggregator`` / ``--attack`` choices), the docs tables
and the contract tests (``tests/test_robust_contract.py``), as :mod:`fedjax_clust.algorithms.registry` does for
algorithms.

A spec says what the tools need to know about a rule, once:

* ``name``: the name ``make_aggregator`` / ``make_attack``, the command line and the run records use;
* ``function``: the rule itself. An aggregator is ``function(messages, members=None, *, option=default, ...)``
  (see :mod:`fedjax_clust.robust.aggregators`); an attack is ``function(messages, byzantine, key, *, axis=0,
  center=None, radius=None, option=default, ...)`` (see :mod:`fedjax_clust.robust.attacks`). Its keyword-only
  parameters, less the call's own (an attack's ``axis``, ``center``, ``radius``) and those the spec ``fixed``,
  are the rule's options: ``make_aggregator(name, **options)`` refuses any other with a ``ValueError`` naming
  it, and the docs tables list them with their defaults and the descriptions of the function's docstring
  (its ``Args:`` section);
* ``fixed``: keywords the spec binds (``multi-krum`` is ``krum`` with ``multi=True``), never options;
* ``check(**options)``: raises a ``ValueError`` naming a bad option value, before anything is traced (None: no
  check beyond the names);
* ``summary``: one line for the docs tables (default: the first paragraph of the function's docstring);
* for an aggregator, ``mean_for(num_messages, **options)`` (None: never): True when, with these options, the
  rule is the mean of the usable messages for any members among ``num_messages`` rows (a trimmed mean that
  trims nothing), so a caller may take the mean's one-pass path (``Aggregator.equals_mean``, used by
  :func:`~fedjax_clust.robust.aggregators.aggregate_segments`); it must hold for every member set, and is
  called with the bound options (concrete values, or traced ones under a sweep);
* for an attack, ``needs_ball`` (it aims at Federated-Clustering's Threshold-Clustering ball and needs the
  victim's ``center`` / ``radius``), ``reads_others`` (its message is computed from the other clients' messages,
  e.g. their mean and spread: central differential privacy refuses it, since one honest client then moves every
  attacker's message; ``needs_ball`` implies it) and ``on_data`` (it poisons the attackers' training labels instead of
  replacing their messages: ``make_algorithm`` applies it as label flipping, with the option ``num_classes``).

A rule built from a spec is a small frozen callable, :class:`Aggregator` / :class:`Attack`: its ``__call__``
is the rule with its options bound (pure and jit-compatible, like the function), and it carries its ``name``
(``aggregator_name`` / ``attack_name``, which the run records read), its ``options`` and its spec. A run records a
rule by :func:`recorded_name`: its name and the options that differ from the defaults (``"ipm(epsilon=5.0)"``).

An attack's options whose default is a float or None are its *numbers* (:meth:`Attack.numbers`): a sweep over
attacks of one kind that differ only in them compiles one program, and the function then receives them as traced
float32 scalars (:meth:`Attack.with_numbers`). So an attack function uses such an option in arithmetic, never in
Python control flow; an option that decides code takes an integer, string or boolean default.

Third-party rules register without editing the package: ``register_aggregator(spec)`` /
``register_attack(spec)`` from Python (each also a decorator of the function: ``@register_aggregator("name")``),
or, for the command line, an entry point of the group ``fedjax_clust.aggregators`` / ``fedjax_clust.attacks`` in
an installed package whose object is a spec (or a list of them, or a function returning either)::

    [project.entry-points."fedjax_clust.aggregators"]
    my-rule = "my_package.robust:SPEC"

Entry points are loaded the first time a registry is listed (:func:`aggregator_names`, :func:`attack_names`)
or asked for a name it does not know, never when ``fedjax_clust`` is imported. The built-in rules register
themselves where they are defined (:mod:`fedjax_clust.robust.aggregators`, :mod:`fedjax_clust.robust.attacks`),
in the order the tools list them; a plugin never shadows a built-in name.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from types import MappingProxyType
from typing import Callable, Mapping, Optional

from fedjax_clust.core.registry import Registry

__all__ = [
    "AggregatorSpec",
    "AttackSpec",
    "Aggregator",
    "Attack",
    "RegisteredName",
    "register_aggregator",
    "register_attack",
    "unregister_aggregator",
    "unregister_attack",
    "aggregator_names",
    "attack_names",
    "aggregator_spec",
    "attack_spec",
    "recorded_name",
    "parse_rule",
    "AGGREGATOR_GROUP",
    "ATTACK_GROUP",
]

AGGREGATOR_GROUP = "fedjax_clust.aggregators"
ATTACK_GROUP = "fedjax_clust.attacks"
# keyword-only parameters of an attack function that each call passes (not options of the attack)
ATTACK_CALL_KEYWORDS = ("axis", "center", "radius")


def _first_paragraph(function) -> str:
    """The first paragraph of ``function``'s docstring, on one line."""
    doc = inspect.getdoc(getattr(function, "func", function)) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


@dataclasses.dataclass(frozen=True)
class _RuleSpec:
    """What the aggregator and attack specs share (see the module docstring for each field)."""

    name: str
    function: Callable
    fixed: Mapping = dataclasses.field(default_factory=dict)
    check: Optional[Callable] = None
    summary: str = ""

    _kind = "rule"  # class attributes, not fields: the word in messages, the call's own keywords
    _call_keywords = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(
                f"an {self._kind} name must be a non-empty string without surrounding spaces, got {self.name!r}"
            )
        if not callable(self.function):
            raise ValueError(f"{self._kind} {self.name!r}: function must be callable, got {self.function!r}")
        if self.check is not None and not callable(self.check):
            raise ValueError(f"{self._kind} {self.name!r}: check must be a function or None, got {self.check!r}")
        keyword_only = self._keyword_only()
        unknown = sorted(set(self.fixed) - set(keyword_only))
        if unknown:
            raise ValueError(
                f"{self._kind} {self.name!r}: fixed names {unknown[0]!r}, which is no keyword-only "
                f"parameter of {getattr(self.function, '__name__', self.function)!r}"
            )
        object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))
        if not self.summary:
            object.__setattr__(self, "summary", _first_paragraph(self.function))

    def _keyword_only(self) -> dict:
        params = inspect.signature(self.function).parameters
        return {p.name: p.default for p in params.values() if p.kind == p.KEYWORD_ONLY}

    @property
    def options(self) -> dict:
        """The rule's options: keyword -> default (``inspect.Parameter.empty`` when required), the function's
        keyword-only parameters less those the call passes and those the spec fixes."""
        return {k: v for k, v in self._keyword_only().items() if k not in self._call_keywords and k not in self.fixed}

    def bind(self, options: Mapping) -> dict:
        """``options`` checked (names, then ``check``) and merged with ``fixed``: the keywords of the function."""
        allowed = self.options
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(
                f"{self._kind} {self.name!r} takes no option {unknown[0]!r}; its options: {list(allowed) or 'none'}"
            )
        given = {k: v for k, v in options.items() if v is not None}  # None: the default
        if self.check is not None:
            self.check(**given)
        missing = [k for k, v in allowed.items() if v is inspect.Parameter.empty and k not in given]
        if missing:
            raise ValueError(f"{self._kind} {self.name!r} needs the option {missing[0]!r}")
        return {**self.fixed, **given}


@dataclasses.dataclass(frozen=True)
class AggregatorSpec(_RuleSpec):
    """One robust aggregator for the registry: ``function(messages, members=None, **options)`` (see the module
    docstring for each field)."""

    mean_for: Optional[Callable] = None

    _kind = "aggregator"

    def __hash__(self):  # by name: the options field is a read-only mapping, which does not hash
        return hash((self._kind, self.name))

    def __post_init__(self):
        super().__post_init__()
        if self.mean_for is not None and not callable(self.mean_for):
            raise ValueError(f"aggregator {self.name!r}: mean_for must be a function or None, got {self.mean_for!r}")


@dataclasses.dataclass(frozen=True)
class AttackSpec(_RuleSpec):
    """One Byzantine attack for the registry: ``function(messages, byzantine, key, *, axis=0, center=None,
    radius=None, **options)``; ``needs_ball``: it needs the victim's Threshold-Clustering centre and radius;
    ``on_data``: a data attack (label flipping), not a replacement of messages (see the module docstring)."""

    needs_ball: bool = False
    on_data: bool = False
    reads_others: bool = False

    _kind = "attack"
    _call_keywords = ATTACK_CALL_KEYWORDS

    def __hash__(self):  # by name: the options field is a read-only mapping, which does not hash
        return hash((self._kind, self.name))

    def __post_init__(self):
        super().__post_init__()
        params = inspect.signature(self.function).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            missing = [k for k in ATTACK_CALL_KEYWORDS if k not in params]
            if missing:
                raise ValueError(
                    f"attack {self.name!r}: its function must take the keywords axis, center and radius "
                    f"(every call passes them), and has no {missing[0]!r}"
                )
        for field in ("needs_ball", "on_data", "reads_others"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"attack {self.name!r}: {field} must be a bool, got {getattr(self, field)!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Aggregator:
    """A robust aggregator built by :func:`~fedjax_clust.robust.make_aggregator`: ``aggregator(messages,
    members=None)`` is ``spec.function(messages, members, **spec.fixed, **options)``. Equal only to itself
    (as a ``functools.partial``), so it hashes, and a jit cache keyed on it never mixes two rules."""

    spec: AggregatorSpec
    options: Mapping = dataclasses.field(default_factory=dict)
    _keywords: Mapping = dataclasses.field(init=False, repr=False)  # the bound keywords of the spec's function

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "_keywords", self.spec.bind(self.options))

    def __call__(self, messages, members=None):
        return self.spec.function(messages, members, **self._keywords)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def aggregator_name(self) -> str:
        """The registry name the rule was built with (what a run records)."""
        return self.spec.name

    def equals_mean(self, num_messages: int) -> bool:
        """Whether this rule is the mean of the usable messages for any members among ``num_messages`` rows
        (the ``mean`` itself, or the spec's ``mean_for`` says so for these options)."""
        if self.spec.name == "mean":
            return True
        return self.spec.mean_for is not None and bool(self.spec.mean_for(num_messages, **self.spec.bind(self.options)))

    def __repr__(self) -> str:
        return f"Aggregator({self.name!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"

    def __reduce__(self):  # pickled and copied by name and options (rebuilt from the registry)
        return _rebuild, ("aggregator", self.name, dict(self.options))


@dataclasses.dataclass(frozen=True, eq=False)
class Attack:
    """A Byzantine attack built by :func:`~fedjax_clust.robust.make_attack`: ``attack(messages, byzantine, key,
    *, axis=0, center=None, radius=None)`` is the spec's function with the options bound. Equal only to
    itself (see :class:`Aggregator`)."""

    spec: AttackSpec
    options: Mapping = dataclasses.field(default_factory=dict)
    _keywords: Mapping = dataclasses.field(init=False, repr=False)  # the bound keywords of the spec's function

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "_keywords", self.spec.bind(self.options))

    def __call__(self, messages, byzantine, key, *, axis=0, center=None, radius=None):
        return self.spec.function(messages, byzantine, key, axis=axis, center=center, radius=radius, **self._keywords)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def attack_name(self) -> str:
        """The registry name the attack was built with (what a run records)."""
        return self.spec.name

    @property
    def needs_ball(self) -> bool:
        return self.spec.needs_ball

    @property
    def on_data(self) -> bool:
        return self.spec.on_data

    @property
    def reads_others(self) -> bool:
        """Its message depends on the other clients' messages (``needs_ball`` included)."""
        return self.spec.reads_others or self.spec.needs_ball

    def __repr__(self) -> str:
        return f"Attack({self.name!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"

    def numbers(self) -> dict:
        """The options that are numbers a compiled program may take as arguments (a large-gradient's ``scale``,
        ALIE's ``z``, IPM's ``epsilon``, ...): real values of options whose default is a float or None; an
        option that decides code (None, an integer default, a data attack's ``num_classes``) is not one."""
        if self.on_data:
            return {}
        defaults = self.spec.options
        return {k: v for k, v in self.options.items() if _is_number(v, defaults.get(k))}

    def kind(self) -> tuple:
        """What decides the attack's code: its name and its options that are not :meth:`numbers`. Attacks of one
        kind differ only in numbers, so one compiled program serves them all (:meth:`with_numbers`)."""
        numbers = self.numbers()
        return (self.name, tuple((k, "number" if k in numbers else repr(v)) for k, v in sorted(self.options.items())))

    def with_numbers(self, numbers: Mapping) -> "Attack":
        """This attack with the :meth:`numbers` ``numbers`` instead of its own (traced values inside a compiled
        program that runs several attacks of one :meth:`kind`), unchecked: the values they stand for were checked
        when those attacks were made."""
        unknown = sorted(set(numbers) - set(self.numbers()))
        if unknown:
            raise ValueError(f"attack {self.name!r}: {unknown[0]!r} is none of its numbers {sorted(self.numbers())}")
        new = object.__new__(Attack)
        object.__setattr__(new, "spec", self.spec)
        object.__setattr__(new, "options", MappingProxyType({**self.options, **numbers}))
        object.__setattr__(new, "_keywords", {**self._keywords, **numbers})
        return new

    def __reduce__(self):  # pickled and copied by name and options (rebuilt from the registry)
        return _rebuild, ("attack", self.name, dict(self.options))


def recorded_name(rule) -> str:
    """What a run records of an aggregator or attack ``rule``: its registry name (``aggregator_name`` /
    ``attack_name``), followed by the options it was built with that differ from its spec's defaults, e.g.
    ``"ipm"`` for ``make_attack("ipm")`` or ``make_attack("ipm", epsilon=0.1)`` (the default) and
    ``"ipm(epsilon=5.0)"`` for ``make_attack("ipm", epsilon=5.0)``. Two runs whose rules record alike compute
    alike (a sweep computes such runs once); a rule without a spec (a function carrying a name, an attack
    switch) records its name."""
    name = getattr(rule, "attack_name", None) or getattr(rule, "aggregator_name", None)
    if not isinstance(name, str):
        raise ValueError(f"{rule!r} carries no attack_name or aggregator_name")
    spec, options = getattr(rule, "spec", None), getattr(rule, "options", None)
    if not isinstance(spec, _RuleSpec) or not options:
        return name
    defaults = spec.options
    changed = [
        (k, _plain(v)) for k, v in sorted(options.items()) if v is not None and not _same_value(v, defaults.get(k))
    ]
    return name if not changed else f"{name}({', '.join(f'{k}={v!r}' for k, v in changed)})"


_RULE_TEXT = re.compile(r"\s*([A-Za-z0-9_.:-]+)\s*(?:\((.*)\))?\s*", re.S)


def parse_rule(text: str) -> tuple:
    """``(name, options)`` of an aggregator or attack written as a run records it (:func:`recorded_name`):
    ``"ipm"`` -> ``("ipm", {})``, ``"ipm(epsilon=5.0)"`` -> ``("ipm", {"epsilon": 5.0})``; the options are
    keywords whose values are Python literals (numbers, strings, True / False / None). What the command line's
    ``--attack`` / ``--aggregator`` and config files read; ValueError on anything else. The name and the options
    are checked where the rule is built (:func:`~fedjax_clust.robust.make_attack`,
    :func:`~fedjax_clust.robust.make_aggregator`)."""
    match = _RULE_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"expected a rule as name or name(option=value, ...), got {text!r}")
    name, inner = match.group(1), match.group(2)
    if inner is None or not inner.strip():
        return name, {}
    try:
        call = ast.parse(f"_({inner})", mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_"):
            raise ValueError("options must be given as option=value")
        if call.args or any(k.arg is None for k in call.keywords):
            raise ValueError("options must be given as option=value")
        options = {str(k.arg): _literal(str(k.arg), k.value) for k in call.keywords}
    except (SyntaxError, ValueError) as error:
        raise ValueError(
            f"{text!r}: the options of {name!r} must read option=value, ... with Python literals as values "
            f"(e.g. {name}(epsilon=5.0)): {error}"
        ) from None
    return name, options


def _literal(option: str, node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f"the value of {option} must be a number, a quoted string, True, False or None, got {ast.unparse(node)}"
        ) from None


def rule_and_options(name: str, options: Mapping, kind: str) -> tuple:
    """``make_attack`` / ``make_aggregator``'s name and options: a name written with its options
    (:func:`parse_rule`) split, the options given beside it added (one given both ways is refused)."""
    if not isinstance(name, str) or "(" not in name:
        return name, dict(options)
    name, written = parse_rule(name)
    both = sorted(set(written) & set(options))
    if both:
        raise ValueError(f"{kind} {name!r}: option {both[0]!r} given both in the name and as a keyword")
    return name, {**written, **options}


def _plain(value):
    """A NumPy or JAX scalar as the number it holds (what a record shows); a traced one as "traced"."""
    if getattr(value, "shape", None) != ():
        return value
    try:
        return value.item()
    except Exception:  # a traced value (inside a sweep's program, whose records are not kept)
        return "traced"


def _same_value(value, default) -> bool:
    try:
        return bool(value == default)
    except Exception:  # an array option (or a traced one): never equal to a default
        return False


def _is_number(value, default) -> bool:
    """Whether an attack option's ``value`` is a number a program may trace (see :meth:`Attack.numbers`)."""
    if isinstance(value, bool) or not (default is None or isinstance(default, float)):
        return False
    if getattr(value, "shape", None) == () and getattr(value, "dtype", None) is not None:  # a NumPy/JAX scalar
        return value.dtype.kind in "fi"
    return isinstance(value, (int, float))


class _Registry(Registry):
    """The aggregator and attack registries (:class:`fedjax_clust.core.registry.Registry`), which also register a
    rule from a decorated function."""

    def __init__(self, kind: str, spec_type: type, group: str, built_in_module: str):
        super().__init__(kind, value_type=spec_type, group=group, built_in_module=built_in_module)
        self.spec_type = spec_type

    def decorator_or_register(self, spec_or_name, replace: bool, fields: dict):
        if isinstance(spec_or_name, self.spec_type):
            if fields:
                raise ValueError(f"register_{self.kind}(spec) takes no other fields, got {sorted(fields)}")
            return self.register(spec_or_name, replace=replace)
        if not isinstance(spec_or_name, str):
            raise ValueError(
                f"register_{self.kind} takes an {self.spec_type.__name__} or a name (as a decorator), "
                f"got {spec_or_name!r}"
            )

        def decorate(function):
            self.register(self.spec_type(spec_or_name, function, **fields), replace=replace)
            return function

        return decorate


def _rebuild(kind: str, name: str, options: dict):
    """The rule ``name`` of registry ``kind`` with ``options`` (what a pickled or copied rule becomes)."""
    if kind == "aggregator":
        return Aggregator(aggregator_spec(name), options)
    return Attack(attack_spec(name), options)


AGGREGATOR_REGISTRY = _Registry("aggregator", AggregatorSpec, AGGREGATOR_GROUP, "fedjax_clust.robust.aggregators")
ATTACK_REGISTRY = _Registry("attack", AttackSpec, ATTACK_GROUP, "fedjax_clust.robust.attacks")


def register_aggregator(spec_or_name, *, replace: bool = False, **fields):
    """Add an aggregator to the registry, so that ``make_aggregator``, every aggregating algorithm and (for
    entry-point plugins) the command line's ``--aggregator`` know it. Either ``register_aggregator(spec)``
    (returns the spec) or, as a decorator of the function, ``@register_aggregator("name", **spec fields)``
    (returns the function unchanged). ValueError when the name is taken, unless ``replace``."""
    return AGGREGATOR_REGISTRY.decorator_or_register(spec_or_name, replace, fields)


def register_attack(spec_or_name, *, replace: bool = False, **fields):
    """Add an attack to the registry (``make_attack``, ``make_algorithm(attack=...)``, the command line's
    ``--attack``); as :func:`register_aggregator`: ``register_attack(spec)`` or ``@register_attack("name",
    needs_ball=..., ...)``. ValueError when the name is taken, unless ``replace``."""
    return ATTACK_REGISTRY.decorator_or_register(spec_or_name, replace, fields)


def unregister_aggregator(name: str) -> AggregatorSpec:
    """Remove aggregator ``name`` from the registry and return its spec (ValueError if it is not there)."""
    return AGGREGATOR_REGISTRY.unregister(name)


def unregister_attack(name: str) -> AttackSpec:
    """Remove attack ``name`` from the registry and return its spec (ValueError if it is not there)."""
    return ATTACK_REGISTRY.unregister(name)


def aggregator_names() -> tuple:
    """Every registered aggregator's name: the built-in ones first (``AGGREGATORS``), then the plugins."""
    return AGGREGATOR_REGISTRY.names()


def attack_names() -> tuple:
    """Every registered attack's name: the built-in ones first (``ATTACKS``), then the plugins."""
    return ATTACK_REGISTRY.names()


def aggregator_spec(name: str) -> AggregatorSpec:
    """The spec of aggregator ``name``; ValueError listing the known names otherwise."""
    return AGGREGATOR_REGISTRY.lookup(name)


def attack_spec(name: str) -> AttackSpec:
    """The spec of attack ``name``; ValueError listing the known names otherwise."""
    return ATTACK_REGISTRY.lookup(name)


@dataclasses.dataclass(frozen=True)
class RegisteredName:
    """Type-hint metadata, ``Annotated[str, RegisteredName(...)]``: a name from a registry. ``names()`` lists
    every registered name (plugins included), ``built_in()`` the package's own; the command line reads its
    choices from ``names`` when it checks a value or prints its help, so a plugin's name is a choice as soon
    as its package is installed (:mod:`fedjax_clust.cli.options`)."""

    kind: str
    names: Callable[[], tuple]
    built_in: Callable[[], tuple]


def _built_in(registry: _Registry) -> Callable[[], tuple]:
    def names() -> tuple:
        module = importlib.import_module(str(registry.built_in_module))
        return getattr(module, {"aggregator": "AGGREGATORS", "attack": "ATTACKS"}[registry.kind])

    return names


AGGREGATOR_NAME = RegisteredName("aggregator", aggregator_names, _built_in(AGGREGATOR_REGISTRY))
ATTACK_NAME = RegisteredName("attack", attack_names, _built_in(ATTACK_REGISTRY))
