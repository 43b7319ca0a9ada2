"""StackOverflow tag prediction: TFF's SQLite file and count files in their real layout, the bag of words and tag
sets against a dense float64 rebuild of their definition, the bag-of-words logistic regression and recall@5
against NumPy, and algorithms learning tags from the command line."""

import json
import os
import sqlite3
import tarfile

import jax
import numpy as np
import pytest
from real_layouts import (
    STACKOVERFLOW_TAGS,
    STACKOVERFLOW_WORDS,
    proto_example,
    stackoverflow_users,
    write_stackoverflow,
)

from fedjax_clust.core.batching import padded_batch
from fedjax_clust.data.data_file import DataFileError
from fedjax_clust.data.example_proto import ExampleDecodeError, decode_example
from fedjax_clust.data.stackoverflow import (
    load_vocabulary,
    read_tag_counts,
    read_tff_stackoverflow,
    read_word_counts,
    with_tags,
)
from fedjax_clust.data.tff_sqlite import metadata_examples
from fedjax_clust.models.bag_of_words import make_bag_of_words_model
from fedjax_clust.tasks import make_task
from fedjax_clust.tasks.stackoverflow import recall_at_k


def small_vocabulary(folder, words=5, tags=5):
    counts = (str(folder / "stackoverflow.word_count"), str(folder / "stackoverflow.tag_count"))
    return load_vocabulary(*counts, words, tags)


def dense_example(tokens: bytes, title: bytes, tags: bytes, vocab: list, tag_vocab: list):
    """The definition, densely in float64: the mean over the words of one-hot vectors of length V + 1 (the
    last an out-of-vocabulary slot), that slot dropped; the multi-hot of the in-vocabulary tags."""
    words = (tokens + b" " + title).split()
    onehot = np.zeros((max(len(words), 1), len(vocab) + 1))
    for i, word in enumerate(words):
        onehot[i, vocab.index(word) if word in vocab else len(vocab)] = 1.0
    bag = onehot.mean(axis=0)[: len(vocab)] if words else np.zeros(len(vocab))
    target = np.zeros(len(tag_vocab))
    for tag in tags.split(b"|"):
        if tag in tag_vocab:
            target[tag_vocab.index(tag)] = 1.0
    return bag, target


def densified(clients, i, num_words, num_tags):
    rows = clients.client(i)
    bags = np.zeros((len(rows["words"]), num_words))
    for r, (ids, weights) in enumerate(zip(rows["words"], rows["weights"])):
        np.add.at(bags[r], ids, weights)
    targets = np.zeros((len(rows["tags"]), num_tags + 1))
    for r, tags in enumerate(rows["tags"]):
        targets[r, tags] = 1.0
    return bags, targets[:, :num_tags]


@pytest.mark.parametrize("archives, index", [(False, False), (True, True)])
def test_examples_are_the_bags_and_tags_of_their_definition(tmp_path, archives, index):
    users = stackoverflow_users(5, seed=1)
    path = write_stackoverflow(str(tmp_path), {"train": users}, archives=archives, index=index)
    suffix = ".tar.bz2" if archives else ""
    vocabulary = load_vocabulary(
        str(tmp_path / f"stackoverflow.word_count{suffix}"), str(tmp_path / f"stackoverflow.tag_count{suffix}"), 15, 6
    )
    vocab = [w.encode() for w in STACKOVERFLOW_WORDS[:15]]
    tag_vocab = sorted(STACKOVERFLOW_TAGS, key=lambda t: -STACKOVERFLOW_TAGS[t])[:6]
    assert list(vocabulary.words) == vocab and list(vocabulary.tags) == [t.encode() for t in tag_vocab]
    clients = read_tff_stackoverflow(path, "train", vocabulary)
    assert clients.client_ids == tuple(sorted(users))
    for i, user in enumerate(clients.client_ids):
        bags, targets = densified(clients, i, 15, 6)
        for row, (tokens, title, tags) in enumerate(users[user]):
            bag, target = dense_example(tokens, title, tags, vocab, [t.encode() for t in tag_vocab])
            np.testing.assert_allclose(bags[row], bag, rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(targets[row], target)
    subset = {clients.client_ids[1], clients.client_ids[3]}
    few = read_tff_stackoverflow(path, "train", vocabulary, clients=subset, max_client_examples=2)
    assert few.client_ids == tuple(sorted(subset)) and few.sizes.tolist() == [2, 2]
    for got, expected in zip(densified(few, 0, 15, 6), densified(clients, 1, 15, 6)):
        np.testing.assert_array_equal(got, expected[:2])  # the client's first two examples


def test_equal_tag_counts_keep_the_files_order_and_bad_count_files_are_one_line_errors(tmp_path):
    (tmp_path / "tags.json").write_text(json.dumps({"b": 1, "a": 5, "c": 1, "d": 5}))
    assert list(read_tag_counts(str(tmp_path / "tags.json"), 3)) == [b"a", b"d", b"b"]
    cases = {
        "words1": ("the 10\nto\n", read_word_counts, 2, "line 2 is not 'word count'"),
        "words2": ("the 10\nthe 9\n", read_word_counts, 2, "repeats the word 'the'"),
        "words3": ("the 10\n", read_word_counts, 2, "fewer than vocab_size 2"),
        "tags1": ("[1, 2]", read_tag_counts, 1, "expected a JSON object"),
        "tags2": ('{"a": -1}', read_tag_counts, 1, "non-negative integer"),
        "tags3": ("{not json", read_tag_counts, 1, "not a JSON file"),
    }
    for name, (text, read, size, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(DataFileError, match=message):
            read(str(tmp_path / name), size)
    with tarfile.open(tmp_path / "other.tar.bz2", "w:bz2") as archive:
        archive.add(tmp_path / "words1", arcname="something_else")
    with pytest.raises(DataFileError, match="has no file stackoverflow.word_count"):
        read_word_counts(str(tmp_path / "other.tar.bz2"), 1)
    with pytest.raises(DataFileError, match="no such file"):
        read_word_counts(str(tmp_path / "missing"), 1)
    (tmp_path / "cut.tar.bz2").write_bytes((tmp_path / "other.tar.bz2").read_bytes()[:40])
    with pytest.raises(DataFileError, match="not a complete tar archive"):
        read_word_counts(str(tmp_path / "cut.tar.bz2"), 1)


def test_a_malformed_example_is_a_one_line_error(tmp_path):
    path = write_stackoverflow(str(tmp_path), {"train": stackoverflow_users(2, seed=2)})
    vocabulary = small_vocabulary(tmp_path)
    connection = sqlite3.connect(path)
    connection.execute("INSERT INTO examples VALUES ('train', 'u11', ?)", (proto_example({"tokens": b"a"}),))
    connection.commit()
    connection.close()
    with pytest.raises(DataFileError, match="client 'u11': an example needs one bytes feature 'tags'"):
        read_tff_stackoverflow(path, "train", vocabulary)
    with pytest.raises(DataFileError, match="no split 'heldout'"):
        read_tff_stackoverflow(path, "heldout", vocabulary)


def test_a_test_only_user_without_tags_and_malformed_metadata(tmp_path):
    train = stackoverflow_users(3, seed=9)
    test = {**stackoverflow_users(3, seed=10), "lonely": [(b"a", b"b", b"rare-tag")]}  # nothing to recall
    path = write_stackoverflow(str(tmp_path), {"train": train, "test": test})
    task = make_task("stackoverflow", data_file=path, vocab_size=18, num_tags=8)
    assert task.config["unseen_test_clients"] == 0 and task.unseen_data is None
    connection = sqlite3.connect(path)
    assert metadata_examples(connection, "train", cap=2) == 6  # each user's first two
    connection.execute("UPDATE client_metadata SET num_examples = -1 WHERE client_id = 'lonely'")
    connection.commit()
    with pytest.raises(DataFileError, match="num_examples -1"):
        metadata_examples(connection, "test")
    connection.execute("CREATE TABLE bare AS SELECT client_id, num_examples FROM client_metadata")
    connection.execute("DROP TABLE client_metadata")
    connection.execute("ALTER TABLE bare RENAME TO client_metadata")
    connection.commit()
    connection.close()
    with pytest.raises(DataFileError, match="client_metadata lacks column"):
        make_task("stackoverflow", data_file=path, vocab_size=18, num_tags=8)
    (tmp_path / "bad.json").write_text('{"\\ud800": 3}')  # a lone surrogate
    with pytest.raises(DataFileError, match="not valid Unicode"):
        read_tag_counts(str(tmp_path / "bad.json"), 1)
    with pytest.raises(ExampleDecodeError, match="not UTF-8"):
        decode_example(b"\x0a\x09\x0a\x07\x0a\x01\xff\x12\x02\x0a\x00")


def test_with_tags_drops_untagged_examples_and_emptied_clients(tmp_path):
    users = {"a": [(b"x", b"y", b"python"), (b"x", b"y", b"rare-tag")], "b": [(b"x", b"y", b"nope")]}
    path = write_stackoverflow(str(tmp_path), {"train": users})
    vocabulary = small_vocabulary(tmp_path)
    kept, dropped = with_tags(read_tff_stackoverflow(path, "train", vocabulary), 5)
    assert kept.client_ids == ("a",) and kept.sizes.tolist() == [1] and dropped == 2


def test_bag_of_words_model_and_recall_match_numpy():
    rng = np.random.default_rng(0)
    net = make_bag_of_words_model("bow-logistic", 30, 8)
    params = net.init(jax.random.PRNGKey(1))
    assert net.num_params() == 30 * 8 + 8
    ids = rng.integers(0, 30, (4, 6)).astype(np.int32)
    weights = rng.random((4, 6)).astype(np.float32)
    weights[:, -2:] = 0.0  # padding slots
    logits = np.asarray(net.logits(params, (ids, weights)))
    bags = np.zeros((4, 30))
    for r in range(4):
        np.add.at(bags[r], ids[r], weights[r].astype(np.float64))
    kernel, bias = (np.asarray(params[k], np.float64) for k in ("kernel", "bias"))
    np.testing.assert_allclose(logits, bags @ kernel + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(net.features(params, (ids, weights))), bags, rtol=1e-6)
    z = np.array([0.1, 3.0, -1.0, 2.0, 5.0, 0.0, 4.0, 1.0], np.float32)  # top 5: ids 4, 6, 1, 3, 7
    assert float(recall_at_k(z, np.array([1, 2, 8, 8]))) == pytest.approx(0.5)  # 8 = padding
    assert float(recall_at_k(z, np.array([4, 7, 3]))) == pytest.approx(1.0)
    assert float(recall_at_k(z, np.array([8, 8]))) == 0.0


def test_the_task_loss_accuracy_and_unseen_users(tmp_path):
    train = stackoverflow_users(4, seed=3)
    test = stackoverflow_users(5, seed=4)  # the fifth user (u159) is only in the test split
    heldout = stackoverflow_users(1, seed=5, prefix="h")
    path = write_stackoverflow(str(tmp_path), {"train": train, "test": test, "heldout": heldout})
    task = make_task("stackoverflow", data_file=path, vocab_size=18, num_tags=8)
    config = task.config
    assert task.num_clients == 4 and config["unseen_test_clients"] == 1 and task.unseen_data is not None
    assert config["num_params"] == 18 * 8 + 8 and config["word_counts"].endswith("stackoverflow.word_count")
    assert config["test_examples"] + config["test_examples_without_tags"] == sum(len(test[u]) for u in list(test)[:4])
    batch = padded_batch(task.data)
    params = task.init_params(jax.random.PRNGKey(0))
    example = {k: batch[k][0, 0] for k in ("words", "weights", "tags")}
    bag = np.zeros(18)
    np.add.at(bag, np.asarray(example["words"]), np.asarray(example["weights"], np.float64))
    z = bag @ np.asarray(params["kernel"], np.float64) + np.asarray(params["bias"], np.float64)
    y = np.zeros(9)
    y[np.asarray(example["tags"])] = 1.0
    y = y[:8]
    expected = np.mean(np.logaddexp(0.0, z) - y * z)
    assert float(task.example_loss(params, example)) == pytest.approx(expected, rel=1e-5)
    top = np.argsort(-z)[:5]
    expected_recall = y[top].sum() / max(y.sum(), 1)
    assert float(task.example_accuracy(params, example)) == pytest.approx(expected_recall)
    with pytest.raises(DataFileError, match="stackoverflow.tag_count"):
        tags = str(tmp_path / "no" / "stackoverflow.tag_count")
        make_task("stackoverflow", data_file=path, vocab_size=18, tag_counts=tags)
    os.remove(tmp_path / "stackoverflow.word_count")
    with pytest.raises(DataFileError, match="stackoverflow.word_count: no such file"):
        make_task("stackoverflow", data_file=path)


@pytest.mark.parametrize("algorithm, flags", [("global", ["--weighting", "examples"]), ("federated-clustering", [])])
def test_algorithms_learn_tags_from_the_command_line(tmp_path, algorithm, flags):
    from fedjax_clust.cli import main

    splits = {"train": stackoverflow_users(6, seed=7, examples=(8, 14)), "test": stackoverflow_users(6, seed=8)}
    path = write_stackoverflow(str(tmp_path / "so"), splits, archives=True)
    out = tmp_path / "out"
    argv = [
        "run",
        "--algorithm",
        algorithm,
        "--task",
        "stackoverflow",
        "--data-file",
        path,
        "--vocab-size",
        "20",
        "--num-tags",
        "10",
        "--lr",
        "1.0",
        "--batch-size",
        "4",
        "--rounds",
        "12",
        "--eval-every",
        "6",
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["mean_loss"] < 0.8 * rows[0]["mean_loss"]
    assert 0.0 <= rows[-1]["test_accuracy"] <= 1.0
    run = json.loads((out / "run.json").read_text())
    assert len(run["config"]["task_config"]["tag_counts_sha256"]) == 64
