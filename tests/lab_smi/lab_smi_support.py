"""Fixtures for the lab's nvidia-smi and nvidia-persistenced: hand-written states per
lab/CONTRACT.md, written under a temporary LINGBOT_LAB_ROOT."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LAB_NODE_DIR = REPO_ROOT / "lab" / "node"
if str(LAB_NODE_DIR) not in sys.path:
    sys.path.insert(0, str(LAB_NODE_DIR))

H100_MEMORY_MIB = 81559
GPU_SPECS = (
    # bdf, numa node, cpus, uuid suffix, link overrides, persistence_default
    ("0000:41:00.0", 0, "0-15", "0001", {}, 0),
    ("0000:42:00.0", 0, "0-15", "0002", {"width": 8}, 0),
    ("0000:c1:00.0", 1, "16-31", "0003", {}, 1),
    ("0000:c2:00.0", 1, "16-31", "0004", {"max_gen": 4, "gen_load": 4}, 0),
)
TOPOLOGY = {(0, 1): "PIX", (2, 3): "NV4"}
TOPOLOGY_LEVEL = {"PIX": 10, "SYS": 50, "NV4": 20}


def _gpu(index: int) -> dict[str, Any]:
    bdf, numa_node, cpus, uuid_suffix, link_overrides, persistence_default = GPU_SPECS[index]
    link = {
        "max_gen_gpu": 5,
        "max_width_gpu": 16,
        "max_gen": 5,
        "max_width": 16,
        "width": 16,
        "gen_load": 5,
        "gen_idle": 1,
    }
    link.update(link_overrides)
    return {
        "index": index,
        "bdf": bdf,
        "name": "NVIDIA H100 80GB HBM3",
        "brand": "NVIDIA",
        "uuid": f"GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f{uuid_suffix}",
        "serial": f"165022300{uuid_suffix}",
        "pci_device_id": (0x2330 << 16) | 0x10DE,
        "pci_subsystem_id": (0x16C1 << 16) | 0x10DE,
        "memory_total_bytes": H100_MEMORY_MIB * 1024 * 1024,
        "numa_node": numa_node,
        "cpu_list": cpus,
        "link": link,
        "host": {"h2d_gbytes_per_s": 52.0, "d2h_gbytes_per_s": 53.1, "latency_ns": 8000},
        "nvlinks": [{"count": 4, "to": 5 - index}] if index >= 2 else [],
        "mig_mode": 0,
        "lost": False,
        "fail_after_copies": 0,
        "persistence_default": persistence_default,
        "iommu_group": 20 + index,
    }


def _pair(a: int, b: int) -> dict[str, Any]:
    topology = TOPOLOGY.get((min(a, b), max(a, b)), "SYS")
    nvlinked = topology.startswith("NV")
    return {
        "a": a,
        "b": b,
        "topology": topology,
        "topology_level": TOPOLOGY_LEVEL[topology],
        "nvlink_count": 4 if nvlinked else 0,
        "p2p_status": {
            "read": "OK",
            "write": "OK" if topology != "SYS" else "CNS",
            "nvlink": "OK" if nvlinked else "NS",
            "atomics": "OK" if nvlinked else "NS",
            "prop": "OK" if topology != "SYS" else "TNS",
        },
        "p2p": {"gbytes_per_s": 40.0, "bidir_gbytes_per_s": 75.0, "latency_ns": 1100},
        "host_staged": {"gbytes_per_s": 20.0, "bidir_gbytes_per_s": 22.0, "latency_ns": 9000},
        "p2p_drops_writes": False,
    }


def make_state() -> dict[str, Any]:
    """Four H100s, two per NUMA node: PIX pair on node 0, NVLinked pair on node 1."""
    count = len(GPU_SPECS)
    return {
        "schema": 1,
        "profile": "h100-two-sockets",
        "boot": {
            "cmdline": "BOOT_IMAGE=/boot/vmlinuz ro quiet",
            "iommu_mode": "passthrough",
            "acpi_pci": True,
        },
        "driver": {
            "version": "550.54.15",
            "nvml_version": "12.550.54.15",
            "cuda_driver_version": 12040,
        },
        "cpu": {"vendor": "Intel", "model": "Intel(R) Xeon(R) Gold 6430"},
        "numa_nodes": [{"id": 0, "cpus": "0-15"}, {"id": 1, "cpus": "16-31"}],
        "gpus": [_gpu(index) for index in range(count)],
        "pairs": [_pair(a, b) for a in range(count) for b in range(count) if a != b],
    }


def write_state(root: Path, state: dict[str, Any]) -> Path:
    path = root / "run" / "lingbot-lab" / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state))
    return path


@pytest.fixture
def state() -> dict[str, Any]:
    return make_state()


@pytest.fixture
def lab_root(tmp_path: Path, state: dict[str, Any]) -> Path:
    write_state(tmp_path, state)
    return tmp_path


@pytest.fixture
def lost_state() -> dict[str, Any]:
    state = copy.deepcopy(make_state())
    state["gpus"][1]["lost"] = True
    for pair in state["pairs"]:
        if 1 in (pair["a"], pair["b"]):
            pair["p2p_status"] = dict.fromkeys(pair["p2p_status"], "U")
            pair["p2p"] = None
    return state
