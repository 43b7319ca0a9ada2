"""Argument checks shared by the Python API and the command line: one function per kind of argument.

Every check raises ``ValueError`` (never ``TypeError``) with one line that names the argument, the expected
type or range and the value it got, before anything is compiled. The command line prints that line as
``error: ...`` and exits with status 2; the builders, ``simulate`` and the primitives call the same
functions, so the Python API and the CLI accept and refuse exactly the same values.

Traced values (:func:`is_traced`) pass every check unchanged, and this module is the only place that asks:
a number under a JAX trace is either computed inside a compiled program (a quantile's rank inside a round)
or a hyperparameter a sweep maps over its runs (:mod:`fedjax_clust.run.sweep` builds and checks every run
with its concrete values before it traces the program, and hands the values to the program as its
arguments). The kernels call these checks and never inspect their arguments' types themselves.
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable, Literal, Optional

import numpy as np

__all__ = [
    "check_int",
    "check_real",
    "check_learning_rate",
    "check_seed",
    "check_memory_budget",
    "check_choice",
    "check_optional_seed",
    "check_fraction",
    "check_matmul_precision",
    "check_rank",
    "check_radius",
    "is_traced",
    "MATMUL_PRECISIONS",
    "MAX_SEED",
    "FLOAT32_TINY",
    "FLOAT32_MAX",
    "INT32_MAX",
]

MAX_SEED = 2**32 - 1  # jax.random.PRNGKey keeps 32 bits without x64: 2**32 would silently equal seed 0
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal float32, ~1.2e-38
FLOAT32_MAX = float(np.finfo(np.float32).max)  # ~3.4e38
# A count (steps, rounds, sizes) lives in the compiled program as an int32 (loop trip counts, the round counter)
INT32_MAX = 2**31 - 1
MATMUL_PRECISIONS = ("highest", "high", "default")  # JAX's names: full float32; TF32 / bf16x3; device default
MatmulPrecision = Literal[MATMUL_PRECISIONS]


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value) -> bool:
    """A real scalar: Python/NumPy numbers and 0-d integer or float arrays; not bools, strings or arrays."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    return (
        getattr(value, "shape", None) == ()
        and dtype is not None
        and (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating))
    )


def is_traced(value) -> bool:
    """Whether ``value`` is under a JAX trace (an argument or intermediate of a jitted or vmapped function,
    e.g. a hyperparameter a sweep maps over its runs): the checks below pass it, its concrete value having
    been checked where it was made (see the module docstring)."""
    import jax

    return isinstance(value, jax.core.Tracer)


def check_int(name: str, value, low: Optional[int] = 1, high: Optional[int] = None) -> int:
    """``value`` must be an integer (Python or NumPy, not a bool) in [low, high]; returns it as an int.
    Without ``high`` it must still fit an int32 (<= 2**31 - 1): a count becomes a loop trip count or the
    round counter of a compiled program, where a larger one overflows (or runs for ever)."""
    if not _is_int(value):
        raise ValueError(f"{name} must be an integer{_range_text(low, high)}, got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer{_range_text(low, high)}, got {value!r}")
    if high is None and value > INT32_MAX:
        raise ValueError(
            f"{name} must be an integer <= {INT32_MAX} (a count the compiled program holds as an int32), got {value!r}"
        )
    return value


def _number_text(x) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _range_text(low, high, low_open=False, high_open=False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{_number_text(low)}, {_number_text(high)}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {_number_text(low)}"
    if high is not None:
        return f" {'<' if high_open else '<='} {_number_text(high)}"
    return ""


def check_real(
    name: str,
    value,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` must be a real number (not a bool, string or array), not NaN, finite unless ``allow_inf``,
    and inside the given bounds (closed unless ``*_open``); returns it as a float. A finite value must also be
    representable in float32 (|x| <= ~3.4e38): the hyperparameters meet float32 data, where a larger one
    turns into inf at the first step."""
    expected = f"a {'' if allow_inf else 'finite '}number{_range_text(low, high, low_open, high_open)}"
    if is_traced(value):
        return value
    if not _is_real(value):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    x = float(value)
    if math.isnan(x) or (not allow_inf and math.isinf(x)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    if math.isfinite(x) and abs(x) > FLOAT32_MAX:
        raise ValueError(
            f"{name} must be {expected} representable in float32 (|x| <= {FLOAT32_MAX:.3g}), got {value!r}"
        )
    return x


def check_learning_rate(value, name: str = "learning_rate") -> float:
    """A step size float32 can step with: a normal float32 in [~1.2e-38, ~3.4e38].

    Below, eta rounds to zero (or a denormal) in float32 and no model ever moves; above, eta * g overflows
    to inf at the first non-zero gradient.
    """
    lr = check_real(name, value, low=0.0, low_open=True)
    if is_traced(lr):
        return lr
    if not FLOAT32_TINY <= lr <= FLOAT32_MAX:
        raise ValueError(
            f"{name} must be a float32-representable step size in [{FLOAT32_TINY:.3g}, "
            f"{FLOAT32_MAX:.3g}], got {value!r}"
        )
    return lr


def check_seed(value, name: str = "seed") -> int:
    """A seed in [0, 2**32 - 1]: ``jax.random.PRNGKey`` keeps 32 bits, so larger or negative seeds would
    silently collide with smaller ones (2**32 gives the same run as 0)."""
    return check_int(name, value, 0, MAX_SEED)


def check_optional_seed(value, name: str = "seed") -> Optional[int]:
    """None (the run's key decides) or a seed checked by :func:`check_seed`."""
    return None if value is None else check_seed(value, name)


def check_memory_budget(value, name: str = "memory_budget") -> Optional[int]:
    """None (default budget) or a finite number of bytes >= 1 (NumPy integers and integral floats
    accepted); returns an int. Whether it holds one row of the computation is checked where the row's size
    is known (:func:`fedjax_clust.parallel.memory.auto_chunk_size`)."""
    if value is None:
        return None
    budget = check_real(name, value, low=1.0)
    if budget != math.floor(budget):
        raise ValueError(f"{name} must be a whole number of bytes >= 1, got {value!r}")
    return int(budget)


def check_fraction(name: str, value, *, allow_zero: bool = False) -> float:
    """A number in (0, 1] (or [0, 1] with ``allow_zero``)."""
    return check_real(name, value, low=0.0, high=1.0, low_open=not allow_zero)


def check_rank(name: str, value, size: int, what: str):
    """A 1-based rank (or an integer array of them) in [1, ``size``], ``what`` naming the axis it counts
    (e.g. "the number of entries"); returns ``value`` unchanged. Traced ranks pass."""
    if is_traced(value):
        return value
    ranks = np.asarray(value)
    if not np.issubdtype(ranks.dtype, np.integer) or np.any(ranks < 1) or np.any(ranks > size):
        raise ValueError(f"{name} must be an integer in [1, {size}] ({what}), got {value!r}")
    return value


def check_radius(value, num_clusters: Optional[int] = None):
    """A clustering radius: a number >= 0 (inf allowed) or an array of ``num_clusters`` of them (when given),
    or the string 'theory'; returns ``value`` unchanged. A traced radius passes."""
    if is_traced(value):
        return value
    expected = "a number >= 0, an array of K of them or 'theory'"
    if isinstance(value, str):
        if value != "theory":
            raise ValueError(f"radius must be {expected}, got {value!r}")
        return value
    try:
        r = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"radius must be {expected}, got {value!r}") from None
    if r.ndim > 1 or (r.ndim == 1 and num_clusters is not None and r.shape[0] != num_clusters):
        raise ValueError(f"radius must be a scalar or have shape [K]={num_clusters}, got shape {r.shape}")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError(f"radius must be >= 0 (inf allowed), got {value!r}")
    return value


def check_choice(name: str, value, choices: Iterable[str]) -> str:
    """``value`` must be one of ``choices`` (strings)."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def check_matmul_precision(value) -> str:
    """One of ``MATMUL_PRECISIONS`` (see :class:`fedjax_clust.FederatedAlgorithm`)."""
    return check_choice("matmul_precision", value, MATMUL_PRECISIONS)


def check_clusters_fit(num_clusters: int, num_clients: int) -> None:
    """K clusters need at least K clients."""
    if num_clusters > num_clients:
        raise ValueError(f"num_clusters={num_clusters} exceeds the number of clients ({num_clients})")


def check_batch_fits(batch_size: Optional[int], samples_per_client: int) -> None:
    """A minibatch cannot hold more examples than a client has (drawn without replacement)."""
    if batch_size is not None and batch_size > samples_per_client:
        raise ValueError(
            f"batch_size={batch_size} exceeds the {samples_per_client} samples per client "
            "(minibatches are drawn without replacement; omit it for the full local batch)"
        )


def check_mask_size(byzantine, num_clients: int) -> None:
    """ValueError when a Byzantine mask does not cover exactly the ``num_clients`` clients."""
    if byzantine is not None and byzantine.shape[0] != num_clients:
        raise ValueError(f"the byzantine mask has {byzantine.shape[0]} entries but there are {num_clients} clients")
