"""``make_algorithm``: an algorithm of the registry built for a task from its options and the shared settings
(learning rate, batch, momentum, K, matmul precision, attackers, a robust aggregator, participation, weighting,
privacy), with the wrappers those settings ask for (label flipping, participation, the privacy ledger) composed
around the registered builder's algorithm (:mod:`fedjax_clust.algorithms.registry`)."""

import inspect
import os
from typing import Callable, Literal, Mapping, Optional, Sequence, Union

import numpy as np

from fedjax_clust.algorithms.hyperparameter_record import Hyperparameters, record_of
from fedjax_clust.algorithms.label_flipping import label_classes, with_label_flipping
from fedjax_clust.algorithms.numbered import with_origin
from fedjax_clust.algorithms.participation import (
    ParticipationRule,
    load_availability,
    participation_rule,
    with_participation,
)
from fedjax_clust.algorithms.private import plan_central_privacy, plan_local_privacy, with_ledger
from fedjax_clust.algorithms.registry import algorithm_names, algorithm_spec
from fedjax_clust.algorithms.settings import Participation, grouped_settings, warn_deprecated_keywords
from fedjax_clust.core.algorithm import FederatedAlgorithm
from fedjax_clust.core.batching import largest_client
from fedjax_clust.core.hyperparameter_kinds import Static
from fedjax_clust.core.optim import DEFAULT_MOMENTUM, MomentumForm
from fedjax_clust.core.option_groups import flatten
from fedjax_clust.core.validation import MatmulPrecision, check_batch_fits, is_traced
from fedjax_clust.core.weighting import WEIGHTINGS, by_examples
from fedjax_clust.privacy.local import LocalPrivacy
from fedjax_clust.privacy.settings import DP_DEFAULTS, PrivacySettings, privacy_keywords, privacy_settings
from fedjax_clust.robust.aggregators import AggregatorName, make_aggregator
from fedjax_clust.robust.attacks import AttackName, make_attack

__all__ = ["make_algorithm", "algorithm_takes", "options_per_algorithm", "shared_keywords", "SHARED_KEYWORDS"]

# make_algorithm's keywords that every algorithm uses
SHARED_KEYWORDS = ("learning_rate", "batch_size", "matmul_precision", "participation", "availability")


def algorithm_takes(name: str, keyword: str) -> bool:
    """Whether ``make_algorithm(name, ..., keyword=...)`` uses ``keyword``: the keywords every algorithm uses
    (:data:`SHARED_KEYWORDS`), ``attack`` (every algorithm: a data attack applies to all), ``momentum`` /
    ``momentum_form`` where the clients step with SGD momentum (make_algorithm passes them to no other),
    ``num_clusters`` where it takes K, and its builder's own keywords (``aggregator`` where it aggregates)."""
    spec = algorithm_spec(name)
    return keyword in SHARED_KEYWORDS or keyword == "attack" or spec.takes(keyword)


def options_per_algorithm(
    algorithms: Sequence[str], options: Optional[Mapping], algorithm_options: Optional[Mapping], whose: str
) -> dict:
    """``{algorithm: make_algorithm keywords}`` of a comparison or a study (``whose``) of ``algorithms``: each
    option of ``options`` for every algorithm that takes it (:func:`algorithm_takes`; an option no algorithm takes
    is a ValueError), and ``algorithm_options[name]`` (``{keyword: value}``, one algorithm's own) on top; a name
    in ``algorithm_options`` that is not among ``algorithms`` is a ValueError."""
    options, algorithm_options = dict(options or {}), dict(algorithm_options or {})
    strangers = [name for name in algorithm_options if name not in algorithms]
    if strangers:
        raise ValueError(
            f"algorithm_options names {strangers[0]!r}, which is not an algorithm of the {whose} {list(algorithms)}"
        )
    for key in options:
        if not any(algorithm_takes(name, key) for name in algorithms):
            raise ValueError(f"no algorithm of the {whose} ({', '.join(algorithms)}) takes the options option {key!r}")
    return {
        name: {
            **{k: v for k, v in options.items() if algorithm_takes(name, k)},
            **dict(algorithm_options.get(name, {})),
        }
        for name in algorithms
    }


def _options_every_algorithm_takes(
    *,
    momentum: float = DEFAULT_MOMENTUM,
    momentum_form: MomentumForm = "heavy-ball",
    num_clusters: Optional[int] = None,
    availability: Union[str, np.ndarray, None] = None,
    dp_clip: Optional[float] = None,
    dp_mode: Literal["central", "local"] = "central",
    dp_noise: Optional[float] = None,
    dp_epsilon: Static[Optional[float]] = None,
    dp_delta: Static[float] = 1e-5,
    dp_sampling: Static[float] = 1.0,
    dp_rounds: Optional[int] = None,
    dp_slots: Optional[int] = None,
    dp_accountant: Literal["rdp", "dp-rdp", "pld"] = "rdp",
    dp_denominator: Literal["expected", "noisy-count"] = "expected",
    dp_count_noise_ratio: Static[float] = 10.0,
    dp_clip_quantile: Static[Optional[float]] = None,
    dp_clip_lr: Static[float] = 0.2,
    dp_clip_count_noise: Static[Optional[float]] = None,
) -> None:
    """The shared options :func:`make_algorithm` reads from its ``**options`` (beside its own keywords),
    declared once: this signature and its ``Args:`` are their hints, defaults and descriptions for
    ``make_algorithm``, the command line's flags and the hyperparameter records' fields (:func:`shared_keywords`).
    Never called. ``availability`` and the ``dp_*`` options are deprecated in Python (0.3.0: give
    ``participation=Participation(...)`` / ``privacy=...``), not on the command line.

    Args:
      momentum: SGD momentum beta in [0, 1) of the algorithms whose clients step with SGD momentum
        (Federated-Clustering, Local, Global, Ground-truth, Myopic-Clustering, kNN-Per's FedAvg model); the
        others step with plain SGD as in their papers. Default 0.9, as the paper authors ran them.
      momentum_form: heavy-ball (m = v + beta m) or average (the paper authors' synthetic scripts:
        m = (1 - beta) v + beta m, m_1 = v_1).
      num_clusters: K of the algorithms that take it (None: the task's true K).
      availability: a bool [rounds, N] trace of the clients that may take part in each round, or the path of
        a .npy file holding one; with ``participation`` that many are drawn among them, alone as many as the
        scarcest round has.
      dp_clip: differential privacy (simulated DP, docs/guides/privacy.md): the clip bound C > 0 of every
        message; giving it makes the run private.
      dp_mode: "central" (a trusted server clips, sums and noises: global, ground-truth, ifca-1, ifca-2,
        hypcluster, ditto's global model, cfl) or "local" (every client clips and noises each message it sends:
        federated-clustering); every other algorithm and robust aggregator refuses.
      dp_noise: the noise multiplier z > 0: Gaussian noise of std z C on every group's sum (or give dp_epsilon).
      dp_epsilon: a target epsilon instead of dp_noise: the smallest z reaching it in dp_rounds rounds.
      dp_delta: the delta epsilon is reported (and calibrated) at, in (0, 1).
      dp_sampling: the Poisson rate q in (0, 1]: each client takes part in a round independently with
        probability q (1: every client every round).
      dp_rounds: the rounds a dp_epsilon target must last (the command line passes --rounds).
      dp_slots: the fixed slots of the Poisson sample (None: enough that more clients are drawn with
        probability at most 1e-16 per round).
      dp_accountant: "rdp" (our Renyi-DP accountant at integer orders, no dependency), "dp-rdp" or "pld"
        (Google's dp-accounting: pip install "fedjax-clust[privacy]").
      dp_denominator: "expected" (each group's noisy sum over q N / G) or "noisy-count" (over its member count
        plus Gaussian noise, also accounted).
      dp_count_noise_ratio: with "noisy-count" (and for private CFL's split count), the count noise's std over z
        (in clients).
      dp_clip_quantile: adaptive clipping (Andrew et al. 2021): the target share gamma in (0, 1) of messages
        within the bound, which then follows it from dp_clip (None: a fixed bound; the paper: 0.5).
      dp_clip_lr: adaptive clipping's geometric step eta >= 0 (the paper's 0.2).
      dp_clip_count_noise: adaptive clipping's noise std sigma_b on the clipped count, in clients (None: the
        paper's q N / 20), also accounted: a dp_epsilon target raises z to make room for it.
    """


def make_algorithm(
    name: str,
    task,
    hyperparameters: Optional[Hyperparameters] = None,
    /,
    *,
    learning_rate: Optional[float] = None,
    batch_size: Optional[int] = None,
    matmul_precision: MatmulPrecision = "highest",
    attack: Union[AttackName, Callable, None] = None,
    aggregator: Union[AggregatorName, Callable, None] = None,
    participation: Static[Union[int, float, ParticipationRule, Participation, None]] = None,
    weighting: Literal["uniform", "examples"] = "uniform",
    privacy: Optional[PrivacySettings] = None,
    **options,
) -> FederatedAlgorithm:
    """Build algorithm ``name`` (a registered name: ``ALGORITHMS`` and the plugins, see
    :func:`~fedjax_clust.algorithms.registry.algorithm_names`) for ``task``.

    ``options`` are algorithm-specific keyword arguments of the builder (e.g. Federated-Clustering's
    clustering_steps, radius, quantile, local_steps, subgroups, chunk_size, mesh) and the shared ``momentum``,
    ``momentum_form`` and ``num_clusters``. Its keywords below are options every algorithm shares too; the
    command line's defaults are these (and the builders'), except
    that it runs with ``--lr 0.01`` when no learning rate is given. On a task with a neural model
    (``task.logits``), IFCA's and HypCluster's K cluster models start from K independent draws of the
    task's initialiser unless ``init_cluster_params`` is given (FedSoft's likewise).

    Args:
      name: a registered algorithm name.
      task: the :class:`~fedjax_clust.tasks.Task` it runs on (loss, clients, true clusters).
      hyperparameters: the algorithm's hyperparameter record
        (:func:`~fedjax_clust.algorithms.hyperparameters.hyperparameters`), instead of the keywords below and
        ``options`` (not both).
      learning_rate: the clients' step size eta > 0 (required here; the command line's default is 0.01).
      batch_size: minibatch per client per round (None: all of its examples).
      matmul_precision: the precision every matmul of the round and the evaluation is traced at:
        "highest" (default: full float32 on every device), "high" or "default" (on a GPU TF32, on a TPU
        bfloat16 passes); see :class:`FederatedAlgorithm`.
      attack: what the task's Byzantine clients (``task.byzantine``, see
        :func:`fedjax_clust.robust.mark_byzantine`) send: a registered name (:data:`fedjax_clust.robust.ATTACKS`
        and the plugins), the name with options as runs record them (``"ipm(epsilon=5.0)"``, what
        ``--attack`` takes) or an attack from :func:`fedjax_clust.robust.make_attack`; needed exactly when the
        task has them.
        "ball-edge" applies to Federated-Clustering only, "label-flip" (a data attack, see
        :mod:`fedjax_clust.algorithms.label_flipping`) to a classification task.
      aggregator: robust aggregation of what the server averages (a group's gradients, updates or models):
        a registered name (:data:`fedjax_clust.robust.AGGREGATORS` and the plugins), the name with options
        (``"trimmed-mean(beta=0.25)"``, what ``--aggregator`` takes) or a rule from
        :func:`fedjax_clust.robust.make_aggregator` (None: the mean; three-stage: its TrMean_beta).
      participation: the clients taking part in each round (see :mod:`fedjax_clust.algorithms.participation`):
        a :class:`~fedjax_clust.algorithms.settings.Participation` (a fraction or a count drawn uniformly without
        replacement, and an availability trace), a bare fraction in (0, 1] (0.5) or count (50), or a
        :class:`~fedjax_clust.algorithms.participation.ParticipationRule` (None: every client).
      weighting: the client weights of the server's means (the algorithms that average; see
        :mod:`fedjax_clust.core.weighting`): "uniform" (default) or "examples" (each client's number of
        training examples, FedAvg's n_k / n).
      privacy: the privacy settings (None: not private): checked settings from
        :func:`fedjax_clust.privacy.central_privacy` or :func:`fedjax_clust.privacy.local_privacy` (their
        fields are the dp_ keywords without the prefix: clip, noise_multiplier, target_epsilon, ...;
        :mod:`fedjax_clust.privacy.settings`). The run is the one its dp_ keywords give: the hyperparameter
        record holds those.
      options: the builder's own keywords (its algorithm's options, e.g. Federated-Clustering's radius; an
        option group's fields by name, or its record whole, ``clustering=FCClustering(radius=1.0)``), and
        the options every algorithm takes that are not keywords here (:func:`shared_keywords`; each is
        described in ``_options_every_algorithm_takes``' docstring and in docs/options.md): ``momentum`` (SGD
        momentum beta in [0, 1), default 0.9, of the algorithms whose clients step with SGD momentum:
        Federated-Clustering, Local, Global, Ground-truth, Myopic-Clustering, kNN-Per's FedAvg model; the
        others step with plain SGD as in their papers and ignore it, so one set of options serves a
        comparison), ``momentum_form`` (heavy-ball m = v + beta m, or average m = (1 - beta) v + beta m as
        in the paper authors' synthetic scripts), ``num_clusters`` (K of the algorithms that take it; None: the
        task's true K), and the deprecated ``availability`` and ``dp_*`` keywords below.

    Deprecated (0.3.0, removed in the next version): the ``dp_*`` keywords (give ``privacy=``) and
    ``availability`` (give ``participation=Participation(..., availability=...)``) still work, with a
    DeprecationWarning (:mod:`fedjax_clust.algorithms.settings`); a hyperparameter record holds them as its
    fields, as before, and the command line's ``--dp-*`` / ``--availability`` flags are not deprecated.
    """
    given = {k: v for k, v in locals().items() if k in _OWN_KEYWORDS}
    spec = algorithm_spec(name)
    if "attackers" in options:
        raise ValueError(
            "make_algorithm takes attack=... and the task's marked clients (fedjax_clust.robust.mark_byzantine), "
            "not attackers=: it builds the Attackers record itself"
        )
    options = flatten(spec.builder or spec.build, options, spec.hidden)  # a record given whole: its fields
    given.update({k: options.pop(k, default) for k, default in _OPTION_DEFAULTS.items()})
    warn_deprecated_keywords(given)
    return _make(name, task, hyperparameters, given, privacy, options)


def _make(name, task, hyperparameters, given: dict, privacy, options: dict) -> FederatedAlgorithm:
    """``make_algorithm`` past its deprecation check: ``given`` its shared keywords' values."""
    if isinstance(given["participation"], Participation):
        if given["availability"] is not None:
            raise ValueError("give availability inside the Participation settings, not beside them")
        given.update(given["participation"].keywords())
    learning_rate, batch_size, num_clusters = given["learning_rate"], given["batch_size"], given["num_clusters"]
    attack, aggregator, weighting = given["attack"], given["aggregator"], given["weighting"]
    participation, availability = given["participation"], given["availability"]
    momentum, momentum_form = given["momentum"], given["momentum_form"]
    if privacy is not None:
        beside = [k for k in DP_DEFAULTS if given[k] != DP_DEFAULTS[k]]
        if beside:
            raise ValueError(f"give the privacy settings as privacy=... or as {beside[0]}=..., not both")
        given.update(privacy_keywords(privacy))
    if hyperparameters is not None:
        return _from_record(name, task, hyperparameters, given, options)
    chosen = {**given, **options}  # what the record holds (options is completed for the builder below)
    spec = algorithm_spec(name)
    if attack is not None and task.byzantine is None:
        raise ValueError(
            "an attack needs Byzantine clients: mark them with "
            "fedjax_clust.robust.mark_byzantine(task, fraction=...) first"
        )
    if attack is None and task.byzantine is not None:
        raise ValueError(f"task {task.name!r} has Byzantine clients: give the attack they run (attack=...)")
    flip_classes = None
    if attack is not None:
        attack = make_attack(attack) if isinstance(attack, str) else attack
        if getattr(attack, "on_data", False):  # label flipping: honest messages computed on poisoned data
            flip_classes = label_classes(task, attack.options.get("num_classes"))
        elif not spec.attackable:
            raise ValueError(
                f"algorithm {name!r} takes no attackers (its builder takes no attackers); "
                "only data attacks (label-flip) apply to it"
            )
        else:
            # a traced mask (a sweep's per-run argument, Task.masks) stays one: runs that differ only in their
            # attackers share the compiled program
            mask = task.byzantine if is_traced(task.byzantine) else np.asarray(task.byzantine, bool)
            options.update(attack=attack, byzantine=mask)
    if isinstance(aggregator, str) and "(" in aggregator:  # a name with its options, as a run records it
        aggregator = make_aggregator(aggregator)
    if aggregator is not None:
        if not spec.aggregates:
            aggregating = [n for n in algorithm_names() if algorithm_spec(n).aggregates]
            raise ValueError(f"{name!r} takes no aggregator; robust aggregators apply to {aggregating}")
        options["aggregator"] = aggregator
    if spec.sgd_momentum:
        options.update(momentum=momentum, momentum_form=momentum_form)
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if weighting != "uniform":
        if not spec.takes("weighting"):
            weighted = [n for n in algorithm_names() if algorithm_spec(n).takes("weighting")]
            raise ValueError(f"{name!r} takes no weighting (it averages no clients, or only robustly); {weighted} do")
        options["weighting"] = by_examples(task.data)
    unknown = sorted(key for key in options if not spec.takes(key))
    renamed = [key for key in unknown if key in spec.renamed]
    if renamed:
        new = spec.renamed[renamed[0]]
        raise ValueError(
            f"algorithm {name!r} takes no option {renamed[0]!r}: it was renamed {new!r} (fedjax-clust 0.3.0); "
            f"give {new}=..."
        )
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], list(spec.options), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(
            f"algorithm {name!r} takes no option {unknown[0]!r}{hint}; its options are {sorted(spec.options)}"
        )
    missing = [
        key
        for key, default in spec.options.items()
        if default is inspect.Parameter.empty and key not in options and key not in ("learning_rate", "num_clusters")
    ]
    if missing:
        raise ValueError(f"algorithm {name!r} needs {missing[0]} ({missing[0]}=...)")
    if learning_rate is None:
        raise ValueError(f"algorithm {name!r} needs learning_rate=... (the clients' step size)")
    if num_clusters is not None:
        if not spec.needs_clusters:
            raise ValueError(
                f"algorithm {name!r} takes no option 'num_clusters'; its options are {sorted(spec.options)}"
            )
        options["num_clusters"] = num_clusters
    if spec.needs_clusters:
        k = options.pop("num_clusters", None)
        if k is None:
            k = task.num_clusters
        if k is None:
            raise ValueError(f"algorithm {name!r} needs num_clusters; task {task.name!r} has no known clusters")
        options["num_clusters"] = k
    check_batch_fits(batch_size, largest_client(task.data))
    privacy = privacy_settings({k: given[k] for k in DP_DEFAULTS})
    rule = None
    if participation is not None or availability is not None:
        rule = _participation_rule(task.num_clients, participation, availability)
    plan = local_ledger = None
    if isinstance(privacy, LocalPrivacy):
        clients = task.num_clients if rule is None else rule.size
        options["local_privacy"], local_ledger = plan_local_privacy(privacy, name, options, clients)
    elif privacy is not None:
        plan = plan_central_privacy(
            privacy,
            name,
            options,
            task.num_clients,
            aggregator=aggregator,
            weighting=weighting,
            participation=rule is not None,
            attack=attack,
        )
        options["aggregator"] = plan.aggregator
        rule = plan.rule
    if spec.sizes_rounds:  # e.g. Federated-Clustering fixes its auto chunk for the clients a round sees
        options["clients_per_round"] = task.num_clients if rule is None else rule.size
    # option groups' fields (Attackers' attack / byzantine, CFL's split rule, ...) as the builder takes them
    algorithm = spec.build(task, learning_rate=learning_rate, batch_size=batch_size, **spec.gather(options))
    if not isinstance(algorithm, FederatedAlgorithm):
        raise ValueError(
            f"algorithm {name!r}: its build function returned {type(algorithm).__name__}, not a FederatedAlgorithm"
        )
    if flip_classes is not None:
        algorithm = with_label_flipping(algorithm, task.byzantine, flip_classes)
    if rule is not None:
        algorithm = with_participation(algorithm, rule, poisson_ok=plan is not None)
    ledger = plan.ledger if plan is not None else local_ledger
    if ledger is not None:
        algorithm = with_ledger(algorithm, ledger)
    execution = algorithm.execution.replace(batch_size=batch_size, num_clusters=options.get("num_clusters"))
    algorithm = algorithm._replace(hyperparameters=record_of(name, chosen), execution=execution)
    return with_origin(algorithm.with_matmul_precision(given["matmul_precision"]), name, task)


def shared_keywords() -> list:
    """``(parameter, declaring function)`` of every option all algorithms share, in order: ``make_algorithm``'s
    own keywords (``privacy``, the object the ``dp_*`` options stand for, left out) and the shared options it reads
    from ``**options`` (``momentum``, ``num_clusters``, the ``dp_*`` options, ...); the function's docstring
    describes the parameter."""
    own = [
        (p, make_algorithm)
        for p in inspect.signature(make_algorithm).parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.name != "privacy"
    ]
    routed = [
        (p, _options_every_algorithm_takes)
        for p in inspect.signature(_options_every_algorithm_takes).parameters.values()
    ]
    return own + routed


_OPTION_DEFAULTS = {p.name: p.default for p, f in shared_keywords() if f is _options_every_algorithm_takes}
_SHARED_DEFAULTS = {p.name: p.default for p, _ in shared_keywords()}
_OWN_KEYWORDS = [k for k in _SHARED_DEFAULTS if k not in _OPTION_DEFAULTS]  # make_algorithm's own, privacy aside


def _from_record(name: str, task, record: Hyperparameters, keywords: dict, options: dict) -> FederatedAlgorithm:
    """``make_algorithm(name, task, record)``: the record's fields as the keywords; a keyword or option given
    beside it is refused (the record is the whole configuration)."""
    if not isinstance(record, Hyperparameters):
        raise ValueError(f"hyperparameters must be a record from fedjax_clust.hyperparameters(...), got {record!r}")
    if record.ALGORITHM != name:
        raise ValueError(f"these hyperparameters are {record.ALGORITHM!r}'s, not {name!r}'s")
    beside = [k for k, v in keywords.items() if v is not _SHARED_DEFAULTS[k]] + list(options)
    if beside:
        raise ValueError(
            f"give {beside[0]} inside the hyperparameters record (record.replace({beside[0]}=...)), not beside it"
        )
    settings = grouped_settings(record.options())
    privacy = settings.pop("privacy", None)
    return _make(
        name,
        task,
        None,
        {**_SHARED_DEFAULTS, **{k: v for k, v in settings.items() if k in _SHARED_DEFAULTS}},
        privacy,
        {k: v for k, v in settings.items() if k not in _SHARED_DEFAULTS},
    )


def _participation_rule(num_clients, participation, availability) -> ParticipationRule:
    if isinstance(availability, (str, os.PathLike)):
        availability = load_availability(os.fspath(availability))
    if isinstance(participation, ParticipationRule):
        if availability is not None:
            raise ValueError("give availability inside the ParticipationRule (participation_rule(..., availability=))")
        return participation
    if isinstance(participation, bool) or not (
        participation is None or isinstance(participation, (int, float, np.integer, np.floating))
    ):
        raise ValueError(
            f"participation must be a fraction in (0, 1], a client count or a ParticipationRule, got {participation!r}"
        )
    if isinstance(participation, (int, np.integer)):
        return participation_rule(num_clients, count=int(participation), availability=availability)
    return participation_rule(num_clients, fraction=participation, availability=availability)
