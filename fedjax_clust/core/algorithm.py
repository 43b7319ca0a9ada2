"""The shape every algorithm shares: ``FederatedAlgorithm(name, init, round)`` over a batched ClientState.

Following optax's (init, update) pairs and FedJAX's ``FederatedAlgorithm(init, apply)``, an algorithm is a
pair of pure functions built by a function that takes its hyperparameters:

    algo = federated_clustering(example_loss, learning_rate=0.01, clustering=FCClustering(quantile=0.2))
    state = algo.start(params0, num_clients, init_key(run_key))  # leaves of state.params: [N, ...]
    state, metrics = jax.jit(algo.round)(state, data, key)  # data leaves: [N, n_samples, ...]

Unlike FedJAX, the N clients are never visited one by one: every client's parameters and optimiser state
live in one pytree with a leading client axis and each round is a single vmapped, jit-compiled function.

Numerics that do not depend on the device: every algorithm's ``round`` and ``evaluate`` trace their matrix
products at ``matmul_precision`` (default ``"highest"``: full float32 on every device). JAX's own default
lets a GPU use TF32 (10-bit mantissa) and a TPU bfloat16 for float32 matmuls, which changed the final error
of the default experiment on an H100 from 1.5e-9 to 3.5e-3. ``algo.with_matmul_precision("default")``
opts into the faster device default.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import numpy as np

from fedjax_clust.core.execution import Execution
from fedjax_clust.core.state import ClientState
from fedjax_clust.core.unseen import CLIENT_MODELS, UnseenRule
from fedjax_clust.core.validation import check_matmul_precision

PyTree = Any

__all__ = ["FederatedAlgorithm", "at_matmul_precision", "takes_key", "MASKED_WITH_ROWS"]


def takes_key(init: Callable) -> bool:
    """Whether an ``init`` function takes the run's initialisation key (a parameter named ``key``, or
    ``**kwargs``); a plugin's two-argument ``init(params, num_clients)`` does not, and keeps working."""
    try:
        parameters = inspect.signature(init).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "key" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def at_matmul_precision(fn: Callable, precision: str) -> Callable:
    """``fn`` with every matmul it traces at ``precision`` (JAX's ``default_matmul_precision``).

    The precision is fixed when the function is traced, so ``jax.jit(at_matmul_precision(f, p))`` compiles
    ``p`` into the program.
    """
    check_matmul_precision(precision)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision(precision):
            return fn(*args, **kwargs)

    wrapped.matmul_precision = precision
    return wrapped


MASKED_WITH_ROWS = "rows"  # masked participation only while the clients hold per-client rows (not a ModelTable)


def _checked_masking(name: str, value) -> Union[bool, str]:
    if value == MASKED_WITH_ROWS:
        return MASKED_WITH_ROWS
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(
        f"algorithm {name!r}: masked_participation must be True, False or {MASKED_WITH_ROWS!r}, got {value!r}"
    )


class _AlgorithmFields(NamedTuple):
    name: str
    init: Callable[..., ClientState]  # (params, num_clients) or (params, num_clients, key=None)
    apply: Callable[[ClientState, PyTree, jax.Array], tuple]
    hparams: dict
    evaluate_fn: Optional[Callable[[ClientState, jax.Array, PyTree, PyTree], dict]] = None
    matmul_precision: str = "highest"
    masked_participation: Union[bool, str] = False
    execution: Execution = Execution()
    unseen: Optional[UnseenRule] = None
    hyperparameters: Any = None  # the typed record make_algorithm built it from (algorithms.hyperparameter_record)
    origin: Any = None  # how make_algorithm built it, to build it again with traced numbers (algorithms.numbered)
    # derived by __new__, never given: apply / evaluate_fn traced at matmul_precision
    round: Optional[Callable] = None
    evaluate: Optional[Callable] = None


_DERIVED = ("round", "evaluate")


class FederatedAlgorithm(_AlgorithmFields):
    """An algorithm: ``init(params, num_clients) -> ClientState`` and
    ``round(state, data, key) -> (state, metrics)``, a pure function to be jit-compiled.

    An algorithm whose initial state is random beyond the model's initial parameters takes the run's key as
    a third argument, ``init(params, num_clients, key=None)``; drivers call :meth:`start`, which passes the
    key only to an ``init`` that takes one, so two-argument plugins keep working.

    ``apply`` is the round as its builder wrote it; ``round`` is ``apply`` traced at ``matmul_precision``
    (see the module docstring), derived when the algorithm is built. Wrappers (participation, label flipping,
    a user's own) compose ``apply`` -- ``algorithm._replace(apply=new_apply)`` -- and never see the precision,
    so the precision is applied once, outermost, whatever the order of the wrappers (optax's wrappers need
    nothing from what they wrap in the same way). Construct with another ``matmul_precision`` or call
    :meth:`with_matmul_precision` to change it.

    ``evaluate_fn(state, client_mask, data, test_data) -> metrics``, when given, replaces
    ``task.evaluate(state.params, client_mask, data=data, test_data=test_data)`` for algorithms whose
    personalised predictor is not a parameter vector per client (kNN-Per); ``client_mask`` [N] bool selects
    the clients the means run over; the data come as arguments so a jitted evaluation does not compile them
    in as constants. ``evaluate`` is it at ``matmul_precision`` (None without one).

    Partial participation (:mod:`fedjax_clust.algorithms.participation`) gathers the participants' rows of
    any state (its clients' part, :class:`~fedjax_clust.core.state.ClientState`) and runs the round on them;
    ``masked_participation`` marks the algorithms whose round takes every client's row and the participants
    instead (:func:`~fedjax_clust.core.participants.participant_mask`): SR-FCA and the 3-stage algorithm,
    whose clustering stages see every client (``True``). :data:`MASKED_WITH_ROWS` (``"rows"``) marks an
    algorithm that needs every row only when its clients hold per-client rows, and is gathered like any other
    when its clients' models are a server-held :class:`~fedjax_clust.core.model_table.ModelTable`: Global /
    Ground-truth, whose non-participants take their group's step (a table row does, by construction; per-client
    starts must each take it).

    ``unseen`` (:class:`~fedjax_clust.core.unseen.UnseenRule`, None: every client's model is a candidate) is
    the algorithm's rule for the model a client never seen in training uses (:mod:`fedjax_clust.core.unseen`).

    ``execution`` (:class:`~fedjax_clust.core.execution.Execution`) is what a driver needs to know about how
    the round runs (devices, the fewest clients a round takes, budget-sized temporaries, ...), typed fields
    that generic code reads instead of one algorithm's ``hparams`` keys.

    ``hyperparameters`` is the typed record (:class:`~fedjax_clust.algorithms.hyperparameter_record.Hyperparameters`:
    every option the user chose, static and traced fields marked) ``make_algorithm`` built the algorithm from;
    a run's ``run.json`` records it (None for an algorithm built by hand). ``hparams`` is what the builder
    resolved from it (the K it took from the task, the chunk it sized, the privacy it calibrated). ``origin``
    is how ``make_algorithm`` built it (:class:`~fedjax_clust.algorithms.numbered.Origin`): what lets a driver
    build it again inside a compiled program with its numbers as the program's arguments
    (:func:`~fedjax_clust.algorithms.numbered.numbered`; None for an algorithm built by hand).
    """

    __slots__ = ()

    def __new__(
        cls,
        name,
        init,
        apply,
        hparams,
        evaluate_fn=None,
        matmul_precision="highest",
        masked_participation=False,
        execution=None,
        unseen=None,
        hyperparameters=None,
        origin=None,
    ):
        if not callable(apply) or not callable(init):
            raise ValueError(f"algorithm {name!r}: init and apply must be functions")
        execution = Execution() if execution is None else execution
        if not isinstance(execution, Execution):
            raise ValueError(f"algorithm {name!r}: execution must be an Execution, got {execution!r}")
        if unseen is not None and not isinstance(unseen, UnseenRule):
            raise ValueError(f"algorithm {name!r}: unseen must be an UnseenRule, got {unseen!r}")
        round_ = at_matmul_precision(apply, matmul_precision)
        evaluate = None if evaluate_fn is None else at_matmul_precision(evaluate_fn, matmul_precision)
        return super().__new__(
            cls,
            name,
            init,
            apply,
            hparams,
            evaluate_fn,
            matmul_precision,
            _checked_masking(name, masked_participation),
            execution,
            unseen,
            hyperparameters,
            origin,
            round_,
            evaluate,
        )

    def start(self, params, num_clients: int, key=None) -> ClientState:
        """The initial state: ``init(params, num_clients, key=key)`` when ``init`` takes a key (an algorithm
        with random initialisation of its own: IFCA's and HypCluster's cluster models, FedSoft's, ...), else
        ``init(params, num_clients)``. ``key`` is the run's initialisation key
        (:func:`fedjax_clust.core.keys.init_key`); None lets such an algorithm fall back to ``PRNGKey(0)``."""
        if key is not None and takes_key(self.init):
            return self.init(params, num_clients, key=key)
        return self.init(params, num_clients)

    def _replace(self, **changes):
        derived = sorted(set(changes) & set(_DERIVED))
        if derived:
            raise ValueError(
                f"{derived} are derived from apply / evaluate_fn and matmul_precision; replace "
                "apply= / evaluate_fn= instead"
            )
        fields = {k: v for k, v in self._asdict().items() if k not in _DERIVED}
        return FederatedAlgorithm(**{**fields, **changes})

    @property
    def unseen_rule(self) -> UnseenRule:
        """The rule for unseen clients: ``unseen``, or every trained client's model (``best-client-model``)."""
        return CLIENT_MODELS if self.unseen is None else self.unseen

    def with_matmul_precision(self, precision: str) -> "FederatedAlgorithm":
        """The same algorithm with its matmuls traced at ``precision`` ("highest", "high" or "default";
        on a GPU "high" and "default" allow TF32, on a TPU bfloat16 passes; a CPU ignores it)."""
        return self._replace(matmul_precision=precision)
