"""Flower's server optimisers on given client models (its own virtual environment, flwr 1.42.0): for each
strategy of ``strategies.json`` (``flwr.server.strategy``'s FedAvg, FedAvgM, FedProx, FedAdagrad, FedAdam or
FedYogi with the keyword arguments given), every round's ``aggregate_fit`` on the client models and example counts
of ``case.npz``, starting from its initial model; saves the model after each round. The client models are
given, not trained: this checks the server's arithmetic only.

    python run_flower_server.py FOLDER OUT

``case.npz``: ``x0_<j>`` the initial arrays, ``round<r>_client<i>_<j>`` client i's arrays after its local
training in round r, ``examples`` [rounds, clients]. Writes ``OUT/<strategy>.npz`` with ``round<r>_<j>``."""

import importlib.metadata as metadata
import json
import sys
import warnings

import numpy as np

warnings.simplefilter("ignore")  # the legacy strategies' deprecation notices
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server import strategy as strategies  # noqa: E402


def main():
    folder, out = sys.argv[1], sys.argv[2]
    case = np.load(f"{folder}/case.npz")
    with open(f"{folder}/strategies.json") as f:
        wanted = json.load(f)
    examples = case["examples"]
    rounds, clients = examples.shape
    arrays = len([k for k in case.files if k.startswith("x0_")])
    x0 = [case[f"x0_{j}"] for j in range(arrays)]
    for name, (cls, options) in wanted.items():
        strategy = getattr(strategies, cls)(initial_parameters=ndarrays_to_parameters(x0), **options)
        saved = {}
        for r in range(1, rounds + 1):
            results = [
                (
                    None,
                    FitRes(
                        Status(Code.OK, ""),
                        ndarrays_to_parameters([case[f"round{r}_client{i}_{j}"] for j in range(arrays)]),
                        int(examples[r - 1, i]),
                        {},
                    ),
                )
                for i in range(clients)
            ]
            parameters, _ = strategy.aggregate_fit(r, results, [])
            for j, a in enumerate(parameters_to_ndarrays(parameters)):
                saved[f"round{r}_{j}"] = a
        np.savez(f"{out}/{name}.npz", **saved)
    print("PEER-RESULT " + json.dumps({"versions": {p: metadata.version(p) for p in ("flwr", "numpy")}}))


if __name__ == "__main__":
    main()
