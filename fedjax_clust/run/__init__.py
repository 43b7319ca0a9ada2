"""Driving rounds: the simulate loop, fused rounds, batched sweeps and the default comparison."""
