"""fedjax-clust's runner: the registry's ``global`` (FedAvg with one local step: FedSGD), momentum 0, on a Task
built from the case's arrays with a JAX example loss, run by ``simulate`` as a user runs it."""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from peer_common import START, load_case, report, save_round1

import fedjax_clust
from fedjax_clust.algorithms import make_algorithm
from fedjax_clust.core.model_table import client_models
from fedjax_clust.parallel.compile_cache import cache_root
from fedjax_clust.run.driver_options import Evaluation, Output
from fedjax_clust.run.simulate import simulate
from fedjax_clust.tasks.base import Task
from fedjax_clust_program import use_compile_cache

IMPORTED = time.perf_counter()
# peers.py --compile-cache DIR: the one call a Python user makes to keep compiled programs between runs
CACHE = cache_root(environ=os.environ) if os.environ.get("FEDJAX_CLUST_COMPILE_CACHE") else None
if CACHE is not None:
    use_compile_cache(CACHE)


def example_loss(task):
    if task == "synthetic":
        return lambda p, e: 0.5 * jnp.square(jnp.dot(e["x"], p["w"]) - e["y"])

    def loss(p, e):
        h = jax.nn.relu(e["x"] @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return jax.nn.logsumexp(logits) - logits[e["y"]]

    return loss


def main(folder, out):
    tic = time.perf_counter()
    case, x, y, arrays = load_case(folder)
    names = ("w",) if case["task"] == "synthetic" else ("w1", "b1", "w2", "b2")
    params = {k: jnp.asarray(a) for k, a in zip(names, arrays)}
    task = Task(
        name=f"peers-{case['task']}",
        data={"x": jnp.asarray(x), "y": jnp.asarray(y)},
        example_loss=example_loss(case["task"]),
        init_params=lambda key: params,
    )
    options = dict(learning_rate=case["lr"], momentum=0.0)
    if case["cohort"] < case["clients"]:
        options["participation"] = case["cohort"]
    data = time.perf_counter()
    algo = make_algorithm("global", task, **options)
    ready = time.perf_counter()
    result = simulate(
        algo,
        task,
        rounds=case["rounds"],
        evaluation=Evaluation(eval_every=case["rounds"]),
        output=Output(progress=False),
    )
    s = result.summary
    state = algo.init(params, task.num_clients)  # round 1 again, after the timed run, for the agreement check
    state, _ = jax.jit(algo.round)(state, task.data, jax.random.PRNGKey(0))
    first = jax.tree.map(lambda leaf: np.asarray(leaf)[0], client_models(state.params))  # client 0's model
    save_round1(out, [first[k] for k in names])
    rest = [s["seconds_per_round"]] * (case["rounds"] - 1)
    report(
        "fedjax-clust",
        case,
        [s["first_round_seconds"]] + rest,
        interface="fedjax_clust.simulate (the registry's 'global', fused rounds; the rounds after the first "
        "as the run's mean)",
        resources=f"one process, JAX on {jax.devices()[0].platform} ({jax.device_count()} device(s))",
        versions={"fedjax-clust": fedjax_clust.__version__, "jax": jax.__version__},
        startup_seconds=ready - START,
        # where the time before the first round went: imports, the case's data, building the algorithm,
        # then simulate's own set-up and its compilation (part of the first round and the set-up)
        startup_parts={
            "imports": IMPORTED - START,
            "data": data - tic,
            "build": ready - data,
            "simulate_setup": s["setup_seconds"],
            "compile": s["compile_seconds"],
            "compiled_programs": s["compiled_programs"],
        },
        compile_cache=CACHE,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
