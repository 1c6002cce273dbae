"""The loaded driver's /proc/driver/nvidia/version (CONTRACT.md, "Firmware").

A loaded NVIDIA kernel module says its version in /proc/driver/nvidia/version. When the
driver loads, the firmware writes that file's text (the profile's ``driver.version``) to
/run/lingbot-lab/driver-version, and the same text to
/run/lingbot-lab/proc-driver/nvidia/version, a directory it binds over the node's
/proc/driver: procfs has no mkdir, so /proc/driver/nvidia cannot be created in a container
whose host runs no NVIDIA driver, while /proc/driver itself always exists (the kernel
makes it) and can be a mount point. Over a host with a driver, the host's own
/proc/driver/nvidia is hidden the same way. Without the driver both are removed and
nothing is mounted: the file is absent, as on a node whose module is not loaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lingbot_lab.grubcfg import write_atomically

DRIVER_VERSION_NAME = "driver-version"
PROC_DRIVER_NAME = "proc-driver"
PROC_DRIVER = "/proc/driver"
# The 550.54.15 module's build line; the lab gives every version the same one.
BUILD_DATE = "Tue Mar  5 22:23:56 UTC 2024"
GCC_LINE = "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) "


def version_file_text(version: str) -> str:
    """/proc/driver/nvidia/version of the proprietary x86_64 module ``version``."""
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  {BUILD_DATE}\n{GCC_LINE}\n"


def write_driver_version(lab: Path, profile: dict[str, Any], driver_loads: bool) -> None:
    """driver-version and proc-driver/nvidia/version when the driver loads; else neither."""
    proc_driver = lab / PROC_DRIVER_NAME
    if not driver_loads:
        (lab / DRIVER_VERSION_NAME).unlink(missing_ok=True)
        shutil.rmtree(proc_driver, ignore_errors=True)
        return
    text = version_file_text(profile["driver"]["version"])
    write_atomically(lab / DRIVER_VERSION_NAME, text)
    write_atomically(proc_driver / "nvidia" / "version", text)
