"""Parquet files with a client-id column (flwrlabs/femnist's Hugging Face layout, written here with pyarrow and
Pillow): the same writers as from TFF's file, one-line errors, and a run from the command line."""

import json
import sys

import numpy as np
import pytest
from real_layouts import emnist_clients, split_clients, write_hf_femnist, write_tff_sqlite

from fedjax_clust.core.batching import padded_batch
from fedjax_clust.data.data_file import DataFileError
from fedjax_clust.data.parquet import (
    FEMNIST_PARQUET_COLUMNS,
    parquet_client_ids,
    parquet_split_files,
    read_parquet_images,
)
from fedjax_clust.tasks import make_task

pytest.importorskip("pyarrow")


def eight_bit(clients):
    """The same writers with pixels on the 8-bit grid PNG stores exactly."""
    return {c: (np.round(x * 255).astype(np.float32) / 255, y) for c, (x, y) in clients.items()}


def test_parquet_and_tff_files_of_the_same_writers_give_the_same_task(tmp_path):
    train, test = split_clients(eight_bit(emnist_clients(5, seed=11)))
    folder = write_hf_femnist(str(tmp_path / "hf"), train, test=test)
    tff = write_tff_sqlite(str(tmp_path / "emnist_all.sqlite"), {"all_train": train, "all_test": test})
    a = make_task("femnist", data_file=folder, model="mlp")
    b = make_task("femnist", data_file=tff, model="mlp")
    assert a.config["format"] == "parquet" and a.num_clients == b.num_clients == 5
    for part in ("data", "test_data"):
        left, right = padded_batch(getattr(a, part)), padded_batch(getattr(b, part))
        for key in ("x", "y", "mask"):
            np.testing.assert_allclose(np.asarray(left[key]), np.asarray(right[key]), rtol=1e-5, atol=1e-5)
    files = parquet_split_files(folder)
    assert sorted(files) == ["test", "train"]
    assert parquet_client_ids(files["train"], "writer_id") == sorted(train)
    keep = {sorted(train)[1]}
    one = read_parquet_images(files["train"], FEMNIST_PARQUET_COLUMNS, shape=(28, 28, 1), num_classes=62, clients=keep)
    assert one.client_ids == tuple(keep) and np.asarray(one.arrays["y"]).tolist() == list(train[sorted(keep)[0]][1])


def test_split_files_by_name_or_by_folder_below_the_root(tmp_path):
    import shutil

    clients = emnist_clients(2, seed=15)
    source = write_hf_femnist(str(tmp_path / "test_source"), clients, test=clients)  # "test_" above the root
    for split in ("train", "test", "validation"):
        (tmp_path / "test_hub" / "default" / split).mkdir(parents=True)
        name = "train" if split == "validation" else split
        shutil.copy(
            f"{source}/data/{name}-00000-of-00001.parquet", tmp_path / "test_hub" / "default" / split / "0000.parquet"
        )
    files = parquet_split_files(str(tmp_path / "test_hub"))
    assert {k: [f.split("/")[-2] for f in v] for k, v in files.items()} == {
        "train": ["train"],
        "test": ["test"],
        "validation": ["validation"],
    }
    assert list(parquet_split_files(f"{source}/data/train-00000-of-00001.parquet")) == ["train"]


def test_one_parquet_file_without_a_test_split_holds_out_a_share(tmp_path):
    clients = emnist_clients(3, seed=12, sizes=[5, 10, 20])
    path = write_hf_femnist(str(tmp_path / "train-00000-of-00001.parquet"), clients)
    task = make_task("femnist", data_file=path, model="mlp", test_fraction=0.25)
    assert np.asarray(task.test_data.sizes).tolist() == [1, 2, 5]  # round(0.25 n), at least 1


def test_bad_parquet_files_are_one_line_errors(tmp_path, monkeypatch):
    clients = emnist_clients(2, seed=13)
    cases = [
        (write_hf_femnist(str(tmp_path / "a.parquet"), clients, drop=("writer_id",)), "no column 'writer_id'"),
        (write_hf_femnist(str(tmp_path / "b.parquet"), clients, path_only=True), "stored by path only"),
    ]
    wrong = {c: (x, y + 62) for c, (x, y) in clients.items()}
    cases.append((write_hf_femnist(str(tmp_path / "c.parquet"), wrong), "outside 0..61"))
    (tmp_path / "d.parquet").write_bytes(b"PAR1 not really")
    cases.append((str(tmp_path / "d.parquet"), "not a Parquet file"))
    big = {c: (np.zeros((len(y), 32, 32), np.float32), y) for c, (x, y) in clients.items()}
    cases.append((write_hf_femnist(str(tmp_path / "e.parquet"), big), "an image of 32x32, expected 28x28"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(cases[-1][0])
    labels = pa.array([str(v) for v in table.column("character").to_pylist()])
    pq.write_table(table.set_column(3, "character", labels), str(tmp_path / "f.parquet"))
    cases.append((str(tmp_path / "f.parquet"), "label '.*' is not an integer"))
    for path, message in cases:
        with pytest.raises(DataFileError, match=message):
            make_task("femnist", data_file=path, model="mlp")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataFileError, match="needs pyarrow"):
        make_task("femnist", data_file=cases[-1][0], model="mlp")


def test_femnist_from_parquet_on_the_command_line(tmp_path):
    from fedjax_clust.cli import main

    train, test = split_clients(emnist_clients(4, seed=14, sizes=[12, 16, 9, 20]))
    folder = write_hf_femnist(str(tmp_path / "hf"), train, test=test)
    out = tmp_path / "out"
    argv = [
        "run",
        "--algorithm",
        "global",
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
        "4",
        "--rounds",
        "4",
        "--eval-every",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    config = json.loads((out / "run.json").read_text())["config"]["task_config"]
    assert config["format"] == "parquet" and config["clients"] == 4 and len(config["data_file_sha256"]) == 64
