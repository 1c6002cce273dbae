"""nv-fabricmanager of the lingbot lab: the NVSwitch fabric manager (CONTRACT.md).

Installed only in nodes whose profile has NVSwitches, with nvidia-fabricmanager.service
(enabled). ``nv-fabricmanager --version`` prints the real one's version line, the profile's
driver version unless a ``fabric_manager_version`` fault gives another. Started as the
daemon (``-c <config>``) it refuses as the real one does, exit status 1 before it forks
(the unit is then failed): with the fault ``fabric_manager_down``, without the driver
(no state.json), or at another version than the loaded driver's; else it forks (the unit
is Type=forking) and its child waits to be stopped. The NVLink fabric's state (NVML's
``nvmlDeviceGetGpuFabricInfo``) follows the same faults (hwstate.fabric_state).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from lingbot_lab import LAB_PROFILE_PATH, LAB_RUN_DIR
from lingbot_lab.profile import load_profile_json

PROGRAM = "nv-fabricmanager"
CONFIG_PATH = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
VERSION_LINE = "Fabric Manager version is : {version}"
# The faults under which the fabric manager does not run, so the fabric is never set up.
FAULTS_THAT_STOP_IT = ("fabric_manager_down", "fabric_manager_version")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def fabric_manager_stopped(profile: dict[str, Any]) -> bool:
    """Whether a fault keeps the fabric manager from running (and the fabric from starting)."""
    return any(fault["kind"] in FAULTS_THAT_STOP_IT for fault in profile["faults"])


def fabric_manager_version(profile: dict[str, Any]) -> str:
    """The installed fabric manager's version: the driver's, or a fault's."""
    for fault in profile["faults"]:
        if fault["kind"] == "fabric_manager_version":
            return str(fault["version"])
    return str(profile["driver"]["version"])


def start_problem(root: str, profile: dict[str, Any]) -> str | None:
    """Why the daemon would not start (its log line), or None."""
    if any(fault["kind"] == "fabric_manager_down" for fault in profile["faults"]):
        return (
            "request to query NVSwitch device information from NVSwitch driver failed "
            "(lab fault fabric_manager_down)"
        )
    state_path = Path(root or "/") / LAB_RUN_DIR.lstrip("/") / "state.json"
    try:
        driver_version = json.loads(state_path.read_text(encoding="utf-8"))["driver"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return "failed to open the NVIDIA driver: the NVIDIA kernel module is not loaded"
    version = fabric_manager_version(profile)
    if version != driver_version:
        return (
            f"fabric manager NVIDIA GPU driver interface version {version} don't match with "
            f"driver version {driver_version}. Please update with matching NVIDIA driver "
            "package."
        )
    return None


def _serve() -> None:
    """The forked daemon: its own session, waiting for a stop signal."""
    os.setsid()
    os.chdir("/")
    with open(os.devnull, "rb") as devnull:
        os.dup2(devnull.fileno(), 0)
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    signal.sigwait(set(STOP_SIGNALS))
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="NVIDIA Fabric Manager (lab)")
    parser.add_argument("-v", "--version", action="store_true", help="print the version")
    parser.add_argument("-c", "--config", default=CONFIG_PATH, help="configuration file")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("LINGBOT_LAB_ROOT", "")
    try:
        profile = load_profile_json(Path(root or "/") / LAB_PROFILE_PATH.lstrip("/"))
    except (OSError, ValueError) as error:
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        return 1
    if options.version:
        print(VERSION_LINE.format(version=fabric_manager_version(profile)))
        return 0
    problem = start_problem(root, profile)
    if problem is not None:
        print(f"{PROGRAM}: {problem}", file=sys.stderr)
        print(f"{PROGRAM}: NVIDIA Fabric Manager failed to start", file=sys.stderr)
        return 1
    if os.fork() == 0:
        _serve()
    return 0
