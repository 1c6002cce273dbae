"""The NVIDIA kernel module of each installed kernel, as the driver's package leaves it.

The OS installation (first boot) builds the module for the profile's kernel the way the
distribution's driver package does; a kernel installed later (a test writes
``/boot/vmlinuz-<release>`` and runs update-grub) has none unless the test builds one. The
firmware loads the driver only when the kernel it boots has its module, as a real boot
does: a boot into a kernel the module was not built for has the GPUs on the bus and no
driver (CONTRACT.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MODULES_DIR = "lib/modules"
# Where each distribution's driver package puts the module (relative to the release's
# modules directory), and its name there.
MODULE_BY_DISTRIBUTION = {
    "debian": "updates/dkms/nvidia-current.ko",
    "ubuntu": "updates/dkms/nvidia.ko.zst",
    "rhel": "extra/nvidia.ko.xz",
}
_BOOT_IMAGE = re.compile(r"(?:^|\s)BOOT_IMAGE=\S*?vmlinuz-(\S+)")
_MODULE = re.compile(r"^nvidia(?:-current)?\.ko(?:\.(?:xz|zst))?$")


def booted_release(cmdline: str) -> str | None:
    """The release of the kernel a /proc/cmdline's BOOT_IMAGE names."""
    found = _BOOT_IMAGE.search(cmdline)
    return found.group(1) if found else None


def install_module(root: str | Path, release: str, profile: dict[str, Any]) -> str:
    """The module and modules.dep for ``release``; returns the module's path (relative)."""
    relative = MODULE_BY_DISTRIBUTION[profile["boot"]["distribution"]]
    modules = Path(str(root) or "/") / MODULES_DIR / release
    (modules / relative).parent.mkdir(parents=True, exist_ok=True)
    (modules / relative).write_bytes(b"\x7fELF lab nvidia module\n")
    dep = modules / "modules.dep"
    listed = dep.read_text(encoding="utf-8").splitlines() if dep.exists() else []
    if not any(line.partition(":")[0] == relative for line in listed):
        dep.write_text("".join(f"{line}\n" for line in [*listed, f"{relative}:"]))
    return f"{MODULES_DIR}/{release}/{relative}"


def has_module(root: str | Path, release: str | None) -> bool:
    """Whether modprobe would find the NVIDIA module of ``release``: a module file that the
    release's modules.dep lists."""
    if release is None:
        return False
    modules = Path(str(root) or "/") / MODULES_DIR / release
    dep = modules / "modules.dep"
    if not dep.is_file():
        return False
    for line in dep.read_text(encoding="utf-8", errors="replace").splitlines():
        path = line.partition(":")[0].strip()
        if _MODULE.match(Path(path).name) and (modules / path).is_file():
            return True
    return False
