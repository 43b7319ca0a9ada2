"""Partial participation: all clients equals today's algorithms bit for bit; non-participants are untouched;
the participants' round is the algorithm's own round on the sub-population; availability traces, samplers,
the CLI and checkpoints."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import distinct, run_rounds, tiered

from fedjax_clust.algorithms import ALGORITHMS, make_algorithm
from fedjax_clust.algorithms.participation import (
    PARTICIPATION_STREAM,
    participation_rule,
)
from fedjax_clust.algorithms.settings import Participation
from fedjax_clust.cli.commands import main
from fedjax_clust.core.model_table import ModelTable
from fedjax_clust.core.pytrees import take_rows
from fedjax_clust.core.ragged_batch import floyd_sample
from fedjax_clust.core.state import ClientState
from fedjax_clust.robust import mark_byzantine
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks import make_task

OPTIONS = {
    "srfca": dict(threshold=1e3, one_shot_rounds=2, refine_iterations=2),
    "federated-clustering": dict(quantile=0.3, batch_size=4, momentum=0.9),
    "momentum-clustering": dict(quantile=0.5),
    "myopic-clustering": dict(momentum=0.9),
    "global": dict(momentum=0.9),
    "ground-truth": dict(momentum=0.9),
    "local": dict(momentum=0.9),
    "ifca-2": dict(batch_size=4),
    "cfl": dict(min_rounds=0),
    "fedsoft": dict(predict="cluster"),
}
MASKED = ("srfca", "three-stage")  # a mask over all clients instead of a gathered block
PARTIAL = [name for name in distinct(ALGORITHMS) if name not in MASKED + ("knn-per",)]
SHARED = ("global", "ground-truth")


@pytest.fixture(scope="module")
def task():
    return make_task("synthetic", num_clusters=2, clients_per_cluster=6, seed=0)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _client_rows(algo, state):
    """The clients' own part of a state: a server-held table's assignment (its models are the server's)."""
    own = lambda x: x.assignment if isinstance(x, ModelTable) else x  # noqa: E731
    return own(state.params), own(state.opt_state), state.rows


# every kind once in the default run (per-client extra state, shared group models, CFL's slots, FC's block);
# the other algorithms in the slow tier
FAST = ("federated-clustering", "ifca-1", "cfl", "fedsoft", "global", "momentum-clustering")


@pytest.mark.parametrize("name", tiered(PARTIAL, fast=FAST))
def test_non_participants_are_bit_identical_and_participants_run_the_algorithm_on_themselves(task, name):
    """One round with 5 of 12 clients: the rows of the 7 others do not change (Global / Ground-truth: they
    take their group's new model), and the participants' rows and the server's state are exactly what the
    algorithm's own round computes on the 5 participants alone (same key)."""
    options = OPTIONS.get(name, {})
    algo = make_algorithm(name, task, learning_rate=0.01, participation=5, **options)
    plain = make_algorithm(name, task, learning_rate=0.01, **options)
    state = plain.init(task.init_params(None), 12)
    noise = jnp.asarray(np.random.default_rng(1).standard_normal((12, 10)), jnp.float32)
    if not isinstance(state.params, ModelTable):  # (server-held models: a client holds its group's model)
        state = state._replace(params=state.params + noise)  # clients at different models
    key = jax.random.PRNGKey(7)
    new, metrics = jax.jit(algo.round)(state, task.data, key)
    took_part = np.asarray(metrics["participants"])
    index = np.flatnonzero(took_part)
    assert took_part.sum() == 5
    expected_index = np.sort(
        np.asarray(floyd_sample(jax.random.fold_in(key, PARTICIPATION_STREAM), jnp.array([12]), 5)[0][0])
    )  # 5^2 <= 16 x 12: Floyd
    np.testing.assert_array_equal(index, expected_index)
    # the algorithm's own round on the sub-population (its per-client constants restricted to it)
    sub = ClientState(
        take_rows(state.params, index),
        take_rows(state.opt_state, index),
        state.round,
        state.extra,
        take_rows(state.rows, index),
    )
    from fedjax_clust.core.participants import Participants

    sub_new, _ = jax.jit(plain.round)(
        sub, take_rows(task.data, index), key, Participants(jnp.asarray(index, jnp.int32), gathered=True)
    )
    for a, b in zip(_leaves(take_rows(new.client_params, index)), _leaves(sub_new.client_params)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(new.extra), _leaves(sub_new.extra)):  # the server's state
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(take_rows(new.rows, index)), _leaves(sub_new.rows)):
        np.testing.assert_array_equal(a, b)
    others = ~took_part
    if name in SHARED:  # a non-participant holds its group's model: the participants' new one
        groups = np.zeros(12, int) if name == "global" else np.asarray(task.true_clusters)
        params = np.asarray(new.client_params)
        for g in np.unique(groups):
            members = groups == g
            if (members & took_part).any():
                np.testing.assert_array_equal(
                    params[members], np.broadcast_to(params[members & took_part][0], params[members].shape)
                )
            else:
                np.testing.assert_array_equal(params[members], np.asarray(state.client_params)[members])
    else:
        for before, after in zip(_leaves(_client_rows(algo, state)), _leaves(_client_rows(algo, new))):
            np.testing.assert_array_equal(after[others], before[others])


def test_attackers_are_restricted_to_the_participants(task):
    attacked = mark_byzantine(task, fraction=0.34, seed=0)
    algo = make_algorithm("ifca-1", attacked, learning_rate=0.01, attack="large-gradient", participation=6)
    state = algo.init(attacked.init_params(None), 12)
    from fedjax_clust.algorithms.loss_clustering import ifca
    from fedjax_clust.robust import make_attack
    from fedjax_clust.robust.adversary import Attackers

    drew_attackers = 0
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        new, metrics = jax.jit(algo.round)(state, attacked.data, key)
        index = np.flatnonzero(np.asarray(metrics["participants"]))
        sub_algo = ifca(
            attacked.example_loss,
            2,
            learning_rate=0.01,
            attackers=Attackers(make_attack("large-gradient"), np.asarray(attacked.byzantine)[index]),
        )
        sub_state = sub_algo.init(attacked.init_params(None), 6)
        sub_new, _ = jax.jit(sub_algo.round)(sub_state, take_rows(attacked.data, index), key)
        np.testing.assert_array_equal(np.asarray(new.extra["centers"]), np.asarray(sub_new.extra["centers"]))
        drew_attackers += np.asarray(attacked.byzantine)[index].any()
    assert drew_attackers  # some draw has attackers, so the check has teeth


def test_federated_clustering_subgroups_inside_the_participants(task):
    algo = make_algorithm(
        "federated-clustering", task, learning_rate=0.01, quantile=0.5, subgroups=2, participation=0.5
    )
    state, metrics = run_rounds(algo, task, 2)
    assert np.isfinite(np.asarray(state.client_params)).all() and algo.hparams["participation"]["clients"] == 6
    with pytest.raises(ValueError, match="subgroups"):
        make_algorithm("federated-clustering", task, learning_rate=0.01, quantile=0.5, subgroups=4, participation=3)


def test_uniform_draws_have_the_right_frequencies():
    rule = participation_rule(10, fraction=0.3)
    draws = jax.vmap(lambda k: rule.draw(k, 0))(jax.random.split(jax.random.PRNGKey(0), 4000))
    draws = np.asarray(draws)
    assert draws.shape == (4000, 3) and (np.diff(draws, axis=1) > 0).all()  # distinct, increasing
    freq = np.bincount(draws.ravel(), minlength=10) / 4000
    np.testing.assert_allclose(freq, 0.3, atol=0.03)


def test_availability_trace_and_sampler():
    rng = np.random.default_rng(0)
    trace = rng.random((6, 12)) < 0.6
    trace[:, :4] = True  # at least 4 available every round
    rule = participation_rule(12, availability=trace)
    assert rule.size == trace.sum(1).min() and rule.describe["availability_rounds"] == 6
    for t in range(6):
        index = np.asarray(rule.draw(jax.random.PRNGKey(t), jnp.asarray(t)))
        assert trace[t, index].all()
    counted = participation_rule(12, count=4, availability=trace)
    assert counted.size == 4
    with pytest.raises(ValueError, match="availability round"):
        participation_rule(12, count=12, availability=trace)
    with pytest.raises(ValueError, match="shape"):
        participation_rule(12, availability=trace[:, :5])
    sampler = participation_rule(12, count=3, sampler=lambda key, t: jnp.array([9, 0, 4]) + 0 * t)
    np.testing.assert_array_equal(np.asarray(sampler.draw(jax.random.PRNGKey(0), 0)), [0, 4, 9])
    with pytest.raises(ValueError, match="count"):
        participation_rule(12, sampler=lambda key, t: jnp.arange(3))


def test_bad_participation_is_named(task):
    for value in (0.0, 1.5, 0, 13, True, "half"):
        with pytest.raises(ValueError, match="participation"):
            make_algorithm("local", task, learning_rate=0.1, participation=value)


def test_simulate_refuses_a_run_longer_than_the_trace_and_counts_misclustering_over_participants(task):
    trace = np.ones((4, 12), bool)
    algo = make_algorithm("ifca-1", task, learning_rate=0.01, participation=Participation(availability=trace))
    with pytest.raises(ValueError, match="availability trace"):
        simulate(algo, task, rounds=5, output=Output(progress=False))
    algo = make_algorithm("ifca-1", task, learning_rate=0.01, participation=0.5)
    result = simulate(algo, task, rounds=4, evaluation=Evaluation(eval_every=2), output=Output(progress=False))
    assert result.summary["hparams"]["participation"] == {"rule": "uniform", "clients": 6, "fraction": 0.5}
    assert 0.0 <= result.history[-1]["misclustering"] <= 1.0


@pytest.mark.parametrize("name, options", [("fedsoft", {}), ("ifca-1", {"optimizer": "adam"})])
def test_checkpoint_resume_with_participation(task, tmp_path, name, options):
    """A resumed run with partial participation equals the uninterrupted one, server state included (IFCA's
    per-cluster Adam moments and step counts, which only the clusters a round's participants pick advance)."""
    algo = make_algorithm(name, task, learning_rate=0.01, participation=0.5, **options)
    whole = simulate(algo, task, rounds=6, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    simulate(
        algo,
        task,
        rounds=3,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False, out_dir=str(tmp_path)),
        checkpointing=Checkpointing(checkpoint_every=3),
    )
    resumed = simulate(
        algo,
        task,
        rounds=6,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False, out_dir=str(tmp_path), resume=True),
    )
    for a, b in zip(
        jax.tree.leaves((resumed.state.client_params, resumed.state.extra)),
        jax.tree.leaves((whole.state.client_params, whole.state.extra)),
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if name == "ifca-1":
        counts = np.asarray(whole.state.extra["centers_opt"][0].count)
        assert counts.sum() > 0 and resumed.history == whole.history


def test_cli_participation_and_availability(tmp_path, capsys):
    small = ["--clusters", "2", "--clients-per-cluster", "5", "--rounds", "4", "--eval-every", "2", "--no-progress"]
    out = tmp_path / "half"
    assert main(["run", "--algorithm", "ifca-2", "--participation", "0.5", "--out", str(out)] + small) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hparams"]["participation"]["clients"] == 5
    trace = np.ones((4, 10), bool)
    trace[:, ::2] = False
    np.save(tmp_path / "trace.npy", trace)
    out = tmp_path / "trace"
    assert (
        main(
            [
                "run",
                "--algorithm",
                "federated-clustering",
                "--availability",
                str(tmp_path / "trace.npy"),
                "--out",
                str(out),
            ]
            + small
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hparams"]["participation"] == {
        "rule": "availability",
        "clients": 5,
        "fraction": 0.5,
        "availability_rounds": 4,
    }
    capsys.readouterr()
    assert main(["run", "--algorithm", "local", "--participation", "1.5", "--out", str(tmp_path / "bad")] + small) == 2
    assert "participation" in capsys.readouterr().err
    assert (
        main(
            [
                "run",
                "--algorithm",
                "local",
                "--availability",
                str(tmp_path / "missing.npy"),
                "--out",
                str(tmp_path / "bad2"),
            ]
            + small
        )
        == 2
    )


def test_cost_model_counts_participants_only():
    from fedjax_clust.bench.profile import comm_cost

    full = comm_cost("federated-clustering", 100, 10)
    half = comm_cost("federated-clustering", 100, 10, participants=50)
    assert half[0] * 4 == full[0]  # S^2 pairs: a quarter of the bytes
    assert comm_cost("global", 100, 10, participants=30) == (4 * 10 * 2 * 30, 60)


@pytest.mark.slow
def test_participation_benchmark_rows():
    from fedjax_clust.bench.rounds import run_participation_benchmarks

    rows = list(run_participation_benchmarks(40, fractions=(1.0, 0.5), repeats=1, algorithms=("federated-clustering",)))
    assert [r["participants"] for r in rows] == [40, 20]
    assert rows[0]["time_ratio_to_full"] == 1.0 and rows[1]["f_squared"] == 0.25
    assert rows[1]["peak_bytes"] < rows[0]["peak_bytes"]  # the S x S block is smaller than N x N


def _masked_round(name, task, state, key, **options):
    """(state, participants) of one round of ``name`` with 5 of 12 clients, and the same round unmasked."""
    algo = make_algorithm(name, task, learning_rate=0.05, participation=5, **options)
    new, _ = jax.jit(algo.round)(state, task.data, key)
    index = np.asarray(participation_rule(12, count=5).draw(jax.random.fold_in(key, PARTICIPATION_STREAM), 0))
    took_part = np.zeros(12, bool)
    took_part[index] = True
    return new, took_part


@pytest.mark.parametrize(
    "name,options",
    [
        ("srfca", dict(threshold=1e3, one_shot_rounds=2, refine_iterations=3)),
        ("three-stage", dict(erm_rounds=2, clustering="lloyd")),
    ],
)
def test_masked_algorithms_train_participants_only_and_aggregate_their_messages(task, name, options):
    """SR-FCA / three-stage: in a local round non-participants keep their local model, participants take
    the plain step; in a cluster round each cluster moves by the aggregate of its participating members'
    gradients (computed here with the package's own aggregator on those members alone)."""
    from fedjax_clust.core.batching import client_loss
    from fedjax_clust.robust.aggregators import make_aggregator

    plain = make_algorithm(name, task, learning_rate=0.05, **options)
    state = plain.init(task.init_params(None), 12)
    new, took_part = _masked_round(name, task, state, jax.random.PRNGKey(5), **options)
    full, _ = jax.jit(plain.round)(state, task.data, jax.random.PRNGKey(5))
    local, old, stepped = (np.asarray(x.rows["local"]) for x in (new, state, full))
    np.testing.assert_array_equal(local[~took_part], old[~took_part])
    np.testing.assert_array_equal(local[took_part], stepped[took_part])
    # run to the clustered stage unmasked, then one masked cluster round
    for t in range(2):
        state, _ = jax.jit(plain.round)(state, task.data, jax.random.PRNGKey(10 + t))
    key = jax.random.PRNGKey(9)
    new, took_part = _masked_round(name, task, state, key, **options)
    labels = np.asarray(state.rows["labels"])
    models = state.extra["models" if name == "srfca" else "centres"]
    grads = jax.vmap(jax.grad(client_loss(task.example_loss)))(
        take_rows(models, jnp.asarray(np.maximum(labels, 0))), task.data
    )
    rule = make_aggregator("trimmed-mean", beta=0.1)
    after = np.asarray(new.extra["models" if name == "srfca" else "centres"])
    for c in np.unique(labels[labels >= 0]):
        members = (labels == c) & took_part
        if members.any():
            direction = np.asarray(rule(jax.tree.map(lambda g: g[jnp.asarray(members)], grads)))
            np.testing.assert_allclose(after[c], np.asarray(models)[c] - 0.05 * direction, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(after[c], np.asarray(models)[c])


def test_momentum_clustering_starts_a_clients_momentum_at_its_first_participation(task):
    """m_{i,0} = g_i(x_{i,0}) in the round client i first takes part in; afterwards eq. (6)."""
    from fedjax_clust.core.batching import client_loss

    algo = make_algorithm("momentum-clustering", task, learning_rate=0.01, quantile=0.5, alpha=0.1, participation=5)
    grad = jax.vmap(jax.grad(client_loss(task.example_loss)))
    state = algo.init(task.init_params(None), 12)
    step = jax.jit(algo.round)
    seen = np.zeros(12, bool)
    for t in range(3):
        g = np.asarray(grad(state.client_params, task.data))
        before = np.asarray(state.rows["momentum"])
        state, metrics = step(state, task.data, jax.random.PRNGKey(t))
        took_part = np.asarray(metrics["participants"])
        m = np.asarray(state.rows["momentum"])
        first, again = took_part & ~seen, took_part & seen
        np.testing.assert_allclose(m[first], g[first], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(m[again], 0.1 * g[again] + 0.9 * before[again], rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(m[~took_part], before[~took_part])
        seen |= took_part
        np.testing.assert_array_equal(np.asarray(state.rows["started"]), seen)
    assert seen.sum() > 5  # some client joined after round 0


def test_small_cohorts_are_drawn_uniformly_by_floyd_and_large_ones_by_scores():
    from itertools import combinations

    from fedjax_clust.algorithms.participation import participation_rule

    small = participation_rule(6, count=2)  # 4 <= 16 x 6: Floyd's algorithm
    draws = jax.jit(jax.vmap(lambda k: small.draw(k, 0)))(jax.random.split(jax.random.PRNGKey(0), 15000))
    counts = {pair: 0 for pair in combinations(range(6), 2)}
    for a, b in np.asarray(draws).tolist():
        counts[(a, b)] += 1  # sorted, distinct
    assert len(counts) == 15 and all(abs(c - 1000) < 130 for c in counts.values()), counts  # ~4 sigma
    large = participation_rule(20, count=19)  # 361 > 320: the S smallest of N uniform scores
    key = jax.random.PRNGKey(3)
    expected = np.sort(np.asarray(jnp.argsort(jax.random.uniform(key, (20,)))[:19]))
    np.testing.assert_array_equal(np.asarray(large.draw(key, 0)), expected)
