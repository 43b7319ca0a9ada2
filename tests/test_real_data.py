"""Readers of real federated data (LEAF JSON, TFF SQLite) on small files in the real layouts, the natural
tasks built on them, and the command line's one-line errors."""

import json
import os
import sqlite3

import numpy as np
import pytest
from real_layouts import (
    emnist_clients,
    parse_proto_example,
    proto_example,
    split_clients,
    write_leaf,
    write_tff_sqlite,
)

from fedjax_clust.core.batching import padded_batch
from fedjax_clust.data.data_file import DataFileError
from fedjax_clust.data.example_proto import ExampleDecodeError, decode_example, decode_varints, encode_example
from fedjax_clust.data.leaf import leaf_split_files, read_leaf_images
from fedjax_clust.data.tff_sqlite import read_tff_images
from fedjax_clust.tasks import make_task


# ------------------------------------------------------------------------------------- tf.train.Example wire format
def test_decoder_reads_what_the_protobuf_runtime_writes():
    rng = np.random.default_rng(0)
    pixels = rng.random(784).astype(np.float32)
    big = [0, 1, 127, 128, 300, 2**40, -1, -(2**63), 2**63 - 1]
    decoded = decode_example(proto_example({"pixels": pixels, "label": big, "snippets": [b"to be", b"or not"]}))
    np.testing.assert_array_equal(decoded["pixels"], pixels)
    assert decoded["label"].dtype == np.int64 and decoded["label"].tolist() == big
    assert decoded["snippets"] == [b"to be", b"or not"]


def test_encoder_is_read_back_by_the_protobuf_runtime():
    serialized = encode_example({"image": np.arange(-3, 5), "x": np.array([0.5, -2.25], np.float32), "s": "abc"})
    example = parse_proto_example(serialized)
    assert list(example.features.feature["image"].int64_list.value) == list(range(-3, 5))
    assert list(example.features.feature["x"].float_list.value) == [0.5, -2.25]
    assert list(example.features.feature["s"].bytes_list.value) == [b"abc"]
    assert decode_example(serialized)["image"].tolist() == list(range(-3, 5))


def test_unpacked_repeated_scalars_are_accepted():
    # Int64List { value: 5, value: 300 } written unpacked: tag 0x08 per value; FloatList unpacked: tag 0x0d
    int_list = bytes([0x08, 5, 0x08, 0xAC, 0x02])
    float_list = bytes([0x0D]) + np.float32(1.5).tobytes()
    feature_int = bytes([0x1A, len(int_list)]) + int_list
    feature_float = bytes([0x12, len(float_list)]) + float_list

    def entry(key, feature):
        body = bytes([0x0A, len(key)]) + key + bytes([0x12, len(feature)]) + feature
        return bytes([0x0A, len(body)]) + body

    features = entry(b"a", feature_int) + entry(b"b", feature_float)
    decoded = decode_example(bytes([0x0A, len(features)]) + features)
    assert decoded["a"].tolist() == [5, 300] and decoded["b"].tolist() == [1.5]


@pytest.mark.parametrize("blob", [b"\x0a\x05\x0a\x03", b"\x0a", b"\xff" * 12, b"\x0b\x00"])
def test_malformed_examples_raise_a_decode_error(blob):
    with pytest.raises(ExampleDecodeError):
        decode_example(blob)


def test_vectorised_varints_match_the_reference():
    values = np.array([0, 1, 127, 128, 16383, 16384, 2**35 + 7, -5, -(2**63)], np.int64)
    from fedjax_clust.data.example_proto import _encode_varint

    assert decode_varints(b"".join(_encode_varint(int(v)) for v in values)).tolist() == values.tolist()
    with pytest.raises(ExampleDecodeError, match="truncated"):
        decode_varints(b"\x80")


# ----------------------------------------------------------------------------------------------- TFF SQLite
@pytest.fixture()
def emnist_file(tmp_path):
    clients = emnist_clients(4, seed=1)
    train, test = split_clients(clients)
    path = write_tff_sqlite(str(tmp_path / "emnist_all.sqlite"), {"all_train": train, "all_test": test}, compress=True)
    return path, train, test


def test_tff_sqlite_reader_returns_every_client_in_order(emnist_file):
    path, train, _ = emnist_file
    clients = read_tff_images(path, "emnist", "all_train")
    assert list(clients.client_ids) == sorted(train)
    for i, cid in enumerate(clients.client_ids):
        part = clients.client(i)
        np.testing.assert_array_equal(part["x"][..., 0], train[cid][0])
        np.testing.assert_array_equal(part["y"], train[cid][1])
    assert clients.arrays["x"].shape[1:] == (28, 28, 1) and clients.arrays["x"].dtype == np.float32
    assert os.path.exists(path[: -len(".lzma")])  # decompressed once beside the download
    again = read_tff_images(path, "emnist", "all_train", clients={clients.client_ids[1]})
    assert again.client_ids == (clients.client_ids[1],)


def _rewrite(path, sql, params=()):
    connection = sqlite3.connect(path)
    connection.execute(sql, params)
    connection.commit()
    connection.close()


def test_tff_sqlite_reader_refuses_bad_files(tmp_path):
    clients = emnist_clients(2, seed=2, sizes=[3, 4])
    base = str(tmp_path / "e.sqlite")
    cases = []
    with pytest.raises(DataFileError, match="no such file"):
        read_tff_images(str(tmp_path / "missing.sqlite"), "emnist", "all_train")
    (tmp_path / "text.sqlite").write_text("not a database")
    with pytest.raises(DataFileError, match="not an SQLite database"):
        read_tff_images(str(tmp_path / "text.sqlite"), "emnist", "all_train")
    write_tff_sqlite(base, {"all_train": clients}, drop=("client_metadata",))
    with pytest.raises(DataFileError, match="no table client_metadata"):
        read_tff_images(base, "emnist", "all_train")
    write_tff_sqlite(base, {"all_train": clients}, drop=("serialized_example_proto",))
    with pytest.raises(DataFileError, match="lacks column"):
        read_tff_images(base, "emnist", "all_train")
    write_tff_sqlite(base, {"all_train": clients})
    with pytest.raises(DataFileError, match=r"no split 'all_test'; the file has \['all_train'\]"):
        read_tff_images(base, "emnist", "all_test")
    for sql, params, match in [
        ("UPDATE examples SET serialized_example_proto = ? WHERE rowid = 2", (b"\x0a\x09\x0a",), "malformed"),
        (
            "UPDATE examples SET serialized_example_proto = ? WHERE rowid = 2",
            (proto_example({"label": [1]}),),
            "without feature 'pixels'",
        ),
        (
            "UPDATE examples SET serialized_example_proto = ? WHERE rowid = 2",
            (proto_example({"pixels": np.zeros(10, np.float32), "label": [1]}),),
            "has 10 values, expected 784",
        ),
        (
            "UPDATE examples SET serialized_example_proto = ? WHERE rowid = 2",
            (proto_example({"pixels": np.full(784, np.nan, np.float32), "label": [1]}),),
            "non-finite",
        ),
        (
            "UPDATE examples SET serialized_example_proto = ? WHERE rowid = 2",
            (proto_example({"pixels": np.zeros(784, np.float32), "label": [62]}),),
            r"label 62 outside 0..61",
        ),
    ]:
        write_tff_sqlite(base, {"all_train": clients})
        _rewrite(base, sql, params)
        with pytest.raises(DataFileError, match=match) as info:
            read_tff_images(base, "emnist", "all_train")
        assert "\n" not in str(info.value) and base in str(info.value)
        cases.append(match)
    assert len(cases) == 5
    (tmp_path / "cut.sqlite.lzma").write_bytes(b"\xfd7zXZ\x00\x00garbage")
    with pytest.raises(DataFileError, match="LZMA"):
        read_tff_images(str(tmp_path / "cut.sqlite.lzma"), "emnist", "all_train")


# ----------------------------------------------------------------------------------------------------- LEAF
def test_leaf_reader_reads_a_data_folder_file_by_file(tmp_path):
    train, test = split_clients(emnist_clients(5, seed=3))
    folder = write_leaf(str(tmp_path / "data"), train, test)
    files = leaf_split_files(folder)
    assert len(files["train"]) == 3 and len(files["test"]) == 3  # 2 + 2 + 1 users
    clients = read_leaf_images(files["train"])
    assert list(clients.client_ids) == sorted(train)
    for i, cid in enumerate(clients.client_ids):
        np.testing.assert_allclose(clients.client(i)["x"][..., 0], train[cid][0], rtol=1e-6)
        np.testing.assert_array_equal(clients.client(i)["y"], train[cid][1])
    assert leaf_split_files(files["train"][0]) == {"train": [files["train"][0]]}


def _leaf_file(tmp_path, document):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


def test_leaf_reader_refuses_bad_files(tmp_path):
    x = [[0.5] * 784] * 2

    def doc(**changes):
        base = {"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": x, "y": [1, 2]}}}
        base.update(changes)
        return base

    cases = [
        ("{not json", "not valid JSON"),
        (doc(users="a"), "'users' must be a JSON list"),
        ({"users": ["a"], "num_samples": [2]}, "no 'user_data' key"),
        (doc(num_samples=[2, 3]), "1 users but 2 num_samples"),
        (doc(num_samples=[3]), "num_samples says 3, but x has 2"),
        (doc(num_samples=[0], user_data={"a": {"x": [], "y": []}}), "empty client"),
        (doc(user_data={"a": {"x": x, "y": [1, 62]}}), r"label 62 outside 0..61"),
        (doc(user_data={"a": {"x": x, "y": [1, 1.5]}}), "must be an integer"),
        (doc(user_data={"a": {"x": [[0.5] * 783] * 2, "y": [1, 2]}}), r"expected \(2, 784\)"),
        (doc(user_data={"a": {"x": [[float("nan")] * 784] * 2, "y": [1, 2]}}), "non-finite"),
        (doc(user_data={}), "has no user_data"),
        ("[" * 200_000, "JSON nested too deeply to read"),  # a hostile file: RecursionError in the parser
    ]
    for document, match in cases:
        with pytest.raises(DataFileError, match=match) as info:
            read_leaf_images([_leaf_file(tmp_path, document)])
        assert "\n" not in str(info.value)
    good = _leaf_file(tmp_path, doc())
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(doc()))
    with pytest.raises(DataFileError, match="appears again"):
        read_leaf_images([good, str(twice)])
    with pytest.raises(DataFileError, match="no .json files"):
        leaf_split_files(str(tmp_path / "nothing") if os.makedirs(tmp_path / "nothing") is None else "")


# ------------------------------------------------------------------------------------------- natural tasks
def test_femnist_task_from_leaf_and_tff_give_the_same_clients(tmp_path):
    clients = emnist_clients(6, seed=4)
    train, test = split_clients(clients)
    leaf = write_leaf(str(tmp_path / "leaf"), train, test)
    tff = write_tff_sqlite(str(tmp_path / "emnist_all.sqlite"), {"all_train": train, "all_test": test})
    a = make_task("femnist", data_file=leaf, model="mlp")
    b = make_task("femnist", data_file=tff, model="mlp")
    assert a.num_clients == b.num_clients == 6
    for key in ("x", "y", "mask"):
        for part in ("data", "test_data"):
            left, right = padded_batch(getattr(a, part)), padded_batch(getattr(b, part))
            np.testing.assert_allclose(np.asarray(left[key]), np.asarray(right[key]), rtol=1e-6)
    assert a.config["format"] == "leaf-json" and b.config["format"] == "tff-sqlite"
    assert len(a.config["data_file_sha256"]) == 64 and a.config["data_file_sha256"] != b.config["data_file_sha256"]
    sizes = np.array([len(train[c][1]) for c in sorted(train)])
    assert a.config["padding_factor"] == pytest.approx(round(6 * sizes.max() / sizes.sum(), 4))
    assert a.config["train_examples"] == sizes.sum()
    sub = make_task("femnist", data_file=leaf, model="mlp", max_clients=3, seed=5)
    assert sub.num_clients == 3 and sub.config["clients"] == 3
    assert make_task("femnist", data_file=leaf, model="mlp", max_clients=3, seed=5).config == sub.config


def test_femnist_task_counts_clients_missing_from_a_split(tmp_path):
    clients = emnist_clients(4, seed=6)
    train, test = split_clients(clients)
    first = sorted(train)[0]
    del test[first]  # a writer without test examples is left out
    test["x9999_00"] = clients[first]  # a writer seen only at test time
    task = make_task("femnist", data_file=write_leaf(str(tmp_path / "d"), train, test), model="mlp")
    assert task.num_clients == 3
    assert task.config["clients_without_test"] == 1 and task.config["unseen_test_clients"] == 1


def test_femnist_without_test_split_holds_out_a_share(tmp_path):
    train, _ = split_clients(emnist_clients(3, seed=7, sizes=[5, 10, 20]))
    folder = write_leaf(str(tmp_path / "d"), train)
    task = make_task("femnist", data_file=folder, model="mlp", test_fraction=0.25)
    assert np.asarray(task.test_data.sizes).tolist() == [1, 2, 4]  # round(0.25 n), at least 1


def _learnable_writers(num_clients=6, seed=8):
    """Writers whose images carry their label (a bright 4 x 4 block at a class-dependent place, plus noise),
    over 4 of FEMNIST's 62 classes: a few rounds of any algorithm must lower the loss."""
    rng = np.random.default_rng(seed)
    clients = {}
    for c in range(num_clients):
        n = int(rng.integers(12, 30))
        y = rng.integers(0, 4, n)
        x = rng.random((n, 28, 28)).astype(np.float32) * 0.3
        for i, label in enumerate(y):
            x[i, 4 + 5 * label : 8 + 5 * label, 10:14] = 1.0
        clients[f"f{c:04d}_00"] = (x, y)
    return clients


@pytest.mark.parametrize(
    "algorithm, flags",
    [
        ("global", []),  # FedAvg's model for everyone
        ("ifca-1", ["--num-clusters", "2", "--local-steps", "2"]),
        ("federated-clustering", ["--quantile", "0.5", "--clustering-steps", "2"]),
        ("local", []),
        ("ditto", []),
    ],
)
def test_algorithms_learn_on_femnist_layout_data_from_the_command_line(tmp_path, algorithm, flags):
    from fedjax_clust.cli import main

    train, test = split_clients(_learnable_writers())
    folder = write_leaf(str(tmp_path / "data"), train, test)
    out = tmp_path / "out"
    argv = [
        "run",
        "--algorithm",
        algorithm,
        "--task",
        "femnist",
        "--data-file",
        folder,
        "--model",
        "mlp",
        "--hidden",
        "16",
        "--lr",
        "0.1",
        "--batch-size",
        "8",
        "--rounds",
        "6",
        "--eval-every",
        "3",
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["round"] == 6 and rows[-1]["mean_loss"] < 0.9 * rows[0]["mean_loss"]
    config = json.loads((out / "run.json").read_text())["config"]["task_config"]
    assert config["data_file_sha256"] and config["format"] == "leaf-json" and config["clients"] == 6


def test_a_missing_or_malformed_data_file_is_one_error_line(tmp_path, capsys):
    from fedjax_clust.cli import main

    for path in (str(tmp_path / "absent"), _leaf_file(tmp_path, {"users": ["a"], "num_samples": [1]})):
        code = main(
            [
                "run",
                "--algorithm",
                "global",
                "--task",
                "femnist",
                "--data-file",
                path,
                "--rounds",
                "1",
                "--out",
                str(tmp_path / "o"),
                "--no-progress",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_femnist_ragged_and_padded_layouts_train_the_same_models(tmp_path):
    import jax
    from conftest import run_rounds

    import fedjax_clust as fc
    from fedjax_clust.core.ragged_batch import RaggedBatch

    train, test = split_clients(_learnable_writers(num_clients=8, seed=3))
    folder = write_leaf(str(tmp_path / "d"), train, test)
    ragged = make_task("femnist", data_file=folder, model="mlp", hidden=8)
    padded = make_task("femnist", data_file=folder, model="mlp", hidden=8, layout="padded")
    assert isinstance(ragged.data, RaggedBatch) and isinstance(padded.data, dict)
    sizes = np.array([len(train[c][1]) for c in sorted(train)])
    assert ragged.config["layout"] == "ragged" and "layout" not in padded.config
    assert ragged.config["bucket_factor"] == pytest.approx(ragged.data.counted_examples() / sizes.sum(), abs=1e-4)
    assert 1.0 <= ragged.config["bucket_factor"] <= 1.25
    states = [run_rounds(fc.make_algorithm("local", t, learning_rate=0.1), t, 2)[0] for t in (ragged, padded)]
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6),
        states[0].params,
        states[1].params,
    )
    metrics = [jax.jit(t.evaluate)(s.params) for t, s in zip((ragged, padded), states)]  # one program, not ~300 ops
    for key in ("mean_loss", "test_loss", "test_accuracy"):
        assert float(metrics[0][key]) == pytest.approx(float(metrics[1][key]), rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="layout"):
        make_task("femnist", data_file=folder, model="mlp", layout="bucketed")


def _with_unseen_writers(tmp_path, unseen_sizes=(6, 9, 1)):
    train, test = split_clients(_learnable_writers(num_clients=6, seed=11))
    extra = _learnable_writers(num_clients=len(unseen_sizes), seed=12)
    for (name, (x, y)), n in zip(sorted(extra.items()), unseen_sizes):
        test["u" + name[1:]] = (x[:n], y[:n])  # writers found only in the test files
    return write_leaf(str(tmp_path / "d"), train, test)


@pytest.mark.parametrize("layout", ["ragged", "padded"])
def test_writers_only_in_the_test_split_become_unseen_clients(tmp_path, layout):
    from fedjax_clust.core.batching import padded_batch

    task = make_task("femnist", data_file=_with_unseen_writers(tmp_path), model="mlp", hidden=8, layout=layout)
    assert task.num_clients == 6
    config = task.config
    assert config["unseen_test_clients"] == 3 and config["unseen_clients"] == 2
    assert config["unseen_clients_too_small"] == 1 and config["unseen_adapt_fraction"] == 0.5
    adapt, held = (padded_batch(task.unseen_data[k]) for k in ("adapt", "test"))
    # test = round(0.5 n) (half to even): 6 -> 3 adapt + 3 test, 9 -> 5 + 4
    assert np.asarray(adapt["mask"]).sum(axis=1).tolist() == [3, 5]
    assert np.asarray(held["mask"]).sum(axis=1).tolist() == [3, 4]
    capped = make_task("femnist", data_file=_with_unseen_writers(tmp_path / "c"), model="mlp", max_clients=2)
    assert capped.config["unseen_test_clients"] == 2 and capped.num_clients == 2


def test_unseen_clients_take_the_candidate_their_adaptation_examples_choose():
    """Three candidate models of a one-parameter regression, two unseen clients: each client's adaptation
    loss picks a candidate (checked by hand) and its test loss is that candidate's."""
    import jax.numpy as jnp

    from fedjax_clust.core.state import ClientState
    from fedjax_clust.core.unseen import CLIENT_MODELS, GLOBAL_ROW, unseen_metrics

    def example_loss(p, e):
        return 0.5 * (p - e["y"]) ** 2

    def batch(values):
        width = max(len(v) for v in values)
        y = np.zeros((len(values), width), np.float32)
        mask = np.zeros((len(values), width), bool)
        for i, v in enumerate(values):
            y[i, : len(v)], mask[i, : len(v)] = v, True
        return {"y": jnp.asarray(y), "mask": jnp.asarray(mask)}

    adapt, test = batch([[2.9, 3.2], [-1.1]]), batch([[3.0, 2.0, 4.0], [0.0, -2.0]])
    state = ClientState(jnp.array([0.0, 3.0, -1.0]), (), 0, {}, {})
    metrics = unseen_metrics(example_loss, None, CLIENT_MODELS, state, adapt, test)
    expected = [
        np.mean(0.5 * (3.0 - np.array([3.0, 2.0, 4.0])) ** 2),
        np.mean(0.5 * (-1.0 - np.array([0.0, -2.0])) ** 2),
    ]
    assert float(metrics["unseen_test_loss"]) == pytest.approx(np.mean(expected))
    assert float(metrics["unseen_test_loss_std"]) == pytest.approx(np.std(expected))
    first = unseen_metrics(example_loss, None, GLOBAL_ROW, state, adapt, test)  # the global model: x = 0
    assert float(first["unseen_test_loss"]) == pytest.approx(np.mean([np.mean(0.5 * np.array([9, 4, 16])), 1.0]))


@pytest.mark.parametrize(
    "algorithm, flags, rule",
    [
        ("global", [], "global-model"),
        ("ifca-1", ["--num-clusters", "2"], "best-cluster-model"),
        ("ditto", [], "global-model"),
        ("local", [], "best-client-model"),
    ],
)
def test_each_algorithm_scores_unseen_writers_by_its_rule(tmp_path, algorithm, flags, rule):
    from fedjax_clust.cli import main

    out = tmp_path / "out"
    argv = [
        "run",
        "--algorithm",
        algorithm,
        "--task",
        "femnist",
        "--data-file",
        _with_unseen_writers(tmp_path),
        "--model",
        "mlp",
        "--hidden",
        "8",
        "--lr",
        "0.1",
        "--batch-size",
        "4",
        "--rounds",
        "2",
        "--eval-every",
        "2",
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unseen_rule"] == rule
    assert 0.0 <= summary["unseen_test_accuracy"] <= 1.0 and np.isfinite(summary["unseen_test_loss"])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("unseen_test_loss" in row for row in rows)


def test_unseen_clients_never_take_a_masked_candidate():
    import jax.numpy as jnp

    from fedjax_clust.core.state import ClientState
    from fedjax_clust.core.unseen import CLIENT_MODELS, unseen_metrics

    def example_loss(p, e):
        return 0.5 * (p - e["y"]) ** 2

    adapt = {"y": jnp.array([[3.0]]), "mask": jnp.array([[True]])}
    test = {"y": jnp.array([[3.0]]), "mask": jnp.array([[True]])}
    state = ClientState(jnp.array([3.0, 0.0]), (), 0, {}, {})  # client 0 (say, Byzantine) fits best
    free = unseen_metrics(example_loss, None, CLIENT_MODELS, state, adapt, test)
    honest = unseen_metrics(example_loss, None, CLIENT_MODELS, state, adapt, test, jnp.array([False, True]))
    assert float(free["unseen_test_loss"]) == 0.0 and float(honest["unseen_test_loss"]) == pytest.approx(4.5)


def test_femnist_classes_follow_the_data(tmp_path):
    """A LEAF or Parquet FEMNIST file whose labels are all digits builds a 10-class model (TFF's only_digits
    splits do); one with a letter keeps FEMNIST's 62."""
    import jax
    from real_layouts import write_hf_femnist

    def output_width(task):
        return jax.tree.leaves(task.init_params(jax.random.PRNGKey(0)))[-1].shape[-1]

    digits, _ = split_clients(emnist_clients(4, seed=1, classes=10))
    letters, _ = split_clients(emnist_clients(4, seed=1, classes=62))
    assert max(int(y) for _, ys in letters.values() for y in ys) >= 10
    for name, clients, want in (("digits", digits, 10), ("letters", letters, 62)):
        leaf = make_task("femnist", data_file=write_leaf(str(tmp_path / name), clients), model="mlp")
        parquet = make_task(
            "femnist", data_file=write_hf_femnist(str(tmp_path / f"{name}.parquet"), clients), model="mlp"
        )
        for task in (leaf, parquet):
            assert task.config["num_classes"] == want and output_width(task) == want, (name, task.config["format"])
