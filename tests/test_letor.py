"""The Yahoo! Learning to Rank loader and Ghosh et al.'s §6.2 task, on a small generated file in the same
(SVMlight / LETOR) format."""

import numpy as np
import pytest
from references import components_by_search

from fedjax_clust.data import load_svmlight, threshold_clusters
from fedjax_clust.tasks import yahoo_ltr_task


def _write_letor(path, points, relevance=None):
    lines = []
    for i, row in enumerate(points):
        pairs = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row) if v != 0)
        rel = 0 if relevance is None else relevance[i]
        lines.append(f"{rel} qid:{i // 3} {pairs} # doc {i}")
    path.write_text("\n".join(lines) + "\n")


def _blobs(seed=0):
    """4 tight groups of different sizes far apart, plus 60 scattered rows (the "unused data")."""
    rng = np.random.default_rng(seed)
    centres = np.eye(4, 8) * 20.0
    sizes = [130, 110, 105, 101]
    groups = [c + 0.3 * rng.standard_normal((s, 8)) for c, s in zip(centres, sizes)]
    scattered = 40.0 + 30.0 * rng.standard_normal((60, 8))
    return np.concatenate(groups + [scattered]).astype(np.float32), sizes


def test_load_svmlight_reads_sparse_rows(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("2 qid:7 1:0.5 3:-1.25 # comment\n\n0 qid:8 2:4\n1 qid:8\n")
    data = load_svmlight(str(path))
    np.testing.assert_array_equal(data.features, [[0.5, 0, -1.25], [0, 4, 0], [0, 0, 0]])
    np.testing.assert_array_equal(data.relevance, [2, 0, 1])
    np.testing.assert_array_equal(data.qid, [7, 8, 8])
    assert load_svmlight(str(path), num_features=5).features.shape == (3, 5)
    assert load_svmlight(str(path), max_rows=2).features.shape == (2, 3)
    with pytest.raises(ValueError, match="exceeds"):
        load_svmlight(str(path), num_features=2)
    path.write_text("1 qid:1 1:0.5\n1 qid:1 x:0.5\n")
    with pytest.raises(ValueError, match=r"small.txt:2"):
        load_svmlight(str(path))


def test_threshold_clusters_equal_breadth_first_search():
    rng = np.random.default_rng(1)
    points = rng.uniform(0, 6, size=(70, 2))
    got = threshold_clusters(points, 0.8, block_rows=16)
    smallest = components_by_search(np.linalg.norm(points[:, None] - points[None], axis=-1) < 0.8)
    want = np.unique(smallest, return_inverse=True)[1]  # labels in order of first appearance
    np.testing.assert_array_equal(got, want)


def test_yahoo_task_builds_the_papers_construction(tmp_path):
    points, sizes = _blobs()
    path = tmp_path / "set2.test.txt"
    _write_letor(path, points)
    task = yahoo_ltr_task(str(path), gamma=3.0, num_clusters=4, split_size=25, outlier_fraction=0.3, seed=0)
    good = sum(s // 25 for s in sizes)  # 5 + 4 + 4 + 4 machines, remainders dropped
    outliers = int(round(0.3 / 0.7 * good))
    assert task.num_clients == good + outliers and int(task.outliers.sum()) == outliers
    assert task.config["cluster_rows"] == sizes
    x = np.asarray(task.data["x"])
    assert x.shape == (good + outliers, 25, 8)
    assert np.bincount(task.true_clusters[:good]).tolist() == [5, 4, 4, 4]
    optima = np.asarray(task.optima)
    bounds = np.cumsum([0] + sizes)
    for k in range(4):  # w*_k is the mean of the whole component
        np.testing.assert_allclose(
            optima[:good][task.true_clusters[:good] == k],
            np.broadcast_to(points[bounds[k] : bounds[k + 1]].mean(0), (sizes[k] // 25, 8)),
            rtol=1e-5,
            atol=1e-5,
        )
    assert np.max(np.linalg.norm(x[:good].mean(1) - optima[:good], axis=1)) < 0.3  # ERMs near their cluster mean
    np.testing.assert_allclose(optima[good:], x[good:].mean(1), rtol=1e-5, atol=1e-4)
    scattered = points[bounds[-1] :]
    for machine in x[good:]:  # rows drawn from the scattered ones, all shifted by one b in {-0.5, 0.5}^D
        nearest = scattered[np.argmin(np.linalg.norm(machine[:, None] - scattered[None], axis=-1), axis=1)]
        shift = machine - nearest
        np.testing.assert_allclose(np.abs(shift), 0.5, atol=1e-4)
        np.testing.assert_allclose(shift, np.broadcast_to(shift[0], shift.shape), atol=1e-4)
    with pytest.raises(ValueError, match="components"):
        yahoo_ltr_task(str(path), gamma=3.0, num_clusters=6, split_size=25)
