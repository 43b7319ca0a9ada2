"""Built-in tasks, by registry name."""

from fedjax_clust.tasks.base import Task
from fedjax_clust.tasks.synthetic import synthetic_regression

TASKS = {"synthetic": synthetic_regression}

__all__ = ["Task", "TASKS", "make_task", "synthetic_regression"]


def make_task(name: str, **kwargs) -> Task:
    """Build the task registered as ``name`` with its keyword options."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; expected one of {sorted(TASKS)}")
    return TASKS[name](**kwargs)
