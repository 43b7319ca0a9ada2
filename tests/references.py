"""Plain NumPy references shared by several test modules."""

import numpy as np


def geometric_median(x, iterations, nu=1e-6):
    """Smoothed Weiszfeld from the mean: z <- sum_i w_i x_i / sum_i w_i, w_i = 1 / max(nu, ||z - x_i||)."""
    z = x.mean(0)
    for _ in range(iterations):
        w = 1.0 / np.maximum(np.linalg.norm(x - z, axis=1), nu)
        z = (w[:, None] * x).sum(0) / w.sum()
    return z
