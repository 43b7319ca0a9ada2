"""Federated image data: sources (offline digits and MNIST subset, tensorflow-datasets, .npz), cluster
structures (rotation, private labels, inverted pixels, label groups) and padded uneven clients."""

from fedjax_clust.data.federated import (
    FederatedImages,
    clustered_split,
    from_client_lists,
    standardize,
)
from fedjax_clust.data.letor import LetorData, load_svmlight, threshold_clusters
from fedjax_clust.data.npz import (
    load_clients_npz,
    load_pooled_npz,
    npz_layout,
    save_clients_npz,
)
from fedjax_clust.data.partition import (
    holdout,
    pad_clients,
    split_sizes,
    split_train_test,
)
from fedjax_clust.data.sources import (
    OFFLINE_SOURCES,
    ImageSet,
    has_test_split,
    load_digits,
    load_mnist_5k,
    load_source,
    load_tfds,
)
from fedjax_clust.data.transforms import (
    STRUCTURES,
    apply_structure,
    invert,
    rotate,
    shift_labels,
)

__all__ = [
    "has_test_split",
    "FederatedImages",
    "ImageSet",
    "LetorData",
    "load_svmlight",
    "threshold_clusters",
    "OFFLINE_SOURCES",
    "STRUCTURES",
    "apply_structure",
    "clustered_split",
    "from_client_lists",
    "holdout",
    "invert",
    "load_clients_npz",
    "load_digits",
    "load_mnist_5k",
    "load_pooled_npz",
    "load_source",
    "load_tfds",
    "npz_layout",
    "pad_clients",
    "rotate",
    "save_clients_npz",
    "shift_labels",
    "split_sizes",
    "split_train_test",
    "standardize",
]
