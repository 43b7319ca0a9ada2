"""Your own clients as Python lists: ragged by default (what the natural-data readers give), padded one option away;
the two layouts train the same full-batch models and evaluate the same."""

import jax
import numpy as np
import pytest

import fedjax_clust as fc
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.data.federated import from_client_lists, standardize
from fedjax_clust.run.driver_options import Evaluation, Output


def _clients(sizes, test_size, seed=0, side=4):
    rng = np.random.default_rng(seed)

    def client(n, cluster):
        y = rng.integers(0, 2, n)
        x = 0.2 + 0.3 * y[:, None, None, None] + 0.4 * cluster + 0.05 * rng.normal(size=(n, side, side, 1))
        return {"x": x.astype(np.float32), "y": y}

    return ([client(n, i % 2) for i, n in enumerate(sizes)], [client(test_size, i % 2) for i in range(len(sizes))])


def _floats(data) -> int:
    return sum(
        int(np.size(part.examples["x"] if isinstance(part, RaggedBatch) else part["x"]))
        for part in (data.train, data.test)
    )


def test_one_large_client_no_longer_pads_every_client_to_its_size():
    """The issue's population: 3,000 examples beside 199 clients of 10 (4 x 4 images, 2 test images each):
    86,240 real pixel values, held as such ragged, as 9.6 million padded (111x)."""
    train, test = _clients([3000] + [10] * 199, 2)
    ragged = from_client_lists(train, test, None, 2)
    padded = from_client_lists(train, test, None, 2, layout="padded")
    assert isinstance(ragged.train, RaggedBatch) and isinstance(padded.train, dict)
    assert _floats(ragged) == (3000 + 1990 + 400) * 16 == 86_240
    assert _floats(padded) == 200 * 3000 * 16 + 200 * 2 * 16
    assert ragged.num_clients == 200 and np.asarray(ragged.client_sizes).tolist() == [3000] + [10] * 199
    with pytest.raises(ValueError, match="layout"):
        from_client_lists(train, test, None, 2, layout="bucketed")
    with pytest.raises(ValueError, match="one dict per client"):
        from_client_lists(train, test[:-1], None, 2)


def test_both_layouts_train_and_evaluate_the_same_full_batch_models():
    train, test = _clients([30, 45, 60, 30, 45, 60], 20, side=8)
    clusters = np.arange(6) % 2
    tasks = [
        fc.federated_image_task(
            standardize(from_client_lists(train, test, clusters, 2, layout=layout)), "mlp", name="mine", hidden=8
        )
        for layout in ("ragged", "padded")
    ]
    runs = [
        fc.simulate(
            fc.make_algorithm("federated-clustering", t, learning_rate=0.1),
            t,
            rounds=3,
            evaluation=Evaluation(eval_every=3),
            output=Output(progress=False),
        )
        for t in tasks
    ]
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6),
        runs[0].state.params,
        runs[1].state.params,
    )
    for key, value in runs[1].history[-1].items():
        assert runs[0].history[-1][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
