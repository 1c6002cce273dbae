"""What the server learns about its GPUs from the driver and sysfs.

CUDA ordinals are mapped to physical GPUs the way the CUDA runtime does it: through
``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs, unique UUID prefixes allowed; the
list ends at its first entry that names no GPU or one named before) and, when it is
unset, one to one onto driver indices. Bus ids come from NVML (``libnvidia-ml.so.1``
through ctypes); when NVML cannot be loaded or lacks a call, from
``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader``.

A GPU the driver reports lost is listed as lost, like CUDA lists it: it stops the
server only when one of its CUDA ordinals maps to it (as creating a context on it
fails), never when it is outside the GPUs the server is given.

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
NVML_ERROR_GPU_IS_LOST = 15
NVIDIA_SMI_EXIT_GPU_LOST = 15
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


@dataclass(frozen=True)
class LostGpu:
    """A GPU the driver lists but cannot answer for; bus_id None when it does not say."""

    index: int
    bus_id: str | None
    reason: str

    def where(self) -> str:
        return f"driver index {self.index}" + (f" at {self.bus_id}" if self.bus_id else "")


DriverGpu = PhysicalGpu | LostGpu


@dataclass(frozen=True)
class VisibleDevices:
    """The GPUs behind CUDA ordinals 0, 1, ... and, when CUDA ignores the rest of
    CUDA_VISIBLE_DEVICES, why (``stop``)."""

    gpus: tuple[DriverGpu, ...]
    stop: str | None = None


_SMI_LOST_RE = re.compile(
    r"^Unable to determine the device handle for (?:GPU ?)?(?P<bus_id>[0-9A-Fa-f:.]+):"
    r" (?P<reason>.+)$"
)


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


def _nvml_error_text(library: ctypes.CDLL, status: int) -> str:
    error_string = library.nvmlErrorString
    error_string.restype = ctypes.c_char_p
    reason = error_string(status)
    return reason.decode(errors="replace") if reason else f"status {status}"


def _nvml_check(library: ctypes.CDLL, status: int, call: str) -> None:
    if status != NVML_SUCCESS:
        raise DriverUnavailableError(f"{call} failed: {_nvml_error_text(library, status)}")


class _GpuLostError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _nvml_device_check(library: ctypes.CDLL, status: int, call: str) -> None:
    """As _nvml_check, but a lost GPU is that GPU's state, not a driver failure."""
    if status == NVML_ERROR_GPU_IS_LOST:
        raise _GpuLostError(f"NVML {call}: {_nvml_error_text(library, status)}")
    _nvml_check(library, status, call)


def list_gpus_nvml(library_name: str) -> list[DriverGpu]:
    """All GPUs the driver knows, by NVML index. Raises OSError, AttributeError or
    DriverUnavailableError when NVML is missing or does not answer."""
    library = ctypes.CDLL(library_name)
    _nvml_check(library, library.nvmlInit_v2(), "nvmlInit_v2")
    try:
        count = ctypes.c_uint(0)
        _nvml_check(
            library, library.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2"
        )
        gpus: list[DriverGpu] = []
        for index in range(count.value):
            try:
                gpus.append(_nvml_gpu(library, index))
            except _GpuLostError as lost:
                gpus.append(LostGpu(index, None, lost.reason))
        return gpus
    finally:
        library.nvmlShutdown()


def _nvml_gpu(library: ctypes.CDLL, index: int) -> PhysicalGpu:
    handle = ctypes.c_void_p()
    _nvml_device_check(
        library,
        library.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
        "nvmlDeviceGetHandleByIndex_v2",
    )
    uuid_buffer = ctypes.create_string_buffer(NVML_UUID_BUFFER_SIZE)
    _nvml_device_check(
        library,
        library.nvmlDeviceGetUUID(handle, uuid_buffer, NVML_UUID_BUFFER_SIZE),
        "nvmlDeviceGetUUID",
    )
    pci_info = _NvmlPciInfo()
    _nvml_device_check(
        library,
        library.nvmlDeviceGetPciInfo_v3(handle, ctypes.byref(pci_info)),
        "nvmlDeviceGetPciInfo_v3",
    )
    return PhysicalGpu(
        index=index,
        uuid=uuid_buffer.value.decode(),
        bus_id=normalize_bus_id(pci_info.busId.decode()),
    )


def parse_nvidia_smi_gpu_list(text: str) -> list[DriverGpu]:
    """Rows of ``index, uuid, pci.bus_id`` as nvidia-smi's csv,noheader prints them; a
    lost GPU's row is nvidia-smi's ``Unable to determine the device handle`` line."""
    gpus: list[DriverGpu] = []
    for row in text.splitlines():
        if not row.strip():
            continue
        lost = _SMI_LOST_RE.match(row.strip())
        if lost:
            bus_id = normalize_bus_id(lost.group("bus_id"))
            gpus.append(LostGpu(len(gpus), bus_id, f"nvidia-smi: {lost.group('reason')}"))
            continue
        fields = [field.strip() for field in row.split(",")]
        if len(fields) != 3 or fields[0] != str(len(gpus)):
            raise DriverUnavailableError(f"nvidia-smi printed an unexpected row: {row!r}")
        gpus.append(PhysicalGpu(int(fields[0]), fields[1], normalize_bus_id(fields[2])))
    return gpus


def list_gpus_nvidia_smi() -> list[DriverGpu]:
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
    failed = DriverUnavailableError(
        f"nvidia-smi exited {result.returncode}: {result.stderr.strip() or result.stdout.strip()}"
    )
    if result.returncode not in (0, NVIDIA_SMI_EXIT_GPU_LOST):
        raise failed
    gpus = parse_nvidia_smi_gpu_list(result.stdout)
    lost_reported = any(isinstance(gpu, LostGpu) for gpu in gpus)
    if lost_reported != (result.returncode == NVIDIA_SMI_EXIT_GPU_LOST):
        raise failed
    return gpus


def list_physical_gpus() -> tuple[list[DriverGpu], str]:
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


def _match(selector: str, gpus: list[DriverGpu], taken: set[int]) -> DriverGpu | str:
    """The GPU an entry names, or why it names none (CUDA ignores it and what follows)."""
    if selector.isdigit():
        by_index = [gpu for gpu in gpus if gpu.index == int(selector)]
        if not by_index:
            return f"its entry {selector} names no GPU: the driver lists {len(gpus)} GPU(s)"
        found = by_index[0]
    else:
        matches = [
            gpu for gpu in gpus if isinstance(gpu, PhysicalGpu) and gpu.uuid.startswith(selector)
        ]
        # NVML gives no UUID for a lost GPU: an entry no answering GPU has may be one.
        unnamed = [gpu for gpu in gpus if isinstance(gpu, LostGpu) and gpu.index not in taken]
        if len(matches) > 1:
            return f"its entry {selector} matches {len(matches)} GPUs"
        if not matches and not unnamed:
            return f"its entry {selector} matches no GPU"
        found = matches[0] if matches else unnamed[0]
    if found.index in taken:
        return f"its entry {selector} names driver index {found.index} a second time"
    return found


def visible_devices(visible: list[str] | None, gpus: list[DriverGpu]) -> VisibleDevices:
    """The driver's GPUs in CUDA ordinal order, as CUDA_VISIBLE_DEVICES selects them."""
    if visible is None:
        return VisibleDevices(tuple(gpus))
    selected: list[DriverGpu] = []
    for selector in visible:
        found = _match(selector, gpus, {gpu.index for gpu in selected})
        if isinstance(found, str):
            return VisibleDevices(tuple(selected), found)
        selected.append(found)
    return VisibleDevices(tuple(selected))


def _ordinals_text(count: int) -> str:
    return {0: "no ordinals", 1: "ordinal 0"}.get(count, f"ordinals 0-{count - 1}")


def check_ordinal_listed(ordinal: int, visible: list[str] | None) -> None:
    """Refuse an ordinal past the end of CUDA_VISIBLE_DEVICES (before asking the driver)."""
    if visible is not None and ordinal >= len(visible):
        raise ContractError(
            f"CUDA device {ordinal} does not exist: CUDA_VISIBLE_DEVICES lists"
            f" {len(visible)} device(s) ({_ordinals_text(len(visible))})"
        )


def resolve_ordinal(ordinal: int, visible: list[str] | None, devices: VisibleDevices) -> DriverGpu:
    """The GPU behind a CUDA ordinal (a LostGpu when the driver reports it lost)."""
    check_ordinal_listed(ordinal, visible)
    if ordinal < len(devices.gpus):
        return devices.gpus[ordinal]
    count = len(devices.gpus)
    if visible is None:
        raise ContractError(
            f"CUDA device {ordinal} does not exist: the driver lists {count} GPU(s)"
            " and CUDA_VISIBLE_DEVICES is unset"
        )
    raise ContractError(
        f"CUDA device {ordinal} does not exist: CUDA_VISIBLE_DEVICES gives {count} device(s)"
        f" ({_ordinals_text(count)}); {devices.stop}, so CUDA ignores it and the entries"
        " after it"
    )


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
