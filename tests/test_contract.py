"""One contract for every registered algorithm (optax's alias_test is the model): it jit-compiles and stays
finite; an identity attack leaves it identical (to float32 rounding: XLA may fuse differently); participation
1.0 leaves it bit-identical; every matmul
of its round is traced at the precision asked for, under every combination of the wrappers (participation,
model attacks, label flipping); resuming from a checkpoint equals the uninterrupted run. The demo plugin of
tests/plugin_demo/ takes the same contract as the built-in algorithms."""

import itertools
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_ALGORITHMS, distinct, run_rounds, tiered
from test_plugins import DEMO
from test_plugins import NAME as PLUGIN

import fedjax_clust as fc
from fedjax_clust.algorithms import ALGORITHMS
from fedjax_clust.algorithms.registry import unregister_algorithm
from fedjax_clust.io.checkpoint import latest_checkpoint
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output

NAMES = distinct(ALGORITHMS) + (PLUGIN,)
# small, meaningful runs: the spec's example options, and stages short enough for a test
SMALL = {
    "srfca": dict(one_shot_rounds=2, refine_iterations=2),
    "three-stage": dict(erm_rounds=2, clustering="lloyd"),
    "cfl": dict(min_rounds=0),
    "fedsoft": dict(local_steps=2),
    "ifca-2": dict(local_steps=2),
    "hypcluster": dict(cluster_steps=2),
    "federated-clustering": dict(batch_size=4),
}
# three-stage's default k-geomedians computes its geometric medians at full precision by design, so the
# precision contract uses its Lloyd rule (SMALL above)


@pytest.fixture(scope="module", autouse=True)
def plugin():
    sys.path.insert(0, str(DEMO))
    import fedjax_plugin_demo

    fc.register_algorithm(fedjax_plugin_demo.SPEC)
    yield
    unregister_algorithm(PLUGIN)
    sys.path.remove(str(DEMO))


@pytest.fixture(scope="module")
def task():
    return fc.make_task("classification", num_clusters=2, clients_per_cluster=3, seed=0)


@pytest.fixture(scope="module")
def attacked_task(task):
    return fc.mark_byzantine(task, fraction=1 / 3, seed=0)


def build(name, task, **kwargs):
    options = {**fc.algorithm_spec(name).example_options, **SMALL.get(name, {}), **kwargs}
    return fc.make_algorithm(name, task, learning_rate=0.01, **options)


def run(algo, task):
    return run_rounds(algo, task, 2)


def assert_identical(a, b):
    jax.tree.map(lambda u, v: np.testing.assert_array_equal(np.asarray(u), np.asarray(v)), a, b)


def assert_float_noise(a, b):
    """Equal integers, floats equal to float32 rounding: an identity attack adds a select on the messages,
    which can change how XLA fuses the arithmetic around it (IFCA-2's model deltas on the classification
    task move by a few ulp, as they did before the registry existed; every other algorithm is bit-identical)."""

    def check(u, v):
        u, v = np.asarray(u), np.asarray(v)
        if np.issubdtype(u.dtype, np.floating):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)
        else:
            np.testing.assert_array_equal(u, v)

    jax.tree.map(check, a, b)


@pytest.mark.parametrize("name", NAMES)
def test_compiles_stays_finite_and_identity_wrappers_change_nothing(name, task, attacked_task):
    state, metrics = run(build(name, task), task)
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(state.params))
    assert int(state.round) == 2
    identity = fc.make_attack("large-gradient", scale=1.0)
    assert_float_noise(run(build(name, attacked_task, attack=identity), attacked_task)[0], state)
    assert_identical(run(build(name, task, participation=1.0), task)[0], state)


ATTACKED = [n for n in NAMES if n == PLUGIN or fc.algorithm_spec(n).attackable]


# a message attack for every attackable algorithm; label flipping is one wrapper around any algorithm: two
MASKED = [(n, "alie") for n in ATTACKED] + [("global", "label-flip"), ("federated-clustering", "label-flip")]


FAST_MASKED = (("global", "alie"), ("ditto", "alie"), ("federated-clustering", "label-flip"))


@pytest.mark.parametrize(
    "name, attack", [c if c in FAST_MASKED else pytest.param(*c, marks=pytest.mark.slow) for c in MASKED]
)
def test_a_traced_byzantine_mask_computes_what_the_constant_mask_computes(name, attack, task, attacked_task):
    """The Byzantine mask is an argument of a sweep's program (Task.masks): built from a traced mask, every
    attackable algorithm's rounds equal those built from the same mask as a constant (to float32 rounding: a
    constant mask lets XLA fold the selects and counts), for a message attack and for label flipping."""
    if attack == "alie" and name == PLUGIN and not fc.algorithm_spec(name).attackable:
        pytest.skip("the plugin takes no message attack")
    # Federated-Clustering with a fixed radius: its quantile radius is a discontinuous rule that carries the
    # ulp by which a constant mask's folded counts differ into a ball's membership (~1e-4 of the model's scale
    # in two rounds, measured); a fixed radius shows the masks compute the same thing
    fixed = dict(radius=1.0, quantile=None) if name == "federated-clustering" else {}
    constant, _ = run(build(name, attacked_task, attack=attack, **fixed), attacked_task)

    def rounds(mask):
        traced = attacked_task.with_arrays({**attacked_task.arrays(), "byzantine": mask})
        algo = build(name, traced, attack=attack, **fixed)
        state = algo.init(traced.init_params(None), traced.num_clients)
        for t in range(2):
            state, _ = algo.round(state, traced.data, jax.random.PRNGKey(t))
        return state

    traced = jax.jit(rounds)(jnp.asarray(attacked_task.byzantine))
    jax.tree.map(
        lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-6),
        traced.params,
        constant.params,
    )


def dot_precisions(fn, *args):
    """The precision of every dot_general in the lowered program (StableHLO text); UNSET for a dot
    without one."""
    text = jax.jit(fn).lower(*args).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert dots, "no matmul in the program"
    found = {m.group(1) for line in dots for m in [re.search(r"precision = \[(\w+), \w+\]", line)] if m}
    return found | ({"UNSET"} if any("precision" not in line for line in dots) else set())


WRAPPERS = ("participation", "attack", "label-flip")
COMBOS = [
    c
    for r in range(len(WRAPPERS) + 1)
    for c in itertools.combinations(WRAPPERS, r)
    if not {"attack", "label-flip"} <= set(c)
]  # one attack per run


@pytest.mark.parametrize("name", tiered(NAMES, fast=FAST_ALGORITHMS + (PLUGIN,)))
def test_every_wrapper_combination_traces_the_requested_precision(name, task, attacked_task):
    for combo, precision in itertools.product(COMBOS, ("default", "highest")):
        if precision == "highest" and len(combo) < 2:
            continue  # the default precision is checked through every combination, "highest" through the pairs
        kwargs = dict(matmul_precision=precision)
        run_task = task
        if "participation" in combo:
            kwargs["participation"] = 4
        if "attack" in combo or "label-flip" in combo:
            run_task = attacked_task
            kwargs["attack"] = "sign-flip" if "attack" in combo else "label-flip"
        algo = build(name, run_task, **kwargs)
        state = algo.init(run_task.init_params(None), run_task.num_clients)
        expected = {precision.upper()}
        assert dot_precisions(algo.round, state, run_task.data, jax.random.PRNGKey(0)) == expected, combo
        if algo.evaluate is not None:
            got = dot_precisions(
                algo.evaluate, state, jnp.ones(run_task.num_clients, bool), run_task.data, run_task.test_data
            )
            assert got == expected, combo


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_resume_equals_uninterrupted(name, task, tmp_path):
    algo = build(name, task)
    full = fc.simulate(algo, task, rounds=5, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    fc.simulate(
        algo,
        task,
        rounds=3,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False),
        checkpointing=Checkpointing(checkpoint_every=2, checkpoint_dir=str(tmp_path)),
    )
    assert latest_checkpoint(str(tmp_path)) == 2
    resumed = fc.simulate(
        algo,
        task,
        rounds=5,
        evaluation=Evaluation(eval_every=2),
        output=Output(progress=False, resume=True),
        checkpointing=Checkpointing(checkpoint_dir=str(tmp_path)),
    )
    assert resumed.history == full.history
    assert_identical(resumed.state.params, full.state.params)


@pytest.mark.parametrize("name", tiered(NAMES, fast=FAST_ALGORITHMS + (PLUGIN,)))
def test_two_starts_each_consumed_by_a_donated_stretch(name, task):
    """simulate donates the state to each stretch of rounds (run.fused.consuming_step): ``start`` must return
    arrays of the run's own, not ones the algorithm, the parameters or the task hold, and every buffer of the
    state must be usable by the output (no "donated buffers were not usable" warning)."""
    import warnings

    from fedjax_clust.run.fused import consuming_step, fuse_rounds

    algo = build(name, task, participation=4)
    params = task.init_params(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    states = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            step = consuming_step(fuse_rounds(algo.round, donate=True), after=(task.data, key), keep=(params,))
            state, _ = step(algo.start(params, task.num_clients, jax.random.PRNGKey(2)), 1, 2)
            states.append(jax.block_until_ready(state))
    assert int(states[1].round) == 2
    assert_identical(states[0], states[1])
    assert not any(x.is_deleted() for x in jax.tree.leaves((params, task.arrays())))
