"""GPU facts in one place: each device's published memory bandwidth, SM count and bf16 peak, and
each compute capability's per-SM limits (what occupancy is computed from).

Every figure is a vendor's published number (datasheets, the CUDA C++ Programming Guide's
"Technical Specifications per Compute Capability" table), never one we measured; measured
ceilings live in committed JSON under ``docs/results/``. A B200 preset is a *projection*
input: no B200 has run this lab's code.

>>> DEVICES["H200"].hbm_tb_s, DEVICES["B200"].arch
(4.8, 'sm_100')
>>> ARCHS["sm_120"].max_smem_per_block
101376
>>> device_preset("MI300")
Traceback (most recent call last):
ValueError: unknown device preset 'MI300' (expected one of A100, H100, H200, B200, RTX5090)
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARCHS", "ArchLimits", "DEVICES", "DevicePreset", "arch_of", "bandwidth_ratio", "device_preset", "preset_of"]


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA C++ Programming Guide, compute capabilities table)."""

    arch: str                  # "sm_90"
    capability: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int      # 32-bit registers
    max_registers_per_thread: int
    smem_per_sm: int           # bytes of shared memory an SM has for blocks
    max_smem_per_block: int    # bytes one block may opt in to


_KIB = 1024
#: Per-SM limits by target name (``"sm_80"``, ``"sm_90"``, ``"sm_100"``, ``"sm_120"``).
ARCHS: dict[str, ArchLimits] = {
    a.arch: a for a in (
        ArchLimits("sm_80", (8, 0), 2048, 32, 65536, 255, 164 * _KIB, 163 * _KIB),
        ArchLimits("sm_90", (9, 0), 2048, 32, 65536, 255, 228 * _KIB, 227 * _KIB),
        ArchLimits("sm_100", (10, 0), 2048, 32, 65536, 255, 228 * _KIB, 227 * _KIB),
        ArchLimits("sm_120", (12, 0), 1536, 32, 65536, 255, 128 * _KIB, 99 * _KIB),
    )
}


@dataclass(frozen=True)
class DevicePreset:
    """One GPU as its vendor publishes it (dense bf16 tensor-core peak, HBM/GDDR bandwidth)."""

    name: str
    arch: str
    sms: int
    hbm_tb_s: float            # memory bandwidth, TB/s (10^12 bytes/s), the datasheet's figure
    bf16_tflops: float         # dense bf16 tensor-core peak, TFLOP/s
    memory_gib: float
    source: str
    projection: bool = False   # True where this lab has never run on the device

    @property
    def limits(self) -> ArchLimits:
        return ARCHS[self.arch]


#: Device presets by name (``"A100"``, ``"H100"``, ``"H200"``, ``"B200"``, ``"RTX5090"``).
DEVICES: dict[str, DevicePreset] = {
    d.name: d for d in (
        DevicePreset("A100", "sm_80", 108, 2.039, 312.0, 80,
                     "NVIDIA A100 datasheet (SXM4 80GB)", projection=True),
        DevicePreset("H100", "sm_90", 132, 3.35, 989.0, 80,
                     "NVIDIA H100 datasheet (SXM5 80GB)"),
        DevicePreset("H200", "sm_90", 132, 4.8, 989.0, 141,
                     "NVIDIA H200 datasheet (SXM 141GB)"),
        DevicePreset("B200", "sm_100", 148, 8.0, 2250.0, 180,
                     "NVIDIA DGX B200 / HGX B200 datasheet (per GPU, dense)", projection=True),
        DevicePreset("RTX5090", "sm_120", 170, 1.792, 209.5, 32,
                     "NVIDIA GeForce RTX 5090 specifications (bf16, fp32 accumulate)", projection=True),
    )
}


def device_preset(name: str) -> DevicePreset:
    """The preset called ``name``, or a ValueError naming the presets there are."""
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device preset {name!r} (expected one of {', '.join(DEVICES)})") from None


def preset_of(device: str) -> str | None:
    """The preset whose name a GPU's name contains (``torch.cuda.get_device_name``, a result's ``device``), None
    where none does.

    >>> preset_of("NVIDIA H100 80GB HBM3"), preset_of("cpu")
    ('H100', None)
    """
    return next((name for name in DEVICES if name in device.replace("-", " ").split()), None)


def bandwidth_ratio(measured_on: str, device: str) -> float:
    """How much longer a memory-bound pass takes on ``measured_on`` than on ``device`` (presets): the ratio of
    their bandwidths, the factor that carries a measured time to ``device``.

    >>> bandwidth_ratio("H200", "B200")  # 4.8 → 8.0 TB/s
    0.6
    """
    return device_preset(measured_on).hbm_tb_s / device_preset(device).hbm_tb_s


def arch_of(capability: tuple[int, int]) -> str:
    """``(9, 0)`` → ``"sm_90"``: the target name Triton and ptxas use for a compute capability.

    >>> arch_of((10, 0))
    'sm_100'
    """
    major, minor = capability
    return f"sm_{major}{minor}"
