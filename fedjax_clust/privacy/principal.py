"""The top principal direction of clipped rows, released privately by the noisy power method.

Hardt and Price 2014 ("The Noisy Power Method"), one vector: with the members' rows clipped to norm C
(c_i = clip_C(u_i), :func:`~fedjax_clust.privacy.mechanism.clip_rows`) and a start v_0 drawn from the key alone
(public randomness, unit norm), each of ``steps`` iterations releases

    w_k = sum_{i in members} <c_i, v_{k-1}> c_i + N(0, z^2 C^4 I),        v_k = w_k / ||w_k||.

Adding or removing one member moves the sum by <c_i, v> c_i, of norm at most ||c_i||^2 <= C^2 (v has unit
norm), so each iteration is a Gaussian mechanism of multiplier z, and ``steps`` iterations compose
(:class:`~fedjax_clust.privacy.central.SideReleases`, ``gaussians=steps``; v_{k-1} is itself a release, so the
composition is adaptive, which Gaussian / Renyi composition covers). The result estimates the top eigenvector
of sum_i c_i c_i^T; its sign is arbitrary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_clust.privacy.mechanism import clip_rows

__all__ = ["private_top_direction"]


def private_top_direction(rows, members, clip, noise_multiplier: float, steps: int, key):
    """v_steps of the module docstring: ``rows`` float [N, D] (unusable rows -- non-finite squares -- count as
    0), ``members`` bool [N], the clip bound C, the multiplier z, ``steps`` >= 1 iterations, noise from ``key``."""
    clipped, usable = clip_rows(rows, clip)
    clipped = jnp.where((members & usable)[:, None], clipped, 0.0)
    k_start, k_noise = jax.random.split(key)
    start = jax.random.normal(k_start, rows.shape[1:], rows.dtype)
    std = noise_multiplier * clip * clip

    def step(k, v):
        w = clipped.T @ (clipped @ v) + std * jax.random.normal(jax.random.fold_in(k_noise, k), v.shape, v.dtype)
        return w / jnp.maximum(jnp.linalg.norm(w), 1e-30)

    return jax.lax.fori_loop(0, steps, step, start / jnp.linalg.norm(start))
