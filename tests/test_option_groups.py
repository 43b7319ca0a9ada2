"""Option groups (fedjax_clust.core.option_groups): a builder's related options as one record, its fields still
flat options everywhere else, the flat keywords on the builder a deprecated front."""

import dataclasses
import inspect

import numpy as np
import pytest

from fedjax_clust import make_algorithm, synthetic_regression
from fedjax_clust.algorithms import cfl, fedsoft, ifca, srfca
from fedjax_clust.algorithms.cfl import CFLSplit
from fedjax_clust.algorithms.loss_clustering import ClusterInit
from fedjax_clust.algorithms.registry import algorithm_spec
from fedjax_clust.algorithms.srfca import SRFCARefine
from fedjax_clust.core.option_groups import gather, group_fields, is_option_group, option_group, take_legacy
from fedjax_clust.robust import make_attack, mark_byzantine
from fedjax_clust.robust.adversary import NO_ATTACKERS, Attackers


@option_group
class _Rule:
    """Args:
    a: first.
    b: second.
    """

    a: float = 1.0
    b: int = 2


_DEFAULT_RULE = _Rule()


def _builder(x, *, rule: _Rule = _DEFAULT_RULE, other: int = 0, **legacy):
    (rule,) = take_legacy("_builder", legacy, rule=rule)
    return rule, other


def test_a_group_is_a_frozen_record_with_defaults():
    assert is_option_group(_Rule) and is_option_group(_Rule()) and not is_option_group(object())
    assert group_fields(_Rule) == {"a": 1.0, "b": 2} and group_fields(_Rule(a=3.0)) == {"a": 3.0, "b": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Rule().a = 2.0
    with pytest.raises(TypeError, match="needs a default"):

        @option_group
        class _NoDefault:
            a: float


def test_gather_puts_flat_fields_into_their_group_and_refuses_both():
    assert gather(_builder, {"a": 5.0, "other": 1}) == {"rule": _Rule(a=5.0), "other": 1}
    assert gather(_builder, {"other": 1}) == {"other": 1}  # no field given: the builder's default stays
    assert gather(_builder, {"rule": _Rule(b=7), "a": 5.0}) == {"rule": _Rule(a=5.0, b=7)}
    with pytest.raises(ValueError, match="give b inside rule=... or as b=..., not both"):
        gather(_builder, {"rule": _Rule(b=7), "b": 8})


def test_take_legacy_warns_once_and_names_the_group():
    with pytest.warns(
        DeprecationWarning,
        match=r"_builder\(\)'s a= keyword is deprecated .* give rule=\S*_Rule\(a=...\)",
    ):
        assert _builder(0, a=4.0, b=3) == (_Rule(a=4.0, b=3), 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        _builder(0, c=1)
    with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning):
        _builder(0, rule=_Rule(a=2.0), a=3.0)
    with pytest.raises(ValueError, match="rule must be an option record"):
        _builder(0, rule={"a": 1.0})


def test_the_registry_sees_the_fields_under_their_own_names():
    spec = algorithm_spec("cfl")
    assert {"eps1", "eps2", "min_rounds", "max_clusters", "split_power_steps"} <= set(spec.options)
    assert "split" not in spec.options and "attackers" not in spec.options and "attack" not in spec.options
    assert spec.takes("eps1") and spec.attackable and spec.option_source("eps1") is CFLSplit
    assert spec.option_source("local_steps") is cfl
    assert spec.options["eps1"] == CFLSplit().eps1


@pytest.mark.parametrize(
    "name, builder, groups",
    [
        ("cfl", cfl, ("split", "attackers")),
        ("ifca-1", ifca, ("cluster_init", "attackers")),
        ("fedsoft", fedsoft, ("cluster_init", "attackers")),
        ("srfca", srfca, ("refine", "attackers")),
    ],
)
def test_grouped_builders_have_at_most_twelve_parameters(name, builder, groups):
    parameters = inspect.signature(builder).parameters
    assert len(parameters) <= 12 and all(is_option_group(parameters[g].default) for g in groups)


def test_the_flat_keywords_on_a_builder_are_the_grouped_call_with_a_warning():
    task = synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=5)
    attacked = mark_byzantine(task, per_cluster=1, seed=0)
    attack = make_attack("sign-flip")
    new = cfl(
        task.example_loss,
        learning_rate=0.1,
        split=CFLSplit(eps1=0.3, min_rounds=4),
        attackers=Attackers(attack, attacked.byzantine),
    )
    with pytest.warns(DeprecationWarning, match="give split=fedjax_clust.algorithms.cfl.CFLSplit"):
        old = cfl(
            task.example_loss, learning_rate=0.1, eps1=0.3, min_rounds=4, attack=attack, byzantine=attacked.byzantine
        )
    assert new.hparams == old.hparams and new.hparams["eps1"] == 0.3 and new.hparams["attack"] == "sign-flip"
    with pytest.warns(
        DeprecationWarning, match="give cluster_init=fedjax_clust.algorithms.loss_clustering.ClusterInit"
    ):
        old = ifca(task.example_loss, 2, learning_rate=0.1, init_scale=2.0, seed=3)
    assert old.hparams == ifca(task.example_loss, 2, learning_rate=0.1, cluster_init=ClusterInit(None, 2.0, 3)).hparams
    with pytest.warns(DeprecationWarning, match="give refine=fedjax_clust.algorithms.srfca.SRFCARefine"):
        old = srfca(task.example_loss, learning_rate=0.1, threshold=1.0, beta=0.2)
    assert (
        old.hparams == srfca(task.example_loss, learning_rate=0.1, threshold=1.0, refine=SRFCARefine(beta=0.2)).hparams
    )


def test_make_algorithm_takes_the_fields_flat_and_records_them_flat():
    task = synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=5)
    algo = make_algorithm("cfl", task, learning_rate=0.1, eps2=0.7, max_clusters=3)
    assert algo.hparams["eps2"] == 0.7 and algo.hparams["max_clusters"] == 3
    assert algo.hyperparameters.eps2 == 0.7
    algo = make_algorithm("fedsoft", task, learning_rate=0.1, init_scale=0.5)
    assert algo.hparams["init_scale"] == 0.5
    start = np.zeros((2, 10), np.float32)
    algo = make_algorithm("ifca-1", task, learning_rate=0.1, init_cluster_params=start)
    state = algo.init(task.init_params(None), task.num_clients)
    np.testing.assert_array_equal(np.asarray(state.extra["centers"]), start)
    assert NO_ATTACKERS.attack is None and NO_ATTACKERS.byzantine is None


def test_make_algorithm_takes_a_record_whole_as_its_fields():
    task = synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=5)
    whole = make_algorithm("cfl", task, learning_rate=0.1, split=CFLSplit(eps2=0.7), min_rounds=3)
    flat = make_algorithm("cfl", task, learning_rate=0.1, eps2=0.7, min_rounds=3)
    assert whole.hparams == flat.hparams and whole.hyperparameters == flat.hyperparameters
    # a preset's own defaults stay where the record leaves a field at its class default
    from fedjax_clust.algorithms.fedavg import FedAvgServer

    adam = make_algorithm("fedavg", task, learning_rate=0.1, server=FedAvgServer("momentum", server_momentum=0.8))
    assert adam.hparams["server_optimizer"] == "momentum" and adam.hparams["server_momentum"] == 0.8
    # a preset's defaults differ from the record's class defaults: a record cannot say which it meant, so it is
    # refused and the field is given by name
    with pytest.raises(ValueError, match="leaves server_learning_rate at 1.0, its class's default, where this"):
        make_algorithm("fedadam", task, learning_rate=0.1, server=FedAvgServer(server_learning_rate=1.0))
    adam = make_algorithm("fedadam", task, learning_rate=0.1, server_learning_rate=1.0)
    assert adam.hparams["server_learning_rate"] == 1.0
    with pytest.raises(ValueError, match="not both"):
        make_algorithm("cfl", task, learning_rate=0.1, split=CFLSplit(eps2=0.7), eps2=0.5)
    with pytest.raises(ValueError, match="not attackers="):
        make_algorithm("cfl", task, learning_rate=0.1, attackers=NO_ATTACKERS)


def test_two_groups_of_one_function_may_not_share_a_field():
    @option_group
    class _Other:
        a: float = 0.0

    def builder(*, rule: _Rule = _DEFAULT_RULE, other: _Other = _Other(), **legacy):  # noqa: B008
        return rule, other

    with pytest.raises(TypeError, match="both have a field 'a'"):
        gather(builder, {"a": 1.0})


def test_a_wrapper_s_deprecated_keywords_warn_at_its_caller():
    """local / global_fedavg / ground_truth forward to fixed_clusters: their attack / byzantine warn naming the
    wrapper, attributed to the line that called it (where Python's default filters show it)."""
    from fedjax_clust.algorithms import global_fedavg, local

    task = synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=5)
    attacked = mark_byzantine(task, per_cluster=1, seed=0)
    for wrapper in (local, global_fedavg):
        with pytest.warns(DeprecationWarning, match=rf"{wrapper.__name__}\(\)'s attack= keyword") as caught:
            old = wrapper(
                task.example_loss, 6, learning_rate=0.1, attack=make_attack("sign-flip"), byzantine=attacked.byzantine
            )
        assert caught[0].filename == __file__ and old.hparams["attack"] == "sign-flip"
