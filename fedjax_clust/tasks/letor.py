"""Ghosh et al.'s Yahoo! LTR task (seeds/003, §6.2) from an SVMlight file: steps 2-6 of
:mod:`fedjax_clust.data.letor`, whose module docstring states each step and our choices."""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.validation import check_int, check_real, check_seed
from fedjax_clust.data.letor import load_svmlight, threshold_clusters
from fedjax_clust.tasks.base import Task

__all__ = ["squared_distance_loss", "yahoo_ltr_task", "components_task"]


def squared_distance_loss(params, example):
    """0.5 ||w - x||_2^2 for one row {"x": x [D]}: the loss whose ERM is the mean (§6.2)."""
    return 0.5 * jnp.sum(jnp.square(params - example["x"]))


def yahoo_ltr_task(
    path: str,
    *,
    gamma: float = 3.415,
    num_clusters: int = 4,
    split_size: int = 50,
    outlier_fraction: float = 0.3,
    num_features: Optional[int] = None,
    max_rows: Optional[int] = None,
    block_rows: int = 512,
    seed: int = 0,
):
    """The §6.2 task from an SVMlight file (see the module docstring for each step and our choices): a
    :class:`fedjax_clust.tasks.Task` whose good machines hold ``split_size`` rows of one of the
    ``num_clusters`` largest threshold-graph components, and whose outlier machines (``task.outliers``) hold
    shifted rows from outside them. To draw several tasks from one file, compute the components once and call
    :func:`components_task`."""
    data = load_svmlight(path, num_features=num_features, max_rows=max_rows)
    components = threshold_clusters(data.features, gamma, block_rows)
    return components_task(
        data.features,
        components,
        num_clusters=num_clusters,
        split_size=split_size,
        outlier_fraction=outlier_fraction,
        seed=seed,
        config=dict(path=str(path), gamma=float(gamma)),
    )


def components_task(
    features,
    components,
    *,
    num_clusters: int = 4,
    split_size: int = 50,
    outlier_fraction: float = 0.3,
    seed: int = 0,
    config: Optional[dict] = None,
):
    """Steps 2-6 of the module docstring from rows ``features`` [rows, D] and their threshold-graph
    ``components`` [rows] (e.g. from :func:`threshold_clusters`); ``seed`` draws the splits and the outliers."""
    check_int("num_clusters", num_clusters)
    check_int("split_size", split_size)
    check_real("outlier_fraction", outlier_fraction, low=0.0, high=1.0, high_open=True)
    check_seed(seed)
    x = np.asarray(features, np.float32)
    components = np.asarray(components)
    if components.shape != (x.shape[0],):
        raise ValueError(f"components must have one entry per row ({x.shape[0]}), got shape {components.shape}")
    sizes = np.bincount(components)
    kept = np.argsort(-sizes, kind="stable")[:num_clusters]
    if kept.size < num_clusters or sizes[kept[-1]] < split_size:
        raise ValueError(
            f"the threshold graph has {int(np.sum(sizes >= split_size))} components of at least "
            f"split_size={split_size} rows; {num_clusters} are needed"
        )
    rng = np.random.default_rng(seed)
    optimum_of = {int(c): x[components == c].mean(axis=0) for c in kept}
    splits, clusters = [], []
    for k, c in enumerate(kept):
        rows = rng.permutation(np.flatnonzero(components == c))
        for start in range(0, rows.size - split_size + 1, split_size):
            splits.append(x[rows[start : start + split_size]])
            clusters.append(k)
    good = len(splits)
    num_outliers = int(round(outlier_fraction / (1.0 - outlier_fraction) * good))
    unused = np.flatnonzero(~np.isin(components, kept))
    if num_outliers and unused.size == 0:
        raise ValueError("every row lies in the kept clusters; none is left for the outlier machines")
    optima = [optimum_of[int(kept[k])] for k in clusters]
    for j in range(num_outliers):
        rows = rng.choice(unused, size=split_size, replace=unused.size < split_size)
        shift = rng.integers(0, 2, size=x.shape[1]).astype(np.float32) - 0.5
        splits.append(x[rows] + shift)
        optima.append(x[rows].mean(axis=0) + shift)
        clusters.append(j % num_clusters)
    outliers = np.arange(good + num_outliers) >= good
    dim = x.shape[1]
    config = dict(
        config or {},
        num_clusters=num_clusters,
        split_size=split_size,
        outlier_fraction=float(outlier_fraction),
        rows=int(x.shape[0]),
        features=dim,
        cluster_rows=[int(sizes[c]) for c in kept],
        good_machines=good,
        outlier_machines=num_outliers,
        seed=seed,
    )
    return Task(
        name="yahoo-ltr",
        data={"x": jnp.asarray(np.stack(splits), jnp.float32)},
        example_loss=squared_distance_loss,
        init_params=lambda key: jnp.zeros((dim,), jnp.float32),
        true_clusters=np.asarray(clusters),
        optima=jnp.asarray(np.stack(optima), jnp.float32),
        config=config,
        outliers=outliers if outliers.any() else None,
    )
