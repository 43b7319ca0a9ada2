"""Local differential privacy: each client clips and noises every message before it leaves the client.

Federated-Clustering cannot be made centrally private here: every client receives every other client's raw
message g_j(x_i), and Threshold-Clustering is an iterated, nonlinear map of them with no sensitivity analysis
anyone has derived. Local DP needs no trusted party. Client j, asked for its message at client i's model
(Werner et al., Algorithm 2, line 5), sends

    clip_C(g_j(x_i)) + N(0, z^2 C^2 I),        clip_C(m) = m min(1, C / ||m||),

each message clipped on its own to norm C (``LocalGaussian``) and noised with fresh noise; a message whose
squared norm is not a finite float (NaN, inf, entries beyond ~1.8e19) is replaced by 0 before the noise, so what
leaves the client is always a vector of norm at most C plus the noise. Client i's own
message, the seed of its Threshold-Clustering, is noised too: client i's model x_i, which every other client
receives to compute its message, must depend on client i's data only through noised messages.

The guarantee (our derivation, stated for the docs): local DP protects a client's whole data against anyone
who sees what it sends, so neighbouring inputs are any two datasets of the client (replace-one adjacency); two
clipped messages then differ by at most 2C. One round, a client sends S messages (S = the clients of its
subgroup, N without subgroups), each a Gaussian mechanism of sensitivity 2C and noise std z C; together they are
one Gaussian mechanism of multiplier z / (2 sqrt(S)) (:func:`local_release`), composed over the rounds (every
round counted, as if the client took part in each: an upper bound under partial participation, whose sampling
we do not claim to amplify). Threshold-Clustering, the momentum and the step are post-processing of what the
client received. Clipping the S messages jointly to C instead would leave each about C / sqrt(S): the same
guarantee as clipping each at C / sqrt(S) with multiplier z sqrt(S), so the per-message bound loses nothing by
being the parameter.

Not covered: local SGD steps before the clustered step (``local_steps_form="sgd"`` with E > 0) move a client's
model, which every other client receives, with unnoised gradients, so local DP refuses them (the
"pseudo-gradient" form keeps the local steps inside the message, which is clipped and noised).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp

from fedjax_clust.privacy.accounting import Release
from fedjax_clust.privacy.central import PrivacyBudget, checked_budget
from fedjax_clust.privacy.mechanism import clip_rows

__all__ = ["LocalGaussian", "LocalPrivacy", "local_privacy", "local_release"]

PyTree = Any


def local_release(noise_multiplier: float, messages: int) -> Release:
    """What one round releases about one client that sends ``messages`` messages, each clipped to C and noised
    with std z C (replace-one adjacency: sensitivity 2C each): the Gaussian mechanism of multiplier
    z / (2 sqrt(messages)), no sampling."""
    return Release(noise_multiplier / (2.0 * math.sqrt(messages)), 1.0)


@dataclasses.dataclass(frozen=True, eq=False)
class LocalGaussian:
    """A client's message privatiser: clip each message to ``clip`` (C > 0) and add N(0, (z C)^2) to every
    coordinate, z = ``noise_multiplier`` (may be traced: a sweep's)."""

    clip: Any
    noise_multiplier: Any

    def privatize(self, messages: PyTree, axis: int, key) -> PyTree:
        """``messages`` (leaves with the clients on ``axis``, 0 or -1) each clipped and noised; the noise of
        client position s comes from ``fold_in(key, s)``, drawn in the [S, ...] layout whatever ``axis``, so
        that the noise does not depend on the row's layout."""
        leaves, treedef = jax.tree.flatten(messages)
        rows = [x if axis == 0 else jnp.moveaxis(x, -1, 0) for x in leaves]
        clipped, _ = clip_rows(rows, self.clip)  # a NaN / inf message, or one whose squares overflow: noise alone
        keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(jnp.arange(rows[0].shape[0]))
        std = self.noise_multiplier * self.clip
        out = []
        for i, r in enumerate(clipped):

            def draw(k, leaf=i, shape=r.shape[1:]):
                return jax.random.normal(jax.random.fold_in(k, leaf), shape, jnp.float32)

            private = r + (std * jax.vmap(draw)(keys)).astype(r.dtype)
            out.append(private if axis == 0 else jnp.moveaxis(private, 0, -1))
        return jax.tree.unflatten(treedef, out)


@dataclasses.dataclass(frozen=True)
class LocalPrivacy(PrivacyBudget):
    """Checked local-privacy settings (:func:`local_privacy`)."""

    def noise_for(self, messages: int) -> float:
        """z: the given one, or the smallest whose ``rounds`` rounds of ``messages`` messages spend at most
        ``target_epsilon`` at ``delta`` (:func:`local_release` inverted)."""
        return self.noise(1.0, lambda z: z * 2.0 * math.sqrt(messages))


def local_privacy(
    *,
    clip: float,
    noise_multiplier: Optional[float] = None,
    target_epsilon: Optional[float] = None,
    delta: float = 1e-5,
    rounds: Optional[int] = None,
    accountant: str = "rdp",
) -> LocalPrivacy:
    """Checked local-privacy settings; one-line ValueErrors with ``make_algorithm``'s ``dp_*`` names
    (:func:`~fedjax_clust.privacy.central.checked_budget`)."""
    clip, noise_multiplier, target_epsilon, delta, rounds = checked_budget(
        clip, noise_multiplier, target_epsilon, delta, rounds, accountant
    )
    return LocalPrivacy(clip, noise_multiplier, target_epsilon, delta, rounds, accountant)  # PrivacyBudget's order
