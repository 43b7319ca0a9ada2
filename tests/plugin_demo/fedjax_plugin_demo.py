"""A third-party algorithm, written the way a researcher's own package would write one: it uses only
fedjax_clust's public building blocks and registers through the ``fedjax_clust.algorithms`` entry point
(see tests/test_plugins.py, which installs it from outside the package).

``clipped-gradient-averaging``: every client owns its model; each round it sends its minibatch gradient
g_i clipped to norm at most ``clip``, c_i = g_i min(1, clip / ||g_i||); the server averages the messages
of all clients, and every client steps with a mix of its own gradient and that average,
x_i <- x_i - eta ((1 - mix) g_i + mix mean_j c_j). ``mix = 0`` is Local, ``mix = 1`` with an infinite
``clip`` is Global.
"""

import jax
import jax.numpy as jnp

from fedjax_clust import AlgorithmSpec, FederatedAlgorithm
from fedjax_clust.core.batching import client_loss, sample_minibatch
from fedjax_clust.core.keys import attack_key
from fedjax_clust.core.optim import apply_client_updates, client_optimizer
from fedjax_clust.core.state import init_client_state
from fedjax_clust.core.validation import check_real
from fedjax_clust.robust.adversary import adversary


def clipped_gradient_averaging(
    example_loss,
    *,
    learning_rate: float,
    batch_size=None,
    clip: float = 10.0,
    mix: float = 0.5,
    attack=None,
    byzantine=None,
) -> FederatedAlgorithm:
    """The plugin's builder; its keyword options with type hints become command-line flags.

    Args:
      clip: the largest norm of a sent gradient.
      mix: the weight of the average of the clipped gradients in each client's step, in [0, 1].
    """
    check_real("clip", clip, low=0.0, low_open=True)
    check_real("mix", mix, low=0.0, high=1.0)
    optimizer = client_optimizer(learning_rate)
    loss = client_loss(example_loss)
    _, send = adversary(attack, byzantine, "clipped-gradient-averaging")

    def init(params, num_clients):
        return init_client_state(optimizer, params, num_clients)

    def apply(state, data, key, participants=None):  # the round's participants restrict the attackers' mask
        grads = jax.vmap(jax.grad(loss))(state.params, sample_minibatch(data, batch_size, key))
        norms = jnp.sqrt(sum(jnp.sum(jnp.square(g).reshape(g.shape[0], -1), axis=1) for g in jax.tree.leaves(grads)))
        scale = jnp.minimum(1.0, clip / jnp.maximum(norms, 1e-30))
        clipped = jax.tree.map(lambda g: g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), grads)
        sent = send(clipped, attack_key(key), participants=participants)
        directions = jax.tree.map(lambda g, c: (1.0 - mix) * g + mix * jnp.mean(c, axis=0), grads, sent)
        state = apply_client_updates(optimizer, state, directions)
        return state._replace(round=state.round + 1), {}

    hparams = dict(learning_rate=learning_rate, batch_size=batch_size, clip=clip, mix=mix)
    return FederatedAlgorithm("clipped-gradient-averaging", init, apply, hparams)


SPEC = AlgorithmSpec(
    "clipped-gradient-averaging",
    lambda task, **options: clipped_gradient_averaging(task.example_loss, **options),
    builder=clipped_gradient_averaging,
    owns_models=True,
    summary="a test plugin: clipped gradients averaged and mixed with each client's own",
)
