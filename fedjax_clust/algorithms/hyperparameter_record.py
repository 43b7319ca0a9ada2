"""Each algorithm's hyperparameters as one frozen, typed record that says which are static and which traced.

``hyperparameters("federated-clustering", learning_rate=0.01, quantile=0.2)`` is an instance of the class
:func:`hyperparameters_class` makes for the algorithm: one field per keyword ``make_algorithm`` takes for it
(the shared ones, learning rate, batch size, momentum where its clients use it, the privacy settings, ...,
and its builder's own), with the builder's type hint and default. Each field is *static* or *traced* by its
hint (:mod:`fedjax_clust.core.hyperparameter_kinds`: floats are traced unless marked ``Static``, everything
else is static); a sweep groups its runs into compiled programs by the static part and passes the traced part
as arguments (:func:`static_hyperparameters`). ``make_algorithm(name, task, hp)`` builds from the record, as
from the same keywords.

The class is derived from the signatures, never written twice: a builder's parameter (and its hint) is the
one place an option is declared, for ``make_algorithm``, the command line, config files and sweeps alike. A
plugin's builder gets its class the same way (its floats traced, its integers static); its spec's
``static_hparams`` still adds static names (deprecated: mark the parameter ``Static[...]``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, ClassVar, Mapping

from fedjax_clust.algorithms.registry import AlgorithmSpec, algorithm_spec
from fedjax_clust.core.hyperparameter_kinds import is_static_hint

__all__ = [
    "Hyperparameters",
    "hyperparameters",
    "hyperparameters_class",
    "record_of",
    "static_hyperparameters",
    "traced_hyperparameters",
]

# make_algorithm's keywords that are not fields: how a run is given (the privacy settings object stands for the
# dp_* fields, which the record holds)
_NOT_FIELDS = ("hyperparameters", "privacy")


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """The base of every algorithm's hyperparameter record (module docstring); ``ALGORITHM`` names the
    algorithm a subclass belongs to."""

    ALGORITHM: ClassVar[str] = ""

    @classmethod
    def static_names(cls) -> tuple:
        """The fields that decide the compiled program (shapes, loop trip counts, code paths)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata["static"])

    @classmethod
    def traced_names(cls) -> tuple:
        """The fields a compiled program takes as arguments (numbers)."""
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata["static"])

    def options(self) -> dict:
        """``{field: value}``: the keywords of ``make_algorithm`` these hyperparameters stand for."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def static_part(self) -> dict:
        """The static fields' values: two records with equal static parts share a compiled program."""
        return {n: getattr(self, n) for n in self.static_names()}

    def traced_part(self) -> dict:
        """The traced fields' values."""
        return {n: getattr(self, n) for n in self.traced_names()}

    def describe(self) -> dict:
        """What a run's ``run.json`` records of the record: ``{"algorithm", "static": {...}, "traced": {...}}``,
        each value as JSON holds it: a function by its name, an attack or aggregator by its name and changed
        options (:func:`~fedjax_clust.robust.registry.recorded_name`), an array (an availability trace, a
        per-client table) by its dtype, shape and a digest of its bytes, a device mesh by its axes."""
        return {
            "algorithm": self.ALGORITHM,
            "static": {k: _described(v) for k, v in self.static_part().items()},
            "traced": {k: _described(v) for k, v in self.traced_part().items()},
        }

    def replace(self, **changes) -> "Hyperparameters":
        """The same record with ``changes`` (field names checked as in :func:`hyperparameters`)."""
        _check_names(type(self), changes)
        return dataclasses.replace(self, **changes)


_LISTED = 16  # an array of at most this many entries is written out; a larger one by its digest


def _described(value):
    """``value`` as JSON holds it (see :meth:`Hyperparameters.describe`)."""
    import hashlib

    import numpy as np

    from fedjax_clust.io.jsonio import json_safe

    if value is None or isinstance(value, (bool, int, float, str)):
        return json_safe(value)
    if isinstance(value, (list, tuple)):
        return [_described(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _described(v) for k, v in value.items()}
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "__array__"):
        array = np.asarray(value)
        if array.size <= _LISTED:
            return json_safe(array)
        digest = hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]
        return {"dtype": str(array.dtype), "shape": list(array.shape), "sha1": digest}
    if hasattr(value, "axis_names") and hasattr(value, "devices"):  # a jax.sharding.Mesh
        return {"mesh": dict(zip(value.axis_names, np.shape(value.devices)))}
    if isinstance(getattr(value, "attack_name", None) or getattr(value, "aggregator_name", None), str):
        from fedjax_clust.robust.registry import recorded_name

        return recorded_name(value)  # its name and the options it changed: "ipm(epsilon=5.0)"
    for attribute in ("name", "__name__"):
        named = getattr(value, attribute, None)
        if isinstance(named, str):
            return named
    return repr(value)


def _hints(function) -> dict:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # a plugin's hint that does not resolve: its fields are untyped (and static)
        return {}


def _keyword_parameters(function) -> list:
    return [p for p in inspect.signature(function).parameters.values() if p.kind == p.KEYWORD_ONLY]


def _fields_of(spec: AlgorithmSpec) -> list:
    """(name, hint or None, default or inspect.Parameter.empty) of every keyword make_algorithm takes for
    ``spec``'s algorithm: its shared keywords that apply (and every privacy setting), then the builder's own."""
    from fedjax_clust.algorithms import algorithm_takes
    from fedjax_clust.algorithms.factory import shared_keywords

    fields, seen = [], set()
    declared = shared_keywords()
    hints = {f: _hints(f) for f in dict.fromkeys(f for _, f in declared)}  # per declaring function, once
    for p, function in declared:
        if p.name in _NOT_FIELDS or not (p.name.startswith("dp_") or algorithm_takes(spec.name, p.name)):
            continue
        # the learning rate is required (make_algorithm's None default only lets it say so by name)
        default = inspect.Parameter.empty if p.name == "learning_rate" else p.default
        fields.append((p.name, hints[function].get(p.name), default))
        seen.add(p.name)
    for name, default in spec.options.items():  # an option group's fields are typed in its class
        if name not in seen:
            source = spec.option_source(name)
            if source not in hints:
                hints[source] = _hints(source)
            fields.append((name, hints[source].get(name), default))
    return fields


def _field(hint, default, static: bool):
    metadata = {"static": static}
    if default is inspect.Parameter.empty:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=functools.partial(type(default), default), metadata=metadata)
    if type(default).__hash__ is None:  # another unhashable default (an array): the same object, as the builder's
        return dataclasses.field(default_factory=functools.partial(_same, default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _same(value):
    return value


@functools.lru_cache(maxsize=None)
def _class_for(spec: AlgorithmSpec) -> type[Hyperparameters]:
    declared_static = set(spec.static_hparams)  # a plugin's (deprecated) list of static names
    required: list = []
    optional: list = []
    for name, hint, default in _fields_of(spec):
        static = name in declared_static or is_static_hint(hint)
        entry = (name, hint if hint is not None else Any, _field(hint, default, static))
        (required if default is inspect.Parameter.empty else optional).append(entry)
    title = "".join(part.capitalize() for part in spec.name.replace("_", "-").split("-") if part)
    cls: type[Hyperparameters] = dataclasses.make_dataclass(
        f"{title}Hyperparameters", required + optional, bases=(Hyperparameters,), frozen=True
    )
    cls.ALGORITHM = spec.name
    cls.__doc__ = f"The hyperparameters of {spec.name!r} (see fedjax_clust.algorithms.hyperparameter_record)."
    return cls


def hyperparameters_class(name: str) -> type[Hyperparameters]:
    """The :class:`Hyperparameters` subclass of the registered algorithm ``name`` (made once per spec)."""
    return _class_for(algorithm_spec(name))


def _check_names(cls, values: Mapping) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in known]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"algorithm {cls.ALGORITHM!r} has no hyperparameter {unknown[0]!r}{hint}; it has {known}")


def hyperparameters(name: str, **values: Any) -> Hyperparameters:
    """The hyperparameter record of algorithm ``name`` with ``values`` (the rest at their defaults); a
    ValueError names an unknown field (with the nearest one) or a required one left out (e.g. the learning
    rate). The values are checked when the algorithm is built (``make_algorithm(name, task, record)``)."""
    cls = hyperparameters_class(name)
    _check_names(cls, values)
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in values
    ]
    if missing:
        raise ValueError(f"algorithm {name!r} needs {missing[0]} ({missing[0]}=...)")
    return cls(**values)


def record_of(name: str, chosen: Mapping[str, Any]) -> Hyperparameters:
    """The record of algorithm ``name`` that ``make_algorithm``'s keywords and options ``chosen`` stand for
    (checked by it already): the record's fields among them, the rest at their defaults. A keyword the
    algorithm ignores (``momentum`` where its clients step without it) is not a field and is left out."""
    cls = hyperparameters_class(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in chosen.items() if k in fields})


def traced_hyperparameters(name: str) -> tuple:
    """The names a sweep of algorithm ``name`` may trace: its record's traced fields less those its spec still
    declares static (``static_hparams``, deprecated)."""
    declared = set(algorithm_spec(name).static_hparams)
    return tuple(n for n in hyperparameters_class(name).traced_names() if n not in declared)


def static_hyperparameters(name: str) -> tuple:
    """The names a sweep of algorithm ``name`` never traces: its record's static fields, the names its spec
    still declares static (``static_hparams``, deprecated) and the seed."""
    static = hyperparameters_class(name).static_names()
    declared = tuple(n for n in algorithm_spec(name).static_hparams if n not in static)
    return static + declared + ("seed",)
