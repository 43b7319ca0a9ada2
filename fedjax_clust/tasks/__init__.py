"""Built-in tasks, by registry name."""

from fedjax_clust.core.option_groups import gather
from fedjax_clust.core.registry import Registry
from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.classification import clustered_classification
from fedjax_clust.tasks.counterexamples import (
    IFCA_INIT,
    counterexample_cfl,
    counterexample_ifca,
    counterexample_myopic,
)
from fedjax_clust.tasks.images import (
    IMAGE_TASKS,
    ClientSizes,
    ClientSplit,
    ModelOptions,
    SourceReading,
    federated_image_task,
    image_task,
    npz_task,
)
from fedjax_clust.tasks.letor import components_task, yahoo_ltr_task
from fedjax_clust.tasks.mixture_regression import mixture_regression
from fedjax_clust.tasks.natural import NATURAL_TASKS, cifar100_pachinko_task, femnist_task
from fedjax_clust.tasks.shakespeare import shakespeare_task
from fedjax_clust.tasks.stackoverflow import stackoverflow_task
from fedjax_clust.tasks.synthetic import synthetic_regression

# name -> the function building the task from its keyword options (a registry: ``TASKS.register(fn, name=...)``
# adds one, ``fedjax_clust.tasks`` entry points install one)
TASKS: Registry = Registry("task", group="fedjax_clust.tasks", name_of=None)
for _name, _builder in {
    "synthetic": synthetic_regression,
    "counterexample-myopic": counterexample_myopic,
    "counterexample-ifca": counterexample_ifca,
    "counterexample-cfl": counterexample_cfl,
    "classification": clustered_classification,
    "mixture-regression": mixture_regression,
    **IMAGE_TASKS,
    **NATURAL_TASKS,
    "shakespeare": shakespeare_task,
    "stackoverflow": stackoverflow_task,
}.items():
    TASKS.register(_builder, name=_name)
del _name, _builder
# the command line's names of task keywords that would be ambiguous beside the algorithms' options (the
# algorithms' K is --num-clusters) or terse on a command line; every other keyword's flag is its name with dashes
TASK_FLAGS = {"num_clusters": "clusters", "samples_per_client": "samples", "num_clients": "clients", "path": "npz-path"}

__all__ = [
    "Task",
    "TASKS",
    "TASK_FLAGS",
    "IFCA_INIT",
    "make_task",
    "synthetic_regression",
    "counterexample_myopic",
    "counterexample_ifca",
    "counterexample_cfl",
    "shakespeare_task",
    "stackoverflow_task",
    "clustered_classification",
    "image_task",
    "ClientSplit",
    "SourceReading",
    "ModelOptions",
    "ClientSizes",
    "federated_image_task",
    "npz_task",
    "mixture_regression",
    "yahoo_ltr_task",
    "components_task",
    "femnist_task",
    "cifar100_pachinko_task",
]


def make_task(name: str, **kwargs) -> Task:
    """Build the task registered as ``name`` with its keyword options (an option group's fields by name,
    :mod:`fedjax_clust.core.option_groups`)."""
    builder = TASKS.lookup(name)
    return builder(**gather(builder, kwargs))
