"""Pure jit-able kernels: cross-gradients, Threshold-Clustering, the one order-statistic engine
(:mod:`fedjax_clust.ops.order_stats`: the quantile ball, the coordinate median and trimmed mean, the attacker's
radius), graphs, metrics."""
