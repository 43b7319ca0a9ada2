"""Federated splits: pooled examples -> K clusters x n_i clients, each with its own train and test examples.

The split follows Werner et al. §4.2 (after Ghosh et al. 2020): the examples are shuffled and divided into
K clusters of equal size (or, under ``label-groups``, routed to the cluster owning their class); each
cluster is divided into ``clients_per_cluster`` clients; each client's examples are divided into its training
and its held-out test examples (``test_fraction``).

Uneven clients (``size_sigma`` > 0): client sizes inside a cluster are proportional to log-normal weights
exp(sigma z), z ~ N(0, 1) — sigma = 0 is the equal split of the paper, sigma = 1 gives sizes spread over about
an order of magnitude, like the heavy tails of real federated data. Every client keeps at least
``MIN_EXAMPLES`` examples. Clients are then stored padded to the largest one with a boolean mask
(:func:`pad_clients`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["split_sizes", "pad_clients", "split_train_test", "holdout", "MIN_EXAMPLES"]

MIN_EXAMPLES = 2  # one training and one test example


def split_sizes(total: int, parts: int, sigma: float, rng: np.random.Generator, minimum: int = MIN_EXAMPLES):
    """``parts`` sizes summing to ``total``, each >= ``minimum``, proportional to exp(sigma z) (see above)."""
    if total < parts * minimum:
        raise ValueError(
            f"{total} examples cannot give {parts} clients {minimum} examples each; use fewer clients or more data"
        )
    weights = np.exp(sigma * rng.standard_normal(parts)) if sigma > 0 else np.ones(parts)
    spare = total - parts * minimum
    sizes = np.floor(weights / weights.sum() * spare).astype(np.int64)
    remainder = spare - int(sizes.sum())
    order = np.argsort(-(weights / weights.sum() * spare - sizes), kind="stable")
    sizes[order[:remainder]] += 1  # largest fractional parts first: sums exactly to total
    return sizes + minimum


def split_train_test(size: int, test_fraction: float):
    """(train, test) counts of one client: round(test_fraction * size) test examples, at least one of each."""
    test = int(round(test_fraction * size))
    test = min(max(test, 1), size - 1)
    return size - test, test


def pad_clients(clients: Sequence[dict]) -> dict:
    """Stack per-client example dicts (arrays with a leading example axis of any length) into leaves
    [N, n_max, ...], zero-padded, with ``"mask"`` [N, n_max] True on the real examples."""
    if not clients:
        raise ValueError("no clients to stack")
    keys = sorted(clients[0])
    if "mask" in keys:
        raise ValueError("client data may not have its own 'mask' entry (the padding mask is added here)")
    sizes = [len(c[keys[0]]) for c in clients]
    n_max = max(sizes)
    out = {}
    for key in keys:
        first = np.asarray(clients[0][key])
        stacked = np.zeros((len(clients), n_max) + first.shape[1:], first.dtype)
        for i, client in enumerate(clients):
            values = np.asarray(client[key])
            if len(values) != sizes[i]:
                raise ValueError(f"client {i}: {key!r} has {len(values)} examples, expected {sizes[i]}")
            stacked[i, : sizes[i]] = values
        out[key] = stacked
    out["mask"] = np.arange(n_max)[None, :] < np.asarray(sizes)[:, None]
    return out


def holdout(data: dict, fraction: float):
    """Split padded client data (with ``"mask"``) into (kept, held out) without moving any array: the last
    round(fraction * n_i) real examples of client i (at least one, and at least one kept when n_i >= 2) go
    to the held-out part, which is the same arrays with the complementary mask. Used to tune
    hyperparameters on a validation split carved from the training data."""
    mask = np.asarray(data["mask"])
    sizes = mask.sum(axis=1)
    held = np.array([split_train_test(int(n), fraction)[1] if n >= 2 else 0 for n in sizes])
    position = np.cumsum(mask, axis=1) - 1  # index of each real example among its client's real examples
    is_held = mask & (position >= (sizes - held)[:, None])
    return {**data, "mask": mask & ~is_held}, {**data, "mask": is_held}
