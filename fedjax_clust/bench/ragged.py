"""Ragged clients against the padded layout and against an equal-sized population (``bench --suite ragged``).

A population of N clients with log-normal sizes (``lognormal:SIGMA`` of :mod:`fedjax_clust.data.partitioners`
over T pooled examples; sigma = 1.5 gives a largest client over 30 times the median) is stored three ways:

* ``padded``  -- every client padded to n_max: [N, n_max, ...] + mask (memory and a full pass N n_max);
* ``ragged``  -- :class:`~fedjax_clust.core.ragged_batch.RaggedBatch`: flat [T, ...], full passes by size
  bucket (at most ``bucket_ratio`` T example slots), minibatches drawn by Floyd's algorithm;
* ``equal``   -- the reference: N clients of T / N examples each (no padding at all), the same total.

Two kernels per layout, each one client-parallel step of the image MLP (one model row per client):

* ``full pass``: every client's gradient over all of its examples (``map_clients`` of the gradient);
* ``minibatch step``: draw B examples per client and take the gradient (``sample_minibatch`` +
  ``map_clients``).

For each: the example-gradients it computes (``counted``, padding included) over the real ones, the median
time of ``repeats`` calls after a warm-up call, and the ratio to the equal-sized population's time measured in
the same process. A float32 matmul's GFLOP/s is measured in the same run, and the full pass's achieved rate is
counted from the MLP's forward + backward FLOPs per example (6 x the multiply-adds of its two dense layers).
The minibatch step is also timed on populations of the same N and T and growing sigma (so growing n_max): its
ragged cost should stay flat while the padded draw's argsort grows with n_max.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.bench.rounds import matmul_gflops
from fedjax_clust.core.batching import client_loss, map_clients, sample_minibatch
from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO
from fedjax_clust.cost.roofline import median_seconds
from fedjax_clust.data.partitioners import parse_partition, partition_indices
from fedjax_clust.data.ragged import RaggedClients
from fedjax_clust.models import make_model

__all__ = ["ragged_population", "run_ragged_suite", "ragged_report_markdown"]


def ragged_population(num_clients: int, total: int, sigma: float, *, features: int, classes: int, seed: int = 0):
    """N clients of log-normal sizes over ``total`` random examples (x ~ N(0, 1) [side, side, 1] with side^2 =
    ``features``, y uniform)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, total).astype(np.int32)
    parts = partition_indices(parse_partition(f"lognormal:{sigma}"), labels, num_clients, rng)
    side = int(round(features**0.5))
    x = rng.standard_normal((total, side, side, 1)).astype(np.float32)
    return RaggedClients.from_indices({"x": x, "y": labels}, parts)


def _layouts(clients: RaggedClients, bucket_ratio: float):
    sizes = clients.sizes
    n = clients.num_examples // clients.num_clients
    equal = RaggedClients(
        {k: np.asarray(v)[: n * clients.num_clients] for k, v in clients.arrays.items()},
        np.arange(clients.num_clients + 1) * n,
        clients.client_ids,
    )
    padded = {k: jnp.asarray(v) for k, v in clients.to_padded().items()}
    return {
        "padded": (padded, clients.num_clients * int(sizes.max())),
        "ragged": (clients.to_batch(bucket_ratio), None),
        "equal": ({k: jnp.asarray(v) for k, v in equal.to_padded().items()}, n * clients.num_clients),
    }


def _example_bytes(clients: RaggedClients) -> int:
    return int(sum(np.asarray(v)[:1].nbytes for v in clients.arrays.values()))


def run_ragged_suite(
    *,
    num_clients: int = 1000,
    total: int = 40_000,
    sigma: float = 1.5,
    sigmas=(0.5, 1.0, 1.5, 2.0),
    batch_size: int = 32,
    hidden: int = 32,
    features: int = 64,
    classes: int = 10,
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
    repeats: int = 5,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """The measurements of the module docstring, as one JSON-ready dict."""
    say = progress or (lambda label: None)
    side = int(round(features**0.5))
    if side * side != features:
        raise ValueError(f"features must be a square (the MLP reads side x side images), got {features}")
    model = make_model("mlp", input_shape=(side, side, 1), num_classes=classes, hidden=hidden)
    loss = client_loss(lambda p, e: -jax.nn.log_softmax(model.logits(p, e["x"][None])[0])[e["y"]])
    grad = jax.grad(loss)
    params = jax.vmap(model.init)(jax.random.split(jax.random.PRNGKey(0), num_clients))
    flops_per_example = 6 * (features * hidden + hidden * classes)

    full_pass = jax.jit(lambda p, data: map_clients(grad, p, data))
    step = jax.jit(lambda p, data, key: map_clients(grad, p, sample_minibatch(data, batch_size, key)))

    say("reference matmul")
    gflops = matmul_gflops()
    clients = ragged_population(num_clients, total, sigma, features=features, classes=classes)
    sizes = clients.sizes
    report = {
        "population": {
            "clients": num_clients,
            "examples": clients.num_examples,
            "partition": f"lognormal:{sigma}",
            "n_max": int(sizes.max()),
            "median": float(np.median(sizes)),
            "max_over_median": float(sizes.max() / np.median(sizes)),
            "padding_factor": clients.padding_factor(),
        },
        "model": {
            "name": "mlp",
            "features": features,
            "hidden": hidden,
            "classes": classes,
            "flops_per_example_gradient": flops_per_example,
        },
        "batch_size": batch_size,
        "bucket_ratio": bucket_ratio,
        "repeats": repeats,
        "device": jax.devices()[0].device_kind,
        "matmul_gflops": gflops,
        "rows": [],
    }
    layouts = _layouts(clients, bucket_ratio)
    example_bytes = _example_bytes(clients)
    times = {}
    for name, (data, counted) in layouts.items():
        if counted is None:
            counted = data.counted_examples()
        say(f"full pass, {name}")
        seconds = median_seconds(full_pass, params, data, repeats=repeats)
        times[("full pass", name)] = seconds
        stored = (data.num_examples if name == "ragged" else counted) * example_bytes
        report["rows"].append(
            {
                "kernel": "full pass",
                "layout": name,
                "seconds": seconds,
                "counted_examples": counted,
                "counted_over_real": counted / clients.num_examples,
                "data_bytes": stored,
                "achieved_gflops": counted * flops_per_example / seconds / 1e9,
                "buckets": len(data.buckets) if name == "ragged" else 1,
            }
        )
    for name, (data, _) in layouts.items():
        say(f"minibatch step, {name}")
        seconds = median_seconds(step, params, data, jax.random.PRNGKey(1), repeats=repeats)
        times[("minibatch step", name)] = seconds
        report["rows"].append(
            {
                "kernel": "minibatch step",
                "layout": name,
                "seconds": seconds,
                "counted_examples": num_clients * batch_size,
            }
        )
    for row in report["rows"]:
        row["over_equal"] = row["seconds"] / times[(row["kernel"], "equal")]
    report["n_max_sweep"] = []
    for s in sigmas:
        population = ragged_population(num_clients, total, s, features=features, classes=classes, seed=1)
        say(f"minibatch step vs n_max, sigma {s}")
        layout = _layouts(population, bucket_ratio)
        entry = {"sigma": s, "n_max": int(population.sizes.max())}
        for name in ("padded", "ragged"):
            entry[f"{name}_seconds"] = median_seconds(
                step, params, layout[name][0], jax.random.PRNGKey(1), repeats=repeats
            )
        report["n_max_sweep"].append(entry)
    return report


def ragged_report_markdown(report: dict) -> str:
    """The report as Markdown tables (written beside report.json by the CLI)."""
    pop = report["population"]
    lines = [
        "# Ragged clients: full passes and minibatch steps",
        "",
        f"{pop['clients']} clients, {pop['examples']} examples, `{pop['partition']}` sizes: largest "
        f"{pop['n_max']} = {pop['max_over_median']:.1f} x the median ({pop['median']:g}); the padded layout "
        f"stores {pop['padding_factor']:.1f} x the real examples. Model: MLP {report['model']['features']}-"
        f"{report['model']['hidden']}-{report['model']['classes']}; minibatch B = {report['batch_size']}; "
        f"bucket ratio {report['bucket_ratio']}; median of {report['repeats']} calls after a warm-up on "
        f"{report['device']} (float32 matmul: {report['matmul_gflops']:.0f} GFLOP/s in the same run).",
        "",
        "| kernel | layout | seconds | x equal-sized | counted / real examples | data MB | GFLOP/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        counted = "" if "counted_over_real" not in row else f"{row['counted_over_real']:.2f}"
        megabytes = "" if "data_bytes" not in row else f"{row['data_bytes'] / 1e6:.1f}"
        rate = "" if "achieved_gflops" not in row else f"{row['achieved_gflops']:.1f}"
        lines.append(
            f"| {row['kernel']} | {row['layout']} | {row['seconds']:.4f} | {row['over_equal']:.2f} | {counted} | "
            f"{megabytes} | {rate} |"
        )
    lines += [
        "",
        "Minibatch step against the largest client (same N and T):",
        "",
        "| sigma | n_max | padded s | ragged s |",
        "|---|---|---|---|",
    ]
    for entry in report["n_max_sweep"]:
        lines.append(
            f"| {entry['sigma']} | {entry['n_max']} | {entry['padded_seconds']:.4f} | {entry['ragged_seconds']:.4f} |"
        )
    return "\n".join(lines) + "\n"
