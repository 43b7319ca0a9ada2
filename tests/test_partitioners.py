"""Ragged clients (flat + offsets) and the partitioners of pooled data."""

import numpy as np
import pytest

from fedjax_clust.data.partition import MIN_EXAMPLES, pad_clients
from fedjax_clust.data.partitioners import PARTITIONERS, parse_partition, partition_indices
from fedjax_clust.data.ragged import RaggedClients


def _labels(n=600, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def test_ragged_to_padded_matches_pad_clients():
    rng = np.random.default_rng(1)
    clients = [{"x": rng.normal(size=(n, 3)).astype(np.float32), "y": rng.integers(0, 5, n)} for n in (4, 1, 7)]
    ragged = RaggedClients.from_clients(clients, ["a", "b", "c"])
    assert ragged.sizes.tolist() == [4, 1, 7] and ragged.num_examples == 12
    padded, reference = ragged.to_padded(), pad_clients(clients)
    for key in reference:
        np.testing.assert_array_equal(padded[key], reference[key])
    assert ragged.padding_factor() == pytest.approx(3 * 7 / 12)
    np.testing.assert_array_equal(ragged.client(2)["x"], clients[2]["x"])
    picked = ragged.select([2, 0])
    assert picked.client_ids == ("c", "a") and picked.sizes.tolist() == [7, 4]
    np.testing.assert_array_equal(picked.client(1)["y"], clients[0]["y"])
    with pytest.raises(ValueError, match="below the largest"):
        ragged.to_padded(n_max=6)


def test_ragged_refuses_inconsistent_layouts():
    with pytest.raises(ValueError, match="rows, expected 5"):
        RaggedClients({"x": np.zeros(4)}, np.array([0, 2, 5]), ("a", "b"))
    with pytest.raises(ValueError, match="never decrease"):
        RaggedClients({"x": np.zeros(4)}, np.array([0, 3, 2, 4]), ("a", "b", "c"))
    with pytest.raises(ValueError, match="client ids"):
        RaggedClients({"x": np.zeros(4)}, np.array([0, 4]), ("a", "b"))
    with pytest.raises(ValueError, match="'mask'"):
        RaggedClients({"mask": np.zeros(4)}, np.array([0, 4]), ("a",))


@pytest.mark.parametrize("spec", ["iid", "dirichlet:0.3", "shards:2", "lognormal:1.5", "power-law:1.5"])
def test_every_partition_is_a_seeded_partition_of_all_examples(spec):
    labels = _labels()
    parts = partition_indices(spec, labels, 20, np.random.default_rng(3))
    assert len(parts) == 20
    everything = np.sort(np.concatenate(parts))
    np.testing.assert_array_equal(everything, np.arange(len(labels)))  # each example exactly once
    assert min(len(p) for p in parts) >= MIN_EXAMPLES
    again = partition_indices(spec, labels, 20, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_shards_give_each_client_few_classes():
    labels = np.repeat(np.arange(10), 60)  # 600 examples, 10 classes
    parts = partition_indices("shards:2", labels, 30, np.random.default_rng(0))
    # 60 shards of 10 examples, each inside one class: every client sees at most 2 classes, 20 examples
    assert all(len(np.unique(labels[p])) <= 2 and len(p) == 20 for p in parts)


def test_dirichlet_alpha_controls_label_skew():
    labels = np.repeat(np.arange(10), 200)

    def mean_classes(alpha):
        parts = partition_indices(f"dirichlet:{alpha}", labels, 20, np.random.default_rng(0))
        return np.mean([np.sum(np.bincount(labels[p], minlength=10) >= 5) for p in parts])

    assert mean_classes(0.1) < 4 < 9 < mean_classes(100.0)


def test_quantity_skew_is_heavy_tailed():
    labels = _labels(200_000)
    sizes = np.array([len(p) for p in partition_indices("lognormal:1.5", labels, 1000, np.random.default_rng(0))])
    assert sizes.max() / np.median(sizes) >= 30
    sizes = np.array([len(p) for p in partition_indices("power-law:1.5", labels, 1000, np.random.default_rng(0))])
    assert sizes.max() / np.median(sizes) >= 30


def test_partition_specs_are_checked():
    assert str(parse_partition("dirichlet:0.5")) == "dirichlet:0.5"
    assert parse_partition("shards:2").param == 2
    for bad, match in [
        ("dirichlet", "needs a parameter"),
        ("dirichlet:-1", "alpha > 0"),
        ("shards:1.5", "integer"),
        ("iid:3", "no parameter"),
        ("zipf:1", "unknown partition"),
        ("lognormal:nan", "sigma"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_partition(bad)
    with pytest.raises(ValueError, match="cannot give"):
        partition_indices("iid", np.zeros(5), 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="larger alpha"):
        partition_indices("dirichlet:0.001", np.repeat(np.arange(2), 10), 8, np.random.default_rng(0))
    assert set(PARTITIONERS) == {"iid", "dirichlet", "shards", "lognormal", "power-law"}
