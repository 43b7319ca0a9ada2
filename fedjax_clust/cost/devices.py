"""Named devices and what a round would take on them: datasheet peaks, a stated and a measured efficiency.

A round's counted :class:`~fedjax_clust.cost.counting.Cost` becomes seconds on a device through the roofline of
:mod:`fedjax_clust.cost.roofline`,

    t = launch + kernel x kernels + max(flops / (eta_c x F), bytes / (eta_m x B)),

with the device's datasheet peaks F (FLOP/s at the precision a run uses) and B (memory bytes/s). What is not on a
datasheet is how much of those peaks a round reaches, so every projection is a *range* between two
:class:`Efficiency` records:

* **stated** (:data:`STATED`): a share of the peaks a tuned dense kernel reaches (0.75 of both: the committed
  H200 report's own 8192^3 matmul ran at 0.74 of the FP32 peak, its streaming pass at 0.64 of the bandwidth),
  applied to the counted FLOPs and the counted bytes as they are;
* **measured**: the shares a committed accelerator report's *rounds* reached (fitted by
  :mod:`fedjax_clust.bench.device_efficiency` to the report's Federated-Clustering, baseline, MLP and CNN rounds,
  shipped in ``measured_efficiency.json``).

Neither end is always the faster: the measured fit found the GPUs moving several times fewer bytes than the
count charges (XLA's fusion keeps intermediates on chip), so for a round whose counted bytes bind, the stated
end, which takes the count at face value, is the slower one on a GPU.

Both ends take the launch and per-kernel costs the measured fit found (a round's floor is the runtime's, not the
chip's). Transferring a fit from the device that measured it to another is an assumption (the same program's
share of a different chip's peaks), which is why the results are labelled projections everywhere.

Precision: the package runs every matmul at full float32 (``matmul_precision="highest"``), so a GPU's F is its
non-tensor-core FP32 peak (TF32 would change the numbers a user reads), and a TPU's is its bfloat16 peak / 6 (XLA
computes a float32 matmul at "highest" as six bfloat16 passes). Datasheet figures as published by the vendor
(``source``); register a device of your own with :func:`register_device`.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
from typing import Optional

from fedjax_clust.core.registry import Registry
from fedjax_clust.cost.counting import Cost
from fedjax_clust.cost.roofline import Calibration, Machine, project

__all__ = [
    "DeviceSpec",
    "Efficiency",
    "DEVICES",
    "STATED",
    "register_device",
    "device",
    "calibration_on",
    "project_on",
    "measured_efficiency",
    "MEASURED_FILE",
]


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """A device's datasheet: ``flops`` FLOP/s at the package's float32 precision (see the module docstring),
    ``bandwidth`` memory bytes/s, ``memory`` bytes, ``precision`` what ``flops`` is, ``source`` where the numbers
    come from; ``usable`` the share of ``memory`` a JAX process gets (0.75 on a GPU: XLA preallocates 75% of it
    by default)."""

    name: str
    label: str
    flops: float
    bandwidth: float
    memory: float
    precision: str
    source: str
    usable: float = 1.0

    @property
    def usable_memory(self) -> float:
        """Bytes a JAX process can use: ``usable`` x ``memory``."""
        return self.usable * self.memory

    def __post_init__(self):
        for field in ("flops", "bandwidth", "memory"):
            value = getattr(self, field)
            if not value > 0:
                raise ValueError(f"device {self.name!r}: {field} must be positive, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Shares of a device's peaks a round reaches and its floor: ``compute`` in (0, 1] of the FLOP/s; ``memory``
    the counted bytes' share of the bandwidth, in (0, 10] (above 1 where the device moved fewer bytes than the
    count charges: the count writes every intermediate a kernel materialises, a GPU's fusion and caches keep some
    on chip); ``launch`` seconds a call, ``kernel`` seconds a kernel; ``basis`` says where the numbers come
    from."""

    compute: float
    memory: float
    launch: float = 0.0
    kernel: float = 0.0
    basis: str = ""

    def __post_init__(self):
        if not 0 < self.compute <= 1:
            raise ValueError(f"compute efficiency must be in (0, 1], got {self.compute!r}")
        if not 0 < self.memory <= 10:
            raise ValueError(f"memory share must be in (0, 10], got {self.memory!r}")
        if self.launch < 0 or self.kernel < 0:
            raise ValueError(f"launch and kernel seconds must be >= 0, got {self.launch!r}, {self.kernel!r}")


STATED = Efficiency(0.75, 0.75, basis="stated: 0.75 of the datasheet peaks, a tuned dense kernel's share")

_FP32 = "FP32 (non-tensor-core; full float32)"
_GPU = 0.75  # the share of a GPU's memory XLA preallocates for a JAX process by default
DEVICES: Registry[DeviceSpec] = Registry("device", value_type=DeviceSpec)


def register_device(spec: DeviceSpec) -> DeviceSpec:
    """Add ``spec`` to :data:`DEVICES` under ``spec.name`` (ValueError if the name is taken, even by ``spec``)."""
    if spec.name in DEVICES:
        raise ValueError(f"a device named {spec.name!r} is already registered")
    return DEVICES.register(spec)


for _spec in (
    DeviceSpec("h100-sxm", "H100 SXM 80GB", 67e12, 3.35e12, 80e9, _FP32, "NVIDIA H100 Tensor Core GPU datasheet", _GPU),
    DeviceSpec(
        "h100-pcie", "H100 PCIe 80GB", 51e12, 2.0e12, 80e9, _FP32, "NVIDIA H100 Tensor Core GPU datasheet", _GPU
    ),
    DeviceSpec("h200", "H200 SXM 141GB", 67e12, 4.8e12, 141e9, _FP32, "NVIDIA H200 Tensor Core GPU datasheet", _GPU),
    DeviceSpec(
        "a100-80gb", "A100 SXM 80GB", 19.5e12, 2.039e12, 80e9, _FP32, "NVIDIA A100 Tensor Core GPU datasheet", _GPU
    ),
    DeviceSpec("l4", "L4 24GB", 30.3e12, 300e9, 24e9, _FP32, "NVIDIA L4 Tensor Core GPU datasheet", _GPU),
    DeviceSpec(
        "t4", "T4 16GB (Colab's free GPU)", 8.1e12, 320e9, 16e9, _FP32, "NVIDIA T4 Tensor Core GPU datasheet", _GPU
    ),
    DeviceSpec(
        "tpu-v5e",
        "TPU v5e (one chip)",
        197e12 / 6,
        819e9,
        16e9,
        "bfloat16 peak / 6 (float32 at 'highest' as six bf16 passes)",
        "Cloud TPU v5e documentation (197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s)",
    ),
):
    register_device(_spec)


def device(name: str) -> DeviceSpec:
    """The registered device ``name`` (ValueError listing the registered ones)."""
    return DEVICES.lookup(name)


def calibration_on(spec: DeviceSpec, efficiency: Efficiency) -> Calibration:
    """The :class:`~fedjax_clust.cost.roofline.Calibration` of ``efficiency`` on ``spec``'s peaks."""
    return Calibration(
        Machine(spec.flops, spec.bandwidth, efficiency.launch), efficiency.compute, efficiency.memory, efficiency.kernel
    )


def project_on(cost: Cost, spec: DeviceSpec, efficiency: Efficiency) -> float:
    """Projected seconds of a program of cost ``cost`` on ``spec`` at ``efficiency`` (module docstring)."""
    return project(cost, calibration_on(spec, efficiency))


MEASURED_FILE = "measured_efficiency.json"


def measured_efficiency(name: Optional[str] = None, path: Optional[str] = None) -> Efficiency:
    """The efficiency a committed accelerator report's rounds reached (``measured_efficiency.json`` shipped with
    the package, or the file at ``path``, as :mod:`fedjax_clust.bench.device_efficiency` writes it): the newest
    fit on device ``name`` when one was measured there, else the newest fit of any device, which its ``basis``
    says was borrowed (and from which device)."""
    if path is None:
        text = importlib.resources.files("fedjax_clust.cost").joinpath(MEASURED_FILE).read_text()
    else:
        with open(path) as f:
            text = f.read()
    fits = json.loads(text)["fits"]
    if not fits:
        raise ValueError("no measured efficiency recorded")
    mine = [f for f in fits if f["device"] == name]
    chosen = max(mine or fits, key=lambda f: f["date"])
    e = chosen["efficiency"]
    where = "measured on this device" if mine else f"borrowed from the {chosen['label']} (no report measured here)"
    basis = f"{where}: rounds of the {chosen['label']} report of {chosen['date']} ({chosen['report']})"
    return Efficiency(e["compute"], e["memory"], e["launch"], e["kernel"], basis=basis)
