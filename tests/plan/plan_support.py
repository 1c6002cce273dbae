"""Facts and probe documents for every lab profile, from the lab's hardware model.

`lab_inputs(name)` computes the lab state of a profile at its initial boot (or with a
given kernel command line) and maps it to the gpu_facts document (docs/facts.md) and the
probe result (docs/probe.md): the probe's figures are the state's pairs[].p2p and
gpus[].host, which is what the real probe measures on a lab node.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO_ROOT / "lab" / "profiles"
for extra in (REPO_ROOT / "python", REPO_ROOT / "lab" / "node"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from lingbot_lab.grubcfg import profile_cmdline  # noqa: E402
from lingbot_lab.hwstate import compute_state  # noqa: E402
from lingbot_lab.profile import validate_profile  # noqa: E402

PROFILE_NAMES = sorted(path.stem for path in PROFILES_DIR.glob("*.yml"))


def load_profile(name: str) -> dict[str, Any]:
    return validate_profile(yaml.safe_load((PROFILES_DIR / f"{name}.yml").read_text()))


def boot_cmdline(profile: dict[str, Any]) -> str:
    kernel = profile["boot"].get("kernel_version", "6.1.0-18-amd64")
    return f"BOOT_IMAGE=/boot/vmlinuz-{kernel} {profile_cmdline(profile)}".strip()


def lab_state(name: str, cmdline: str | None = None) -> dict[str, Any]:
    profile = load_profile(name)
    return compute_state(profile, cmdline if cmdline is not None else boot_cmdline(profile))


def _pair(state: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    return next(p for p in state["pairs"] if p["a"] == a and p["b"] == b)


def facts_from_state(state: dict[str, Any]) -> dict[str, Any]:
    count = len(state["gpus"])
    gpus = []
    for gpu in state["gpus"]:
        link = gpu["link"]
        gpus.append(
            {
                "index": gpu["index"],
                "lost": gpu["lost"],
                "uuid": None if gpu["lost"] else gpu["uuid"],
                "model": None if gpu["lost"] else gpu["name"],
                "bus_id": gpu["bdf"],
                "numa_node": gpu["numa_node"],
                "local_cpulist": gpu["cpu_list"],
                "pcie": {
                    "current_gen": link["gen_idle"],
                    "current_width": link["width"],
                    "max_gen": link["max_gen"],
                    "max_width": link["max_width"],
                    "max_gen_gpu": link["max_gen_gpu"],
                    "max_width_gpu": link["max_width_gpu"],
                    "upstream_port": None,
                },
                "performance_state": "P8",
                "persistence_mode": bool(gpu["persistence_default"]),
                "mig_mode": "enabled" if gpu["mig_mode"] else "disabled",
                "iommu_group": gpu["iommu_group"],
                "host_bridge": None,
                "bridges": [],
            }
        )

    def matrix(word: Any) -> list[list[str]]:
        return [
            ["X" if a == b else word(_pair(state, a, b)) for b in range(count)]
            for a in range(count)
        ]

    return {
        "schema_version": 1,
        "sources": {"gpus": "nvml"},
        "notes": [],
        "driver_version": state["driver"]["version"],
        "kernel": {"cmdline": state["boot"]["cmdline"]},
        "iommu": {"mode": state["boot"]["iommu_mode"]},
        "numa": {
            "node_count": len(state["numa_nodes"]),
            "device_nodes": sorted({g["numa_node"] for g in state["gpus"]}),
        },
        "gpus": gpus,
        "topology": matrix(lambda pair: pair["topology"]),
        "p2p": {
            capability: matrix(lambda pair, c=capability: pair["p2p_status"][c])
            for capability in ("read", "write", "nvlink", "atomics")
        },
    }


def probe_from_state(state: dict[str, Any]) -> dict[str, Any]:
    gpus = [
        {
            "index": gpu["index"],
            "cuda_ordinal": gpu["index"],
            "uuid": gpu["uuid"],
            "bus_id": gpu["bdf"],
            "numa_node": gpu["numa_node"],
            "h2d_gbytes_per_s": None if gpu["lost"] else gpu["host"]["h2d_gbytes_per_s"],
            "d2h_gbytes_per_s": None if gpu["lost"] else gpu["host"]["d2h_gbytes_per_s"],
            "link_under_load": None,
            "error": "CUDA_ERROR_NO_DEVICE: GPU lost" if gpu["lost"] else None,
        }
        for gpu in state["gpus"]
    ]
    pairs = []
    for pair in state["pairs"]:
        p2p = pair["p2p"]
        staged = pair["host_staged"]
        if p2p is None:
            data_check = "skipped"
        else:
            data_check = "failed" if pair["p2p_drops_writes"] else "passed"
        pairs.append(
            {
                "src": pair["a"],
                "dst": pair["b"],
                "can_access_peer": p2p is not None,
                "p2p_enabled": None
                if p2p is None
                else {
                    "unidirectional_gbytes_per_s": p2p["gbytes_per_s"],
                    "bidirectional_gbytes_per_s": p2p["bidir_gbytes_per_s"],
                    "latency_ns": p2p["latency_ns"],
                },
                "p2p_disabled": {
                    "unidirectional_gbytes_per_s": staged["gbytes_per_s"],
                    "bidirectional_gbytes_per_s": staged["bidir_gbytes_per_s"],
                    "latency_ns": staged["latency_ns"],
                },
                "data_check": data_check,
                "error": None,
            }
        )
    return {
        "schema_version": 1,
        "timestamp": "2026-01-01T00:00:00Z",
        "duration_s": 1.0,
        "parameters": {},
        "driver": {"cuda_driver_version": state["driver"]["cuda_driver_version"]},
        "gpus": gpus,
        "pairs": pairs,
        "errors": [],
    }


def lab_inputs(name: str, cmdline: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    state = lab_state(name, cmdline)
    return facts_from_state(state), probe_from_state(state)
