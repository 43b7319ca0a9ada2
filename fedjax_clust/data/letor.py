"""Yahoo! Learning to Rank (Challenge C14, set 2) as Ghosh et al.'s real-data task (seeds/003, §6.2).

The data cannot be downloaded here (Yahoo Webscope needs an agreement): point
:func:`fedjax_clust.tasks.letor.yahoo_ltr_task` at your copy
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

import numpy as np

from fedjax_clust.core.validation import check_int, check_real

__all__ = ["LetorData", "load_svmlight", "threshold_clusters"]


class LetorData(NamedTuple):
    """Rows of an SVMlight / LETOR file: ``features`` float32 [rows, D], ``relevance`` [rows], ``qid`` [rows]."""

    features: np.ndarray
    relevance: np.ndarray
    qid: np.ndarray


def load_svmlight(path: str, num_features: Optional[int] = None, max_rows: Optional[int] = None) -> LetorData:
    """Read an SVMlight / LETOR text file into dense arrays. ``num_features`` D defaults to the largest index
    seen; ``max_rows`` stops early. ValueError, naming the line, on a malformed line or a non-finite value."""
    rows, relevance, qids = [], [], []
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            body = line.split("#", 1)[0].split()
            if not body:
                continue
            try:
                rel = float(body[0])
                if not np.isfinite(rel):
                    raise ValueError(f"the relevance is {body[0]}, not a finite number")
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
                    if not np.isfinite(entries[index]):
                        raise ValueError(f"feature {index} is {value}, not a finite number")
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
        block = x[start : start + block_rows]
        dist2 = sq[start : start + block_rows, None] + sq[None, :] - 2.0 * block @ x.T
        i, j = np.nonzero(dist2 < gamma * gamma)
        sources.append(i + start)
        targets.append(j)
    i, j = np.concatenate(sources), np.concatenate(targets)
    from scipy.sparse import coo_matrix  # imported when used: the command line starts faster
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(i.size, np.int8), (i, j)), shape=(x.shape[0],) * 2)
    _, labels = connected_components(graph, directed=False)
    _, first = np.unique(labels, return_index=True)
    order = np.argsort(np.argsort(first))  # relabel in order of first appearance
    return order[labels]
