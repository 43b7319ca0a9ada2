"""Clustered image classification with Flax models: the MNIST and CIFAR tasks of Werner et al.

Data (:mod:`fedjax_clust.data`): pooled images of a source are shuffled and split into K clusters x n_i
clients, each client with its own held-out test examples; cluster k differs by its ``structure``:

* ``mnist-rotation`` — images rotated by k * 90 degrees (paper §4.2, Table 1, "rotation");
* ``mnist-private-label`` — labels T_k(y) = (y + k) mod 10 (paper §4.2, Table 1, "private label");
* ``mnist-inverted`` — cluster 1 sees inverted pixels (SR-FCA's inverted task; K = 2);
* ``cifar10-private-label`` — CIFAR-10 with private labels (thesis Fig. 2.4: 4 clusters x 5 clients);
* ``cifar100-label-groups`` — CIFAR-100, cluster k owns 10 of the 100 classes (thesis Fig. 2.5: 10 x 10);
* ``npz`` — your own clients from a partitioned ``.npz`` file, used as given (:mod:`fedjax_clust.data.npz`).

The ``mnist-*`` tasks read the offline 5,000-image MNIST subset by default (``dataset="mnist-5k"``); any
source works (``"digits"``, ``"tfds:mnist"``, ``"tfds:fashion_mnist"``, ``"tfds:emnist/balanced"``,
``"npz:PATH"``), likewise the CIFAR tasks (default ``"tfds:cifar10"`` / ``"tfds:cifar100"``). ``splits``:
"official" (the default for a source with a test split, the tfds ones) gives the clients their training
examples from the source's training split and their test examples from its test split, as the papers
evaluate; "pooled" (the only choice of the offline subsets and a pooled .npz) pools the examples and holds
out ``test_fraction`` of each client's. Pixels are standardised with the mean and standard deviation of all
training pixels. ``partition`` divides each cluster's examples among its clients by a partitioner
(:mod:`fedjax_clust.data.partitioners`: Dirichlet label skew, shards, quantity skew). ``size_sigma`` > 0 gives clients
uneven (log-normal) sizes, alone or with ``partition="dirichlet:ALPHA"`` (each client's label mix then drawn
from Dir(alpha), Acar et al. 2021's unbalanced Dirichlet), stored padded with a mask that every loss,
minibatch draw and metric respects.

Model: a built-in Flax model by name (:mod:`fedjax_clust.models.zoo`) or your own
:class:`~fedjax_clust.models.Model` (e.g. ``from_nnx(lambda rngs: MyNet(rngs=rngs))``). Loss (``loss``):
"cross-entropy" (default), -log softmax(z)_y of the logits z, or "probability", -softmax(z)_y, the negative
probability of the label: what the Werner et al. authors' MNIST scripts train on (their model ends in a
softmax and their loss is ``F.nll_loss`` of its output), for their paper's profile. Initial weights
(``weight_init``): "flax" (default, the layers' LeCun-normal kernels and zero biases) or "torch" (PyTorch's
``nn.Linear`` / ``nn.Conv2d`` defaults, what the authors' scripts start from;
:mod:`fedjax_clust.models.weight_init`). Every task exposes ``features`` and ``logits`` and per-client test
data, so every algorithm (kNN-Per included) runs on it;
``evaluate`` reports test accuracy and loss, with their spread.
"""

from __future__ import annotations

from functools import partial
from typing import Literal, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_clust.core.host_rows import builds_rows
from fedjax_clust.core.option_groups import option_group, take_legacy
from fedjax_clust.core.ragged_batch import RaggedBatch
from fedjax_clust.core.validation import check_choice, check_int, check_seed
from fedjax_clust.data import (
    FederatedImages,
    clustered_split,
    has_test_split,
    load_clients_npz,
    load_source,
    standardize,
)
from fedjax_clust.data.partitioners import parse_partition
from fedjax_clust.data.pooled import pooled_clients
from fedjax_clust.models import Model
from fedjax_clust.models.names import ModelName
from fedjax_clust.models.weight_init import WEIGHT_INITS, apply_weight_init
from fedjax_clust.tasks.base import Task

__all__ = [
    "ClientSizes",
    "ClientSplit",
    "ModelOptions",
    "SourceReading",
    "image_task",
    "federated_image_task",
    "npz_task",
    "population_task",
    "IMAGE_TASKS",
    "SPLIT_IMAGE_TASKS",
    "IMAGE_LOSSES",
]

IMAGE_LOSSES = ("cross-entropy", "probability")


def _model_for(model: Union[str, Model], image_shape, num_classes: int, hidden: int) -> Model:
    if isinstance(model, Model):
        return model
    from fedjax_clust.models.zoo import make_model  # Flax, imported when a model is built

    return make_model(model, image_shape, num_classes, hidden=hidden)  # refuses unknown names


def federated_image_task(
    data: FederatedImages,
    model: Union[str, Model] = "cnn",
    *,
    name: str = "images",
    hidden: int = 200,
    loss: str = "cross-entropy",
    config: Optional[dict] = None,
    weight_init: str = "flax",
) -> Task:
    """A :class:`~fedjax_clust.tasks.base.Task` on already split client data, padded or ragged (``loss``,
    ``weight_init``: see the module docstring)."""
    check_choice("loss", loss, IMAGE_LOSSES)
    check_choice("weight_init", weight_init, tuple(WEIGHT_INITS))
    net = _model_for(model, data.image_shape, data.num_classes, hidden)

    def example_loss(params, example):
        logits = net.logits(params, example["x"][None])[0]
        if loss == "probability":
            return -jax.nn.softmax(logits)[example["y"]]
        return -jax.nn.log_softmax(logits)[example["y"]]

    def to_jax(part):  # a pooled population's arrays stay on the host, where its cohorts are drawn
        if isinstance(part, RaggedBatch) or any(builds_rows(v) for v in part.values()):
            return part
        return {k: jnp.asarray(v) for k, v in part.items()}

    known = bool(np.all(data.clusters >= 0))
    return Task(
        name=name,
        data=to_jax(data.train),
        example_loss=example_loss,
        init_params=apply_weight_init(net.init, weight_init),
        true_clusters=np.asarray(data.clusters) if known else None,
        config={
            **(config or {}),
            "model": net.name,
            "num_classes": data.num_classes,
            "num_params": net.num_params(),
            "loss": loss,
            **({"weight_init": weight_init} if weight_init != "flax" else {}),
        },
        test_data=to_jax(data.test),
        features=net.features,
        logits=net.logits,
    )


@option_group
class ClientSplit:
    """How :func:`image_task` divides each cluster's examples among its clients: its ``clients`` option (an
    option group, :mod:`fedjax_clust.core.option_groups`: ``make_task`` and the command line take its fields by
    name).

    Args:
      test_fraction: share of each client's examples held out as its test set (pooled splits).
      size_sigma: spread of client sizes (0: equal; see :mod:`fedjax_clust.data.partition`).
      partition: how each cluster's examples are divided among its clients: "iid" (near-equal random
        parts, the papers'), "dirichlet:ALPHA" (label skew), "shards:S" (McMahan et al.'s S label-sorted shards
        per client), "lognormal:SIGMA" or "power-law:A" (quantity skew); see partitioners.
    """

    test_fraction: float = 0.2
    size_sigma: float = 0.0
    partition: str = "iid"


@option_group
class SourceReading:
    """How :func:`image_task` reads its image source: its ``reading`` option (an option group).

    Args:
      data_dir: tensorflow-datasets' data directory.
      max_examples: use only the first ``max_examples`` examples of each split read (reduced-size runs).
      splits: "official" (clients' training examples from the source's training split, test examples from its
        test split) or "pooled" (both pooled, test_fraction of each client's held out); None: official where
        the source has a test split (tfds), else pooled.
    """

    data_dir: Optional[str] = None
    max_examples: Optional[int] = None
    splits: Optional[Literal["official", "pooled"]] = None


@option_group
class ModelOptions:
    """The built-in model's options of :func:`image_task`: its ``model_options`` option (an option group).

    Args:
      hidden: hidden width of the ``mlp`` model.
      loss: "cross-entropy" or "probability" (minus the label's softmax probability, the Werner et al.
        authors' training loss), see the module docstring.
      weight_init: the model's initial weights: "flax" (the layers' own: LeCun-normal kernels, zero biases) or
        "torch" (PyTorch's nn.Linear / nn.Conv2d defaults, U(+-1/sqrt(fan_in)) kernels and biases, as the
        papers' PyTorch code); see fedjax_clust.models.weight_init.
    """

    hidden: int = 200
    loss: Literal["cross-entropy", "probability"] = "cross-entropy"
    weight_init: Literal["flax", "torch"] = "flax"


def image_task(
    *,
    structure: str,
    dataset: str = "mnist-5k",
    model: Union[ModelName, Model] = "cnn",
    num_clusters: int = 4,
    clients_per_cluster: int = 10,
    clients: ClientSplit = ClientSplit(),
    reading: SourceReading = SourceReading(),
    model_options: ModelOptions = ModelOptions(),
    seed: int = 0,
    name: Optional[str] = None,
    **legacy,
) -> Task:
    """A clustered image task (see the module docstring).

    Args:
      structure: "rotation", "private-label", "inverted" or "label-groups".
      dataset: the image source ("mnist-5k", "digits", "tfds:<name>", "npz:<path>").
      model: a built-in model name or a :class:`~fedjax_clust.models.Model`.
      num_clusters, clients_per_cluster: K and n_i (N = K n_i clients).
      clients: how each cluster's examples are divided among its clients, a :class:`ClientSplit`
        (test_fraction, size_sigma, partition).
      reading: how the source is read, a :class:`SourceReading` (data_dir, max_examples, splits).
      model_options: the built-in model's options, a :class:`ModelOptions` (hidden, loss, weight_init).
      seed: the split (shuffle, cluster and client assignment) and nothing else; the model's initial
        parameters come from the run's seed.
      legacy: the deprecated keywords of the three groups' fields (fedjax-clust 0.3.0: ``clients`` /
        ``reading`` / ``model_options``).
    """
    clients, reading, model_options = take_legacy(
        "image_task", legacy, clients=clients, reading=reading, model_options=model_options
    )
    test_fraction, size_sigma, partition = clients.test_fraction, clients.size_sigma, clients.partition
    data_dir, max_examples, splits = reading.data_dir, reading.max_examples, reading.splits
    hidden, loss, weight_init = model_options.hidden, model_options.loss, model_options.weight_init
    check_seed(seed)
    if max_examples is not None:
        check_int("max_examples", max_examples)
    resolved = resolve_splits(dataset, splits)
    if resolved == "official":
        pooled = load_source(dataset, data_dir=data_dir, limit=max_examples, split="train")
        test = load_source(dataset, data_dir=data_dir, limit=max_examples, split="test")
    else:
        pooled, test = load_source(dataset, data_dir=data_dir, limit=max_examples), None
    data = standardize(
        clustered_split(
            pooled,
            structure=structure,
            num_clusters=num_clusters,
            clients_per_cluster=clients_per_cluster,
            test_fraction=test_fraction,
            size_sigma=size_sigma,
            seed=seed,
            test_images=test,
            partition=partition,
        )
    )
    config = dict(
        structure=structure,
        dataset=dataset,
        num_clusters=num_clusters,
        clients_per_cluster=clients_per_cluster,
        test_fraction=test_fraction,
        size_sigma=size_sigma,
        max_examples=max_examples,
        hidden=hidden,
        splits=resolved,
        seed=seed,
    )
    if partition != "iid":  # recorded when used (older runs' configs stay as they were)
        config["partition"] = str(parse_partition(partition))
    return federated_image_task(
        data,
        model,
        name=name or f"images-{structure}",
        hidden=hidden,
        loss=loss,
        config=config,
        weight_init=weight_init,
    )


def resolve_splits(dataset: str, splits: Optional[str]) -> str:
    """``splits`` checked against the source: None is "official" where it has a test split, else "pooled";
    "official" for a source without one is refused."""
    if splits is None:
        return "official" if has_test_split(dataset) else "pooled"
    check_choice("splits", splits, ("official", "pooled"))
    if splits == "official" and not has_test_split(dataset):
        raise ValueError(
            f"source {dataset!r} has no official test split (one pool of examples): use splits='pooled', which "
            "holds out test_fraction of each client's examples"
        )
    return splits


def npz_task(
    *,
    path: str,
    model: Union[ModelName, Model] = "cnn",
    test_fraction: float = 0.2,
    hidden: int = 200,
    allow_nonfinite: bool = False,
    seed: int = 0,
    layout: Literal["ragged", "padded"] = "ragged",
) -> Task:
    """Your own clients from a partitioned ``.npz`` (layouts 2 and 3 of :mod:`fedjax_clust.data.npz`).

    Args:
      path: the partitioned .npz file of your clients.
      model: a built-in model name (``fedjax_clust.models.MODELS``) or a Model.
      test_fraction: share of each client's examples held out as its test set (pooled splits).
      hidden: hidden width of the mlp model.
      allow_nonfinite: keep NaN / infinite pixels (refused by default, naming the client): for a file made to
        simulate faulty clients, whose non-finite values then reach their own client's model only.
      layout: "ragged" (every client's examples flat, as the natural-data readers keep them) or "padded" (every
        client padded to the largest); full passes train the same models in both.
    """
    check_seed(seed)
    data = load_clients_npz(path, test_fraction=test_fraction, allow_nonfinite=allow_nonfinite, layout=layout)
    data = standardize(data)
    config = dict(path=path, test_fraction=test_fraction, hidden=hidden, seed=seed, layout=layout)
    if allow_nonfinite:
        config["allow_nonfinite"] = True
    return federated_image_task(data, model, name="npz", hidden=hidden, config=config)


@option_group
class ClientSizes:
    """The clients' sizes of :func:`population_task`: its ``sizes`` option (an option group,
    :mod:`fedjax_clust.core.option_groups`: ``make_task`` and the command line take its fields by name).

    Args:
      mean_examples, size_sigma: client sizes are log-normal with this mean and sigma (LEAF-like).
      max_client_examples: the largest client (sizes are clipped; clients are stored padded to it).
      test_examples: each client's test images, from a test pool no client trains on.
    """

    mean_examples: float = 32.0
    size_sigma: float = 0.5
    max_client_examples: int = 64
    test_examples: int = 8


def population_task(
    *,
    num_clients: int = 1000,
    structure: Literal["rotation", "private-label", "inverted"] = "rotation",
    num_clusters: int = 4,
    dataset: str = "mnist-5k",
    model: Union[ModelName, Model] = "cnn",
    sizes: ClientSizes = ClientSizes(),
    hidden: int = 200,
    data_dir: Optional[str] = None,
    loss: Literal["cross-entropy", "probability"] = "cross-entropy",
    seed: int = 0,
    **legacy,
) -> Task:
    """A population of clients indexing one shared pool of images (:mod:`fedjax_clust.data.pooled`): client i
    holds the indices of its examples, and its cluster's view of them (``structure``) is built when its cohort
    is asked for, so 10^6 clients cost their indices, labels and masks (0.65 GB at 64 + 8 examples each)
    where their images would take 200 GB. A run whose population fits the device-memory budget builds every
    client's images once; a larger one streams (``Placement(client_rows="host")`` or a ``device_memory`` budget, with
    partial participation), building each cohort's images on the device from their indices.

    Args:
      num_clients: N.
      structure: how cluster k sees the pool: "rotation" (k x 90 degrees), "private-label" ((y + k) mod C) or
        "inverted" (K = 2).
      num_clusters: K; clients form K contiguous blocks.
      dataset: the pool's source ("mnist-5k", the offline default; "digits", "tfds:<name>", "npz:<path>").
      model: a built-in model name (``leaf-cnn``: LEAF's FEMNIST CNN) or a Model.
      sizes: the clients' sizes, a :class:`ClientSizes` (mean_examples, size_sigma, max_client_examples,
        test_examples).
      hidden: hidden width of the ``mlp`` model.
      data_dir: tensorflow-datasets' data directory.
      loss: "cross-entropy" or "probability" (see the module docstring).
      seed: the population's draw (sizes, windows of the pool, test pool) and nothing else.
      legacy: the deprecated keywords of ``sizes``' fields (fedjax-clust 0.3.0).
    """
    (sizes,) = take_legacy("population_task", legacy, sizes=sizes)
    mean_examples, size_sigma = sizes.mean_examples, sizes.size_sigma
    max_client_examples, test_examples = sizes.max_client_examples, sizes.test_examples
    pool = load_source(dataset, data_dir=data_dir)
    data = pooled_clients(
        pool,
        num_clients=num_clients,
        structure=structure,
        num_clusters=num_clusters,
        mean_examples=mean_examples,
        size_sigma=size_sigma,
        max_examples=max_client_examples,
        test_examples=test_examples,
        seed=seed,
    )
    config = dict(
        num_clients=num_clients,
        structure=structure,
        num_clusters=num_clusters,
        dataset=dataset,
        mean_examples=mean_examples,
        size_sigma=size_sigma,
        max_client_examples=max_client_examples,
        test_examples=test_examples,
        hidden=hidden,
        seed=seed,
    )
    return federated_image_task(data, model, name="mnist-population", hidden=hidden, loss=loss, config=config)


IMAGE_TASKS = {
    "mnist-rotation": partial(image_task, structure="rotation", name="mnist-rotation"),
    "mnist-private-label": partial(image_task, structure="private-label", name="mnist-private-label"),
    "mnist-inverted": partial(image_task, structure="inverted", num_clusters=2, name="mnist-inverted"),
    "cifar10-private-label": partial(
        image_task,
        structure="private-label",
        dataset="tfds:cifar10",
        model="vgg16",
        num_clusters=4,
        clients_per_cluster=5,
        name="cifar10-private-label",
    ),
    "cifar100-label-groups": partial(
        image_task,
        structure="label-groups",
        dataset="tfds:cifar100",
        model="vgg8",
        num_clusters=10,
        clients_per_cluster=10,
        name="cifar100-label-groups",
    ),
    "npz": npz_task,
    "mnist-population": population_task,
}
# the image tasks that split a pooled source into clusters (not "npz", whose clients come as given, nor the
# population indexing a pool)
SPLIT_IMAGE_TASKS = tuple(name for name in IMAGE_TASKS if name not in ("npz", "mnist-population"))
