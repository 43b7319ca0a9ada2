"""Which hyperparameters decide a compiled program and which are numbers it takes as arguments.

A sweep (:mod:`fedjax_clust.run.sweep`) runs every configuration that differs only in *traced*
hyperparameters as one compiled program: the values enter the program as arguments, so one compilation serves
them all. A *static* hyperparameter decides shapes, loop trip counts or code paths (a number of steps, a batch
size, a rule's name), so each of its values is a program of its own.

The kind is read from a builder's type hint, in one place, the parameter itself:

* a hint marked ``Static[...]`` (``Annotated[..., STATIC]``) is static: a number that nonetheless decides
  shapes or is used in Python before the program is traced (SR-FCA's trimming fraction beta, a target epsilon
  calibrated in Python, the participation fraction that sizes the round's slots);
* otherwise a hint with a ``float`` arm (``float``, ``Optional[float]``, ``Union[float, Literal["theory"]]``) is
  traced: a learning rate, a momentum, a radius or quantile, a regularisation weight;
* everything else is static: integers (steps, counts, K), booleans, strings and ``Literal`` choices, objects,
  and parameters without a hint.

Integers are static by default because most of them count steps or size arrays; an integer that is only a
number (a round threshold) costs one program per value, never a wrong result. A sweep traces a traced
hyperparameter only where every value of its grid is a number (``radius = "theory"`` makes it static there).
"""

from __future__ import annotations

import typing
from types import NoneType, UnionType
from typing import Annotated, TypeVar

__all__ = ["STATIC", "Static", "is_static_hint"]


class _StaticMark:
    """The ``Annotated`` metadata that marks a hyperparameter static (module docstring)."""

    def __repr__(self) -> str:
        return "STATIC"


STATIC = _StaticMark()


_T = TypeVar("_T")
# Static[float] is Annotated[float, STATIC]: a number that decides the compiled program (module docstring); the
# command line reads it as it reads float (a generic alias, so type checkers see the float)
Static = Annotated[_T, STATIC]


def _arms(hint) -> list:
    """The arms of ``hint`` with Optional / Union flattened, ``None`` dropped and ``Annotated`` unwrapped."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is UnionType:
        return [arm for a in typing.get_args(hint) for arm in _arms(a)]
    if origin is typing.Annotated:
        return _arms(typing.get_args(hint)[0])
    return [] if hint is NoneType or hint is None else [hint]


def _marked(hint) -> bool:
    """Whether ``hint`` (or an arm of it) carries the :data:`STATIC` mark."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return any(m is STATIC for m in hint.__metadata__) or _marked(typing.get_args(hint)[0])
    if origin is typing.Union or origin is UnionType:
        return any(_marked(a) for a in typing.get_args(hint))
    return False


def is_static_hint(hint) -> bool:
    """Whether a hyperparameter with type hint ``hint`` is static (module docstring): marked ``Static``, or
    without a ``float`` arm (``None``, no hint, is static)."""
    if hint is None or _marked(hint):
        return True
    return not any(arm is float for arm in _arms(hint))
