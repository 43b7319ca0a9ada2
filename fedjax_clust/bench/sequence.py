"""The char-LSTM's client-parallel gradient step (``bench --suite char-lstm``): time, counted FLOPs and the
achieved rate against a float32 matmul measured in the same run.

One step is what every Shakespeare round does per local step: N clients, each with its own model row, take the
gradient of their mean loss over B windows of L = 80 characters (:mod:`fedjax_clust.models.sequence`). Counted
FLOPs per window (multiply-adds x 2, backward = 2 x forward): 3 x 2 x L x [sum over layers (in + H) 4H + H V],
the embedding lookups and element-wise gate arithmetic left out. The LSTM's scan runs L dependent steps, each
a batched GEMM of N products [B, in + H] x [in + H, 4H], one per client's own weights: with B = 8 rows per
product the matmul units stay mostly idle whatever N (N adds products, not rows), so the rate stays a fraction
of a large matmul's (the committed run: experiments/results/char-lstm, in the real-data guide).
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.bench.rounds import matmul_gflops
from fedjax_clust.core.batching import client_loss
from fedjax_clust.cost.roofline import median_seconds
from fedjax_clust.data.text import VOCAB_SIZE
from fedjax_clust.models.sequence import make_sequence_model

__all__ = ["run_char_lstm_suite", "char_lstm_report_markdown", "lstm_window_flops"]


def lstm_window_flops(length: int, embed: int, hidden: int, layers: int, vocab: int) -> int:
    """Forward + backward FLOPs of one window (module docstring)."""
    inputs = [embed] + [hidden] * (layers - 1)
    forward = 2 * length * (sum((d + hidden) * 4 * hidden for d in inputs) + hidden * vocab)
    return 3 * forward


def run_char_lstm_suite(
    *,
    clients=(4, 16, 32),
    batch_size: int = 8,
    length: int = 80,
    hidden: int = 256,
    repeats: int = 5,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    say = progress or (lambda label: None)
    net = make_sequence_model("char-lstm", VOCAB_SIZE, hidden=hidden)

    def example_loss(params, example):
        logits = net.logits(params, example["x"][None])[0]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), example["y"][:, None], axis=-1))

    grad = jax.jit(jax.vmap(jax.grad(client_loss(example_loss))))
    say("reference matmul")
    gflops = matmul_gflops()
    per_window = lstm_window_flops(length, 8, hidden, 2, VOCAB_SIZE)
    rows = []
    rng = np.random.default_rng(0)
    for n in clients:
        say(f"char-lstm gradient step, {n} clients")
        params = jax.vmap(net.init)(jax.random.split(jax.random.PRNGKey(0), n))
        ids = rng.integers(4, VOCAB_SIZE, (n, batch_size, length + 1)).astype(np.int32)
        batch = {"x": jnp.asarray(ids[..., :-1]), "y": jnp.asarray(ids[..., 1:])}
        seconds = median_seconds(grad, params, batch, repeats=repeats)
        flops = n * batch_size * per_window
        rows.append(
            {
                "clients": n,
                "seconds": seconds,
                "windows": n * batch_size,
                "flops": flops,
                "achieved_gflops": flops / seconds / 1e9,
                "share_of_matmul": flops / seconds / 1e9 / gflops,
            }
        )
    return {
        "model": "char-lstm",
        "num_params": net.num_params(),
        "hidden": hidden,
        "batch_size": batch_size,
        "length": length,
        "flops_per_window": per_window,
        "matmul_gflops": gflops,
        "repeats": repeats,
        "device": jax.devices()[0].device_kind,
        "rows": rows,
    }


def char_lstm_report_markdown(report: dict) -> str:
    lines = [
        "# char-LSTM: one client-parallel gradient step",
        "",
        f"{report['model']} ({report['num_params']:,} parameters, LSTM width {report['hidden']}), B = "
        f"{report['batch_size']} windows of {report['length']} characters per client, "
        f"{report['flops_per_window'] / 1e6:.1f} MFLOP per window (forward + backward); median of "
        f"{report['repeats']} steps after a warm-up on {report['device']} (float32 matmul: "
        f"{report['matmul_gflops']:.0f} GFLOP/s in the same run).",
        "",
        "| clients | seconds | windows / s | GFLOP/s | share of the matmul rate |",
        "|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['clients']} | {row['seconds']:.4f} | {row['windows'] / row['seconds']:.0f} | "
            f"{row['achieved_gflops']:.1f} | {row['share_of_matmul']:.2f} |"
        )
    return "\n".join(lines) + "\n"
