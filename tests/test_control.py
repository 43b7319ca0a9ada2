"""skip_cond: lax.cond's values under every transformation, and under vmap it still skips; the robust group
aggregates built on it; Momentum-Clustering's k-means++ runs once, under a cond, with the numbers of its former
every-round select."""

import types

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import primitive_counts
from jax import lax

from fedjax_clust import make_algorithm, synthetic_regression
from fedjax_clust.algorithms import gradient_clustering
from fedjax_clust.core.control import skip_cond
from fedjax_clust.robust.aggregators import aggregate_segments, make_aggregator


def true_fun(x, s):
    return {"y": x * s + 1.0, "total": jnp.sum(x)}


def false_fun(x, s):
    return {"y": x - s, "total": jnp.zeros((), x.dtype)}


def with_skip(pred, x, s):
    # the branches close over s (a traced per-member value under vmap): skip_cond hoists it
    return skip_cond(pred, lambda x: true_fun(x, s), lambda x: false_fun(x, s), x)


def with_cond(pred, x, s):
    return lax.cond(pred, lambda x: true_fun(x, s), lambda x: false_fun(x, s), x)


def assert_same(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("preds", [[True, False, True], [False, False, False], [True, True, True]])
def test_skip_cond_equals_cond_under_vmap_and_jit(preds):
    pred = jnp.asarray(preds)
    x = jnp.arange(6.0, dtype=jnp.float32).reshape(3, 2) - 2.0
    s = jnp.asarray([0.5, -2.0, 3.0], jnp.float32)
    want = {
        "y": np.where(
            np.asarray(preds)[:, None],
            np.asarray(x) * np.asarray(s)[:, None] + 1.0,
            np.asarray(x) - np.asarray(s)[:, None],
        ),
        "total": np.where(preds, np.asarray(x).sum(axis=1), 0.0),
    }
    assert_same(jax.vmap(with_skip)(pred, x, s), want)
    assert_same(jax.jit(jax.vmap(with_skip))(pred, x, s), want)
    assert_same(jax.vmap(with_skip)(pred, x, s), jax.vmap(with_cond)(pred, x, s))
    for i in range(3):  # unbatched, as lax.cond
        assert_same(with_skip(pred[i], x[i], s[i]), with_cond(pred[i], x[i], s[i]))
    # an unbatched predicate with batched operands
    assert_same(
        jax.vmap(with_skip, in_axes=(None, 0, 0))(pred[0], x, s),
        jax.vmap(with_cond, in_axes=(None, 0, 0))(pred[0], x, s),
    )


def test_skip_cond_nested_vmap_loops_and_jvp():
    key = jax.random.PRNGKey(0)
    pred = jax.random.bernoulli(key, 0.3, (2, 3))
    x = jax.random.normal(jax.random.fold_in(key, 1), (2, 3, 4))
    s = jax.random.normal(jax.random.fold_in(key, 2), (2, 3))
    assert_same(jax.vmap(jax.vmap(with_skip))(pred, x, s), jax.vmap(jax.vmap(with_cond))(pred, x, s))

    def loop(f):  # a traced predicate inside a loop body, vmapped (the sweep's fori_loop of rounds)
        return jax.vmap(lambda x, s: lax.fori_loop(0, 5, lambda i, c: f(i % 3 == 0, c, s)["y"], x))

    assert_same(loop(with_skip)(x[0], s[0]), loop(with_cond)(x[0], s[0]))
    tangent = jnp.ones_like(x[0, 0])
    assert_same(
        jax.jvp(lambda x: with_skip(True, x, 2.0)["y"], (x[0, 0],), (tangent,)),
        jax.jvp(lambda x: with_cond(True, x, 2.0)["y"], (x[0, 0],), (tangent,)),
    )


def test_skip_cond_keeps_its_cond_under_vmap():
    pred, x, s = jnp.asarray([True, False]), jnp.ones((2, 3)), jnp.ones((2,))
    skipped = primitive_counts(jax.make_jaxpr(jax.vmap(with_skip))(pred, x, s).jaxpr)
    plain = primitive_counts(jax.make_jaxpr(jax.vmap(with_cond))(pred, x, s).jaxpr)
    assert plain["cond"] == 0  # what vmap makes of lax.cond: both branches, then a select
    assert skipped["cond"] == 1  # cond(any(pred), select of both, false branch)
    assert primitive_counts(jax.make_jaxpr(with_skip)(True, x[0], s[0]).jaxpr)["cond"] == 1


def test_skip_cond_bad_input():
    x = jnp.ones((3,))
    with pytest.raises(ValueError, match="pred"):
        skip_cond(jnp.ones((2,), bool), lambda x: x, lambda x: x, x)
    with pytest.raises(ValueError, match="same structure"):
        skip_cond(True, lambda x: x, lambda x: x[:2], x)


def test_momentum_clustering_seeds_kmeans_once_with_the_same_numbers(monkeypatch):
    """k-means++ runs under a cond at round 0 only; the rounds equal the former every-round
    ``jnp.where(round == 0, kmeans++, centers)`` bit for bit."""
    task = synthetic_regression(num_clusters=3, clients_per_cluster=5, samples_per_client=8, dim=6, seed=3)

    def run(rounds=4):
        algo = make_algorithm("momentum-clustering", task, learning_rate=0.05, num_clusters=3, quantile=0.4)
        state = algo.init(task.init_params(jax.random.PRNGKey(0)), task.num_clients)
        step = jax.jit(algo.round)
        jaxpr = jax.make_jaxpr(algo.round)(state, task.data, jax.random.PRNGKey(1)).jaxpr
        out = []
        for t in range(rounds):
            state, metrics = step(state, task.data, jax.random.fold_in(jax.random.PRNGKey(1), t))
            out.append((state, metrics))
        return primitive_counts(jaxpr), jax.device_get(out)

    counts, now = run()
    # the former form: both k-means++ and the carried centres every round, then a select
    monkeypatch.setattr(
        gradient_clustering,
        "lax",
        types.SimpleNamespace(cond=lambda pred, on_true, on_false: jnp.where(pred, on_true(), on_false())),
    )
    before_counts, before = run()
    assert counts["cond"] == before_counts["cond"] + 1
    assert_same(now, before)
    centres = [s.extra["centers"] for s, _ in now]
    assert not np.array_equal(centres[0], centres[1])  # the rounds after the first move the centres


@pytest.mark.parametrize("rule", ["trimmed-mean", "median"])
def test_aggregate_segments_filled_groups_only_and_under_vmap(rule):
    """Each filled group's aggregate is the rule on its members (bit for bit), an empty group gets 0, and a
    vmap over runs whose filled groups differ gives each run's own result (the skipped steps change nothing)."""
    rng = np.random.default_rng(0)
    groups = 9
    messages = rng.normal(size=(3, 14, 4)).astype(np.float32)
    messages[1, 5, 2] = np.nan  # an unusable message: the rule's own handling
    labels = np.stack([rng.choice([0, 4, 8], 14), rng.choice([1, 2, 3, 4, 5, 6], 14), np.full(14, 7)])
    labels = jnp.asarray(labels, jnp.int32)
    aggregate = make_aggregator(rule, **({"beta": 0.2} if rule == "trimmed-mean" else {}))
    vmapped, vmapped_members = jax.vmap(lambda m, labelled: aggregate_segments(aggregate, m, labelled, groups))(
        messages, labels
    )
    for r in range(3):
        got, members = aggregate_segments(aggregate, messages[r], labels[r], groups)
        np.testing.assert_array_equal(members, np.bincount(np.asarray(labels[r]), minlength=groups))
        np.testing.assert_array_equal(vmapped[r], got)
        np.testing.assert_array_equal(vmapped_members[r], members)
        for g in range(groups):
            want = aggregate(messages[r], labels[r] == g) if members[g] > 0 else np.zeros(4, np.float32)
            np.testing.assert_array_equal(got[g], want)
