"""Shakespeare: the character vocabulary and windows, LEAF's and TFF's files in their real layouts, the
char-LSTM against a float64 NumPy LSTM, and algorithms learning next characters from the command line."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from real_layouts import leaf_shakespeare, shakespeare_roles, write_leaf_text, write_tff_text_sqlite

from fedjax_clust.core.batching import padded_batch
from fedjax_clust.data.data_file import DataFileError
from fedjax_clust.data.leaf import leaf_split_files, read_leaf_text
from fedjax_clust.data.text import BOS, EOS, LEAF_ALPHABET, OOV, PAD, VOCAB_SIZE, encode, leaf_windows, snippet_windows
from fedjax_clust.data.tff_sqlite import read_tff_text
from fedjax_clust.models.sequence import make_sequence_model
from fedjax_clust.tasks import make_task


def decode(ids):
    return "".join(LEAF_ALPHABET[i - 4] if i >= 4 else "<%d>" % i for i in ids)


def test_vocabulary_and_windows():
    assert VOCAB_SIZE == 84 and len(set(LEAF_ALPHABET)) == 80
    assert decode(encode("Thou art!")) == "Thou art!" and encode("\u00e9x")[0] == OOV
    x, y = leaf_windows(["abcd", "bcde"], ["e", "f"])
    assert decode(x[1]) == "bcde" and decode(y[1]) == "cdef"  # y: x shifted by one, LEAF's label last
    x, y = snippet_windows(["To be", "or not"], 4)
    stream = [BOS, *encode("To be"), EOS, BOS, *encode("or not"), EOS]
    assert x.shape == y.shape == (4, 4)
    assert x.ravel()[: len(stream)].tolist() == stream[:16] and y[0].tolist() == stream[1:5]
    assert (y[-1] == PAD).any() and (y[:, 0] != PAD).all()  # every window has a target


def test_leaf_and_tff_readers_keep_each_roles_text(tmp_path):
    roles = shakespeare_roles(3, seed=1)
    folder = write_leaf_text(str(tmp_path / "leaf"), leaf_shakespeare(roles))
    clients = read_leaf_text(leaf_split_files(folder)["train"])
    assert clients.client_ids == tuple(sorted(roles))
    first = clients.client(0)
    text = " ".join(roles[clients.client_ids[0]])
    assert decode(first["x"][0]) == text[:80].replace("\u00e9", "<1>")
    assert decode(first["y"][-1])[-1] == text[-1] or text[-1] == "\u00e9"
    tff = read_tff_text(write_tff_text_sqlite(str(tmp_path / "s.sqlite"), {"train": roles}), "train")
    assert tff.client_ids == tuple(sorted(roles))
    role = tff.client_ids[1]
    ids = np.asarray(tff.client(1)["x"]).ravel()
    expected = np.concatenate([np.concatenate([[BOS], encode(s), [EOS]]) for s in roles[role]])
    assert ids[: len(expected)].tolist() == expected.tolist()


def test_bad_text_files_are_one_line_errors(tmp_path):
    roles = leaf_shakespeare(shakespeare_roles(2, seed=2))
    role = next(iter(roles))
    roles[role] = (roles[role][0][:-1] + ["short"], roles[role][1])
    folder = write_leaf_text(str(tmp_path / "bad"), roles)
    with pytest.raises(DataFileError, match="string of 80 characters"):
        read_leaf_text(leaf_split_files(folder)["train"])
    path = write_tff_text_sqlite(str(tmp_path / "t.sqlite"), {"train": shakespeare_roles(2)})
    with pytest.raises(DataFileError, match="no split 'test'"):
        read_tff_text(path, "test")


def numpy_lstm(params, ids):
    """The char-LSTM in float64 NumPy: embedding, two LSTM layers (gates i, f, g, o of one dense map of
    [x_t, h_{t-1}], forget bias 1), the output layer."""
    h = params["embed"]["embedding"].astype(np.float64)[ids]
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for k in ("0", "1"):
        kernel = params["layers"][k]["gates"]["kernel"].astype(np.float64)
        bias = params["layers"][k]["gates"]["bias"].astype(np.float64)
        units = kernel.shape[1] // 4
        state, cell, out = np.zeros(units), np.zeros(units), []
        for x_t in h:
            z = np.concatenate([x_t, state]) @ kernel + bias
            i, f, g, o = np.split(z, 4)
            cell = sigmoid(f + 1.0) * cell + sigmoid(i) * np.tanh(g)  # BasicLSTMCell's forget bias
            state = sigmoid(o) * np.tanh(cell)
            out.append(state)
        h = np.stack(out)
    return h @ params["out"]["kernel"].astype(np.float64) + params["out"]["bias"].astype(np.float64)


def test_char_lstm_is_the_lstm_of_its_docstring():
    net = make_sequence_model("char-lstm", VOCAB_SIZE, hidden=16)
    params = jax.tree.map(np.asarray, net.init(jax.random.PRNGKey(3)))
    ids = np.random.default_rng(0).integers(0, VOCAB_SIZE, (2, 12))
    with jax.default_matmul_precision("highest"):
        got = np.asarray(net.logits(params, jnp.asarray(ids)))
    for b in range(2):
        np.testing.assert_allclose(got[b], numpy_lstm(params, ids[b]), rtol=2e-4, atol=2e-5)
    assert make_sequence_model("char-lstm", VOCAB_SIZE).num_params() == 818_932


@pytest.mark.parametrize("fmt", ["leaf", "tff"])
def test_the_task_reads_both_formats_and_scores_positions(tmp_path, fmt):
    train, test = shakespeare_roles(4, seed=5), shakespeare_roles(5, seed=6)
    test = {role: test[f"THE_PLAY_ROLE{i}"] for i, role in enumerate(list(train) + ["THE_PLAY_UNSEEN"])}
    if fmt == "leaf":
        path = write_leaf_text(str(tmp_path / "d"), leaf_shakespeare(train), leaf_shakespeare(test))
    else:
        path = write_tff_text_sqlite(str(tmp_path / "s.sqlite"), {"train": train, "test": test})
    task = make_task("shakespeare", data_file=path, lstm_hidden=8)
    assert task.num_clients == 4 and task.config["unseen_test_clients"] == 1 and task.unseen_data is not None
    assert task.config["format"] == ("leaf-json" if fmt == "leaf" else "tff-sqlite")
    batch = padded_batch(task.data)
    example = {"x": batch["x"][0, 0], "y": batch["y"][0, 0]}
    params = task.init_params(jax.random.PRNGKey(0))
    logits = make_sequence_model("char-lstm", VOCAB_SIZE, hidden=8).logits(params, example["x"][None])[0]
    nll = -jax.nn.log_softmax(logits)[jnp.arange(80), example["y"]]
    valid = np.asarray(example["y"]) != PAD
    assert float(task.example_loss(params, example)) == pytest.approx(float(nll[valid].mean()), rel=1e-5)
    last = make_task("shakespeare", data_file=path, lstm_hidden=8, positions="last")
    final = np.flatnonzero(valid)[-1]
    assert float(last.example_loss(params, example)) == pytest.approx(float(nll[final]), rel=1e-5)
    accuracy = float(task.example_accuracy(params, example))
    assert accuracy == pytest.approx(float((jnp.argmax(logits, -1) == example["y"])[valid].mean()))


@pytest.mark.parametrize("algorithm, flags", [("global", []), ("ifca-1", ["--num-clusters", "2"]), ("local", [])])
def test_algorithms_learn_next_characters_from_the_command_line(tmp_path, algorithm, flags):
    from fedjax_clust.cli import main

    roles = shakespeare_roles(4, seed=7, lines=(6, 10))
    path = write_tff_text_sqlite(str(tmp_path / "s.sqlite"), {"train": roles, "test": shakespeare_roles(4, seed=8)})
    out = tmp_path / "out"
    argv = [
        "run",
        "--algorithm",
        algorithm,
        "--task",
        "shakespeare",
        "--data-file",
        path,
        "--lstm-hidden",
        "16",
        "--lr",
        "1.0",
        "--batch-size",
        "4",
        "--rounds",
        "8",
        "--eval-every",
        "4",
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["mean_loss"] < 0.9 * rows[0]["mean_loss"]
    assert 0.0 <= rows[-1]["test_accuracy"] <= 1.0


def test_the_char_lstm_bench_counts_each_windows_flops(tmp_path):
    from fedjax_clust.bench.sequence import lstm_window_flops
    from fedjax_clust.cli import main

    # forward multiply-adds per position: (8 + 256) 1024 + (256 + 256) 1024 + 256 x 84; x 2 x 80 positions x 3
    assert lstm_window_flops(80, 8, 256, 2, 84) == 3 * 2 * 80 * (264 * 1024 + 512 * 1024 + 256 * 84)
    assert main(["bench", "--suite", "char-lstm", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    row = report["rows"][0]
    assert row["flops"] == row["clients"] * report["batch_size"] * report["flops_per_window"]
    assert row["achieved_gflops"] == pytest.approx(row["flops"] / row["seconds"] / 1e9)
    assert "| 2 |" in (tmp_path / "report.md").read_text()
