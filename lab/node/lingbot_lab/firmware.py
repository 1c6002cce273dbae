"""Boot-time firmware: cmdline -> boot_id -> state -> sysfs -> bind mounts (CONTRACT.md)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from lingbot_lab import LAB_PROFILE_PATH, LAB_RUN_DIR
from lingbot_lab.driver_proc import PROC_DRIVER, PROC_DRIVER_NAME, write_driver_version
from lingbot_lab.grubcfg import boot_cmdline, install_boot_config, root_path, write_atomically
from lingbot_lab.hwstate import compute_state, flatten_state
from lingbot_lab.kernel_log import boot_lines, link_dev_kmsg, uptime_s, write_boot_log
from lingbot_lab.kernels import booted_release, has_module, install_module
from lingbot_lab.profile import load_profile_json
from lingbot_lab.sysfs import render_sysfs

# Written once, when the node's overlay first boots: the OS "installation" is done.
INSTALLED_MARKER = "var/lib/lingbot-lab/boot-config-installed"
# The faults lingbot-lab-incident injected while the node ran (gone at the next boot).
INCIDENTS_NAME = "incidents.json"
# (source under /run/lingbot-lab, target in the node). A single file under /proc/sys
# cannot be a mount point, so boot_id comes with a copy of its directory.
RANDOM_DIR = "/proc/sys/kernel/random"
BIND_MOUNTS = (
    ("cmdline", "/proc/cmdline"),
    ("random", RANDOM_DIR),
    ("sys/bus/pci/devices", "/sys/bus/pci/devices"),
    ("sys/kernel/iommu_groups", "/sys/kernel/iommu_groups"),
    ("sys/devices/system/node", "/sys/devices/system/node"),
)
# Mounted only when the boot wrote their source (the driver loaded: its
# /proc/driver/nvidia/version, driver_proc.py); one that fails is reported and the boot
# goes on without it (the file is then absent: unknown to its readers, never wrong).
OPTIONAL_BIND_MOUNTS = ((PROC_DRIVER_NAME, PROC_DRIVER),)


def run_dir(root: str) -> Path:
    return root_path(root, LAB_RUN_DIR.lstrip("/"))


def ensure_installed(root: str, profile: dict[str, Any]) -> list[str]:
    """First boot only: write the boot configuration the profile describes."""
    marker = root_path(root, INSTALLED_MARKER)
    if marker.exists():
        return []
    written = install_boot_config(root, profile)
    written.append(install_module(root, profile["boot"]["kernel_version"], profile))
    write_atomically(marker, "1\n")
    return written


def boot(root: str, profile_path: Path, link_prefix: str) -> dict[str, Any]:
    """Every boot step except the mounts; returns the state."""
    profile = load_profile_json(profile_path)
    ensure_installed(root, profile)
    cmdline = boot_cmdline(root, profile)
    lab = run_dir(root)
    lab.mkdir(parents=True, exist_ok=True)
    write_atomically(lab / "cmdline", cmdline + "\n")
    write_atomically(lab / "boot_id", f"{uuid.uuid4()}\n")
    copy_random_dir(root, lab)
    state = compute_state(profile, cmdline, time.time())
    # The driver's view of the hardware. Without it (a boot into a kernel the NVIDIA module
    # was not built for, or the fault driver_not_loaded) the simulated NVML says Driver Not
    # Loaded and nvidia-smi exits 9, while sysfs still lists the GPUs.
    release = booted_release(cmdline)
    driver_loads = has_module(root, release) and not any(
        fault["kind"] == "driver_not_loaded" for fault in profile["faults"]
    )
    # Incidents (lingbot-lab-incident) last until the next boot.
    (lab / INCIDENTS_NAME).unlink(missing_ok=True)
    if not driver_loads:
        for name in ("state.json", "state.txt"):
            (lab / name).unlink(missing_ok=True)
    else:
        write_state(lab, state)
    write_driver_version(lab, profile, driver_loads)
    write_boot_log(lab, boot_lines(profile, state, release, driver_loads), uptime_s())
    (lab / "persistence").mkdir(exist_ok=True)
    (lab / "busy").mkdir(exist_ok=True)
    render_sysfs(state, profile, lab, link_prefix)
    return state


def write_state(lab: Path, state: dict[str, Any]) -> None:
    """state.json (nvidia-smi, the firmware) and state.txt (libnvidia-ml, libcuda)."""
    write_atomically(lab / "state.json", json.dumps(state, indent=2) + "\n")
    write_atomically(lab / "state.txt", flatten_state(state))


def copy_random_dir(root: str, lab: Path) -> None:
    """A copy of /proc/sys/kernel/random with this boot's boot_id, to bind over it."""
    random_dir = lab / "random"
    random_dir.mkdir(exist_ok=True)
    source = root_path(root, RANDOM_DIR.lstrip("/"))
    if source.is_dir():
        for entry in source.iterdir():
            if entry.name != "boot_id":
                try:
                    (random_dir / entry.name).write_text(entry.read_text())
                except OSError:
                    continue
    (random_dir / "boot_id").write_text((lab / "boot_id").read_text())


def bind_mounts(root: str) -> None:
    """mount --bind each lab file or directory over the node's own."""
    lab = run_dir(root)
    for source, target in BIND_MOUNTS:
        subprocess.run(["mount", "--bind", str(lab / source), target], check=True)
    for source, target in OPTIONAL_BIND_MOUNTS:
        problem = optional_bind_mount(lab / source, target)
        if problem is not None:
            print(f"lingbot-lab-firmware: {problem}", file=sys.stderr)
    link_dev_kmsg(str(lab))


def optional_bind_mount(source: Path, target: str) -> str | None:
    """mount --bind source over target when source exists (the target's directory made
    when missing); why it failed, or None."""
    if not source.exists():
        return None
    try:
        Path(target).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"{target} cannot be made, {source} is not mounted: {error}"
    result = subprocess.run(
        ["mount", "--bind", str(source), target], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return f"mount --bind {source} {target} failed: {result.stderr.strip()}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lingbot-lab-firmware", description="Bring up the simulated hardware for this boot."
    )
    parser.add_argument("--no-mount", action="store_true", help="do everything but the mounts")
    parser.add_argument("--profile", help=f"profile JSON (default {LAB_PROFILE_PATH})")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("LINGBOT_LAB_ROOT", "")
    profile_path = Path(options.profile or root_path(root, LAB_PROFILE_PATH.lstrip("/")))
    link_prefix = str(run_dir(root)) if root else LAB_RUN_DIR
    try:
        state = boot(root, profile_path, link_prefix)
        if not options.no_mount:
            bind_mounts(root)
    except (OSError, ValueError, subprocess.CalledProcessError) as error:
        print(f"lingbot-lab-firmware: {error}", file=sys.stderr)
        return 1
    gpus = len(state["gpus"])
    print(
        f"lingbot-lab-firmware: {state['profile']}: {gpus} GPUs,"
        f" iommu {state['boot']['iommu_mode']}, cmdline: {state['boot']['cmdline']}"
    )
    return 0
