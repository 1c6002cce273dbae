"""The facts document's version and shape (docs/facts.md describes every field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Raise on any change a reader must know about (a field removed, renamed or re-typed).
FACTS_SCHEMA_VERSION = 1
FACT_NAME = "lingbot_gpu"
GPU_SOURCES = ("nvml", "nvidia-smi", "sysfs")
TOP_LEVEL_KEYS = (
    "schema_version",
    "sources",
    "notes",
    "driver_version",
    "kernel",
    "iommu",
    "numa",
    "gpus",
    "topology",
    "p2p",
)
# Added within schema 1: a reader treats a document without them as "unknown".
OPTIONAL_TOP_LEVEL_KEYS = ("host", "driver", "kernel_log", "fabric_manager")
HOST_KEYS = ("numactl_path",)
# facts["driver"]["state"] (facts/document.py says when each is given).
DRIVER_STATES = ("answers", "not_loaded", "version_mismatch", "unknown")
GPU_KEYS = (
    "index",
    "lost",
    "uuid",
    "model",
    "bus_id",
    "numa_node",
    "local_cpulist",
    "pcie",
    "performance_state",
    "persistence_mode",
    "mig_mode",
    "iommu_group",
    "host_bridge",
    "bridges",
)
# The start of the note that says why NVML was not used (``notes``), and its words when the
# caller turned NVML off rather than NVML failing (gpu/driver_versions.py reads them).
NVML_NOT_USED_NOTE = "NVML not used: "
NVML_TURNED_OFF = "turned off by the caller"
# Added within schema 1, per GPU, when NVML was asked (docs/facts.md).
OPTIONAL_GPU_KEYS = ("nvlink", "memory", "fabric", "clock_events", "recovery_action")
PCIE_KEYS = (
    "current_gen",
    "current_width",
    "max_gen",
    "max_width",
    "max_gen_gpu",
    "max_width_gpu",
    "upstream_port",
)


def schema_problems(document: Mapping[str, Any]) -> list[str]:
    """Shape problems of a facts document (empty when it is a schema-1 document)."""
    problems: list[str] = []
    if document.get("schema_version") != FACTS_SCHEMA_VERSION:
        problems.append(
            f"schema_version is {document.get('schema_version')!r}, this reader knows "
            f"{FACTS_SCHEMA_VERSION}; gather the facts again with this toolkit's gpu_facts"
        )
        return problems
    problems += [f"missing key {key}" for key in TOP_LEVEL_KEYS if key not in document]
    if "host" in document:
        host = document["host"] if isinstance(document["host"], dict) else {}
        problems += [f"host: missing key {key}" for key in HOST_KEYS if key not in host]
    if "driver" in document:
        driver = document["driver"] if isinstance(document["driver"], dict) else {}
        if driver.get("state") not in DRIVER_STATES:
            problems.append(
                f"driver: state is {driver.get('state')!r}, not one of {', '.join(DRIVER_STATES)}"
            )
    for position, gpu in enumerate(document.get("gpus", [])):
        problems += [f"gpus[{position}]: missing key {key}" for key in GPU_KEYS if key not in gpu]
        pcie = gpu.get("pcie") or {}
        problems += [
            f"gpus[{position}].pcie: missing key {key}" for key in PCIE_KEYS if key not in pcie
        ]
    return problems
