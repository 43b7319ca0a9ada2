"""The scale tools: the MLP cross-gradient benchmark, the subgroup trade-off, and FC on a large-model layout."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedjax_clust import federated_clustering
from fedjax_clust.algorithms.federated_clustering import (
    COLUMN_LAYOUT_MAX_PARAMS,
    FCClustering,
    FCExecution,
    random_subgroups,
)
from fedjax_clust.bench.mlp import (
    mlp_round_flops,
    mlp_task,
    pair_gradient_flops,
    run_mlp_benchmark,
)
from fedjax_clust.bench.profile import subgroup_tradeoff
from fedjax_clust.core.batching import client_loss
from fedjax_clust.tasks import clustered_classification


def test_pair_gradient_flops_counts_the_mlp():
    task = mlp_task(8, batch_size=4, input_dim=10, hidden=7, classes=3)
    batch = jax.tree.map(lambda x: x[0, :4], task.data)
    flops = pair_gradient_flops(task.example_loss, task.init_params(None), batch)
    b, d, h, c = 4, 10, 7, 3
    matmuls = 2 * b * (d * h + h * c) + 2 * b * h * c + 2 * b * (d * h + h * c)  # forward, delta_1, weight grads
    assert matmuls <= flops <= 2 * matmuls


def test_round_flops_formula():
    flops = mlp_round_flops(100.0, num_params=10, num_clients=8, group_size=4, steps=3)
    assert flops["cross-gradients"] == 8 * 4 * (100 + 30)
    assert flops["federated-clustering"] == 8 * 4 * (100 + 30 + 3 * 40)


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_mlp_benchmark_rows():
    rows = list(
        run_mlp_benchmark(8, subgroups=2, batch_size=2, input_dim=4, hidden=3, classes=2, repeats=1, clustering_steps=2)
    )
    assert rows[0]["benchmark"] == "matmul_f32" and rows[0]["gflops_per_s"] > 0
    kernels = [r["benchmark"] for r in rows[1:]]
    assert set(kernels) == {"mlp-cross-gradients", "mlp-federated-clustering"}
    for r in rows[1:]:
        assert r["clients"] == 8 and r["group_size"] == 4 and r["params"] == 4 * 3 + 3 + 3 * 2 + 2
        kind = r["benchmark"][len("mlp-") :]
        want = mlp_round_flops(r["pair_gradient_flops"], r["params"], 8, 4, 2)[kind]
        assert r["flops_per_round"] == want and r["seconds_per_round"] > 0
        assert r["gflops_per_s"] == pytest.approx(want / r["seconds_per_round"] / 1e9, rel=1e-2, abs=1e-2)
    with pytest.raises(ValueError, match="multiple of 4"):
        next(run_mlp_benchmark(10))
    with pytest.raises(ValueError, match="subgroups"):
        next(run_mlp_benchmark(8, subgroups=9))


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_bench_mlp_cli(capsys):
    from fedjax_clust.cli.commands import main

    argv = [
        "bench",
        "--model",
        "mlp",
        "--clients",
        "8",
        "--subgroups",
        "2",
        "--batch-size",
        "2",
        "--input-dim",
        "4",
        "--hidden",
        "3",
        "--classes",
        "2",
        "--repeats",
        "1",
        "--clustering-steps",
        "1",
        "--no-single-device",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["benchmark"] for r in rows] == ["matmul_f32", "mlp-cross-gradients", "mlp-federated-clustering"]
    assert main(["bench", "--model", "mlp", "--clients", "8,16"]) == 2
    assert "one client count" in capsys.readouterr().err


def test_subgroup_tradeoff_trains_and_costs_less(tmp_path):
    rows = subgroup_tradeoff(16, (1, 4), rounds=30, out_dir=str(tmp_path), log=lambda _: None)
    assert [r["subgroups"] for r in rows] == [1, 4] and [r["group_size"] for r in rows] == [16, 4]
    assert rows[0]["comm_bytes"] == 4 * rows[1]["comm_bytes"]
    from fedjax_clust.tasks import synthetic_regression

    task = synthetic_regression(num_clusters=4, clients_per_cluster=4, seed=0)
    start = float(task.evaluate(jnp.zeros((16, 10)))["mean_sq_dist_to_optimum"])
    assert all(r["mean_sq_dist_to_optimum"] < 0.5 * start for r in rows)  # both learn
    assert (tmp_path / "subgroups.csv").exists() and (tmp_path / "subgroups.png").exists()
    with pytest.raises(ValueError, match="multiple of 4"):
        subgroup_tradeoff(10, (1,))
    with pytest.raises(ValueError, match="subgroups"):
        subgroup_tradeoff(16, (0,))


def reference_threshold(points, center, steps, quantile):
    """Eq. (4) with the per-step quantile radius, float64, one centre."""
    v = np.asarray(center, np.float64)
    for _ in range(steps):
        dists = np.linalg.norm(points - v, axis=1)
        inside = dists <= np.quantile(dists, quantile)
        v = v + (points[inside] - v).sum(0) / len(points)
    return v


def test_mlp_round_with_subgroups_matches_reference():
    """FC on a model above COLUMN_LAYOUT_MAX_PARAMS (per-leaf [S, D_k] blocks) with subgroups, against numpy."""
    task = clustered_classification(
        num_clusters=2, clients_per_cluster=5, samples_per_client=6, dim=12, hidden=20, num_classes=3, seed=4
    )
    p0 = task.init_params(None)
    flat0, unravel = ravel_pytree(p0)
    assert flat0.size > COLUMN_LAYOUT_MAX_PARAMS
    n, groups, lr, steps, q = task.num_clients, 2, 0.1, 3, 0.5
    algo = federated_clustering(
        task.example_loss,
        learning_rate=lr,
        clustering=FCClustering(quantile=q, clustering_steps=steps, subgroups=groups),
        execution=FCExecution(mesh=None),
    )
    state = algo.init(p0, n)
    flat = flat0[None] + 0.3 * jax.random.normal(jax.random.PRNGKey(5), (n, flat0.size))
    state = state._replace(params=jax.vmap(unravel)(flat))
    key = jax.random.PRNGKey(7)
    new, _ = jax.jit(algo.round)(state, task.data, key)
    index, valid = random_subgroups(jax.random.split(key, 3)[2], n, groups)
    grad = jax.jit(jax.grad(lambda f, batch: client_loss(task.example_loss)(unravel(f), batch)))
    want = np.zeros((n, flat0.size))
    for g in range(groups):
        members = np.asarray(index[g])[np.asarray(valid[g])]
        for i in members:
            points = np.stack(
                [np.asarray(grad(flat[i], jax.tree.map(lambda x: x[j], task.data)), np.float64) for j in members]
            )
            own = int(np.nonzero(members == i)[0][0])
            want[i] = np.asarray(flat[i]) - lr * reference_threshold(points, points[own], steps, q)
    got = jax.vmap(lambda p: ravel_pytree(p)[0])(new.params)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_compiled_round_stays_within_the_memory_budget():
    """XLA's memory analysis of the FC round: temporaries within ``memory_budget`` (4 rows of an MLP's
    cross-gradients here), while the unchunked round needs far more. Compiled for the CPU on any machine
    (the inputs live on the CPU device), so the analysis is XLA:CPU's."""
    from fedjax_clust import make_algorithm
    from fedjax_clust.parallel.memory import BYTES_PER_ENTRY

    task = clustered_classification(
        num_clusters=4, clients_per_cluster=16, samples_per_client=8, dim=12, hidden=20, num_classes=3
    )
    num_params = 12 * 20 + 20 + 20 * 3 + 3
    budget = BYTES_PER_ENTRY * 64 * num_params * 4
    temps = []
    for kw in [dict(memory_budget=budget), dict(chunk_size=None)]:
        algo = make_algorithm(
            "federated-clustering", task, learning_rate=0.1, batch_size=4, quantile=0.3, mesh=None, **kw
        )
        state = algo.init(task.init_params(None), task.num_clients)
        args = jax.device_put((state, task.data, jax.random.PRNGKey(0)), jax.devices("cpu")[0])
        compiled = jax.jit(algo.round).lower(*args).compile()
        temps.append(compiled.memory_analysis().temp_size_in_bytes)
    assert temps[0] <= budget < temps[1]


@pytest.mark.slow
def test_synthetic_benchmark_rows():
    """``fedjax-clust bench``: the references first, then both quantile selections, the fixed radius with
    its bytes and bandwidth, every other algorithm, and the pair loop's speedup."""
    from fedjax_clust.bench.rounds import fc_round_bytes, run_benchmarks

    rows = list(run_benchmarks(clients=(8,), repeats=1, pair_loop_rounds=1, clustering_steps=2, others=("local",)))
    ref = rows[0]
    assert ref["benchmark"] == "reference" and ref["matmul_gflops_per_s"] > 0 and ref["copy_gbytes_per_s"] > 0
    fc = [r for r in rows[1:] if r["algorithm"] == "federated-clustering" and r["implementation"] == "vmapped-jit"]
    assert {r.get("quantile_select") for r in fc} == {"search", "radix", None}
    fixed = [r for r in fc if r["radius_rule"] == "radius=50"]
    assert fixed and all(r["bytes_per_round"] == fc_round_bytes(8, 10, 2) == 64 * (40 + 2 * 88) for r in fixed)
    assert all(r["fraction_of_copy"] > 0 for r in fixed)
    assert rows[-2]["algorithm"] == "local" and rows[-2]["fused_seconds_per_round"] > 0
    assert rows[-1]["implementation"] == "python-pair-loop" and rows[-1]["speedup_vmapped_vs_loop"] > 0


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_synthetic_benchmark_subgroups_frontier_rows():
    """``bench --subgroups G --others none``: Federated-Clustering alone, its FLOPs and bytes counted over the
    N x S pairs of the groups, no pair-loop reference; bad values are refused."""
    from fedjax_clust.bench.rounds import fc_round_bytes, fc_round_flops, run_benchmarks
    from fedjax_clust.cli.commands import main

    rows = list(run_benchmarks(clients=(8,), repeats=1, pair_loop_rounds=1, clustering_steps=2, others=(), subgroups=3))
    fc = rows[1:]
    assert {r["algorithm"] for r in fc} == {"federated-clustering"} and len(fc) == 3
    assert all(r["subgroups"] == 3 and r["group_size"] == 3 and r["peak_bytes_so_far"] > 0 for r in fc)
    assert all(r["flops_per_round"] == fc_round_flops(8, 9, 10, 2, 3) == 24 * (360 + 30 + 2 * 44) for r in fc)
    fixed = [r for r in fc if r["radius_rule"] == "radius=50"]
    assert fixed[0]["bytes_per_round"] == fc_round_bytes(8, 10, 2, 3) == 24 * (40 + 2 * 88)
    assert main(["bench", "--clients", "8", "--subgroups", "9"]) == 2
    assert main(["bench", "--clients", "8", "--others", "federated-clustering"]) == 2
    assert main(["bench", "--model", "mlp", "--others", "none"]) == 2
