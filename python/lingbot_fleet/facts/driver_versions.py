"""The versions of the driver's parts that must agree: the loaded kernel module, and on
NVSwitch systems the fabric manager.

The kernel module says its version in ``/proc/driver/nvidia/version`` (present while it is
loaded), first line e.g. ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue
Mar  5 22:23:56 UTC 2024``, or for the open kernel modules ``NVRM version: NVIDIA UNIX Open
Kernel Module for x86_64  550.54.15  Release Build ...``. A file that is absent or that
this reader cannot parse leaves the version unknown (None, with a note), never "equal".

An NVSwitch system (some GPU reports an NVLink fabric state other than not supported)
needs the fabric manager running, at exactly the driver's version: without it the fabric
is never set up and CUDA does not start. Its state comes from ``systemctl is-active
nvidia-fabricmanager.service``, its version from ``nv-fabricmanager --version`` (``Fabric
Manager version is : 550.54.15``). A program missing, or an answer this reader does not
know, leaves that part unknown (None). Programs are looked for under the facts' root, as
numactl is. Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import command, sysfs

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
FABRIC_MANAGER_PROGRAM = "nv-fabricmanager"
COMMAND_TIMEOUT_S = 10
# systemctl is-active's words: running, and not running (stopped, failed, still starting,
# stopping). Any other answer (none at all: no systemd) is unknown.
UNIT_RUNNING = ("active", "reloading", "refreshing")
UNIT_NOT_RUNNING = ("inactive", "failed", "activating", "deactivating", "maintenance")

_MODULE_VERSION = re.compile(
    r"^NVRM version:.*?\bKernel Module(?: for \S+)?\s+(?P<version>\d+(?:\.\d+)+)(?:\s|$)"
)
_FABRIC_MANAGER_VERSION = re.compile(
    r"Fabric Manager version is\s*:\s*(?P<version>\d+(?:\.\d+)+)(?:\s|$)", re.MULTILINE
)


def parse_module_version(text: str) -> str | None:
    """The kernel module's version from the first line of /proc/driver/nvidia/version."""
    first_line = text.splitlines()[0] if text else ""
    match = _MODULE_VERSION.match(first_line.strip())
    return match["version"] if match else None


def read_kernel_module_version(root: str | Path = "/") -> tuple[str | None, str | None]:
    """(the loaded kernel module's version, None) or (None, a note saying why unknown)."""
    text = sysfs.read_text(sysfs.under(root, DRIVER_VERSION_FILE))
    if text is None:
        return None, (
            f"driver.kernel_module_version unknown: {DRIVER_VERSION_FILE} is absent or "
            "unreadable (the NVIDIA kernel module is not loaded)"
        )
    version = parse_module_version(text)
    if version is None:
        first_line = text.splitlines()[0] if text else ""
        return None, (
            f"driver.kernel_module_version unknown: {DRIVER_VERSION_FILE} says "
            f"{first_line[:200]!r}, which this reader cannot parse"
        )
    return version, None


def parse_fabric_manager_version(output: str) -> str | None:
    """The version ``nv-fabricmanager --version`` prints."""
    match = _FABRIC_MANAGER_VERSION.search(output)
    return match["version"] if match else None


def nvswitch_system(gpus: Iterable[Mapping[str, Any]]) -> bool:
    """Whether some GPU reports an NVLink fabric (NVML's fabric state, supported)."""
    return any(
        isinstance(gpu.get("fabric"), str) and gpu["fabric"] != "not_supported" for gpu in gpus
    )


def run_command(argv: Sequence[str]) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr); (None, "", why) when it could not be run."""
    return command.run_command(argv, COMMAND_TIMEOUT_S)


def _said(returncode: int | None, stdout: str, stderr: str) -> str:
    output = " ".join((stdout.strip() or stderr.strip()).split())[:200]
    if returncode is None:
        return f"could not run: {output}"
    return f"{output or '(nothing)'} (exit {returncode})"


def read_fabric_manager(
    root: str | Path, systemctl: str | None, fabric_manager: str | None
) -> dict[str, Any]:
    """``{unit, state, active, version, evidence}`` of the fabric manager; ``systemctl``
    and ``fabric_manager`` are the programs' paths on the node (None: not installed)."""
    facts: dict[str, Any] = {
        "unit": FABRIC_MANAGER_UNIT,
        "state": None,
        "active": None,
        "version": None,
        "evidence": [],
    }
    asked = f"systemctl is-active {FABRIC_MANAGER_UNIT}"
    if systemctl is None:
        facts["evidence"].append(f"{asked}: no systemctl on the node")
    else:
        returncode, stdout, stderr = run_command(
            [str(sysfs.under(root, systemctl)), "is-active", FABRIC_MANAGER_UNIT]
        )
        state = stdout.strip().splitlines()[0] if stdout.strip() else None
        facts["evidence"].append(f"{asked}: {_said(returncode, stdout, stderr)}")
        if state in UNIT_RUNNING or state in UNIT_NOT_RUNNING:
            facts["state"] = state
            facts["active"] = state in UNIT_RUNNING
    asked = f"{FABRIC_MANAGER_PROGRAM} --version"
    if fabric_manager is None:
        facts["evidence"].append(f"{asked}: {FABRIC_MANAGER_PROGRAM} is not installed")
    else:
        returncode, stdout, stderr = run_command(
            [str(sysfs.under(root, fabric_manager)), "--version"]
        )
        facts["evidence"].append(f"{asked}: {_said(returncode, stdout, stderr)}")
        facts["version"] = parse_fabric_manager_version(stdout + "\n" + stderr)
    return facts
