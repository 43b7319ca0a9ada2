"""Pure jit-able kernels: cross-gradients, Threshold-Clustering and its order statistics, graphs, metrics."""
