"""SR-FCA: connected components, the all-pairs distances, and ONE_SHOT / TrimmedMeanGD / RECLUSTER / MERGE
against plain loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from references import components_by_search

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.algorithms.srfca import cross_losses, pairwise_l2
from fedjax_clust.cli.commands import main
from fedjax_clust.core.batching import client_loss
from fedjax_clust.ops.graph import component_sizes, connected_components
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.tasks import synthetic_regression

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("density", [0.0, 0.03, 0.08, 0.3])
def test_connected_components_equal_a_graph_search(density):
    n = 40
    adjacency = RNG.random((n, n)) < density  # not symmetric: an edge either way links
    valid = RNG.random(n) < 0.8
    for mask in (None, valid):
        got = np.asarray(connected_components(jnp.asarray(adjacency), None if mask is None else jnp.asarray(mask)))
        np.testing.assert_array_equal(got, components_by_search(adjacency, mask))
    labels = components_by_search(adjacency)
    np.testing.assert_array_equal(
        np.asarray(component_sizes(jnp.asarray(labels))), np.bincount(labels, minlength=n)[labels]
    )
    with pytest.raises(ValueError, match="square"):
        connected_components(jnp.zeros((3, 4), bool))


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=3, clients_per_cluster=5)


def test_distances_equal_loops(task):
    models = jnp.asarray(RNG.standard_normal((6, 10)).astype(np.float32) * 20)
    local = jnp.asarray(RNG.standard_normal((task.num_clients, 10)).astype(np.float32) * 20)
    d = np.asarray(pairwise_l2(local, models, chunk_size=4))
    ref = np.linalg.norm(np.asarray(local, np.float64)[:, None] - np.asarray(models, np.float64)[None], axis=-1)
    np.testing.assert_allclose(d, ref, rtol=1e-5)
    loss = client_loss(task.example_loss)
    got = np.asarray(cross_losses(loss, models, task.data, chunk_size=4))
    x, y = np.asarray(task.data["x"], np.float64), np.asarray(task.data["y"], np.float64)
    m64 = np.asarray(models, np.float64)
    ref = np.array(
        [[0.5 * np.mean((x[j] @ m64[i] - y[j]) ** 2) for j in range(task.num_clients)] for i in range(len(m64))]
    )
    np.testing.assert_allclose(got, ref, rtol=1e-4)


def _trimmed(rows, beta):
    t = int(np.floor(beta * len(rows) + 1e-6))
    return np.sort(rows, axis=0)[t : len(rows) - t].mean(0)


def test_one_shot_refine_recluster_and_merge_equal_loops(task):
    """One ONE_SHOT step and one REFINE step (one TrimmedMeanGD iteration), l2 distance, against NumPy:
    components of the local models' threshold graph with >= t clients, cluster models restarted at w0 and
    moved by the trimmed mean of their members' gradients, every client to its nearest cluster model, and
    the clusters' threshold graph merged (models averaged, components of < t clients dropped)."""
    lr, beta, t_min = 0.002, 0.2, 2
    loss = client_loss(task.example_loss)
    w0 = jnp.zeros(10, jnp.float32)
    grads0 = np.asarray(jax.vmap(jax.grad(loss), (None, 0))(w0, task.data), np.float64)
    local = -lr * grads0
    dist = np.linalg.norm(local[:, None] - local[None], axis=-1)
    lam = float(np.quantile(dist[dist > 0], 0.3))
    algo = make_algorithm(
        "srfca",
        task,
        learning_rate=lr,
        threshold=lam,
        min_size=t_min,
        beta=beta,
        one_shot_rounds=1,
        refine_steps=1,
        refine_iterations=1,
    )
    state = algo.init(w0, task.num_clients)
    step = jax.jit(algo.round)
    state, metrics = step(state, task.data, jax.random.PRNGKey(0))
    comps = components_by_search(dist <= lam)
    sizes = np.bincount(comps, minlength=len(comps))[comps]
    labels0 = np.where(sizes >= t_min, comps, -1)
    np.testing.assert_array_equal(np.asarray(state.rows["labels"]), labels0)
    np.testing.assert_allclose(np.asarray(state.params), local, rtol=1e-5, atol=1e-6)  # local models shown
    assert len(set(labels0[labels0 >= 0])) >= 2, "the test needs at least two clusters"

    state, metrics = step(state, task.data, jax.random.PRNGKey(1))
    slots = sorted(set(labels0[labels0 >= 0]))
    omega = {c: -lr * _trimmed(grads0[labels0 == c], beta) for c in slots}
    to_cluster = np.array([[np.linalg.norm(local[i] - omega[c]) for c in slots] for i in range(len(local))])
    relabelled = np.array(slots)[np.argmin(to_cluster, axis=1)]
    present = sorted(set(relabelled))
    between = np.array([[np.linalg.norm(omega[a] - omega[b]) for b in present] for a in present])
    merged = np.array(present)[components_by_search(between <= lam)]
    rep = dict(zip(present, merged))
    users = {r: sum(np.sum(relabelled == c) for c in present if rep[c] == r) for r in set(merged)}
    kept = [c for c in present if users[rep[c]] >= t_min]
    final = []
    for i, c in enumerate(relabelled):
        if c not in kept:
            c = min(kept, key=lambda k: to_cluster[i, slots.index(k)])
        final.append(rep[c])
    np.testing.assert_array_equal(np.asarray(state.rows["labels"]), final)
    for r in set(final):
        expected = np.mean([omega[c] for c in present if rep[c] == r], axis=0)
        np.testing.assert_allclose(np.asarray(state.extra["models"])[r], expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(
            np.asarray(state.params)[np.asarray(final) == r],
            np.broadcast_to(expected, (np.sum(np.asarray(final) == r), 10)),
            rtol=1e-4,
            atol=1e-5,
        )
    assert int(metrics["num_clusters"]) == len(set(final))


def test_srfca_recovers_the_clusters_without_knowing_k():
    """On a well-separated synthetic task (many samples per client), ONE_SHOT with an l2 threshold between
    the within- and across-cluster distances and one REFINE step find the 4 true clusters."""
    task = synthetic_regression(num_clusters=4, clients_per_cluster=5, samples_per_client=60)
    algo = make_algorithm(
        "srfca", task, learning_rate=0.01, threshold=60.0, one_shot_rounds=60, refine_steps=1, refine_iterations=60
    )
    from fedjax_clust.run.simulate import simulate

    run = simulate(
        algo,
        task,
        rounds=algo.hparams["schedule_rounds"],
        evaluation=Evaluation(eval_every=60),
        output=Output(progress=False),
    )
    assert run.history[-1]["misclustering"] == 0.0 and run.history[-1]["num_clusters"] == 4


def test_srfca_options_are_checked(task, tmp_path):
    with pytest.raises(ValueError, match="threshold"):
        make_algorithm("srfca", task, learning_rate=0.1)
    with pytest.raises(ValueError, match="beta"):
        make_algorithm("srfca", task, learning_rate=0.1, threshold=1.0, beta=0.5)
    with pytest.raises(ValueError, match="distance"):
        make_algorithm("srfca", task, learning_rate=0.1, threshold=1.0, distance="cosine")
    base = [
        "run",
        "--algorithm",
        "srfca",
        "--clients-per-cluster",
        "3",
        "--rounds",
        "3",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(base) == 2  # no --threshold
    assert (
        main(
            base
            + ["--threshold", "50", "--one-shot-rounds", "1", "--refine-iterations", "1", "--distance", "cross-loss"]
        )
        == 0
    )


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_srfca_distance_benchmark_rows():
    """``bench --model srfca``: both distances at the loop size (with the pair loop, equal to float32
    rounding) and at N, then the 4-run sweep against 4 single runs at N."""
    from fedjax_clust.bench.rounds import run_srfca_benchmarks

    rows = list(run_srfca_benchmarks(12, repeats=1, loop_clients=10))  # 10 -> 4 clusters of 2: 8 clients
    rows, (swept,) = rows[:-1], rows[-1:]
    assert [(r["distance"], r["clients"]) for r in rows] == [
        ("l2", 8),
        ("cross-loss", 8),
        ("l2", 12),
        ("cross-loss", 12),
    ]
    # the last row: a 4-run sweep's seconds per round against the 4 runs one after another
    assert swept["benchmark"] == "srfca-sweep" and swept["clients"] == 12 and swept["runs"] == 4
    assert swept["sweep_seconds_per_round"] > 0 and swept["single_runs_seconds_per_round"] > 0
    assert swept["sweep_vs_single_runs"] == swept["sweep_seconds_per_round"] / swept["single_runs_seconds_per_round"]
    assert all(r["seconds"] > 0 and r["pairs"] == r["clients"] ** 2 for r in rows)
    assert rows[0]["speedup_vs_loop"] > 0 and rows[1]["max_relative_difference"] < 1e-5  # the loop ran
    assert main(["bench", "--model", "srfca", "--subgroups", "2"]) == 2


@pytest.mark.slow
def test_srfca_tables_script(tmp_path, capsys):
    """experiments/srfca.py at tiny sizes: srfca.json holds accuracy and misclustering per method with the
    paper's numbers beside them, SR-FCA's rows after ONE_SHOT and each REFINE step, and a second run is
    refused."""
    import importlib.util
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("srfca_experiment", os.path.join(root, "experiments", "srfca.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = [
        "--out",
        str(tmp_path),
        "--tasks",
        "inverted",
        "--methods",
        "srfca,local-kmeans,one-shot-ifca,federated-clustering",
        "--seeds",
        "0",
        "--dataset",
        "digits",
        "--clients-per-cluster",
        "2",
        "--hidden",
        "8",
        "--one-shot-steps",
        "5",
        "--refine-iterations",
        "5",
        "--extra-rounds",
        "5",
        "--eval-every",
        "5",
        "--no-progress",
    ]
    assert script.main(argv) == 0
    out = json.loads((tmp_path / "srfca.json").read_text())
    inverted = out["results"]["inverted"]
    assert set(inverted) == {"srfca", "local-kmeans", "one-shot-ifca", "federated-clustering"}
    assert set(inverted["srfca"]["stages"]) == {"one_shot", "refine_1", "refine_2"}
    assert 0.0 <= inverted["srfca"]["test_accuracy"]["mean"] <= 1.0
    assert inverted["local-kmeans"]["misclustering"]["mean"] is not None
    assert out["paper"]["accuracy"]["inverted"]["srfca"] == 92.03
    assert (tmp_path / "srfca.png").stat().st_size > 0
    assert script.main(argv) == 2 and "already holds" in capsys.readouterr().err
    # --resume reads every finished run back (nothing is simulated) and runs only what this invocation adds
    ran = []

    def recording_simulate(algorithm, task, **options):
        ran.append(algorithm.name)
        return simulate(algorithm, task, **options)

    from fedjax_clust import simulate

    script.simulate = recording_simulate
    assert script.main(argv + ["--resume"]) == 0 and ran == []
    assert json.loads((tmp_path / "srfca.json").read_text())["results"] == out["results"]
    more = [a if a != "srfca,local-kmeans,one-shot-ifca,federated-clustering" else "srfca,local" for a in argv]
    assert script.main(more + ["--resume"]) == 0 and ran == ["local"]
    again = json.loads((tmp_path / "srfca.json").read_text())["results"]["inverted"]
    assert again["srfca"] == inverted["srfca"] and set(again) == {"srfca", "local"}
    # another lambda: SR-FCA and ONE_SHOT-IFCA (its ONE_SHOT's settings are in its run.json) run again, with a
    # line naming what changed; Local-KMeans and FC, which lambda does not touch, are read back
    ran.clear()
    capsys.readouterr()
    assert script.main(argv + ["--resume", "--threshold", "3.0"]) == 0 and ran == ["srfca", "ifca-1"]
    err = capsys.readouterr().err
    assert "replacing" in err and "hparams.threshold: 2.0 -> 3.0" in err and "one_shot.threshold" in err
    with pytest.raises(SystemExit, match="2"):
        script.main(argv + ["--resume", "--overwrite"])


def test_one_shot_models_equal_a_numpy_one_shot():
    """ONE_SHOT-IFCA's initialiser: the K largest components' mean local models after T local GD steps, and
    farthest-first local models when K exceeds the components (float64 NumPy reference)."""
    from fedjax_clust.algorithms.srfca import one_shot_models

    task = synthetic_regression(num_clusters=3, clients_per_cluster=4, samples_per_client=30, dim=4, seed=1)
    x, y = np.asarray(task.data["x"], np.float64), np.asarray(task.data["y"], np.float64)
    local = np.zeros((task.num_clients, 4))
    for _ in range(100):
        local = local - 0.03 * np.einsum("ind,in->id", x, np.einsum("ind,id->in", x, local) - y) / 30
    labels = components_by_search(np.linalg.norm(local[:, None] - local[None], axis=-1) <= 50.0)
    sizes = np.bincount(labels, minlength=task.num_clients)
    order = [c for c in np.argsort(-sizes, kind="stable") if sizes[c] > 0]
    assert len(order) == 3
    want = [local[labels == c].mean(0) for c in order]
    models, got_labels = one_shot_models(task, 3, learning_rate=0.03, threshold=50.0, one_shot_rounds=100)
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_allclose(np.asarray(models), np.stack(want), rtol=1e-4, atol=1e-3)
    more, _ = one_shot_models(task, 5, learning_rate=0.03, threshold=50.0, one_shot_rounds=100)
    for _ in range(2):  # farthest-first fill
        gaps = np.min(np.linalg.norm(local[:, None] - np.stack(want)[None], axis=-1), axis=1)
        want.append(local[np.argmax(gaps)])
    np.testing.assert_allclose(np.asarray(more), np.stack(want), rtol=1e-4, atol=1e-3)
    algo = make_algorithm("ifca-1", task, learning_rate=0.01, init_cluster_params=models)
    state = algo.init(task.init_params(None), task.num_clients)
    np.testing.assert_allclose(np.asarray(state.extra["centers"]), np.asarray(models))


@pytest.mark.parametrize("distance,threshold", [("l2", 60.0), pytest.param("cross-loss", 1e4, marks=pytest.mark.slow)])
def test_identity_attackers_leave_srfca_bit_identical(distance, threshold):
    """An attack that sends the honest messages (x1) changes nothing: the attack draws from its own key
    stream and replaces exactly the messages listed in the module docstring."""
    from fedjax_clust.robust import make_attack, mark_byzantine

    task = synthetic_regression(num_clusters=2, clients_per_cluster=5, samples_per_client=30)
    attacked = mark_byzantine(task, per_cluster=1, seed=0)
    options = dict(
        learning_rate=0.01,
        threshold=threshold,
        one_shot_rounds=3,
        refine_steps=2,
        refine_iterations=2,
        distance=distance,
        batch_size=8,
    )
    runs = []
    for t, attack in ((task, None), (attacked, make_attack("large-gradient", scale=1.0))):
        algo = make_algorithm("srfca", t, attack=attack, **options)
        state = algo.init(t.init_params(None), t.num_clients)
        step = jax.jit(algo.round)
        for r in range(9):
            state, metrics = step(state, t.data, jax.random.PRNGKey(r))
        runs.append((state, metrics))
    (clean, m_clean), (same, m_same) = runs
    for a, b in zip(
        jax.tree.leaves((clean.params, clean.extra, m_clean)), jax.tree.leaves((same.params, same.extra, m_same))
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_trimmed_mean_gd_resists_sign_flipping_attackers_that_break_the_mean():
    """SR-FCA's §5 claim in miniature: one sign-flipping attacker per cluster (they all RECLUSTER into one
    cluster, 4 of its 13 members); TrimmedMeanGD with beta = 0.35 > 4/13 stays within 1.3x the attack-free
    error, the plain mean (beta = 0) is more than twice worse. Clustering stays exact in both."""
    from fedjax_clust.robust import mark_byzantine
    from fedjax_clust.run.simulate import simulate

    task = synthetic_regression(num_clusters=4, clients_per_cluster=10, samples_per_client=60)
    attacked = mark_byzantine(task, per_cluster=1, seed=0)
    errors = {}
    for name, t, beta, attack in (
        ("clean", task, 0.35, None),
        ("trimmed", attacked, 0.35, "sign-flip"),
        ("mean", attacked, 0.0, "sign-flip"),
    ):
        algo = make_algorithm(
            "srfca",
            t,
            learning_rate=0.01,
            threshold=60.0,
            one_shot_rounds=60,
            refine_steps=1,
            refine_iterations=60,
            beta=beta,
            attack=attack,
        )
        last = simulate(
            algo, t, rounds=240, evaluation=Evaluation(eval_every=240), output=Output(progress=False)
        ).history[-1]
        assert last["misclustering"] == 0.0 and last["num_clusters"] == 4
        errors[name] = last["mean_sq_dist_to_optimum"]
    assert errors["trimmed"] < 1.3 * errors["clean"]
    assert errors["mean"] > 2.0 * errors["clean"]


@pytest.mark.slow  # the slow tier (-m 'not slow' leaves it out): a process / benchmark / script run
def test_srfca_script_paper_profile_resolves_per_task_and_steps_with_adam(tmp_path):
    """--profile paper: the paper's optimiser (Adam at 2e-4) on SR-FCA, IFCA, CFL, Local-KMeans (three-stage's
    step_optimizer) and the other methods whose builders have it, SGD at ours' rate on FedSoft, per-task settings
    and the differences from the paper recorded (naming only the SGD methods that ran); a flag overrides its
    profile value."""
    import importlib.util
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("srfca_paper", os.path.join(root, "experiments", "srfca.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = [
        "--out",
        str(tmp_path),
        "--profile",
        "paper",
        "--tasks",
        "inverted,rotated",
        "--methods",
        "srfca,ifca,cfl,local-kmeans,fedsoft",
        "--seeds",
        "0",
        "--dataset",
        "digits",
        "--hidden",
        "8",
        "--one-shot-steps",
        "5",
        "--refine-iterations",
        "5",
        "--eval-every",
        "5",
        "--no-progress",
    ]
    assert script.main(argv) == 0
    out = json.loads((tmp_path / "srfca.json").read_text())
    settings = out["settings"]
    assert settings["profile"] == "paper" and settings["optimizer"] == "adam" and settings["lr"] == 2e-4
    assert settings["hidden"] == 8 and settings["batch_size"] == 50 and settings["extra_rounds"] == 0
    assert settings["per_task"] == {"inverted": {"clients_per_cluster": 3}, "rotated": {"clients_per_cluster": 2}}
    assert any("lambda" in d for d in settings["differences"]["inverted"])
    assert any(d.startswith("FedSoft steps with SGD") for d in settings["differences"]["rotated"])
    assert not any("CFL" in d or "Local-KMeans" in d for d in settings["differences"]["rotated"])
    runs = tmp_path / "runs" / "inverted"
    srfca_run = json.loads((runs / "srfca" / "seed0" / "run.json").read_text())
    ifca_run = json.loads((runs / "ifca" / "seed0" / "run.json").read_text())
    cfl_run = json.loads((runs / "cfl" / "seed0" / "run.json").read_text())
    hparams = lambda run: run.get("hparams") or run["config"]["hparams"]  # noqa: E731
    assert hparams(srfca_run)["optimizer"] == "adam" and hparams(srfca_run)["learning_rate"] == 2e-4
    assert hparams(ifca_run)["optimizer"] == "adam" and hparams(ifca_run)["learning_rate"] == 2e-4
    assert hparams(cfl_run)["optimizer"] == "adam" and hparams(cfl_run)["learning_rate"] == 2e-4
    kmeans_run = hparams(json.loads((runs / "local-kmeans" / "seed0" / "run.json").read_text()))
    assert kmeans_run["step_optimizer"] == "adam" and kmeans_run["optimizer"] == "gd"
    fedsoft_run = hparams(json.loads((runs / "fedsoft" / "seed0" / "run.json").read_text()))
    assert "optimizer" not in fedsoft_run and fedsoft_run["learning_rate"] == 0.05
