"""FedAvg and its family (fedjax_clust.algorithms.fedavg) and the local-training engine
(fedjax_clust.core.local_training), against float64 NumPy references of the equations their docstrings state:
McMahan et al.'s ClientUpdate (epochs of batches, the last one partial, smaller clients taking fewer steps),
FedProx's proximal gradient, client momentum, and Reddi et al.'s Algorithm 2 server steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.algorithms.fedavg import SERVER_OPTIMIZERS, make_server_optimizer
from fedjax_clust.core.batching import client_loss
from fedjax_clust.core.local_training import StepDirection, local_training
from fedjax_clust.core.optim import client_optimizer
from fedjax_clust.core.option_groups import gather
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.run.driver_options import Evaluation, Output

SIZES = np.array([7, 3, 5])
DIM = 4


def _example_loss(params, example):
    """Least squares: 0.5 (a . w + c - b)^2."""
    return 0.5 * (jnp.dot(example["a"], params["w"]) + params["c"] - example["b"]) ** 2


def _data(seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES.max()
    mask = np.arange(n)[None, :] < SIZES[:, None]
    a = rng.normal(size=(len(SIZES), n, DIM)).astype(np.float32) * mask[..., None]
    b = rng.normal(size=(len(SIZES), n)).astype(np.float32) * mask
    return {"a": a, "b": b, "mask": mask}


def _gradient64(w, c, a, b):
    """The float64 gradient of the mean loss over the rows of (a, b)."""
    r = a @ w + c - b
    return a.T @ r / len(b), r.mean()


def _orders(key, epochs, n_max):
    """Each epoch's permutation as local_training draws it (real examples first, in a uniform random order)."""
    out = []
    for e in range(epochs):
        scores = np.asarray(jax.random.uniform(jax.random.fold_in(key, e), (len(SIZES), n_max)))
        scores = np.where(np.arange(n_max)[None, :] < SIZES[:, None], scores, 2.0)
        out.append(np.argsort(scores, axis=1, kind="stable"))
    return out


def _reference(data, start, key, *, epochs, batch, lr, momentum=0.0, mu=0.0):
    """McMahan et al.'s ClientUpdate in float64: per epoch a permutation cut into batches of B, the last partial,
    one SGD (heavy-ball momentum) step per batch on the batch mean plus mu (x - x_0)."""
    a, b = (np.asarray(data[k], np.float64) for k in ("a", "b"))
    w0, c0 = (np.asarray(start[k], np.float64) for k in ("w", "c"))
    results, steps = [], []
    orders = _orders(key, epochs, a.shape[1])
    for i, n_i in enumerate(SIZES):
        w, c, vw, vc, taken = w0.copy(), float(c0), np.zeros(DIM), 0.0, 0
        for e in range(epochs):
            order = orders[e][i][:n_i]
            for lo in range(0, n_i, batch):
                rows = order[lo : lo + batch]
                gw, gc = _gradient64(w, c, a[i, rows], b[i, rows])
                gw, gc = gw + mu * (w - w0), gc + mu * (c - float(c0))
                vw, vc = momentum * vw + gw, momentum * vc + gc
                w, c, taken = w - lr * vw, c - lr * vc, taken + 1
        results.append((w, c))
        steps.append(taken)
    return results, steps


@pytest.mark.parametrize("layout", ["padded", "ragged"])
@pytest.mark.parametrize("momentum, mu", [(0.0, 0.0), (0.9, 0.5)])
def test_local_epochs_follow_mcmahans_client_update(layout, momentum, mu):
    data = _data()
    given = data if layout == "padded" else RaggedBatch.from_padded(data)
    start = {"w": np.full(DIM, 0.3, np.float32), "c": np.float32(-0.2)}
    rows = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(SIZES),) + np.shape(x)), start)
    key = jax.random.PRNGKey(3)
    out = jax.jit(
        lambda r, d: local_training(
            jax.grad(client_loss(_example_loss)),
            r,
            d,
            key,
            optimizer=client_optimizer(0.05, momentum),
            epochs=2,
            batch_size=2,
            direction=StepDirection(prox=mu, reference=start),
        )
    )(rows, given)
    want, steps = _reference(data, start, key, epochs=2, batch=2, lr=0.05, momentum=momentum, mu=mu)
    assert np.asarray(out.steps).tolist() == steps == [8, 4, 6]  # E ceil(n_i / B): the smaller clients stop early
    assert np.asarray(out.examples).tolist() == (2 * SIZES).tolist()
    for i, (w, c) in enumerate(want):
        np.testing.assert_allclose(np.asarray(out.params["w"][i]), w, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(float(out.params["c"][i]), c, rtol=2e-5, atol=2e-6)


def test_local_steps_and_full_batch_epochs_are_gradient_descent():
    """tau full-batch steps = tau epochs of one full batch = tau steps of gradient descent, whatever the draw."""
    data = _data(1)
    start = {"w": np.zeros(DIM, np.float32), "c": np.float32(0.0)}
    rows = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(SIZES),) + np.shape(x)), start)
    grad_fn, opt = jax.grad(client_loss(_example_loss)), client_optimizer(0.1)
    by_steps = local_training(grad_fn, rows, data, jax.random.PRNGKey(0), optimizer=opt, steps=3)
    by_epochs = local_training(grad_fn, rows, data, jax.random.PRNGKey(1), optimizer=opt, epochs=3)
    for i, n_i in enumerate(SIZES):
        a, b = np.asarray(data["a"][i, :n_i], np.float64), np.asarray(data["b"][i, :n_i], np.float64)
        w, c = np.zeros(DIM), 0.0
        for _ in range(3):
            gw, gc = _gradient64(w, c, a, b)
            w, c = w - 0.1 * gw, c - 0.1 * gc
        for got in (by_steps, by_epochs):
            np.testing.assert_allclose(np.asarray(got.params["w"][i]), w, rtol=2e-5, atol=2e-6)
    assert np.asarray(by_epochs.steps).tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match="exactly one"):
        local_training(grad_fn, rows, data, jax.random.PRNGKey(0), optimizer=opt, steps=3, epochs=1)


def _server_reference(name, deltas, x0, lr, beta1, beta2, tau, v0=None, bias_correction=False):
    """Reddi et al. 2021, Algorithm 2 (and FedAvgM, FedAvg) in float64; ``bias_correction``: Kingma and Ba's
    Adam (v0 = 0, m / (1 - beta1^t) and v / (1 - beta2^t))."""
    v0 = (0.0 if bias_correction else tau * tau) if v0 is None else v0
    x, m, v = np.asarray(x0, np.float64), np.zeros_like(x0, np.float64), np.full_like(x0, v0, np.float64)
    for t, d in enumerate(deltas, 1):
        d = np.asarray(d, np.float64)
        if name == "sgd":
            x = x + lr * d
            continue
        if name == "momentum":
            m = beta1 * m + d
            x = x + lr * m
            continue
        m = beta1 * m + (1 - beta1) * d
        if name == "adagrad":
            v = v + d * d
        elif name == "adam":
            v = beta2 * v + (1 - beta2) * d * d
        else:
            v = v - (1 - beta2) * d * d * np.sign(v - d * d)
        if bias_correction:
            x = x + lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + tau)
        else:
            x = x + lr * m / (np.sqrt(v) + tau)
    return x


@pytest.mark.parametrize("name", SERVER_OPTIMIZERS)
def test_server_optimizers_follow_reddi_et_al_algorithm_2(name):
    rng = np.random.default_rng(0)
    deltas = rng.normal(size=(4, 6)).astype(np.float32) * np.array([1.0, 0.1, 0.01, 1.0], np.float32)[:, None]
    x0 = rng.normal(size=6).astype(np.float32)
    opt = make_server_optimizer(name, 0.3, 0.9, 0.99, 1e-2)
    x, state = jnp.asarray(x0), opt.init(jnp.asarray(x0))
    for d in deltas:
        x, state = opt.update(jnp.asarray(d), state, x)
    np.testing.assert_allclose(
        np.asarray(x), _server_reference(name, deltas, x0, 0.3, 0.9, 0.99, 1e-2), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    "name, options",
    [
        ("adam", dict(bias_correction=True)),
        ("adagrad", dict(initial_v=0.0)),
        ("yogi", dict(initial_v=0.0)),
    ],
)
def test_bias_corrected_adam_is_optaxs_and_v_can_start_at_zero(name, options):
    import optax

    rng = np.random.default_rng(1)
    deltas = rng.normal(size=(5, 6)).astype(np.float32) * np.array([1.0, 0.1, 0.01, 1.0, 0.3], np.float32)[:, None]
    x0 = rng.normal(size=6).astype(np.float32)
    opt = make_server_optimizer(name, 0.3, 0.9, 0.99, 1e-2, **options)
    x, state = jnp.asarray(x0), opt.init(jnp.asarray(x0))
    for d in deltas:
        x, state = opt.update(jnp.asarray(d), state, x)
    want = _server_reference(
        name, deltas, x0, 0.3, 0.9, 0.99, 1e-2, v0=0.0, bias_correction=options.get("bias_correction", False)
    )
    np.testing.assert_allclose(np.asarray(x), want, rtol=1e-5, atol=1e-6)
    if name == "adam":  # optax's Adam on the pseudo-gradient -Delta: FedJAX's server optimiser
        adam = optax.adam(0.3, b1=0.9, b2=0.99, eps=1e-2)
        y, held = jnp.asarray(x0), adam.init(jnp.asarray(x0))
        for d in deltas:
            update, held = adam.update(-jnp.asarray(d), held, y)
            y = optax.apply_updates(y, update)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="bias correction applies to server_optimizer='adam'"):
        make_server_optimizer("yogi", 0.3, bias_correction=True)


def _task():
    return fc.make_task("synthetic", seed=0, num_clusters=2, clients_per_cluster=4)


def test_fedavg_with_one_full_batch_step_is_global_without_momentum():
    """One local full-batch SGD step and server rate 1: x - eta mean_i g_i(x), the seeds' Global at momentum 0."""
    task = _task()
    run = dict(rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    ours = fc.simulate(fc.make_algorithm("fedavg", task, learning_rate=0.001, local_steps=1), task, **run)
    theirs = fc.simulate(fc.make_algorithm("global", task, learning_rate=0.001, momentum=0.0), task, **run)
    np.testing.assert_allclose(
        np.asarray(jax.tree.leaves(ours.state.params.models)[0][0]),
        np.asarray(jax.tree.leaves(theirs.state.params.models)[0][0]),
        rtol=1e-5,
    )
    assert ours.history[-1]["mean_loss"] == pytest.approx(theirs.history[-1]["mean_loss"], rel=1e-5)


def test_a_round_averages_the_deltas_by_examples_and_steps_the_server():
    """One round of fedadam on ragged clients with example weights, against the deltas' weighted mean and one
    Algorithm 2 step computed from local_training's own rows."""
    data = _data(2)
    ragged = RaggedBatch.from_padded(data)
    task = fc.Task(
        name="toy",
        data=ragged,
        example_loss=_example_loss,
        init_params=lambda key: {"w": jnp.full(DIM, 0.1, jnp.float32), "c": jnp.float32(0.0)},
    )
    algo = fc.make_algorithm(
        "fedadam",
        task,
        learning_rate=0.05,
        local_epochs=1,
        batch_size=2,
        weighting="examples",
        server_learning_rate=0.1,
    )
    state = algo.start(task.init_params(None), task.num_clients, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(5)
    new, _ = jax.jit(algo.round)(state, task.data, key)
    start = task.init_params(None)
    rows = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(SIZES),) + np.shape(x)), start)
    trained = local_training(
        jax.grad(client_loss(_example_loss)),
        rows,
        ragged,
        key,
        optimizer=client_optimizer(0.05),
        epochs=1,
        batch_size=2,
    )
    deltas = np.asarray(trained.params["w"], np.float64) - np.asarray(start["w"], np.float64)
    mean = (SIZES[:, None] * deltas).sum(0) / SIZES.sum()
    want = _server_reference("adam", [mean], np.asarray(start["w"]), 0.1, 0.9, 0.99, 1e-3)
    np.testing.assert_allclose(np.asarray(new.params.models["w"][0]), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(local_epochs=2, local_steps=3), "not both"),
        (dict(server_learning_rate=0.0), "server_learning_rate"),
        (dict(server_beta2=0.9), "server_beta2 does nothing with server_optimizer='sgd'"),
        (dict(optimizer="adam", client_momentum=0.5), "client_momentum applies to optimizer='sgd'"),
        (dict(server_optimizer="momentum", server_tau=0.1), "server_tau does nothing"),
        (dict(server_optimizer="rmsprop"), "server_optimizer"),
        (dict(server_optimizer="yogi", server_bias_correction=True), "server_bias_correction does nothing"),
    ],
)
def test_fedavg_refuses_options_it_would_not_read(options, message):
    with pytest.raises(ValueError, match=message):
        fc.make_algorithm("fedavg", _task(), learning_rate=0.01, **options)
    with pytest.raises(ValueError, match="takes no option 'server_optimizer'"):  # the presets fix it
        fc.make_algorithm("fedadam", _task(), learning_rate=0.01, server_optimizer="sgd")


def test_a_cohort_round_reads_only_its_participants_and_dp_bounds_the_step():
    task = fc.make_task("classification", seed=0, clients_per_cluster=3)
    algo = fc.make_algorithm("fedavgm", task, learning_rate=0.1, participation=4, local_epochs=2, batch_size=8)
    state = algo.start(task.init_params(jax.random.PRNGKey(0)), task.num_clients, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(7)
    new, metrics = jax.jit(algo.round)(state, task.data, key)
    away = ~np.asarray(metrics["participants"])
    assert away.sum() == task.num_clients - 4
    poisoned = dict(task.data, x=jnp.where(away[:, None, None], jnp.nan, task.data["x"]))
    again, _ = jax.jit(algo.round)(state, poisoned, key)
    for a, b in zip(jax.tree.leaves(new.params.models), jax.tree.leaves(again.params.models)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    private = fc.make_algorithm(
        "fedavg",
        task,
        learning_rate=5.0,
        local_epochs=1,
        batch_size=8,
        privacy=fc.central_privacy(clip=1e-3, noise_multiplier=1e-9),
    )
    start = private.start(task.init_params(jax.random.PRNGKey(0)), task.num_clients, jax.random.PRNGKey(0))
    stepped, _ = jax.jit(private.round)(start, task.data, key)
    moved = np.sqrt(
        sum(
            float(jnp.sum((a - b) ** 2))
            for a, b in zip(jax.tree.leaves(stepped.params.models), jax.tree.leaves(start.params.models))
        )
    )
    assert 0 < moved <= 1e-3 * (1 + 1e-4)  # the mean of deltas clipped to C moves the model by at most C
    assert private.hparams["privacy"]["clip"] == 1e-3


def test_the_family_runs_from_the_command_line(tmp_path):
    import json

    from fedjax_clust.cli import main

    out = tmp_path / "prox"
    assert 0 == main(
        [
            "run",
            "--algorithm",
            "fedprox",
            "--task",
            "classification",
            "--clients-per-cluster",
            "3",
            "--local-epochs",
            "2",
            "--batch-size",
            "8",
            "--prox-mu",
            "0.1",
            "--rounds",
            "2",
            "--eval-every",
            "2",
            "--weighting",
            "examples",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    recorded = json.loads((out / "run.json").read_text())["config"]["hyperparameters"]
    assert recorded["algorithm"] == "fedprox" and recorded["traced"]["prox_mu"] == 0.1
    assert recorded["static"]["local_epochs"] == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hparams"]["weighting"] == "examples"
    assert summary["local_steps"] == 2 * 40 / 8  # E ceil(n / B): 40 training examples per client


@pytest.mark.parametrize("name", ["fedavgm", "fedadagrad", "fedadam", "fedyogi"])
def test_each_server_preset_runs_its_own_server_optimiser(name):
    """The presets the generic parametrisations leave out (conftest.SERVER_PRESETS): each runs, records its
    server optimiser, and its first server step is Algorithm 2's on the round's averaged delta."""
    task = _task()
    algo = fc.make_algorithm(name, task, learning_rate=0.001, local_steps=2, batch_size=4)
    kind = {"fedavgm": "momentum", "fedadagrad": "adagrad", "fedadam": "adam", "fedyogi": "yogi"}[name]
    assert algo.hparams["server_optimizer"] == kind and algo.name == name
    plain = fc.make_algorithm(
        "fedavg",
        task,
        learning_rate=0.001,
        local_steps=2,
        batch_size=4,
        server_learning_rate=algo.hparams["server_learning_rate"],
        server_optimizer=kind,
    )
    state = algo.start(task.init_params(None), task.num_clients, jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    ours, metrics = jax.jit(algo.round)(state, task.data, key)
    same, _ = jax.jit(plain.round)(state, task.data, key)
    leaves = [np.asarray(x) for x in jax.tree.leaves(ours.params.models)]
    for a, b in zip(leaves, jax.tree.leaves(same.params.models)):
        np.testing.assert_array_equal(a, np.asarray(b))
    assert all(np.isfinite(x).all() for x in leaves) and float(metrics["local_steps"]) == 2.0
    result = fc.simulate(algo, task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    assert result.summary["hparams"]["server_optimizer"] == kind


def test_scaffold_follows_karimireddy_et_al_algorithm_1_option_ii():
    """Three rounds of full-batch SCAFFOLD (tau = 3 steps, every client) against Algorithm 1 in float64, and with
    partial participation the invariant c = mean_i c_i the server's update keeps."""
    data = _data(4)
    task = fc.Task(
        name="toy",
        data=data,
        example_loss=_example_loss,
        init_params=lambda key: {"w": jnp.full(DIM, 0.2, jnp.float32), "c": jnp.float32(0.1)},
    )
    lr, lr_server, tau = 0.05, 0.7, 3
    algo = fc.make_algorithm("scaffold", task, learning_rate=lr, local_steps=tau, server_learning_rate=lr_server)
    result = fc.simulate(algo, task, rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    a, b = np.asarray(data["a"], np.float64), np.asarray(data["b"], np.float64)
    n = len(SIZES)
    x = np.concatenate([np.full(DIM, 0.2), [0.1]])
    c, ci = np.zeros(DIM + 1), np.zeros((n, DIM + 1))

    def grad(i, z):
        gw, gc = _gradient64(z[:DIM], z[DIM], a[i, : SIZES[i]], b[i, : SIZES[i]])
        return np.concatenate([gw, [gc]])

    for _ in range(3):
        dys, dcs = [], []
        for i in range(n):
            y = x.copy()
            for _ in range(tau):
                y = y - lr * (grad(i, y) - ci[i] + c)
            new = ci[i] - c + (x - y) / (tau * lr)
            dys.append(y - x)
            dcs.append(new - ci[i])
            ci[i] = new
        x = x + lr_server * np.mean(dys, axis=0)
        c = c + np.mean(dcs, axis=0)  # |S| / N = 1
    got = result.state.params.models
    np.testing.assert_allclose(np.asarray(got["w"][0]), x[:DIM], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(got["c"][0]), x[DIM], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(result.state.extra["control"]["w"]), c[:DIM], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(result.state.rows["w"]), ci[:, :DIM], rtol=1e-4, atol=1e-6)
    cohort = fc.make_algorithm("scaffold", task, learning_rate=lr, local_epochs=2, batch_size=2, participation=2)
    state = fc.simulate(
        cohort, task, rounds=4, evaluation=Evaluation(eval_every=4), output=Output(progress=False)
    ).state
    np.testing.assert_allclose(
        np.asarray(state.extra["control"]["w"]), np.asarray(state.rows["w"]).mean(0), rtol=1e-5, atol=1e-6
    )
    assert np.abs(np.asarray(state.rows["w"])).sum() > 0
    with pytest.raises(ValueError, match="assume the clients' plain SGD"):
        fc.make_algorithm("scaffold", task, learning_rate=lr, client_momentum=0.9)
    with pytest.raises(ValueError, match="refuses central privacy|privacy"):
        fc.make_algorithm(
            "scaffold", task, learning_rate=lr, privacy=fc.central_privacy(clip=1.0, noise_multiplier=1.0)
        )


def test_scaffolds_control_variates_stream_from_host_rows_bit_for_bit():
    """Each client's c_i is a client row: a cohort run keeps them in host memory and streams the cohort's, with
    the states of the resident run."""
    task = fc.make_task("classification", seed=0, clients_per_cluster=4)
    algo = fc.make_algorithm("scaffold", task, learning_rate=0.05, participation=5, local_steps=2, batch_size=8)
    run = dict(rounds=3, evaluation=Evaluation(eval_every=3), output=Output(progress=False))
    device = fc.simulate(algo, task, placement=fc.Placement(client_rows="device"), **run)
    host = fc.simulate(algo, task, placement=fc.Placement(client_rows="host"), **run)
    assert host.summary["client_rows"]["client_rows"] == "host"
    for a, b in zip(jax.tree.leaves(device.state), jax.tree.leaves(host.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_sweep_over_the_server_and_proximal_numbers_is_one_program_equal_to_single_runs():
    task = fc.make_task("classification", seed=0, clients_per_cluster=3)
    grid = {"server_learning_rate": [0.01, 0.05], "prox_mu": [0.1, 1.0]}
    options = dict(learning_rate=0.1, local_epochs=1, batch_size=16)
    result = fc.sweep(
        "fedprox",
        task,
        grid=grid,
        seeds=[0],
        rounds=3,
        options=options,
        plot=False,
        evaluation=Evaluation(eval_every=3),
        output=Output(progress=False),
    )
    assert len(result.programs) == 1 and len(result.runs) == 4
    for run in result.runs:
        values = run.summary["sweep_values"]
        want = fc.simulate(
            fc.make_algorithm("fedprox", task, **options, **values),
            task,
            rounds=3,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        assert run.history[-1]["test_loss"] == pytest.approx(want.history[-1]["test_loss"], rel=2e-5)


def test_the_engine_takes_the_steps_the_algorithms_loops_took_bit_for_bit():
    """IFCA's / CFL's / three-stage's local_sgd_steps (with a combine), Ditto's proximal personal steps and FedSoft's
    pull now run on local_training: the same numbers as the loops they replaced (written out here)."""
    import optax

    from fedjax_clust.core.batching import local_sgd_steps, map_clients, sample_minibatch
    from fedjax_clust.core.keys import attack_key

    data = _data(5)
    grad_fn = jax.grad(client_loss(_example_loss))
    rows = {
        "w": jnp.asarray(np.random.default_rng(1).normal(size=(len(SIZES), DIM)), jnp.float32),
        "c": jnp.zeros(len(SIZES), jnp.float32),
    }
    anchor = jax.tree.map(lambda x: 0.5 * x[::-1], rows)
    key, lr, lam = jax.random.PRNGKey(2), 0.07, 0.3

    def combine(g, k):  # a cluster's mean, plus something of the key so the key is checked too
        return jax.tree.map(lambda x: jnp.broadcast_to(x.mean(0), x.shape) + jax.random.uniform(k) * 1e-3, g)

    def old_loop(update, start, steps=3):
        def step(e, x):
            k = jax.random.fold_in(key, e)
            g = map_clients(grad_fn, x, sample_minibatch(data, 2, k))
            return update(x, g, k)

        return jax.lax.fori_loop(0, steps, step, start)

    cases = {
        "combine": (
            old_loop(lambda x, g, k: jax.tree.map(lambda p, d: p - lr * d, x, combine(g, attack_key(k))), rows),
            local_sgd_steps(grad_fn, rows, data, key, steps=3, learning_rate=lr, batch_size=2, combine=combine),
        ),
        "ditto": (
            old_loop(lambda x, g, k: jax.tree.map(lambda p, d, r: p - lr * (d + lam * (p - r)), x, g, anchor), rows),
            local_training(
                grad_fn,
                rows,
                data,
                key,
                optimizer=optax.sgd(lr),
                steps=3,
                batch_size=2,
                direction=StepDirection(prox=lam, reference=anchor),
            ).params,
        ),
        "fedsoft": (
            old_loop(
                lambda x, g, k: jax.tree.map(lambda p, d, a: p - lr * (d + lam * (2.0 * p - a)), x, g, anchor), rows
            ),
            local_training(
                grad_fn,
                rows,
                data,
                key,
                optimizer=optax.sgd(lr),
                steps=3,
                batch_size=2,
                direction=StepDirection(penalty=lambda w: jax.tree.map(lambda p, a: lam * (2.0 * p - a), w, anchor)),
            ).params,
        ),
    }
    for name, (old, new) in cases.items():
        for a, b in zip(jax.tree.leaves(jax.jit(lambda: old)()), jax.tree.leaves(new)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_unshuffled_epochs_read_each_clients_examples_in_stored_order():
    data = _data(6)
    start = {"w": np.full(DIM, 0.3, np.float32), "c": np.float32(-0.2)}
    rows = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(SIZES),) + np.shape(x)), start)
    got = local_training(
        jax.grad(client_loss(_example_loss)),
        rows,
        RaggedBatch.from_padded(data),
        jax.random.PRNGKey(0),
        optimizer=client_optimizer(0.05),
        epochs=2,
        batch_size=2,
        shuffle=False,
    )
    a, b = np.asarray(data["a"], np.float64), np.asarray(data["b"], np.float64)
    for i, n_i in enumerate(SIZES):
        w, c = np.full(DIM, 0.3), -0.2
        for _ in range(2):
            for lo in range(0, n_i, 2):
                gw, gc = _gradient64(w, c, a[i, lo : min(lo + 2, n_i)], b[i, lo : min(lo + 2, n_i)])
                w, c = w - 0.05 * gw, c - 0.05 * gc
        np.testing.assert_allclose(np.asarray(got.params["w"][i]), w, rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="local_shuffle applies to local_epochs"):
        fc.make_algorithm("fedavg", _task(), learning_rate=0.1, local_steps=2, local_shuffle=False)


@pytest.mark.parametrize("ragged", [False, True])
def test_training_in_chunks_matches_every_client_at_once(ragged):
    """client_chunk: the same batches as the all-at-once path, so the same models to float32 rounding, whether
    the chunk divides N (a reshape) or not (the last chunk overlapping), with a proximal pull to per-client
    references, a correction, unequal clients (epochs' masked steps) and the optimisers' state."""
    rng = np.random.default_rng(3)
    sizes = np.array([7, 3, 5, 1, 6, 2])
    n = sizes.max()
    mask = np.arange(n)[None, :] < sizes[:, None]
    data = {
        "a": jnp.asarray(rng.normal(size=(6, n, DIM)).astype(np.float32) * mask[..., None]),
        "b": jnp.asarray(rng.normal(size=(6, n)).astype(np.float32) * mask),
        "mask": jnp.asarray(mask),
    }
    data = RaggedBatch.from_padded(data) if ragged else data
    start = {"w": jnp.asarray(rng.normal(size=(6, DIM)).astype(np.float32)), "c": jnp.zeros(6)}
    rows = lambda: {"w": jnp.asarray(rng.normal(size=(6, DIM)).astype(np.float32)), "c": jnp.ones(6)}  # noqa: E731
    grad_fn = jax.grad(client_loss(_example_loss))
    single = {"w": jnp.ones(DIM), "c": jnp.float32(0.5)}
    momentum, adam = client_optimizer(0.05, 0.9), client_optimizer(0.05, 0.9, "heavy-ball", "adam")
    cases = [  # (local_training's options, the chunks compared with all at once)
        (dict(epochs=2, batch_size=2, optimizer=momentum, prox=0.1, reference=rows(), correction=rows()), (2, 4)),
        (dict(epochs=1, batch_size=4, shuffle=False, optimizer=adam), (4,)),
        (dict(steps=3, batch_size=2, optimizer=adam, prox=0.1, reference=single), (2, 4)),
        (dict(steps=2, batch_size=None if not ragged else 3, optimizer=momentum), (4,)),
    ]
    for kw, chunks in cases:
        kw = gather(local_training, kw)  # prox / reference / correction: its StepDirection
        want = local_training(grad_fn, start, data, jax.random.PRNGKey(1), client_chunk=None, **kw)
        for chunk in chunks:  # 2 divides 6, 4 does not (the last chunk overlaps)
            got = local_training(grad_fn, start, data, jax.random.PRNGKey(1), client_chunk=chunk, **kw)
            for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
            assert np.array_equal(got.steps, want.steps) and np.array_equal(got.examples, want.examples)
            assert not np.allclose(np.asarray(got.params["w"]), np.asarray(start["w"]))  # it trained


def test_client_chunk_auto_follows_the_rows_bytes_and_prefers_a_divisor():
    from fedjax_clust.core.local_training import CHUNK_BYTES, resolve_client_chunk

    row = CHUNK_BYTES // 40  # 40 rows fill a chunk
    start = {"w": jnp.zeros((1000, row // 4), jnp.float32)}
    data = _data()
    if jax.default_backend() == "cpu":
        assert resolve_client_chunk("auto", start, data, 2, None) == 40  # 40 divides 1,000
        odd = {"w": jnp.zeros((997, row // 4), jnp.float32)}  # prime: no divisor in [20, 40]
        assert resolve_client_chunk("auto", odd, data, 2, None) == 40
        assert resolve_client_chunk("auto", {"w": jnp.zeros((30, 4))}, data, 2, None) is None  # one chunk
        assert resolve_client_chunk("auto", start, data, 2, 2) is None  # two steps: nothing to reuse
        assert resolve_client_chunk("auto", start, data, 7, None, epochs=2) is None  # two epochs of one batch
    assert resolve_client_chunk(None, start, data, 2, None) is None
    assert resolve_client_chunk(7, start, data, 2, None) == 7
    assert resolve_client_chunk("all", start, data, 2, None) is None
    assert resolve_client_chunk(7, start, data, 2, 0) is None  # no steps: nothing to chunk
    with pytest.raises(ValueError, match="client_chunk"):
        resolve_client_chunk(0, start, data, 2, None)


def test_chunked_minibatches_of_data_without_a_mask_carry_none():
    """A dict dataset without a mask reaches grad_fn as the all-at-once path hands it over: no 'mask' key."""
    seen = []

    def grad_fn(params, batch):
        seen.append(tuple(sorted(batch)))
        return jax.tree.map(jnp.zeros_like, params)

    data = {"a": jnp.ones((6, 4, DIM)), "b": jnp.ones((6, 4))}
    start = {"w": jnp.zeros((6, DIM))}
    for chunk in (None, 4):
        local_training(
            grad_fn,
            start,
            data,
            jax.random.PRNGKey(0),
            optimizer=client_optimizer(0.1),
            steps=3,
            batch_size=2,
            client_chunk=chunk,
        )
    assert set(seen) == {("a", "b")}
