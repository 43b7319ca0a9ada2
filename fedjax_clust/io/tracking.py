"""Optional experiment tracking where researchers look: TensorBoard event files and Weights & Biases runs.

``Tracking(tensorboard=DIR, wandb=PROJECT)`` says where; :func:`fedjax_clust.run.simulate.simulate` opens one
tracker per destination for its run (``tracking.open(run_name, config)``), logs every evaluated round's
metrics to it at that round's step, and closes it when the run ends (also on an error or Ctrl-C). The run's
configuration (the algorithm's hyperparameters, the task, the seed, ...) goes with it: TensorBoard gets it as
a JSON text summary and as hyperparameters, W&B as the run's config. With neither destination nothing is
imported and nothing changes.

* TensorBoard (extra ``tensorboard``: ``tensorboardX``): event files in ``DIR/<run name>``, one scalar series
  per metric (a non-finite metric, null in the JSON files, is skipped); ``tensorboard --logdir DIR``.
* Weights & Biases (extra ``wandb``): one run per simulation in ``PROJECT``, named after the run, grouped by
  ``group`` (``compare`` groups its algorithms); ``WANDB_MODE=offline`` writes it locally (``wandb sync``
  uploads it later), as the tests do.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from typing import NamedTuple, Optional

__all__ = ["Tracking", "close_all"]


def _numbers(metrics: dict) -> dict:
    """The finite numeric entries of a metrics row (its ``round`` aside)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def _flat(config: dict, prefix: str = "") -> dict:
    """A nested configuration as flat ``a/b`` keys with scalar values (TensorBoard's hyperparameters)."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, name + "/"))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            flat[name] = "none" if value is None else value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat


class _TensorBoard:
    def __init__(self, logdir: str, run_name: str, config: dict):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as error:
            raise ValueError(
                '--tensorboard needs tensorboardX: pip install ".[tensorboard]" in a clone of '
                "fedjax-clust (or pip install tensorboardX)"
            ) from error
        # event files are named by the second and the host: a suffix keeps a resumed run's file from replacing
        # the one its first part wrote in the same second
        self.writer = SummaryWriter(logdir=os.path.join(logdir, run_name), filename_suffix=f".{uuid.uuid4().hex[:8]}")
        self.config = config
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```", 0)
        self.last = {}

    def log(self, step: int, metrics: dict) -> None:
        for name, value in _numbers(metrics).items():
            self.writer.add_scalar(name, value, step)
        self.last.update(_numbers(metrics))
        self.writer.flush()

    def close(self) -> None:
        self.writer.add_hparams(_flat(self.config), {f"final/{k}": v for k, v in self.last.items()}, name="hparams")
        self.writer.close()


class _WandB:
    def __init__(self, project: str, run_name: str, config: dict, group: Optional[str], directory: Optional[str]):
        try:
            import wandb
        except ImportError as error:
            raise ValueError(
                '--wandb needs wandb: pip install ".[wandb]" in a clone of fedjax-clust (or pip install wandb)'
            ) from error
        self.run = wandb.init(
            project=project, name=run_name, group=group, config=config, dir=directory, reinit="create_new"
        )

    def log(self, step: int, metrics: dict) -> None:
        self.run.log(_numbers(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def close_all(trackers) -> None:
    """Close every tracker; one that fails to close is a warning, so the others still close and an error
    already on its way out of a run is not replaced by this one."""
    import warnings

    for tracker in trackers:
        try:
            tracker.close()
        except Exception as error:  # a tracker's own failure (disk, network) must not hide the run's outcome
            warnings.warn(f"closing a {type(tracker).__name__.strip('_')} tracker failed: {error}", stacklevel=2)


class Tracking(NamedTuple):
    """Where to track runs: ``tensorboard`` a folder of event files, ``wandb`` a W&B project (``group`` groups
    a comparison's runs, ``wandb_dir`` holds W&B's local files; default: the working directory)."""

    tensorboard: Optional[str] = None
    wandb: Optional[str] = None
    group: Optional[str] = None
    wandb_dir: Optional[str] = None

    def check(self) -> "Tracking":
        """ValueError (naming the install command) unless the packages the destinations need import."""
        for wanted, module, extra in (
            (self.tensorboard, "tensorboardX", "tensorboard"),
            (self.wandb, "wandb", "wandb"),
        ):
            if wanted:
                try:
                    __import__(module)
                except ImportError as error:
                    raise ValueError(
                        f'--{extra} needs {module}: pip install ".[{extra}]" in a clone of '
                        f"fedjax-clust (or pip install {module})"
                    ) from error
        return self

    def open(self, run_name: str, config: dict) -> list:
        """The trackers of one run: objects with ``log(step, metrics)`` and ``close()``."""
        trackers = []
        try:
            if self.tensorboard:
                trackers.append(_TensorBoard(self.tensorboard, run_name, config))
            if self.wandb:
                trackers.append(_WandB(self.wandb, run_name, config, self.group, self.wandb_dir))
        except BaseException:
            close_all(trackers)
            raise
        return trackers

    def with_group(self, group: str) -> "Tracking":
        return self._replace(group=self.group or group)
