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


def test_allocate_like_follows_each_clients_label_mix():
    from fedjax_clust.data.partitioners import allocate_like

    rng = np.random.default_rng(0)
    client_labels = [np.repeat([0, 1], [30, 10]), np.repeat([2], [20]), np.repeat([1, 2], [10, 10]), np.array([3])]
    test = rng.permutation(np.repeat([0, 1, 2], [40, 40, 40]))
    shares = allocate_like(test, client_labels)
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(len(test)))  # each test example once
    counts = [np.bincount(test[s], minlength=4).tolist() for s in shares]
    # class 2 (40 test examples): clients 1 and 2 train on 20 and 10 of it -> 27 and 13 (largest remainder)
    assert counts[1][2] == 27 and counts[2][1:3] == [20, 13] and counts[0][1] == 20
    # class 3 has no test example: client 3 gets one from the largest share (client 0's class 0)
    assert len(shares[3]) == 1 and counts[0][0] == 39 and counts[3][0] == 1


def test_partitions_compose_with_cluster_structures():
    from fedjax_clust.data import ImageSet, clustered_split

    rng = np.random.default_rng(0)
    images = ImageSet(
        rng.random((800, 6, 6, 1), dtype=np.float32), np.repeat(np.arange(10), 80).astype(np.int32), 10, "t"
    )
    test = ImageSet(
        rng.random((400, 6, 6, 1), dtype=np.float32), np.repeat(np.arange(10), 40).astype(np.int32), 10, "t"
    )

    def classes_per_client(data):
        return np.mean([len(np.unique(y[m])) for y, m in zip(data.train["y"], data.train["mask"])])

    common = dict(structure="rotation", num_clusters=2, clients_per_cluster=8, seed=1)
    iid = clustered_split(images, **common)
    skewed = clustered_split(images, partition="shards:2", **common)
    # 16 shards of 25 label-sorted examples per cluster: a shard spans at most 2 classes (of ~40 examples each)
    assert classes_per_client(skewed) <= 4 and classes_per_client(iid) > 8
    assert skewed.train["mask"].sum() + skewed.test["mask"].sum() == 800  # every example used once
    official = clustered_split(images, partition="dirichlet:0.1", test_images=test, **common)
    assert official.test["mask"].sum() == 400 and official.test["mask"].sum(axis=1).min() >= 1
    for y, m, ty, tm in zip(official.train["y"], official.train["mask"], official.test["y"], official.test["mask"]):
        # each client's test labels come from the classes it trains on (it has at least one example of each)
        assert set(ty[tm]) <= set(y[m]) or tm.sum() == 1
    with pytest.raises(ValueError, match="use one of them"):
        clustered_split(images, partition="shards:2", size_sigma=1.0, **common)
    # Dirichlet label mixes with log-normal sizes: the sizes of size_sigma's split, skewed labels
    sized = clustered_split(images, partition="dirichlet:0.1", size_sigma=1.0, **common)
    plain_sizes = clustered_split(images, size_sigma=1.0, **common)
    totals = sized.train["mask"].sum(axis=1) + sized.test["mask"].sum(axis=1)
    assert totals.sum() == 800 and totals.min() >= MIN_EXAMPLES and totals.max() > 2 * np.median(totals)
    assert classes_per_client(sized) < 0.6 * classes_per_client(plain_sizes)


def test_dirichlet_with_sizes_gives_each_client_its_size_and_its_own_label_mix():
    from fedjax_clust.data.partition import split_sizes

    labels = np.repeat(np.arange(10), 300)
    rng = np.random.default_rng(0)
    sizes = split_sizes(len(labels), 40, 1.0, rng)
    parts = partition_indices("dirichlet:0.1", labels, 40, np.random.default_rng(1), sizes=sizes)
    assert [len(p) for p in parts] == list(sizes)  # exactly the sizes asked for
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))  # every example once
    again = partition_indices("dirichlet:0.1", labels, 40, np.random.default_rng(1), sizes=sizes)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # a pure function of the generator
    # small alpha: most of a client's examples come from one class; large alpha: close to the pooled mix
    top = lambda ps: np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in ps])  # noqa: E731
    wide = partition_indices("dirichlet:100", labels, 40, np.random.default_rng(1), sizes=sizes)
    assert top(parts) > 0.6 > 0.3 > top(wide)
    iid = partition_indices("iid", labels, 40, np.random.default_rng(1), sizes=sizes)
    assert [len(p) for p in iid] == list(sizes)
    with pytest.raises(ValueError, match="only 'iid' and 'dirichlet' take"):
        partition_indices("shards:2", labels, 40, np.random.default_rng(1), sizes=sizes)
    with pytest.raises(ValueError, match="sum to the 3000 examples"):
        partition_indices("dirichlet:1", labels, 40, np.random.default_rng(1), sizes=sizes + 1)
