"""Small files in the real layouts of LEAF's JSON and TFF's SQLite federated datasets, for the readers' tests.

tf.train.Example messages are built with the protobuf runtime from our own declaration of TensorFlow's
documented ``example.proto`` / ``feature.proto`` (not with our decoder's encoder), so the reader is checked
against an independent serializer.
"""

from __future__ import annotations

import json
import lzma
import os
import sqlite3

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _example_classes():
    file = descriptor_pb2.FileDescriptorProto(name="fedjax_clust_test_example.proto", package="tfx", syntax="proto3")

    def message(name, fields, nested=()):
        msg = file.message_type.add(name=name)
        for number, field_name, kind, label, type_name, packed in fields:
            field = msg.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
            if packed is not None:
                field.options.packed = packed
        for entry in nested:
            msg.nested_type.add().CopyFrom(entry)
        return msg

    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    message("BytesList", [(1, "value", _F.TYPE_BYTES, rep, None, None)])
    message("FloatList", [(1, "value", _F.TYPE_FLOAT, rep, None, True)])
    message("Int64List", [(1, "value", _F.TYPE_INT64, rep, None, True)])
    feature = message(
        "Feature",
        [
            (1, "bytes_list", _F.TYPE_MESSAGE, opt, ".tfx.BytesList", None),
            (2, "float_list", _F.TYPE_MESSAGE, opt, ".tfx.FloatList", None),
            (3, "int64_list", _F.TYPE_MESSAGE, opt, ".tfx.Int64List", None),
        ],
    )
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    entry = descriptor_pb2.DescriptorProto(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=opt, type_name=".tfx.Feature")
    entry.options.map_entry = True
    message("Features", [(1, "feature", _F.TYPE_MESSAGE, rep, ".tfx.Features.FeatureEntry", None)], [entry])
    message("Example", [(1, "features", _F.TYPE_MESSAGE, opt, ".tfx.Features", None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tfx.{n}")) for n in ("Example", "Feature")}


EXAMPLE_CLASSES = _example_classes()


def proto_example(features: dict) -> bytes:
    """A tf.train.Example serialized by the protobuf runtime: float arrays -> float_list, integer arrays ->
    int64_list, bytes / list of bytes -> bytes_list."""
    example = EXAMPLE_CLASSES["Example"]()
    for key, value in features.items():
        feature = example.features.feature[key]
        if isinstance(value, bytes):
            feature.bytes_list.value.append(value)
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            feature.bytes_list.value.extend(value)
        else:
            array = np.asarray(value).ravel()
            if np.issubdtype(array.dtype, np.floating):
                feature.float_list.value.extend(array.tolist())
            else:
                feature.int64_list.value.extend(int(v) for v in array)
    return example.SerializeToString()


def parse_proto_example(serialized: bytes):
    example = EXAMPLE_CLASSES["Example"]()
    example.ParseFromString(serialized)
    return example


def emnist_clients(num_clients=4, seed=0, classes=62, sizes=None):
    """{client id: (pixels [n, 28, 28] in [0, 1], labels [n])} of a small EMNIST-like population."""
    rng = np.random.default_rng(seed)
    sizes = sizes or [int(s) for s in rng.integers(3, 9, num_clients)]
    return {
        f"f{c:04d}_{c % 7:02d}": (rng.random((n, 28, 28)).astype(np.float32), rng.integers(0, classes, n))
        for c, n in enumerate(sizes)
    }


def write_tff_sqlite(path, splits: dict, *, compress=False, image_key="pixels", label_key="label", drop=()):
    """A TFF federated SQLite file: ``splits`` = {split name: {client id: (images, labels)}}; ``drop`` names
    tables or columns to leave out (to test the schema checks). With ``compress`` writes ``path + ".lzma"``
    and returns that path."""
    if os.path.exists(path):
        os.remove(path)
    connection = sqlite3.connect(path)
    columns = [c for c in ("split_name", "client_id", "serialized_example_proto") if c not in drop]
    if "examples" not in drop:
        connection.execute(f"CREATE TABLE examples ({', '.join(columns)})")
    if "client_metadata" not in drop:
        connection.execute("CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)")
    for split, clients in splits.items():
        for client, (images, labels) in clients.items():
            if "examples" not in drop:
                for image, label in zip(images, labels):
                    record = {"split_name": split, "client_id": client}
                    record["serialized_example_proto"] = proto_example({image_key: image, label_key: [int(label)]})
                    values = [record[c] for c in columns]
                    connection.execute(f"INSERT INTO examples VALUES ({', '.join('?' * len(columns))})", values)
            if "client_metadata" not in drop:
                connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (client, split, len(labels)))
    connection.commit()
    connection.close()
    if not compress:
        return path
    with open(path, "rb") as source, lzma.open(path + ".lzma", "wb") as target:
        target.write(source.read())
    os.remove(path)
    return path + ".lzma"


def leaf_document(clients: dict) -> dict:
    """One LEAF JSON object of ``clients`` = {user: (images [n, 28, 28], labels [n])}."""
    users = list(clients)
    return {
        "users": users,
        "num_samples": [len(clients[u][1]) for u in users],
        "user_data": {
            u: {"x": clients[u][0].reshape(len(clients[u][1]), -1).tolist(), "y": [int(v) for v in clients[u][1]]}
            for u in users
        },
        "hierarchies": [u.split("_")[0] for u in users],
    }


def write_leaf(folder, train: dict, test: dict = None, per_file=2):
    """LEAF's data folder: ``train/`` (and ``test/``) of .json files, ``per_file`` users each, named as LEAF
    names them."""
    for split, clients in (("train", train), ("test", test)):
        if clients is None:
            continue
        os.makedirs(os.path.join(folder, split), exist_ok=True)
        users = list(clients)
        for k in range(0, len(users), per_file):
            part = {u: clients[u] for u in users[k : k + per_file]}
            name = f"all_data_{k // per_file}_niid_0_keep_0_{split}_9.json"
            with open(os.path.join(folder, split, name), "w") as handle:
                json.dump(leaf_document(part), handle)
    return folder


def split_clients(clients: dict, test_share=0.3):
    """(train, test) dicts: each client's last examples (at least one) go to test."""
    train, test = {}, {}
    for c, (x, y) in clients.items():
        k = max(1, int(round(test_share * len(y))))
        train[c], test[c] = (x[:-k], y[:-k]), (x[-k:], y[-k:])
    return train, test


# ------------------------------------------------------------------------------------ Shakespeare layouts
WORDS = ["thou", "art", "my", "lord", "and", "the", "king", "is", "dead", "o", "what", "a", "rogue", "am", "i"]


def shakespeare_roles(num_roles=4, seed=0, lines=(3, 9)):
    """{role: [lines]}: each role speaks a few lines of words from a small lexicon, some punctuation and one
    character outside LEAF's alphabet (an OOV)."""
    rng = np.random.default_rng(seed)
    roles = {}
    for r in range(num_roles):
        count = int(rng.integers(*lines))
        said = []
        for _ in range(count):
            words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(3, 12)))]
            said.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ",", " \u00e9"]))
        roles[f"THE_PLAY_ROLE{r}"] = said
    return roles


def leaf_shakespeare(roles: dict, length=80):
    """LEAF's Shakespeare examples of ``roles``: every window of ``length`` characters of a role's text (its
    lines joined by spaces) and the character after it (LEAF slides the window one character at a time)."""
    out = {}
    for role, said in roles.items():
        text = " ".join(said)
        xs = [text[i : i + length] for i in range(len(text) - length)]
        ys = [text[i + length] for i in range(len(text) - length)]
        out[role] = (xs, ys)
    return out


def write_leaf_text(folder, train: dict, test: dict = None, per_file=2):
    """LEAF's shakespeare data folder of ``{role: (x strings, y characters)}``."""
    for split, clients in (("train", train), ("test", test)):
        if clients is None:
            continue
        os.makedirs(os.path.join(folder, split), exist_ok=True)
        users = list(clients)
        for k in range(0, len(users), per_file):
            part = users[k : k + per_file]
            document = {
                "users": part,
                "num_samples": [len(clients[u][0]) for u in part],
                "user_data": {u: {"x": list(clients[u][0]), "y": list(clients[u][1])} for u in part},
            }
            with open(os.path.join(folder, split, f"all_data_{k // per_file}_niid_0_keep_0_{split}_9.json"), "w") as f:
                json.dump(document, f)
    return folder


def write_tff_text_sqlite(path, splits: dict):
    """TFF's shakespeare.sqlite: ``splits`` = {split: {role: [lines]}}, one example (``snippets``) per line."""
    if os.path.exists(path):
        os.remove(path)
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE examples (split_name, client_id, serialized_example_proto)")
    connection.execute("CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)")
    for split, roles in splits.items():
        for role, said in roles.items():
            for line in said:
                connection.execute(
                    "INSERT INTO examples VALUES (?, ?, ?)",
                    (split, role, proto_example({"snippets": line.encode("utf-8")})),
                )
            connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (role, split, len(said)))
    connection.commit()
    connection.close()
    return path


STACKOVERFLOW_WORDS = [
    "the",
    "to",
    "i",
    "a",
    ",",
    ".",
    "is",
    "in",
    "it",
    "you",
    "python",
    "java",
    "list",
    "class",
    "how",
    "error",
    "string",
    "function",
    "array",
    "sql",
    "table",
    "css",
    "file",
]
STACKOVERFLOW_TAGS = {
    "python": 40,
    "java": 35,
    "javascript": 30,
    "c#": 25,
    "sql": 20,
    "css": 15,
    "android": 12,
    "vb . net": 9,
    "git": 7,
    "html": 5,
    "php": 3,
    "ruby": 2,
}


def stackoverflow_users(num_users=4, seed=0, examples=(3, 7), prefix="u"):
    """{user: [(tokens, title, tags) bytes triples]} whose words come from STACKOVERFLOW_WORDS plus rare
    words outside any small vocabulary, and whose tags from STACKOVERFLOW_TAGS plus a rare tag."""
    rng = np.random.default_rng(seed)
    words = STACKOVERFLOW_WORDS + ["zzrare", "qqunknown"]
    tags = list(STACKOVERFLOW_TAGS) + ["rare-tag"]
    users = {}
    for u in range(num_users):
        rows = []
        for _ in range(int(rng.integers(*examples))):
            tokens = " ".join(rng.choice(words, int(rng.integers(0, 12)))).encode()
            title = " ".join(rng.choice(words, int(rng.integers(1, 5)))).encode()
            chosen = rng.choice(tags, int(rng.integers(1, 4)), replace=False)
            rows.append((tokens, title, "|".join(chosen).encode()))
        users[f"{prefix}{u * 37 + 11}"] = rows
    return users


def write_stackoverflow(folder, splits: dict, *, archives=False, index=False):
    """TFF's stackoverflow.sqlite (``splits`` = {split: {user: [(tokens, title, tags)]}}, every feature TFF's
    examples have) and the two count files beside it (plain, or the .tar.bz2 archives TFF ships); ``index``
    adds an index on (split_name, client_id). Returns the database path."""
    import tarfile

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "stackoverflow.sqlite")
    if os.path.exists(path):
        os.remove(path)
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, serialized_example_proto BLOB)")
    connection.execute("CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)")
    for split, users in splits.items():
        for user, rows in users.items():
            for tokens, title, tags in rows:
                features = {
                    "tokens": tokens,
                    "title": title,
                    "tags": tags,
                    "type": b"question",
                    "creation_date": b"2010-01-08 09:34:05 UTC",
                    "score": [3],
                }
                connection.execute("INSERT INTO examples VALUES (?, ?, ?)", (split, user, proto_example(features)))
            connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (user, split, len(rows)))
    if index:
        connection.execute("CREATE INDEX examples_by_client ON examples (split_name, client_id)")
    connection.commit()
    connection.close()
    counts = {
        "stackoverflow.word_count": "".join(f"{w} {1000 - i}\n" for i, w in enumerate(STACKOVERFLOW_WORDS)),
        "stackoverflow.tag_count": json.dumps(STACKOVERFLOW_TAGS),
    }
    for name, text in counts.items():
        target = os.path.join(folder, name)
        with open(target, "w") as f:
            f.write(text)
        if archives:
            with tarfile.open(target + ".tar.bz2", "w:bz2") as archive:
                archive.add(target, arcname=name)
            os.remove(target)
    return path


def write_hf_femnist(path, clients: dict, *, test: dict = None, drop=(), path_only=False):
    """``flwrlabs/femnist``'s Parquet layout: columns ``image`` (a ``datasets`` Image, struct {bytes: PNG,
    path}), ``writer_id`` (string), ``hsf_id`` (int64), ``character`` (int64 class). ``clients`` = {writer:
    (images [n, 28, 28] in [0, 1], labels [n])}; a folder ``path`` gets ``data/train-00000-of-00001.parquet``
    (and ``test-...`` with ``test``), else ``path`` is the one file. Pixels are written as 8-bit PNG."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    def table(population):
        images, writers, labels = [], [], []
        for writer, (pixels, ys) in population.items():
            for image, label in zip(pixels, ys):
                buffer = io.BytesIO()
                Image.fromarray(np.round(np.asarray(image) * 255).astype(np.uint8), mode="L").save(buffer, "PNG")
                images.append({"bytes": None if path_only else buffer.getvalue(), "path": f"{writer}.png"})
                writers.append(writer)
                labels.append(int(label))
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        columns = {
            "image": pa.array(images, image_type),
            "writer_id": pa.array(writers, pa.string()),
            "hsf_id": pa.array([0] * len(writers), pa.int64()),
            "character": pa.array(labels, pa.int64()),
        }
        return pa.table({k: v for k, v in columns.items() if k not in drop})

    if path.endswith(".parquet"):
        pq.write_table(table(clients), path)
        return path
    os.makedirs(os.path.join(path, "data"), exist_ok=True)
    pq.write_table(table(clients), os.path.join(path, "data", "train-00000-of-00001.parquet"))
    if test is not None:
        pq.write_table(table(test), os.path.join(path, "data", "test-00000-of-00001.parquet"))
    return path
