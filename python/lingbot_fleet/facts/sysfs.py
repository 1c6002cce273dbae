"""Read the PCIe tree, NUMA placement, IOMMU groups and kernel command line from sysfs/proc.

Every path is taken under `root` (default "/"), so tests read a rendered tree in a temp
dir. A GPU's bridges are found by resolving /sys/bus/pci/devices/<bdf> (a symlink) and
walking up the parent directories whose names are PCI addresses, never by a prefix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .pciconfig import acs_control, extended_space_readable, pcie_port_type

NVIDIA_VENDOR_ID = "0x10de"
DISPLAY_CLASS_PREFIX = "0x03"
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")
HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
NUMA_NODE_DIR = re.compile(r"^node\d+$")
# Transfer rate per lane -> PCIe generation.
GENERATION_BY_GT_PER_S = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
IOMMU_MODE_BY_GROUP_TYPE = {
    "identity": "passthrough",
    "DMA": "translated",
    "DMA-FQ": "translated",
}


def under(root: str | Path, absolute: str) -> Path:
    return Path(root) / absolute.lstrip("/")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def link_generation(speed: str | None) -> int | None:
    """'16.0 GT/s PCIe' -> 4; None for 'Unknown speed' or a missing file."""
    if not speed:
        return None
    match = re.match(r"^\s*([0-9.]+)\s*GT/s", speed)
    if match is None:
        return None
    return GENERATION_BY_GT_PER_S.get(float(match.group(1)))


def read_cmdline(root: str | Path = "/") -> str | None:
    return read_text(under(root, "/proc/cmdline"))


def pci_devices_dir(root: str | Path) -> Path:
    return under(root, "/sys/bus/pci/devices")


def nvidia_gpu_bus_ids(root: str | Path = "/") -> list[str]:
    """Bus ids of NVIDIA display-class functions (GPUs, not NVSwitches), in bus order."""
    devices = pci_devices_dir(root)
    try:
        names = sorted(name for name in os.listdir(devices) if PCI_ADDRESS.match(name))
    except OSError:
        return []
    return [
        name
        for name in names
        if read_text(devices / name / "vendor") == NVIDIA_VENDOR_ID
        and (read_text(devices / name / "class") or "").startswith(DISPLAY_CLASS_PREFIX)
    ]


def device_link(directory: Path) -> dict[str, int | None]:
    return {
        "current_gen": link_generation(read_text(directory / "current_link_speed")),
        "current_width": read_int(directory / "current_link_width"),
        "max_gen": link_generation(read_text(directory / "max_link_speed")),
        "max_width": read_int(directory / "max_link_width"),
    }


def read_config(directory: Path) -> bytes:
    try:
        return (directory / "config").read_bytes()
    except OSError:
        return b""


def bridge_facts(directory: Path) -> dict[str, Any]:
    """One bridge between a GPU and its host bridge, ACS read from its config space."""
    space = read_config(directory)
    acs = acs_control(space)
    if acs is not None:
        acs_status = "read"
    elif extended_space_readable(space):
        acs_status = "no_capability"
    else:
        acs_status = "unreadable"
    return {
        "bdf": directory.name,
        "vendor_id": read_text(directory / "vendor"),
        "device_id": read_text(directory / "device"),
        "class": read_text(directory / "class"),
        "port_type": pcie_port_type(space),
        "numa_node": read_int(directory / "numa_node"),
        "link": device_link(directory),
        "acs": acs,
        "acs_status": acs_status,
    }


def upstream_path(root: str | Path, bus_id: str) -> tuple[list[Path], str | None]:
    """Bridge directories from the device's parent up to the root port, and the host bridge."""
    resolved = Path(os.path.realpath(pci_devices_dir(root) / bus_id))
    bridges: list[Path] = []
    for parent in resolved.parents:
        if PCI_ADDRESS.match(parent.name):
            bridges.append(parent)
            continue
        return bridges, parent.name if HOST_BRIDGE.match(parent.name) else None
    return bridges, None


def gpu_pci_facts(root: str | Path, bus_id: str) -> dict[str, Any]:
    """What sysfs says about one GPU: NUMA, CPUs, its own link and the bridges above it."""
    directory = pci_devices_dir(root) / bus_id
    space = read_config(directory)
    bridges, host_bridge = upstream_path(root, bus_id)
    return {
        "bus_id": bus_id,
        "present": directory.exists(),
        "pci_device_id": read_text(directory / "device"),
        "class": read_text(directory / "class"),
        "port_type": pcie_port_type(space),
        "numa_node": read_int(directory / "numa_node"),
        "local_cpulist": read_text(directory / "local_cpulist"),
        "link": device_link(directory),
        "bridges": [bridge_facts(bridge) for bridge in bridges],
        "host_bridge": host_bridge,
    }


def iommu_facts(root: str | Path = "/") -> dict[str, Any]:
    """IOMMU mode as the kernel's groups show it, and every group's devices."""
    groups_dir = under(root, "/sys/kernel/iommu_groups")
    groups: dict[str, list[str]] = {}
    types: set[str] = set()
    try:
        numbers = sorted((n for n in os.listdir(groups_dir) if n.isdigit()), key=int)
    except OSError:
        numbers = []
    for number in numbers:
        try:
            devices = sorted(os.listdir(groups_dir / number / "devices"))
        except OSError:
            devices = []
        groups[number] = devices
        group_type = read_text(groups_dir / number / "type")
        if group_type:
            types.add(group_type)
    if not groups:
        mode = "off"
    elif len(types) == 1:
        mode = IOMMU_MODE_BY_GROUP_TYPE.get(next(iter(types)), "unknown")
    else:
        mode = "mixed" if types else "unknown"
    return {"mode": mode, "group_types": sorted(types), "groups": groups}


def group_of(iommu: dict[str, Any], bus_id: str) -> int | None:
    for number, devices in iommu["groups"].items():
        if bus_id in devices:
            return int(number)
    return None


def numa_node_count(root: str | Path = "/") -> int | None:
    """NUMA nodes the kernel knows (/sys/devices/system/node/node*); None if unreadable."""
    try:
        names = os.listdir(under(root, "/sys/devices/system/node"))
    except OSError:
        return None
    return sum(1 for name in names if NUMA_NODE_DIR.match(name)) or None
