"""Every bad input gets one line, exit status 2 and the argument's name (CLI), or a ValueError naming it
(Python API), before anything is compiled: one table per interface."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_clust import (
    cross_gradients,
    ditto,
    federated_clustering,
    kth_smallest_threshold,
    local,
    make_algorithm,
    make_attack,
    momentum_clustering,
    myopic_clustering,
    simulate,
    sweep,
    synthetic_regression,
    threshold_clustering,
)
from fedjax_clust.algorithms.federated_clustering import FCClustering, FCExecution, FCLocalSteps
from fedjax_clust.cli.commands import main
from fedjax_clust.run.driver_options import Checkpointing, Evaluation, Output

LOSS = synthetic_regression(num_clusters=2, clients_per_cluster=2).example_loss


def _fc(**groups):
    """Federated-Clustering on LOSS with the option groups ``groups``."""
    return federated_clustering(LOSS, learning_rate=0.1, **groups)


CLI_CASES = [  # (argv, word the one-line error must contain)
    (["run", "--algorithm", "fedsgd"], "--algorithm"),
    (["run", "--algorithm", "local", "--task", "imagenet"], "--task"),
    (["run", "--algorithm", "local", "--lr", "0"], "learning_rate"),
    (["run", "--algorithm", "federated-clustering", "--radius", "1", "--quantile", "0.5"], "exactly one"),
    (["run", "--algorithm", "federated-clustering", "--memory-budget", "inf"], "--memory-budget must"),
    (["run", "--algorithm", "local", "--memory-budget", "inf"], "--memory-budget"),  # an FC-only option
    (["run", "--algorithm", "federated-clustering", "--memory-budget", "nan"], "--memory-budget must"),
    (["run", "--algorithm", "federated-clustering", "--memory-budget", "0.5"], "--memory-budget must"),
    (["run", "--algorithm", "federated-clustering", "--memory-budget", "1"], "--memory-budget=1"),
    (["run", "--algorithm", "local", "--seed", "99999999999999999999"], "--seed"),
    (["run", "--algorithm", "local", "--seed", "-1"], "--seed"),
    (["compare", "--algorithms", ""], "--algorithms"),
    (["compare", "--algorithms", "local,fedsgd"], "fedsgd"),
    (["run", "--algorithm", "local", "--clients-per-cluster", "100000000"], "memory"),
    (["run", "--algorithm", "ifca-1", "--num-clusters", "0"], "--num-clusters must"),
    (["run", "--algorithm", "ifca-1", "--num-clusters", "100"], "--num-clusters=100 exceeds"),
    (["run", "--algorithm", "local", "--batch-size", "100"], "batch_size"),
    (["run", "--algorithm", "momentum-clustering", "--clustering-steps", "-1"], "--clustering-steps must"),
    (["run", "--algorithm", "local", "--radius", "theory"], "--radius"),
    (["run", "--algorithm", "ifca-1", "--momentum", "0.5"], "--momentum"),
    (["run", "--algorithm", "local", "--task", "counterexample-ifca", "--dim", "3"], "--dim"),
    (["run", "--algorithm", "cfl", "--init", "oracle"], "--init"),
    (["run", "--algorithm", "local", "--lr", "1e300"], "learning_rate"),
    (["run", "--algorithm", "local", "--lr", "1e-300"], "learning_rate"),
    (["run", "--algorithm", "local", "--lr", "nan"], "learning_rate"),
    (["run", "--algorithm", "local", "--lr", "abc"], "--lr"),
    (["run", "--algorithm", "local", "--rounds", "0"], "rounds"),
    (["run", "--algorithm", "local", "--eval-every", "0"], "eval-every"),
    (["run", "--algorithm", "local", "--checkpoint-every", "0"], "checkpoint-every"),
    (["run", "--algorithm", "federated-clustering", "--quantile", "1.5"], "quantile"),
    (["run", "--algorithm", "federated-clustering", "--radius", "-2"], "radius"),
    (["run", "--algorithm", "federated-clustering", "--subgroups", "99"], "subgroups"),
    (["run", "--algorithm", "federated-clustering", "--local-steps-form", "magic"], "--local-steps-form"),
    (["run", "--algorithm", "local", "--momentum-form", "nesterov"], "--momentum-form"),
    (["run", "--algorithm", "local", "--matmul-precision", "fp8"], "--matmul-precision"),
    (["run", "--algorithm", "local", "--on-nonfinite", "ignore"], "--on-nonfinite"),
    (["run", "--algorithm", "knn-per", "--knn-k", "0", "--task", "classification"], "k"),
    (["run", "--algorithm", "ditto", "--ditto-lambda", "inf"], "--ditto-lambda must"),
    (["run", "--algorithm", "cfl", "--eps1", "0"], "eps1"),
    (["run", "--algorithm", "local"], "--out"),  # required, given below unless the case is about it
    (["--cpu-devices", "0", "run", "--algorithm", "local"], "--cpu-devices"),
    (["bench", "--clients", ""], "--clients"),
    (["bench", "--clients", "2"], "--clients"),
    (["bench", "--input-dim", "5"], "--input-dim"),
    (["bench", "--model", "mlp", "--clients", "8,16"], "one client count"),
    (["profile", "--algorithms", ""], "--algorithms"),
    (["profile", "--clients", "2"], "--clients"),
    # integers past int32 (a count in the compiled program), floats past float32, on every kind of option
    (
        ["run", "--algorithm", "federated-clustering", "--clustering-steps", "99999999999999999999"],
        "--clustering-steps must be an integer <= 2147483647",
    ),
    (["run", "--algorithm", "fedsoft", "--local-steps", "99999999999999999999"], "--local-steps must"),
    (["run", "--algorithm", "fedsoft", "--estimation-interval", "99999999999999999999"], "--estimation-interval"),
    (["run", "--algorithm", "srfca", "--threshold", "1", "--min-size", "99999999999999999999"], "--min-size"),
    (["run", "--algorithm", "srfca", "--threshold", "1", "--refine-steps", "99999999999999999999"], "--refine-steps"),
    (
        ["run", "--algorithm", "srfca", "--threshold", "1", "--refine-iterations", "99999999999999999999"],
        "--refine-iterations",
    ),
    (
        ["run", "--algorithm", "three-stage", "--stage3", "fedavg", "--fedavg-steps", "99999999999999999999"],
        "--fedavg-steps",
    ),
    (["run", "--algorithm", "local", "--rounds", "99999999999999999999"], "--rounds"),
    (["--cpu-devices", "99999999999", "run", "--algorithm", "local"], "--cpu-devices"),
    (["run", "--algorithm", "local", "--task", "mnist-rotation", "--model", "mlp", "--hidden", "0"], "--hidden"),
    (["run", "--algorithm", "local", "--task", "mnist-rotation", "--model", "mlp", "--hidden", "-1"], "--hidden"),
    (
        ["run", "--algorithm", "local", "--task", "mnist-rotation", "--model", "mlp", "--hidden", "100000000"],
        "--hidden",
    ),
    (["run", "--algorithm", "local", "--task", "mnist-rotation", "--size-sigma", "1e300"], "--size-sigma"),
    (["run", "--algorithm", "local", "--optimum-scale", "1e300"], "--optimum-scale"),
    (["run", "--algorithm", "ditto", "--ditto-lambda", "1e300"], "--ditto-lambda"),
    (["run", "--algorithm", "fedsoft", "--fedsoft-lambda", "1e300"], "--fedsoft-lambda"),
    (["run", "--algorithm", "knn-per", "--task", "classification", "--knn-lambda", "1e300"], "--knn-lambda"),
    # options that would do nothing, contradictory switches, malformed lists
    (["run", "--algorithm", "federated-clustering", "--local-steps-form", "sgd"], "--local-steps"),
    (["run", "--algorithm", "srfca", "--threshold", "1", "--local-steps", "3"], "srfca's is --one-shot-rounds"),
    (["run", "--algorithm", "local", "--init-noise", "0.3"], "--init oracle"),
    (["run", "--algorithm", "local", "--task", "mnist-rotation", "--hidden", "10"], "--model mlp"),
    (["run", "--algorithm", "three-stage", "--fedavg-steps", "3"], "--stage3 fedavg"),
    (["run", "--algorithm", "local", "--resume", "--overwrite"], "--resume"),
    (["sweep", "--algorithm", "local", "--lr", "0.01,,0.02"], "--lr"),
    (["bench", "--model", "mlp", "--clients", "8", "--input-dim", "0"], "--input-dim"),
    (["bench", "--model", "mlp", "--clients", "8", "--classes", "0"], "--classes"),
    (["bench", "--model", "study", "--clients", "8"], "--clients does not apply to --model study"),
    (["bench", "--model", "study", "--rounds", "0"], "--rounds"),
    (["bench", "--model", "linear", "--rounds", "5"], "--rounds applies to --model pd-protocol and study"),
    (["bench", "--model", "track-clusters", "--clients", "2"], "client counts >= 4"),
    (["run", "--config", ".", "--algorithm", "local"], "a folder"),
    # a bench / profile flag named like a task option keeps its own name in errors (it read --clients)
    (["profile", "--tradeoff-clients=-8", "--out", "prof"], "--tradeoff-clients must be a positive multiple of 4"),
    (["profile", "--tradeoff-subgroups", "0", "--out", "prof"], "--tradeoff-subgroups must be integers in [1, 512]"),
    (["run", "--algorithm", "local", "--clients", "100"], "--clients does not apply to task synthetic"),
    (["profile", "--clients", "8,16", "--subgroups", "16", "--out", "prof"], "subgroups"),  # before the sweep
]


@pytest.mark.parametrize("argv, word", CLI_CASES, ids=[" ".join(c[0])[:60] for c in CLI_CASES])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, argv, word, capsys):
    if argv[0] in ("run", "compare", "sweep") or argv[:1] == ["--cpu-devices"]:
        small = {"--out": str(tmp_path / "out"), "--clients-per-cluster": "2", "--rounds": "2"}
        if word == "--out":
            del small["--out"]
        if "--task" in argv:  # the constructed tasks take no size options
            del small["--clients-per-cluster"]
        argv = argv + [x for flag, value in small.items() if flag not in argv for x in (flag, value)]
        argv = argv + ["--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error:") and word in err[0], err[0]
    assert not (tmp_path / "out" / "summary.json").exists()  # refused before running


def test_out_dir_errors(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    base = ["run", "--algorithm", "local", "--clients-per-cluster", "2", "--rounds", "2", "--no-progress", "--out"]
    for out, word in [(a_file, "existing file"), (a_file / "sub", "cannot be created")]:
        assert main(base + [str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and word in err[0] and "out_dir" in err[0]


PYTHON_CASES = [  # (callable, word the ValueError must contain)
    (lambda: kth_smallest_threshold(jnp.ones(5), 0), "k must"),
    (lambda: kth_smallest_threshold(jnp.ones(5), 6), "k must"),
    (lambda: myopic_clustering(LOSS, 2, learning_rate=0.1, kmeans_steps=-1), "kmeans_steps"),
    (lambda: momentum_clustering(LOSS, 2, learning_rate=0.1, quantile=0.2, clustering_steps=-3), "clustering_steps"),
    (lambda: ditto(LOSS, learning_rate=0.1, lam=math.inf), "lam"),
    (lambda: ditto(LOSS, learning_rate=0.1, lam=float("nan")), "lam"),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=1, quantile=[0.1, 0.2]), "quantile"),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=1, quantile="0.5"), "quantile"),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=1, radius="far"), "radius"),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=1, radius=[[1.0]]), "radius"),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=1.5, radius=1.0), "steps"),
    (lambda: local(LOSS, 0, learning_rate=0.1), "num_clients"),
    (lambda: local(LOSS, 4, learning_rate=1e300), "learning_rate"),
    (lambda: local(LOSS, 4, learning_rate=True), "learning_rate"),
    (lambda: local(LOSS, 4, learning_rate=0.1, momentum=1.0), "momentum"),
    (lambda: local(LOSS, 4, learning_rate=0.1, momentum_form="nesterov"), "momentum_form"),
    (
        lambda: _fc(execution=FCExecution(memory_budget=math.inf)),
        "memory_budget",
    ),
    (lambda: _fc(execution=FCExecution(memory_budget=0.5)), "memory_budget"),
    (
        lambda: _fc(local=FCLocalSteps(local_steps_form="x")),
        "local_steps_form",
    ),
    (lambda: _fc(execution=FCExecution(chunk_size=2.5)), "chunk_size"),
    (lambda: synthetic_regression(seed=2**70), "seed"),
    (lambda: synthetic_regression(optimum_scale=math.inf), "optimum_scale"),
    (lambda: synthetic_regression(clients_per_cluster=10**9), "memory"),
    (
        lambda: make_algorithm(
            "local", synthetic_regression(clients_per_cluster=2), learning_rate=0.1, matmul_precision="fp8"
        ),
        "matmul_precision",
    ),
    # never a TypeError: unknown or missing options of any algorithm, bad arrays and functions of primitives
    (
        lambda: make_algorithm("ifca-1", synthetic_regression(clients_per_cluster=2), learning_rate=0.01, quantile=0.2),
        "takes no option 'quantile'",
    ),
    (lambda: make_algorithm("local", synthetic_regression(clients_per_cluster=2), lr=0.01), "takes no option 'lr'"),
    # the options that left local_steps in 0.3.0 answer the old name with the new one
    (
        lambda: make_algorithm(
            "srfca", synthetic_regression(clients_per_cluster=2), learning_rate=0.1, threshold=1.0, local_steps=3
        ),
        "renamed 'one_shot_rounds'",
    ),
    (
        lambda: make_algorithm(
            "three-stage", synthetic_regression(clients_per_cluster=2), learning_rate=0.1, local_steps=3
        ),
        "renamed 'erm_rounds'",
    ),
    (
        lambda: make_algorithm(
            "hypcluster", synthetic_regression(clients_per_cluster=2), learning_rate=0.1, local_steps=3
        ),
        "renamed 'cluster_steps'",
    ),
    (lambda: make_algorithm("local", synthetic_regression(clients_per_cluster=2)), "needs learning_rate"),
    (
        lambda: make_algorithm("srfca", synthetic_regression(clients_per_cluster=2), learning_rate=0.1),
        "needs threshold",
    ),
    (
        lambda: sweep(
            "local", synthetic_regression(clients_per_cluster=2), grid={}, rounds=2, output=Output(progress=False)
        ),
        "needs learning_rate",
    ),
    (lambda: threshold_clustering(np.zeros((4, 2)), np.zeros((1, 2)), steps=10**30, quantile=0.5), "steps"),
    (lambda: threshold_clustering("abc", np.zeros((1, 2)), steps=2, quantile=0.5), "points"),
    (lambda: cross_gradients("not a function", jnp.zeros((4, 10)), {"x": jnp.zeros((4, 3, 10))}), "loss_fn"),
    (
        lambda: cross_gradients(lambda p, b: jnp.mean(b["x"] @ p), jnp.zeros((4, 7)), {"x": jnp.zeros((4, 3, 10))}),
        "loss_fn\\(params\\[0\\], data\\[0\\]\\) fails",
    ),
    # an empty model or client axis (it raised IndexError), and one model lacking the model axis (it returned a
    # result: params[0] held scalars the loss broadcast)
    (
        lambda: cross_gradients(lambda p, b: jnp.mean(b["x"] @ p), jnp.zeros((0, 10)), {"x": jnp.zeros((4, 3, 10))}),
        "params must hold at least one row along its leading axis N_models, got 0",
    ),
    (
        lambda: cross_gradients(lambda p, b: jnp.mean(b["x"] @ p), jnp.zeros((4, 10)), {"x": jnp.zeros((0, 3, 10))}),
        "data must hold at least one row along its leading axis N_clients, got 0",
    ),
    (
        lambda: cross_gradients(lambda p, b: jnp.mean(b["x"] * p), jnp.zeros(10), {"x": jnp.zeros((4, 3, 10))}),
        "params looks like one model without the leading N_models axis",
    ),
    (lambda: make_attack("large-gradient", scale=float("nan")), "scale"),
    (lambda: make_attack("gaussian", sigma=-1.0), "sigma"),
    (lambda: synthetic_regression(optimum_scale=1e300), "optimum_scale"),
]


@pytest.mark.parametrize("call, word", PYTHON_CASES, ids=range(len(PYTHON_CASES)))
def test_python_bad_input_raises_value_error(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_simulate_arguments():
    task = synthetic_regression(num_clusters=2, clients_per_cluster=2)
    algo = make_algorithm("local", task, learning_rate=0.1)
    for kwargs, word in [
        (dict(seed=2**70), "seed"),
        (dict(seed=-1), "seed"),
        (dict(rounds=0), "rounds"),
        (dict(evaluation=Evaluation(eval_every=0)), "eval_every"),
        (dict(evaluation=Evaluation(on_nonfinite="ignore")), "on_nonfinite"),
        (dict(init="zeros"), "init"),
        (dict(checkpointing=Checkpointing(checkpoint_every=2)), "checkpoint_dir"),
    ]:
        with pytest.raises(ValueError, match=word):
            simulate(algo, task, **{"rounds": 2, "output": Output(progress=False), **kwargs})
    with pytest.raises(ValueError, match="num_clusters=5 exceeds"):
        simulate(
            make_algorithm("ifca-1", task, learning_rate=0.1, num_clusters=5),
            task,
            rounds=1,
            output=Output(progress=False),
        )
    with pytest.raises(ValueError, match="batch_size=10 exceeds the 9 samples"):
        simulate(local(LOSS, 4, learning_rate=0.1, batch_size=10), task, rounds=1, output=Output(progress=False))


def test_numpy_and_zero_d_values_are_accepted():
    algo = federated_clustering(
        LOSS,
        learning_rate=np.float32(0.1),
        clustering=FCClustering(quantile=np.float64(0.2), subgroups=np.int32(1)),
        execution=FCExecution(memory_budget=np.int64(10**9), chunk_size=np.int64(2)),
    )
    assert algo.hparams["memory_budget"] == 10**9
    threshold_clustering(np.ones((4, 2)), np.zeros((1, 2)), steps=np.int64(2), quantile=jnp.float32(0.5))
    assert (
        make_algorithm(
            "federated-clustering",
            synthetic_regression(num_clusters=2, clients_per_cluster=2),
            learning_rate=0.1,
            quantile=0.2,
            memory_budget=2.0**30,
        ).hparams["memory_budget"]
        == 2**30
    )
