"""The command line's algorithm and task options, derived from the builders: declared once, in their signatures.

Every keyword-only parameter of a registered algorithm's builder (:class:`~fedjax_clust.algorithms.registry.
AlgorithmSpec`), of :func:`~fedjax_clust.algorithms.make_algorithm` (the options every algorithm shares:
learning rate, momentum, attack, aggregator, participation, ...) and of a task builder
(:data:`fedjax_clust.tasks.TASKS`) becomes one option here when its type hint can be read from text:

* the flag is the keyword with dashes (``local_steps`` -> ``--local-steps``), or the name the spec's ``flags``
  (:data:`fedjax_clust.tasks.TASK_FLAGS` for tasks) gives it where the keyword alone would be ambiguous on a
  command line shared by all algorithms (Ditto's ``lam`` is ``--ditto-lambda``);
* the type comes from the hint: ``int``, ``float``, ``str``, ``bool`` (a switch), ``Literal[...]`` (the
  choices), ``Annotated[str, RegisteredName(...)]`` (a name from a registry, :mod:`fedjax_clust.robust.registry`:
  the choices are the registry's when a value is checked or the help printed, so an installed plugin's
  aggregator or attack is a choice of ``--aggregator`` / ``--attack``), and ``Optional`` / ``Union`` of them
  (``Union[float, Literal["theory"]]`` reads ``theory`` or a number); a parameter whose hint has no such arm (a
  function, an array, a mesh) or that has no hint is a Python-only option;
* the help is the parameter's description in the builder's docstring (its ``Args:`` section, read with
  ``docstring_parser``), with the default of every algorithm that takes it;
* the algorithms (tasks) an option applies to are those whose builder takes it, so a plugin's option is a flag
  as soon as its package is installed.

The builders validate every value (the messages name the keyword; the command line turns the keyword back into
the flag the user typed), so the CLI, config files and the Python API accept and refuse the same values. The
default of an option is the builder's (``make_algorithm``'s for the shared ones): the CLI adds one default of
its own, ``--lr 0.01``, because the Python API requires the learning rate.

Choice of library: argparse (standard library) parses, ``docstring_parser`` reads the docstrings, and the
types are Python's own hints. jsonargparse (signatures and docstrings to arguments, config files) gives every
function its own namespace (``--ditto.lam``) and multi-line errors, where this command line shares one flag
among all algorithms that take it (``--local-steps`` means E for Federated-Clustering and tau for IFCA-2, one
``compare`` runs several), reads TOML and prints one line with exit status 2; tyro prints multi-line boxed
errors and has no config files; fiddle builds configs of Python objects with absl flags, not a CLI of
signatures. Each would have needed the same merging layer on top; this module is that layer on argparse.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from collections.abc import Sequence
from types import MappingProxyType, NoneType, UnionType
from typing import Callable, Mapping, Optional

import docstring_parser

__all__ = ["Option", "LiveChoices", "algorithm_options", "task_options", "text_converter", "describe"]

# keywords that are never a builder's command-line option: the run's own seed is --seed (an algorithm's seed
# for its random initialisation stays at its default), the task-given arguments, and the attack plumbing
NOT_OPTIONS = ("seed", "name", "structure", "byzantine", "clients_per_round")
# make_algorithm's own options that the command line declares with the run (their flags differ in kind)
RUN_LEVEL = ("matmul_precision",)
CLI_DEFAULTS = {"learning_rate": 0.01}  # the one CLI-only default: make_algorithm requires the learning rate
COMMON_FLAGS = {"learning_rate": "lr"}


@dataclasses.dataclass(frozen=True)
class Option:
    """One command-line option: ``flag`` (``--local-steps``), ``owners`` (algorithm or task name -> the builder's
    keyword), ``convert`` (text -> value; ValueError on bad text), ``choices`` (or None), ``switch`` (a
    ``store_true`` flag), ``help`` and ``defaults`` (owner -> default; absent when required)."""

    flag: str
    owners: Mapping[str, str]
    convert: Callable
    choices: Optional[tuple]
    switch: bool
    help: str
    defaults: Mapping[str, object]
    scope: str = ""  # "every algorithm", or the owners' names

    @property
    def applies(self) -> tuple:
        return tuple(self.owners)

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    def kwarg(self, owner: str) -> str:
        return self.owners[owner]

    @property
    def kwargs(self) -> tuple:
        return tuple(dict.fromkeys(self.owners.values()))


# ---------------------------------------------------------------------------------------------- types from hints
def _names_registry(meta) -> bool:
    """Whether ``Annotated`` metadata ``meta`` names a registry (imported here, when a hint has metadata: this
    module imports no JAX)."""
    from fedjax_clust.robust.registry import RegisteredName

    return isinstance(meta, RegisteredName)


def _arms(hint) -> list:
    """The arms of a hint: Optional / Union flattened, ``None`` dropped, ``Annotated`` unwrapped unless its
    metadata names a registry (:class:`~fedjax_clust.robust.registry.RegisteredName`: kept as one arm)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is UnionType:
        return [arm for a in typing.get_args(hint) for arm in _arms(a)]
    if origin is typing.Annotated and not any(_names_registry(m) for m in hint.__metadata__):
        return _arms(typing.get_args(hint)[0])
    return [] if hint is NoneType or hint is None else [hint]


class LiveChoices(Sequence):
    """An option's choices read when they are used: the fixed ``Literal`` values, then the names of the
    registries (:class:`~fedjax_clust.robust.registry.RegisteredName`) at the moment argparse checks a value
    or prints the help (so the plugins installed then, loaded through their entry points, are choices).
    ``built_in`` lists the package's own (the generated docs)."""

    def __init__(self, fixed: tuple, registries: tuple):
        self.fixed, self.registries = tuple(fixed), tuple(registries)

    def _names(self, built_in: bool = False) -> tuple:
        names = list(self.fixed)
        for registry in self.registries:
            names += [n for n in (registry.built_in() if built_in else registry.names()) if n not in names]
        return tuple(names)

    @property
    def built_in(self) -> tuple:
        return self._names(built_in=True)

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, value) -> bool:
        """A name, or a registry's name written with its options (``ipm(epsilon=5.0)``: the options are checked
        where the rule is built, :func:`~fedjax_clust.robust.registry.parse_rule`)."""
        if value in self._names():
            return True
        if self.registries and isinstance(value, str) and "(" in value:
            return value.split("(", 1)[0].strip() in self._names()
        return False

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"LiveChoices({self._names()!r})"


def _is_int_text(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text.strip()) is not None


def text_converter(hints) -> Optional[tuple]:
    """``(convert, choices, switch)`` reading the union of ``hints`` from text, or None when no arm is readable:
    Literal values first, then an integer (when an arm is ``int``), a number (``float``), any text (``str``);
    ``bool`` alone is a switch; a registry's names (``Annotated[str, RegisteredName(...)]``) count as Literal
    values read when used (:class:`LiveChoices`)."""
    literals, kinds, registries = [], set(), []
    for hint in hints:
        for arm in _arms(hint):
            if typing.get_origin(arm) is typing.Annotated:  # _arms kept it: a registry's names
                registries += [m for m in arm.__metadata__ if _names_registry(m) and m not in registries]
            elif typing.get_origin(arm) is typing.Literal:
                literals += [v for v in typing.get_args(arm) if v not in literals]
            elif arm in (int, float, str, bool):
                kinds.add(arm)
    if kinds == {bool} and not literals and not registries:
        return (bool, None, True)
    kinds.discard(bool)
    if not kinds and not literals and not registries:
        return None
    known = LiveChoices(literals, registries) if registries else literals

    def convert(text):
        if text in known:
            return text
        if int in kinds and _is_int_text(text):
            return int(text)
        if float in kinds:
            try:
                return float(text)
            except ValueError:
                pass
        if str in kinds:
            return text
        expected = [repr(v) for v in known] + [
            {int: "an integer", float: "a number"}[k] for k in (int, float) if k in kinds
        ]
        raise ValueError(f"expected {' or '.join(expected)}, got {text!r}")

    if registries and not kinds:  # a registry's names (and Literal values): the choices, read when used
        return str, known, False
    if literals and not kinds:  # choices alone: the text is the value, the choices check names them all
        return str, tuple(literals), False
    return convert, None, False


# ------------------------------------------------------------------------------------------ help from docstrings
_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _plain(text: str) -> str:
    """A docstring's reST turned into plain text for ``--help``: ``:func:`a.b.c``` -> ``c``, ````x```` -> ``x``."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return " ".join(text.replace("``", "").split())


def describe(function, keyword: str) -> str:
    """The description of ``keyword`` in ``function``'s docstring (its ``Args:`` section; an entry may name
    several keywords, ``radius / quantile:``), as plain text; "" when it has none."""
    function = getattr(function, "func", function)  # a functools.partial's function
    try:
        params = _documented(function)
    except TypeError:  # an unhashable callable: parsed, not cached
        params = _documented.__wrapped__(function)
    for param in params:
        names = [n.strip() for n in re.split(r"[/,]", param.arg_name)]
        if keyword in names:
            return _plain(param.description or "")
    return ""


@functools.lru_cache(maxsize=None)
def _documented(function) -> tuple:
    """The ``Args:`` entries of ``function``'s docstring, parsed once (the command line's start-up asks for
    every keyword of every builder: parsing each docstring once per keyword took a quarter of a second)."""
    try:
        return tuple(docstring_parser.parse(inspect.getdoc(function) or "").params)
    except docstring_parser.ParseError:
        return ()


def _brief(text: str, limit: int = 200) -> str:
    """``text`` cut to its first sentence when longer than ``limit`` (``--help`` is a summary; the docstring,
    shown by ``help()`` and the API docs, has the rest)."""
    if len(text) <= limit:
        return text
    match = re.search(r"(?<=[a-z0-9)\]])\.\s+(?=[A-Z(\"])", text)
    return text[: match.start() + 1] if match and match.start() >= 20 else text


def _show(value) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _defaults_text(defaults: Mapping, owners: Mapping) -> str:
    if not defaults:
        return "required"
    by_value = {}
    for owner in owners:
        value = _show(defaults[owner]) if owner in defaults else "required"
        by_value.setdefault(value, []).append(owner)
    if len(by_value) == 1:
        return f"default {next(iter(by_value))}"
    return "default " + "; ".join(f"{', '.join(names)}: {value}" for value, names in by_value.items())


def _help(descriptions: Mapping, defaults: Mapping, owners: Mapping, applies: str) -> str:
    texts = {}
    for owner, text in descriptions.items():
        if text:
            texts.setdefault(text, []).append(owner)
    if len(texts) <= 1:
        body = next(iter(texts), "")
    else:
        body = " | ".join(f"{', '.join(names)}: {text}" for text, names in texts.items())
    defaults_text = _defaults_text(defaults, owners)
    if ":" in defaults_text:  # defaults per owner: they name every owner already
        return f"{body} ({defaults_text})".strip()
    return f"{body} ({applies}; {defaults_text})".strip()


# --------------------------------------------------------------------------------------------------- the tables
def _hints(function) -> dict:
    function = getattr(function, "func", function)
    try:
        return _resolved_hints(function)
    except TypeError:  # an unhashable callable: resolved, not cached
        return _resolved_hints.__wrapped__(function)


@functools.lru_cache(maxsize=None)
def _resolved_hints(function) -> dict:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # a plugin's hint that does not resolve: its options stay Python-only
        return {}


def _collect(entries, applies_word):
    """Options from ``entries``: (owner, builder, {keyword: default}, {keyword: flag}) per owner."""
    found = {}  # flag -> dict of owners, hints, descriptions, defaults
    for owner, builder, parameters, flags in entries:
        hints = _hints(builder)
        for keyword, default in parameters.items():
            if keyword in NOT_OPTIONS or keyword in RUN_LEVEL or keyword not in hints:
                continue
            if text_converter([hints[keyword]]) is None:
                continue
            flag = "--" + flags.get(keyword, keyword.replace("_", "-"))
            slot = found.setdefault(flag, dict(owners={}, hints=[], descriptions={}, defaults={}))
            slot["owners"][owner] = keyword
            slot["hints"].append(hints[keyword])
            slot["descriptions"][owner] = _brief(describe(builder, keyword))
            if default is not inspect.Parameter.empty:
                slot["defaults"][owner] = default
    options = []
    for flag, slot in found.items():
        convert, choices, switch = text_converter(slot["hints"])
        owners = slot["owners"]
        applies = applies_word(tuple(owners))
        options.append(
            Option(
                flag,
                MappingProxyType(owners),
                convert,
                choices,
                switch,
                _help(slot["descriptions"], slot["defaults"], owners, applies),
                MappingProxyType(slot["defaults"]),
                applies,
            )
        )
    return tuple(options)


def _applies_to(all_names, kind):
    def word(owners):
        if len(owners) == len(all_names):
            return f"every {kind}"
        return ", ".join(owners)

    return word


def algorithm_options(names=None) -> tuple:
    """The options of the registered algorithms ``names`` (default: all, plugins included): those every
    algorithm shares (:func:`~fedjax_clust.algorithms.factory.shared_keywords`: learning rate, batch size, attack,
    aggregator, participation, momentum, the privacy options, ...) first, then each builder's own, in registry
    order."""
    from fedjax_clust.algorithms.factory import shared_keywords
    from fedjax_clust.algorithms.registry import algorithm_names, algorithm_spec

    names = tuple(algorithm_names() if names is None else names)
    specs = {name: algorithm_spec(name) for name in names}
    declared = shared_keywords()  # (parameter, the function whose docstring describes it)
    shared = {p.name: p.default for p, _ in declared}
    shared.update(CLI_DEFAULTS)
    entries = []
    for name, spec in specs.items():
        # a shared option applies to the algorithms whose builder takes it, or to all when none does (a
        # wrapper feature: participation)
        mine = {k for k in shared if spec.takes(k) or not any(s.takes(k) for s in specs.values())}
        for function in dict.fromkeys(f for _, f in declared):
            keywords = {p.name: shared[p.name] for p, f in declared if f is function and p.name in mine}
            entries.append((name, function, keywords, COMMON_FLAGS))
    common = _collect(entries, _applies_to(names, "algorithm"))
    entries = [  # one entry per option, in the builder's order: a field of an option group is documented there
        (name, spec.option_source(k), {k: v}, dict(spec.flags))
        for name, spec in specs.items()
        for k, v in spec.options.items()
        if k not in shared
    ]
    own = _collect(entries, _applies_to(names, "algorithm"))
    return common + own


def task_options() -> tuple:
    """The options of the registered tasks (:data:`fedjax_clust.tasks.TASKS`, plugins included), named by
    :data:`fedjax_clust.tasks.TASK_FLAGS`."""
    from fedjax_clust.core.option_groups import flat_options
    from fedjax_clust.tasks import TASK_FLAGS, TASKS

    entries = []  # one per option, in the builder's order: a field of an option group is documented there
    for name, builder in TASKS.items():
        for keyword, (default, source) in flat_options(builder).items():
            entries.append((name, source, {keyword: default}, TASK_FLAGS))
    return _collect(entries, _applies_to(tuple(TASKS), "task"))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rule_rows(names, spec_of) -> list:
    """One table row per registered rule: its name, its options with their defaults and docstring
    descriptions, its summary."""
    rows = []
    for name in names:
        spec = spec_of(name)
        options = (
            "; ".join(
                f"`{key}` ({_show(default)}): {describe(spec.function, key)}".rstrip(": .")
                for key, default in spec.options.items()
            )
            or "none"
        )
        rows.append((name, options, _plain(spec.summary), spec))
    return rows


def rules_markdown() -> str:
    """The built-in robust aggregators and attacks as Markdown tables, from their registries
    (:mod:`fedjax_clust.robust.registry`): name, options (the function's keyword-only parameters, with the
    ``Args:`` descriptions of its docstring) and summary."""
    from fedjax_clust.robust import AGGREGATORS, ATTACKS, aggregator_spec, attack_spec

    lines = [
        "## Robust aggregators (`--aggregator`)",
        "",
        "From the aggregator registry (`fedjax_clust.robust.registry`); options other than the defaults are "
        "written after the name, as runs record them: `--aggregator 'trimmed-mean(beta=0.25)'` "
        "(Python: `fc.make_aggregator('trimmed-mean', beta=0.25)`, passed as `aggregator=`).",
        "",
        "| aggregator | options (default) | what it computes |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| `{name}` | {_cell(options)} | {_cell(summary)} |"
        for name, options, summary, _ in _rule_rows(AGGREGATORS, aggregator_spec)
    ]
    lines += [
        "",
        "## Attacks (`--attack`)",
        "",
        "From the attack registry (`fedjax_clust.robust.registry`); options other than the defaults are "
        "written after the name, as runs record them: `--attack 'ipm(epsilon=5.0)'` "
        "(Python: `fc.make_attack('ipm', epsilon=5.0)`, passed as `attack=`).",
        "",
        "| attack | kind | options (default) | what an attacker sends |",
        "| --- | --- | --- | --- |",
    ]
    for name, options, summary, spec in _rule_rows(ATTACKS, attack_spec):
        kind = (
            "data (its training labels)"
            if spec.on_data
            else "message, needs the victim's ball (federated-clustering)"
            if spec.needs_ball
            else "message"
        )
        lines.append(f"| `{name}` | {kind} | {_cell(options)} | {_cell(summary)} |")
    return "\n".join(lines + [""])


def markdown() -> str:
    """Every algorithm and task option of the built-in algorithms and tasks, and the built-in aggregators and
    attacks, as Markdown tables (the ``docs/options.md`` of the documentation site;
    ``python -m fedjax_clust.cli.options > docs/options.md``)."""
    from fedjax_clust.algorithms import ALGORITHMS

    lines = [
        "# Command-line options",
        "",
        "Generated by `python -m fedjax_clust.cli.options` from the builders' signatures and docstrings "
        "(`fedjax_clust.cli.options`) and the aggregator and attack registries; `fedjax-clust run --help` "
        "shows the same, with installed plugins' options, aggregators and attacks. `sweep` takes each as a "
        "comma-separated list.",
        "",
    ]
    for title, options in (("Algorithm options", algorithm_options(ALGORITHMS)), ("Task options", task_options())):
        lines += [f"## {title}", "", "| option | values | applies to: default | meaning |", "| --- | --- | --- | --- |"]
        for opt in options:
            choices = getattr(opt.choices, "built_in", opt.choices)  # a registry's: the package's own names
            values = "switch" if opt.switch else " | ".join(choices) if choices else ""
            owners = _defaults_text(opt.defaults, opt.owners).removeprefix("default ")
            if ":" not in owners:
                owners = f"{opt.scope}: {owners}"
            body = opt.help.rsplit(" (", 1)[0]
            lines.append(f"| `{opt.flag}` | {_cell(values)} | {_cell(owners)} | {_cell(body)} |")
        lines.append("")
    return "\n".join(lines) + "\n" + rules_markdown()


if __name__ == "__main__":
    print(markdown(), end="")
