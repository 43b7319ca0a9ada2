"""The image experiments and benchmark end to end at tiny sizes: CLI, Table 1 script, bench --model cnn."""

import json
import os

import jax
import numpy as np
import pytest

from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.bench.image import benchmark_image_task, run_image_benchmark
from fedjax_clust.bench.rounds import pair_loop_round
from fedjax_clust.cli.commands import main
from fedjax_clust.core.batching import sample_minibatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cli_runs_an_uneven_image_task(tmp_path, capsys):
    code = main(
        [
            "run",
            "--algorithm",
            "federated-clustering",
            "--task",
            "mnist-private-label",
            "--dataset",
            "digits",
            "--model",
            "mlp",
            "--hidden",
            "8",
            "--clients-per-cluster",
            "2",
            "--size-sigma",
            "1",
            "--batch-size",
            "8",
            "--lr",
            "0.1",
            "--subgroups",
            "2",
            "--rounds",
            "3",
            "--eval-every",
            "3",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == "mnist-private-label" and 0.0 <= summary["test_accuracy"] <= 1.0
    config = json.load(open(tmp_path / "run.json"))
    assert config["config"]["task_config"]["size_sigma"] == 1 and config["config"]["task_config"]["model"] == "mlp"


def load_script(name):
    """An experiments/ script as a module (run in this process: no second JAX start-up)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_experiment", os.path.join(ROOT, "experiments", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # benchmark rows / script smoke: run with -m slow
def test_table1_script_writes_the_table(tmp_path, capsys):
    out = tmp_path / "t1"
    argv = [
        "--out",
        str(out),
        "--dataset",
        "digits",
        "--clients-per-cluster",
        "2",
        "--rounds",
        "2",
        "--eval-every",
        "1",
        "--lrs",
        "0.1,0.3",
        "--hidden",
        "8",
        "--methods",
        "federated-clustering",
        "--no-progress",
    ]
    table1 = load_script("table1")
    assert table1.main(argv) == 0
    printed = capsys.readouterr()
    table = json.load(open(out / "table1.json"))
    assert set(table) == {"rotation", "private-label"}
    for row in table.values():
        assert set(row) == {"federated-clustering"}
        assert all(0.0 <= v["accuracy"] <= 1.0 and np.isfinite(v["loss"]) for v in row.values())
    tuning = json.load(open(out / "tuning.json"))["tuning"]
    assert set(tuning["rotation"]["federated-clustering"]["validation_accuracy"]) == {"0.1", "0.3"}
    assert tuning["rotation"]["federated-clustering"]["learning_rate"] in (0.1, 0.3)
    assert (out / "table1.png").stat().st_size > 0 and "paper" in printed.out
    assert table1.main(argv) == 2 and "--overwrite" in capsys.readouterr().err  # never mixes two tables
    saved = str(tmp_path / "tuning.json")
    os.replace(out / "tuning.json", saved)
    assert table1.main(argv + ["--overwrite", "--tuned", saved, "--seeds", "2", "--tasks", "private-label"]) == 0
    record = json.load(open(out / "tuning.json"))["tuning"]["private-label"]["federated-clustering"]
    assert record["tuned_in"] == saved and record["validation_accuracy"] == {} and len(record["seeds"]) == 2


@pytest.mark.slow  # script smoke
def test_table1_text_labels_each_column_with_its_own_method():
    """The printed table's header follows the run's method order (a --methods order other than the script's
    listed FC's numbers under "Local")."""
    table1 = load_script("table1")
    row = {"federated-clustering": {"accuracy": 0.905, "loss": 0.5}, "local": {"accuracy": 0.811, "loss": 0.6}}
    header, ours, paper = table1.table_text({"private-label": row}).splitlines()
    assert header.split() == [table1.LABELS["federated-clustering"], table1.LABELS["local"]]
    assert ours.split()[1:3] == ["90.5/0.500", "81.1/0.600"]
    assert (
        paper.split()[1] == f"{table1.PAPER['private-label']['federated-clustering'][0]:.1f}/"
        f"{table1.PAPER['private-label']['federated-clustering'][1]:.3f}"
    )


def test_table1_paper_profile_uses_the_papers_settings_untuned(tmp_path):
    """--profile paper: one learning rate (0.1) for every method with no validation runs, plain SGD for Local and
    momentum 0.9 for FC, 5 clients per cluster offline, and the result file names the profile and what still
    differs; a flag overrides its profile's value (--rounds)."""
    out = tmp_path / "paper"
    argv = [
        "--out",
        str(out),
        "--profile",
        "paper",
        "--dataset",
        "digits",
        "--rounds",
        "2",
        "--eval-every",
        "1",
        "--hidden",
        "8",
        "--methods",
        "local,federated-clustering",
        "--tasks",
        "rotation",
        "--no-progress",
    ]
    assert load_script("table1").main(argv) == 0
    meta = json.load(open(out / "tuning.json"))
    assert meta["profile"] == "paper" and meta["tuned"] is False and meta["learning_rates"] == [0.1]
    assert meta["rounds"] == 2 and meta["clients_per_cluster"] == 5 and meta["num_clients"] == 20
    assert meta["loss"] == "probability"  # the authors' training loss, minus the label's softmax probability
    assert any("re-draws" in d for d in meta["differences"]) and any("1 group(s)" in d for d in meta["differences"])
    for method, beta in (("local", 0.0), ("federated-clustering", 0.9)):
        record = meta["tuning"]["rotation"][method]
        assert record["learning_rate"] == 0.1 and record["validation_accuracy"] == {}
        run = json.load(open(out / "runs" / "rotation" / method / "seed0" / "run.json"))
        assert run["config"]["hparams"]["momentum"] == beta
        assert run["config"]["hparams"]["learning_rate"] == 0.1
    fc = json.load(open(out / "runs" / "rotation" / "federated-clustering" / "seed0" / "run.json"))["config"]["hparams"]
    # run.sh's command for FC: full batches (a batch of 1,000 of 200 images), 3 thresholding steps
    assert fc["batch_size"] is None and fc["clustering_steps"] == 3
    assert meta["fc_schedule"] == {"rounds": 50, "batch_size": None, "clustering_steps": 3}
    assert meta["weight_init"] == "torch"  # the authors' models start from PyTorch's default initial weights
    assert not any("initial weights" in d for d in meta["differences"])


@pytest.mark.slow  # bench --model cnn at a tiny size still compiles two CNN rounds (~30 s); run with -m slow
def test_image_benchmark_rows():
    rows = list(
        run_image_benchmark(8, subgroups=2, batch_size=2, model="mlp", repeats=1, clustering_steps=2, loop_clients=4)
    )
    assert [r["benchmark"] for r in rows] == [
        "matmul_f32",
        "images-cross-gradients",
        "images-federated-clustering",
        "images-federated-clustering-loop",
    ]
    fc = rows[2]
    assert fc["group_size"] == 4 and fc["params"] > 0 and fc["flops_per_round"] > rows[1]["flops_per_round"]
    assert 0 < fc["fraction_of_matmul"] and rows[3]["speedup_vmapped_vs_loop"] > 0


@pytest.mark.slow  # two compiled CNN programs (~30 s); FC against NumPy stays in the default run (test_scale.py)
def test_pair_loop_reference_equals_the_vmapped_round():
    """The loop reference of the benchmark computes the same round as Federated-Clustering (no momentum)."""
    task = benchmark_image_task(4, 2, "lenet5")
    algo = make_algorithm(
        "federated-clustering", task, learning_rate=0.1, batch_size=2, quantile=0.5, clustering_steps=3, mesh=None
    )
    params = jax.vmap(task.init_params)(jax.random.split(jax.random.PRNGKey(0), 4))
    from fedjax_clust.core.state import ClientParams

    state = algo.init(ClientParams(params), 4)
    key = jax.random.PRNGKey(5)
    new, _ = jax.jit(algo.round)(state, task.data, key)
    _, k_batch, _ = jax.random.split(key, 3)  # the round's own minibatch key (federated_clustering.rows_round)
    batch = sample_minibatch(task.data, 2, k_batch)
    with jax.default_matmul_precision("highest"):
        loop = pair_loop_round(task, params, batch, learning_rate=0.1, steps=3, quantile=0.5)
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(loop)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


@pytest.mark.slow
def test_cifar_script_smoke_on_tfds_mock_data(tmp_path):
    """Fig. 2.4 end to end at a tiny size: tfds' mock CIFAR-10 (no download), a small model."""
    tfds = pytest.importorskip("tensorflow_datasets")
    cifar = load_script("cifar")  # in this process: tfds' mock patches the loader here
    with tfds.testing.mock_data(num_examples=40):
        code = cifar.main(
            [
                "--out",
                str(tmp_path),
                "--figure",
                "2.4",
                "--model",
                "mlp",
                "--clients-per-cluster",
                "2",
                "--rounds",
                "2",
                "--eval-every",
                "1",
                "--batch-size",
                "4",
                "--methods",
                "local",
                "--quantiles",
                "0.5",
                "--local-steps",
                "1",
                "--no-progress",
            ]
        )
    assert code == 0
    report = json.load(open(tmp_path / "cifar.json"))
    assert set(report["methods"]) == {"local"}
    assert set(report["ablations"]) == {"quantile", "local_steps"}
    assert report["config"]["structure"] == "private-label" and report["config"]["dataset"] == "tfds:cifar10"
    assert (tmp_path / "methods.png").exists() and (tmp_path / "ablations.png").exists()


def test_the_probability_loss_is_minus_the_labels_softmax_probability():
    """loss="probability" (the Werner et al. authors' F.nll_loss of a softmax output) against float64 NumPy, and
    the cross-entropy beside it."""
    from fedjax_clust import make_task

    tasks = {
        loss: make_task("mnist-rotation", dataset="digits", model="mlp", hidden=4, clients_per_cluster=2, loss=loss)
        for loss in ("probability", "cross-entropy")
    }
    task = tasks["probability"]
    params = task.init_params(jax.random.PRNGKey(1))
    example = {"x": task.data["x"][0, 0], "y": task.data["y"][0, 0]}
    logits = np.asarray(task.logits(params, example["x"][None])[0], np.float64)
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    y = int(example["y"])
    assert float(task.example_loss(params, example)) == pytest.approx(-p[y], rel=1e-5)
    assert float(tasks["cross-entropy"].example_loss(params, example)) == pytest.approx(-np.log(p[y]), rel=1e-5)
    assert task.config["loss"] == "probability"
    with pytest.raises(ValueError, match="loss"):
        make_task("mnist-rotation", dataset="digits", model="mlp", hidden=4, clients_per_cluster=2, loss="hinge")
