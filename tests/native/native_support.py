"""Helpers for the lab's C driver library tests (lab/native): states and paths.

States are written as state.txt under a temporary LINGBOT_LAB_ROOT, either built by hand
here (flattened with the rule in lab/CONTRACT.md) or computed from lab/profiles by
lab/node/lingbot_lab.hwstate when that package is importable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = REPO_ROOT / "lab" / "native"
BUILD_DIR = NATIVE_DIR / "build"
PROFILES_DIR = REPO_ROOT / "lab" / "profiles"
LAB_NODE_DIR = REPO_ROOT / "lab" / "node"
RUN_SUBDIR = Path("run") / "lingbot-lab"

BASE_UUIDS = (
    "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11",
    "GPU-11540733-53c6-4b27-9b89-a46dfe945aec",
)
PHB_P2P = {"gbytes_per_s": 28.4, "bidir_gbytes_per_s": 52.0, "latency_ns": 1320}
PHB_HOST_STAGED = {"gbytes_per_s": 12.8, "bidir_gbytes_per_s": 14.5, "latency_ns": 8800}
NVLINK_P2P = {"gbytes_per_s": 94.0, "bidir_gbytes_per_s": 186.0, "latency_ns": 700}


# ---- state.txt --------------------------------------------------------------------


def _flat_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _flatten_into(prefix: str, value: Any, lines: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten_into(f"{prefix}.{key}" if prefix else key, item, lines)
    elif isinstance(value, list):
        lines.append(f"{prefix}.count {len(value)}")
        for position, item in enumerate(value):
            _flatten_into(f"{prefix}.{position}", item, lines)
    else:
        lines.append(f"{prefix} {_flat_value(value)}")


def flatten(state: dict[str, Any]) -> str:
    """state.json -> state.txt, the CONTRACT's rule (gpus, pairs, numa_nodes by name)."""
    lines: list[str] = []
    for key, value in state.items():
        if key == "gpus":
            lines.append(f"gpu_count {len(value)}")
            for gpu in value:
                _flatten_into(f"gpu.{gpu['index']}", gpu, lines)
        elif key == "pairs":
            lines.append(f"pair_count {len(value)}")
            for pair in value:
                _flatten_into(f"pair.{pair['a']}.{pair['b']}", pair, lines)
        elif key == "numa_nodes":
            lines.append(f"numa_node_count {len(value)}")
            for position, node in enumerate(value):
                _flatten_into(f"numa_node.{position}", node, lines)
        else:
            _flatten_into(key, value, lines)
    return "\n".join(lines) + "\n"


def _gpu(index: int, bus: int, brand: str, name: str) -> dict[str, Any]:
    return {
        "index": index,
        "bdf": f"0000:{bus:02x}:00.0",
        "name": name,
        "brand": brand,
        "uuid": BASE_UUIDS[index],
        "serial": f"132202100000{index + 1}",
        "pci_device_id": (0x2230 << 16) | 0x10DE,
        "pci_subsystem_id": (0x1459 << 16) | 0x10DE,
        "memory_total_bytes": 49140 * 1024 * 1024,
        "numa_node": 0,
        "cpu_list": "0-15",
        "link": {
            "max_gen_gpu": 4,
            "max_width_gpu": 16,
            "max_gen": 4,
            "max_width": 16,
            "width": 16,
            "gen_load": 4,
            "gen_idle": 1,
        },
        "host": {
            "h2d_gbytes_per_s": 24.6 - 0.1 * index,
            "d2h_gbytes_per_s": 26.2 - 0.1 * index,
            "latency_ns": 9200 + 100 * index,
        },
        "nvlinks": [],
        "mig_mode": 0,
        "lost": False,
        "fail_after_copies": 0,
        "persistence_default": 0,
        "iommu_group": 18 + index,
    }


def _pair(a: int, b: int) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "topology": "PHB",
        "topology_level": 30,
        "nvlink_count": 0,
        "p2p_status": {"read": "OK", "write": "OK", "nvlink": "NS", "atomics": "NS", "prop": "OK"},
        "p2p": dict(PHB_P2P),
        "host_staged": dict(PHB_HOST_STAGED),
        "p2p_drops_writes": False,
    }


def base_state() -> dict[str, Any]:
    """Two RTX A6000 under one root complex (PHB), idle at gen 1, P2P OK."""
    return {
        "schema": 1,
        "profile": "native-test-phb",
        "boot": {
            "cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 ro quiet",
            "iommu_mode": "passthrough",
            "acpi_pci": True,
        },
        "driver": {
            "version": "550.54.15",
            "nvml_version": "12.550.54.15",
            "cuda_driver_version": 12040,
        },
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7313P 16-Core Processor"},
        "numa_nodes": [{"id": 0, "cpus": "0-15"}],
        "gpus": [
            _gpu(0, 0x41, "NVIDIA RTX", "NVIDIA RTX A6000"),
            _gpu(1, 0x42, "NVIDIA RTX", "NVIDIA RTX A6000"),
        ],
        "pairs": [_pair(0, 1), _pair(1, 0)],
    }


def _set_statuses(state: dict[str, Any], word: str, keep_nvlink: bool = True) -> None:
    for pair in state["pairs"]:
        for cap in ("read", "write", "atomics", "prop"):
            pair["p2p_status"][cap] = word
        if not keep_nvlink:
            pair["p2p_status"]["nvlink"] = word
        pair["p2p"] = None


def scenario_state(name: str) -> dict[str, Any]:
    """A hand-built state per scenario the libraries must model."""
    state = base_state()
    state["profile"] = f"native-test-{name}"
    if name == "phb":
        pass
    elif name == "geforce":
        for gpu in state["gpus"]:
            gpu["brand"] = "GeForce"
            gpu["name"] = "NVIDIA GeForce RTX 4090"
        _set_statuses(state, "GNS")
    elif name == "noacpi":
        state["boot"]["cmdline"] += " pci=noacpi"
        state["boot"]["acpi_pci"] = False
        for gpu in state["gpus"]:
            gpu["numa_node"] = -1
        _set_statuses(state, "CNS")
    elif name == "lost":
        state["gpus"][1]["lost"] = True
        _set_statuses(state, "U", keep_nvlink=False)
    elif name == "iommu-drop":
        state["boot"]["cmdline"] += " amd_iommu=on"
        state["boot"]["iommu_mode"] = "translated"
        for pair in state["pairs"]:
            pair["p2p"] = {"gbytes_per_s": 9.6, "bidir_gbytes_per_s": 11.0, "latency_ns": 2600}
            pair["p2p_drops_writes"] = True
    elif name == "nvlink":
        state["gpus"][0]["nvlinks"] = [{"count": 4, "to": 1}]
        state["gpus"][1]["nvlinks"] = [{"count": 4, "to": 0}]
        for pair in state["pairs"]:
            pair["topology"] = "NV4"
            pair["nvlink_count"] = 4
            pair["p2p_status"]["nvlink"] = "OK"
            pair["p2p_status"]["atomics"] = "OK"
            pair["p2p"] = dict(NVLINK_P2P)
    elif name == "fails-after-copies":
        state["gpus"][1]["fail_after_copies"] = 5
    else:
        raise ValueError(f"unknown native test scenario {name!r}")
    return state


SCENARIOS = ("phb", "geforce", "noacpi", "lost", "iommu-drop", "nvlink", "fails-after-copies")


def write_lab_root(root: Path, state_text: str) -> Path:
    run_dir = root / RUN_SUBDIR
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "state.txt").write_text(state_text)
    return root


# ---- profiles through hwstate -----------------------------------------------------


def profile_state(name: str) -> tuple[dict[str, Any], str]:
    """(state, state.txt) of lab/profiles/<name>.yml booted with its own command line."""
    yaml = pytest.importorskip("yaml")
    if str(LAB_NODE_DIR) not in sys.path:
        sys.path.insert(0, str(LAB_NODE_DIR))
    try:
        from lingbot_lab import hwstate, profile
    except ImportError as error:
        pytest.skip(f"lab/node/lingbot_lab.hwstate is not importable yet: {error}")
    validated = profile.validate_profile(yaml.safe_load((PROFILES_DIR / f"{name}.yml").read_text()))
    boot = validated["boot"]
    cmdline = " ".join(
        part
        for part in (
            "BOOT_IMAGE=/boot/vmlinuz ro",
            boot["grub_cmdline_linux"],
            boot["grub_cmdline_linux_default"],
        )
        if part
    )
    state = hwstate.compute_state(validated, cmdline)
    return state, hwstate.flatten_state(state)


def profile_states() -> list[tuple[str, dict[str, Any], str]]:
    """(profile name, state, state.txt) for every lab/profiles/*.yml, via hwstate."""
    return [(path.stem, *profile_state(path.stem)) for path in sorted(PROFILES_DIR.glob("*.yml"))]


ACS_PROFILE = "a6000-iommu-acs"
# The profile's own cmdline with and without the fix for the translating IOMMU.
ACS_PASSTHROUGH_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on iommu=pt"
ACS_TRANSLATED_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on"
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
ACS_CONTROL_OFFSET = 6
ACS_REDIRECT_BITS = 0x000C  # request redirect (bit 2) | completion redirect (bit 3)


def boot_profile(root: Path, name: str, cmdline: str) -> tuple[dict[str, Any], str]:
    """The profile booted with cmdline: (state, state.txt); its sysfs rendered under
    root/sys as the node's /sys (LINGBOT_LAB_ROOT=root), so root/sys/bus/pci/devices/<bdf>
    links into root/sys/devices. The caller writes state.txt (cuda_loader does)."""
    yaml = pytest.importorskip("yaml")
    if str(LAB_NODE_DIR) not in sys.path:
        sys.path.insert(0, str(LAB_NODE_DIR))
    from lingbot_lab import hwstate, profile, sysfs

    validated = profile.validate_profile(yaml.safe_load((PROFILES_DIR / f"{name}.yml").read_text()))
    state = hwstate.compute_state(validated, cmdline)
    sysfs.render_sysfs(state, validated, root, link_prefix=str(root))
    return state, hwstate.flatten_state(state)


def acs_control_offset(space: bytes) -> int:
    """Offset of the ACS control register, found by walking the extended capabilities."""
    offset = PCI_EXT_CAP_START
    while offset >= PCI_EXT_CAP_START:
        header = int.from_bytes(space[offset : offset + 4], "little")
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            return offset + ACS_CONTROL_OFFSET
        offset = (header >> 20) & 0xFFC
    raise AssertionError("no ACS extended capability")


def write_acs_control(config: Path, value: int, mask: int) -> None:
    """What `setpci -s <bdf> ECAP_ACS+6.w=<value>:<mask>` does to a sysfs config file: a
    two-byte write of the masked bits in place."""
    at = acs_control_offset(config.read_bytes())
    with open(config, "r+b") as handle:
        handle.seek(at)
        old = int.from_bytes(handle.read(2), "little")
        handle.seek(at)
        handle.write(((old & ~mask) | (value & mask)).to_bytes(2, "little"))


def read_acs_control(config: Path) -> int:
    space = config.read_bytes()
    at = acs_control_offset(space)
    return int.from_bytes(space[at : at + 2], "little")


def profile_names() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.yml"))
