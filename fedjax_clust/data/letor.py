"""Yahoo! Learning to Rank (Challenge C14, set 2) as Ghosh et al.'s real-data task (seeds/003, §6.2).

The data cannot be downloaded here (Yahoo Webscope needs an agreement): point :func:`yahoo_ltr_task` at your copy
of ``set2.test.txt``. Its format is SVMlight / LETOR, one document per line::

    <relevance> qid:<query id> <feature>:<value> <feature>:<value> ...   # optional comment

with 1-based feature indices and absent features 0. :func:`load_svmlight` reads any such file.

§6.2's construction, step by step (the paper's words in quotes; our choices marked):

1. "draw an edge between the queries with l2 distance less than gamma (3.415)" and take connected components as
   the true clusters. The nodes are the file's rows (its documents; the paper calls them queries), labels
   ignored. The distances are computed in float64 blocks of ``block_rows`` rows (for the 100k rows of set 2
   that is about 10^13 flops: minutes on a CPU).
2. "Small groups are removed ... This results in 4 large clusters": we keep the ``num_clusters`` largest
   components (4).
3. w*_k = the mean of cluster k's rows.
4. Each cluster's rows are shuffled and cut into machines of n = ``split_size`` (50) rows; a remainder is dropped.
5. "respecting alpha = 0.3": ``round(alpha / (1 - alpha) * good)`` adversarial machines (the paper's 80), each of
   ``split_size`` rows drawn without replacement from the rows outside the kept clusters (with replacement when
   too few remain), and shifted by its own vector b ~ Bernoulli(1/2)^D - 0.5: adding b to every row adds it to the
   split's mean, which is the paper's "adding ... to the ERM".
6. The loss is the mean squared error 0.5 ||w - x||^2 per row, so a machine's local ERM is its rows' mean.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from fedjax_clust.validation import check_int, check_real, check_seed

__all__ = ["LetorData", "load_svmlight", "threshold_clusters", "yahoo_ltr_task", "components_task",
           "squared_distance_loss"]


class LetorData(NamedTuple):
    """Rows of an SVMlight / LETOR file: ``features`` float32 [rows, D], ``relevance`` [rows], ``qid`` [rows]."""
    features: np.ndarray
    relevance: np.ndarray
    qid: np.ndarray


def load_svmlight(path: str, num_features: Optional[int] = None, max_rows: Optional[int] = None) -> LetorData:
    """Read an SVMlight / LETOR text file into dense arrays. ``num_features`` D defaults to the largest index
    seen; ``max_rows`` stops early. ValueError, naming the line, on a malformed line."""
    rows, relevance, qids = [], [], []
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            body = line.split("#", 1)[0].split()
            if not body:
                continue
            try:
                rel = float(body[0])
                pairs, qid = body[1:], -1
                if pairs and pairs[0].startswith("qid:"):
                    qid, pairs = int(pairs[0][4:]), pairs[1:]
                entries = {}
                for pair in pairs:
                    index, value = pair.split(":")
                    index = int(index)
                    if index < 1:
                        raise ValueError("feature indices start at 1")
                    entries[index] = float(value)
            except ValueError as error:
                raise ValueError(f"{path}:{number}: not an SVMlight line ({error}): {line.strip()[:80]!r}") from None
            rows.append(entries)
            relevance.append(rel)
            qids.append(qid)
            if max_rows is not None and len(rows) >= max_rows:
                break
    if not rows:
        raise ValueError(f"{path}: no data lines")
    largest = max((max(r) for r in rows if r), default=0)
    width = largest if num_features is None else num_features
    if largest > width:
        raise ValueError(f"{path}: feature index {largest} exceeds num_features={width}")
    features = np.zeros((len(rows), width), np.float32)
    for i, entries in enumerate(rows):
        for index, value in entries.items():
            features[i, index - 1] = value
    return LetorData(features, np.asarray(relevance, np.float32), np.asarray(qids, np.int64))


def threshold_clusters(points, gamma: float, block_rows: int = 512) -> np.ndarray:
    """Connected components [rows] of the graph with an edge wherever ||x_i - x_j||_2 < ``gamma`` (labels
    0.. in order of first appearance), from float64 distance blocks of ``block_rows`` rows."""
    check_real("gamma", gamma, low=0.0, low_open=True)
    check_int("block_rows", block_rows)
    x = np.asarray(points, np.float64)
    sq = np.sum(x * x, axis=1)
    sources, targets = [], []
    for start in range(0, x.shape[0], block_rows):
        block = x[start:start + block_rows]
        dist2 = sq[start:start + block_rows, None] + sq[None, :] - 2.0 * block @ x.T
        i, j = np.nonzero(dist2 < gamma * gamma)
        sources.append(i + start)
        targets.append(j)
    i, j = np.concatenate(sources), np.concatenate(targets)
    graph = coo_matrix((np.ones(i.size, np.int8), (i, j)), shape=(x.shape[0],) * 2)
    _, labels = connected_components(graph, directed=False)
    _, first = np.unique(labels, return_index=True)
    order = np.argsort(np.argsort(first))  # relabel in order of first appearance
    return order[labels]


def squared_distance_loss(params, example):
    """0.5 ||w - x||_2^2 for one row {"x": x [D]}: the loss whose ERM is the mean (§6.2)."""
    return 0.5 * jnp.sum(jnp.square(params - example["x"]))


def yahoo_ltr_task(path: str, *, gamma: float = 3.415, num_clusters: int = 4, split_size: int = 50,
                   outlier_fraction: float = 0.3, num_features: Optional[int] = None, max_rows: Optional[int] = None,
                   block_rows: int = 512, seed: int = 0):
    """The §6.2 task from an SVMlight file (see the module docstring for each step and our choices): a
    :class:`fedjax_clust.tasks.Task` whose good machines hold ``split_size`` rows of one of the
    ``num_clusters`` largest threshold-graph components, and whose outlier machines (``task.outliers``) hold
    shifted rows from outside them. To draw several tasks from one file, compute the components once and call
    :func:`components_task`."""
    data = load_svmlight(path, num_features=num_features, max_rows=max_rows)
    components = threshold_clusters(data.features, gamma, block_rows)
    return components_task(data.features, components, num_clusters=num_clusters, split_size=split_size,
                           outlier_fraction=outlier_fraction, seed=seed,
                           config=dict(path=str(path), gamma=float(gamma)))


def components_task(features, components, *, num_clusters: int = 4, split_size: int = 50,
                    outlier_fraction: float = 0.3, seed: int = 0, config: Optional[dict] = None):
    """Steps 2-6 of the module docstring from rows ``features`` [rows, D] and their threshold-graph
    ``components`` [rows] (e.g. from :func:`threshold_clusters`); ``seed`` draws the splits and the outliers."""
    from fedjax_clust.tasks.base import Task

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
        raise ValueError(f"the threshold graph has {int(np.sum(sizes >= split_size))} components of at least "
                         f"split_size={split_size} rows; {num_clusters} are needed")
    rng = np.random.default_rng(seed)
    optimum_of = {int(c): x[components == c].mean(axis=0) for c in kept}
    splits, clusters = [], []
    for k, c in enumerate(kept):
        rows = rng.permutation(np.flatnonzero(components == c))
        for start in range(0, rows.size - split_size + 1, split_size):
            splits.append(x[rows[start:start + split_size]])
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
    config = dict(config or {}, num_clusters=num_clusters, split_size=split_size,
                  outlier_fraction=float(outlier_fraction), rows=int(x.shape[0]), features=dim,
                  cluster_rows=[int(sizes[c]) for c in kept], good_machines=good, outlier_machines=num_outliers,
                  seed=seed)
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
