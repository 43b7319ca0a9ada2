"""StackOverflow tag prediction by user (Reddi et al. 2021, "Adaptive Federated Optimization": the 10,000 most
frequent words' bag, the 500 most frequent tags, one-versus-rest logistic regression, recall@5).

``data_file`` is TFF's ``stackoverflow.sqlite`` / ``.sqlite.lzma``; ``word_counts`` / ``tag_counts`` its count
files (``stackoverflow.word_count`` / ``stackoverflow.tag_count``, plain or the ``.tar.bz2`` TFF ships; looked
for beside ``data_file`` when not given). Examples are sparse bags of words and tag sets
(:mod:`fedjax_clust.data.stackoverflow`); clients are the users of the ``train`` split with their own ``test``
examples (a later period of the same users), users found only in ``test`` as clients never seen in training
(:mod:`fedjax_clust.core.unseen`); ``max_clients`` a seeded subset and ``max_client_examples`` each user's first
examples (the full training split is 135.8 M examples of 342,477 users, and every algorithm here still keeps a
5 M-parameter model row per client: subsets are the way to run it today).

Loss of one example with logits z [T] and tags y in {0, 1}^T: the mean over the T tags of the binary
cross-entropy, (1/T) sum_t [softplus(z_t) - y_t z_t]. Accuracy: recall@5, the share of the example's
in-vocabulary tags among the 5 largest logits, |top5(z) ∩ tags| / |tags|. Test examples without an
in-vocabulary tag are left out of the test split (recall has no denominator there; counted in the config's
``test_examples_without_tags``); training keeps them (every tag is a negative). Choice (documented): recall@5
is averaged per example within a client and then over clients, as every task's accuracy; Keras's
``Recall(top_k=5)`` pools true positives over all examples instead (a micro-average): the two agree when every
example has the same number of tags.
"""

from __future__ import annotations

from typing import Literal, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.ragged_batch import DEFAULT_BUCKET_RATIO
from fedjax_clust.core.validation import check_choice, check_int, check_real, check_seed
from fedjax_clust.data.data_file import DataFileError, fingerprint, require_path
from fedjax_clust.data.stackoverflow import (
    STACKOVERFLOW_SPLITS,
    TAG_COUNT_FILE,
    WORD_COUNT_FILE,
    default_count_file,
    load_vocabulary,
    read_tff_stackoverflow,
    with_tags,
)
from fedjax_clust.data.tff_sqlite import tff_client_ids
from fedjax_clust.models.names import BAG_OF_WORDS_MODELS
from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.natural import (
    LAYOUTS,
    device_layout,
    file_format,
    partition_config,
    read_partition,
    unseen_task_data,
)

__all__ = ["stackoverflow_task", "recall_at_k", "multi_hot", "RECALL_K"]

RECALL_K = 5


def multi_hot(tags: jax.Array, num_tags: int) -> jax.Array:
    """float32 [T]: 1 at each id of ``tags`` (ids in 0..T-1, and T the padding, which is dropped)."""
    return jnp.zeros(num_tags, jnp.float32).at[tags].max(1.0, mode="drop")


def recall_at_k(logits: jax.Array, tags: jax.Array, k: int = RECALL_K) -> jax.Array:
    """|top_k(logits) ∩ tags| / |tags| of one example (0 when it has no tag)."""
    target = multi_hot(tags, logits.shape[-1])
    _, top = jax.lax.top_k(logits, k)
    return jnp.sum(target[top]) / jnp.maximum(jnp.sum(target), 1.0)


def stackoverflow_task(
    *,
    data_file: str,
    word_counts: Optional[str] = None,
    tag_counts: Optional[str] = None,
    model: Literal["bow-logistic"] = "bow-logistic",
    vocab_size: int = 10000,
    num_tags: int = 500,
    max_clients: Optional[int] = None,
    max_client_examples: Optional[int] = None,
    seed: int = 0,
    layout: Literal["ragged", "padded"] = "ragged",
    bucket_ratio: float = DEFAULT_BUCKET_RATIO,
    unseen_adapt_fraction: float = 0.5,
) -> Task:
    """StackOverflow tag prediction from TFF's SQLite file (see the module docstring).

    Args:
      data_file: TFF's stackoverflow.sqlite(.lzma); docs/guides/real-data.md gives the downloads.
      word_counts: stackoverflow.word_count (or its .tar.bz2); None: looked for beside data_file.
      tag_counts: stackoverflow.tag_count (or its .tar.bz2); None: looked for beside data_file.
      model: "bow-logistic", the bag-of-words logistic regression (Reddi et al.).
      vocab_size: V, the most frequent words of the bag (Reddi et al.: 10,000).
      num_tags: T, the most frequent tags predicted (Reddi et al.: 500).
      max_clients: keep this many users, a random subset drawn with the seed (None: all).
      max_client_examples: keep each user's first this many examples of each split (None: all; TFF's
        max_elements).
      seed: the client subset (max_clients) and nothing else.
      layout: "ragged" (default: no padding to the largest user) or "padded".
      bucket_ratio: ragged layout: largest over smallest client size within a size bucket (default 1.25).
      unseen_adapt_fraction: users only in the test split: the share of each one's examples that choose its
        model by the algorithm's rule, the rest scoring it (default 0.5).
    """
    check_seed(seed)
    check_choice("model", model, BAG_OF_WORDS_MODELS)
    check_choice("layout", layout, LAYOUTS)
    check_real("bucket_ratio", bucket_ratio, low=1.0)
    check_real("unseen_adapt_fraction", unseen_adapt_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    check_int("vocab_size", vocab_size, 1, 1 << 24)
    check_int("num_tags", num_tags, RECALL_K, 1 << 20)
    for name, value in (("max_clients", max_clients), ("max_client_examples", max_client_examples)):
        if value is not None:
            check_int(name, value, 1)
    path = require_path(data_file, "stackoverflow data file")
    if file_format(path) != "tff-sqlite":
        raise DataFileError(f"{path}: StackOverflow is read from TFF's stackoverflow.sqlite or .sqlite.lzma")
    word_counts = word_counts or default_count_file(path, WORD_COUNT_FILE)
    tag_counts = tag_counts or default_count_file(path, TAG_COUNT_FILE)
    vocabulary = load_vocabulary(word_counts, tag_counts, vocab_size, num_tags)

    untagged = {"test": 0}

    def reader(split, keep):
        clients = read_tff_stackoverflow(
            path, STACKOVERFLOW_SPLITS[split], vocabulary, clients=keep, max_client_examples=max_client_examples
        )
        if split != "test":
            return clients
        clients, untagged["test"] = with_tags(clients, num_tags)
        if not clients.num_clients:
            raise DataFileError(f"{path}: no test example has one of the {num_tags} most frequent tags")
        return clients

    ids = lambda split: tff_client_ids(path, STACKOVERFLOW_SPLITS[split])  # noqa: E731
    train, test, info, unseen = read_partition(
        path, "tff-sqlite", reader, ids, True, max_clients=max_clients, test_fraction=0.5, seed=seed
    )
    on_device = device_layout(layout, bucket_ratio)
    unseen_data, unseen_info = unseen_task_data(unseen, unseen_adapt_fraction, on_device)
    from fedjax_clust.models.bag_of_words import make_bag_of_words_model  # Flax, imported when built

    net = make_bag_of_words_model(model, vocab_size, num_tags)

    def logits(params, example):
        return net.logits(params, (example["words"][None], example["weights"][None]))[0]

    def example_loss(params, example):
        z = logits(params, example)
        y = multi_hot(example["tags"], num_tags)
        return jnp.mean(jax.nn.softplus(z) - y * z)

    def example_accuracy(params, example):
        return recall_at_k(logits(params, example), example["tags"])

    data = on_device(train)
    config = dict(
        word_counts=word_counts,
        word_counts_sha256=fingerprint(word_counts),
        tag_counts=tag_counts,
        tag_counts_sha256=fingerprint(tag_counts),
        vocab_size=vocab_size,
        num_tags=num_tags,
        max_clients=max_clients,
        max_client_examples=max_client_examples,
        seed=seed,
        **partition_config(data_file, train, test, layout, bucket_ratio, data),
        model=net.name,
        num_params=net.num_params(),
        word_slots=int(train.arrays["words"].shape[1]),
        mean_distinct_words=round(float(np.mean(np.sum(train.arrays["weights"] > 0, axis=1))), 2),
        test_examples_without_tags=untagged["test"],
        **info,
        **unseen_info,
    )
    return Task(
        name="stackoverflow",
        data=data,
        example_loss=example_loss,
        init_params=net.init,
        config=config,
        test_data=on_device(test),
        example_accuracy=example_accuracy,
        unseen_data=unseen_data,
        true_clusters=None,
        optima=None,
    )
