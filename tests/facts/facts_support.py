"""Lab nodes rendered in a temp dir: state, sysfs, /proc/cmdline, NVML and nvidia-smi.

`boot_lab_node(profile, tmp_path)` runs the lab firmware (without mounts) with
LINGBOT_LAB_ROOT=<tmp>/lab and exposes the rendered tree as a node root <tmp>/node
(node/sys -> the rendered sys, node/proc/cmdline), which the facts read with root=<tmp>/node.
"""

from __future__ import annotations

import copy
import ctypes
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_fabric_manager import install_fabric_manager

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO_ROOT / "lab" / "profiles"
NATIVE_DIR = REPO_ROOT / "lab" / "native"
NATIVE_BUILD_DIR = NATIVE_DIR / "build"
LAB_SMI = REPO_ROOT / "lab" / "node" / "bin" / "nvidia-smi"
LAB_LIB = REPO_ROOT / "lab" / "node"


@dataclass(frozen=True)
class LabNode:
    profile: dict[str, Any]
    state: dict[str, Any]
    lab_root: Path  # LINGBOT_LAB_ROOT
    root: Path  # what the facts read as "/"

    def busy(self, index: int, until_s: float) -> None:
        busy_dir = self.lab_root / "run" / "lingbot-lab" / "busy"
        busy_dir.mkdir(parents=True, exist_ok=True)
        (busy_dir / str(index)).write_text(f"{until_s}\n")


def profile_paths() -> list[Path]:
    return sorted(PROFILES_DIR.glob("*.yml"))


def load_profile(name: str) -> dict[str, Any]:
    path = PROFILES_DIR / f"{name}.yml"
    if not path.exists():
        pytest.skip(f"lab profile {name} is not written yet ({path.relative_to(REPO_ROOT)})")
    return yaml.safe_load(path.read_text())


def boot_lab_node(
    raw_profile: dict[str, Any], tmp_path: Path, cmdline: str | None = None
) -> LabNode:
    from lingbot_lab import firmware
    from lingbot_lab.profile import has_nvswitch, validate_profile

    lab_root = tmp_path / "lab"
    lab_root.mkdir(parents=True)
    profile = validate_profile(raw_profile)
    profile_path = tmp_path / "profile.json"
    profile_path.write_text(json.dumps(raw_profile))
    run_dir = lab_root / "run" / "lingbot-lab"
    state = firmware.boot(str(lab_root), profile_path, str(run_dir))
    if cmdline is not None:
        from lingbot_lab.hwstate import compute_state, flatten_state
        from lingbot_lab.sysfs import render_sysfs

        state = compute_state(profile, cmdline)
        (run_dir / "cmdline").write_text(cmdline + "\n")
        (run_dir / "state.json").write_text(json.dumps(state))
        (run_dir / "state.txt").write_text(flatten_state(state))
        render_sysfs(state, profile, run_dir, str(run_dir))
    root = tmp_path / "node"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cmdline").write_text((run_dir / "cmdline").read_text())
    (root / "proc" / "uptime").symlink_to("/proc/uptime")
    (root / "sys").symlink_to(run_dir / "sys")
    (root / "dev").mkdir()
    (root / "dev" / "kmsg").symlink_to(run_dir / "kmsg")
    if (run_dir / "proc-driver").is_dir():  # bound over /proc/driver when the driver loads
        (root / "proc" / "driver").symlink_to(run_dir / "proc-driver")
    if has_nvswitch(profile):
        install_fabric_manager(root, lab_root, raw_profile)
    return LabNode(profile=profile, state=state, lab_root=lab_root, root=root)


def nvml_library() -> Path:
    """The lab's libnvidia-ml.so.1, built with `make -C lab/native` when missing."""
    library = NATIVE_BUILD_DIR / "libnvidia-ml.so.1"
    if not library.exists() and (NATIVE_DIR / "Makefile").exists():
        subprocess.run(["make", "-C", str(NATIVE_DIR)], check=False, capture_output=True)
    if not library.exists():
        pytest.skip(f"{library.relative_to(REPO_ROOT)} is not built (make -C lab/native)")
    return library


def cuda_library() -> Path:
    library = NATIVE_BUILD_DIR / "libcuda.so.1"
    nvml_library()
    if not library.exists():
        pytest.skip(f"{library.relative_to(REPO_ROOT)} is not built (make -C lab/native)")
    return library


@pytest.fixture
def lab_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Point the lab's tools at a node: lab_env(node) sets LINGBOT_LAB_ROOT/LIB."""

    def point_at(node: LabNode) -> None:
        monkeypatch.setenv("LINGBOT_LAB_ROOT", str(node.lab_root))
        monkeypatch.setenv("LINGBOT_LAB_LIB", str(LAB_LIB))

    yield point_at


@pytest.fixture
def lab_pynvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    """pynvml bound to the lab's libnvidia-ml (no system NVML needed)."""
    import pynvml

    library = ctypes.CDLL(str(nvml_library()))
    monkeypatch.setattr(pynvml, "nvmlLib", library)
    return pynvml


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import pynvml` fail, as on a node without nvidia-ml-py."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


SMI_COMMAND = (sys.executable, str(LAB_SMI))


def a6000_pair(**changes: Any) -> dict[str, Any]:
    """Two RTX A6000 on an AMD root complex, each behind its own root port (PHB).

    `changes` replace top-level keys; tests adjust copies for chipset, x8 and NUMA cases.
    """
    gpu = {
        "model": "NVIDIA RTX A6000",
        "brand": "NVIDIA RTX",
        "pci_device_id": 0x2230,
        "memory_mib": 49140,
        "link": {"max_gen": 4, "max_width": 16, "gen_idle": 1},
        "host": {"h2d_gbytes_per_s": 24.6, "d2h_gbytes_per_s": 26.2, "latency_ns": 9200},
    }
    acs = {"source_validation": True}
    profile = {
        "schema": 1,
        "name": "test-a6000-pair",
        "summary": "Two RTX A6000, one root port each.",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7313P 16-Core Processor"},
        "numa_nodes": [{"id": 0, "cpus": "0-15"}],
        "host_bridges": [{"id": "pci0000:40", "numa_node": 0}],
        "pcie_ports": [
            {
                "bdf": "0000:40:01.1",
                "kind": "root_port",
                "parent": "pci0000:40",
                "link": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
                "acs": acs,
            },
            {
                "bdf": "0000:40:03.1",
                "kind": "root_port",
                "parent": "pci0000:40",
                "link": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
                "acs": acs,
            },
        ],
        "gpus": [
            {
                **copy.deepcopy(gpu),
                "bdf": "0000:41:00.0",
                "parent": "0000:40:01.1",
                "uuid": "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11",
                "serial": "1322021000001",
            },
            {
                **copy.deepcopy(gpu),
                "bdf": "0000:42:00.0",
                "parent": "0000:40:03.1",
                "uuid": "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b12",
                "serial": "1322021000002",
            },
        ],
        "paths": [
            {
                "between": [0, 1],
                "p2p": {"gbytes_per_s": 28.4, "bidir_gbytes_per_s": 52.0, "latency_ns": 1320},
                "host_staged": {
                    "gbytes_per_s": 12.8,
                    "bidir_gbytes_per_s": 14.5,
                    "latency_ns": 8800,
                },
            }
        ],
    }
    profile.update(changes)
    return profile
