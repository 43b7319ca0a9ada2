"""FedAvg with local epochs, side by side with FedJAX 0.0.17 (issue 65): the same clients, initial model and
batches, the models after rounds 1 and 3 compared, and the rounds timed.

    python experiments/fedavg_peers.py --setup --out experiments/results/fedavg-peers

Each case (:func:`peers.build_case`'s MNIST MLP: 784 -> 32 -> 10, 8 images per client from the offline pool) runs
in FedJAX's own virtual environment (``experiments/peers/run_fedjax_local.py``: ``fed_avg.federated_averaging``,
client SGD, ``ShuffleRepeatBatchHParams(batch_size=B, num_epochs=E, skip_shuffle=True)``, every client each round)
and here (``fedavg`` / ``fedavgm`` / ``fedadam`` with ``local_epochs=E``, ``batch_size=B``,
``local_shuffle=False``). The mapping: FedJAX's server optimiser steps along its mean delta x - y as a gradient,
ours along Delta = y - x, so its SGD (with momentum) at rate eta is our server SGD (FedAvgM) at eta, and its Adam
(optax's: bias-corrected, v from 0) with (eta, b1, b2, eps) is our fedadam with ``server_bias_correction=True``
and (server_learning_rate, server_momentum, server_beta2, server_tau) = (eta, b1, b2, eps); its mean is weighted
by examples, which equal sizes make uniform. B divides the 8 images, so FedJAX's stream of E repeated epochs cuts the
same batches as
our per-epoch batches. Writes ``fedavg_peers.json`` (the largest difference of every array relative to its largest
entry, per case and round; the rounds' median seconds of both).
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "peers"))

from peers import MARK, RUNNERS, build_case, python_of  # noqa: E402

ADAM = dict(server_learning_rate=0.01, server_momentum=0.9, server_beta2=0.999, server_tau=1e-3)
CASES = (  # name, algorithm, epochs, batch, server options, clients
    ("fedavg E=2 B=4", "fedavg", 2, 4, {}, 20),
    ("fedavgm E=2 B=4", "fedavgm", 2, 4, dict(server_momentum=0.9), 20),
    ("fedadam (FedJAX's Adam) E=2 B=4", "fedadam", 2, 4, dict(ADAM, server_bias_correction=True), 20),
    ("fedavg E=5 B=8 (timing)", "fedavg", 5, 8, {}, 1000),
)
ROUNDS = 3


def ours(folder: pathlib.Path, algorithm: str, epochs: int, batch: int, server: dict):
    """({round: [arrays]} after rounds 1 and 3, median seconds of rounds 2..) of our fedavg on the case."""
    import jax
    import jax.numpy as jnp
    from peer_common import load_case
    from run_ours import example_loss

    import fedjax_clust as fc

    case, x, y, arrays = load_case(folder)
    names = ("w1", "b1", "w2", "b2")
    params = {k: jnp.asarray(a) for k, a in zip(names, arrays)}
    task = fc.Task(
        name="peers-mnist",
        data={"x": jnp.asarray(x), "y": jnp.asarray(y)},
        example_loss=example_loss("mnist"),
        init_params=lambda key: params,
    )
    options = dict(learning_rate=case["lr"], local_epochs=epochs, batch_size=batch, local_shuffle=False, **server)
    algo = fc.make_algorithm(algorithm, task, **options)
    state = algo.start(params, task.num_clients, jax.random.PRNGKey(0))
    step = jax.jit(algo.round)
    saved, seconds = {}, []
    for r in range(1, ROUNDS + 1):
        tic = time.perf_counter()
        state, _ = step(state, task.data, jax.random.PRNGKey(r))
        jax.block_until_ready(state)
        seconds.append(time.perf_counter() - tic)
        saved[r] = [np.asarray(state.params.models[k][0]) for k in names]
    return saved, statistics.median(seconds[1:])


def theirs(python: str, folder: pathlib.Path, epochs: int, batch: int, server: dict, timeout: float):
    with tempfile.TemporaryDirectory() as out:
        command = [
            python,
            str(RUNNERS / "run_fedjax_local.py"),
            str(folder),
            out,
            "--epochs",
            str(epochs),
            "--batch",
            str(batch),
            "--server-momentum",
            str(server.get("server_momentum", 0.0)),
        ]
        if server.get("server_bias_correction"):
            command += [
                "--server-optimizer",
                "adam",
                "--server-lr",
                str(server["server_learning_rate"]),
                "--server-beta2",
                str(server["server_beta2"]),
                "--server-eps",
                str(server["server_tau"]),
            ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=RUNNERS)
        if done.returncode:
            raise SystemExit(f"FedJAX's runner failed:\n{done.stderr[-3000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith(MARK))
        result = json.loads(line[len(MARK) :])
        saved = {r: [np.load(os.path.join(out, f"round{r}.npz"))[f"arr_{i}"] for i in range(4)] for r in (1, ROUNDS)}
    return saved, statistics.median(result["round_seconds"][1:])


OUTPUTS = ("fedavg_peers.json", "config.toml")


def main(argv=None):
    from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args

    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/fedavg-peers")
    parser.add_argument("--setup", action="store_true", help="build FedJAX's virtual environment if missing")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/fedjax-clust-peers"))
    parser.add_argument(
        "--work",
        default=os.path.join(tempfile.gettempdir(), "fedjax-clust-fedavg-peers"),
        help="where the cases' arrays are written once (not the results)",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier fedavg_peers.json in --out")
    args = experiment_args(parser, argv, "fedavg_peers.py")
    try:
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    python = python_of("fedjax", pathlib.Path(args.venvs), args.setup)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, algorithm, epochs, batch, server, clients in CASES:
        folder = build_case(
            pathlib.Path(args.work) / f"mnist-{clients}-rounds{ROUNDS}", "mnist", clients, clients, ROUNDS
        )
        mine, my_seconds = ours(folder, algorithm, epochs, batch, server)
        other, their_seconds = theirs(python, folder, epochs, batch, server, args.timeout)
        differences = {
            r: max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12)) for a, b in zip(mine[r], other[r]))
            for r in (1, ROUNDS)
        }
        row = dict(
            case=name,
            algorithm=algorithm,
            clients=clients,
            epochs=epochs,
            batch=batch,
            server=server,
            local_steps=epochs * (8 // batch),
            relative_difference={f"round{r}": d for r, d in differences.items()},
            seconds_per_round={"fedjax-clust": my_seconds, "fedjax": their_seconds},
            speedup=their_seconds / my_seconds,
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    (out / "fedavg_peers.json").write_text(json.dumps({"rounds": ROUNDS, "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
