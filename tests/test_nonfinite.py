"""One bad client cannot poison the others; a diverging run stops and says why; every file is strict JSON."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import (
    NonFiniteError,
    make_algorithm,
    make_task,
    simulate,
    synthetic_regression,
    threshold_clustering,
)
from fedjax_clust.cli.commands import main
from fedjax_clust.ops.clustering import kmeans
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output

BAD = (3, 9)  # client 3 sends NaN, client 9 inf


def strict_json(text):
    def refuse(constant):
        raise AssertionError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def with_bad_clients(task, kind):
    """Client 3's features are NaN and client 9's third feature is inf ("nonfinite"; every minibatch gives
    them non-finite gradients), or both hold finite data whose gradients are far outside every ball ("far")."""
    x, y = np.array(task.data["x"]), np.array(task.data["y"])
    if kind == "nonfinite":
        x[BAD[0]], x[BAD[1], :, 2] = np.nan, np.inf
    else:
        x[list(BAD)], y[list(BAD)] = 1e4, 1e6
    return task.__class__(**{**task.__dict__, "data": {"x": jnp.asarray(x), "y": jnp.asarray(y)}})


def run(algo, task, rounds):
    state = algo.init(task.init_params(None), task.num_clients)
    step = jax.jit(algo.round)
    for t in range(rounds):
        state, _ = step(state, task.data, jax.random.PRNGKey(t))
    return jax.tree.map(np.asarray, state.client_params)


@pytest.fixture(scope="module")
def task():
    return synthetic_regression(num_clusters=4, clients_per_cluster=4, seed=0)


OTHERS = np.setdiff1d(np.arange(16), BAD)


@pytest.mark.parametrize(
    "rule", [dict(quantile=0.3), dict(radius=50.0), dict(quantile=0.5, subgroups=2), dict(radius="theory")], ids=str
)
def test_federated_clustering_isolates_nan_and_inf_clients(task, rule):
    """Every other client's model stays finite and equals the run where the two clients' messages are
    finite but far outside every ball (eq. (4): a point outside the ball contributes the centre)."""
    kw = dict(learning_rate=0.01, momentum=0.9, batch_size=5, mesh=None, **rule)
    got = run(make_algorithm("federated-clustering", task, **kw), with_bad_clients(task, "nonfinite"), 12)
    far = run(make_algorithm("federated-clustering", task, **kw), with_bad_clients(task, "far"), 12)
    assert np.all(np.isfinite(got[OTHERS]))
    np.testing.assert_allclose(got[OTHERS], far[OTHERS], rtol=1e-5, atol=1e-5)
    assert not np.all(np.isfinite(got[list(BAD)]))  # the bad clients' own steps are non-finite


@pytest.mark.parametrize(
    "name, kw",
    [
        ("momentum-clustering", dict(quantile=0.3)),
        ("momentum-clustering", dict(radius=50.0)),
        ("myopic-clustering", {}),
        ("ifca-1", {}),
        ("ifca-2", {}),
        ("hypcluster", {}),
        ("cfl", dict(min_rounds=2)),
        ("global", {}),
        ("ground-truth", {}),
        ("ditto", {}),
        ("local", {}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_every_algorithm_keeps_the_other_clients_finite(task, name, kw):
    params = run(make_algorithm(name, task, learning_rate=0.002, **kw), with_bad_clients(task, "nonfinite"), 8)
    assert np.all(np.isfinite(params[OTHERS])), name


def test_threshold_clustering_and_kmeans_ignore_nonfinite_points():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(30, 4)).astype(np.float32)
    points[20:] += 10.0
    bad, far = points.copy(), points.copy()
    bad[5], bad[25, 1] = np.nan, np.inf
    far[5], far[25] = 1e6, -1e6
    centers = points[[0, 21]]
    for rule in (dict(quantile=0.4), dict(radius=3.0), dict(radius=np.inf), dict(radius="theory")):
        got = np.asarray(threshold_clustering(bad, centers, steps=5, **rule))
        assert np.all(np.isfinite(got)), rule
        if rule.get("radius") != np.inf:  # with tau = inf the far points are inside, the non-finite ones never
            np.testing.assert_allclose(got, threshold_clustering(far, centers, steps=5, **rule), rtol=1e-5, atol=1e-5)
    centres, labels = kmeans(jnp.asarray(bad), 2, jax.random.PRNGKey(0), steps=5)
    assert np.all(np.isfinite(np.asarray(centres)))
    good = np.setdiff1d(np.arange(30), [5, 25])
    truth = (np.arange(30) >= 20)[good]
    labels = np.asarray(labels)[good]
    assert len(set(labels[truth])) == 1 and len(set(labels[~truth])) == 1 and labels[truth][0] != labels[~truth][0]


def test_diverging_run_stops_with_the_results_so_far(tmp_path, task):
    """FC at learning rate 10 diverges: by round 10 its models are still finite but so large that every loss
    overflows, and the run stops there (it used to go on to round 20, when the models themselves overflowed)."""
    algo = make_algorithm("federated-clustering", task, learning_rate=10.0, quantile=0.2)
    with pytest.raises(
        NonFiniteError,
        match=r"federated-clustering: mean_dist_to_optimum, mean_loss, "
        r"mean_sq_dist_to_optimum became non-finite by round 10 although the "
        r"client models are finite",
    ) as info:
        simulate(
            algo,
            task,
            rounds=60,
            evaluation=Evaluation(eval_every=10),
            output=Output(progress=False, out_dir=str(tmp_path)),
        )
    assert info.value.round == 10 and info.value.fraction == 0.0
    rows = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 10]
    assert rows[-1]["mean_loss"] is None and "nonfinite_clients" not in rows[-1]
    summary = strict_json((tmp_path / "summary.json").read_text())
    assert summary["status"] == "stopped: non-finite metrics" and summary["stopped_at_round"] == 10
    assert summary["nonfinite_metrics"]["mean_loss"] == 10
    assert strict_json((tmp_path / "run.json").read_text())["status"].startswith("stopped")
    assert info.value.result.history == rows
    with pytest.raises(NonFiniteError, match=r"16 of 16 client models \(100.0%\) became non-finite by round 20"):
        simulate(
            algo, task, rounds=60, evaluation=Evaluation(eval_every=20), output=Output(progress=False)
        )  # no evaluation in between: models overflow


def test_a_sampled_evaluation_stops_out_of_the_honest_clients_it_counted():
    """With eval_clients on a task with Byzantine clients, the stop's count and share are out of the sample's
    honest clients (what the metrics row counts), not out of the sample size."""
    from fedjax_clust.robust.byzantine import mark_byzantine
    from fedjax_clust.run.streaming import evaluation_sample

    task = mark_byzantine(make_task("synthetic", num_clusters=2, clients_per_cluster=10, seed=0), fraction=0.25)
    algo = make_algorithm("global", task, learning_rate=10.0, attack="sign-flip")  # diverges for everyone
    with pytest.raises(NonFiniteError) as stopped:
        simulate(
            algo, task, rounds=40, evaluation=Evaluation(eval_every=20, eval_clients=8), output=Output(progress=False)
        )
    honest = int(np.sum(np.asarray(task.honest)[evaluation_sample(0, 20, task.num_clients, 8)]))
    assert honest < 8  # the sample holds attackers, whom the metrics leave out
    assert f"{honest} of {honest} client models (100.0%)" in str(stopped.value)
    assert stopped.value.result.summary["nonfinite_clients"] == 1.0


def test_warn_goes_on_over_the_finite_clients(tmp_path, task, capsys):
    bad = with_bad_clients(task, "nonfinite")
    algo = make_algorithm("local", bad, learning_rate=0.002)
    result = simulate(
        algo,
        bad,
        rounds=6,
        evaluation=Evaluation(eval_every=3, on_nonfinite="warn"),
        output=Output(progress=False, out_dir=str(tmp_path)),
    )
    assert "2/16 client models are non-finite at round 3" in capsys.readouterr().err
    rows = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("nonfinite_clients") for r in rows] == [None, 2 / 16, 2 / 16]
    assert rows[0]["mean_loss"] is None  # the two clients' losses on their own data are non-finite from the start
    assert result.summary["nonfinite_metrics"] == {"mean_loss": 0}
    finite = np.asarray(result.state.client_params)[OTHERS]
    want = np.mean(np.sum((finite - np.asarray(task.optima)[OTHERS]) ** 2, axis=1))
    assert rows[-1]["mean_sq_dist_to_optimum"] == pytest.approx(want, rel=1e-5)
    assert result.summary["status"] == "completed"


def test_cli_exit_3_and_compare_table(tmp_path, capsys):
    small = ["--clusters", "2", "--clients-per-cluster", "3", "--rounds", "40", "--lr", "10", "--no-progress"]
    assert main(["run", "--algorithm", "global", "--out", str(tmp_path / "run")] + small) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: global:") and "non-finite by round" in err[0]
    assert main(["compare", "--algorithms", "local,ground-truth", "--out", str(tmp_path / "cmp")] + small) == 3
    out, err = capsys.readouterr()
    assert "non-finite" in out and "stopped at round" in out
    assert len(err.strip().splitlines()) == 2
    results = strict_json((tmp_path / "cmp" / "results.json").read_text())
    assert all(r["status"].startswith("stopped") for r in results.values())


def test_every_written_file_is_strict_json(tmp_path, task):
    """A run whose metrics overflow before its models do, continued with on_nonfinite="warn": null in every
    file (metrics, summary, run.json, checkpoints), the first round recorded in the summary."""
    algo = make_algorithm("federated-clustering", task, learning_rate=10.0, quantile=0.2)
    result = simulate(
        algo,
        task,
        rounds=30,
        evaluation=Evaluation(eval_every=5, on_nonfinite="warn"),
        output=Output(progress=False, out_dir=str(tmp_path)),
        checkpointing=Checkpointing(checkpoint_every=10),
    )
    assert result.summary["nonfinite_metrics"]["mean_loss"] <= result.summary.get("rounds")
    files = list(tmp_path.rglob("*.json")) + list(tmp_path.rglob("*.jsonl"))
    assert {p.name for p in files} >= {"metrics.jsonl", "summary.json", "run.json", "progress.json"}
    for path in files:
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            strict_json(line)


@pytest.mark.parametrize("unbatched", [False, True])
@pytest.mark.parametrize("rule", [dict(quantile=0.3), dict(radius=60.0)], ids=str)
def test_large_rows_ignore_nonfinite_points(unbatched, rule):
    """Rows above SHIFTED_COPY_MAX_BYTES (never shifted): zeroed copy when batched, branch when not."""
    from fedjax_clust.ops.clustering import (
        SHIFTED_COPY_MAX_BYTES,
        threshold_cluster_blocks,
    )

    rng = np.random.default_rng(1)
    n, widths = 64, (3000, 2000)
    assert n * sum(widths) * 4 > SHIFTED_COPY_MAX_BYTES
    points = rng.normal(size=(n, sum(widths))).astype(np.float32)
    bad, far = points.copy(), points.copy()
    bad[5, 10], bad[9, 4000] = np.nan, np.inf
    far[5], far[9] = 1e6, -1e6
    kernel = jax.jit(
        lambda blocks, center: threshold_cluster_blocks(
            blocks, center, client_axis=0, steps=4, unbatched=unbatched, **rule
        )
    )
    split = lambda p: [jnp.asarray(b) for b in np.split(p, [widths[0]], axis=1)]
    got, ball = kernel(split(bad), [jnp.asarray(b[0]) for b in split(points)])
    want, _ = kernel(split(far), [jnp.asarray(b[0]) for b in split(points)])
    for g, w in zip(got, want):
        assert np.all(np.isfinite(np.asarray(g)))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert not np.asarray(ball)[[5, 9]].any()


def test_mlp_round_isolates_a_nan_client():
    """FC on the MLP (rows of 32 clients x 11,110 parameters, above the shifted-copy size): client 2's NaN
    inputs leave every other model finite, the same with one row at a time (the all-finite branch) and all
    rows at once (zeroed copies); the kernel-level test above checks the far-point equivalence."""
    from fedjax_clust.bench.mlp import mlp_task

    task = mlp_task(32, batch_size=4)
    x = np.array(task.data["x"])
    x[2] = np.nan
    bad = task.__class__(**{**task.__dict__, "data": {**task.data, "x": jnp.asarray(x)}})
    runs = []
    for chunk_size in (1, None):
        algo = make_algorithm(
            "federated-clustering", bad, learning_rate=0.1, quantile=0.3, batch_size=4, mesh=None, chunk_size=chunk_size
        )
        state = algo.init(bad.init_params(None), bad.num_clients)
        state, _ = jax.jit(algo.round)(state, bad.data, jax.random.PRNGKey(0))
        runs.append(jax.tree.map(lambda p: np.delete(np.asarray(p), 2, axis=0), state.client_params))
    for one, everything in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1])):
        assert np.all(np.isfinite(one))
        np.testing.assert_allclose(one, everything, rtol=1e-5, atol=1e-6)
