"""What the server learns about its GPUs from the driver and sysfs.

CUDA ordinals are mapped to physical GPUs the way the CUDA runtime does it: through
``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs, unique UUID prefixes allowed) and,
when it is unset, one to one onto driver indices. Bus ids come from NVML
(``libnvidia-ml.so.1`` through ctypes); when NVML cannot be loaded or lacks a call,
from ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader``.

Environment variables for tests only: ``LINGBOT_NVML_LIBRARY`` (the NVML library to load,
default ``libnvidia-ml.so.1``) and ``LINGBOT_SYSFS_ROOT`` (prefix for ``/sys``, default
``/``). ``LINGBOT_LAB_NUMACTL_REQUEST`` is set by the lab where a process cannot really be
bound to the simulated NUMA node: it holds the ``--membind`` node list that was asked for.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import ContractError, normalize_bus_id

NVML_SUCCESS = 0
NVML_UUID_BUFFER_SIZE = 96
NVML_BUS_ID_BUFFER_SIZE = 32
NVML_LEGACY_BUS_ID_BUFFER_SIZE = 16
NVIDIA_SMI_TIMEOUT_S = 20.0


class DriverUnavailableError(RuntimeError):
    """Neither NVML nor nvidia-smi could list the GPUs."""


@dataclass(frozen=True)
class PhysicalGpu:
    index: int
    uuid: str
    bus_id: str


class _NvmlPciInfo(ctypes.Structure):
    _fields_ = (
        ("busIdLegacy", ctypes.c_char * NVML_LEGACY_BUS_ID_BUFFER_SIZE),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * NVML_BUS_ID_BUFFER_SIZE),
    )


def _nvml_check(library: ctypes.CDLL, status: int, call: str) -> None:
    if status != NVML_SUCCESS:
        error_string = library.nvmlErrorString
        error_string.restype = ctypes.c_char_p
        reason = error_string(status)
        text = reason.decode(errors="replace") if reason else f"status {status}"
        raise DriverUnavailableError(f"{call} failed: {text}")


def list_gpus_nvml(library_name: str) -> list[PhysicalGpu]:
    """All GPUs the driver knows, by NVML index. Raises OSError, AttributeError or
    DriverUnavailableError when NVML is missing or does not answer."""
    library = ctypes.CDLL(library_name)
    _nvml_check(library, library.nvmlInit_v2(), "nvmlInit_v2")
    try:
        count = ctypes.c_uint(0)
        _nvml_check(
            library, library.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2"
        )
        gpus: list[PhysicalGpu] = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            _nvml_check(
                library,
                library.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
                "nvmlDeviceGetHandleByIndex_v2",
            )
            uuid_buffer = ctypes.create_string_buffer(NVML_UUID_BUFFER_SIZE)
            _nvml_check(
                library,
                library.nvmlDeviceGetUUID(handle, uuid_buffer, NVML_UUID_BUFFER_SIZE),
                "nvmlDeviceGetUUID",
            )
            pci_info = _NvmlPciInfo()
            _nvml_check(
                library,
                library.nvmlDeviceGetPciInfo_v3(handle, ctypes.byref(pci_info)),
                "nvmlDeviceGetPciInfo_v3",
            )
            gpus.append(
                PhysicalGpu(
                    index=index,
                    uuid=uuid_buffer.value.decode(),
                    bus_id=normalize_bus_id(pci_info.busId.decode()),
                )
            )
        return gpus
    finally:
        library.nvmlShutdown()


def parse_nvidia_smi_gpu_list(text: str) -> list[PhysicalGpu]:
    """Rows of ``index, uuid, pci.bus_id`` as nvidia-smi's csv,noheader prints them."""
    gpus: list[PhysicalGpu] = []
    for row in text.splitlines():
        if not row.strip():
            continue
        fields = [field.strip() for field in row.split(",")]
        if len(fields) != 3 or not fields[0].isdigit():
            raise DriverUnavailableError(f"nvidia-smi printed an unexpected row: {row!r}")
        gpus.append(PhysicalGpu(int(fields[0]), fields[1], normalize_bus_id(fields[2])))
    return gpus


def list_gpus_nvidia_smi() -> list[PhysicalGpu]:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        raise DriverUnavailableError("nvidia-smi not found on PATH")
    result = subprocess.run(
        [executable, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
        timeout=NVIDIA_SMI_TIMEOUT_S,
        env={**os.environ, "LC_ALL": "C"},
    )
    if result.returncode != 0:
        output = result.stderr.strip() or result.stdout.strip()
        raise DriverUnavailableError(f"nvidia-smi exited {result.returncode}: {output}")
    return parse_nvidia_smi_gpu_list(result.stdout)


def list_physical_gpus() -> tuple[list[PhysicalGpu], str]:
    """The GPUs and where the list came from ("NVML ..." or "nvidia-smi (...)")."""
    library_name = os.environ.get("LINGBOT_NVML_LIBRARY", "libnvidia-ml.so.1")
    try:
        return list_gpus_nvml(library_name), f"NVML {library_name}"
    except (OSError, AttributeError, DriverUnavailableError) as nvml_error:
        nvml_reason = str(nvml_error)
    try:
        return list_gpus_nvidia_smi(), f"nvidia-smi (NVML unusable: {nvml_reason})"
    except (OSError, subprocess.SubprocessError, DriverUnavailableError, ValueError) as smi_error:
        raise DriverUnavailableError(
            f"cannot list GPUs: NVML {library_name} unusable ({nvml_reason}) and"
            f" nvidia-smi failed ({smi_error}); is the NVIDIA driver installed?"
        ) from None


def parse_visible_devices(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of selectors; None when unset."""
    if value is None:
        return None
    selectors = [item.strip() for item in value.split(",")] if value.strip() else []
    for selector in selectors:
        if not (selector.isdigit() or selector.startswith("GPU-")):
            raise ContractError(
                f"CUDA_VISIBLE_DEVICES entry {selector!r} is neither a device index nor a"
                " GPU-... UUID; LingBot needs whole GPUs (MIG instances are not supported)"
            )
    return selectors


def _select(selector: str, gpus: list[PhysicalGpu]) -> PhysicalGpu:
    if selector.isdigit():
        for gpu in gpus:
            if gpu.index == int(selector):
                return gpu
        raise ContractError(
            f"CUDA_VISIBLE_DEVICES names device {selector}, but the driver lists {len(gpus)} GPU(s)"
        )
    matches = [gpu for gpu in gpus if gpu.uuid.startswith(selector)]
    if len(matches) != 1:
        found = "no GPU" if not matches else f"{len(matches)} GPUs"
        raise ContractError(f"CUDA_VISIBLE_DEVICES entry {selector} matches {found}")
    return matches[0]


def resolve_ordinal(
    ordinal: int, visible: list[str] | None, gpus: list[PhysicalGpu]
) -> PhysicalGpu:
    """The physical GPU behind a CUDA ordinal."""
    if visible is None:
        if ordinal >= len(gpus):
            raise ContractError(
                f"CUDA device {ordinal} does not exist: the driver lists {len(gpus)} GPU(s)"
                " and CUDA_VISIBLE_DEVICES is unset"
            )
        return _select(str(ordinal), gpus)
    if ordinal >= len(visible):
        valid = {0: "no ordinals", 1: "ordinal 0"}.get(
            len(visible), f"ordinals 0-{len(visible) - 1}"
        )
        raise ContractError(
            f"CUDA device {ordinal} does not exist: CUDA_VISIBLE_DEVICES lists"
            f" {len(visible)} device(s) ({valid})"
        )
    return _select(visible[ordinal], gpus)


def sysfs_root() -> Path:
    return Path(os.environ.get("LINGBOT_SYSFS_ROOT", "/"))


def read_numa_node(bus_id: str) -> int:
    """The NUMA node of a PCI device from sysfs (-1: the kernel does not know it)."""
    path = sysfs_root() / "sys/bus/pci/devices" / normalize_bus_id(bus_id) / "numa_node"
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError as error:
        raise ContractError(
            f"cannot read the NUMA node of PCI device {bus_id}: {path}: {error.strerror}"
        ) from None
    try:
        return int(text)
    except ValueError:
        raise ContractError(f"{path} holds {text!r}, not a NUMA node number") from None


def parse_node_list(text: str) -> set[int]:
    """A kernel node list such as ``0``, ``0-1`` or ``0,2-3``."""
    nodes: set[int] = set()
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a node list like 0 or 0-1")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        nodes.update(range(first, last + 1))
    return nodes


def memory_binding() -> tuple[set[int], str]:
    """The NUMA nodes the process may allocate from, and where that came from."""
    requested = os.environ.get("LINGBOT_LAB_NUMACTL_REQUEST")
    if requested:
        match = re.search(r"membind=(\S+)", requested)
        node_list = match.group(1) if match else requested
        return parse_node_list(node_list), f"LINGBOT_LAB_NUMACTL_REQUEST={requested}"
    status = Path("/proc/self/status").read_text(encoding="ascii")
    for line in status.splitlines():
        if line.startswith("Mems_allowed_list:"):
            node_list = line.split(":", 1)[1].strip()
            return parse_node_list(node_list), f"Mems_allowed_list {node_list}"
    return set(), "no Mems_allowed_list in /proc/self/status"
