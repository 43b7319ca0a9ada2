"""The runs the two-process test compares with one process (shared by the test and its worker)."""

from fedjax_clust import make_task, synthetic_regression

CASES = [
    (
        "federated-clustering",
        dict(learning_rate=0.01, momentum=0.9, quantile=0.3, clustering_steps=4, batch_size=5, track_clusters=True),
    ),
    ("local", dict(learning_rate=0.01, momentum=0.9)),
    ("ifca-1", dict(learning_rate=0.01)),
]


def case_task():
    return synthetic_regression(num_clusters=2, clients_per_cluster=4, samples_per_client=9, dim=5, seed=4)


# a pooled population: each process builds its clients' images from their indices into the shared pool
POOLED_CASE = ("global", dict(learning_rate=0.05, batch_size=4))


def pooled_task():
    return make_task("mnist-population", num_clients=8, model="mlp", hidden=8, max_client_examples=8, seed=0)
