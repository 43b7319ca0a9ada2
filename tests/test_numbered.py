"""An algorithm's numbers as its programs' arguments (fedjax_clust.algorithms.numbered): simulate equals the run
with the numbers compiled in (to float32 rounding); runs that differ only in a number share one traced and compiled
program; a zero stays a constant; an algorithm a wrapper changed after make_algorithm keeps its constants; the
table of shared programs keeps no task alive."""

import gc
import weakref

import jax
import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.algorithms.numbered import numbered, program_numbers, shared_program
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.timing import CompileClock


@pytest.fixture(scope="module")
def task():
    return fc.make_task("classification", num_clusters=2, clients_per_cluster=3, seed=0)


def constants(algo):
    """The same algorithm with its numbers compiled in: a wrapper that replaces apply (as a user's own would)."""
    apply = algo.apply
    return algo._replace(apply=lambda state, data, key: apply(state, data, key))


def assert_same_run(a, b):
    """The same run to float32 rounding: a number the builder turns into another (kNN-Per's 1 - lambda) is
    computed in float32 from a traced number, in float64 from a Python one (every other case here is bit-identical)."""
    assert [sorted(row) for row in a.history] == [sorted(row) for row in b.history]
    assert jax.tree.structure(a.state) == jax.tree.structure(b.state)
    for row_a, row_b in zip(a.history, b.history):
        np.testing.assert_allclose([row_a[k] for k in sorted(row_a)], [row_b[k] for k in sorted(row_a)], rtol=1e-6)
    jax.tree.map(
        lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-7), a.state, b.state
    )


# Federated-Clustering: a quantile rank and momentum computed from traced numbers; FedSoft: four numbers;
# kNN-Per: the algorithm's own evaluation takes one (lam)
CASES = {
    "federated-clustering": dict(batch_size=4),
    "fedsoft": dict(local_steps=2),
    "knn-per": {},
}


@pytest.mark.parametrize("name", CASES)
def test_numbers_as_arguments_equal_numbers_compiled_in(task, name):
    options = {**fc.algorithm_spec(name).example_options, **CASES[name]}
    algo = fc.make_algorithm(name, task, learning_rate=0.05, **options)
    assert numbered(algo) is not None and "learning_rate" in numbered(algo).numbers
    assert numbered(constants(algo)) is None
    run = dict(rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert_same_run(fc.simulate(algo, task, **run), fc.simulate(constants(algo), task, **run))


def test_learning_rates_share_one_program_and_keep_their_own_numbers(task):
    """A loop over learning rates, each its own make_algorithm and simulate: the rounds and the evaluation are
    traced and compiled for the first only, and each run is the one with its number compiled in."""
    results, programs = [], []
    for lr in (0.03, 0.05, 0.08):
        algo = fc.make_algorithm("ifca-2", task, learning_rate=lr, local_steps=2)
        with CompileClock() as clock:
            results.append(
                fc.simulate(algo, task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
            )
        programs.append(clock.programs)
        assert_same_run(
            results[-1],
            fc.simulate(
                constants(algo), task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False)
            ),
        )
    assert programs[0] > 0 and programs[1:] == [0, 0]
    finals = [r.history[-1]["mean_loss"] for r in results]
    assert len(set(finals)) == 3  # the numbers reached the program
    rounds = shared_program(numbered(algo), "rounds", lambda build: None)
    assert rounds._cache_size() == 1  # one trace for the three runs


def test_what_decides_the_program(task):
    """A zero stays a constant (momentum 0 keeps no momentum buffer), None is no number, another static value
    is another program; two records equal but for a number share one."""
    base = fc.make_algorithm("global", task, learning_rate=0.05)
    assert sorted(numbered(base).numbers) == ["learning_rate", "momentum"]
    no_momentum = fc.make_algorithm("global", task, learning_rate=0.05, momentum=0.0)
    assert sorted(program_numbers(no_momentum.hyperparameters)) == ["learning_rate"]
    make = lambda build: object()  # noqa: E731
    first = shared_program(numbered(base), "probe", make)
    assert shared_program(numbered(fc.make_algorithm("global", task, learning_rate=0.2)), "probe", make) is first
    assert shared_program(numbered(no_momentum), "probe", make) is not first
    other = fc.make_algorithm("global", task, learning_rate=0.05, batch_size=2)
    assert shared_program(numbered(other), "probe", make) is not first
    again = fc.make_task("classification", num_clusters=2, clients_per_cluster=3, seed=0)  # another task object
    assert shared_program(numbered(fc.make_algorithm("global", again, learning_rate=0.05)), "probe", make) is not first
    assert (
        fc.simulate(
            no_momentum, task, rounds=2, evaluation=Evaluation(eval_every=2), output=Output(progress=False)
        ).history[-1]["round"]
        == 2
    )


def test_the_shared_programs_keep_no_task_alive():
    task = fc.make_task("classification", num_clusters=2, clients_per_cluster=2, seed=1)
    fc.simulate(
        fc.make_algorithm("local", task, learning_rate=0.05),
        task,
        rounds=2,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
    )
    gone = weakref.ref(task)
    del task
    gc.collect()
    assert gone() is None


def test_a_builder_that_branches_on_a_float_is_told_to_mark_it_static(task):
    """A plugin whose builder uses a float option in an `if` fails to trace its numbers: the error names the fix."""
    from fedjax_clust.algorithms.registry import unregister_algorithm

    def branchy(task, *, learning_rate: float, batch_size=None, gain: float = 1.0):
        algo = fc.make_algorithm("local", task, learning_rate=learning_rate * (2.0 if gain > 0.5 else 1.0))
        return algo._replace(name="branchy", origin=None)

    fc.register_algorithm(fc.AlgorithmSpec("branchy", branchy, builder=branchy, owns_models=True))
    try:
        algo = fc.make_algorithm("branchy", task, learning_rate=0.05)
        with pytest.raises(TypeError, match=r"\['gain', 'learning_rate'\].*mark such a parameter Static\[float\]"):
            fc.simulate(algo, task, rounds=1, evaluation=Evaluation(eval_every=1), output=Output(progress=False))
    finally:
        unregister_algorithm("branchy")


def test_what_a_key_cannot_hold_by_value_is_never_shared(task):
    """Review findings: two participation rules (an availability trace each) are two programs; a plugin
    re-registered under its name is its new code; a replaced unseen rule keeps the numbers compiled in."""
    from fedjax_clust.algorithms.participation import participation_rule
    from fedjax_clust.algorithms.registry import unregister_algorithm
    from fedjax_clust.core.unseen import server_models

    n = task.num_clients
    traces = [np.tile(np.arange(n) < 3, (4, 1)), np.tile(np.arange(n) >= 3, (4, 1))]
    run = dict(rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    for make in (
        lambda t: dict(participation=participation_rule(n, count=2, availability=t)),
        lambda t: dict(participation=fc.Participation(count=2, availability=t)),
    ):
        for trace in traces:
            algo = fc.make_algorithm("local", task, learning_rate=0.05, **make(trace))
            assert_same_run(fc.simulate(algo, task, **run), fc.simulate(constants(algo), task, **run))

    def scaled(factor):
        def build(task, *, learning_rate: float, batch_size=None):
            return fc.make_algorithm("local", task, learning_rate=learning_rate * factor)._replace(origin=None)

        return fc.AlgorithmSpec("rescaled", build, builder=build, owns_models=True)

    fc.register_algorithm(scaled(1.0))
    try:
        fc.simulate(fc.make_algorithm("rescaled", task, learning_rate=0.05), task, **run)
        fc.register_algorithm(scaled(3.0), replace=True)
        algo = fc.make_algorithm("rescaled", task, learning_rate=0.04)
        assert_same_run(fc.simulate(algo, task, **run), fc.simulate(constants(algo), task, **run))
    finally:
        unregister_algorithm("rescaled")
    algo = fc.make_algorithm("local", task, learning_rate=0.05)
    assert numbered(algo._replace(unseen=server_models("own", "models"))) is None
