"""Assemble the facts document: NVML (or nvidia-smi) joined with sysfs and /proc."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import sysfs
from .driver_versions import (
    FABRIC_MANAGER_PROGRAM,
    nvswitch_system,
    read_fabric_manager,
    read_kernel_module_version,
)
from .kernel_log import read_kernel_log
from .nvml import NvmlUnavailableError, load_pynvml, read_nvml
from .schema import FACTS_SCHEMA_VERSION, NVML_NOT_USED_NOTE, NVML_TURNED_OFF, OPTIONAL_GPU_KEYS

# Searched after PATH, as Ansible's get_bin_path does (a login PATH may lack them).
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def _empty_pcie() -> dict[str, Any]:
    return {
        "current_gen": None,
        "current_width": None,
        "max_gen": None,
        "max_width": None,
        "max_gen_gpu": None,
    }


# facts["driver"]["state"]: the driver answered (NVML or nvidia-smi read the GPUs), said it
# is not loaded (NVML's Driver Not Loaded, nvidia-smi's exit status 9), or neither could be
# asked (no NVML binding, no nvidia-smi, another failure): unknown, never healthy.
DRIVER_ANSWERS = "answers"
DRIVER_NOT_LOADED = "not_loaded"
DRIVER_UNKNOWN = "unknown"
DRIVER_VERSION_MISMATCH = "version_mismatch"


def read_driver_view(
    use_nvml: bool, nvml_python_path: Sequence[str], smi_command: Sequence[str]
) -> tuple[dict[str, Any] | None, str, list[str], dict[str, Any]]:
    """(what the driver says, its source, notes, the driver's state): NVML first (when
    ``use_nvml``), then nvidia-smi."""
    notes: list[str] = []
    not_loaded: list[str] = []
    mismatch: list[str] = []
    if use_nvml:
        try:
            return read_nvml(load_pynvml(nvml_python_path)), "nvml", notes, _answers()
        except NvmlUnavailableError as error:
            notes.append(f"{NVML_NOT_USED_NOTE}{error}; GPU fields come from nvidia-smi")
            if error.driver_not_loaded:
                not_loaded.append(f"NVML: {error}")
            if error.version_mismatch:
                mismatch.append(f"NVML: {error}")
    else:
        notes.append(f"{NVML_NOT_USED_NOTE}{NVML_TURNED_OFF}; GPU fields come from nvidia-smi")
    from .smi import SmiUnavailableError, read_smi  # noqa: PLC0415  (only the fallback needs it)

    try:
        return read_smi(smi_command), "nvidia-smi", notes, _answers()
    except SmiUnavailableError as error:
        notes.append(f"nvidia-smi not usable: {error}; only sysfs fields are known")
        if error.driver_not_loaded:
            not_loaded.append(f"nvidia-smi exited {error.returncode}: {error.output[:200]}")
        if error.version_mismatch:
            mismatch.append(f"nvidia-smi exited {error.returncode}: {error.output[:200]}")
    if mismatch:
        return None, "sysfs", notes, {"state": DRIVER_VERSION_MISMATCH, "evidence": mismatch}
    if not_loaded:
        return None, "sysfs", notes, {"state": DRIVER_NOT_LOADED, "evidence": not_loaded}
    return None, "sysfs", notes, {"state": DRIVER_UNKNOWN, "evidence": notes[-2:]}


def _answers() -> dict[str, Any]:
    return {"state": DRIVER_ANSWERS, "evidence": []}


def _merge_gpu(
    index: int, driver_gpu: dict[str, Any] | None, bus_id: str, root: str | Path, iommu: dict
) -> dict[str, Any]:
    pci = sysfs.gpu_pci_facts(root, bus_id)
    driver_gpu = driver_gpu or {"lost": False}
    pcie = {**_empty_pcie(), **(driver_gpu.get("pcie") or {})}
    if pcie["max_gen_gpu"] is None:
        pcie["max_gen_gpu"] = pci["link"]["max_gen"]
    # NVML has no call for the GPU's own maximum width: its LnkCap, as sysfs shows it.
    pcie["max_width_gpu"] = pci["link"]["max_width"]
    for key in ("current_gen", "current_width"):
        if pcie[key] is None and not driver_gpu.get("lost"):
            pcie[key] = pci["link"][key]
    bridges = pci["bridges"]
    upstream = bridges[0] if bridges else None
    pcie["upstream_port"] = (
        {"bdf": upstream["bdf"], **upstream["link"]} if upstream is not None else None
    )
    gpu = {
        "index": index,
        "lost": bool(driver_gpu.get("lost")),
        "uuid": driver_gpu.get("uuid"),
        "model": driver_gpu.get("model"),
        "bus_id": bus_id,
        "numa_node": pci["numa_node"],
        "local_cpulist": pci["local_cpulist"],
        "pcie": pcie,
        "performance_state": driver_gpu.get("performance_state"),
        "persistence_mode": driver_gpu.get("persistence_mode"),
        "mig_mode": driver_gpu.get("mig_mode"),
        "iommu_group": sysfs.group_of(iommu, bus_id),
        "host_bridge": pci["host_bridge"],
        "bridges": bridges,
    }
    for key in OPTIONAL_GPU_KEYS:
        if key in driver_gpu:
            gpu[key] = driver_gpu[key]
    if driver_gpu.get("error"):
        gpu["error"] = driver_gpu["error"]
    return gpu


def _gpu_list(
    driver: dict[str, Any] | None, root: str | Path, iommu: dict[str, Any]
) -> list[dict[str, Any]]:
    """Driver GPUs by index, then every NVIDIA GPU on the PCI bus the driver does not
    answer for: a GPU lost after its handle, or one the driver does not list at all (it
    failed to initialise). Those take the indexes left, in bus order, with the bus ids no
    driver GPU has, so a lost GPU is named by its own bus id, never by a neighbour's."""
    sysfs_bus_ids = sysfs.nvidia_gpu_bus_ids(root)
    by_index = {gpu["index"]: gpu for gpu in (driver or {}).get("gpus", [])}
    answered = {str(gpu.get("bus_id")).lower() for gpu in by_index.values() if gpu.get("bus_id")}
    unanswered = [bus_id for bus_id in sysfs_bus_ids if bus_id.lower() not in answered]
    # A driver GPU without a bus id (lost after its handle) takes one of the unanswered.
    without_bus_id = sum(1 for gpu in by_index.values() if not gpu.get("bus_id"))
    not_listed = max(0, len(unanswered) - without_bus_id)
    count = max(max(by_index, default=-1) + 1, len(by_index) + not_listed)
    gpus = []
    for index in range(count):
        driver_gpu = by_index.get(index)
        bus_id = (driver_gpu or {}).get("bus_id")
        if bus_id is None:
            bus_id = unanswered.pop(0) if unanswered else ""
            if driver is not None:
                driver_gpu = {**(driver_gpu or {}), "lost": True}
        gpus.append(_merge_gpu(index, driver_gpu, bus_id, root, iommu))
    return gpus


def find_program(name: str, root: str | Path = "/", path: str | None = None) -> str | None:
    """The node path of an executable ``name`` on PATH (then the sbin directories), or None."""
    search = (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)
    for directory in [*search, *SBIN_DIRS]:
        if not directory.startswith("/"):
            continue
        candidate = os.path.join(directory, name)
        real = sysfs.under(root, candidate)
        if real.is_file() and os.access(real, os.X_OK):
            return candidate
    return None


def gather_facts(
    root: str | Path = "/",
    use_nvml: bool = True,
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
) -> dict[str, Any]:
    """The facts document (schema FACTS_SCHEMA_VERSION) of the node whose root is `root`."""
    driver, source, notes, driver_state = read_driver_view(use_nvml, nvml_python_path, smi_command)
    iommu = sysfs.iommu_facts(root)
    gpus = _gpu_list(driver, root, iommu)
    module_version, module_note = read_kernel_module_version(root)
    notes += [module_note] if module_note else []
    matrices = source if driver is not None and len(gpus) > 0 else "none"
    return {
        "schema_version": FACTS_SCHEMA_VERSION,
        "sources": {
            "gpus": source,
            "pcie_link": source,
            "gpu_state": source,
            "topology": matrices,
            "p2p": matrices,
            "pcie_tree": "sysfs",
            "numa": "sysfs",
            "iommu": "sysfs",
            "kernel": "procfs",
        },
        "notes": notes,
        "driver_version": (driver or {}).get("driver_version"),
        "driver": {**driver_state, "kernel_module_version": module_version},
        "kernel": {"cmdline": sysfs.read_cmdline(root)},
        "kernel_log": read_kernel_log(root),
        "host": {"numactl_path": find_program("numactl", root)},
        "iommu": iommu,
        "numa": {
            "node_count": sysfs.numa_node_count(root),
            "device_nodes": sorted(
                {gpu["numa_node"] for gpu in gpus if gpu["numa_node"] is not None}
            ),
        },
        "gpus": gpus,
        "topology": (driver or {}).get("topology", []),
        "p2p": (driver or {}).get("p2p", {}),
        **_fabric_manager(root, gpus),
    }


def _fabric_manager(root: str | Path, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"fabric_manager": ...}`` on an NVSwitch system (facts/driver_versions.py); nothing
    elsewhere."""
    if not nvswitch_system(gpus):
        return {}
    systemctl = find_program("systemctl", root)
    fabric_manager = find_program(FABRIC_MANAGER_PROGRAM, root)
    return {"fabric_manager": read_fabric_manager(root, systemctl, fabric_manager)}
