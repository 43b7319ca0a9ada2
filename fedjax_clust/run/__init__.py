"""Driving rounds: the simulate loop, fused rounds, vmapped sweeps and the default comparison."""
