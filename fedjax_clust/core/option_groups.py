"""Option groups: options of a builder that travel together, given as one checked record.

A builder keyword whose default is an *option group* (a frozen dataclass made by :func:`option_group`) stands
for the group's fields. Everything that reads a builder's options as flat names sees the fields, under their
own names: the algorithm registry (:attr:`~fedjax_clust.algorithms.registry.AlgorithmSpec.options`),
``make_algorithm``'s keywords, ``make_task``'s, the command line's flags, a sweep's grid and the hyperparameter
record (run.json). So grouping options changes no flag, no grid key and no recorded field: ``make_algorithm`` and
``make_task`` gather the flat fields into their group (:func:`gather`) just before they call the builder, and
``make_algorithm`` also takes a record whole (:func:`flatten`). Field names are unique among a builder's options.

A builder called directly takes the group (``cfl(loss, learning_rate=0.1, split=CFLSplit(eps1=0.4))``). The
fields as its own keywords are the deprecated front (fedjax-clust 0.3.0: they still work, through the
builder's ``**legacy``, with a DeprecationWarning, and go in the next version): :func:`take_legacy`. Functions
that are no builders use the same records (``local_training``'s ``StepDirection``).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Callable, Mapping, Optional, dataclass_transform

__all__ = [
    "option_group",
    "is_option_group",
    "group_parameters",
    "group_fields",
    "flat_options",
    "gather",
    "flatten",
    "take_legacy",
    "warn_deprecated_keyword",
]

_MARK = "__fedjax_clust_option_group__"


@dataclass_transform(eq_default=True)
def option_group(cls: Optional[type] = None, *, eq: bool = True):
    """Make ``cls`` an option group: a frozen dataclass whose fields are options of the builders that take it
    (module docstring), every field with a default. Its docstring's ``Args:`` describe the fields: the command
    line's help reads them. ``eq=False`` for a group that may hold an array (compared by identity)."""

    def make(cls: type) -> type:
        cls = dataclasses.dataclass(frozen=True, eq=eq)(cls)
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        if missing:
            raise TypeError(f"option group {cls.__name__}: field {missing[0]!r} needs a default")
        setattr(cls, _MARK, True)
        return cls

    return make if cls is None else make(cls)


def is_option_group(value) -> bool:
    """Whether ``value`` is an option group (an instance or the class)."""
    return getattr(value, _MARK, False) is True and dataclasses.is_dataclass(value)


def group_fields(group) -> dict:
    """The fields of option group ``group`` (an instance: its values; the class: their defaults, or
    ``inspect.Parameter.empty`` for a required one)."""
    if isinstance(group, type):
        return {
            f.name: f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
            for f in dataclasses.fields(group)
        }
    return {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}


def group_parameters(function: Callable) -> dict:
    """``function``'s keyword parameters whose default is an option group: name -> that default."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in parameters.items() if is_option_group(p.default)}


def flat_options(function: Callable, positional: bool = False) -> dict:
    """``function``'s keyword-only options as flat names, in signature order: name -> (default, source), where an
    option group's fields stand in its place with their record class as source (whose hints and docstring
    describe them), and every other keyword has ``function`` as source. ``positional``: its positional-or-keyword
    parameters too (default ``inspect.Parameter.empty``)."""
    out: dict = {}
    for name, p in inspect.signature(function).parameters.items():
        if p.kind == p.POSITIONAL_OR_KEYWORD and positional:
            out[name] = (inspect.Parameter.empty, function)
        elif p.kind != p.KEYWORD_ONLY:
            continue
        elif is_option_group(p.default):
            out.update({k: (v, type(p.default)) for k, v in group_fields(p.default).items()})
        else:
            out[name] = (p.default, function)
    return out


def _owner_of(groups: Mapping) -> dict:
    """field name -> the group keyword that holds it (a field name in two groups of one function: TypeError)."""
    owner: dict = {}
    for keyword, default in groups.items():
        for field in group_fields(default):
            if field in owner:
                raise TypeError(f"option groups {owner[field]!r} and {keyword!r} both have a field {field!r}")
            owner[field] = keyword
    return owner


def gather(function: Callable, options: Mapping) -> dict:
    """``options`` with the fields of ``function``'s option groups gathered into their group keyword (each over
    the group's default, or over the group given beside them: not both for one field)."""
    groups = group_parameters(function)
    if not groups:
        return dict(options)
    owner = _owner_of(groups)
    out = {k: v for k, v in options.items() if k not in owner}
    for keyword, default in groups.items():
        fields = {k: v for k, v in options.items() if owner.get(k) == keyword}
        if not fields:
            continue
        given = options.get(keyword)  # a record given beside its fields: a field set in both is refused
        base = default if given is None else given
        clash = [] if given is None else [k for k in fields if k in _given(given)]
        if clash:
            raise ValueError(f"give {clash[0]} inside {keyword}=... or as {clash[0]}=..., not both")
        out[keyword] = dataclasses.replace(base, **fields)
    return out


def _path(cls: type) -> str:
    """Where a record class is imported from: its module and name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _same(value, default) -> bool:
    """Whether a field holds its default (a number equal to it counts; an array never does)."""
    plain = (bool, int, float, str)
    return value is default or (isinstance(value, plain) and isinstance(default, plain) and value == default)


def _given(group) -> list:
    """The fields of ``group`` that differ from its class's defaults."""
    defaults = group_fields(type(group))
    return [k for k, v in group_fields(group).items() if not _same(v, defaults[k])]


def flatten(function: Callable, options: Mapping, fixed: tuple = ()) -> dict:
    """``options`` with each option group record given for ``function``'s group keywords replaced by the fields
    it sets (those that differ from its class's defaults), the inverse of :func:`gather`: what lets
    ``make_algorithm`` take ``clustering=FCClustering(quantile=0.5)`` as ``quantile=0.5``. A field set both in its
    record and by name is a ValueError; so is a field the record leaves at its class's default where
    ``function``'s own default differs (a preset's: fedadam's server learning rate), which a record cannot tell
    from a choice of that value: such a field is given by name. ``fixed``: fields ``function`` fixes (a preset's
    hidden options), whose class defaults in a record are no choice."""
    groups = group_parameters(function)
    out = {k: v for k, v in options.items() if not (k in groups and is_option_group(v))}
    for keyword, default in groups.items():
        record = options.get(keyword)
        if record is None or not is_option_group(record):
            continue
        given = _given(record)
        for field, value in group_fields(record).items():
            if field not in given and field not in fixed and not _same(value, getattr(default, field)):
                raise ValueError(
                    f"{keyword}={type(record).__name__}(...) leaves {field} at {value!r}, its class's default, where "
                    f"this algorithm's default is {getattr(default, field)!r}: give {field}=... by name, not in the "
                    "record"
                )
        for field in given:
            if field in out:
                raise ValueError(f"give {field} inside {keyword}=... or as {field}=..., not both")
            out[field] = getattr(record, field)
    return out


def warn_deprecated_keyword(function: str, keyword: str, instead: str, stacklevel: int = 2) -> None:
    """The DeprecationWarning of ``function``'s 0.3.0-deprecated ``keyword``: "FUNCTION()'s KEYWORD= keyword is
    deprecated since fedjax-clust 0.3.0 and goes in the next version: INSTEAD" (the text the suite's warning filter
    reads); ``stacklevel`` as ``warnings.warn`` counts it from the caller of this function."""
    warnings.warn(
        f"{function}()'s {keyword}= keyword is deprecated since fedjax-clust 0.3.0 and goes in the next version: "
        f"{instead}",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def take_legacy(function: str, legacy: Mapping, stacklevel: int = 3, **groups) -> tuple:
    """The option groups ``groups`` (keyword -> the record the builder ``function`` got) with the deprecated flat
    fields in ``legacy`` (its ``**legacy``) put in, with one DeprecationWarning naming the first and its group.
    Any other keyword in ``legacy`` is a TypeError, as Python raises for an unknown keyword; a field both inside
    its group and as a keyword is a ValueError. Returns the groups in the order given."""
    for keyword, value in groups.items():
        if not is_option_group(value) or isinstance(value, type):
            raise ValueError(f"{function}(): {keyword} must be an option record, got {value!r}")
    owner = _owner_of(groups)
    unknown = [k for k in legacy if k not in owner]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    if legacy:
        first = next(iter(legacy))
        instead = f"give {owner[first]}={_path(type(groups[owner[first]]))}({first}=...)"
        warn_deprecated_keyword(function, first, instead, stacklevel=stacklevel)
    out = []
    for keyword, value in groups.items():
        fields = {k: v for k, v in legacy.items() if owner[k] == keyword}
        clash = [k for k in fields if k in _given(value)]
        if clash:
            raise ValueError(f"give {clash[0]} inside {keyword}=... or as {clash[0]}=..., not both")
        out.append(dataclasses.replace(value, **fields) if fields else value)
    return tuple(out)
