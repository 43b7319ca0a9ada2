"""Our server optimisers against Flower 1.42's on the same client models (issue 65): FedAvg, FedProx's server,
FedAvgM, FedAdagrad, FedYogi and FedAdam, float64 on both sides, the models after each round compared.

    python experiments/flower_server_math.py --setup --out experiments/results/flower-server

Six clients with unequal example counts send given models (a 20 x 5 matrix and a bias; seeded random walks) for
three rounds; Flower's strategies (``flwr.server.strategy``, run in Flower's own virtual environment by
``experiments/peers/run_flower_server.py``) aggregate them with ``aggregate_fit``, and here
:func:`~fedjax_clust.algorithms.fedavg.make_server_optimizer` steps along the example-weighted mean delta (Flower
weights by examples: our ``weighting="examples"``). The mapping, where one exists:

* FedAvg, FedProx (Flower's FedProx server is FedAvg: mu lives in the clients' training): ``sgd`` at eta = 1;
* FedAvgM(server_learning_rate, server_momentum): ``momentum`` with the same eta and beta;
* FedAdagrad(eta, tau): ``adagrad`` with beta_1 = 0 (Flower fixes it) and v_{-1} = 0 (``initial_v``);
* FedYogi(eta, beta_1, beta_2, tau): ``yogi`` with v_{-1} = 0;
* FedAdam(eta, beta_1, beta_2, tau): no option of ours: Flower scales eta at its round t by
  sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)) with v_{-1} = 0, so the mapped step is ``adam`` with v_{-1} = 0 and
  that eta_t (a new optimiser each round over the same m, v), which shows the formula is what we read it as.

Each row also gives the difference to our fedadagrad / fedyogi / fedadam as registered (v_{-1} = tau^2; FedAdam
without bias correction, and with ``server_bias_correction``). Writes ``flower_server.json``.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from peers import MARK, RUNNERS, python_of  # noqa: E402

ROUNDS, CLIENTS = 3, 6
ADAPTIVE = dict(beta_1=0.9, beta_2=0.99, tau=1e-3)
STRATEGIES = {  # name -> (Flower class, its options)
    "FedAvg": ("FedAvg", {}),
    "FedProx": ("FedProx", dict(proximal_mu=0.01)),
    "FedAvgM": ("FedAvgM", dict(server_learning_rate=0.7, server_momentum=0.9)),
    "FedAdagrad": ("FedAdagrad", dict(eta=0.1, tau=1e-3)),
    "FedYogi": ("FedYogi", dict(eta=0.01, **ADAPTIVE)),
    "FedAdam": ("FedAdam", dict(eta=0.01, **ADAPTIVE)),
}


def write_case(folder: pathlib.Path, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x0 = [rng.normal(size=(20, 5)), rng.normal(size=5)]
    arrays = {f"x0_{j}": a for j, a in enumerate(x0)}
    clients = {}
    for r in range(1, ROUNDS + 1):
        for i in range(CLIENTS):
            scale = 10.0 ** rng.uniform(-3, -1)  # deltas over two orders of magnitude
            for j, a in enumerate(x0):
                clients[f"round{r}_client{i}_{j}"] = a + scale * rng.normal(size=a.shape)
    examples = rng.integers(3, 50, size=(ROUNDS, CLIENTS))
    np.savez(folder / "case.npz", examples=examples, **arrays, **clients)
    (folder / "strategies.json").write_text(json.dumps(STRATEGIES))
    return dict(x0=x0, clients=clients, examples=examples)


def ours(case: dict, steps) -> dict:
    """{round: [arrays]} of our server stepping along the example-weighted mean delta; ``steps(t)`` -> the
    ServerOptimizer of round t (1-based)."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        x = [jnp.asarray(a, jnp.float64) for a in case["x0"]]
        state = steps(1).init(x)
        saved = {}
        for r in range(1, ROUNDS + 1):
            n = case["examples"][r - 1].astype(np.float64)
            delta = [
                sum(n[i] * (case["clients"][f"round{r}_client{i}_{j}"] - np.asarray(x[j])) for i in range(CLIENTS))
                / n.sum()
                for j in range(len(x))
            ]
            x, state = steps(r).update([jnp.asarray(d) for d in delta], state, x)
            saved[r] = [np.asarray(a) for a in x]
    return saved


def mappings():
    """name -> {label: steps(t)}: the mapped step first, then ours as registered."""
    from fedjax_clust.algorithms.fedavg import make_server_optimizer as make

    b1, b2, tau = ADAPTIVE["beta_1"], ADAPTIVE["beta_2"], ADAPTIVE["tau"]

    def fixed(*args, **kw):
        opt = make(*args, **kw)
        return lambda t: opt

    def flower_adam(t):
        return make("adam", 0.01 * np.sqrt(1 - b2 ** (t + 1)) / (1 - b1 ** (t + 1)), b1, b2, tau, initial_v=0.0)

    return {
        "FedAvg": {"sgd, eta 1": fixed("sgd", 1.0)},
        "FedProx": {"sgd, eta 1": fixed("sgd", 1.0)},
        "FedAvgM": {"momentum, eta 0.7, beta 0.9": fixed("momentum", 0.7, 0.9)},
        "FedAdagrad": {
            "adagrad, beta_1 0, v from 0": fixed("adagrad", 0.1, 0.0, b2, tau, initial_v=0.0),
            "fedadagrad as registered (v from tau^2), beta_1 0": fixed("adagrad", 0.1, 0.0, b2, tau),
        },
        "FedYogi": {
            "yogi, v from 0": fixed("yogi", 0.01, b1, b2, tau, initial_v=0.0),
            "fedyogi as registered (v from tau^2)": fixed("yogi", 0.01, b1, b2, tau),
        },
        "FedAdam": {
            "adam, v from 0, eta_t = eta sqrt(1 - b2^(t+1)) / (1 - b1^(t+1))": flower_adam,
            "fedadam as registered (Algorithm 2)": fixed("adam", 0.01, b1, b2, tau),
            "fedadam, server_bias_correction (Kingma and Ba, optax)": fixed(
                "adam", 0.01, b1, b2, tau, bias_correction=True
            ),
        },
    }


def relative(a: list, b: list) -> float:
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b))


OUTPUTS = ("flower_server.json", "config.toml")


def main(argv=None):
    from fedjax_clust.cli.config_file import OptionParser, claim_experiment, experiment_args

    parser = OptionParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/flower-server")
    parser.add_argument("--setup", action="store_true", help="build Flower's virtual environment if missing")
    parser.add_argument("--venvs", default=os.path.expanduser("~/.cache/fedjax-clust-peers"))
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier flower_server.json in --out")
    args = experiment_args(parser, argv, "flower_server_math.py")
    try:
        claim_experiment(args, OUTPUTS)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    python = python_of("flower", pathlib.Path(args.venvs), args.setup)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        folder = pathlib.Path(work)
        case = write_case(folder)
        done = subprocess.run(
            [python, str(RUNNERS / "run_flower_server.py"), work, work],
            capture_output=True,
            text=True,
            timeout=args.timeout,
            cwd=RUNNERS,
        )
        if done.returncode:
            raise SystemExit(f"Flower's runner failed:\n{done.stderr[-3000:]}")
        versions = json.loads(next(x for x in done.stdout.splitlines() if x.startswith(MARK))[len(MARK) :])["versions"]
        theirs = {name: np.load(folder / f"{name}.npz") for name in STRATEGIES}
        rows = []
        for name, forms in mappings().items():
            flower = {r: [theirs[name][f"round{r}_{j}"] for j in range(2)] for r in range(1, ROUNDS + 1)}
            for k, (label, steps) in enumerate(forms.items()):
                mine = ours(case, steps)
                row = dict(
                    strategy=name,
                    flower_options=STRATEGIES[name][1],
                    ours=label,
                    mapped=k == 0,
                    relative_difference={f"round{r}": relative(mine[r], flower[r]) for r in (1, ROUNDS)},
                )
                print(json.dumps(row), flush=True)
                rows.append(row)
    (out / "flower_server.json").write_text(
        json.dumps(
            {"rounds": ROUNDS, "clients": CLIENTS, "dtype": "float64", "versions": versions, "rows": rows}, indent=1
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
