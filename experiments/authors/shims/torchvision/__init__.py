"""A stand-in for the few ``torchvision`` names the Werner et al. authors' MNIST scripts import (``datasets.MNIST``,
``transforms.Compose``, ``ToTensor``, ``Normalize``, ``Lambda``), our own code: the CPU wheels of torch on the
package index this harness installs from have no matching torchvision build whose C extension loads without CUDA.
``run_prfl.py`` puts this folder first on ``sys.path`` of the authors' process only."""

from . import datasets, transforms  # noqa: F401
