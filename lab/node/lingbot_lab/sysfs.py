"""Render the simulated sysfs tree (devices, bus/pci/devices links, iommu_groups)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from lingbot_lab import LAB_RUN_DIR
from lingbot_lab.configspace import (
    PCIE_TYPE_ENDPOINT,
    PORT_KIND_PCIE_TYPE,
    PcieLink,
    PciFunction,
    acs_control_word,
    build_config_space,
)
from lingbot_lab.hwstate import IOMMU_GROUP_TYPES, ancestors, iommu_groups
from lingbot_lab.profile import NVIDIA_VENDOR_ID, format_cpulist, parse_cpulist

LINK_SPEED_WORDS = {
    1: "2.5 GT/s PCIe",
    2: "5.0 GT/s PCIe",
    3: "8.0 GT/s PCIe",
    4: "16.0 GT/s PCIe",
    5: "32.0 GT/s PCIe",
}
CLASS_VGA = 0x030000
CLASS_3D = 0x030200
CLASS_PCI_BRIDGE = 0x060400
VGA_BRANDS = ("GeForce", "NVIDIA RTX", "Quadro", "Titan")
GPU_REVISION = 0xA1
BRIDGE_REVISION = 0x00
KERNEL_IOMMU_GROUPS = "/sys/kernel/iommu_groups"


def gpu_class_code(brand: str) -> int:
    return CLASS_VGA if brand in VGA_BRANDS else CLASS_3D


def cpu_mask(cpulist: str, cpu_count: int) -> str:
    """local_cpus: hex mask in comma-separated 32-bit words, most significant first."""
    mask = 0
    for cpu in parse_cpulist(cpulist):
        mask |= 1 << cpu
    words = max(1, (cpu_count + 31) // 32)
    return ",".join(f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


def bus_number(bdf: str) -> int:
    return int(bdf.split(":")[1], 16)


def device_paths(profile: dict[str, Any]) -> dict[str, str]:
    """bdf -> path under sys/devices, e.g. 'pci0000:40/0000:40:01.1/0000:41:00.0'."""
    bdfs = [port["bdf"] for port in profile["pcie_ports"]] + [g["bdf"] for g in profile["gpus"]]
    return {bdf: "/".join([*reversed(ancestors(profile, bdf)), bdf]) for bdf in bdfs}


def _children(profile: dict[str, Any], parent: str) -> list[str]:
    devices = [*profile["pcie_ports"], *profile["gpus"]]
    return [device["bdf"] for device in devices if device["parent"] == parent]


def _descendants(profile: dict[str, Any], parent: str) -> list[str]:
    found: list[str] = []
    for child in _children(profile, parent):
        found.append(child)
        found.extend(_descendants(profile, child))
    return found


def port_function(
    profile: dict[str, Any], state: dict[str, Any], port: dict[str, Any]
) -> PciFunction:
    """A port as its config space shows it; a port above a GPU shows that GPU's idle link."""
    link = port["link"]
    gen, width = link["gen"], link["width"]
    gpu_below = next(
        (g for g in state["gpus"] if g["bdf"] in _children(profile, port["bdf"])), None
    )
    if gpu_below is not None:
        gen, width = gpu_below["link"]["gen_idle"], gpu_below["link"]["width"]
    below = _descendants(profile, port["bdf"])
    children = _children(profile, port["bdf"])
    secondary = min((bus_number(bdf) for bdf in children), default=0)
    subordinate = max((bus_number(bdf) for bdf in below), default=secondary)
    return PciFunction(
        vendor_id=port["vendor_id"],
        device_id=port["device_id"],
        class_code=CLASS_PCI_BRIDGE,
        revision=BRIDGE_REVISION,
        link=PcieLink(link["max_gen"], link["max_width"], gen, width, link["gen"]),
        pcie_type=PORT_KIND_PCIE_TYPE[port["kind"]],
        primary_bus=bus_number(port["bdf"]),
        secondary_bus=secondary,
        subordinate_bus=subordinate,
        acs_control=acs_control_word(port["acs"]),
        port_number=int(port["bdf"].split(":")[2].split(".")[0], 16),
    )


def gpu_function(profile_gpu: dict[str, Any], gpu: dict[str, Any]) -> PciFunction:
    link = gpu["link"]
    return PciFunction(
        vendor_id=NVIDIA_VENDOR_ID,
        device_id=profile_gpu["pci_device_id"],
        class_code=gpu_class_code(gpu["brand"]),
        revision=GPU_REVISION,
        link=PcieLink(
            link["max_gen_gpu"], link["max_width_gpu"], link["gen_idle"], link["width"], 0
        ),
        pcie_type=PCIE_TYPE_ENDPOINT,
        subsystem_vendor_id=NVIDIA_VENDOR_ID,
        subsystem_device_id=profile_gpu["pci_subsystem_device_id"],
    )


def _write(directory: Path, name: str, content: str) -> None:
    (directory / name).write_text(content + "\n", encoding="ascii")


def _write_device(
    directory: Path,
    function: PciFunction,
    numa_node: int,
    cpulist: str,
    cpu_count: int,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory, "vendor", f"0x{function.vendor_id:04x}")
    _write(directory, "device", f"0x{function.device_id:04x}")
    _write(directory, "subsystem_vendor", f"0x{function.subsystem_vendor_id:04x}")
    _write(directory, "subsystem_device", f"0x{function.subsystem_device_id:04x}")
    _write(directory, "class", f"0x{function.class_code:06x}")
    _write(directory, "revision", f"0x{function.revision:02x}")
    _write(directory, "numa_node", str(numa_node))
    _write(directory, "local_cpulist", cpulist)
    _write(directory, "local_cpus", cpu_mask(cpulist, cpu_count))
    _write(directory, "current_link_speed", LINK_SPEED_WORDS[function.link.gen])
    _write(directory, "current_link_width", str(function.link.width))
    _write(directory, "max_link_speed", LINK_SPEED_WORDS[function.link.max_gen])
    _write(directory, "max_link_width", str(function.link.max_width))
    (directory / "config").write_bytes(build_config_space(function))


def render_sysfs(
    state: dict[str, Any],
    profile: dict[str, Any],
    root_dir: str | Path,
    link_prefix: str = LAB_RUN_DIR,
) -> Path:
    """Write <root_dir>/sys/{devices,bus/pci/devices,kernel/iommu_groups}; return <root_dir>/sys.

    root_dir is the directory that becomes /run/lingbot-lab in the node; links point to
    <link_prefix>/sys/devices/... (pass the host path of root_dir in tests).
    """
    sys_dir = Path(root_dir) / "sys"
    if sys_dir.exists():
        shutil.rmtree(sys_dir)
    bus_dir = sys_dir / "bus" / "pci" / "devices"
    groups_dir = sys_dir / "kernel" / "iommu_groups"
    bus_dir.mkdir(parents=True)
    groups_dir.mkdir(parents=True)
    mode = state["boot"]["iommu_mode"]
    groups = iommu_groups(profile, mode)
    paths = device_paths(profile)
    all_cpus = [cpu for node in state["numa_nodes"] for cpu in parse_cpulist(node["cpus"])]
    cpu_count = max(all_cpus) + 1
    noacpi = not state["boot"]["acpi_pci"]
    numa_by_bridge = {bridge["id"]: bridge["numa_node"] for bridge in profile["host_bridges"]}
    gpus_by_bdf = {gpu["bdf"]: gpu for gpu in state["gpus"]}
    profile_gpus = {gpu["bdf"]: gpu for gpu in profile["gpus"]}
    for port in profile["pcie_ports"]:
        bdf = port["bdf"]
        node = -1 if noacpi else numa_by_bridge[ancestors(profile, bdf)[-1]]
        cpulist = format_cpulist(all_cpus) if noacpi else state["numa_nodes"][node]["cpus"]
        function = port_function(profile, state, port)
        _write_device(sys_dir / "devices" / paths[bdf], function, node, cpulist, cpu_count)
    for bdf, gpu in gpus_by_bdf.items():
        function = gpu_function(profile_gpus[bdf], gpu)
        directory = sys_dir / "devices" / paths[bdf]
        _write_device(directory, function, gpu["numa_node"], gpu["cpu_list"], cpu_count)
    for bdf, path in paths.items():
        target = f"{link_prefix}/sys/devices/{path}"
        os.symlink(target, bus_dir / bdf)
        if bdf in groups:
            group_dir = groups_dir / str(groups[bdf])
            (group_dir / "devices").mkdir(parents=True, exist_ok=True)
            _write(group_dir, "type", IOMMU_GROUP_TYPES[mode])
            os.symlink(target, group_dir / "devices" / bdf)
            os.symlink(
                f"{KERNEL_IOMMU_GROUPS}/{groups[bdf]}", sys_dir / "devices" / path / "iommu_group"
            )
    render_numa_nodes(state, sys_dir / "devices" / "system" / "node", cpu_count)
    return sys_dir


def render_numa_nodes(state: dict[str, Any], node_dir: Path, cpu_count: int) -> None:
    """/sys/devices/system/node as the profile's machine has it (SRAT, not PCI ACPI:
    pci=noacpi leaves these alone)."""
    node_dir.mkdir(parents=True, exist_ok=True)
    ids = [node["id"] for node in state["numa_nodes"]]
    every = format_cpulist(ids)
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        _write(node_dir, name, every)
    for node in state["numa_nodes"]:
        directory = node_dir / f"node{node['id']}"
        directory.mkdir()
        _write(directory, "cpulist", node["cpus"])
        _write(directory, "cpumap", cpu_mask(node["cpus"], cpu_count))
