"""One record per thing a run writes: a run and the same run inside a sweep write the same summary, and the
attackers' share is reported as realised, never silently rounded into two identical grid points."""

import json

import numpy as np
import pytest

from fedjax_clust.cli.commands import main
from fedjax_clust.robust.byzantine import attackers_in, byzantine_mask, smallest_group_with_an_attacker
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.experiment_records import TaskGrid

# timings, and what only a sweep's program has
TIMINGS = (
    "seconds_per_round",
    "first_round_seconds",
    "peak_bytes",
    "runs_in_program",
    "wall_seconds",
    "round_seconds",
    "evaluation_seconds",
    "setup_seconds",
    "compile_seconds",
    "compiled_programs",
    "run_batching",
)
BYZANTINE = [
    "--algorithm",
    "global",
    "--aggregator",
    "median",
    "--attack",
    "alie",
    "--clusters",
    "4",
    "--clients-per-cluster",
    "8",
    "--rounds",
    "6",
    "--eval-every",
    "3",
    "--no-progress",
]


def test_a_run_and_the_same_run_in_a_sweep_write_equal_summaries(tmp_path):
    """4 clusters x 8 clients, ALIE, beta = 0.25: every key the two summary.json files share holds the same value
    (metrics to float32 rounding: a sweep's batched matmuls may round differently), and both count the clients
    the same way (the sweep wrote num_clients 24, the honest ones, and no byzantine_clients)."""
    assert (
        main(["run", *BYZANTINE, "--byzantine-fraction", "0.25", "--lr", "0.01", "--out", str(tmp_path / "run")]) == 0
    )
    assert (
        main(
            ["sweep", *BYZANTINE, "--byzantine-fraction", "0.25", "--lr", "0.01,0.02", "--out", str(tmp_path / "sweep")]
        )
        == 0
    )
    alone = json.loads((tmp_path / "run" / "summary.json").read_text())
    inside = json.loads((tmp_path / "sweep" / "runs" / "learning_rate=0.01,seed=0" / "summary.json").read_text())
    assert alone["num_clients"] == 32 and alone["byzantine_clients"] == 8 and alone["counted_clients"] == 24
    assert alone["byzantine_share"] == 0.25
    shared = (set(alone) & set(inside)) - set(TIMINGS)
    assert {
        "num_clients",
        "byzantine_clients",
        "byzantine_share",
        "outlier_clients",
        "counted_clients",
        "hparams",
        "task_config",
        "status",
        "mean_sq_dist_to_optimum",
    } <= shared
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1]).keys() - {"round"}
    for key in sorted(shared):
        if key in metrics and isinstance(alone[key], float):
            assert inside[key] == pytest.approx(alone[key], rel=1e-5), key
        else:
            assert inside[key] == alone[key], key
    # run-only: the command line's options (a sweep keeps its own in config.toml); sweep-only: the swept values
    assert set(alone) - set(inside) <= {"options"} and set(inside) - set(alone) <= {"sweep_values", *TIMINGS}


def test_a_grid_whose_shares_mark_the_same_attackers_is_refused(tmp_path, capsys):
    """At 6 clients per cluster beta = 0.1 and 0.2 both mark one attacker per cluster (round(0.6) = round(1.2) =
    1): two rows labelled 0.1 and 0.2 would be one run. Refused, naming both values and the count."""
    common = [
        "--algorithm",
        "global",
        "--attack",
        "alie",
        "--clients-per-cluster",
        "6",
        "--rounds",
        "2",
        "--no-progress",
    ]
    assert main(["sweep", *common, "--byzantine-fraction", "0.1,0.2", "--out", str(tmp_path / "same")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "byzantine_fraction=0.1 and byzantine_fraction=0.2" in err, err
    assert "both mark 4 Byzantine clients (1 of 6 per cluster)" in err
    assert main(["sweep", *common, "--byzantine-fraction", "0.1,0.34", "--out", str(tmp_path / "differ")]) == 0


def test_too_few_clients_for_an_attacker_names_the_smallest_cluster_that_has_one(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "--algorithm",
                "global",
                "--attack",
                "alie",
                "--byzantine-fraction",
                "0.1",
                "--clients-per-cluster",
                "5",
                "--rounds",
                "2",
                "--no-progress",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "round(0.1 x 5) = 0 in its smallest cluster, of 5 clients" in err and "--clients-per-cluster 6" in err, err
    assert (
        main(
            [
                "run",
                "--algorithm",
                "global",
                "--attack",
                "alie",
                "--byzantine-fraction",
                "0.1",
                "--clients-per-cluster",
                "6",
                "--rounds",
                "2",
                "--no-progress",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.125, 0.2, 0.25, 0.3, 1 / 3, 0.45, 0.5, 0.7, 0.9])
def test_the_smallest_group_is_where_the_mask_first_marks_an_attacker(fraction):
    """smallest_group_with_an_attacker agrees with byzantine_mask itself (the same rounding, half to even):
    the mask marks an attacker and leaves an honest client at that size, and at no smaller size."""

    def marks(size):
        try:
            return int(byzantine_mask(size, fraction=fraction, true_clusters=np.zeros(size, int)).sum())
        except ValueError:  # every client an attacker: no honest one left
            return None

    smallest = smallest_group_with_an_attacker(fraction)
    assert marks(smallest) == attackers_in(smallest, fraction) >= 1
    assert all(marks(size) in (0, None) for size in range(1, smallest))
    assert smallest_group_with_an_attacker(0.0) is None


def test_tiny_fractions_get_their_smallest_group_at_once():
    smallest = smallest_group_with_an_attacker(1e-9)  # counted up one by one, this took minutes
    assert attackers_in(smallest, 1e-9) == 1 and attackers_in(smallest - 1, 1e-9) == 0


def test_task_points_that_differ_besides_the_share_are_not_refused():
    """Only points that differ in the Byzantine share alone can be one run under two labels: a task value of the
    user's own (here one its configuration does not record) keeps its points apart."""
    import dataclasses

    from fedjax_clust import synthetic_regression
    from fedjax_clust.run.sweep import sweep

    def task_of(seed, scale):
        return dataclasses.replace(synthetic_regression(num_clusters=2, clients_per_cluster=3, seed=seed), config={})

    result = sweep(
        "local",
        TaskGrid(task_of, {"scale": [1, 2]}),
        grid={},
        rounds=2,
        options={"learning_rate": 0.01},
        output=Output(progress=False),
    )
    assert len(result.runs) == 2


def test_how_a_run_ran_is_in_its_summary_not_in_its_run_json():
    """devices and quantile_select (algorithm.execution) say how a run ran, not what it computed: summary.json
    reports them next to the hyperparameters, run.json (what a resume must match) does not."""
    from fedjax_clust import make_algorithm, synthetic_regression
    from fedjax_clust.run.records import run_config
    from fedjax_clust.run.simulate import simulate

    task = synthetic_regression(num_clusters=2, clients_per_cluster=4, seed=0)
    algo = make_algorithm("federated-clustering", task, learning_rate=0.01, quantile_select="search", mesh=None)
    result = simulate(algo, task, rounds=2, evaluation=Evaluation(eval_every=1), output=Output(progress=False))
    assert result.summary["hparams"]["devices"] == 1 and result.summary["hparams"]["quantile_select"] == "search"
    recorded = run_config(algo, task, seed=0, eval_every=1)["hparams"]
    assert "devices" not in recorded and "quantile_select" not in recorded
    assert recorded["chunk_size"] == result.summary["hparams"]["chunk_size"]
