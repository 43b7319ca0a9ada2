"""Plain NumPy references shared by several test modules."""

import numpy as np


def geometric_median(x, iterations=10_000, nu=1e-6):
    """The geometric median of the rows of x, converged: ``iterations`` smoothed Weiszfeld steps in float64
    from the coordinate median, z <- sum_i w_i x_i / sum_i w_i, w_i = 1 / max(nu, ||z - x_i||)."""
    x = np.asarray(x, np.float64)
    z = np.median(x, axis=0)
    for _ in range(iterations):
        w = 1.0 / np.maximum(np.linalg.norm(x - z, axis=1), nu)
        z, previous = (w[:, None] * x).sum(0) / w.sum(), z
        if np.array_equal(z, previous):  # a float64 fixed point
            break
    return z


def lloyd_reference(points, labels, k, rule, iterations, radius):
    """(label history [iterations + 1, m], centres [k, d]) of Lloyd / K-geomedians / Trimmed K-means (Ghosh et al.
    Alg. 2) as plain loops with converged geometric medians; a bucket without points keeps its last centre
    (NaN at first)."""
    history, centres = [labels.copy()], np.full((k, points.shape[1]), np.nan)
    for _ in range(iterations):
        for g in range(k):
            bucket = points[labels == g]
            if len(bucket) == 0:
                continue
            if rule == "lloyd":
                centres[g] = bucket.mean(0)
                continue
            mu = geometric_median(bucket)
            inside = bucket[np.linalg.norm(bucket - mu, axis=1) <= radius]
            centres[g] = mu if rule == "k-geomedians" or len(inside) == 0 else inside.mean(0)
        dist = np.linalg.norm(points[:, None] - centres[None], axis=-1)
        labels = np.argmin(np.where(np.isnan(dist), np.inf, dist), axis=1)
        history.append(labels.copy())
    return np.array(history), centres


def components_by_search(adjacency, valid=None):
    """Connected components of the boolean ``adjacency`` [m, m] (an edge either way links; nodes outside
    ``valid`` are isolated) by breadth-first search: each node's label is the smallest index of its component."""
    n = len(adjacency)
    valid = np.ones(n, bool) if valid is None else valid
    linked = (adjacency | adjacency.T) & valid[:, None] & valid[None, :]
    labels = -np.ones(n, int)
    for start in range(n):
        if labels[start] >= 0:
            continue
        labels[start], frontier = start, [start]
        while frontier:
            node = frontier.pop()
            for other in np.nonzero(linked[node])[0]:
                if labels[other] < 0:
                    labels[other] = start
                    frontier.append(other)
    return labels
