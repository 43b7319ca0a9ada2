"""The clients' optimiser (``optimizer="sgd"`` or ``"adam"``): Adam's step is the one its docstring states
(checked in float64), Local with Adam is every client running Adam on its own loss, Global keeps one model, a
sweep over Adam's rates computes what simulate computes, and bad combinations fail with the option's name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import make_algorithm, simulate, synthetic_regression
from fedjax_clust.algorithms.loss_clustering import ifca
from fedjax_clust.core.optim import ADAM_B2, ADAM_EPS, apply_client_updates, client_optimizer
from fedjax_clust.core.state import init_client_state
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.sweep import sweep


def adam64(params, grads_per_step, lr, b1):
    """Kingma & Ba's Algorithm 1 in float64: the reference the docstring's formula describes."""
    x = np.asarray(params, np.float64)
    m = np.zeros_like(x)
    s = np.zeros_like(x)
    for t, g in enumerate(grads_per_step, start=1):
        g = np.asarray(g, np.float64)
        m = b1 * m + (1 - b1) * g
        s = ADAM_B2 * s + (1 - ADAM_B2) * g * g
        x = x - lr * (m / (1 - b1**t)) / (np.sqrt(s / (1 - ADAM_B2**t)) + ADAM_EPS)
    return x


def test_adam_step_is_the_documented_formula():
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)}  # 3 clients, 4 weights
    grads = [rng.normal(size=(3, 4)).astype(np.float32) * scale for scale in (1.0, 0.1, 5.0, 0.01)]
    step = client_optimizer(0.05, 0.8, optimizer="adam")
    state = init_client_state(step, {"w": params["w"][0]}, 3)
    state = state._replace(params=params)
    for g in grads:
        state = apply_client_updates(step, state, {"w": jnp.asarray(g)})
    want = adam64(params["w"], grads, 0.05, 0.8)
    # float32's bias correction 1 - 0.999^t keeps about 4 digits at small t (1 - 0.999 = 1e-3 from two numbers
    # near 1): a relative error of ~1e-4 in the step of 0.05, about 5e-6 after 4 steps
    np.testing.assert_allclose(np.asarray(state.client_params["w"]), want, rtol=1e-5, atol=1e-5)


def _task():
    return synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=9, dim=5, seed=3)


def test_local_with_adam_is_each_client_running_adam_on_its_own_loss():
    task = _task()
    algo = make_algorithm("local", task, learning_rate=0.03, momentum=0.9, optimizer="adam")
    assert algo.hparams["optimizer"] == "adam"
    rounds = 6
    got = simulate(algo, task, rounds=rounds, seed=0, output=Output(progress=False)).state.client_params
    start = task.init_params(None)
    loss = lambda p, data: jnp.mean(jax.vmap(task.example_loss, in_axes=(None, 0))(p, data))  # noqa: E731
    for i in range(task.num_clients):
        data = jax.tree.map(lambda x: x[i], task.data)
        x = start
        grads = []
        for _ in range(rounds):  # full-batch steps: float32 gradients at the reference's own iterate
            g = jax.grad(loss)(x, data)
            grads.append(g)
            flat = adam64(
                jax.flatten_util.ravel_pytree(start)[0], [jax.flatten_util.ravel_pytree(h)[0] for h in grads], 0.03, 0.9
            )
            x = jax.flatten_util.ravel_pytree(start)[1](jnp.asarray(flat, jnp.float32))
        mine = jax.tree.map(lambda p: p[i], got)
        np.testing.assert_allclose(
            jax.flatten_util.ravel_pytree(mine)[0], jax.flatten_util.ravel_pytree(x)[0], rtol=1e-4, atol=1e-5
        )


def test_global_with_adam_keeps_one_model_and_sgd_records_no_optimizer():
    task = _task()
    result = simulate(
        make_algorithm("global", task, learning_rate=0.05, optimizer="adam"),
        task,
        rounds=5,
        output=Output(progress=False),
    )
    rows = jax.flatten_util.ravel_pytree(result.state.client_params)[0].reshape(task.num_clients, -1)
    np.testing.assert_array_equal(rows, np.broadcast_to(rows[0], rows.shape))
    assert "optimizer" not in make_algorithm("global", task, learning_rate=0.05).hparams  # SGD: records as before
    fc = make_algorithm("federated-clustering", task, learning_rate=0.05, optimizer="adam", mesh=None)
    assert fc.hparams["optimizer"] == "adam"
    assert np.isfinite(simulate(fc, task, rounds=3, output=Output(progress=False)).summary["mean_loss"])


def test_a_sweep_over_adam_rates_equals_simulate():
    def task_of(seed):
        return synthetic_regression(num_clusters=2, clients_per_cluster=3, samples_per_client=9, dim=5, seed=seed)

    options = dict(optimizer="adam", momentum=0.9)
    result = sweep(
        "ground-truth",
        task_of,
        grid={"learning_rate": [0.01, 0.1]},
        seeds=[0, 1],
        rounds=8,
        options=options,
        evaluation=Evaluation(eval_every=4),
        output=Output(progress=False),
    )
    assert len(result.programs) == 1
    for run in result.runs:
        seed, lr = run.summary["seed"], run.summary["sweep_values"]["learning_rate"]
        want = simulate(
            make_algorithm("ground-truth", task_of(seed), learning_rate=lr, **options),
            task_of(seed),
            rounds=8,
            seed=seed,
            evaluation=Evaluation(eval_every=4),
            output=Output(progress=False),
        )
        for a, b in zip(run.history, want.history):
            np.testing.assert_allclose(a["mean_loss"], b["mean_loss"], rtol=2e-5)


@pytest.mark.parametrize(
    "options, word",
    [
        (dict(optimizer="rmsprop"), "optimizer"),
        (dict(optimizer="adam", momentum_form="average"), "momentum_form"),
        (dict(optimizer="adam", momentum=1.0), "momentum"),
    ],
)
def test_bad_optimizer_options_name_the_option(options, word):
    with pytest.raises(ValueError, match=word):
        make_algorithm("local", _task(), learning_rate=0.1, **options)


def test_srfca_with_adam_trains_one_shot_as_local_adam_and_restarts_the_clusters_adam():
    """ONE_SHOT's local models are Local-with-Adam's (full batches: the same steps); the first TrimmedMeanGD
    round of each REFINE step starts the clusters' Adam afresh (its step count back to 1)."""
    task = _task()
    one_shot, refine = 4, 3
    algo = make_algorithm(
        "srfca",
        task,
        learning_rate=0.02,
        threshold=1e6,
        min_size=1,
        one_shot_rounds=one_shot,
        refine_steps=2,
        refine_iterations=refine,
        optimizer="adam",
    )
    assert algo.hparams["optimizer"] == "adam"
    local = simulate(
        make_algorithm("local", task, learning_rate=0.02, optimizer="adam"),
        task,
        rounds=one_shot,
        output=Output(progress=False),
    ).state.client_params
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    counts = []
    for t in range(one_shot + 2 * refine):
        state, _ = step(state, task.data, jax.random.PRNGKey(t))
        if t + 1 == one_shot:
            np.testing.assert_allclose(
                jax.flatten_util.ravel_pytree(state.rows["local"])[0],
                jax.flatten_util.ravel_pytree(local)[0],
                rtol=1e-6,
                atol=1e-7,
            )
        if t + 1 > one_shot:
            adam_state = state.extra["models_opt"][0]  # optax.adam: (ScaleByAdamState, scale state)
            labels = np.asarray(state.rows["labels"])
            counts.append(int(np.asarray(adam_state.count)[labels[0]]))
    # one cluster (threshold 1e6): its Adam counts 1, 2 in a REFINE step's first rounds; the step's last round
    # ends with RECLUSTER and MERGE, which start it afresh (0), and the next step's restart keeps it fresh
    assert counts == [1, 2, 0, 1, 2, 0], counts
    result = simulate(algo, task, rounds=one_shot + 2 * refine + 2, output=Output(progress=False))
    assert np.isfinite(result.summary["mean_loss"])


def test_ifca_with_adam_steps_each_cluster_with_its_own_adam_on_the_mean_gradient():
    """IFCA Option I with Adam: every round each client picks its lowest-loss model, the server steps each
    picked model with that cluster's Adam on the members' mean gradient (float64 reference below), and a model
    no client picks (the third, far away) keeps its parameters and an Adam step count of 0."""
    from fedjax_clust.core.batching import client_loss

    task = _task()
    flat0, unravel = jax.flatten_util.ravel_pytree(task.init_params(None))
    rng = np.random.default_rng(1)
    starts = np.stack([rng.normal(size=flat0.shape), rng.normal(size=flat0.shape), np.full(flat0.shape, 1e3)])
    init = jax.vmap(unravel)(jnp.asarray(starts, jnp.float32))
    lr, b1, rounds = 0.05, 0.9, 6
    algo = make_algorithm("ifca-1", task, learning_rate=lr, num_clusters=3, init_cluster_params=init, optimizer="adam")
    assert algo.hparams["optimizer"] == "adam"
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    for t in range(rounds):
        state, _ = step(state, task.data, jax.random.PRNGKey(t))

    loss = client_loss(task.example_loss)
    value_and_grad = jax.jit(
        jax.vmap(jax.vmap(jax.value_and_grad(lambda f, d: loss(unravel(f), d)), (None, 0)), (0, None))
    )
    x = starts.astype(np.float64)
    m, s, count = np.zeros_like(x), np.zeros_like(x), np.zeros(3, int)
    for _ in range(rounds):
        losses, grads = value_and_grad(jnp.asarray(x, jnp.float32), task.data)  # [K, N], [K, N, P]
        labels = np.argmin(np.asarray(losses), axis=0)
        for k in set(labels.tolist()):
            g = np.asarray(grads, np.float64)[k, labels == k].mean(axis=0)
            count[k] += 1
            m[k] = b1 * m[k] + (1 - b1) * g
            s[k] = ADAM_B2 * s[k] + (1 - ADAM_B2) * g * g
            x[k] -= lr * (m[k] / (1 - b1 ** count[k])) / (np.sqrt(s[k] / (1 - ADAM_B2 ** count[k])) + ADAM_EPS)
    got = np.asarray(jax.vmap(lambda p: jax.flatten_util.ravel_pytree(p)[0])(state.extra["centers"]))
    assert count[2] == 0 and set(count[:2]) != {0}
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(state.extra["centers_opt"][0].count), count)
    # Option II averages the members' models, so it has no server step: ifca-2 does not offer the option (nor
    # does its command line), and the builder refuses it
    with pytest.raises(ValueError, match="takes no option 'optimizer'"):
        make_algorithm("ifca-2", task, learning_rate=lr, num_clusters=2, optimizer="adam")
    with pytest.raises(ValueError, match="option 1"):
        ifca(task.example_loss, 2, option=2, learning_rate=lr, optimizer="adam")
    from fedjax_clust.cli.commands import main

    assert main(["run", "--algorithm", "ifca-2", "--optimizer", "adam", "--rounds", "1", "--out", "unused"]) == 2


def test_cfl_with_adam_steps_each_cluster_model_with_its_own_adam_on_the_mean_gradient():
    """CFL, optimizer="adam", one full-batch local step: before any split the one cluster model follows Adam on
    the members' mean gradient (float64 reference); after splits every slot in use has stepped every round, its
    Adam step count equal to the round count (a sub-cluster starts with its parent's Adam state)."""
    from fedjax_clust.core.batching import client_loss

    task = _task()
    lr, rounds = 0.05, 5
    algo = make_algorithm("cfl", task, learning_rate=lr, optimizer="adam", min_rounds=1000)
    assert algo.hparams["optimizer"] == "adam"
    state = simulate(algo, task, rounds=rounds, output=Output(progress=False)).state
    flat0, unravel = jax.flatten_util.ravel_pytree(task.init_params(None))
    grad = jax.jit(jax.vmap(jax.grad(lambda f, d: client_loss(task.example_loss)(unravel(f), d)), (None, 0)))
    x, grads = np.asarray(flat0, np.float64), []
    for _ in range(rounds):
        g = np.asarray(grad(jnp.asarray(x, jnp.float32), task.data), np.float64).mean(axis=0)
        grads.append(g)
        x = adam64(np.asarray(flat0), grads, lr, 0.9)
    got = np.asarray(jax.flatten_util.ravel_pytree(jax.tree.map(lambda v: v[0], state.params.models))[0])
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-5)
    # with splits: the slots in use all stepped every round
    algo = make_algorithm("cfl", task, learning_rate=lr, optimizer="adam", min_rounds=2, eps1=1e9, eps2=1e-9)
    state = simulate(algo, task, rounds=8, output=Output(progress=False)).state
    used = np.unique(np.asarray(state.rows["labels"]))
    counts = np.asarray(state.extra["models_opt"][0].count)
    assert len(used) > 1 and np.all(counts[used] == 8) and np.all(np.delete(counts, used) == 0)
    with pytest.raises(ValueError, match="optimizer"):
        make_algorithm("cfl", task, learning_rate=lr, optimizer="rmsprop")


def test_three_stage_with_adam_runs_adam_in_stage_one_and_on_the_aggregate_in_stage_three():
    """three-stage, step_optimizer="adam" (the command line's --optimizer adam): Stage I is each client's own Adam
    on its full-batch gradients; Stage III (one threshold cluster, the mean) is a fresh Adam from the Stage II
    centre on the members' mean gradient (float64 references); Stage III 'fedavg' refuses it."""
    from fedjax_clust.core.batching import client_loss

    task = _task()
    lr, erm, more = 0.05, 4, 3
    algo = make_algorithm(
        "three-stage",
        task,
        learning_rate=lr,
        step_optimizer="adam",
        erm_rounds=erm,
        clustering="threshold",
        threshold=1e9,
        aggregator="mean",
    )
    assert algo.hparams["step_optimizer"] == "adam"
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    flat0, unravel = jax.flatten_util.ravel_pytree(task.init_params(None))
    loss = client_loss(task.example_loss)
    grad = jax.jit(jax.vmap(jax.grad(lambda f, d: loss(unravel(f), d))))  # per client at its own model
    rows = np.repeat(np.asarray(flat0, np.float64)[None], task.num_clients, 0)
    history = []
    for t in range(erm):
        if t == erm - 1:  # Stage I's local models before Stage II
            got = np.asarray(jax.vmap(lambda p: jax.flatten_util.ravel_pytree(p)[0])(state.rows["local"]))
            np.testing.assert_allclose(got, rows, rtol=1e-4, atol=1e-5)
        history.append(np.asarray(grad(jnp.asarray(rows, jnp.float32), task.data), np.float64))
        rows = np.stack([adam64(flat0, [g[i] for g in history], lr, 0.9) for i in range(task.num_clients)])
        state, _ = step(state, task.data, jax.random.PRNGKey(t))
    centre = np.asarray(
        jax.flatten_util.ravel_pytree(jax.tree.map(lambda v: v[0], state.extra["centres"]))[0], np.float64
    )
    mean_grads, x = [], centre
    for t in range(more):
        at = jnp.asarray(np.repeat(x[None], task.num_clients, 0), jnp.float32)
        mean_grads.append(np.asarray(grad(at, task.data), np.float64).mean(axis=0))
        x = adam64(centre, mean_grads, lr, 0.9)
        state, _ = step(state, task.data, jax.random.PRNGKey(erm + t))
    got = np.asarray(jax.flatten_util.ravel_pytree(jax.tree.map(lambda v: v[0], state.extra["centres"]))[0])
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="Stage III 'gd'"):
        make_algorithm("three-stage", task, learning_rate=lr, step_optimizer="adam", optimizer="fedavg")
